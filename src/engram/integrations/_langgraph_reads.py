"""LangGraph's read semantics over one version of an engram store (the reads of :class:`EngramStore`).

Reads walk the versioned tree of one root, the source of truth: gets, the items in a search's scope,
namespace listings. LangGraph's stores return an expired item until a sweep deletes it, unless the
store's TTL config says ``omit_expired``; these reads do the same, so ``omit_expired`` decides.

Filters are engram's (MongoDB operators on dotted paths, a superset of LangGraph's six), with one
LangGraph courtesy: a filter *value* holding U+0000 is answered instead of refused (see
:func:`without_nul`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engram import codec
from engram.hashing import ChunkId
from engram.objects import Record, decode_record
from engram.store.filters import compile_filter, matches
from engram.tree import NodeStore, get, iter_entries

NUL = "\x00"
#: A condition no document meets, and one every document meets (MongoDB: ``$in []``, ``$nin []``).
_NEVER: tuple[str, list[Any]] = ("$in", [])
_ALWAYS: tuple[str, list[Any]] = ("$nin", [])


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored item of the version being read."""

    namespace: tuple[str, ...]
    key: str
    record: Record

    def expired(self, now: int) -> bool:
        """True when the item's TTL has run out at ``now`` (ms), swept or not."""
        return self.record.expires_at is not None and self.record.expires_at <= now


class Reads:
    """LangGraph-style reads of the tree at ``root`` at time ``now`` (ms)."""

    def __init__(self, nodes: NodeStore, root: ChunkId, now: int, *, omit_expired: bool) -> None:
        self.nodes = nodes
        self.root = root
        self.now = now
        self.omit_expired = omit_expired

    def visible(self, entry: Entry) -> bool:
        """An item is read unless it has expired and the store omits expired items."""
        return not (self.omit_expired and entry.expired(self.now))

    def get(self, namespace: Sequence[str], key: str) -> Entry | None:
        """The item at (namespace, key), or None."""
        data = get(self.nodes, self.root, codec.encode_key(namespace, key))
        if data is None:
            return None
        entry = Entry(tuple(namespace), key, decode_record(data))
        return entry if self.visible(entry) else None

    def _entries(self, start: bytes, end: bytes) -> Iterator[Entry]:
        for raw, data in iter_entries(self.nodes, self.root, start, end):
            namespace, key = codec.decode_key(raw)
            yield Entry(namespace, key, decode_record(data))

    def scope(self, prefix: Sequence[str], filter: Mapping[str, Any] | None) -> list[Entry]:
        """Every item under ``prefix`` that the filter matches, newest first (``updated_at``, then key order)."""
        compiled = compile_filter(without_nul(filter))
        found = [
            entry
            for entry in self._entries(*codec.prefix_range(prefix))
            if self.visible(entry) and matches(compiled, entry.record.value)
        ]
        found.sort(key=lambda entry: -entry.record.updated_at)
        return found

    def list_namespaces(
        self, conditions: Sequence[tuple[str, tuple[str, ...]]], max_depth: int | None, limit: int, offset: int
    ) -> list[tuple[str, ...]]:
        """Namespaces holding (visible) items that meet every ``(match_type, path)`` condition, truncated to
        ``max_depth`` labels, sorted, then paged. One seek per namespace; with ``omit_expired``, a namespace
        whose items have all expired is not listed."""
        literal: tuple[str, ...] = ()
        for match_type, path in conditions:
            head = path[: path.index("*")] if "*" in path else path
            if match_type == "prefix" and len(head) > len(literal):
                literal = head
        start, end = codec.prefix_range(literal)
        seen: set[tuple[str, ...]] = set()
        while True:
            first = next(iter_entries(self.nodes, self.root, start, end), None)
            if first is None:
                break
            namespace, _ = codec.decode_key(first[0])
            shown = namespace if max_depth is None else namespace[:max_depth]
            if shown not in seen and _meets(namespace, conditions) and self._holds_visible(namespace):
                seen.add(shown)
                if shown != namespace:  # everything below ``shown`` would show as ``shown`` again
                    start = codec.prefix_range(shown)[1]
                    continue
            start = codec.items_range(namespace)[1]  # on to its sub-namespaces, or what follows
        return sorted(seen)[offset : offset + limit]

    def _holds_visible(self, namespace: tuple[str, ...]) -> bool:
        if not self.omit_expired:
            return True
        return any(self.visible(entry) for entry in self._entries(*codec.items_range(namespace)))


def _meets(namespace: tuple[str, ...], conditions: Sequence[tuple[str, tuple[str, ...]]]) -> bool:
    """LangGraph's prefix/suffix matching: ``*`` stands for any one label."""
    for match_type, path in conditions:
        if len(path) > len(namespace):
            return False
        labels = namespace if match_type == "prefix" else namespace[len(namespace) - len(path) :]
        if any(want != "*" and want != label for want, label in zip(path, labels, strict=False)):
            return False
    return True


def without_nul(spec: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The filter with every comparison to a value holding U+0000 replaced by its answer.

    No stored value can hold U+0000 (engram refuses it everywhere), so equality with such a value
    never holds and inequality always does; ``$in``/``$nin`` drop such members; an order comparison
    with a string ``p + NUL + rest`` is the same as one with ``p`` (``<`` becomes ``<= p``, ``>=``
    becomes ``> p``). LangGraph's stores answer these filters (no match), so EngramStore does too.
    U+0000 in a field name, a ``$regex``, or an argument this cannot answer is still refused
    (:class:`~engram.errors.InvalidFilterError`).
    """
    if spec is None or not isinstance(spec, Mapping):
        return spec
    out: dict[Any, Any] = {}
    for name, arg in spec.items():
        if name in ("$and", "$or", "$nor") and isinstance(arg, list):
            out[name] = [without_nul(part) if isinstance(part, Mapping) else part for part in arg]
        elif isinstance(name, str) and not name.startswith("$"):
            out[name] = _condition(arg)
        else:
            out[name] = arg
    return out


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def _is_operators(arg: Any) -> bool:
    return isinstance(arg, Mapping) and bool(arg) and all(isinstance(k, str) and k.startswith("$") for k in arg)


def _condition(arg: Any) -> Any:
    """One field's condition (a value, or a mapping of operators) with U+0000 answered."""
    if not _is_operators(arg):
        return dict([_NEVER]) if _has_nul(arg) else arg
    pairs = [_operator(op, value) for op, value in arg.items()]
    if _NEVER in pairs:
        return dict([_NEVER])
    kept = [pair for pair in pairs if pair != _ALWAYS] or [_ALWAYS]
    if len({name for name, _ in kept}) < len(kept):
        return arg  # two rewritten bounds would share one operator: left as given, so it is refused
    return dict(kept)


def _operator(op: str, value: Any) -> tuple[str, Any]:
    if op == "$not" and _is_operators(value):
        return op, _condition(value)
    if not _has_nul(value):
        return op, value
    if op == "$eq":
        return _NEVER
    if op == "$ne":
        return _ALWAYS
    if op in ("$in", "$nin") and isinstance(value, list):
        return op, [member for member in value if not _has_nul(member)]
    if op in ("$all", "$contains"):
        return _NEVER
    if op in ("$gt", "$gte", "$lt", "$lte") and isinstance(value, str):
        before = value[: value.index(NUL)]
        return ("$gt" if op in ("$gt", "$gte") else "$lte"), before
    return op, value
