"""The sqlite-vec large tier's hub penalty: each memory's neighbourhood term equals brute force, ranking is
``centred cosine - penalty * shrink * term``, the terms follow adds, re-embeds and deletes per tenant (and a
reload), tenants past ``hub_max_rows`` and the small tier rank without it, and the penalty is the bound
model's calibrated value unless set."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

import memroute
from memroute.errors import ConfigError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.hubness import CALIBRATED, DEFAULT_PENALTY, hub_shrink, neighbourhood
from memroute_builtins.vectors.sqlite_vec.matrix_cache import center_of, centered_scores
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="t", model="m", dimensions=32)


def _cone(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((count, 32)).astype(np.float32) * 0.4 + np.float32(1.0)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _items(rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in rows]


def _store(tmp_path: Path, signature: EmbeddingSignature = SIG, **options) -> SqliteVecStore:
    options.setdefault("promote_at", 8)
    options.setdefault("hub_min_rows", 0)  # the penalty on small fixtures (the default spares tenants up to 512)
    store = SqliteVecStore(SqliteVecSettings(**options), ComponentContext(instance_name="v", data_dir=tmp_path))
    store.bind(signature)
    return store


def _brute_terms(rows: np.ndarray, neighbours: int = 10) -> np.ndarray:
    centred = rows - center_of(rows)
    centred /= np.linalg.norm(centred, axis=1, keepdims=True)
    sims = centred @ centred.T
    np.fill_diagonal(sims, -np.inf)
    return np.sort(sims, axis=1)[:, -neighbours:].mean(axis=1)


def _expected(rows: np.ndarray, probe: np.ndarray, penalty: float) -> np.ndarray:
    return centered_scores(rows, probe) - penalty * hub_shrink(len(rows)) * _brute_terms(rows)


def test_neighbourhood_equals_brute_force_in_blocks() -> None:
    rows = _cone(300, seed=1)
    got = neighbourhood(rows, np.arange(300), center_of(rows), 10)
    assert got == pytest.approx(_brute_terms(rows), abs=1e-5)
    part = np.array([5, 17, 299])
    assert neighbourhood(rows, part, center_of(rows), 10) == pytest.approx(_brute_terms(rows)[part], abs=1e-5)


def test_large_tier_ranks_by_the_penalised_centred_score_and_keeps_the_plain_cosine(tmp_path: Path) -> None:
    rows = _cone(200, seed=2)
    items = _items(rows)
    store = _store(tmp_path, hub_penalty=0.5)
    store.upsert(items + _items(_cone(60, seed=3), "other"))  # another tenant's rows are not neighbours
    by_id = {it.memory_id: i for i, it in enumerate(items)}
    for probe in _cone(4, seed=4):
        expected = _expected(rows, probe, 0.5)
        hits = store.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)
        assert [h.memory_id for h in hits] == [items[i].memory_id for i in np.argsort(-expected, kind="stable")[:10]]
        for hit in hits:
            assert hit.score == pytest.approx(float(expected[by_id[hit.memory_id]]), abs=1e-4)
            assert hit.cosine == pytest.approx(float(rows[by_id[hit.memory_id]] @ probe), abs=1e-4)
    store.close()


def test_the_penalty_moves_a_hub_down(tmp_path: Path) -> None:
    # A memory at the middle of the cone is every query's near neighbour: the penalty is what demotes it.
    rows = _cone(150, seed=5)
    hub = rows.mean(axis=0)
    hub /= np.linalg.norm(hub)
    items = _items(np.vstack([rows, hub[None, :]]))
    query = SearchQuery(api_key_id="k", now=NOW)
    probes = _cone(30, seed=6)
    ranks = {}
    for penalty in (0.0, 1.0):
        store = _store(tmp_path / str(penalty), hub_penalty=penalty, center=False)
        store.upsert(items)
        ranks[penalty] = sum(items[-1].memory_id in {h.memory_id for h in store.query(p, query, 5)} for p in probes)
        store.close()
    assert ranks[1.0] < ranks[0.0], ranks


def test_terms_follow_adds_re_embeds_and_deletes(tmp_path: Path) -> None:
    rows = _cone(100, seed=7)
    items = _items(rows)
    store = _store(tmp_path, hub_penalty=0.5)
    store.upsert(items)
    query = SearchQuery(api_key_id="k", now=NOW)
    probe = _cone(1, seed=8)[0]
    store.query(probe, query, 5)  # computes every term
    more = _cone(20, seed=9)  # under HUB_REFRESH: the new rows get their own terms, the others keep theirs
    matrix = store._cache.peek("k")
    assert matrix is not None
    kept = matrix.hub[:100].copy()
    store.upsert(_items(more))
    # The write computes the new rows' terms (the next search does not pay for them); the others are untouched.
    assert not np.isnan(matrix.hub[:matrix.n]).any() and (matrix.hub[:100] == kept).all()
    store.query(probe, query, 5)
    basis = matrix._hub_basis
    assert basis is not None
    allrows = np.vstack([rows, more])
    expected_new = neighbourhood(allrows, np.arange(100, 120), basis[0], 10)
    assert matrix.hub[100:120] == pytest.approx(expected_new, abs=1e-5)
    # A re-embedded memory gets a fresh term; a deleted one leaves (the swap-remove moves the terms along).
    store.upsert([VectorItem(memory_id=items[3].memory_id, api_key_id="k", session_id=None, created_at=NOW,
                             expires_at=None, vector=more[0])])
    store.delete([items[10].memory_id])
    store.query(probe, query, 5)
    live = {bytes(matrix.memory_ids[i]): float(matrix.hub[i]) for i in range(matrix.n)}
    assert len(live) == 119 and uuid.UUID(items[10].memory_id).bytes not in live
    assert not np.isnan(list(live.values())).any()
    # Past HUB_REFRESH every term is recomputed: exactly brute force over the current rows again.
    grown = _cone(80, seed=10)
    store.upsert(_items(grown))
    hits = store.query(probe, query, 200)
    current = np.vstack([matrix.vectors[:matrix.n]])
    assert matrix.hub[:matrix.n] == pytest.approx(_brute_terms(current), abs=1e-4)
    assert len(hits) == matrix.n
    store.close()


def test_a_reload_recomputes_from_the_stored_rows(tmp_path: Path) -> None:
    rows = _cone(120, seed=11)
    items = _items(rows)
    store = _store(tmp_path, hub_penalty=0.5)
    store.upsert(items)
    probe = _cone(1, seed=12)[0]
    first = [h.memory_id for h in store.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)]
    store.close()
    again = _store(tmp_path, hub_penalty=0.5)  # a fresh process: the matrix loads and its terms are recomputed
    assert [h.memory_id for h in again.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)] == first
    expected = _expected(rows, probe, 0.5)
    assert first == [items[i].memory_id for i in np.argsort(-expected, kind="stable")[:10]]
    again.close()


@pytest.mark.parametrize("options", [{"hub_max_rows": 50}, {"promote_at": 512}, {"hub_min_rows": 100},
                                     {"hub_min_rows": 512}],
                         ids=["past max rows", "small tier", "at min rows", "default min rows"])
def test_large_tenants_and_the_small_tier_rank_without_it(tmp_path: Path, options: dict) -> None:
    rows = _cone(100, seed=13)
    items = _items(rows)
    store = _store(tmp_path, hub_penalty=1.0, **options)
    store.upsert(items)
    probe = _cone(1, seed=14)[0]
    hits = store.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)
    expected = centered_scores(rows, probe)
    assert [h.memory_id for h in hits] == [items[i].memory_id for i in np.argsort(-expected, kind="stable")[:10]]
    store.close()


def test_the_penalty_is_the_bound_models_calibrated_value_unless_set(tmp_path: Path) -> None:
    model = next(iter(CALIBRATED))
    store = _store(tmp_path / "a", EmbeddingSignature(source="static", model=model, dimensions=32))
    assert store._hub_penalty == CALIBRATED[model]
    assert store.describe()["hub_penalty"] == {"weight": CALIBRATED[model], "neighbours": 10, "min_rows": 0,
                                               "max_rows": 5000,
                                               "source": "calibrated"}
    store.close()
    store = _store(tmp_path / "b")
    assert store._hub_penalty == DEFAULT_PENALTY
    store.close()
    store = _store(tmp_path / "c", hub_penalty=0.0)
    assert store._hub_penalty == 0.0 and store.describe()["hub_penalty"]["source"] == "set"
    store.close()


@pytest.mark.parametrize("options", [{"hub_penalty": -0.1}, {"hub_penalty": 3}, {"hub_neighbours": 0},
                                     {"hub_max_rows": -1}, {"hub_min_rows": -1}])
def test_bad_hub_options_are_config_errors(tmp_path: Path, options: dict) -> None:
    with pytest.raises(ConfigError):
        memroute.open({}, data_dir=str(tmp_path), embedding={"source": "static"},
                      vectors={"store": "sqlite-vec", **options})
