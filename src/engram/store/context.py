"""Read-back for prompts: the memories relevant to a query as one block of prompt text within a token budget.

:func:`build` runs one search (the first stage's top ``candidates``), then keeps what an agent should read:

- **Current facts only.** A search reads one version, so every key is at its newest value and deleted items are
  absent. The memory writer supersedes a memory by updating it in place (same key) or deleting it; when two of its
  memories on one subject exist side by side (a write that raced another run keeps both), the newest wins: a
  writer memory (its value has ``writer_run``) whose namespace holds a newer writer memory with the same
  ``subject`` is replaced by that newer one.
- **Once.** The same text (ignoring case and spacing) appears once, at its best rank.
- **Most relevant first, within the budget.** Lines go in rank order; a line that would pass the budget is left out
  and the next, shorter ones may still fit. The budget is counted by a real tokenizer (:mod:`engram.embed.tokens`).

Each line is ``[date] text (source: ids)``: the value's ``date`` field when it has one (else the day it was written,
UTC), the memory's text (its ``text``, ``content`` or ``memory`` field, else the whole value as JSON), and the
message ids it came from (else its key).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram.embed.tokens import TokenCounter, token_counter
from engram.errors import InvalidInputError
from engram.index.embedtext import memory_text
from engram.store.item import Item, SearchResults
from engram.store.operations import Mode, When

#: The default token budget of a context block.
BUDGET_TOKENS = 1000
#: How many search hits a context is chosen from by default.
CANDIDATES = 50
MAX_BUDGET_TOKENS = 1_000_000
MAX_CANDIDATES = 1000
#: How many writer memories on one subject are looked at to find the newest.
SUBJECT_SCAN = 50

#: A search as :func:`build` calls it: ``search(namespace_prefix, query, filter=..., limit=..., mode=...)``.
Search = Callable[..., SearchResults]


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One memory in a context block: where it is, its search score, and what its line costs in tokens."""

    namespace: tuple[str, ...]
    key: str
    score: float | None
    tokens: int
    line: str

    def dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"namespace": list(self.namespace), "key": self.key, "score": self.score, "tokens": self.tokens,
                "line": self.line}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Context:
    """A block of prompt text and what it holds.

    Attributes:
        text: the lines, most relevant first, joined by newlines ("" when nothing was found).
        items: the memories in ``text``, in order.
        tokens: the tokens of ``text``, counted by ``tokenizer`` (never more than ``budget_tokens``).
        budget_tokens: the budget asked for.
        tokenizer: the tokenizer that counted (e.g. ``wordpiece:all-MiniLM-L6-v2``).
        mode: the search mode that ran; ``degraded`` says why it was weaker than asked, else None.
        left_out: current, distinct memories found that did not fit in the budget.
        duplicates: hits left out because an earlier line has the same text.
        superseded: writer memories replaced by a newer one on the same subject.
    """

    text: str
    items: tuple[ContextItem, ...]
    tokens: int
    budget_tokens: int
    tokenizer: str
    mode: str
    degraded: str | None = None
    left_out: int = 0
    duplicates: int = 0
    superseded: int = 0

    def __str__(self) -> str:
        return self.text

    def dict(self) -> dict[str, Any]:
        """The JSON form every door returns."""
        return {
            "text": self.text,
            "items": [item.dict() for item in self.items],
            "tokens": self.tokens,
            "budget_tokens": self.budget_tokens,
            "tokenizer": self.tokenizer,
            "mode": self.mode,
            "degraded": self.degraded,
            "left_out": self.left_out,
            "duplicates": self.duplicates,
            "superseded": self.superseded,
        }


def check(query: object, budget_tokens: object, candidates: object) -> tuple[str, int, int]:
    """Validate a context request's query, budget and candidate count."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("a context needs a non-empty query string")
    limits = (("budget_tokens", budget_tokens, MAX_BUDGET_TOKENS), ("candidates", candidates, MAX_CANDIDATES))
    for name, number, top in limits:
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= top:
            raise InvalidInputError(f"{name} must be an integer from 1 to {top}, got {number!r}")
    return query, budget_tokens, candidates  # type: ignore[return-value]  # both checked above


def build(
    search: Search,
    namespace_prefix: tuple[str, ...],
    query: str,
    *,
    budget_tokens: int = BUDGET_TOKENS,
    filter: Mapping[str, Any] | None = None,
    candidates: int = CANDIDATES,
    mode: Mode | None = None,
    tokenizer: str | TokenCounter | None = None,
    when: When = None,
    reference_time: datetime | str | int | None = None,
) -> Context:
    """The context block for ``query`` under ``namespace_prefix`` (see the module doc); ``search`` reads the
    version the block is for. ``when`` and ``reference_time`` rank (and filter) the hits by time as a search's do."""
    query, budget_tokens, candidates = check(query, budget_tokens, candidates)
    counter = token_counter(tokenizer)
    found = search(
        namespace_prefix, query, filter=filter, limit=candidates, mode=mode, when=when, reference_time=reference_time
    )
    current, superseded = _current(search, found, filter)
    chosen: list[tuple[Item, float | None, str]] = []
    seen: set[str] = set()
    duplicates = 0
    for item, score in current:
        text = _text(item.value)
        norm = " ".join(text.casefold().split())
        if norm in seen:
            duplicates += 1
            continue
        seen.add(norm)
        chosen.append((item, score, _line(item, text)))
    kept, total = _fit(counter, [line for _, _, line in chosen], budget_tokens)
    items = tuple(ContextItem(chosen[i][0].namespace, chosen[i][0].key, chosen[i][1], cost, chosen[i][2])
                  for i, cost in kept)  # fmt: skip
    text = "\n".join(item.line for item in items)
    return Context(text, items, total, budget_tokens, counter.name, found.mode, found.degraded,
                   len(chosen) - len(items), duplicates, superseded)  # fmt: skip


def _fit(counter: TokenCounter, lines: list[str], budget: int) -> tuple[list[tuple[int, int]], int]:
    """Which lines go in, in order, as (index, tokens), and the tokens of the block they make: each line that
    still fits, so a shorter one may follow one left out. An additive counter (see :mod:`engram.embed.tokens`)
    needs no newline between lines and skips, untokenized, a line with more words than the room left; for any
    other the block's real count is checked and lines dropped from the end until it fits."""
    additive = getattr(counter, "additive", False) is True
    kept: list[tuple[int, int]] = []
    used = 0
    for index, line in enumerate(lines):
        newline = 0 if additive or not kept else 1
        if additive and used + len(line.split()) > budget:
            continue
        cost = counter.count_many([line])[0]
        if used + newline + cost <= budget:
            kept.append((index, cost))
            used += newline + cost
    if additive:
        return kept, used
    total = _count_block(counter, lines, kept)
    while total > budget:  # a tokenizer whose tokens merge across lines: trust the real count
        kept.pop()
        total = _count_block(counter, lines, kept)
    return kept, total


def _count_block(counter: TokenCounter, lines: list[str], kept: list[tuple[int, int]]) -> int:
    return counter.count_many(["\n".join(lines[i] for i, _ in kept)])[0] if kept else 0


def _current(
    search: Search, found: SearchResults, filter: Mapping[str, Any] | None
) -> tuple[list[tuple[Item, float | None]], int]:
    """The hits with each writer memory replaced by the newest one on its subject (that ``filter`` accepts); how
    many were replaced."""
    out: list[tuple[Item, float | None]] = []
    keys: set[tuple[tuple[str, ...], str]] = set()
    newest: dict[tuple[tuple[str, ...], str], Item] = {}
    superseded = 0
    for hit in found:
        item: Item = hit
        subject = _subject(hit)
        if subject is not None:
            place = (hit.namespace, subject)
            if place not in newest:
                newest[place] = _newest(search, hit, subject, filter)
            if newest[place].key != hit.key:
                superseded += 1
                item = newest[place]
        if (item.namespace, item.key) not in keys:
            keys.add((item.namespace, item.key))
            out.append((item, hit.score))
    return out, superseded


def _subject(item: Item) -> str | None:
    subject = item.value.get("subject")
    if "writer_run" in item.value and isinstance(subject, str) and subject:
        return subject
    return None


def _newest(search: Search, item: Item, subject: str, filter: Mapping[str, Any] | None) -> Item:
    """The newest writer memory on ``subject`` in ``item``'s namespace that ``filter`` accepts (``item`` itself
    when it is)."""
    same: dict[str, Any] = {"subject": subject, "writer_run": {"$exists": True}}
    listing = search(item.namespace, None, filter=same if not filter else {"$and": [dict(filter), same]},
                     limit=SUBJECT_SCAN)  # fmt: skip
    best = item
    for other in listing:
        if other.namespace == item.namespace and (other.updated_at, other.key) > (best.updated_at, best.key):
            best = other
    return best


def _text(value: Mapping[str, Any]) -> str:
    text = memory_text(value)  # the same text search embeds
    if text is not None:
        return " ".join(text.split())
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _line(item: Item, text: str) -> str:
    date = item.value.get("date")
    when = " ".join(date.split()) if isinstance(date, str) and date.strip() else item.updated_at.date().isoformat()
    source = ", ".join(item.sources) if item.sources else item.key
    return f"[{when}] {text} (source: {source})"


__all__ = ["BUDGET_TOKENS", "CANDIDATES", "Context", "ContextItem", "build", "check"]
