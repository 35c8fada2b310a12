"""The layer contracts (pyproject.toml ``[tool.importlinter]``, docs/architecture.md "Layers") hold.

Runs ``lint-imports`` on the installed source tree, so a module that imports upward (a manager module
importing the service), core naming a built-in plugin, a new import cycle, or a surface reaching past the
service fails the suite with import-linter's explanation of the offending import chain.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python >= 3.10): the backport memroute itself uses there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["importlinter"]
    return {contract["id"]: contract for contract in config["contracts"]}


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    command = str(lint) if lint.exists() else shutil.which("lint-imports")
    assert command, "lint-imports is not installed (it comes with the test extra: pip install -e '.[test]')"
    run = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"an import contract is broken:\n{run.stdout}\n{run.stderr}"
    assert "0 broken" in run.stdout


def test_every_surface_is_a_top_layer():
    layers = _contracts()["layers"]["layers"]
    surfaces = {name.strip() for name in layers[0].split("|")}
    assert {"memroute.cli", "(memroute.server)"} <= surfaces
    assert layers[-2:] == ["memroute.interfaces", "memroute.models"]


def test_a_surface_package_that_exists_is_held_to_the_service():
    sources = set(_contracts()["surfaces-use-the-service"]["source_modules"])
    for surface in ("cli", "server", "integrations"):
        if (ROOT / "core" / "memroute" / surface).is_dir():
            assert f"memroute.{surface}" in sources, (
                f"memroute.{surface} exists: add it to the surfaces-use-the-service contract's source_modules"
            )
