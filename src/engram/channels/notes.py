"""An agent's private notes channel and the writes on it: what :class:`~engram.channels.Actor`'s note methods and
pattern detection (:mod:`engram.channels.patterns`) share.

A notes channel (``notes:<agent>``) is made by the first note written to it; its owner is its only member.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engram.channels import _layout as layout
from engram.channels._steps import Writer, change_message, join, post_message
from engram.channels.hub import Hub
from engram.channels.model import CAPABILITIES, Agent, Channel, Message
from engram.errors import MessageNotFoundError


def _value(agent: Agent, cid: str) -> dict[str, Any]:
    return {"name": cid, "kind": "notes", "scope": "global", "project": agent.project, "access": "private",
            "description": f"notes of {agent.id}", "default": False, "archived": False, "count": 0,
            "owner": agent.id}  # fmt: skip


def notes_channel(hub: Hub, agent: Agent) -> Channel:
    """``agent``'s notes channel (a description of it when no note was written yet)."""
    cid = layout.notes_id(agent.id)
    item = hub.memory.get(layout.CHANNELS, cid)
    return Channel.from_value(cid, _value(agent, cid) if item is None else item.value)


def write_note(
    hub: Hub, agent: Agent, content: str, *, then: Callable[[Writer, str], None] | None = None, **fields: Any
) -> Message:
    """Write a note of ``agent`` (``fields`` as :meth:`Actor.write_note <engram.channels.Actor.write_note>`), making
    its notes channel on first use; ``then(writer, note id)`` runs in the same commit."""
    channel = notes_channel(hub, agent)

    def make(w: Writer) -> Channel:
        if w.get(layout.CHANNELS, channel.id) is None:
            value = {"name": channel.name, "kind": "notes", "scope": "global", "project": channel.project,
                     "access": "private", "description": channel.description, "default": False,
                     "archived": False, "count": 0, "owner": agent.id}  # fmt: skip
            w.put(layout.CHANNELS, channel.id, value)
            w.emit("note.channel.created", channel.id)
            join(w, Channel.from_value(channel.id, value), agent.id, CAPABILITIES)
        return channel

    op = post_message(agent.id, channel, "note", content, max_content=hub.max_content,
                      max_metadata=hub.max_metadata, make=make, then=then, **fields)  # fmt: skip
    return hub.write(agent.id, f"note to {channel.id}", op)


def edit_note(
    hub: Hub, agent: Agent, note_id: str, change: Callable[[dict[str, Any]], dict[str, Any]],
    then: Callable[[Writer], None] | None = None,
) -> Message:  # fmt: skip
    """Change one of ``agent``'s own notes by ``change(value)`` (``note.edited``); ``then(writer)`` runs in the same
    commit. :class:`MessageNotFoundError` when ``note_id`` is not a note of ``agent``."""
    cid, _ = layout.parse_message_id(note_id)
    found = hub.channel(cid)
    if found.kind != "notes" or found.owner != agent.id:
        raise MessageNotFoundError(f"no message in {cid!r} that {agent.id} may read")
    return hub.write(agent.id, f"edited {note_id}", change_message(found, note_id, "edited", change, then))
