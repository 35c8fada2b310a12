"""Reading the user's last message and the assistant's reply from the three request/response shapes."""

from __future__ import annotations

import pytest

from memroute.pipeline.requests import (
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    assistant_text,
    detect_api,
    extraction_text,
    last_user_text,
    query_text,
    uses_prompt_caching,
)


def test_openai_chat_string_content():
    request = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
                            {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"}]}
    assert last_user_text(request) == "second"


def test_openai_chat_text_parts_are_joined_and_images_skipped():
    request = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "look at"}, {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "this picture"}]}]}
    assert last_user_text(request) == "look at\nthis picture"
    assert query_text(request) == "look at this picture"


def test_anthropic_blocks_and_tool_results_are_skipped():
    request = {"system": "s", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "I prefer tabs"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "out"}]},
    ]}
    assert last_user_text(request) == "I prefer tabs"


def test_responses_string_input():
    assert last_user_text({"input": "hello there", "instructions": "x"}) == "hello there"


def test_responses_items_skip_function_outputs_and_assistant():
    request = {"input": [
        {"role": "user", "content": "old"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "newest"},
                                                         {"type": "input_image", "image_url": "x"}]},
        {"type": "function_call_output", "call_id": "c", "output": "42"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hm"}]},
    ]}
    assert last_user_text(request) == "newest"


@pytest.mark.parametrize(
    "request_body",
    [None, "text", {}, {"messages": []}, {"messages": [{"role": "assistant", "content": "x"}]},
     {"messages": [{"role": "user", "content": "   "}]}, {"messages": [{"role": "user", "content": 42}]},
     {"input": []}, {"input": "  "}, {"messages": "nope"}, {"messages": [None, 3]}],
)
def test_no_user_text(request_body):
    assert last_user_text(request_body) is None
    assert query_text(request_body) == ""


def test_query_is_truncated_keeping_the_tail():
    text = "start " + "word " * 2000 + "the actual question?"
    query = query_text({"messages": [{"role": "user", "content": text}]})
    assert len(query) <= MAX_QUERY_CHARS
    assert query.endswith("the actual question?")
    assert query_text({"input": "a   b\n\nc"}) == "a b c"


def test_extraction_text_keeps_the_last_64_kib():
    text = "H" * 10 + "x" * MAX_TEXT_CHARS + "TAIL"
    out = extraction_text({"input": text})
    assert len(out) == MAX_TEXT_CHARS and out.endswith("TAIL") and not out.startswith("H")


def test_assistant_text_openai():
    response = {"choices": [{"message": {"role": "assistant", "content": "I always recommend tests"}}]}
    assert assistant_text(response) == "I always recommend tests"


def test_assistant_text_anthropic():
    response = {"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "one"},
                            {"type": "tool_use", "id": "t", "name": "f", "input": {}}, {"type": "text", "text": "two"}]}
    assert assistant_text(response) == "one\ntwo"


def test_assistant_text_responses():
    assert assistant_text({"output_text": "short form"}) == "short form"
    response = {"output": [{"type": "reasoning", "summary": []},
                           {"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": "long form"}]}]}
    assert assistant_text(response) == "long form"


def test_assistant_text_from_sdk_like_objects():
    class Obj:
        def model_dump(self):
            return {"choices": [{"message": {"content": "from sdk"}}]}

    class Broken:
        def model_dump(self):
            raise RuntimeError("nope")

    assert assistant_text(Obj()) == "from sdk"
    assert assistant_text(Broken()) == ""


@pytest.mark.parametrize("response", [None, "text", {}, {"choices": []}, {"choices": [{"message": None}]},
                                      {"content": "plain"}, {"output": "x"}])
def test_assistant_text_of_unknown_shapes_is_empty(response):
    assert assistant_text(response) == ""


def test_detect_api():
    assert detect_api({"messages": []}) == "openai-chat"
    assert detect_api({"messages": [], "system": "s"}) == "anthropic"
    assert detect_api({"messages": []}, provider="Anthropic") == "anthropic"
    tool_result = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}
    assert detect_api(tool_result) == "anthropic"
    assert detect_api({"input": "x"}) == "responses"
    assert detect_api({"input": [], "instructions": "i"}) == "responses"
    assert detect_api({"model": "x"}) is None
    assert detect_api("nope") is None


def test_prompt_caching_detection():
    assert uses_prompt_caching({"messages": [{"content": [{"type": "text", "cache_control": {"type": "x"}}]}]})
    assert uses_prompt_caching({"system": [{"cache_control": None}]})
    assert not uses_prompt_caching({"messages": [{"role": "user", "content": "cache_control"}]})


def test_prompt_caching_detection_survives_deep_nesting():
    deep: dict = {"x": None}
    node = deep
    for _ in range(5000):
        node["x"] = {"x": None}
        node = node["x"]
    assert not uses_prompt_caching({"messages": [deep]})
    node["cache_control"] = {}
    assert uses_prompt_caching({"messages": [deep]})
