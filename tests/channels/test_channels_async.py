"""The async facade of channels: every sync method has its coroutine twin with the same name, and the debugging
flow runs through it without blocking the event loop (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

from engram.channels import Actor, Channels
from engram.channels.aio import AsyncActor, AsyncChannels


def _public(cls: type) -> set[str]:
    return {n for n, v in inspect.getmembers(cls) if not n.startswith("_") and inspect.isfunction(v)}


def test_every_sync_method_has_its_async_twin() -> None:
    for sync, twin in ((Channels, AsyncChannels), (Actor, AsyncActor)):
        missing = _public(sync) - _public(twin)
        assert not missing, f"{twin.__name__} lacks {sorted(missing)}"
        for name in _public(sync):
            method = getattr(twin, name)
            if name in ("as_agent", "actor_for_key", "actor_for_author", "for_caller"):
                continue  # they read nothing: they return the async actor (or hub) at once
            if name == "subscribe":
                assert not inspect.iscoroutinefunction(method)  # an async iterator
                continue
            assert inspect.iscoroutinefunction(method), f"{twin.__name__}.{name} is not a coroutine"


def test_the_debugging_flow_runs_through_the_async_facade(hub: Channels) -> None:
    async def flow() -> None:
        channels = AsyncChannels(hub)
        alice, bob = channels.as_agent("alice"), channels.as_agent("bob")
        await alice.create_channel("debugging")
        await bob.join("debugging")
        loop_thread, ran_on = threading.current_thread(), []
        send = alice.sync.send

        def recording(*args: Any, **kwargs: Any) -> Any:
            ran_on.append(threading.current_thread())
            return send(*args, **kwargs)

        alice.sync.send = recording  # type: ignore[method-assign]
        sent = await alice.send("debugging", "ConnectionRefusedError on port 5432", metadata={"type": "debug_start"})
        assert ran_on and ran_on[0] is not loop_thread  # the store is never touched on the event loop's thread
        found = await bob.search_messages("connection refused", channels=["debugging"])
        assert [m.id for m in found] == [sent.id]
        voted = await bob.feedback(sent.id, worked=True)
        assert voted.id == sent.id
        assert await bob.unread("debugging") == 1
        await bob.mark_read("debugging")
        assert await bob.unread("debugging") == 0
        note = await alice.write_note("restart the pool first", tags=["postgres"])
        assert [n.id for n in await alice.recent_notes()] == [note.id]
        events = []
        async for event in bob.subscribe(after=0, timeout=0.5):
            events.append(event.topic)
        assert "message.created" in events
        assert [a.id for a in await channels.agents()] == [a.id for a in hub.agents()]

    started = time.monotonic()
    asyncio.run(flow())
    assert time.monotonic() - started < 60
