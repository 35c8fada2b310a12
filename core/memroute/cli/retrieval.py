"""CLI commands of this area (filled in by the feature that owns it)."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
