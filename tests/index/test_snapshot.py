"""Saved search indexes: the file format, and a reopened store searching exactly like a rebuilt one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engram
from engram.index import snapshot
from engram.index.docs import DocIndex
from engram.store import Memory

NS = ("users", "alice")
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
QUERIES = ["alpha beta", "gamma", "kappa lambda mu", "zeta delta", "nothing matches"]


def test_snapshot_round_trip(tmp_path: Path) -> None:
    arrays: dict[str, Any] = {
        "ints": np.arange(10, dtype=np.int64),
        "matrix": np.ones((3, 4), dtype=np.float32),
        "empty": np.zeros(0, dtype=np.int32),
        "bytes": np.frombuffer(b"hello", dtype=np.uint8),
    }
    snapshot.write(tmp_path / "a.idx", {"root": "ab", "list": [1, 2]}, arrays)
    found = snapshot.read(tmp_path / "a.idx")
    assert found is not None
    meta, back = found
    assert meta == {"root": "ab", "list": [1, 2]}
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        assert np.array_equal(back[name], array)
    assert [p.name for p in tmp_path.iterdir()] == ["a.idx"]  # no temporary file left behind


@pytest.mark.parametrize("content", [b"", b"ENGRAMIX", b"not a snapshot at all", b"ENGRAMIX" + b"\xff" * 40])
def test_unreadable_snapshots_are_ignored(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.idx").write_bytes(content)
    assert snapshot.read(tmp_path / "bad.idx") is None
    assert snapshot.read(tmp_path / "missing.idx") is None


def fill(mem: Memory, rng: np.random.Generator, steps: int, keys: int = 60) -> None:
    for step in range(steps):
        with mem.transaction(f"step {step}") as tx:
            for _ in range(int(rng.integers(1, 8))):
                key = f"k{int(rng.integers(0, keys))}"
                if rng.random() < 0.2:
                    tx.delete(NS, key)
                elif rng.random() < 0.1:
                    tx.put(NS, key, {"text": "hidden " + str(rng.choice(WORDS))}, index=False)
                else:
                    text = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))))
                    tx.put(NS, key, {"text": text, "n": int(rng.integers(0, 5))})


def results(mem: Memory) -> dict[tuple[str, str, str], list[tuple[str, float]]]:
    out = {}
    for query in QUERIES:
        for mode in ("hybrid", "keyword", "semantic"):
            for filt in ("", '{"n": {"$gte": 2}}'):
                found = mem.search(
                    NS,
                    query,
                    limit=100,
                    mode=mode,  # type: ignore[arg-type]
                    filter=None if not filt else __import__("json").loads(filt),
                )
                out[(query, mode, filt)] = [(item.key, round(item.score or 0.0, 4)) for item in found]
    listing = mem.search(NS, limit=1000)
    out[("", "list", "")] = [(item.key, 0.0) for item in listing]
    return out


def loaded_from_snapshot(mem: Memory) -> bool:
    index = mem.pool.index(mem.branch)
    return len(index.docs._unread) > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_a_reopened_store_searches_exactly_like_a_rebuilt_index(tmp_path: Path, seed: int) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    rng = np.random.default_rng(seed)
    mem = engram.open(url, embedder="hashing")
    fill(mem, rng, 30)
    before = results(mem)
    mem.close()
    assert list((tmp_path / "mem.db-index").glob("*.idx")), "close() saves the branch index"

    again = engram.open(url, embedder="hashing")
    assert loaded_from_snapshot(again)
    assert results(again) == before
    fill(again, rng, 30)  # updates and deletes of restored documents, and new ones
    incremental = results(again)
    again.reindex()
    assert results(again) == incremental
    again.close()


def test_a_snapshot_is_brought_up_to_date_by_the_diff_since(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    mem = engram.open(url, embedder="hashing")
    fill(mem, np.random.default_rng(3), 20)
    mem.search(NS, "alpha")
    mem.close()
    writer = engram.open(url, embedder=None)  # another process writes without searching
    writer.put(NS, "late", {"text": "omega arrives late"})
    writer.delete(NS, "k1")
    writer.repo.chunks.close()
    again = engram.open(url, embedder="hashing")
    assert [item.key for item in again.search(NS, "omega", mode="keyword")] == ["late"]
    assert again.get(NS, "k1") is None and "k1" not in [i.key for i in again.search(NS, limit=1000)]


def test_snapshots_of_another_embedder_or_a_collected_root_are_not_used(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    mem = engram.open(url, embedder="hashing")
    fill(mem, np.random.default_rng(4), 10)
    before = results(mem)
    mem.close()
    keyword_only = engram.open(url, embedder=None)
    assert not loaded_from_snapshot(keyword_only)  # built with another embedder: rebuilt instead
    keyword_only.close()

    path = next((tmp_path / "mem.db-index").glob("*.idx"))
    found = snapshot.read(path)
    assert found is not None
    meta, arrays = found
    snapshot.write(path, {**meta, "root": "00" * 20}, arrays)  # a root that no longer exists
    again = engram.open(url, embedder="hashing")
    assert not loaded_from_snapshot(again)
    assert results(again) == before  # rebuilt from the tree: the same results as the store that wrote it
    again.close()


def test_a_corrupt_snapshot_falls_back_to_a_rebuild(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    mem = engram.open(url, embedder="hashing")
    fill(mem, np.random.default_rng(5), 15)
    before = results(mem)
    mem.close()
    for path in (tmp_path / "mem.db-index").glob("*.idx"):
        path.write_bytes(path.read_bytes()[:100])
    again = engram.open(url, embedder="hashing")
    assert results(again) == before


def test_a_large_change_saves_without_waiting_for_close(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    mem = engram.open(url, embedder=None)
    with mem.transaction("bulk") as tx:
        for i in range(6000):
            tx.put(NS, f"n{i}", {"text": f"note {i} {WORDS[i % len(WORDS)]}"})
    assert not (tmp_path / "mem.db-index").exists()
    mem.search(NS, "alpha")
    saved = list((tmp_path / "mem.db-index").glob("*.idx"))
    assert len(saved) == 1
    index = DocIndex.restore(saved[0], mem.repo.nodes)
    assert index is not None and len(index) == 6000 and index.root == mem.head.tree
