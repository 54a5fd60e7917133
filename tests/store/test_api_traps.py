"""API traps found integrating engram (issue #9, item 10): writes inside a transaction, building the search
index ahead of the first search, one vector cache shared by several stores, read-only handles."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import engram
from engram.embed import HashingEmbedder
from engram.embed.base import Vectors
from engram.store.connect import shared_vector_cache


def test_put_inside_the_handles_transaction_raises_instead_of_committing_alone() -> None:
    mem = engram.open(":memory:", embedder=None)
    before = len(mem.log())
    with pytest.raises(engram.InvalidInputError, match="transaction open"), mem.transaction("import") as tx:
        tx.put(("n",), "a", {"v": 1})
        mem.put(("n",), "b", {"v": 2})  # would silently be its own commit
    assert len(mem.log()) == before and mem.get(("n",), "b") is None
    with mem.transaction("import") as tx:  # the transaction itself, and the handle after it, work as before
        tx.put(("n",), "a", {"v": 1})
        tx.delete(("n",), "gone")
    mem.put(("n",), "c", {"v": 3})
    assert [c.message for c in mem.log(limit=2)] == ["put n/c", "import"]


def test_other_threads_and_handles_still_write_during_a_transaction() -> None:
    mem = engram.open(":memory:", embedder=None)
    other = mem.handle()
    with mem.transaction("tx") as tx:
        tx.put(("n",), "a", {"v": 1})
        other.put(("n",), "b", {"v": 2})
        worker = threading.Thread(target=lambda: mem.put(("n",), "c", {"v": 3}))
        worker.start()
        worker.join()
    assert mem.get(("n",), "a") and mem.get(("n",), "b") and mem.get(("n",), "c")


def test_update_index_builds_the_index_before_the_first_search(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    mem = engram.open(str(tmp_path / "s"), embedder=embedder)
    with mem.transaction("bulk") as tx:
        for i in range(50):
            tx.put(("docs",), f"d{i}", {"text": f"document number {i} about topic {i % 5}"})
    assert embedder.texts == 0  # writes do not embed
    mem.update_index()
    assert embedder.texts == 50
    found = mem.search(("docs",), "topic 3", mode="semantic")
    assert found and embedder.texts == 51  # only the query was embedded at search time
    mem.update_index()  # nothing changed: nothing to embed
    assert embedder.texts == 51


def test_a_shared_vector_cache_embeds_a_text_once_for_every_store(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    cache = tmp_path / "vectors.db"
    first = engram.open(str(tmp_path / "a"), embedder=embedder, vector_cache=cache)
    second = engram.open(str(tmp_path / "b"), embedder=embedder, vector_cache=str(cache))
    for mem in (first, second):
        mem.put(("n",), "k", {"text": "the same sentence in two stores"})
        mem.update_index()
    assert embedder.texts == 1
    assert shared_vector_cache(cache) is shared_vector_cache(str(cache))
    alone = engram.open(str(tmp_path / "c"), embedder=embedder)  # default: the store's own cache
    alone.put(("n",), "k", {"text": "the same sentence in two stores"})
    alone.update_index()
    assert embedder.texts == 2


def test_a_read_only_handle_never_writes_not_even_a_ttl_refresh() -> None:
    mem = engram.open(":memory:", embedder=None, ttl={"default_ttl": 1.0, "refresh_on_read": True})
    mem.put(("n",), "k", {"v": 1})
    reader = mem.handle(read_only=True)
    commits = len(mem.log())
    assert reader.get(("n",), "k", refresh_ttl=True) is not None
    assert list(reader.search(("n",), refresh_ttl=True))
    assert len(mem.log()) == commits
    for write in (
        lambda: reader.put(("n",), "x", {"v": 2}),
        lambda: reader.delete(("n",), "k"),
        lambda: reader.create_branch("b"),
        lambda: reader.tag("t"),
        lambda: reader.transaction("tx"),
        lambda: reader.batch([engram.PutOp(("n",), "y", {"v": 3})]),
    ):
        with pytest.raises(engram.ReadOnlyError):
            write()
    assert len(mem.log()) == commits
    assert reader.handle().read_only and not reader.handle(read_only=False).read_only


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        return super().embed(texts)
