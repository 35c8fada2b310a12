"""``EmbeddingSourceContract``: the conformance suite every embedding source passes.

Subclass it in your plugin's tests and override one fixture::

    from memroute.testing import EmbeddingSourceContract

    @pytest.fixture(scope="module")
    def my_source():
        source = MySource()
        yield source
        source.close()

    class TestMySource(EmbeddingSourceContract):
        @pytest.fixture
        def source(self, my_source):
            return my_source

A module-scoped fixture underneath keeps a model from loading once per test. Set
``semantic = False`` on a subclass whose vectors carry no meaning (a hashing source) to skip the
similarity test's paraphrase case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memroute.errors import MemrouteError
from memroute.interfaces import EmbeddingSignature, EmbeddingSource

__all__ = ["EmbeddingSourceContract"]

_UNIT_TOLERANCE = 1e-3


def _assert_unit_rows(vectors: np.ndarray, what: str) -> None:
    assert np.all(np.isfinite(vectors)), f"{what}: non-finite values in the vectors"
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    assert np.allclose(norms, 1.0, atol=_UNIT_TOLERANCE), f"{what}: rows are not L2-normalised (norms {norms})"


class EmbeddingSourceContract:
    """Behaviour memroute relies on from every :class:`~memroute.interfaces.EmbeddingSource`."""

    semantic: bool = True
    """The source's vectors carry meaning (paraphrases are closer than unrelated texts)."""

    @pytest.fixture
    def source(self) -> Any:
        raise NotImplementedError("override the `source` fixture to yield the embedding source under test")

    # --- shape and type ------------------------------------------------------------------------------

    def test_is_an_embedding_source(self, source: EmbeddingSource) -> None:
        assert isinstance(source, EmbeddingSource)
        assert isinstance(source.source, str) and source.source
        assert isinstance(source.model, str) and source.model

    def test_batch_shape_and_dtype(self, source: EmbeddingSource) -> None:
        vectors = source.embed_batch(["first text", "second text", "third text"])
        assert isinstance(vectors, np.ndarray), f"embed_batch returned {type(vectors).__name__}, not an ndarray"
        assert vectors.dtype == np.float32, f"embed_batch returned {vectors.dtype}, not float32"
        assert vectors.ndim == 2 and vectors.shape[0] == 3, f"shape {vectors.shape}, expected (3, dim)"
        assert source.dimensions == vectors.shape[1], (
            f"dimensions says {source.dimensions}, the vectors have {vectors.shape[1]}")

    def test_embed_returns_one_vector(self, source: EmbeddingSource) -> None:
        vector = source.embed("one text")
        assert vector.ndim == 1 and vector.dtype == np.float32 and vector.shape[0] == source.dimensions

    def test_empty_batch(self, source: EmbeddingSource) -> None:
        vectors = source.embed_batch([])
        assert isinstance(vectors, np.ndarray) and vectors.shape[0] == 0 and vectors.dtype == np.float32

    # --- normalisation and determinism ---------------------------------------------------------------

    def test_rows_are_l2_normalised(self, source: EmbeddingSource) -> None:
        texts = ["short", "a somewhat longer sentence about databases and indexes", "x" * 50, "42", "?!"]
        _assert_unit_rows(source.embed_batch(texts), "embed_batch")

    def test_deterministic(self, source: EmbeddingSource) -> None:
        first = source.embed_batch(["I prefer dark roast coffee", "deploys happen on Fridays"])
        second = source.embed_batch(["I prefer dark roast coffee", "deploys happen on Fridays"])
        assert np.allclose(first, second, atol=1e-5), "the same text gave different vectors"

    def test_batch_equals_single(self, source: EmbeddingSource) -> None:
        texts = ["tiny", "a medium length sentence about the weather", "another " * 30 + "long one", "ünïcödé"]
        batch = source.embed_batch(texts)
        for index, text in enumerate(texts):
            single = source.embed_batch([text])[0]
            cosine = float(np.dot(batch[index], single))
            assert cosine > 0.999, f"row {index} of a batch differs from embedding {text!r} alone (cos {cosine})"

    def test_duplicates_in_a_batch(self, source: EmbeddingSource) -> None:
        vectors = source.embed_batch(["same text", "other text", "same text"])
        assert np.allclose(vectors[0], vectors[2], atol=1e-5)

    # --- awkward text --------------------------------------------------------------------------------

    @pytest.mark.parametrize("text", ["", " ", "\n\t"])
    def test_empty_or_blank_text(self, source: EmbeddingSource, text: str) -> None:
        vectors = source.embed_batch([text, "something real"])
        assert vectors.shape[0] == 2
        _assert_unit_rows(vectors, f"embedding {text!r}")

    def test_unicode(self, source: EmbeddingSource) -> None:
        texts = ["café crème brûlée", "日本語のテキスト", "مرحبا بالعالم", "emoji 🎉🚀 party", "e\u0301 combining",
                 "zero\u200bwidth", "\x00 nul byte"]
        _assert_unit_rows(source.embed_batch(texts), "unicode texts")

    def test_long_text(self, source: EmbeddingSource) -> None:
        long_text = ("memory systems remember what users said across conversations. " * 400)[:20_000]
        _assert_unit_rows(source.embed_batch([long_text, "short"]), "a 20,000-character text")

    def test_similar_texts_are_closer_than_unrelated(self, source: EmbeddingSource) -> None:
        anchor, near, far = source.embed_batch([
            "The user prefers TypeScript for frontend development",
            "The user likes using TypeScript for frontend work",
            "Quarterly revenue grew four percent in the northern region",
        ])
        assert float(anchor @ near) > float(anchor @ far), "a near-duplicate is not closer than an unrelated text"
        if self.semantic:
            cat, kitten, tax = source.embed_batch(["a cat sleeping on the sofa", "a kitten napping on the couch",
                                                   "filing income tax returns"])
            assert float(cat @ kitten) > float(cat @ tax), "a paraphrase is not closer than an unrelated text"

    # --- identity ------------------------------------------------------------------------------------

    def test_signature_is_stable_and_matches_vectors(self, source: EmbeddingSource) -> None:
        before = source.signature()
        vectors = source.embed_batch(["probe"])
        after = source.signature()
        assert isinstance(before, EmbeddingSignature)
        assert before == after and str(before) == str(after), "the signature changed after embedding"
        assert after.dimensions == vectors.shape[1]
        assert after.source == source.source and after.model == source.model
        assert len(str(after).split(":")) >= 5

    # --- bad input -----------------------------------------------------------------------------------

    @pytest.mark.parametrize("bad", [[1], [None], ["ok", b"bytes"], "a bare string", None, 42])
    def test_bad_input_is_a_memroute_error(self, source: EmbeddingSource, bad: Any) -> None:
        with pytest.raises(MemrouteError):
            source.embed_batch(bad)
