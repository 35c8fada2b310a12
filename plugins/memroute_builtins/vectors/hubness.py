"""The hub penalty: a memory that is close to many other memories is close to many queries too.

In a high-dimensional embedding space a few points are near neighbours of a large share of all queries
("hubs"; Radovanović et al., 2010). Among real chat turns they are the short generic ones ("what do you do
for a living?", "that's so cool"), and they crowd a paraphrased answer out of the top 5. CSLS (Conneau et al.,
2018) ranks by ``2 cos(q, m) - r(q) - r(m)``, with ``r(m)`` the mean cosine of ``m`` to its ``k`` nearest
neighbours; ``r(q)`` is the same for every memory of one query, so only the memory's own term moves the
ranking. memroute ranks the sqlite-vec matrix tier by ``centred cosine(q, m) - penalty * shrink(n) * r(m)``,
``r`` computed on the tenant's centred vectors (the same center as the centred query).

Measured with ``memroute bench --quality`` (docs/retrieval.md): chosen on the dev split (2,000 chat turns per
tenant: static hybrid R@5 0.742 -> 0.781, transformers 0.734 -> 0.750) and then reported on the test split.
A neighbour estimate from a sample of the tenant instead of every memory lost most of the gain on dev, so the
term is exact, which costs ``n^2 d`` to compute for a tenant of ``n`` memories: it is computed at query time
in blocks (about 0.04 s for 2,000 memories, 0.3 s for 5,000 on the two-core reference machine), kept per
row and updated incrementally, and tenants above ``hub_max_rows`` rank without it.
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
"""Rows per block of the neighbourhood computation (bounds its scratch memory to ``HUB_BLOCK x n`` floats)."""


def calibrated_penalty(model: str) -> float:
    """The hub penalty for vectors of ``model`` (an embedding signature's model name)."""
    return CALIBRATED.get(model, DEFAULT_PENALTY)


def hub_shrink(n: int) -> float:
    return n / (n + HUB_PRIOR)


def neighbourhood(vectors: np.ndarray, rows: np.ndarray, middle: np.ndarray, neighbours: int) -> np.ndarray:
    """For each of ``rows`` (positions in ``vectors``, unit rows of one tenant), the mean cosine between its
    centred vector and the centred vectors of its ``neighbours`` nearest other rows (centred: minus
    ``middle``; a zero ``middle`` gives plain cosines).

    With unit rows ``a``, ``b``: ``cos(a - c, b - c) = (a.b - a.c - b.c + c.c) / (|a - c| |b - c|)`` and
    ``|a - c|^2 = 1 - 2 a.c + c.c``, so the centred matrix is never built: one matrix product per block."""
    n = vectors.shape[0]
    k = min(neighbours, n - 1)
    out = np.zeros(rows.shape[0], dtype=np.float32)
    if k <= 0 or rows.shape[0] == 0:
        return out
    middle = middle.astype(np.float32)
    along = np.einsum("ij,j->i", vectors, middle)
    square = np.float32(middle @ middle)
    norms = np.sqrt(np.maximum(1.0 - 2.0 * along + square, 1e-12)).astype(np.float32)
    for start in range(0, rows.shape[0], HUB_BLOCK):
        part = rows[start:start + HUB_BLOCK]
        sims = vectors[part] @ vectors.T  # off the per-query path; BLAS is worth waking here
        sims -= along[part, None]
        sims -= along[None, :]
        sims += square
        sims /= norms[part, None]
        sims /= norms[None, :]
        sims[np.arange(part.shape[0]), part] = -np.inf  # a row is not its own neighbour
        top = np.partition(sims, n - k, axis=1)[:, n - k:]
        out[start:start + part.shape[0]] = top.mean(axis=1)
    return out
