"""Every code block of README.md and docs/ runs as written (see :mod:`tests.docs.blocks` for how each kind
is run and the markers that change it). A block that fails here is a doc that lies."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import attrs
import pytest
import tomllib

from memroute.config.settings import MemrouteSettings, load_settings
from tests.docs.blocks import MODES, PAGES, PLAIN_LANGUAGES, ROOT, RUN_LANGUAGES, Block, all_blocks
from tests.servers.fake_llm import fake_llm_server
from tests.servers.proxy_stack import proxy_stack

BLOCKS = all_blocks()
CONFIG_SECTIONS = {field.name for field in attrs.fields(MemrouteSettings)}
SHELLS = {"sh", "bash", "console"}


def _selected(kind: str) -> list[Block]:
    if kind == "python":
        return [b for b in BLOCKS if b.language == "python" and b.mode in (None, "loopback-model")]
    if kind == "shell":
        return [b for b in BLOCKS if b.language in SHELLS and b.mode is None]
    return [b for b in BLOCKS if b.language == kind and b.mode is None]


def _ids(blocks: list[Block]) -> list[str]:
    return [block.name for block in blocks]


def test_every_block_is_of_a_known_kind_with_a_known_marker():
    for block in BLOCKS:
        assert block.language in RUN_LANGUAGES | PLAIN_LANGUAGES, f"{block.name}: no runner for ```{block.language}"
        assert block.mode in (None, *MODES), f"{block.name}: unknown docs-test mode {block.mode!r}"
        if block.mode == "parse-only":
            assert block.argument, f"{block.name}: parse-only needs a reason"
        if block.mode == "loopback-model":
            assert block.language == "python", block.name


# --- Python: each page's blocks in order, one namespace -------------------------------------------------------

PYTHON_PAGES: dict[Path, list[Block]] = defaultdict(list)
for _block in _selected("python"):
    PYTHON_PAGES[_block.page].append(_block)


@pytest.mark.parametrize("doc_page", list(PYTHON_PAGES), ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_python_blocks_run(doc_page, monkeypatch):
    blocks = PYTHON_PAGES[doc_page]
    namespace: dict[str, object] = {"__name__": "__docs__"}
    if any(block.mode == "loopback-model" for block in blocks):
        with fake_llm_server() as server:  # stands in for the paid APIs: the one thing a test cannot reach
            server.reply = "OK."
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.base_url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
            _run_python(blocks, namespace)
    else:
        _run_python(blocks, namespace)


def _run_python(blocks: list[Block], namespace: dict[str, object]) -> None:
    for block in blocks:
        # Line numbers in a traceback point into the page.
        source = "\n" * block.line + block.text
        exec(compile(source, str(block.page), "exec"), namespace)


# --- shell: bash, this checkout's memroute, a fresh directory ---------------------------------------------------

def shell_script(block: Block) -> str:
    if block.language != "console":
        return block.text
    commands, continuing = [], False
    for line in block.text.splitlines():
        if line.startswith("$ ") or continuing:
            commands.append(line[2:] if line.startswith("$ ") else line)
            continuing = line.rstrip().endswith("\\")
    return "\n".join(commands) + "\n"


def _shell_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


@pytest.mark.parametrize("block", _selected("shell"), ids=_ids(_selected("shell")))
def test_shell_blocks_run(block, tmp_path):
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shell_script(block)], cwd=tmp_path,
                            env=_shell_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block.name} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"


# --- against a running server ------------------------------------------------------------------------------

SERVER_BLOCKS = [b for b in BLOCKS if b.mode == "with-server"]
SERVER_SHELL = [b for b in SERVER_BLOCKS if b.language in SHELLS]
SERVER_PYTHON = [b for b in SERVER_BLOCKS if b.language == "python"]
_SETUP_LINE = re.compile(r"^\s*(memroute serve\b|pip install\b|python3? -m pip install\b)")
_CURL_FAILS = "curl() { command curl --fail-with-body \"$@\"; }\n"  # a 4xx/5xx answer fails the block


@pytest.fixture
def server(tmp_path):
    """The real ``memroute serve`` (in a thread of this process), with memory on and both proxy upstreams
    pointed at a loopback model server that stands in for the paid APIs."""
    with proxy_stack(tmp_path / "stack", embedding="auto") as stack:
        stack.upstream.reply = "OK."
        yield stack


def _at_the_server(text: str, stack) -> str:
    port = stack.server.base_url.rsplit(":", 1)[1]
    text = re.sub(r"(localhost|127\.0\.0\.1):8765", f"127.0.0.1:{port}", text)
    return text.replace("mr_…", stack.keys["alice"])  # the placeholder key: a real one of tenant-a


def server_script(block: Block, stack) -> str:
    """The block as run against the test's server: its ``memroute serve`` and ``pip install`` lines are what
    the test already did (started the server, installed the package), the documented port is the test
    server's, ``mr_…`` a real key, and ``curl`` fails on an error status."""
    lines = [":" if _SETUP_LINE.match(line) else line for line in shell_script(block).splitlines()]
    return _CURL_FAILS + _at_the_server("\n".join(lines) + "\n", stack)


@pytest.mark.parametrize("block", SERVER_SHELL, ids=_ids(SERVER_SHELL))
def test_shell_blocks_run_against_a_running_server(block, server, tmp_path):
    _, shop = server.server.create_key("shop", tenant="shop")
    env = _shell_env(tmp_path)
    env.update(MEMROUTE_CONFIG=str(server.server.config_path), ADMIN=server.keys["admin"],
               MR_KEY=server.keys["admin"], KEY=server.keys["alice"], SHOP_KEY=shop)
    env.pop("MEMROUTE_DATA_DIR", None)  # the server's deployment, from its configuration
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", server_script(block, server)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block.name} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("block", SERVER_PYTHON, ids=_ids(SERVER_PYTHON))
def test_python_blocks_run_against_a_running_server(block, server):
    source = "\n" * block.line + _at_the_server(block.text, server)
    code = compile(source, str(block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(code, {"__name__": "__docs__"})
    if asyncio.iscoroutine(outcome):  # a block written for an async REPL or notebook (top-level await)
        asyncio.run(outcome)
    if "OpenAI(" in block.text or "Anthropic(" in block.text:  # a proxy client: its calls reached the model
        assert server.upstream.requests, f"{block.name} reached no model through memroute"


# --- TOML and JSON ------------------------------------------------------------------------------------------

def _is_memroute_config(data: dict[str, object]) -> bool:
    return bool(data) and set(data) <= CONFIG_SECTIONS


@pytest.mark.parametrize("block", _selected("toml"), ids=_ids(_selected("toml")))
def test_toml_blocks_load(block, tmp_path, monkeypatch):
    data = tomllib.loads(block.text)
    if not _is_memroute_config(data):
        return  # a pyproject.toml snippet: parsing it is the check
    for name in set(re.findall(r"\$\{(\w+)\}", block.text)):
        monkeypatch.setenv(name, f"placeholder-{name.lower()}")
    backends = data.get("backends")
    if isinstance(backends, dict) and "primary" not in backends:
        # A fragment that adds backend instances to a configuration: the first one stands as the primary.
        data["backends"] = {"primary": next(iter(backends)), **backends}
    load_settings(data, use_env=False)


@pytest.mark.parametrize("block", _selected("json"), ids=_ids(_selected("json")))
def test_json_blocks_parse(block):
    json.loads(block.text)


# --- markers ------------------------------------------------------------------------------------------------

PARSE_ONLY = [b for b in BLOCKS if b.mode == "parse-only"]


@pytest.mark.parametrize("block", PARSE_ONLY, ids=_ids(PARSE_ONLY))
def test_blocks_that_cannot_run_here_still_parse(block, tmp_path):
    if block.language == "python":
        compile(block.text, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    elif block.language in SHELLS:
        result = subprocess.run(["bash", "-n", "-c", shell_script(block)], capture_output=True, text=True)
        assert result.returncode == 0, f"{block.name}: {result.stderr}"
    elif block.language == "toml":
        tomllib.loads(block.text)
    elif block.language == "json":
        json.loads(block.text)


RUN_BY = [b for b in BLOCKS if b.mode == "run-by"]


@pytest.mark.parametrize("block", RUN_BY, ids=_ids(RUN_BY))
def test_blocks_run_by_a_dedicated_test_name_a_test_that_reads_their_page(block):
    test_file = ROOT / block.argument.split()[0]
    assert test_file.is_file(), f"{block.name}: {block.argument} does not exist"
    page = str(block.page.relative_to(ROOT))
    source = test_file.read_text(encoding="utf-8")
    assert page in source or f'"{block.page.name}"' in source, f"{test_file} does not read {page}"


# --- links ---------------------------------------------------------------------------------------------------

def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces to hyphens,
    repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("doc_page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_into_the_repository_resolve(doc_page):
    text = doc_page.read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if target.startswith(("http", "mailto:")):
            continue
        path = doc_page.parent / target if target else doc_page
        assert path.exists(), f"{doc_page.relative_to(ROOT)} links to a missing file: {target}"
        if anchor and path.suffix == ".md":
            where = doc_page.relative_to(ROOT)
            assert anchor in _anchors(path), f"{where} links to a missing heading: {target}#{anchor}"
