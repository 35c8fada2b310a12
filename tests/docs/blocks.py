"""Every fenced code block of README.md and docs/, found once, with the marker that says how it is tested.

A block is tested by its language unless the HTML comment right above its fence says otherwise
(``<!-- docs-test: MODE -->``; other comments, such as an example's name, may sit between the two):

* ``python``: run, in order with the page's other Python blocks, in one namespace (a page reads like a
  notebook), in a fresh directory with its own ``MEMROUTE_DATA_DIR``;
* ``sh`` / ``bash`` / ``console``: run with bash (``set -e``; for ``console`` the ``$ `` lines are the
  commands and the rest is their output), ``memroute`` being this checkout's, in a fresh directory with its own
  data directory; every command must succeed;
* ``toml``: parsed, and when it is memroute configuration (``[memory]``, ``[backends]``, ...) loaded as a
  ``memroute.toml`` (``${VAR}`` references get a placeholder value; a fragment that adds backend instances
  without ``[backends] primary`` is loaded with its first instance as the primary);
* ``json``: parsed;
* ``text``, ``markdown``, ``nginx`` and unlabelled blocks are output, files and diagrams: nothing to run.

Modes a marker can give:

* ``docs-test: parse-only REASON``: the block cannot run here (it needs a remote service, installs
  packages, or serves forever); it must still parse (Python compiles, bash ``-n``, TOML / JSON load);
* ``docs-test: run-by tests/PATH.py``: a dedicated test runs it with more checks than "it runs" (that file
  must exist and name the page);
* ``docs-test: with-server``: a shell or Python block that talks to ``memroute serve``; it runs against the
  test's real server, whose memory proxy forwards to a loopback model server (a ``memroute serve`` line is the
  server already started, ``pip install`` the package already installed, port 8765 the test server's port,
  the placeholder ``mr_…`` a real key of tenant ``tenant-a``), with ``$ADMIN`` / ``$MR_KEY`` an admin key,
  ``$KEY`` a key of tenant ``tenant-a`` and ``$SHOP_KEY`` one of tenant ``shop``; ``curl`` fails on an HTTP
  error status;
* ``docs-test: loopback-model``: a Python block that calls a model through the OpenAI / Anthropic SDKs; it
  runs against a loopback server speaking their wire formats (``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``
  are set, as a user sets them to reach a gateway).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

RUN_LANGUAGES = {"python", "sh", "bash", "console", "toml", "json"}
PLAIN_LANGUAGES = {"", "text", "markdown", "nginx", "sql"}
MODES = ("parse-only", "run-by", "loopback-model", "with-server")

_FENCE = re.compile(r"^( *)```([\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*([\w-]+)\s*(.*?)\s*-->\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The fence's line number (1-based)."""
    language: str
    text: str
    mode: str | None
    argument: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _marker(lines: list[str], fence_index: int) -> tuple[str | None, str]:
    index = fence_index - 1
    while index >= 0 and _COMMENT.match(lines[index]):
        found = _MARKER.match(lines[index])
        if found:
            return found.group(1), found.group(2)
        index -= 1
    return None, ""


def page_blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language = len(opening.group(1)), opening.group(2).lower()
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not re.match(r"^ *```\s*$", lines[end]):
            line = lines[end]
            body.append(line[indent:] if not indent or line[:indent].isspace() else line.lstrip())
            end += 1
        mode, argument = _marker(lines, index)
        yield Block(page=page, line=index + 1, language=language, text="\n".join(body) + "\n", mode=mode,
                    argument=argument)
        index = end + 1


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page)]
