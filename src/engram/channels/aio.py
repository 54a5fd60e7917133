"""The async facade of channels: the same classes and method names, each a coroutine (agent code is async).

    hub = AsyncChannels(Channels(engram.open(":memory:")))
    await hub.create_project("acme")
    await hub.register_agent("debugger", project="acme")
    me = hub.as_agent("debugger")                    # an AsyncActor
    await me.create_channel("debugging")
    await me.send("debugging", "ConnectionRefusedError on port 5432")
    async for event in me.subscribe(timeout=1.0):    # an async iterator
        ...

Every public method of :class:`~engram.channels.Channels` and :class:`~engram.channels.Actor` has its twin here
(a test checks it); each runs the sync method on a worker thread (``asyncio.to_thread``), so the event loop never
waits for the store. ``as_agent``, ``actor_for_key`` and ``actor_for_author`` return an :class:`AsyncActor` at
once (they read nothing), and ``subscribe`` is an async iterator. ``.sync`` is the object underneath.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from engram.channels.actor import Actor
from engram.channels.hub import Directory
from engram.channels.model import Agent, Channel, Event, Member, Message, MessageResults, Patterns
from engram.channels.service import Channels
from engram.store import Memory
from engram.store.reader import Reader

_DONE = object()


async def _iterate(events: Iterator[Event]) -> AsyncIterator[Event]:
    """A sync event iterator as an async one (each ``next`` on a worker thread)."""
    while True:
        event = await asyncio.to_thread(next, events, _DONE)
        if event is _DONE:
            return
        yield event  # type: ignore[misc]


class AsyncActor:
    """An :class:`~engram.channels.Actor` (one agent acting on channels and notes) with coroutine methods."""

    def __init__(self, actor: Actor) -> None:
        self.sync = actor

    @property
    def agent(self) -> Agent:
        """The agent this actor is."""
        return self.sync.agent

    @property
    def id(self) -> str:
        """The agent's id."""
        return self.sync.id

    def subscribe(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
        """See :meth:`~engram.channels.Actor.subscribe`: the same events, as an async iterator."""
        return _iterate(self.sync.subscribe(*args, **kwargs))

    async def archive(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Actor.archive`."""
        return await asyncio.to_thread(self.sync.archive, *args, **kwargs)

    async def can_read(self, *args: Any, **kwargs: Any) -> bool:
        """See :meth:`~engram.channels.Actor.can_read`."""
        return await asyncio.to_thread(self.sync.can_read, *args, **kwargs)

    async def create_channel(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Actor.create_channel`."""
        return await asyncio.to_thread(self.sync.create_channel, *args, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        """See :meth:`~engram.channels.Actor.delete`."""
        return await asyncio.to_thread(self.sync.delete, *args, **kwargs)

    async def detect_patterns(self, *args: Any, **kwargs: Any) -> Patterns:
        """See :meth:`~engram.channels.Actor.detect_patterns`."""
        return await asyncio.to_thread(self.sync.detect_patterns, *args, **kwargs)

    async def dm(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.dm`."""
        return await asyncio.to_thread(self.sync.dm, *args, **kwargs)

    async def edit(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.edit`."""
        return await asyncio.to_thread(self.sync.edit, *args, **kwargs)

    async def events(self, *args: Any, **kwargs: Any) -> list[Event]:
        """See :meth:`~engram.channels.Actor.events`."""
        return await asyncio.to_thread(self.sync.events, *args, **kwargs)

    async def feedback(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.feedback`."""
        return await asyncio.to_thread(self.sync.feedback, *args, **kwargs)

    async def in_scope(self, *args: Any, **kwargs: Any) -> bool:
        """See :meth:`~engram.channels.Actor.in_scope`."""
        return await asyncio.to_thread(self.sync.in_scope, *args, **kwargs)

    async def invite(self, *args: Any, **kwargs: Any) -> Member:
        """See :meth:`~engram.channels.Actor.invite`."""
        return await asyncio.to_thread(self.sync.invite, *args, **kwargs)

    async def join(self, *args: Any, **kwargs: Any) -> Member:
        """See :meth:`~engram.channels.Actor.join`."""
        return await asyncio.to_thread(self.sync.join, *args, **kwargs)

    async def leave(self, *args: Any, **kwargs: Any) -> None:
        """See :meth:`~engram.channels.Actor.leave`."""
        return await asyncio.to_thread(self.sync.leave, *args, **kwargs)

    async def list_agents(self, *args: Any, **kwargs: Any) -> list[Agent]:
        """See :meth:`~engram.channels.Actor.list_agents`."""
        return await asyncio.to_thread(self.sync.list_agents, *args, **kwargs)

    async def list_channels(self, *args: Any, **kwargs: Any) -> list[Channel]:
        """See :meth:`~engram.channels.Actor.list_channels`."""
        return await asyncio.to_thread(self.sync.list_channels, *args, **kwargs)

    async def mark_read(self, *args: Any, **kwargs: Any) -> Member:
        """See :meth:`~engram.channels.Actor.mark_read`."""
        return await asyncio.to_thread(self.sync.mark_read, *args, **kwargs)

    async def may_see(self, *args: Any, **kwargs: Any) -> bool:
        """See :meth:`~engram.channels.Actor.may_see`."""
        return await asyncio.to_thread(self.sync.may_see, *args, **kwargs)

    async def member(self, *args: Any, **kwargs: Any) -> Member | None:
        """See :meth:`~engram.channels.Actor.member`."""
        return await asyncio.to_thread(self.sync.member, *args, **kwargs)

    async def members(self, *args: Any, **kwargs: Any) -> list[Member]:
        """See :meth:`~engram.channels.Actor.members`."""
        return await asyncio.to_thread(self.sync.members, *args, **kwargs)

    async def message(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.message`."""
        return await asyncio.to_thread(self.sync.message, *args, **kwargs)

    async def message_history(self, *args: Any, **kwargs: Any) -> list[Message | None]:
        """See :meth:`~engram.channels.Actor.message_history`."""
        return await asyncio.to_thread(self.sync.message_history, *args, **kwargs)

    async def messages(self, *args: Any, **kwargs: Any) -> list[Message]:
        """See :meth:`~engram.channels.Actor.messages`."""
        return await asyncio.to_thread(self.sync.messages, *args, **kwargs)

    async def mute(self, *args: Any, **kwargs: Any) -> Member:
        """See :meth:`~engram.channels.Actor.mute`."""
        return await asyncio.to_thread(self.sync.mute, *args, **kwargs)

    async def notes_channel(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Actor.notes_channel`."""
        return await asyncio.to_thread(self.sync.notes_channel, *args, **kwargs)

    async def peek_notes(self, *args: Any, **kwargs: Any) -> MessageResults:
        """See :meth:`~engram.channels.Actor.peek_notes`."""
        return await asyncio.to_thread(self.sync.peek_notes, *args, **kwargs)

    async def post(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.post`."""
        return await asyncio.to_thread(self.sync.post, *args, **kwargs)

    async def readable(self, *args: Any, **kwargs: Any) -> list[Channel]:
        """See :meth:`~engram.channels.Actor.readable`."""
        return await asyncio.to_thread(self.sync.readable, *args, **kwargs)

    async def readable_channel(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Actor.readable_channel`."""
        return await asyncio.to_thread(self.sync.readable_channel, *args, **kwargs)

    async def recent_notes(self, *args: Any, **kwargs: Any) -> list[Message]:
        """See :meth:`~engram.channels.Actor.recent_notes`."""
        return await asyncio.to_thread(self.sync.recent_notes, *args, **kwargs)

    async def resolve(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Actor.resolve`."""
        return await asyncio.to_thread(self.sync.resolve, *args, **kwargs)

    async def search_messages(self, *args: Any, **kwargs: Any) -> MessageResults:
        """See :meth:`~engram.channels.Actor.search_messages`."""
        return await asyncio.to_thread(self.sync.search_messages, *args, **kwargs)

    async def search_my_notes(self, *args: Any, **kwargs: Any) -> MessageResults:
        """See :meth:`~engram.channels.Actor.search_my_notes`."""
        return await asyncio.to_thread(self.sync.search_my_notes, *args, **kwargs)

    async def search_notes(self, *args: Any, **kwargs: Any) -> MessageResults:
        """See :meth:`~engram.channels.Actor.search_notes`."""
        return await asyncio.to_thread(self.sync.search_notes, *args, **kwargs)

    async def send(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.send`."""
        return await asyncio.to_thread(self.sync.send, *args, **kwargs)

    async def send_many(self, *args: Any, **kwargs: Any) -> list[Message]:
        """See :meth:`~engram.channels.Actor.send_many`."""
        return await asyncio.to_thread(self.sync.send_many, *args, **kwargs)

    async def set_capabilities(self, *args: Any, **kwargs: Any) -> Member:
        """See :meth:`~engram.channels.Actor.set_capabilities`."""
        return await asyncio.to_thread(self.sync.set_capabilities, *args, **kwargs)

    async def unread(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`~engram.channels.Actor.unread`."""
        return await asyncio.to_thread(self.sync.unread, *args, **kwargs)

    async def update_profile(self, *args: Any, **kwargs: Any) -> Agent:
        """See :meth:`~engram.channels.Actor.update_profile`."""
        return await asyncio.to_thread(self.sync.update_profile, *args, **kwargs)

    async def wants(self, *args: Any, **kwargs: Any) -> bool:
        """See :meth:`~engram.channels.Actor.wants`."""
        return await asyncio.to_thread(self.sync.wants, *args, **kwargs)

    async def write_note(self, *args: Any, **kwargs: Any) -> Message:
        """See :meth:`~engram.channels.Actor.write_note`."""
        return await asyncio.to_thread(self.sync.write_note, *args, **kwargs)


class AsyncChannels:
    """A :class:`~engram.channels.Channels` hub with coroutine methods (see the module docstring)."""

    def __init__(self, hub: Channels | Memory) -> None:
        self.sync = hub if isinstance(hub, Channels) else Channels(hub)

    def as_agent(self, agent: str, *, read_all_notes: bool = False) -> AsyncActor:
        """See :meth:`~engram.channels.Channels.as_agent`."""
        return AsyncActor(self.sync.as_agent(agent, read_all_notes=read_all_notes))

    def actor_for_key(self, key_id: str | None, agent: str | None = None) -> AsyncActor:
        """See :meth:`~engram.channels.Channels.actor_for_key`."""
        return AsyncActor(self.sync.actor_for_key(key_id, agent))

    def actor_for_author(self, author: str, agent: str | None = None) -> AsyncActor:
        """See :meth:`~engram.channels.Channels.actor_for_author`."""
        return AsyncActor(self.sync.actor_for_author(author, agent))

    def for_caller(self, memory: Memory) -> AsyncChannels:
        """See :meth:`~engram.channels.Channels.for_caller`."""
        return AsyncChannels(self.sync.for_caller(memory))

    def subscribe(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
        """See :meth:`~engram.channels.Channels.subscribe`: the same events, as an async iterator."""
        return _iterate(self.sync.subscribe(*args, **kwargs))

    async def agent(self, *args: Any, **kwargs: Any) -> Agent:
        """See :meth:`~engram.channels.Channels.agent`."""
        return await asyncio.to_thread(self.sync.agent, *args, **kwargs)

    async def agents(self, *args: Any, **kwargs: Any) -> list[Agent]:
        """See :meth:`~engram.channels.Channels.agents`."""
        return await asyncio.to_thread(self.sync.agents, *args, **kwargs)

    async def bind_key(self, *args: Any, **kwargs: Any) -> None:
        """See :meth:`~engram.channels.Channels.bind_key`."""
        return await asyncio.to_thread(self.sync.bind_key, *args, **kwargs)

    async def channel(self, *args: Any, **kwargs: Any) -> Channel:
        """See :meth:`~engram.channels.Channels.channel`."""
        return await asyncio.to_thread(self.sync.channel, *args, **kwargs)

    async def create_project(self, *args: Any, **kwargs: Any) -> str:
        """See :meth:`~engram.channels.Channels.create_project`."""
        return await asyncio.to_thread(self.sync.create_project, *args, **kwargs)

    async def directory(self, *args: Any, **kwargs: Any) -> Directory:
        """See :meth:`~engram.channels.Channels.directory`."""
        return await asyncio.to_thread(self.sync.directory, *args, **kwargs)

    async def last_event(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`~engram.channels.Channels.last_event`."""
        return await asyncio.to_thread(self.sync.last_event, *args, **kwargs)

    async def list_channels_raw(self, *args: Any, **kwargs: Any) -> list[Channel]:
        """See :meth:`~engram.channels.Channels.list_channels_raw`."""
        return await asyncio.to_thread(self.sync.list_channels_raw, *args, **kwargs)

    async def projects(self, *args: Any, **kwargs: Any) -> list[str]:
        """See :meth:`~engram.channels.Channels.projects`."""
        return await asyncio.to_thread(self.sync.projects, *args, **kwargs)

    async def read_events(self, *args: Any, **kwargs: Any) -> list[Event]:
        """See :meth:`~engram.channels.Channels.read_events`."""
        return await asyncio.to_thread(self.sync.read_events, *args, **kwargs)

    async def reader(self, *args: Any, **kwargs: Any) -> Reader:
        """See :meth:`~engram.channels.Channels.reader`."""
        return await asyncio.to_thread(self.sync.reader, *args, **kwargs)

    async def register_agent(self, *args: Any, **kwargs: Any) -> Agent:
        """See :meth:`~engram.channels.Channels.register_agent`."""
        return await asyncio.to_thread(self.sync.register_agent, *args, **kwargs)

    async def write(self, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`~engram.channels.Channels.write`."""
        return await asyncio.to_thread(self.sync.write, *args, **kwargs)


__all__ = ["AsyncActor", "AsyncChannels"]
