"""mem0's vocabulary without I/O: argument checks, the scope of a call, filters, and the result shapes.

The mem0 adapter (:mod:`engram.compat.mem0`) keeps one memory as one engram item whose value is::

    {"text": ..., "hash": md5(text), "metadata": {...}, "user_id": ..., "agent_id": ..., "run_id": ...,
     "actor_id": ..., "role": ...}

(absent ids are left out); ``created_at`` / ``updated_at`` are the item's own timestamps. Memories the writer
extracted (``infer=True``) carry its fields too (``kind``, ``subject``, ``writer_run``), which stay out of
``metadata``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from engram.errors import InvalidInputError
from engram.store import Item

#: The ids that scope a memory, in the order a namespace is derived from them.
ENTITY_IDS = ("user_id", "agent_id", "run_id")
#: Value fields shown at the top of a result (mem0 "promotes" them out of the payload).
PROMOTED = ("user_id", "agent_id", "run_id", "actor_id", "role", "expiration_date")
#: Value fields that are neither promoted nor metadata: the text, its hash and the writer's own fields.
CORE = frozenset({"text", "hash", "metadata", "kind", "subject", "writer_run"})
#: The label under which the adapter keeps its memories, and the namespace of its id index.
ROOT = "mem0"
INDEX_NAMESPACE = ("mem0-ids",)
#: mem0's operators in ``filters`` -> MongoDB's (engram's filter language).
_OPERATORS = {"eq": "$eq", "ne": "$ne", "in": "$in", "nin": "$nin", "gt": "$gt", "gte": "$gte", "lt": "$lt",
              "lte": "$lte", "contains": "$contains"}  # fmt: skip
_LOGICAL = {"AND": "$and", "OR": "$or", "NOT": "$nor"}
#: Labels of the namespace each id kind gives: ``("mem0", "users", <user_id>)`` and so on.
_KIND_LABELS = {"user_id": "users", "agent_id": "agents", "run_id": "runs"}


class ValidationError(InvalidInputError):
    """mem0's ``ValidationError`` (``Mem0ValidationError`` in mem0's code), with its attributes: ``message``,
    ``error_code`` (``VALIDATION_001`` ...), ``details``, ``suggestion``, ``debug_info``. Also a ``ValueError``
    (as every engram :class:`~engram.errors.InvalidInputError`)."""

    def __init__(
        self,
        message: str,
        error_code: str,
        details: dict[str, Any] | None = None,
        suggestion: str | None = None,
        debug_info: dict[str, Any] | None = None,
    ) -> None:
        self.message = message
        self.error_code = error_code
        self.details = details or {}
        self.suggestion = suggestion
        self.debug_info = debug_info or {}
        super().__init__(message)


def entity_id(value: Any, name: str) -> str | None:
    """An id as mem0 takes it: None stays None, others become a string without surrounding spaces; empty or
    containing whitespace is a ``ValueError``."""
    if value is None:
        return None
    text = (value if isinstance(value, str) else str(value)).strip()
    if not text:
        raise ValueError(f"Invalid {name}: cannot be empty or whitespace-only. Provide a valid identifier.")
    if any(c.isspace() for c in text):
        raise ValueError(f"Invalid {name}: cannot contain whitespace. Provide a valid identifier without spaces.")
    return text


def scope_of(user_id: Any, agent_id: Any, run_id: Any) -> dict[str, str]:
    """The ids of an ``add`` (checked); none at all is mem0's ``ValidationError`` ``VALIDATION_001``."""
    ids = {"user_id": entity_id(user_id, "user_id"), "agent_id": entity_id(agent_id, "agent_id"),
           "run_id": entity_id(run_id, "run_id")}  # fmt: skip
    scope = {name: value for name, value in ids.items() if value}
    if not scope:
        raise ValidationError(
            "At least one of 'user_id', 'agent_id', or 'run_id' must be provided.",
            "VALIDATION_001",
            {"provided_ids": ids},
            "Please provide at least one identifier to scope the memory operation.",
        )
    return scope


def namespace_of(scope: Mapping[str, str]) -> tuple[str, ...]:
    """Where memories of ``scope`` live: ``("mem0", "users", <user_id>)`` when the scope has a user, else
    ``("mem0", "agents", <agent_id>)``, else ``("mem0", "runs", <run_id>)``; the other ids are value fields."""
    for name in ENTITY_IDS:
        if name in scope:
            return (ROOT, _KIND_LABELS[name], scope[name])
    return (ROOT,)


def query_scope(filters: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The filters of a ``search`` / ``get_all``: ``filters`` plus ids given as keywords (mem0 1.x's form), ids
    checked; at least one id is required (mem0's ``ValueError``)."""
    merged = dict(filters or {})
    for name in ENTITY_IDS:
        if extra.get(name) is not None:
            merged[name] = extra[name]
        if name in merged:
            merged[name] = entity_id(merged[name], name)
    if not any(merged.get(name) for name in ENTITY_IDS):
        raise ValueError(
            "filters must contain at least one of: user_id, agent_id, run_id. Example: filters={'user_id': 'u1'}"
        )
    return merged


def check_search(threshold: Any, top_k: Any) -> None:
    """mem0's checks of ``threshold`` (a number on [0, 1]) and ``top_k`` (an int >= 0): ``ValueError``."""
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError("threshold must be a valid number")
        if threshold < 0 or threshold > 1:
            raise ValueError(f"Invalid threshold: {threshold}. Must be between 0 and 1 (inclusive).")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise ValueError("top_k must be a valid integer")
        if top_k < 0:
            raise ValueError(f"Invalid top_k: {top_k}. Must be a non-negative integer.")


def check_query(query: Any) -> str:
    """A search query as mem0 takes it: a non-empty string, trimmed (else ``ValueError``)."""
    if not isinstance(query, str):
        raise ValueError("Invalid query: must be a non-empty string.")
    text = query.strip()
    if not text:
        raise ValueError("Invalid query: cannot be empty or whitespace-only.")
    return text


def prefix_of(merged: Mapping[str, Any]) -> tuple[str, ...]:
    """The namespace prefix a search of these filters reads: the user's namespace when a user is given (every
    memory of a user lives there), else all of the adapter's memories (a memory of an agent or a run may live in
    its user's namespace); the filter does the rest."""
    if merged.get("user_id"):
        return (ROOT, "users", str(merged["user_id"]))
    return (ROOT,)


def engram_filter(merged: Mapping[str, Any]) -> dict[str, Any]:
    """mem0's ``filters`` as an engram (MongoDB) filter over the item's value: ids and ``actor_id`` / ``role``
    match their fields, other keys the ``metadata`` object; ``"*"`` means "has the key"; operators ``eq``,
    ``ne``, ``in``, ``nin``, ``gt``, ``gte``, ``lt``, ``lte``, ``contains``, ``icontains``; ``AND`` / ``OR`` /
    ``NOT`` (none of the conditions). An unknown operator is mem0's ``ValueError``."""
    parts: list[dict[str, Any]] = []
    for key, condition in merged.items():
        if key in _LOGICAL:
            if not isinstance(condition, list) or (key != "AND" and not condition):
                raise ValueError(f"{key} operator requires a {'non-empty ' if key != 'AND' else ''}list of conditions")
            parts.append({_LOGICAL[key]: [engram_filter(c) for c in condition]})
        elif condition is not None:
            parts.append({_path(key): _condition(condition)})
    if not parts:
        return {}
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _path(key: str) -> str:
    return key if key in PROMOTED else f"metadata.{key}"


def _condition(condition: Any) -> dict[str, Any]:
    if condition == "*":
        return {"$exists": True}
    if not isinstance(condition, dict):
        return {"$eq": condition}
    out: dict[str, Any] = {}
    for op, arg in condition.items():
        if op == "icontains":
            out["$regex"] = f"(?i){re.escape(str(arg))}"
        elif op in _OPERATORS:
            out[_OPERATORS[op]] = arg
        else:
            raise ValueError(f"Unsupported metadata filter operator: {op}")
    return out


def expiration(value: Any) -> str | None:
    """mem0's ``expiration_date``: a date, a datetime or a ``YYYY-MM-DD`` string, as that string (None stays
    None); anything else is mem0's ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError as exc:
            raise ValueError("expiration_date must be a valid date in YYYY-MM-DD format.") from exc
    raise ValueError("expiration_date must be a date string in YYYY-MM-DD format.")


def unexpired(condition: Mapping[str, Any]) -> dict[str, Any]:
    """``condition`` and "not expired": no ``expiration_date`` before today (UTC), as mem0 hides them."""
    today = datetime.now(UTC).date().isoformat()
    fresh = {"$nor": [{"expiration_date": {"$lt": today}}]}
    return {"$and": [dict(condition), fresh]} if condition else fresh


def messages_of(messages: Any) -> list[dict[str, Any]]:
    """``add``'s messages as a list of dicts: a string is one user message, a dict one message; anything else
    is mem0's ``ValidationError`` ``VALIDATION_003``."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, dict):
        return [messages]
    if not isinstance(messages, list):
        raise ValidationError(
            "messages must be str, dict, or list[dict]",
            "VALIDATION_003",
            {"provided_type": type(messages).__name__, "valid_types": ["str", "dict", "list[dict]"]},
            "Convert your input to a string, dictionary, or list of dictionaries.",
        )
    return list(messages)


def text_hash(text: str) -> str:
    """mem0's ``hash`` of a memory: the MD5 of its text, in hex (an identifier, not a security measure)."""
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def memory_value(text: str, metadata: Mapping[str, Any], scope: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    """The item value of a memory (see the module docstring); ``extra`` holds ``role`` / ``actor_id``."""
    clean = {k: v for k, v in metadata.items() if k not in PROMOTED}  # ids come from the scope, as in mem0
    value: dict[str, Any] = {"text": text, "hash": text_hash(text), "metadata": clean}
    value.update(scope)
    value.update({k: v for k, v in extra.items() if v is not None})
    return value


def text_of(item: Item) -> str:
    """A memory item's text."""
    text = item.value.get("text")
    return str(text) if text is not None else ""


def result_of(item: Item, score: float | None = None, *, with_score: bool = True) -> dict[str, Any]:
    """A memory as mem0 returns it: ``id``, ``memory``, ``hash``, ``metadata`` (None when empty), ``score``
    (left out by ``get_all``, as mem0 does), ``created_at``, ``updated_at`` (ISO 8601, UTC), then the promoted
    ids that are set."""
    value = item.value
    text = text_of(item)
    metadata = dict(value.get("metadata") or {})
    metadata.update({k: v for k, v in value.items() if k not in CORE and k not in PROMOTED})
    out: dict[str, Any] = {"id": item.key, "memory": text, "hash": value.get("hash") or text_hash(text),
                           "metadata": metadata or None}  # fmt: skip
    if with_score:
        out["score"] = score
    out["created_at"] = item.created_at.isoformat()
    out["updated_at"] = item.updated_at.isoformat()
    out.update({k: value[k] for k in PROMOTED if k in value})
    return out
