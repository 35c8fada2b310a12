"""Every limit the API accepts works on every strategy (issue 16, item 8; fixed on main by the retrieval
ordering work, kept here as the regression test).

Hybrid search used to ask the keyword leg for three times the limit and fail the leg's own validation for
limits 334 to 1000 (``limit: must be an integer in [1, 1000], got 1002``: an internal candidate count leaking
into the caller's error); semantic search falling back to keyword did the same.
"""

from __future__ import annotations

import pytest

import memroute
from memroute.errors import ValidationError


@pytest.fixture(params=["keyword-only", "with-vectors"])
def mem(request, tmp_path):
    vectors = {"store": "none"} if request.param == "keyword-only" else {"store": "sqlite-vec"}
    embedding = {"source": "none"} if request.param == "keyword-only" else {"source": "static"}
    with memroute.open({"vectors": vectors, "embedding": embedding, "memory": {"vec_top_k": 1000}},
                       use_env=False, data_dir=str(tmp_path / "d")) as service:
        for i in range(5):
            service.add(api_key_id="a", content=f"hello world number {i}")
        service.flush(10)
        yield service


@pytest.mark.parametrize("strategy", ["hybrid", "semantic", "exact"])
def test_every_accepted_limit_searches(mem, strategy):
    for limit in (1, 333, 334, 500, 1000):
        result = mem.search("hello world", api_key_id="a", strategy=strategy, limit=limit)
        assert len(result) == min(5, limit), (strategy, limit)


@pytest.mark.parametrize("limit", [0, 1001, -1])
def test_a_limit_out_of_range_names_the_callers_value(mem, limit):
    with pytest.raises(ValidationError, match=rf"limit: .*got {limit}$"):
        mem.search("hello", api_key_id="a", limit=limit)
