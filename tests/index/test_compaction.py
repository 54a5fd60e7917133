"""An index compacts when most of its slots are dead, never because its items are not searchable (issue #13
found every sync of a store of mostly ``index=False`` items rebuilding the whole index)."""

from __future__ import annotations

import pytest

import engram
from engram.index.docs import DocIndex
from engram.store.operations import PutOp


def _rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = DocIndex._rebuild

    def counted(self: DocIndex) -> None:
        calls.append(self.size)
        original(self)

    monkeypatch.setattr(DocIndex, "_rebuild", counted)
    return calls


def test_items_that_are_not_searchable_never_trigger_a_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _rebuilds(monkeypatch)
    mem = engram.open(":memory:", embedder="hashing")
    mem.batch([PutOp(("events",), f"e{i}", {"n": i}, False) for i in range(1500)])
    mem.put(("notes",), "n0", {"text": "the only searchable item"})
    mem.update_index()
    for i in range(5):
        mem.put(("events",), f"later{i}", {"n": i}, index=False)
        mem.update_index()
    assert calls == []
    assert [r.key for r in mem.search((), "searchable")] == ["n0"]


def test_mostly_deleted_slots_are_compacted(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _rebuilds(monkeypatch)
    mem = engram.open(":memory:", embedder="hashing")
    mem.batch([PutOp(("docs",), f"d{i}", {"text": f"document {i}"}) for i in range(1500)])
    mem.update_index()
    mem.batch([PutOp(("docs",), f"d{i}", None) for i in range(1000)])
    mem.update_index()
    assert len(calls) == 1
    assert len(mem.search(("docs",), "document", limit=2000)) == 500
