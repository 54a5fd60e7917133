"""Library handles index in the background: a search after many writes never pays for the backlog, a tenant's own
latest writes are searchable by meaning at once, ``flush_index`` waits for the rest, and closing stops the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

import engram
from engram.channels import Channels
from engram.embed import HashingEmbedder


class SlowEmbedder:
    """The hashing embedder, ``delay`` seconds per text (a model on a busy machine); counts what it embedded."""

    def __init__(self, delay: float = 0.002) -> None:
        self.inner = HashingEmbedder()
        self.delay = delay
        self.texts = 0
        self.lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        time.sleep(self.delay * len(texts))
        with self.lock:
            self.texts += len(texts)
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.inner.embed_query(text)


def _workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "engram-index-worker" and t.is_alive())


def test_a_search_after_many_writes_does_not_embed_the_backlog(tmp_path: Path) -> None:
    slow = SlowEmbedder(delay=0.01)  # 100 texts a second: the writes outrun it
    mem = engram.open(str(tmp_path / "s"), embedder=slow)
    mem.pool.query_cache = None
    with mem.transaction("backlog") as tx:
        for i in range(800):
            tx.put(("users", f"u{i % 30}"), f"k{i}", {"text": f"note {i} about topic {i % 40}"})
    found = mem.search((), "note about topic 7")  # the whole store: it embeds for its budget (0.25 s), no more
    assert found and found.mode == "hybrid"
    assert found.lag > 0  # it did not wait the ~8 s the backlog takes: the rest is the worker's
    assert all(item.value["text"].endswith("topic 7") or "7" in item.value["text"] for item in found)
    assert mem.flush_index(timeout=120)
    done = mem.search((), "note about topic 7")
    assert done.lag == 0 and mem.index_lag().vectors == 0
    mem.close()


def test_a_tenant_finds_its_latest_write_by_meaning_at_once(tmp_path: Path) -> None:
    slow = SlowEmbedder(delay=0.005)
    mem = engram.open(str(tmp_path / "s"), embedder=slow)
    mem.pool.query_cache = None
    with mem.transaction("backlog") as tx:  # 2,000 items to embed: the worker is busy with them for seconds
        for i in range(2_000):
            tx.put(("users", f"u{i % 50}"), f"k{i}", {"text": f"note {i} about topic {i % 40}"})
    mem.put(("users", "newcomer"), "k0", {"text": "the newcomer prefers dark mode"})
    found = mem.search(("users", "newcomer"), "dark mode", mode="semantic")
    assert [item.key for item in found] == ["k0"]  # its scope's vector was made first, not the backlog's
    mem.close()


def test_flush_waits_and_close_stops_the_worker(tmp_path: Path) -> None:
    slow = SlowEmbedder()
    before = _workers()
    mem = engram.open(str(tmp_path / "s"), embedder=slow)
    for i in range(300):
        mem.put(("docs",), f"d{i}", {"text": f"document {i}"})
    assert _workers() == before + 1  # one worker for the store, started by its first write
    assert mem.flush_index(timeout=60)
    assert slow.texts >= 300 and mem.index_lag().vectors == 0 and mem.index_lag().commits == 0
    mem.put(("docs",), "late", {"text": "a late document"})
    mem.close()  # stops the worker (it finishes the step it is in)
    deadline = time.monotonic() + 30
    while _workers() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _workers() == before


def test_without_background_indexing_a_search_embeds_everything_first(tmp_path: Path) -> None:
    slow = SlowEmbedder(delay=0.0)
    mem = engram.open(str(tmp_path / "s"), embedder=slow, background_index=False)
    for i in range(200):
        mem.put(("docs",), f"d{i}", {"text": f"document {i}"})
    time.sleep(0.2)
    assert slow.texts == 0  # nothing embedded it in the background
    found = mem.search(("docs",), "document 7")
    assert found.lag == 0 and slow.texts == 200
    mem.close()


def test_channel_messages_are_indexed_in_the_background(tmp_path: Path) -> None:
    """Channels write through a library handle: a search after many sends leaves their backlog to the worker."""
    slow = SlowEmbedder(delay=0.003)
    mem = engram.open(str(tmp_path / "s"), embedder=slow)
    hub = Channels(mem)
    hub.create_project("p")
    hub.register_agent("agent", project="p")
    actor = hub.as_agent("agent")
    actor.create_channel("general")
    actor.send_many("general", [{"content": f"error {i} in service {i % 7}"} for i in range(800)])
    found = actor.search_messages("error in service 3")
    assert found  # answered from what is indexed, by keyword for the rest
    assert mem.flush_index(timeout=120)
    assert mem.index_lag().vectors == 0
    mem.close()
