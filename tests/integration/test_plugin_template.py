"""The plugin template, as a third party uses it: pip-install it into a fresh virtual environment, check that
``memroute plugins --json`` discovers it, run its own tests with ``MEMROUTE_STRICT_PLUGINS=1``; then render
new projects with ``memroute new-plugin`` (every kind), install them and run their tests too.

Offline and fast: the fresh venv is made without pip and sees this environment's packages (memroute,
pytest, setuptools, pip) through a ``site.addsitedir`` line in a ``.pth`` file, so nothing is downloaded
(``PIP_NO_INDEX``), builds use this environment's setuptools (``--no-build-isolation``), and the plugins are
installed into the fresh venv only — never into the environment running this test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from memroute.cli.scaffold import new_plugin
from memroute.plugins import make_plugin_manager

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class FreshVenv:
    def __init__(self, root: Path) -> None:
        venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(root)
        self.python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        purelib = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        here = sysconfig.get_paths()["purelib"]  # the environment running the tests
        Path(purelib, "_memroute_test_parent.pth").write_text(f"import site; site.addsitedir({here!r})\n")
        self.env = {
            **os.environ,
            "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "MEMROUTE_STRICT_PLUGINS": "1",
        }
        self.env.pop("PYTHONPATH", None)

    def run(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.python), *map(str, args)], cwd=cwd, env=self.env, capture_output=True,
                                text=True, timeout=240)
        assert result.returncode == 0, f"{' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def install(self, *projects: Path) -> None:
        self.run("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", *projects)

    def pytest(self, *projects: Path, cwd: Path) -> str:
        """Run the projects' own test suites (in one pytest process, to save start-up time) and check that every
        project had tests and that all passed."""
        args = [p / "tests" for p in projects]
        out = self.run("-m", "pytest", "-v", "-p", "no:cacheprovider", "--import-mode=importlib",
                       f"--rootdir={cwd}", *args, cwd=cwd).stdout
        summary = out.strip().splitlines()[-1]
        assert " passed" in summary and "failed" not in summary and "error" not in summary, out
        for project in projects:
            assert f"{project.name}/tests/" in out and " PASSED" in out, f"no tests of {project.name} ran:\n{out}"
        return summary


def _copy_template(target: Path) -> Path:
    shutil.copytree(REPO / "plugin-template", target,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".*_cache"))
    return target


def test_template_installs_is_discovered_and_passes_and_new_plugin_output_does_too(tmp_path: Path) -> None:
    env = FreshVenv(tmp_path / "venv")
    template = _copy_template(tmp_path / "jsonl")
    generated = tmp_path / "generated"
    # The installed memroute's CLI renders a backend project (from the templates packaged with memroute) ...
    env.run("-m", "memroute.cli", "new-plugin", "acme-notes", "--output", generated)
    # ... and the other kinds render through the same function (their CLI path is covered in test_scaffold).
    new_plugin("acme-embed", "embedding", generated)
    new_plugin("acme-vectors", "vector-store", generated)
    projects = [generated / f"memroute-acme-{n}" for n in ("notes", "embed", "vectors")]
    env.install(template, *projects)

    rows = json.loads(env.run("-m", "memroute.cli", "plugins", "--json").stdout)
    found = {(r["name"], r["kind"]): r for r in rows}
    for name, kind, dist in (("jsonl", "backend", "memroute-jsonl"), ("acme-notes", "backend", "memroute-acme-notes"),
                             ("acme-embed", "embedding", "memroute-acme-embed"),
                             ("acme-vectors", "vector-store", "memroute-acme-vectors")):
        row = found.get((name, kind))
        assert row is not None, f"{name} ({kind}) not discovered: {sorted(found)}"
        assert row["status"] == "ok" and row["distribution"] == dist, row

    # The plugins live in the fresh venv only: the environment running this test does not see them.
    assert not any(info.name == "jsonl" for info in make_plugin_manager().infos())

    env.pytest(template, *projects, cwd=tmp_path)
