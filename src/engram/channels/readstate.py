"""The read-state part of an agent acting on channels: read cursors, unread counts, and the events it may see."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from engram.channels.membership import Membership
from engram.channels.model import Event, Member
from engram.errors import ChannelNotFoundError, InvalidInputError


class ReadState(Membership):
    """Read cursors and event subscriptions (a part of :class:`~engram.channels.Actor`)."""

    def mark_read(self, channel: str, upto: int | None = None) -> Member:
        """Move this agent's read cursor to message number ``upto`` (default: the newest); it is written."""
        found = self.readable_channel(channel)
        number = found.count if upto is None else upto
        if not isinstance(number, int) or not 0 <= number <= found.count:
            raise InvalidInputError(f"upto must be a message number in 0..{found.count}, got {upto!r}")
        self._set_member(found, self.id, "member.read", read=number)
        return self._member_of(found)

    def unread(self, channel: str) -> int:
        """How many messages of a channel came after this agent's read cursor."""
        found = self.readable_channel(channel)
        member = self.member(found)
        return found.count - (member.read if member else 0)

    def events(self, after: int = 0, *, topics: Sequence[str] | None = None, limit: int = 100) -> list[Event]:
        """Events after a cursor that this agent may see (its readable channels' and its own notes')."""
        return [e for e in self.hub.read_events(after, limit=limit, topics=topics) if self.may_see(e)]

    def subscribe(
        self, topics: Sequence[str] | None = None, after: int | None = None, *, poll: float = 0.02,
        timeout: float | None = None,
    ) -> Iterator[Event]:  # fmt: skip
        """Yield the events this agent may see as they are written (any process), muted channels left out."""
        return self.hub.subscribe(topics, after, poll=poll, timeout=timeout, accept=self.wants)

    def may_see(self, event: Event) -> bool:
        """True when this agent may see an event (one of a channel it may read, or of no channel)."""
        if event.channel is None:
            return True
        try:
            return self.can_read(self.hub.channel(event.channel))
        except ChannelNotFoundError:
            return False

    def wants(self, event: Event) -> bool:
        """True when an event belongs in this agent's subscription: one it may see, not of a channel it muted."""
        if not self.may_see(event) or event.channel is None:
            return self.may_see(event)
        member = self.member(self.hub.channel(event.channel))
        return member is None or not member.muted or event.actor == self.id
