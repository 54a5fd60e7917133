"""Index lag (issue #11): ``SearchResults.lag`` and ``Memory.index_lag`` say how far an index is behind."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

import engram
from engram.embed import HashingEmbedder
from engram.errors import EmbedderError
from engram.index.vector import VectorIndex
from engram.store import tenant_url
from engram.store.indexing import LAG_SCAN, IndexLag


class Flaky(HashingEmbedder):
    """An embedder that can go down (and come back)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def embed(self, texts: Sequence[str]) -> Any:
        if self.down:
            raise EmbedderError("model server unreachable")
        return super().embed(texts)


def test_index_lag_counts_commits_not_applied_yet() -> None:
    mem = engram.open(":memory:", embedder=HashingEmbedder())
    mem.put(("n",), "a", {"text": "apples"})
    commits = len(mem.log())
    assert mem.index_lag() == IndexLag(commits, 0, 0)  # never built in this process: every commit, not the cap
    for i in range(LAG_SCAN + 5):
        mem.put(("n",), f"k{i}", {"text": "x"})
    assert mem.index_lag().commits == LAG_SCAN  # counted up to LAG_SCAN
    mem.search((), "apples")
    assert mem.index_lag() == IndexLag(0, 0, 0)
    mem.put(("n",), "b", {"text": "pears"})
    mem.put(("n",), "c", {"text": "plums"})
    assert mem.index_lag().commits == 2  # reading the lag applies nothing
    found = mem.search((), "plums")
    assert [i.key for i in found] == ["c"] and found.lag == 0
    assert mem.index_lag().commits == 0


def test_items_waiting_for_vectors_show_on_results_and_in_the_lag() -> None:
    embedder = Flaky()
    mem = engram.open(":memory:", embedder=embedder)
    mem.put(("n",), "a", {"text": "apples and pears"})
    assert mem.search((), "apples").lag == 0
    embedder.down = True
    with mem.transaction("three quinces") as tx:
        for i in range(3):
            tx.put(("n",), f"k{i}", {"text": f"quince number {i}"})
    found = mem.search((), "quince", mode="keyword")
    assert len(found) == 3 and found.lag == 3  # found by keywords; their vectors are still to be made
    assert mem.index_lag() == IndexLag(0, 3, 0)
    embedder.down = False
    mem.put(("n",), "b", {"text": "a later write embeds what waits"})
    assert mem.search((), "quince").lag == 0
    assert mem.index_lag().vectors == 0


def test_the_graph_backlog_is_the_vectors_not_in_the_graph_yet() -> None:
    index = VectorIndex(8, ann_min=10, background=False)
    rows = np.random.default_rng(1).normal(size=(30, 8)).astype(np.float32)
    index.set_many(np.arange(30, dtype=np.int64), rows / np.linalg.norm(rows, axis=1, keepdims=True))
    assert index.backlog == 30
    index.build(limit=64)
    assert index.backlog == 0


def test_postgres_search_reports_its_lag(pgvector_url: str) -> None:
    mem = engram.open(
        tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres"
    )
    try:
        mem.put(("n",), "a", {"text": "apples and pears"})
        assert mem.index_lags() == {}  # not built yet: left out (what /readyz shows as null), never the scan's cap
        found = mem.search((), "apples")
        assert [i.key for i in found] == ["a"] and found.lag == 0
        lag = mem.index_lag()
        assert (lag.commits, lag.vectors) == (0, 0) and lag.graph >= 0
        mem.put(("n",), "b", {"text": "plums"})
        assert mem.index_lag().commits == 0  # the rows move in the commit's own transaction
    finally:
        mem.close()
