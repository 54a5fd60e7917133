"""Contract suites for the storage seam, shipped so that anyone writing a backend can run them.

Subclass a contract in a test module and provide a ``chunks`` or ``refs`` fixture returning a fresh,
empty store; pytest then runs every ``test_*`` method against it::

    class TestMyChunkStore(ChunkStoreContract):
        @pytest.fixture
        def chunks(self):
            return MyChunkStore(...)
"""

from __future__ import annotations

import threading
import time

from engram._filter_cases import FILTER_CASES, FILTER_DOCS, INVALID_FILTERS
from engram.backends.base import ChunkStore, RefStore, now_ms
from engram.errors import ChunkNotFoundError
from engram.hashing import chunk_id

__all__ = ["FILTER_CASES", "FILTER_DOCS", "INVALID_FILTERS", "ChunkStoreContract", "RefStoreContract"]

_A, _B, _C = (chunk_id(bytes([i])) for i in range(3))


class ChunkStoreContract:
    """Behaviour every :class:`ChunkStore` must have."""

    def test_put_then_get_returns_bytes(self, chunks: ChunkStore) -> None:
        cid = chunks.put(b"hello")
        assert cid == chunk_id(b"hello")
        assert chunks.get(cid) == b"hello"

    def test_get_many_omits_missing(self, chunks: ChunkStore) -> None:
        a = chunks.put(b"a")
        assert chunks.get_many([a, _B]) == {a: b"a"}

    def test_get_missing_raises_not_found(self, chunks: ChunkStore) -> None:
        try:
            chunks.get(_C)
        except ChunkNotFoundError as exc:
            assert isinstance(exc, LookupError)
        else:
            raise AssertionError("get of a missing chunk must raise ChunkNotFoundError")

    def test_has_many_returns_missing_ids(self, chunks: ChunkStore) -> None:
        a = chunks.put(b"a")
        assert chunks.has_many([a, _B, _C]) == {_B, _C}
        assert chunks.has(a) and not chunks.has(_B)

    def test_put_many_is_idempotent(self, chunks: ChunkStore) -> None:
        data = {chunk_id(b"x%d" % i): b"x%d" % i for i in range(50)}
        chunks.put_many(data)
        chunks.put_many(data)
        assert chunks.get_many(list(data)) == data
        assert sorted(chunks.iter_ids()) == sorted(data)

    def test_put_many_handles_large_batches(self, chunks: ChunkStore) -> None:
        data = {chunk_id(b"y%d" % i): b"y%d" % i for i in range(2500)}
        chunks.put_many(data)
        assert chunks.get_many(list(data)) == data
        assert chunks.has_many(list(data)) == set()

    def test_iter_ids_is_sorted_and_ranged(self, chunks: ChunkStore) -> None:
        ids = sorted(chunks.put(b"z%d" % i) for i in range(2100))
        assert list(chunks.iter_ids()) == ids
        assert list(chunks.iter_ids(ids[10], ids[1500])) == ids[10:1500]
        assert list(chunks.iter_ids(ids[2000])) == ids[2000:]

    def test_iter_ids_written_before(self, chunks: ChunkStore) -> None:
        old = chunks.put(b"old")
        time.sleep(0.005)
        cut = now_ms()
        time.sleep(0.005)
        new = chunks.put(b"new")
        assert list(chunks.iter_ids(written_before=cut)) == [old]
        assert sorted(chunks.iter_ids(written_before=now_ms() + 1)) == sorted([old, new])
        time.sleep(0.005)
        chunks.put(b"old")  # storing again renews the write time
        assert list(chunks.iter_ids(written_before=cut)) == []

    def test_delete_many_removes(self, chunks: ChunkStore) -> None:
        a, b = chunks.put(b"a"), chunks.put(b"b")
        chunks.delete_many([a, _C])
        assert chunks.has_many([a, b]) == {a}

    def test_large_chunks_round_trip(self, chunks: ChunkStore) -> None:
        compressible = b"memory " * 3000
        noise = bytes((i * 7919 + i // 3) % 251 for i in range(20_000))
        a, b = chunks.put(compressible), chunks.put(noise)
        assert chunks.get_many([a, b]) == {a: compressible, b: noise}

    def test_empty_chunk_round_trips(self, chunks: ChunkStore) -> None:
        cid = chunks.put(b"")
        assert chunks.get(cid) == b""

    def test_concurrent_puts_from_threads(self, chunks: ChunkStore) -> None:
        def work(n: int) -> None:
            for i in range(100):
                chunks.put(b"t%d-%d" % (n, i))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(list(chunks.iter_ids())) == 400


class RefStoreContract:
    """Behaviour every :class:`RefStore` must have: compare-and-swap and a reflog."""

    def test_get_missing_is_none(self, refs: RefStore) -> None:
        assert refs.get("heads/main") is None

    def test_set_requires_expected_none_to_create(self, refs: RefStore) -> None:
        assert refs.set("heads/main", _A, None)
        assert refs.get("heads/main") == _A
        assert not refs.set("heads/main", _B, None)
        assert refs.get("heads/main") == _A

    def test_set_is_compare_and_swap(self, refs: RefStore) -> None:
        refs.set("heads/main", _A, None)
        assert not refs.set("heads/main", _C, _B)
        assert refs.set("heads/main", _B, _A)
        assert refs.get("heads/main") == _B

    def test_delete_needs_expected_value(self, refs: RefStore) -> None:
        refs.set("tags/v1", _A, None)
        assert not refs.delete("tags/v1", _B)
        assert refs.delete("tags/v1", _A)
        assert refs.get("tags/v1") is None
        assert not refs.delete("tags/v1", _A)

    def test_list_filters_by_prefix(self, refs: RefStore) -> None:
        refs.set("heads/main", _A, None)
        refs.set("heads/dev", _B, None)
        refs.set("tags/v1", _C, None)
        assert refs.list("heads/") == {"heads/dev": _B, "heads/main": _A}
        assert refs.list() == {"heads/dev": _B, "heads/main": _A, "tags/v1": _C}
        assert refs.list("nothing/") == {}

    def test_reflog_records_every_change_newest_first(self, refs: RefStore) -> None:
        refs.set("heads/main", _A, None, actor="alice", reason="init")
        refs.set("heads/main", _B, _A, actor="bob", reason="commit")
        refs.set("heads/dev", _C, None)
        refs.set("heads/main", _B, _C)  # refused: not logged
        log = refs.reflog("heads/main")
        assert [(e.old, e.new, e.actor, e.reason) for e in log] == [
            (_A, _B, "bob", "commit"),
            (None, _A, "alice", "init"),
        ]
        assert [e.name for e in refs.reflog()] == ["heads/dev", "heads/main", "heads/main"]
        assert len(refs.reflog(limit=1)) == 1
        assert log[0].time >= log[1].time

    def test_value_at_follows_reflog_times(self, refs: RefStore) -> None:
        before = now_ms() - 1
        refs.set("heads/main", _A, None)
        refs.set("heads/main", _B, _A)
        assert refs.value_at("heads/main", before) is None
        assert refs.value_at("heads/main", now_ms() + 1000) == _B
        first = refs.reflog("heads/main")[-1].time
        assert refs.value_at("heads/main", first) in (_A, _B)

    def test_value_at_after_delete_is_none(self, refs: RefStore) -> None:
        refs.set("heads/x", _A, None)
        refs.delete("heads/x", _A)
        assert refs.value_at("heads/x", now_ms() + 1000) is None

    def test_prune_reflog_keeps_newest_entry(self, refs: RefStore) -> None:
        refs.set("heads/main", _A, None)
        refs.set("heads/main", _B, _A)
        dropped = refs.prune_reflog(now_ms() + 10_000)
        assert dropped == 1
        assert [e.new for e in refs.reflog("heads/main")] == [_B]

    def test_concurrent_cas_admits_one_winner_per_value(self, refs: RefStore) -> None:
        refs.set("heads/main", chunk_id(b"0"), None)
        wins: list[int] = []

        def bump(n: int) -> None:
            for _ in range(25):
                while True:
                    cur = refs.get("heads/main")
                    assert cur is not None
                    if refs.set("heads/main", chunk_id(cur), cur):
                        wins.append(n)
                        break

        threads = [threading.Thread(target=bump, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 100
        assert len(refs.reflog("heads/main")) == 101
