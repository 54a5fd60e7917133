"""After a large batch the index keeps documents as bytes and postings as arrays: searches, deletes, updates
and searches in the past answer exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

import engram
from engram.index import doclist, docs


def load(mem: engram.Memory, start: int, n: int) -> None:
    with mem.transaction("load") as tx:
        for i in range(start, start + n):
            tx.put(("notes", f"u{i % 3}"), f"n{i}", {"text": f"note {i} about {['cats', 'dogs', 'birds'][i % 3]}"})


def answers(mem: engram.Memory, **kwargs: object) -> list[tuple[str, float]]:
    """Every match with its score, rounded past float32 noise (in key order: equal scores are ordered by
    time, which differs by store)."""
    found = mem.search(("notes",), "note about dogs 17", limit=1_000, **kwargs)  # type: ignore[arg-type]
    return sorted((r.key, round(r.score or 0.0, 6)) for r in found)


def test_packed_index_answers_as_an_unpacked_one() -> None:
    plain = engram.open(":memory:", embedder="hashing")
    load(plain, 0, 300)
    expected = answers(plain)
    packed = engram.open(":memory:", embedder="hashing")
    packed.pool.pack_after = 100  # before its first index
    load(packed, 0, 300)
    assert answers(packed) == expected
    index = packed.pool.current(packed.branch, packed.head.tree)
    assert index.keyword._postings == {}  # every posting is in the arrays
    before = packed.head.id
    packed.delete(("notes", "u2"), "n17")
    packed.put(("notes", "u0"), "n18", {"text": "nothing in common"})
    load(packed, 300, 20)  # a small batch after the pack: kept decoded
    plain.delete(("notes", "u2"), "n17")
    plain.put(("notes", "u0"), "n18", {"text": "nothing in common"})
    load(plain, 300, 20)
    assert answers(packed) == answers(plain)
    assert "n17" not in [key for key, _ in answers(packed)] and len(answers(packed)) == 319
    assert answers(packed, at=before) == expected
    listed = [item.key for item in packed.search(("notes", "u1"), limit=500)]
    items = sorted(packed.iter_items(("notes", "u1")), key=lambda item: (-item.updated_at.timestamp(), item.key))
    assert listed == [item.key for item in items]


def test_compaction_keeps_the_vector_graph() -> None:
    """When most slots are dead the index renumbers its documents; the graph moves along and still answers."""
    mem = engram.open(":memory:", embedder="hashing")
    mem.pool.ann_min, mem.pool.vector_settings = 300, {"background": False}  # before its first index
    load(mem, 0, 2_500)
    mem.update_index()
    index = mem.pool.current(mem.branch, mem.head.tree)
    assert index.vectors is not None
    index.vectors.build()
    assert index.vectors.approximate
    with mem.transaction("prune") as tx:
        for i in range(0, 1_300):
            tx.delete(("notes", f"u{i % 3}"), f"n{i}")
    hits = mem.search(("notes",), "note 2017 about dogs", mode="semantic", limit=5)
    assert index.size == 1_200  # renumbered densely
    assert hits[0].key == "n2017"
    assert all(int(hit.key[1:]) >= 1_300 for hit in hits)
    assert index.vectors.count == 1_200 and index.vectors.approximate


def _entries(n: int) -> list[tuple[bytes, bytes]]:
    """Varied items as tree entries: namespaces, TTLs, confidences, ``index=False`` and chosen fields."""
    from engram import codec
    from engram.objects import Record, encode_record

    out = []
    for i in range(n):
        value: dict[str, object] = {"text": f"note {i} about {['cats', 'dogs', 'birds'][i % 3]} {i % 17}", "n": i}
        if i % 5 == 0:
            value["confidence"] = (i % 10) / 10
        extra: dict[str, object] = {}
        if i % 7 == 0:
            extra["index"] = False
        elif i % 11 == 0:
            extra["index"] = ["n"]
        record = Record(value, 1_000 + i, 2_000 + i, expires_at=9_000 + i if i % 4 == 0 else None, extra=extra)
        out.append((codec.encode_key(("notes", f"u{i % 5}"), f"n{i}"), encode_record(record)))
    return sorted(out)


def test_a_bulk_load_builds_the_index_one_document_at_a_time_builds() -> None:
    """A batch of ``pack_after`` or more is analysed without keeping documents: same arrays, postings, slots."""
    from engram.backends import MemoryChunkStore
    from engram.embed import HashingEmbedder
    from engram.tree import NodeStore

    entries = _entries(700)
    nodes, embedder = NodeStore(MemoryChunkStore()), HashingEmbedder()
    bulk = docs.DocIndex(nodes, embedder=embedder, pack_after=200, bulk_step=64)  # several steps
    bulk.apply(entries)
    single = docs.DocIndex(nodes, embedder=embedder, pack_after=200, bulk_step=64)
    for lo in range(0, len(entries), 50):
        single.apply(entries[lo : lo + 50])
    n = len(entries)
    assert bulk.size == single.size == n and len(bulk) == len(single) == n
    for name in ("ns_ids", "updated", "expires", "confidence", "alive", "indexed", "hashes"):
        assert (getattr(bulk, name)[:n] == getattr(single, name)[:n]).all(), name
    assert bulk.namespaces == single.namespaces
    assert bulk.keyword.stats == single.keyword.stats
    for query in (["note"], ["cat", "7"], ["bird", "dog", "13"], ["699"]):
        assert (bulk.keyword.scores(query, n) == single.keyword.scores(query, n)).all()
    for slot, (key, data) in enumerate(entries):
        assert bulk.slot_of.get(key) == single.slot_of.get(key) == slot
        assert bulk.docs.raw(slot) == (key, data)
        assert bulk.docs[slot] == single.docs[slot]
    assert (
        bulk.pending == single.pending and (bulk.vectors.rows(np.arange(n)) == single.vectors.rows(np.arange(n))).all()
    )
    # then the same updates and deletes on both
    changes = [(entries[3][0], None), (entries[10][0], entries[11][1]), (entries[600][0], None)]
    bulk.apply(changes)
    single.apply(changes)
    assert bulk.slot_of.get(entries[3][0]) is None and bulk.slot_of.get(entries[10][0]) == n
    assert (bulk.keyword.scores(["note"], n + 1) == single.keyword.scores(["note"], n + 1)).all()


def test_the_slot_map_tells_keys_with_one_hash_apart() -> None:
    keys = [f"key{i}".encode() for i in range(10)]
    found = doclist.SlotMap(lambda slot: keys[slot], recent_max=2, hash_key=lambda key: 7 if key != b"key9" else 5)
    for slot, key in enumerate(keys[:9]):
        found[key] = slot
    found.settle()  # into the arrays: every hash equal
    assert [found.get(key) for key in keys] == [*range(9), None]
    assert found.pop(b"key4") == 4 and found.get(b"key4") is None and found.pop(b"key4") is None
    assert found.get(b"key5") == 5 and len(found) == 8
    found[b"key9"] = 9
    found.settle()
    assert found.get(b"key9") == 9 and found.get(b"key4") is None and len(found) == 9


def test_records_decoded_together_are_the_records_decoded_one_by_one() -> None:
    from engram.errors import IntegrityError
    from engram.objects import decode_record, decode_records

    datas = [data for _, data in _entries(50)]
    assert decode_records(datas) == [decode_record(d) for d in datas]
    with pytest.raises(IntegrityError):
        decode_records([datas[0], b"X{}"])
    with pytest.raises(IntegrityError):  # a malformed one raises as it does alone (not a list of another length)
        decode_records([datas[0], datas[1][:-1], b"R1,2"])
    with pytest.raises(IntegrityError):
        decode_records([datas[0], b"R1,2"])
