"""Conversations kept in the store, as items: the memory writer's input.

A conversation is a system namespace ``("_conversations", <id>)`` on its own branch (``conversations`` by default,
so the turns never crowd the memories' history): one ``meta`` item (target, parent, counters) and one item
per turn (``t000000001``, ...). An append writes the turn and the updated counters in one commit, by
compare-and-swap on the conversation's head, so concurrent appends from many processes keep a gap-free order.
Turns are not indexed for search (no embedding on the hot path). A turn is stored as it was sent: the
conversation is the user's own data, in a system namespace only the writer and system-scoped keys read, and it is
what a memory's ``sources`` lead back to, so a secret redacted by mistake from a memory or a prompt can be read
again. What leaves the conversation is redacted (:meth:`Turn.redacted`): the writer's model prompts, traces and
memories. ``ConversationLog(redact_turns=True)`` (the writer's setting of that name) stores turns redacted
instead, for apps that want no secret stored at all; what the redactor took out is then gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engram.clock import now_ms
from engram.errors import ConflictError, InvalidInputError, NotFoundError
from engram.repo import HEADS
from engram.store import GetOp, Memory
from engram.tree import empty_tree
from engram.writer.redact import redact, redact_value
from engram.writer.state import target_id

BRANCH = "conversations"
#: A system namespace (the writer owns it: generic doors neither show nor change it without the system scope).
NAMESPACE = "_conversations"
#: Where stores written before conversations became a system namespace keep them (still read and appended to).
LEGACY_NAMESPACE = "conversations"
META = "meta"
ROLES = ("user", "assistant", "system", "tool")
Status = Literal["completed", "aborted"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation.

    Attributes:
        conversation_id: the conversation it belongs to.
        seq: its position, from 1, gap-free.
        role: ``user``, ``assistant``, ``system`` or ``tool``.
        text: what was said, as sent (redacted only under ``redact_turns``).
        message_id: the app's id for the message (default ``<conversation>:<seq>``); memories cite it in ``sources``.
        status: ``completed`` or ``aborted`` (an aborted assistant turn does not count towards the interval).
        tool_calls: tool calls the message made (JSON objects), if any.
        name: who spoke, when the app knows (a person's name; used in the memories' wording).
        created_at: when it was appended (UTC ms).
    """

    conversation_id: str
    seq: int
    role: str
    text: str
    message_id: str
    status: str = "completed"
    tool_calls: tuple[dict[str, Any], ...] = ()
    name: str | None = None
    created_at: int = 0

    @property
    def counts(self) -> bool:
        """True for a completed assistant turn: the unit the writer's interval counts."""
        return self.role == "assistant" and self.status == "completed"

    def dict(self) -> dict[str, Any]:
        """The JSON form (as stored)."""
        return {
            "conversation_id": self.conversation_id, "seq": self.seq, "role": self.role, "text": self.text,
            "message_id": self.message_id, "status": self.status, "tool_calls": list(self.tool_calls),
            "name": self.name, "created_at": self.created_at,
        }  # fmt: skip

    def redacted(self) -> Turn:
        """This turn with secrets redacted from its text and tool calls (what a model or a trace may see)."""
        text = redact(self.text)
        calls = tuple(dict(redact_value(dict(call))) for call in self.tool_calls)
        if text == self.text and calls == self.tool_calls:
            return self
        return Turn(self.conversation_id, self.seq, self.role, text, self.message_id, self.status, calls, self.name,
                    self.created_at)  # fmt: skip

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Turn:
        """Read a stored turn."""
        return cls(
            conversation_id=str(value["conversation_id"]), seq=int(value["seq"]), role=str(value["role"]),
            text=str(value["text"]), message_id=str(value["message_id"]), status=str(value.get("status", "completed")),
            tool_calls=tuple(value.get("tool_calls") or ()), name=value.get("name"),
            created_at=int(value.get("created_at", 0)),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation's header.

    Attributes:
        id: the conversation id (a namespace label: no period).
        target: the dotted target its memories go to (``users.alice``).
        parent: the parent conversation of a child/sub-agent conversation (the writer skips those), else None.
        excluded: True when the app excluded it from the writer.
        turns: how many turns it has (the last ``seq``).
        assistant_turns: how many completed assistant turns it has.
        created_at: when it was created (UTC ms).
        metadata: anything the app attached.
    """

    id: str
    target: str
    parent: str | None = None
    excluded: bool = False
    turns: int = 0
    assistant_turns: int = 0
    created_at: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def dict(self) -> dict[str, Any]:
        """The JSON form (as stored)."""
        return {
            "id": self.id, "target": self.target, "parent": self.parent, "excluded": self.excluded,
            "turns": self.turns, "assistant_turns": self.assistant_turns, "created_at": self.created_at,
            "metadata": self.metadata,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Conversation:
        """Read a stored header."""
        return cls(
            id=str(value["id"]), target=str(value["target"]), parent=value.get("parent"),
            excluded=bool(value.get("excluded", False)), turns=int(value.get("turns", 0)),
            assistant_turns=int(value.get("assistant_turns", 0)), created_at=int(value.get("created_at", 0)),
            metadata=dict(value.get("metadata") or {}),
        )  # fmt: skip


def _turn_key(seq: int) -> str:
    return f"t{seq:09d}"


def _id_key(message_id: str) -> str:
    """The item recording which turn a client's message id was stored as (a retry finds it)."""
    return f"id:{message_id}"


class ConversationLog:
    """Conversations and their turns, stored as items on one branch of a memory store; turns as sent, or redacted
    when ``redact_turns`` is True (see the module docstring)."""

    def __init__(
        self, mem: Memory, *, branch: str = BRANCH, author: str = "writer", redact_turns: bool = False
    ) -> None:
        self.branch = branch
        self.author = author
        self.redact_turns = redact_turns
        _ensure_branch(mem, branch, author)
        self.mem = mem.handle(branch, author=author, read_only=False, system=True)
        #: Conversation id -> its namespace (this one's, or the older stores' ``conversations``), once found.
        self._where: dict[str, tuple[str, str]] = {}

    def _ns(self, conversation_id: str) -> tuple[str, str]:
        if not isinstance(conversation_id, str) or not conversation_id or "." in conversation_id:
            raise InvalidInputError(f"invalid conversation id {conversation_id!r}: a non-empty string without '.'")
        found = self._where.get(conversation_id)
        if found is not None:
            return found
        fresh, legacy = (NAMESPACE, conversation_id), (LEGACY_NAMESPACE, conversation_id)
        if self.mem.get(fresh, META, refresh_ttl=False) is not None:
            found = fresh
        elif self.mem.get(legacy, META, refresh_ttl=False) is not None:
            found = legacy
        else:
            return fresh  # not started yet: it will be under the system namespace
        self._where[conversation_id] = found  # a conversation never moves: looked up once
        return found

    def get(self, conversation_id: str) -> Conversation | None:
        """A conversation's header, or None."""
        item = self.mem.get(self._ns(conversation_id), META, refresh_ttl=False)
        return None if item is None else Conversation.from_dict(item.value)

    def require(self, conversation_id: str) -> Conversation:
        """A conversation's header, or :class:`NotFoundError`."""
        found = self.get(conversation_id)
        if found is None:
            raise NotFoundError(f"no conversation {conversation_id!r}: start it with a target first")
        return found

    def create(
        self,
        conversation_id: str,
        target: Sequence[str] | str,
        *,
        parent: str | None = None,
        excluded: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """Start a conversation feeding ``target`` (idempotent for the same target; another target is a conflict).

        ``parent`` marks a child/sub-agent conversation and ``excluded`` keeps it out of the writer: their
        turns are stored but never extracted from."""
        ns, tid = self._ns(conversation_id), target_id(target)
        header = Conversation(
            conversation_id, tid, parent, excluded, created_at=now_ms(), metadata=dict(metadata or {})
        )
        for _ in range(50):
            existing = self.get(conversation_id)
            if existing is not None:
                if existing.target != tid:
                    raise ConflictError(
                        f"conversation {conversation_id!r} feeds {existing.target!r}, not {tid!r}: use another id"
                    )
                return existing
            try:
                with self.mem.transaction(f"conversation {conversation_id}: start", author=self.author) as tx:
                    if tx.get(ns, META) is None:
                        tx.put(ns, META, header.dict(), index=False)
                return header
            except ConflictError:
                continue
        raise ConflictError(f"could not create conversation {conversation_id!r}: too many concurrent changes")

    def append(
        self,
        conversation_id: str,
        role: str,
        text: str,
        *,
        message_id: str | None = None,
        status: Status = "completed",
        tool_calls: Sequence[Mapping[str, Any]] = (),
        name: str | None = None,
    ) -> tuple[Conversation, Turn]:
        """Append a turn (as sent, or redacted when the log redacts) and return the updated header and the turn:
        one commit.

        A turn sent again with the same ``message_id`` (a client's retry) is not stored twice: the turn stored the
        first time is returned and nothing is written; the same id with another role, text or status is a
        :class:`ConflictError`."""
        ns = self._ns(conversation_id)
        if role not in ROLES:
            raise InvalidInputError(f"invalid role {role!r}: one of {', '.join(ROLES)}")
        if status not in ("completed", "aborted"):
            raise InvalidInputError(f"invalid status {status!r}: 'completed' or 'aborted'")
        if not isinstance(text, str):
            raise InvalidInputError("a turn's text must be a string")
        if message_id is not None and (not isinstance(message_id, str) or not message_id):
            raise InvalidInputError(f"invalid message id {message_id!r}: a non-empty string")
        calls = tuple(dict(call) for call in tool_calls)
        if self.redact_turns:
            calls = tuple(dict(redact_value(call)) for call in calls)
            text = redact(text)
        for _ in range(100):
            header = self.require(conversation_id)
            sent = None if message_id is None else self.mem.get(ns, _id_key(message_id), refresh_ttl=False)
            if sent is not None:  # a retry of a turn already stored: nothing to write
                return header, self._same(ns, int(sent.value["seq"]), (role, text, status), message_id)
            seq = header.turns + 1
            turn = Turn(
                conversation_id, seq, role, text, message_id or f"{conversation_id}:{seq}", status, calls, name,
                now_ms(),
            )  # fmt: skip
            counted = header.assistant_turns + (1 if turn.counts else 0)
            updated = Conversation(
                header.id, header.target, header.parent, header.excluded, seq, counted, header.created_at,
                header.metadata,
            )  # fmt: skip
            try:
                with self.mem.transaction(f"conversation {conversation_id}: {role} turn {seq}") as tx:
                    current = tx.get(ns, META)
                    if current is None or int(current.value.get("turns", 0)) != header.turns:
                        continue
                    tx.put(ns, META, updated.dict(), index=False)
                    tx.put(ns, _turn_key(seq), turn.dict(), index=False, sources=(turn.message_id,))
                    if message_id is not None:
                        tx.put(ns, _id_key(message_id), {"seq": seq}, index=False)
            except ConflictError:
                continue
            return updated, turn
        raise ConflictError(f"could not append to conversation {conversation_id!r}: too many concurrent appends")

    def _same(self, ns: tuple[str, str], seq: int, sent: tuple[str, str, str], message_id: str | None) -> Turn:
        """The stored turn ``seq`` when ``sent`` (role, text as stored, status) is that turn sent again, else
        :class:`ConflictError`."""
        item = self.mem.get(ns, _turn_key(seq), refresh_ttl=False)
        stored = None if item is None else Turn.from_dict(item.value)
        if stored is None or (stored.role, stored.text, stored.status) != sent:
            raise ConflictError(
                f"message id {message_id!r} was appended to conversation {ns[1]!r} as turn {seq} with another role, "
                "text or status: a retry sends the same turn (or a new message id)"
            )
        return stored

    def turns(self, conversation_id: str, first: int, last: int) -> list[Turn]:
        """Turns ``first..last`` (inclusive, by seq) that exist, in order."""
        ns = self._ns(conversation_id)
        first = max(first, 1)
        if last < first:
            return []
        found = self.mem.batch([GetOp(ns, _turn_key(seq), False) for seq in range(first, last + 1)])
        return [Turn.from_dict(item.value) for item in found if item is not None]


def _ensure_branch(mem: Memory, branch: str, author: str) -> None:
    """Create the conversations branch as a root commit with an empty tree (it shares nothing with main)."""
    repo = mem.repo
    if repo.refs.get(HEADS + branch) is not None:
        return
    commit = repo.write_commit(empty_tree(repo.nodes), (), author, f"{branch}: start")
    repo.refs.set(HEADS + branch, commit.id, None, actor=author, reason="writer: conversations branch")
