"""The helpers embedding sources share."""

from __future__ import annotations

import numpy as np
import pytest

from memroute.embedding import fallback_vector, normalize_rows, validate_texts
from memroute.errors import EmbeddingError, ValidationError


def test_normalize_rows_units_and_fallback():
    raw = np.array([[3.0, 4.0], [0.0, 0.0], [np.nan, 1.0]], dtype=np.float64)
    out = normalize_rows(raw)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert np.allclose(out[0], [0.6, 0.8])
    assert np.allclose(out[1], fallback_vector(2)) and np.allclose(out[2], fallback_vector(2))
    assert raw[0, 0] == 3.0  # the input is untouched


def test_normalize_rows_never_mutates_float32_input():
    raw = np.array([[3.0, 4.0]], dtype=np.float32)
    normalize_rows(raw)
    assert raw[0, 0] == 3.0


def test_normalize_rows_rejects_wrong_rank():
    with pytest.raises(EmbeddingError):
        normalize_rows(np.zeros(3))


def test_fallback_vector_is_unit():
    assert np.linalg.norm(fallback_vector(256)) == pytest.approx(1.0, abs=1e-6)


def test_validate_texts():
    assert validate_texts(("a", "b")) == ["a", "b"]
    for bad in ("abc", b"abc", None, 5, {"a"}):
        with pytest.raises(ValidationError):
            validate_texts(bad)
    with pytest.raises(ValidationError) as info:
        validate_texts(["ok", None])
    assert "texts[1]" in str(info.value)
