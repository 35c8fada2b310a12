"""``memroute new-plugin``: render a new, pip-installable plugin project from the templates memroute ships.

The templates live in the package (``memroute/templates/<kind>/``), so an installed memroute can render them
without the source tree. ``plugin-template/`` in the repository is the backend template rendered for the name
``jsonl`` (a test keeps the two identical).

Template files end in ``.tmpl`` (so no tool mistakes them for code); in paths, ``__module__`` becomes the
package name and a leading ``dot-`` becomes ``.``; in contents, ``{{name}}``, ``{{dist}}``, ``{{module}}``,
``{{Class}}`` and ``{{title}}`` are replaced.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import click

from memroute.errors import ValidationError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["COMMANDS", "KINDS", "PluginNames", "new_plugin", "plugin_names", "render_plugin", "template_files"]

KINDS: Final[dict[str, str]] = {"backend": "backend", "embedding": "embedding", "vector-store": "vector_store"}
"""``--kind`` → the template directory under ``memroute/templates/``."""

_NAME: Final = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
_TOKEN: Final = re.compile(r"\{\{(name|dist|module|Class|title)\}\}")


@attrs.frozen(kw_only=True)
class PluginNames:
    """Every spelling of a plugin's name the templates need."""

    name: str
    """The component name configuration uses (``type = "..."``) and the entry point's name."""
    dist: str
    """The distribution (``pip install ...``): ``memroute-<name>``."""
    module: str
    """The import package: ``memroute_<name>``."""
    class_name: str
    """The class-name prefix (``Jsonl`` in ``JsonlBackend``): the ``{{Class}}`` placeholder."""
    title: str

    def tokens(self) -> dict[str, str]:
        return {"name": self.name, "dist": self.dist, "module": self.module, "Class": self.class_name,
                "title": self.title}


def plugin_names(raw: str) -> PluginNames:
    """The spellings for ``raw`` (``my-store`` → ``memroute-my-store``, ``memroute_my_store``, ``MyStore``)."""
    name = raw.strip().lower()
    for prefix in ("memroute-", "memroute_"):
        name = name.removeprefix(prefix)
    if not _NAME.match(name) or len(name) > 40:
        raise ValidationError(
            f"plugin name {raw!r}: use lower-case letters and digits, words joined by '-' or '_', starting with a "
            "letter, at most 40 characters (e.g. 'my-store')",
            [("name", "invalid")],
        )
    words = re.split(r"[-_]", name)
    return PluginNames(name=name, dist="memroute-" + "-".join(words), module="memroute_" + "_".join(words),
                       class_name="".join(w.capitalize() for w in words), title="memroute-" + "-".join(words))


def _template_root(kind: str) -> Traversable:
    if kind not in KINDS:
        raise ValidationError(f"kind {kind!r}: expected one of {', '.join(KINDS)}", [("kind", "invalid")])
    return importlib.resources.files("memroute") / "templates" / KINDS[kind]


def template_files(kind: str) -> Iterator[tuple[str, Traversable]]:
    """``(relative template path, file)`` for every file of a kind's template, sorted."""

    def walk(node: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.name == "__pycache__":
                continue
            path = f"{prefix}{child.name}"
            if child.is_dir():
                yield from walk(child, path + "/")
            elif child.name.endswith(".tmpl"):
                yield path, child

    root = _template_root(kind)
    if not root.is_dir():
        raise ValidationError(f"memroute ships no {kind} template (broken installation?)", [("kind", "missing")])
    yield from walk(root, "")


def _target_path(template_path: str, names: PluginNames) -> str:
    parts = []
    for part in template_path.removesuffix(".tmpl").split("/"):
        part = part.replace("__module__", names.module)
        if part.startswith("dot-"):
            part = "." + part[len("dot-"):]
        parts.append(part)
    return "/".join(parts)


def render_plugin(kind: str, names: PluginNames) -> dict[str, str]:
    """The rendered project as ``{relative path: text}`` (nothing written)."""
    tokens = names.tokens()
    rendered: dict[str, str] = {}
    for template_path, source in template_files(kind):
        text = _TOKEN.sub(lambda m: tokens[m.group(1)], source.read_text(encoding="utf-8"))
        rendered[_target_path(template_path, names)] = text
    return rendered


def new_plugin(raw_name: str, kind: str = "backend", output: str | os.PathLike[str] = ".") -> Path:
    """Render a plugin project into ``output/<dist>/`` and return that directory. Refuses to overwrite."""
    names = plugin_names(raw_name)
    files = render_plugin(kind, names)
    parent = Path(output).expanduser()
    target = parent / names.dist
    if target.exists():
        raise ValidationError(f"{target} already exists; choose another --output or name", [("output", "exists")])
    parent.mkdir(parents=True, exist_ok=True)
    # Render into a sibling temporary directory and rename: no half-written project on failure.
    staging = Path(tempfile.mkdtemp(prefix=f".{names.dist}-", dir=parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


@click.command("new-plugin")
@click.argument("name")
@click.option("--kind", type=click.Choice(list(KINDS)), default="backend", show_default=True,
              help="What the plugin provides.")
@click.option("--output", "output", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Directory to create the project in (the project is <output>/memroute-<name>).")
def new_plugin_command(name: str, kind: str, output: str) -> None:
    """Create a new plugin project NAME (e.g. my-store) from memroute's template, tests included."""
    target = new_plugin(name, kind, output)
    names = plugin_names(name)
    click.echo(f"created {target}")
    click.echo(f"  package {names.module}, entry point {names.name!r}, {kind} name {names.name!r}")
    click.echo("next:")
    click.echo(f"  cd {target}")
    click.echo("  python -m pip install -e '.[test]'")
    click.echo("  MEMROUTE_STRICT_PLUGINS=1 python -m pytest -q")


COMMANDS: list[click.Command] = [new_plugin_command]
