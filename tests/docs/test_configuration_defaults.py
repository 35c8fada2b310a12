"""docs/configuration.md states the defaults the code has: every row of every settings table whose default
is a literal (`false`, `2000`, `"hybrid"`, `[]`, unset) is compared with the settings class's own default,
and the calibrated values the page quotes with the embedding sources' own."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from memroute.config import settings as s
from memroute_builtins.backends.postgres.backend import PostgresSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

SECTIONS: dict[str, tuple[type, ...]] = {
    "(top level)": (s.MemrouteSettings,),
    "memory": (s.MemorySettings,),
    "rerank": (s.RerankSettings,),
    "backends": (s.BackendsSettings,),
    "embedding": (s.EmbeddingSettings,),
    "vectors": (s.VectorSettings,),
    "extraction": (s.ExtractionSettings,),
    "manager": (s.ManagerSettings,),
    "server": (s.ServerSettings,),
    "limits": (s.LimitsSettings,),
    "proxy.openai": (s.ProxySettings, s.UpstreamSettings),
    "mcp": (s.McpSettings,),
    "backends.option": (PostgresSettings,),  # `type = "postgres"` options
}
UNSET = {"unset", "none"}
REQUIRED = "— (required)"


def _rows() -> list[tuple[str, str, str, str]]:
    """(section, key, default cell, meaning) of every settings table row."""
    rows = []
    section = None
    header: list[str] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            named = re.findall(r"`\[([\w.-]+)\]`", line)
            section = named[0] if named else ("(top level)" if "Top level" in line else None)
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells  # a table's first row
            continue
        if section not in SECTIONS or set(line) <= set("|-: ") or "default" not in header:
            continue
        key = re.fullmatch(r"`(\w+)`", cells[0])
        if key:
            where = f"{section}.{header[0]}" if header[0] != "key" else section
            rows.append((where, key.group(1), cells[header.index("default")], cells[-1]))
    return rows


ROWS = _rows()


def _field(section: str, key: str) -> attrs.Attribute:
    for cls in SECTIONS[section]:
        for field in attrs.fields(cls):
            if field.name == key:
                return field
    raise AssertionError(f"configuration.md documents [{section}] {key}, which is not a setting")


def _default(field: attrs.Attribute) -> Any:
    if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
        return field.default.factory()
    return field.default


def _literal(cell: str) -> tuple[bool, Any]:
    """The value a default cell states, when it states a literal one."""
    if cell.lower() in UNSET:
        return True, None
    match = re.fullmatch(r"`([^`]+)`(?: \([^)]*\))?", cell)
    if not match:
        return False, None
    text = match.group(1)
    if "<" in text or "=" in text:
        return False, None  # a placeholder (`<data_dir>/outbox.db`) or a TOML table's shape
    if text in ("true", "false"):
        return True, text == "true"
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return True, text  # a bare word: an address


def test_the_page_documents_settings_tables():
    assert len(ROWS) > 60 and {section for section, *_ in ROWS} == set(SECTIONS)


@pytest.mark.parametrize(("section", "key", "cell", "meaning"), ROWS, ids=[f"{r[0]}.{r[1]}" for r in ROWS])
def test_every_stated_default_is_the_codes(section, key, cell, meaning):
    field = _field(section, key)
    if cell == REQUIRED:
        assert field.default is attrs.NOTHING, f"[{section}] {key}: the page says required, the code has a default"
        return
    literal, value = _literal(cell)
    if not literal:
        return  # a computed default, said in words (`<data_dir>/outbox.db`, "the platform's data dir")
    default = _default(field)
    if isinstance(default, (tuple, frozenset)):
        default = list(default)
    if isinstance(default, dict) and value == {}:
        default = dict(default)
    assert value == default, f"[{section}] {key}: the page says {cell}, the code {default!r}"


def test_the_calibrated_keyword_weights_are_the_sources():
    from memroute.retrieval.fusion import DEFAULT_KEYWORD_WEIGHT
    from memroute_builtins.embedding.static import StaticEmbeddingSource
    from memroute_builtins.embedding.transformers import TransformersEmbeddingSource

    meaning = next(m for section, key, _, m in ROWS if (section, key) == ("memory", "keyword_weight"))
    stated = dict(re.findall(r"(static|transformers|others) ([\d.]+)", meaning))
    assert {name: float(value) for name, value in stated.items()} == {
        "static": StaticEmbeddingSource.fusion_keyword_weight,
        "transformers": TransformersEmbeddingSource().fusion_keyword_weight,  # its default model's
        "others": DEFAULT_KEYWORD_WEIGHT,
    }
