"""The hub penalty: a memory that is close to many other memories is close to many queries too.

In a high-dimensional embedding space a few points are near neighbours of a large share of all queries
("hubs"; Radovanović et al., 2010). Among real chat turns they are the short generic ones ("what do you do
for a living?", "that's so cool"), and they crowd a paraphrased answer out of the top 5. CSLS (Conneau et al.,
2018) ranks by ``2 cos(q, m) - r(q) - r(m)``, with ``r(m)`` the mean cosine of ``m`` to its ``k`` nearest
neighbours; ``r(q)`` is the same for every memory of one query, so only the memory's own term moves the
ranking. memroute ranks the sqlite-vec matrix tier by ``centred cosine(q, m) - penalty * shrink(n) * r(m)``,
``r`` computed on the tenant's centred vectors (the same center as the centred query).

Measured with ``memroute bench --quality`` (docs/retrieval.md), 2,000 chat turns per tenant, hybrid R@5 with
the fusion re-calibrated alongside: chosen on the dev split (static 0.742 -> 0.773, transformers 0.734 ->
0.750), then reported on the test split (static 0.737 -> 0.746, transformers 0.686 -> 0.720); on the bundled
synthetic set paraphrased questions went from 0.583 to 0.833 (static) and 0.783 to 0.917 (transformers).
A neighbour estimate from a sample of the tenant instead of every memory lost most of the gain on dev, so the
term is exact, which costs ``n^2 d`` for a tenant of ``n`` memories. It is computed at query time in blocks
(about 50 ms for 2,000 memories and 230 ms for 5,000 on the loaded two-core reference machine, once per
process and tenant), kept per row and updated incrementally (15-25 ms for the rows of one 256-memory batch);
tenants above ``hub_max_rows`` rank without it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CALIBRATED", "DEFAULT_PENALTY", "HUB_BLOCK", "HUB_PRIOR", "HUB_REFRESH", "calibrated_penalty", "hub_shrink",
           "neighbourhood"]

CALIBRATED = {"minishlab/potion-base-8M": 0.3, "sentence-transformers/all-MiniLM-L6-v2@onnx-int8": 0.5}
"""The penalty per embedding model (the signature's ``model``), chosen on the quality benchmark's dev split
with the fusion weights: the largest dev R@5 with hybrid at least each leg in every dev cell and on the
bundled synthetic set (docs/retrieval.md, "Hub penalty")."""
DEFAULT_PENALTY = 0.3
"""The penalty for a model that was not calibrated (the smaller of the two calibrated values)."""

HUB_PRIOR = 100
"""The penalty is shrunk by ``n / (n + HUB_PRIOR)``: a tenant with a few dozen memories has no hubs to speak
of (its nearest neighbours are its other facts), one with thousands gets the whole penalty."""
HUB_REFRESH = 0.5
"""Every row's term is recomputed once the tenant has grown or shrunk by this share since the last time
(rows added in between get their own term against every current row at once)."""
HUB_BLOCK = 1024
_FEW_ROWS = 32
"""Up to this many rows, :func:`neighbourhood` multiplies on the calling thread (no BLAS thread pool)."""
"""Rows per block of the neighbourhood computation (bounds its scratch memory to ``HUB_BLOCK x n`` floats)."""


def calibrated_penalty(model: str) -> float:
    """The hub penalty for vectors of ``model`` (an embedding signature's model name)."""
    return CALIBRATED.get(model, DEFAULT_PENALTY)


def hub_shrink(n: int) -> float:
    return n / (n + HUB_PRIOR)


def neighbourhood(vectors: np.ndarray, rows: np.ndarray, middle: np.ndarray, neighbours: int) -> np.ndarray:
    """For each of ``rows`` (positions in ``vectors``, unit rows of one tenant), the mean cosine between its
    centred vector and the centred vectors of its ``neighbours`` nearest other rows (centred: minus
    ``middle``; a zero ``middle`` gives plain cosines). One matrix product per block of rows."""
    n = vectors.shape[0]
    k = min(neighbours, n - 1)
    out = np.zeros(rows.shape[0], dtype=np.float32)
    if k <= 0 or rows.shape[0] == 0:
        return out
    centred = vectors - middle.astype(np.float32)
    centred /= np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), np.float32(1e-12))
    for start in range(0, rows.shape[0], HUB_BLOCK):
        part = rows[start:start + HUB_BLOCK]
        if part.shape[0] <= _FEW_ROWS:
            # The rows a write added since the last search: this runs on the search path (the next search after
            # each add in a chat), where waking BLAS's thread pool cost a search 10-15 ms on a busy 2-core machine
            # (see matrix_cache._scores); einsum stays on the calling thread.
            sims = np.einsum("ij,kj->ik", centred[part], centred)
        else:
            sims = centred[part] @ centred.T  # a full recomputation, rare: BLAS is worth waking here
        sims[np.arange(part.shape[0]), part] = -np.inf  # a row is not its own neighbour
        out[start:start + part.shape[0]] = _top_mean(sims, k)
    return out


def _top_mean(sims: np.ndarray, k: int) -> np.ndarray:
    """The mean of each row's ``k`` largest values (``sims`` is scratch: overwritten). For a small ``k``, ``k``
    passes of argmax are several times faster than ``np.partition`` along rows (11 against 50 ms for 1,024 x
    5,000)."""
    if k > 16:
        return np.partition(sims, sims.shape[1] - k, axis=1)[:, sims.shape[1] - k:].mean(axis=1)
    every = np.arange(sims.shape[0])
    total = np.zeros(sims.shape[0], dtype=np.float64)
    for _ in range(k):
        best = sims.argmax(axis=1)
        total += sims[every, best]
        sims[every, best] = -np.inf
    return (total / k).astype(np.float32)
