"""A store records its embedder: another one is refused unless asked for, ``auto`` reuses it, and
reindex/update_index report progress through reading and embedding."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import engram
from engram.embed import EmbedderMismatchError, HashingEmbedder, embedder_spec
from engram.index.ann import Graph
from engram.store.indexing import recorded_embedder


def fill(mem: engram.Memory, n: int = 30) -> None:
    with mem.transaction("load") as tx:
        for i in range(n):
            tx.put(("docs",), f"d{i}", {"text": f"document number {i} about topic {i % 5}"})


def test_store_records_embedder_and_refuses_another(tmp_path: Path) -> None:
    url = str(tmp_path / "s.db")
    mem = engram.open(url, embedder="hashing")
    fill(mem)
    # recorded when named on open (issue #12: a store written with --embedder hashing and searched later
    # without the option must not be embedded with MiniLM, even if nothing was indexed in between)
    assert recorded_embedder(mem.repo) == ("hashing", HashingEmbedder().model_id)
    mem.update_index()
    assert recorded_embedder(mem.repo) == ("hashing", HashingEmbedder().model_id)
    mem.close()
    with pytest.raises(EmbedderMismatchError, match="indexed with 'hashing'") as caught:
        engram.open(url, embedder="hashing:64")
    assert caught.value.recorded == "hashing" and caught.value.given == "hashing:64"
    assert isinstance(caught.value, engram.EngramError)


def test_auto_uses_the_recorded_embedder(tmp_path: Path) -> None:
    url = str(tmp_path / "s.db")
    mem = engram.open(url, embedder="hashing:32")
    fill(mem)
    mem.update_index()
    mem.close()
    again = engram.open(url)  # embedder="auto"
    assert again.pool.embedder is not None and embedder_spec(again.pool.embedder) == "hashing:32"
    assert again.search(("docs",), "document number 3")[0].key == "d3"
    keyword_only = engram.open(url, embedder=None)  # None stays keyword-only, whatever is recorded
    assert keyword_only.search(("docs",), "number 3").mode == "keyword"


def test_reindex_with_another_embedder_re_embeds_and_records_it(tmp_path: Path) -> None:
    url = str(tmp_path / "s.db")
    mem = engram.open(url, embedder="hashing")
    fill(mem)
    mem.update_index()
    seen: list[tuple[str, int, int]] = []
    done: list[int] = []
    assert mem.reindex(done.append, embedder="hashing:64", phases=lambda *a: seen.append(a)) == 30
    assert sum(done) == 30
    assert recorded_embedder(mem.repo) == ("hashing:64", HashingEmbedder(64).model_id)
    assert [s for s in seen if s[0] == "index"][-1] == ("index", 30, 30)
    assert [s for s in seen if s[0] == "embed"][-1] == ("embed", 30, 30)
    index = mem.pool.current(mem.branch, mem.head.tree)
    assert index.vectors is not None and index.vectors.dim == 64
    mem.close()
    engram.open(url, embedder="hashing:64").close()
    with pytest.raises(EmbedderMismatchError):
        engram.open(url, embedder="hashing")
    switched = engram.open(url, embedder="hashing", reembed=True)
    assert recorded_embedder(switched.repo) == ("hashing", HashingEmbedder().model_id)


def test_update_index_reports_embedding_progress() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    fill(mem, 600)
    seen: list[tuple[str, int, int]] = []
    mem.update_index(lambda *a: seen.append(a))
    embeds = [s for s in seen if s[0] == "embed"]
    assert embeds[-1] == ("embed", 600, 600) and len(embeds) >= 3  # batches of 256, not one jump at the end
    assert [s for s in seen if s[0] == "index"][-1] == ("index", 600, 600)
    seen.clear()
    mem.update_index(lambda *a: seen.append(a))
    assert seen == []  # nothing changed: nothing to do


def small_graph(mem: engram.Memory) -> engram.Memory:
    """``mem`` with an HNSW graph from 200 vectors, built in the caller's thread (set before its first index)."""
    mem.pool.ann_min, mem.pool.vector_settings = 200, {"background": False}
    return mem


def test_large_index_uses_the_graph_and_survives_a_reopen(tmp_path: Path) -> None:
    """Above ``ann_min`` vectors the index answers from an HNSW graph saved beside the snapshot; a reopened store
    maps it instead of rebuilding it, and deletes made before and after the reopen are never found."""
    url = str(tmp_path / "s.db")
    mem = small_graph(engram.open(url, embedder="hashing"))
    fill(mem, 800)
    mem.delete(("docs",), "d1")
    mem.flush_index()  # a search answers before the index is current on a busy machine (with its lag): wait
    hit = mem.search(("docs",), "document number 17 about topic 2", mode="semantic", limit=3)
    assert hit[0].key == "d17"
    index = mem.pool.current(mem.branch, mem.head.tree)
    assert index.vectors is not None and index.vectors.approximate
    mem.close()
    assert list((tmp_path / "s.db-index").glob("*.hnsw"))
    again = small_graph(engram.open(url))
    index = again.pool.current(again.branch, again.head.tree)
    assert index.vectors is not None and index.vectors.approximate and not index.pending
    again.delete(("docs",), "d17")
    again.flush_index()
    keys = [r.key for r in again.search(("docs",), "document number 17 about topic 2", mode="semantic", limit=5)]
    assert "d17" not in keys and "d1" not in keys and len(keys) == 5
    fresh = engram.open(":memory:", embedder="hashing")
    with fresh.transaction("copy") as tx:
        for item in again.iter_items(("docs",)):
            tx.put(item.namespace, item.key, item.value)
    fresh.flush_index()
    expected = [r.key for r in fresh.search(("docs",), "topic 3 number 8", limit=5)]
    assert [r.key for r in again.search(("docs",), "topic 3 number 8", limit=5)] == expected
    vectors = np.stack([v for v in (index.vectors.get(s) for s in range(5)) if v is not None])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-2)


def test_hybrid_search_with_the_graph_searched_in_a_worker_ranks_as_in_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search over the graph searches it in a worker thread while it scores keywords (engram.index.vector
    overlap_min): pages and scores are those of a search in one thread, at the head, filtered and in the past."""
    mem = small_graph(engram.open(str(tmp_path / "s.db"), embedder="hashing"))
    mem.pool.query_cache = None
    fill(mem, 900)
    past = mem.head.id
    with mem.transaction("more") as tx:
        for i in range(0, 900, 7):
            tx.put(("docs",), f"d{i}", {"text": f"rewritten document {i} about topic {i % 3}"})
    assert mem.flush_index(timeout=120)  # every vector made: the two passes below compare the same index
    calls: list[str] = []
    search = Graph.search

    def spy(self: Graph, *args: object, **kwargs: object) -> object:
        calls.append(threading.current_thread().name)
        return search(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "search", spy)
    vectors = mem.pool.current(mem.branch, mem.head.tree).vectors
    assert vectors is not None
    vectors.gather_max = 100  # the graph answers (not an exact scan of 900 vectors)

    def pages() -> list[list[tuple[str, float | None]]]:
        out = []
        for query in ("document number 17 about topic 2", "topic 3 number 8", "rewritten topic 1"):
            for kwargs in ({}, {"filter": {"text": {"$ne": "x"}}}, {"at": past}):
                found = mem.search(("docs",), query, limit=7, **kwargs)  # type: ignore[arg-type]
                out.append([(r.key, r.score) for r in found])
        return out

    vectors.overlap_min = 10**9
    alone = pages()
    assert calls and not any(name.startswith("engram-graph-search") for name in calls)
    vectors.overlap_min = 0
    calls.clear()
    assert pages() == alone
    assert calls and all(name.startswith("engram-graph-search") for name in calls)
