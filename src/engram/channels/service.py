"""The channels service: the hub (:mod:`engram.channels.hub`) plus the ways to act as an agent on it.

The hub knows nothing of actors, and actors (:mod:`engram.channels.actor`) only need a hub, so this class sits
above both: it is what a door builds once per tenant.
"""

from __future__ import annotations

from engram.channels import actor
from engram.channels.actor import Actor
from engram.channels.hub import Hub


class Channels(Hub):
    """Channels, direct messages and notes for a team of agents, stored in ``memory``'s branch.

    Register projects and agents here; act as an agent with :meth:`as_agent`. Doors (HTTP, MCP) decide who
    the agent is from the caller's API key, never from an argument.
    """

    def as_agent(self, agent: str, *, read_all_notes: bool = False) -> Actor:
        """Act as a registered agent. ``read_all_notes`` (the ``notes:read-all`` scope) lets it peek at other
        agents' notes; every peek is recorded in the event log."""
        return actor.as_agent(self, agent, read_all_notes=read_all_notes)

    def actor_for_key(self, key_id: str | None, agent: str | None = None) -> Actor:
        """The actor an API key makes: the agent it is bound to, or the one it names among those it may act for.

        ``key_id=None`` is a server without keys (local development: nobody is authenticated, so the caller
        names the agent). A key bound to no agent may not act on channels at all."""
        return actor.actor_for_key(self, key_id, agent)

    def actor_for_author(self, author: str, agent: str | None = None) -> Actor:
        """The actor a handle's author makes: ``key:<id>`` (the author of an API key's handle, see
        :attr:`engram.ops.access.Principal.author`) acts through the key's binding; any other author is a local,
        unauthenticated caller acting as ``agent``, or as the agent the author names."""
        return actor.actor_for_author(self, author, agent)
