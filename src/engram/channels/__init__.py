"""Channels, direct messages and notes for teams of agents, stored in engram's versioned store.

A channel is items under ``("_channels", ...)`` (the layout is in :mod:`engram.channels._layout` and
``docs/channels.md``), so it can be read, searched and diffed as of any commit or time::

    hub = Channels(engram.open(":memory:"))
    hub.create_project("acme")
    hub.register_agent("debugger", project="acme")
    me = hub.as_agent("debugger")
    me.create_channel("debugging")
    me.send("debugging", "ConnectionRefusedError on port 5432", metadata={"type": "debug_start"})
"""

from engram.channels._steps import FEEDBACK_STEP, FEEDBACK_STEPS
from engram.channels.actor import Actor
from engram.channels.model import Agent, Channel, Event, Member, Message, MessageResults, Pattern, Patterns, to_json
from engram.channels.service import Channels

__all__ = [
    "FEEDBACK_STEP",
    "FEEDBACK_STEPS",
    "Actor",
    "Agent",
    "Channel",
    "Channels",
    "Event",
    "Member",
    "Message",
    "MessageResults",
    "Pattern",
    "Patterns",
    "to_json",
]
