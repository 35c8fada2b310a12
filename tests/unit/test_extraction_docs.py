"""docs/extraction.md stays true: every TOML block loads and builds the extractor chain, the published JSON
schemas and prompts are the ones the ``llm`` extractor sends, the status example has the keys ``status()``
gives, and the Python example (a custom extractor plugin) runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memroute.config.settings import load_settings
from memroute.pipeline.conversation import build_extractors
from memroute.plugins import get_plugin_manager
from memroute_builtins.extractors.llm import DECIDE_PROMPT, DECIDE_SCHEMA, EXTRACT_PROMPT, EXTRACT_SCHEMA
from memroute_builtins.extractors.llm.settings import LlmExtractorSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "extraction.md"
TEXT = DOC.read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", TEXT, flags=re.S)


def test_every_toml_block_configures_a_working_chain(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
    monkeypatch.setenv("VLLM_API_KEY", "token-docs")
    tomls = blocks("toml")
    assert len(tomls) == 4
    for number, block in enumerate(tomls):
        path = tmp_path / f"block{number}.toml"
        path.write_text(block, encoding="utf-8")
        settings = load_settings(path, data_dir=str(tmp_path / "data"))
        chain = build_extractors(settings, get_plugin_manager(), tmp_path)
        assert [name for name, _ in chain] == ["regex", "llm"]
        llm = chain[1][1]
        assert llm.client.model and llm.client.endpoint.endswith("/chat/completions")
        llm.close()


def test_the_published_schemas_are_the_ones_sent():
    assert [json.loads(b) for b in blocks("json")[:2]] == [EXTRACT_SCHEMA, DECIDE_SCHEMA]


def test_the_published_prompts_are_the_ones_sent():
    assert blocks("text") == [EXTRACT_PROMPT, DECIDE_PROMPT]


def test_the_options_table_lists_every_setting():
    documented = set(re.findall(r"^\| `(\w+)` \|", TEXT, flags=re.M))
    assert documented == {f.name for f in LlmExtractorSettings.__attrs_attrs__}


def test_the_status_example_has_the_keys_status_gives(tmp_path, monkeypatch):
    example = json.loads(blocks("json")[2])
    import memroute

    with memroute.open(data_dir=str(tmp_path / "d"), embedding={"source": "none"},
                       extraction={"extractors": ["regex", "llm"],
                                   "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                           "allow_private": True}}) as mem:
        status = mem.status().extraction
    assert set(status) == set(example)
    assert set(status["llm"]) == set(example["llm"])


def test_the_try_a_model_example_runs_against_a_fake_model(capsys):
    """The example's Ollama URL is pointed at the loopback fake; its scripted answer stands in for a model's."""
    from tests.servers.fake_chat_model import fake_chat_model

    example = blocks("python")[0]
    assert "http://127.0.0.1:11434/v1" in example
    with fake_chat_model() as model:
        model.on_extract({"facts": [{"content": "Lives in Lisbon", "type": "factual", "category": "location"}]})
        exec(compile(example.replace("http://127.0.0.1:11434/v1", model.base_url), str(DOC), "exec"), {})
        assert len(model.requests) == 1
    assert capsys.readouterr().out == "factual location Lives in Lisbon\n"


def test_the_custom_extractor_example_runs():
    example = blocks("python")[1]
    exec(compile(example, str(DOC), "exec"), {})
