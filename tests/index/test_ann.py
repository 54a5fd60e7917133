"""The vector index above ANN_MIN: HNSW recall on realistic data, the exact tail, deletes, filters,
renumbering, and a saved graph reopened memory-mapped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engram.index import ann, vector
from engram.index.ann import Graph
from engram.index.vector import VectorIndex


def realistic(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    """Clustered, low-rank vectors (top-10 cosines well below 1, as with sentence embeddings)."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(99).normal(size=(16, dim))
    topics = np.random.default_rng(98).normal(size=(40, 16))
    latent = topics[rng.integers(0, 40, n)] + 1.5 * rng.normal(size=(n, 16))
    rows = latent @ basis + 1.2 * rng.normal(size=(n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def top10(scores: np.ndarray) -> set[int]:
    return set(np.argpartition(-scores, 10)[:10].tolist())


def graph_index(rows: np.ndarray, *, overlap_min: int = vector.OVERLAP_MIN) -> VectorIndex:
    index = VectorIndex(rows.shape[1], ann_min=1_000, background=False, overlap_min=overlap_min)
    index.set_many(np.arange(len(rows), dtype=np.int64), rows)
    index.build()
    return index


def test_hnsw_recall_on_realistic_data() -> None:
    rows = realistic(6_000)
    index = graph_index(rows)
    assert index.approximate and index.backlog == 0
    hits = 0
    for q in realistic(40, seed=1):
        scores, exact = index.search(q, len(rows), None, 20)
        assert not exact
        hits += len(top10(scores) & top10(rows @ q))
    assert hits / 400 >= 0.95


def test_tail_is_searchable_before_the_graph_has_it() -> None:
    rows = realistic(3_000)
    index = VectorIndex(64, ann_min=1_000, background=False)
    index.set_many(np.arange(2_000, dtype=np.int64), rows[:2_000])
    index.build()
    index.set_many(np.arange(2_000, 3_000, dtype=np.int64), rows[2_000:])
    assert index.backlog == 1_000
    index.background = True  # as if the builder were busy elsewhere: the tail is scored exactly
    index._builder = None
    index.build = lambda limit=None: 0  # type: ignore[method-assign]
    scores = index.scores(rows[2_500], 3_000)
    assert index.backlog == 1_000
    # exact for the vector as the index keeps it: float16 precision, in the tail as in the graph
    kept = rows[2_500].astype(np.float16).astype(np.float32)
    assert (int(np.argmax(scores)) == 2_500 and scores[2_500] == np.float32(np.dot(kept, rows[2_500]).round(6))) or (
        np.isclose(scores[2_500], kept @ rows[2_500], atol=1e-6)
    )


def test_deleted_vectors_are_never_found() -> None:
    rows = realistic(3_000)
    index = graph_index(rows)
    for slot in (5, 6, 7):
        index.clear(slot)
        assert index.get(slot) is None
    for slot in (5, 6, 7):
        assert index.scores(rows[slot], 3_000)[slot] == 0
    assert index.count == 2_997


def test_filtered_search_is_exact_for_few_eligible_and_finds_enough_for_many() -> None:
    rows = realistic(8_000)
    index = graph_index(rows)
    q = realistic(1, seed=3)[0]
    few = np.zeros(8_000, dtype=bool)
    few[::100] = True  # 80 eligible: scored exactly
    scores, exact = index.search(q, 8_000, few, 20)
    assert exact
    assert np.allclose(scores[few], rows[few] @ q, atol=2e-3)  # float16 storage
    many = np.random.default_rng(4).random(8_000) < 0.6
    scores, _ = index.search(q, 8_000, many, 20)
    found = np.flatnonzero(many & (scores > 0))
    assert len(found) >= 20
    best = set(found[np.argsort(-scores[found])[:10]].tolist())
    truth = set(np.flatnonzero(many)[np.argsort(-(rows[many] @ q))[:10]].tolist())
    assert len(best & truth) >= 9


def test_extra_slots_get_their_exact_cosine() -> None:
    rows = realistic(5_000)
    index = graph_index(rows)
    q = rows[0]
    far = np.argsort(rows @ q)[:5].astype(np.int64)  # least similar: never among the graph's nearest
    scores, _ = index.search(q, 5_000, np.ones(5_000, dtype=bool) & (np.arange(5_000) < 5_000), 20, far)
    assert np.allclose(scores[far], rows[far] @ q, atol=2e-3)


def test_renumber_keeps_vectors_and_graph() -> None:
    rows = realistic(3_000)
    index = graph_index(rows)
    index.clear(0)
    new_slot = np.arange(-1, 2_999, dtype=np.int64)  # slot s -> s - 1, slot 0 dropped
    index.renumber(new_slot)
    assert index.count == 2_999
    assert np.allclose(index.get(9), rows[10], atol=2e-3)
    assert int(np.argmax(index.scores(rows[100], 2_999))) == 99


def test_saved_graph_reopens_memory_mapped_and_stays_writable(tmp_path: Path) -> None:
    rows = realistic(3_000)
    index = graph_index(rows)
    path = tmp_path / "g.hnsw"
    slots = index.save_graph(path, np.arange(3_000, dtype=np.int64))
    assert slots is not None
    graph = Graph.open(path, 64, len(slots))
    assert graph is not None and graph.view_of == path
    again = VectorIndex(64, ann_min=1_000, background=False)
    again.load_graph(graph, slots)
    again.clear(42)
    assert int(np.argmax(again.scores(rows[7], 3_000))) == 7
    assert again.scores(rows[42], 3_000)[42] == 0
    extra = realistic(10, seed=9)
    again.set_many(np.arange(3_000, 3_010, dtype=np.int64), extra)
    again.build()  # copies the mapped graph into memory first
    assert graph.view_of is None and again.backlog == 0
    assert int(np.argmax(again.scores(extra[3], 3_010))) == 3_003
    assert Graph.open(tmp_path / "missing.hnsw", 64, 0) is None


def test_a_graph_of_degree_16_saved_by_an_earlier_version_keeps_its_wider_search(tmp_path: Path) -> None:
    rows = realistic(2_000)
    old = Graph(64, connectivity=16)
    old.add(np.arange(2_000, dtype=np.int64), rows)
    old.save(tmp_path / "old.hnsw")
    graph = Graph.open(tmp_path / "old.hnsw", 64, 2_000)
    assert graph is not None
    keys, _ = graph.search(rows[5], 10)
    assert int(keys[0]) == 5
    assert graph._index.connectivity == 16 and graph._index.expansion_search == ann.EXPANSION_SEARCH_16
    new = Graph(64)
    new.add(np.arange(2_000, dtype=np.int64), rows)
    new.search(rows[5], 10)
    assert new._index.connectivity == ann.CONNECTIVITY == 32
    assert new._index.expansion_search == ann.EXPANSION_SEARCH < ann.EXPANSION_SEARCH_16
    assert ann.expansion(1_000_000) == int(ann.EXPANSION_SEARCH * 10**0.5)


def test_background_builder_empties_the_tail() -> None:
    rows = realistic(2_500)
    index = VectorIndex(64, ann_min=1_000)
    index.set_many(np.arange(2_500, dtype=np.int64), rows)
    index.wait()
    assert index.backlog == 0 and index.approximate


def test_the_builder_steps_aside_for_a_thread_waiting_for_the_lock() -> None:
    """Between steps the background builder lets a waiting thread (a bulk load's writes, a snapshot's save) take
    the lock first, instead of taking it back at once and starving it."""
    lock = VectorIndex(8).lock
    order: list[str] = []

    def waiter() -> None:
        with lock:
            order.append("waiter")

    with lock:
        thread = threading.Thread(target=waiter)
        thread.start()
        deadline = time.monotonic() + 5
        while not lock._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
        assert lock._waiting == 1
    lock.step_aside(limit=5)
    with lock:
        order.append("builder")
    thread.join()
    assert order == ["waiter", "builder"]


def test_an_overlapped_graph_search_runs_in_a_worker_and_gives_the_same_cosines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hybrid search starts the graph search in a worker thread and scores its keywords meanwhile: the
    cosines it finishes with (the best keyword matches exact) are the ones a search in the caller's thread
    gives. With every worker busy, the caller searches the graph itself."""
    rows = realistic(5_000)
    index = graph_index(rows, overlap_min=1_000)
    q, far = rows[3], np.argsort(rows @ rows[3])[:5].astype(np.int64)
    eligible = np.random.default_rng(6).random(5_000) < 0.9  # above GATHER_MAX: the graph answers
    threads: list[str] = []
    search = Graph.search

    def spy(self: Graph, *args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return search(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Graph, "search", spy)
    expected = index.search(q, 5_000, eligible, 20, far)
    finish = index.start(q, 5_000, eligible, 20, overlap=True)
    got = finish(far)
    assert threads[0] == "MainThread" and threads[1].startswith("engram-graph-search")
    assert np.array_equal(got[0], expected[0]) and got[1] == expected[1]
    assert np.allclose(got[0][far], rows[far] @ q, atol=2e-3)
    busy = [vector._overlapped(lambda: time.sleep(0.3)) for _ in range(vector.OVERLAP_THREADS)]
    assert all(f is not None for f in busy)
    assert vector._overlapped(lambda: 1) is None  # no idle worker: the caller does the work
    got = index.start(q, 5_000, eligible, 20, overlap=True)(far)
    assert threads[-1] == "MainThread" and np.array_equal(got[0], expected[0])
    for f in busy:
        assert f is not None
        f.result()
    index.overlap_min = 10_000  # a graph below the size: never a worker
    index.start(q, 5_000, eligible, 20, overlap=True)(far)
    assert threads[-1] == "MainThread"
