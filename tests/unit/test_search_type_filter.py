"""``search(type=...)``: the type filter applies with the other filters, before the limit and the token budget
(the reference filtered after its budget walk, so a filtered search could come back short or empty)."""

from __future__ import annotations

import pytest

import memroute
from memroute.errors import ValidationError


@pytest.fixture
def mem(tmp_path):
    with memroute.open(data_dir=str(tmp_path / "data"), embedding={"source": "none"},
                       vectors={"store": "none"}) as service:
        for n in range(8):
            service.add(api_key_id="t", content=f"tea fact {n} " + "x" * 30)
        service.add(api_key_id="t", content="decided tea over coffee", type="episodic")
        yield service


@pytest.mark.parametrize("strategy", ["hybrid", "exact"])
def test_type_filter_comes_before_limit_and_budget(mem, strategy):
    result = mem.search("tea", api_key_id="t", type="episodic", limit=1, max_tokens=10, strategy=strategy)
    assert [h.memory.content for h in result.hits] == ["decided tea over coffee"]
    assert all(h.memory.type.value == "factual" for h in mem.search("tea", api_key_id="t", type="factual").hits)


def test_an_unknown_type_is_a_validation_error(mem):
    with pytest.raises(ValidationError, match="type"):
        mem.search("tea", api_key_id="t", type="gossip")
