"""After a large batch the index keeps documents as bytes and postings as arrays: searches, deletes, updates
and searches in the past answer exactly as before."""

from __future__ import annotations

import pytest

import engram
from engram.index import docs


def load(mem: engram.Memory, start: int, n: int) -> None:
    with mem.transaction("load") as tx:
        for i in range(start, start + n):
            tx.put(("notes", f"u{i % 3}"), f"n{i}", {"text": f"note {i} about {['cats', 'dogs', 'birds'][i % 3]}"})


def answers(mem: engram.Memory, **kwargs: object) -> list[tuple[str, float]]:
    """Every match with its score, rounded past float32 noise (in key order: equal scores are ordered by
    time, which differs by store)."""
    found = mem.search(("notes",), "note about dogs 17", limit=1_000, **kwargs)  # type: ignore[arg-type]
    return sorted((r.key, round(r.score or 0.0, 6)) for r in found)


def test_packed_index_answers_as_an_unpacked_one(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = engram.open(":memory:", embedder="hashing")
    load(plain, 0, 300)
    expected = answers(plain)
    monkeypatch.setattr(docs, "PACK_AFTER", 100)
    packed = engram.open(":memory:", embedder="hashing")
    load(packed, 0, 300)
    assert answers(packed) == expected
    index = packed.pool.head(packed.branch, packed.head.tree)
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


def test_compaction_keeps_the_vector_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """When most slots are dead the index renumbers its documents; the graph moves along and still answers."""
    from engram.index.vector import VectorIndex

    init = VectorIndex.__init__

    def small(self: VectorIndex, dim: int, *, ann_min: int | None = 300, background: bool = False) -> None:
        init(self, dim, ann_min=ann_min, background=background)

    monkeypatch.setattr(VectorIndex, "__init__", small)
    mem = engram.open(":memory:", embedder="hashing")
    load(mem, 0, 2_500)
    mem.update_index()
    index = mem.pool.head(mem.branch, mem.head.tree)
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
