"""The README's Python quick start finds what it says it finds (tests/docs runs every block of the README;
this checks what the quick start prints)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_quick_start_finds_the_upserted_memory(capsys):
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if "mem.add(" in b]
    assert len(blocks) == 1, "the README has one Python quick start (the block that adds memories)"
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("Prefers Rust for CLIs")  # the upsert replaced "Go", and it ranks first
    assert not any("Prefers Go" in line for line in out)
    assert any(line.startswith("Provenance(") for line in out)
