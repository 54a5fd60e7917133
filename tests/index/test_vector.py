"""Vector index: exact below the ANN threshold, IVF above it with high recall on clustered data."""

from __future__ import annotations

import numpy as np

from engram.index.vector import VectorIndex


def clustered(n: int, dim: int = 64, centres: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(centres, dim))
    rows = base[rng.integers(0, centres, n)] + 0.35 * rng.normal(size=(n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_exact_scores_match_numpy() -> None:
    rows = clustered(500)
    index = VectorIndex(64)
    for slot, row in enumerate(rows):
        index.set(slot, row)
    index.clear(3)
    q = rows[10]
    expected = rows.astype(np.float16).astype(np.float32) @ q  # vectors are kept at float16 precision
    expected[3] = 0
    assert np.allclose(index.scores(q, 500), expected, atol=1e-6)
    assert not index.approximate


def test_ivf_recall_on_clustered_data() -> None:
    rows = clustered(20_000)
    index = VectorIndex(64, ann_min=5_000)
    for slot, row in enumerate(rows):
        index.set(slot, row)
    assert index.approximate
    queries = clustered(50, seed=1)
    hits = 0
    for q in queries:
        exact = set(np.argsort(-(rows @ q))[:10].tolist())
        approx = set(np.argsort(-index.scores(q, 20_000))[:10].tolist())
        hits += len(exact & approx)
    assert hits / (10 * len(queries)) >= 0.9
    # rows added after the build join a cluster and are found; cleared rows are not
    index.set(20_000, queries[0])
    index.clear(int(np.argmax(rows @ queries[1])))
    assert int(np.argmax(index.scores(queries[0], 20_001))) == 20_000
