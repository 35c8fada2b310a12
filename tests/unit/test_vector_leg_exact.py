"""The vector leg's fast paths give exactly what the straightforward computation gives: the same ids, order,
scores and cosines (floats equal, not approximately) over many queries, both sqlite-vec tiers, every filter,
centring, the hub penalty and int8; and the query vector is bit for bit what it was."""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from memroute.embedding import fallback_vector, normalize_rows
from memroute.embedding.cache import CachedEmbeddingSource
from memroute.errors import ValidationError
from memroute.interfaces import ComponentContext, EmbeddingSignature, EmbeddingSource, VectorHit, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors import common
from memroute_builtins.vectors.common import centered_probe, check_vector, unix_micros
from memroute_builtins.vectors.sqlite_vec import store as store_module
from memroute_builtins.vectors.sqlite_vec.matrix_cache import TenantMatrix, _scores, id_texts
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SESSIONS = (None, "s1", "s2", "s3")


def _unit(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    # A shared direction plus noise, like an embedding model's cone (centring and hub terms then matter).
    rows = (rng.standard_normal((count, dim)) + 2.0).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _items(rng: np.random.Generator, rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    items = []
    for i, vector in enumerate(rows):
        expires = None if i % 5 else NOW + timedelta(days=int(rng.integers(-3, 4)), seconds=1)
        items.append(VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=SESSIONS[i % 4],
                                created_at=NOW - timedelta(days=int(rng.integers(0, 30))), expires_at=expires,
                                vector=vector))
    return items


def _store(tmp_path: Path, dim: int, **options) -> SqliteVecStore:
    store = SqliteVecStore(SqliteVecSettings(**options), ComponentContext(instance_name="v", data_dir=tmp_path))
    store.bind(EmbeddingSignature(source="t", model="m", dimensions=dim))
    return store


def _reference_check_vector(vector: object, dimensions: int) -> np.ndarray:
    """check_vector as it was: the components checked, then ``np.linalg.norm``."""
    array = np.asarray(vector, dtype=np.float32)
    assert array.ndim == 1 and array.shape[0] == dimensions
    if not np.all(np.isfinite(array)):
        raise ValidationError("NaN")
    norm = float(np.linalg.norm(array))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValidationError("zero")
    return array / np.float32(norm)


def _clamp(value: float) -> float:
    return max(-1.0, min(1.0, value))


def _reference_large(store: SqliteVecStore, vector: np.ndarray, query: SearchQuery) -> list[VectorHit]:
    """The large tier's whole ranking computed the plain way from the tenant's cached matrix: every live row
    tested one by one, scored, sorted, the ids formatted from their bytes, the hits built by attrs."""
    matrix = store._cache.peek(query.api_key_id)
    assert matrix is not None and matrix.generation is not None
    settings = store.settings
    unit = _reference_check_vector(vector, matrix.dimensions)
    now_us = unix_micros(query.now)
    cutoff = None if query.created_after is None else unix_micros(query.created_after)
    code = None if query.session_id is None else matrix._session_codes.get(query.session_id, -1)
    admitted = [i for i in range(matrix.n) if matrix.expires[i] > now_us
                and (code is None or matrix.sessions[i] == code) and (cutoff is None or matrix.created[i] >= cutoff)]
    if not admitted:
        return []
    centred = centered_probe(unit, matrix._centering()) if settings.center else None
    probe = unit if centred is None else centred
    penalty = store._hub_penalty
    hub = matrix.hub_terms(settings.hub_neighbours, settings.hub_max_rows, settings.center,
                           settings.hub_min_rows) if penalty > 0 else None
    scores = {}
    for i in admitted:
        score = _scores(matrix.vectors[i:i + 1], probe)[0]
        if hub is not None:
            score = score - np.float32(penalty) * hub[i]
        scores[i] = score
    ranked = sorted(admitted, key=lambda i: -scores[i])
    hits = []
    for i in ranked:
        cosine = _scores(matrix.vectors[i:i + 1], unit)[0] if centred is not None or hub is not None else scores[i]
        hits.append(VectorHit(memory_id=str(uuid.UUID(bytes=matrix.memory_ids[i].tobytes())),
                              score=_clamp(float(scores[i])), cosine=_clamp(float(cosine))))
    return hits


def _assert_same(got: list[VectorHit], ranking: list[VectorHit], k: int) -> None:
    """``got`` is the top ``k`` of ``ranking``. Equal scores may come in either order (the store's top-k,
    like the one before it, does not order ties), so within a tie only the members are compared."""
    assert [h.score for h in got] == [h.score for h in ranking[:k]]
    if len({h.score for h in ranking[:k + 1]}) == len(ranking[:k + 1]):
        assert got == ranking[:k]  # no tie: exactly equal
        return
    assert len({h.memory_id for h in got}) == len(got)
    for hit in got:
        assert hit in [h for h in ranking if h.score == hit.score]


def _queries(rng: np.random.Generator, count: int, key: str = "k"):
    """``(query, k)``: every third in a session, every fourth within a retention window, ``now`` moving across
    the expiry times."""
    for q in range(count):
        session = SESSIONS[q % 4] if q % 3 == 0 else None
        retention = int(rng.integers(1, 30)) if q % 4 == 1 else None
        now = NOW + timedelta(days=int(rng.integers(-4, 5)))
        yield (SearchQuery(api_key_id=key, session_id=session, retention_days=retention, now=now),
               int(rng.choice([1, 7, 63, 100])))


@pytest.mark.parametrize("options", [
    {"center": True},  # the default: centred, hub penalty calibrated (off below hub_min_rows)
    {"center": False, "hub_penalty": 0.0},
    {"center": True, "hub_penalty": 0.5, "hub_min_rows": 0},
    {"center": False, "hub_penalty": 0.3, "hub_min_rows": 0},
    {"center": True, "quantization": "int8"},
    {"center": True, "quantization": "int8", "hub_penalty": 0.5, "hub_min_rows": 0},
])
def test_large_tier_queries_equal_the_plain_computation(tmp_path: Path, options: dict) -> None:
    rng = np.random.default_rng(11)
    dim = 48
    store = _store(tmp_path, dim, promote_at=16, **options)
    rows = _unit(rng, 300, dim)
    items = _items(rng, rows)
    store.upsert(items[:200])  # promoted to the large tier
    store.upsert(items[200:])
    checked = 0
    for round_ in range(3):
        for query, k in _queries(rng, 40):
            assert (query.created_after is not None) == (query.retention_days is not None)
            vector = rng.standard_normal(dim).astype(np.float32) + 1.0
            got = store.query(vector, query, k)
            _assert_same(got, _reference_large(store, vector, query), k)
            assert all(type(h.memory_id) is str and type(h.score) is float and type(h.cosine) is float for h in got)
            checked += len(got)
        # Change the tenant between rounds: swap-removes and appends move rows (and their id texts) around.
        store.delete([item.memory_id for item in items[round_ * 30:round_ * 30 + 25]])
        fresh = _items(rng, _unit(rng, 20, dim))
        store.upsert(fresh)
        items.extend(fresh)
        matrix = store._cache.peek("k")
        assert matrix is not None
        assert matrix.texts[:matrix.n].tolist() == [str(uuid.UUID(bytes=matrix.memory_ids[i].tobytes()))
                                                    for i in range(matrix.n)]
    assert checked > 2000
    store.close()


@pytest.mark.parametrize("options", [{"center": True}, {"center": False}, {"center": True, "quantization": "int8"}])
def test_small_tier_hits_equal_the_attrs_built_ones(tmp_path: Path, options: dict,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(12)
    dim = 32
    store = _store(tmp_path, dim, promote_at=10_000, **options)
    store.upsert(_items(rng, _unit(rng, 60, dim)))
    cases = [(rng.standard_normal(dim).astype(np.float32), query, k) for query, k in _queries(rng, 30)]
    fast = [store.query(*case) for case in cases]
    monkeypatch.setattr(store_module, "_HIT_SETTERS", None)
    assert [store.query(*case) for case in cases] == fast
    assert sum(map(len, fast)) > 300
    store.close()


def test_fast_hits_are_ordinary_vector_hits() -> None:
    assert store_module._HIT_SETTERS is not None, "VectorHit changed shape: the fast path is off (see _hit_setters)"
    ids = [str(uuid.uuid4()) for _ in range(5)]
    scores, cosines = [0.5, -1.0, 1.0, 0.25, 0.0], [0.4, None, -0.5, 1.0, -0.0]
    fast = store_module._hits(ids, scores, cosines)
    plain = [VectorHit(memory_id=i, score=s, cosine=c) for i, s, c in zip(ids, scores, cosines, strict=True)]
    assert fast == plain and [hash(h) for h in fast] == [hash(h) for h in plain]
    assert [repr(h) for h in fast] == [repr(h) for h in plain]
    with pytest.raises(AttributeError):
        fast[0].score = 2.0  # still frozen


def test_clamped_is_the_python_clamp() -> None:
    values = np.array([0.3, 1.0, 1.0000001, -1.0, -1.0000001, 7.0, -7.0, -0.0, 0.0, np.nan, np.inf, -np.inf,
                       np.nextafter(np.float32(1), np.float32(0))], dtype=np.float32)
    got = store_module._clamped(values)
    expected = [_clamp(float(v)) for v in values]
    assert [math.copysign(1, g) for g in got] == [math.copysign(1, e) for e in expected]
    assert got == expected and all(type(g) is float for g in got)


def test_id_texts_are_canonical_uuids() -> None:
    ids = [uuid.uuid4().bytes for _ in range(200)] + [bytes(16), b"\xff" * 16]
    array = np.frombuffer(b"".join(ids), dtype=np.uint8).reshape(len(ids), 16)
    texts = id_texts(array)
    assert texts.tolist() == [str(uuid.UUID(bytes=b)) for b in ids]
    assert all(type(t) is str for t in texts)
    assert id_texts(np.zeros((0, 16), dtype=np.uint8)).tolist() == []


def test_a_matrix_without_expiring_rows_skips_no_row() -> None:
    # The expiry mask is skipped while no live row can have expired; a later, earlier-expiring row brings it back.
    from memroute_builtins.vectors.sqlite_vec.matrix_cache import TenantRows
    rng = np.random.default_rng(3)
    matrix = TenantMatrix(8)

    def rows(count: int, expires: int) -> TenantRows:
        return TenantRows(rowids=np.arange(count, dtype=np.int64) + matrix.n, vectors=_unit(rng, count, 8),
                          memory_ids=np.frombuffer(b"".join(uuid.uuid4().bytes for _ in range(count)),
                                                   dtype=np.uint8).reshape(count, 16).copy(),
                          sessions=[""] * count, created=np.zeros(count, dtype=np.int64),
                          expires=np.full(count, expires, dtype=np.int64))

    matrix.replace(rows(10, 2**62), generation=1)
    probe = _unit(rng, 1, 8)[0]
    assert len(matrix.search(probe, 100, now_us=10**15, session_id=None, created_after_us=None)[0]) == 10
    matrix.append(rows(5, 1000))
    texts, _, _ = matrix.search(probe, 100, now_us=2000, session_id=None, created_after_us=None)
    assert len(texts) == 10 and not set(texts) & set(matrix.texts[10:15].tolist())
    assert len(matrix.search(probe, 100, now_us=999, session_id=None, created_after_us=None)[0]) == 15


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_check_vector_is_bit_identical_and_refuses_the_same_inputs() -> None:
    rng = np.random.default_rng(5)
    for dim in (1, 3, 64, 256, 257):
        for _ in range(50):
            vector = rng.standard_normal(dim) * rng.choice([1e-3, 1.0, 1e3])
            for form in (vector, vector.astype(np.float32), list(vector), vector.astype(np.float32)[::-1],
                         np.repeat(vector.astype(np.float32), 2)[::2]):
                assert check_vector(form, dim).tobytes() == _reference_check_vector(form, dim).tobytes()
    for bad, word in (([1.0, np.nan], "NaN"), ([np.inf, 1.0], "NaN"), ([0.0, 0.0], "zero vector"),
                      ([3e38, 3e38], "zero vector")):
        with pytest.raises(ValidationError, match=word):
            common.check_vector(bad, 2)


class _Counting(EmbeddingSource):
    source = "counting"
    model = "m"

    def __init__(self, dimensions: int | None = None) -> None:
        self.dimensions = dimensions
        self.calls: list[list[str]] = []

    def embed_batch(self, texts):
        self.calls.append(list(texts))
        self.dimensions = 16
        out = np.array([[hash((t, j)) % 1000 / 7.0 for j in range(16)] for t in texts], dtype=np.float64)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.mark.parametrize("dimensions", [None, 16])
def test_cached_embed_of_one_text_is_embed_batch_of_it(dimensions: int | None) -> None:
    texts = [f"text {i % 13}" for i in range(60)] + ["", "ünïcode ✓", "text 1"]
    one = CachedEmbeddingSource(_Counting(dimensions))
    batch = CachedEmbeddingSource(_Counting(dimensions))
    for text in texts:
        got = one.embed(text)
        expected = batch.embed_batch([text])[0]
        assert got.dtype == expected.dtype == np.float32 and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes() and got.flags.writeable
        got[:] = 0  # a fresh copy: the cached vector is untouched
    assert one.stats() == batch.stats() and one.inner.calls == batch.inner.calls
    assert sorted(one.cache._data) == sorted(batch.cache._data)
    with pytest.raises(ValidationError):
        one.embed(3)  # type: ignore[arg-type]


def _reference_normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """normalize_rows as it was: every row through np.linalg.norm(axis=1)."""
    array = np.array(matrix, dtype=np.float32, order="C", copy=True)
    norms = np.linalg.norm(array.astype(np.float64), axis=1)
    good = np.isfinite(norms) & (norms > 1e-12)
    array[good] /= norms[good, None].astype(np.float32)
    array[~good] = fallback_vector(array.shape[1])
    return array


def test_normalizing_one_row_is_bit_identical() -> None:
    rng = np.random.default_rng(8)
    for dim in (1, 7, 64, 256, 384, 768, 1024, 1536, 3072, 9000):
        for _ in range(40):
            row = (rng.standard_normal((1, dim)) * rng.choice([1e-5, 0.1, 1.0, 1e4])).astype(
                rng.choice([np.float32, np.float64, np.float16]))
            assert normalize_rows(row).tobytes() == _reference_normalize_rows(row).tobytes()
    for row in ([[0.0, 0.0]], [[np.nan, 1.0]], [[np.inf, 1.0]], [[1e-13, 0.0]]):
        assert normalize_rows(np.array(row)).tobytes() == _reference_normalize_rows(np.array(row)).tobytes()


def test_embedding_one_text_is_bit_identical_to_the_batch_loop() -> None:
    from memroute_builtins.embedding.static import StaticEmbeddingSource
    source = StaticEmbeddingSource()
    model = source._loader.get()
    words = ["the", "user", "prefers", "TypeScript", "for", "frontend", "work", "marathon", "training", "plan",
             "Lisbon", "trip", "ünïcödé", "🎉", "42"]
    rng = np.random.default_rng(4)
    texts = ["", "   ", "a", "x " * 700] + [" ".join(rng.choice(words, size=int(rng.integers(1, 40))))
                                          for _ in range(300)]
    for text in texts:
        encoding = model.tokenizer.encode_batch_fast([text], add_special_tokens=False)[0]
        ids = [token for token in encoding.ids if token != model.unk_token_id]
        expected = np.zeros((1, model.dim), dtype=np.float32)
        if ids:
            expected[0] = model.embedding[ids].mean(axis=0)  # the loop every batch of up to 16 texts runs
        got = source._encode_small(model, [text])
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert got.tobytes() == expected.tobytes()
        assert source.embed_batch([text]).tobytes() == _reference_normalize_rows(expected).tobytes()
        assert source.embed_batch([text, "other"])[0].tobytes() == source.embed_batch([text])[0].tobytes()


def test_centered_probe_is_bit_identical() -> None:
    rng = np.random.default_rng(9)
    for dim in (2, 48, 256, 1536):
        for dtype in (np.float32, np.float64):
            for _ in range(30):
                probe = rng.standard_normal(dim).astype(dtype)
                middle = (rng.standard_normal(dim) * 0.3).astype(np.float32)
                got = centered_probe(probe, middle)
                query = probe - middle
                expected = (query / float(np.linalg.norm(query))).astype(np.float32)
                assert got is not None and got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    same = np.ones(4, dtype=np.float32)
    assert centered_probe(same, same) is None
