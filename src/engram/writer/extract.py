"""The extractor seam: what a run hands a model (a request) and what the model acts through (a workspace).

An :class:`Extractor` gets one :class:`ExtractRequest` per step (a chunk of new turns that fits the token
budget, with the target's relevant memories and a window of earlier turns) and acts on a :class:`Workspace`:
read and search memories, add, update (compare-and-swap on the item's version) or delete them, or say there is
nothing new. Every call is recorded (inputs, output, duration) for the run's trace. The workspace buffers the
writes: the run commits them as one commit on its review branch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from engram.errors import InvalidInputError, ItemNotFoundError, StaleMemoryError
from engram.store import Item, Memory, Transaction
from engram.writer.conversations import Turn
from engram.writer.redact import redact

#: Characters per token in the budget estimate (a conservative average for English and code).
CHARS_PER_TOKEN = 4


def tokens(text: str) -> int:
    """An estimate of ``text``'s length in model tokens (no tokenizer needed)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class MemoryNote:
    """A memory as the model sees it: key, text, version (for compare-and-swap) and where it came from."""

    key: str
    text: str
    version: str
    kind: str = "fact"
    subject: str | None = None
    sources: tuple[str, ...] = ()

    def dict(self) -> dict[str, Any]:
        """The JSON form (what a tool returns to the model)."""
        return {"key": self.key, "text": self.text, "version": self.version, "kind": self.kind,
                "subject": self.subject, "sources": list(self.sources)}  # fmt: skip


def note_of(item: Item) -> MemoryNote:
    """The note of a stored memory item (its version is its ``updated_at`` in UTC ms)."""
    value = item.value
    text = value.get("text")
    return MemoryNote(
        key=item.key,
        text=str(text) if text is not None else str(value),
        version=str(int(item.updated_at.timestamp() * 1000)),
        kind=str(value.get("kind", "fact")),
        subject=value.get("subject"),
        sources=item.sources,
    )


@dataclass(frozen=True, slots=True)
class Action:
    """One change a run made: ``add``, ``update`` or ``delete`` of the memory at ``key``."""

    op: str
    key: str
    text: str | None
    sources: tuple[str, ...]
    previous: str | None = None

    def dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"op": self.op, "key": self.key, "text": self.text, "sources": list(self.sources),
                "previous": self.previous}  # fmt: skip


@dataclass(slots=True)
class Step:
    """One step of a run, as its trace records it."""

    index: int
    prompt: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: float = 0.0
    error: str | None = None

    def dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "index": self.index, "prompt": self.prompt, "tool_calls": self.tool_calls, "model_calls": self.model_calls,
            "duration_ms": round(self.duration_ms, 3), "error": self.error,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class ExtractRequest:
    """What one step asks of an extractor.

    Attributes:
        target: the namespace the memories go to.
        turns: the new turns of this step (a chunk; a turn too large for the budget comes in parts).
        context: earlier, already processed turns shown for context only.
        memories: the target's memories most relevant to the turns, within the memory budget.
        instructions: the app's extra instructions, if any.
        prompt: everything above rendered as one text (what a language model reads).
        step: this step's index (0-based) and ``steps`` how many the run has.
    """

    target: tuple[str, ...]
    turns: tuple[Turn, ...]
    context: tuple[Turn, ...]
    memories: tuple[MemoryNote, ...]
    instructions: str | None
    prompt: str
    step: int = 0
    steps: int = 1

    @property
    def message_ids(self) -> tuple[str, ...]:
        """The message ids of this step's turns, in order, without repeats."""
        return tuple(dict.fromkeys(t.message_id for t in self.turns))


@runtime_checkable
class Extractor(Protocol):
    """Turns new conversation turns into memory actions through a :class:`Workspace`."""

    #: The model's name, recorded in each run's commit metadata.
    model: str

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        """Act on ``workspace`` for one step; raise :class:`~engram.errors.WriterError` when the model fails."""
        ...


def model_of(extractor: Extractor | None) -> str:
    """An extractor's model name, as run records and traces give it (``none`` without one)."""
    return "none" if extractor is None else str(getattr(extractor, "model", type(extractor).__name__))


class Workspace:
    """A run's view of its target's memories: reads see the run's own writes, writes are buffered in the run's
    transaction (one commit at the end), redacted, and compare-and-swapped on the item's version."""

    def __init__(
        self,
        tx: Transaction,
        namespace: tuple[str, ...],
        search: Callable[[str, int], list[Item]],
        *,
        run_id: str,
        new_key: Callable[[], str],
    ) -> None:
        self._tx = tx
        self.namespace = namespace
        self._search = search
        self.run_id = run_id
        self._new_key = new_key
        self.actions: list[Action] = []
        self.step: Step | None = None
        self.allowed_sources: tuple[str, ...] = ()
        self.finished_reason: str | None = None
        self._written: dict[str, int] = {}
        self._deleted: set[str] = set()

    def _record(self, name: str, arguments: dict[str, Any], started: float, result: Any, error: str | None) -> None:
        if self.step is not None:
            self.step.tool_calls.append({
                "name": name, "arguments": arguments, "result": result, "error": error,
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            })  # fmt: skip

    def _current(self, key: str) -> MemoryNote | None:
        item = self._tx.get(self.namespace, key)
        if item is None:
            return None
        note = note_of(item)
        if key in self._written:
            return MemoryNote(note.key, note.text, f"{note.version}.{self._written[key]}", note.kind, note.subject,
                              note.sources)  # fmt: skip
        return note

    def read(self, key: str) -> MemoryNote | None:
        """The memory at ``key`` as this run sees it, or None."""
        started = time.perf_counter()
        note = self._current(key)
        self._record("read_memory", {"key": key}, started, None if note is None else note.dict(), None)
        return note

    def search(self, query: str, limit: int = 5) -> list[MemoryNote]:
        """The target's memories most relevant to ``query`` (including this run's writes)."""
        started = time.perf_counter()
        limit = max(1, min(int(limit), 50))
        found: dict[str, MemoryNote] = {}
        words = set(re.findall(r"\w+", query.lower()))
        for key in self._written:  # this run's own writes first: the index does not have them yet
            note = self._current(key)
            if note is not None and words & set(re.findall(r"\w+", note.text.lower())):
                found[key] = note
        for item in self._search(query, limit + len(self._deleted) + len(self._written)):
            if item.key in found or item.key in self._deleted or item.namespace != self.namespace:
                continue
            note = self._current(item.key)
            if note is not None:
                found[item.key] = note
        out = list(found.values())[:limit]
        self._record("search_memories", {"query": query, "limit": limit}, started, [n.dict() for n in out], None)
        return out

    def recent(self, limit: int = 50) -> list[MemoryNote]:
        """The target's most recently updated memories (as this run sees them), not recorded as a tool call."""
        notes = [self._current(key) for key in self._written]
        for item in self._search("", limit + len(self._deleted)):
            if item.namespace == self.namespace and item.key not in self._deleted and item.key not in self._written:
                notes.append(self._current(item.key))
        return [n for n in notes if n is not None][:limit]

    def _check(self, key: str, expected_version: str | None) -> MemoryNote:
        current = self._current(key)
        if current is None:
            raise ItemNotFoundError(f"no memory {key!r} in {'.'.join(self.namespace)}")
        if expected_version is None or str(expected_version) != current.version:
            raise StaleMemoryError(
                f"memory {key!r} is at version {current.version}, not {expected_version}: read it again",
                current.version,
            )
        return current

    def _sources(self, sources: Sequence[str]) -> tuple[str, ...]:
        given = tuple(dict.fromkeys(str(s) for s in sources if str(s) in self.allowed_sources))
        return given or self.allowed_sources

    def write(
        self,
        text: str,
        *,
        key: str | None = None,
        expected_version: str | None = None,
        sources: Sequence[str] = (),
        kind: str = "fact",
        subject: str | None = None,
    ) -> MemoryNote:
        """Add a memory (``key`` None or new) or update one (``expected_version`` must be its current version,
        else :class:`StaleMemoryError`). ``sources`` are message ids of this step's turns (default: all)."""
        started = time.perf_counter()
        args = {"text": text, "key": key, "expected_version": expected_version, "sources": list(sources),
                "kind": kind, "subject": subject}  # fmt: skip
        try:
            clean = redact(str(text)).strip()
            if not clean:
                raise InvalidInputError("a memory's text must not be empty")
            previous: MemoryNote | None = None
            if key is not None and self._current(key) is not None:
                previous = self._check(key, expected_version)
            name = key or self._new_key()
            cited = self._sources(sources)
            value: dict[str, Any] = {"text": clean, "kind": str(kind or "fact"), "writer_run": self.run_id}
            if subject:
                value["subject"] = redact(str(subject))
            self._tx.put(self.namespace, name, value, sources=cited)
            self._written[name] = self._written.get(name, 0) + 1
            self._deleted.discard(name)
            op = "add" if previous is None else "update"
            self.actions.append(Action(op, name, clean, cited, None if previous is None else previous.text))
            note = self._current(name)
            assert note is not None
        except Exception as exc:
            self._record("write_memory", args, started, None, f"{type(exc).__name__}: {exc}")
            raise
        self._record("write_memory", args, started, note.dict(), None)
        return note

    def delete(self, key: str, expected_version: str | None, *, sources: Sequence[str] = ()) -> None:
        """Delete a memory at its current version (else :class:`StaleMemoryError`)."""
        started = time.perf_counter()
        args = {"key": key, "expected_version": expected_version}
        try:
            previous = self._check(key, expected_version)
            self._tx.delete(self.namespace, key)
            self._written.pop(key, None)
            self._deleted.add(key)
            self.actions.append(Action("delete", key, None, self._sources(sources), previous.text))
        except Exception as exc:
            self._record("delete_memory", args, started, None, f"{type(exc).__name__}: {exc}")
            raise
        self._record("delete_memory", args, started, {"deleted": key}, None)

    def no_new_memories(self, reason: str = "") -> None:
        """Say this step has nothing worth remembering."""
        self.finished_reason = redact(reason) or "no new memories"
        self._record("no_new_memories", {"reason": reason}, time.perf_counter(), None, None)


SYSTEM = (
    "You maintain the long-term memory of an assistant about one subject (a user or a project). From the new "
    "conversation turns, keep durable facts, preferences and decisions: add new ones, update ones that changed "
    "(using the version you read), delete ones proven wrong. Never store secrets or passwords. Cite the message "
    "ids each memory comes from. When nothing is worth remembering, call no_new_memories."
)


def memory_notes(
    memory: Memory, target: tuple[str, ...], query: str, budget_tokens: int, workspace: Workspace | None = None
) -> list[MemoryNote]:
    """The target's memories most relevant to ``query`` within ``budget_tokens``, in a stable order (by key), read
    from ``workspace`` (a run's own view, its edits included) or else from ``memory``."""
    if workspace is not None:
        notes = (workspace.search(query, 50) if query.strip() else []) + workspace.recent(50)
    else:
        # a lookup by content, not a question about time: a date in the conversation must not filter what it finds
        found = list(memory.search(target, query, limit=50, refresh_ttl=False, when="off")) if query.strip() else []
        found += memory.search(target, None, limit=50, refresh_ttl=False)  # then the newest ones
        notes = [note_of(item) for item in found if item.namespace == target]
    kept: list[MemoryNote] = []
    used = 0
    seen: set[str] = set()
    for note in notes:  # best first, then newest, while the budget lasts
        cost = tokens(note.text) + 8
        if note.key in seen or used + cost > budget_tokens:
            continue
        kept.append(note)
        seen.add(note.key)
        used += cost
    return sorted(kept, key=lambda n: n.key)


def render_turn(turn: Turn) -> str:
    """One turn as a prompt line: ``[message id] role (name): text``."""
    who = turn.role if not turn.name else f"{turn.role} ({turn.name})"
    calls = f" [tool calls: {', '.join(str(c.get('name', '?')) for c in turn.tool_calls)}]" if turn.tool_calls else ""
    status = " [aborted]" if turn.status == "aborted" else ""
    return f"[{turn.message_id}] {who}{status}: {turn.text}{calls}"


def chunk_turns(turns: Sequence[Turn], budget_tokens: int) -> list[list[Turn]]:
    """Pack turns in order into chunks of at most ``budget_tokens``; a turn larger than the budget is cut into
    parts (each its own chunk, keeping its message id). Nothing is dropped."""
    budget = max(16, int(budget_tokens))
    chunks: list[list[Turn]] = []
    current: list[Turn] = []
    used = 0
    for turn in turns:
        size = tokens(render_turn(turn))
        if size > budget:
            if current:
                chunks.append(current)
                current, used = [], 0
            width = max(1, (budget - tokens(render_turn(_part(turn, "")))) * CHARS_PER_TOKEN)
            pieces = [turn.text[i : i + width] for i in range(0, len(turn.text), width)] or [""]
            chunks.extend([_part(turn, piece)] for piece in pieces)
            continue
        if used + size > budget and current:
            chunks.append(current)
            current, used = [], 0
        current.append(turn)
        used += size
    if current:
        chunks.append(current)
    return chunks


def _part(turn: Turn, text: str) -> Turn:
    return Turn(turn.conversation_id, turn.seq, turn.role, text, turn.message_id, turn.status, turn.tool_calls,
                turn.name, turn.created_at)  # fmt: skip


def render_prompt(
    target: tuple[str, ...],
    memories: Sequence[MemoryNote],
    context: Sequence[Turn],
    turns: Sequence[Turn],
    instructions: str | None,
    step: int,
    steps: int,
) -> str:
    """The prompt of one step (the tool-calling model's user message)."""
    lines = [f"Subject: {'.'.join(target)}", f"Step {step + 1} of {steps}.", ""]
    if instructions:
        lines += ["Instructions from the application:", instructions, ""]
    lines.append("Current memories (key, version: text):")
    lines += [f"- {m.key} (v{m.version}): {m.text}" for m in memories] or ["(none)"]
    if context:
        lines += ["", "Earlier turns (already processed, context only):"]
        lines += [render_turn(t) for t in context]
    lines += ["", "New turns:"]
    lines += [render_turn(t) for t in turns]
    return redact("\n".join(lines))
