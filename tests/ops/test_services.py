"""One tenant's services (issue #27): built once beside its pooled store, shared by every request through views
bound to the caller's handle, and closed with the store."""

from __future__ import annotations

from pathlib import Path

import pytest

import engram
from engram.channels import Channels
from engram.errors import NotFoundError, ReadOnlyError
from engram.ops.services import TenantServices
from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor


class ClosingExtractor(OfflineExtractor):
    """The offline extractor, recording whether its owner closed it."""

    closed = False

    def close(self) -> None:
        self.closed = True


def test_pool_services_one_per_tenant_and_closed_with_the_pool(tmp_path: Path) -> None:
    built: list[MemoryWriter] = []

    def writer(memory: Memory, tenant: str) -> MemoryWriter:
        built.append(MemoryWriter(memory, extractor=ClosingExtractor(), background=False))
        return built[-1]

    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder=None), index_delay=None, writer=writer)
    with pytest.raises(NotFoundError):
        pool.services("acme")  # not open: a door leases the tenant first
    with pool.lease("acme") as acme:
        first = pool.services("acme", acme)
        hub, scribe = first.channels, first.writer
    with pool.lease("acme") as again:
        assert again is acme
        same = pool.services("acme", again)
        assert same is first and same.channels is hub and same.writer is scribe
    with pool.lease("globex") as globex:
        other = pool.services("globex", globex)
        assert other is not first and other.channels is not hub and other.writer is not scribe
    assert len(built) == 2  # one writer per tenant, however many requests
    pool.close()
    assert first.closed and other.closed
    assert all(isinstance(w.extractor, ClosingExtractor) and w.extractor.closed for w in built)
    with pool.lease("acme") as reopened:  # a closed pool starts afresh, with new services
        assert pool.services("acme", reopened) is not first
    pool.close()


def test_pool_services_are_closed_when_their_tenant_is_evicted(tmp_path: Path) -> None:
    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder=None), max_open=1, index_delay=None)
    try:
        with pool.lease("acme") as acme:
            evicted = pool.services("acme", acme)
            assert evicted.channels is evicted.channels
        pool.acquire("globex")  # acme is idle and over the bound: closed with its services
        assert evicted.closed
        pool.release("globex")
    finally:
        pool.close()


def test_hub_views_share_the_cache_and_keep_the_callers_access() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    services = TenantServices(mem)
    hub = services.channels
    hub.create_project("acme")
    hub.register_agent("alice", project="acme")
    writable = hub.for_caller(mem.handle(author="key:k1", system=False))
    reader = hub.for_caller(mem.handle(author="key:k2", read_only=True, system=False))
    assert isinstance(writable, Channels) and writable is not hub
    assert writable.memory.system and reader.memory.system  # the service reaches its own namespaces
    assert writable.directory() is reader.directory() is hub.directory()  # one cache per tenant
    sent = writable.as_agent("alice").create_channel("debugging")
    assert mem.head.author == "alice"  # channels commit as the agent, as before
    with pytest.raises(ReadOnlyError):
        reader.as_agent("alice").send(sent.id, "refused: a read-only key writes nothing")
    assert [c.id for c in reader.as_agent("alice").list_channels()] == [sent.id]
    services.close()


def test_writer_views_share_the_worker_and_keep_the_callers_branch_and_access() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    writer = TenantServices(mem).writer
    view = writer.for_caller(mem.handle(author="key:k1", read_only=True))
    assert view is not writer and view.mem.read_only and view.author == writer.author == "writer"
    assert view.conversations is writer.conversations and view.extractor is writer.extractor
    bound = writer.for_caller(mem.handle(author="key:k1"))
    bound.start_conversation("c1", ("users", "alice"))
    for text in ("I live in Lyon.", "Noted.", "I work as a nurse."):
        bound.append("c1", "assistant" if text == "Noted." else "user", text)
    done = bound.append("c1", "assistant", "Noted too.")  # the second completed assistant turn: a run
    assert done.decision.action == "queued" and writer.wait(30)  # in the worker every view shares
    assert writer.status(("users", "alice"))["last_run"]["outcome"] == "merged"
    assert mem.head.author == "writer"  # the writer's commits keep its author, as before
