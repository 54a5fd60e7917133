"""claude-slack's shapes over engram's channels: channel ids in claude-slack's formats, its filters, its result dicts.

A pure translation layer (no store access): :mod:`engram.compat._slack_core` calls it on the way in and out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram.channels import Channel, Message
from engram.errors import InvalidFilterError, InvalidInputError

#: The project a call without a project id acts in (so ``"proj:debugging"`` names its ``debugging`` channel).
DEFAULT_PROJECT = "proj"
#: claude-slack prefixes a project channel's id with ``proj_<project id>``: the adapter accepts it.
PROJECT_PREFIX = "proj_"
#: claude-slack's channel types, by engram's channel kinds.
CHANNEL_TYPES = {"channel": "channel", "dm": "direct", "notes": "notes"}


def channel_ref(channel_id: Any, default_project: str) -> str:
    """An engram channel id or name for one of claude-slack's channel ids.

    ``global:general`` and ``<project>:<name>`` are engram's own ids; ``proj_<project>:<name>`` (claude-slack's
    scoped form) names ``<project>:<name>``; ``proj:<name>`` is the default project's channel ``<name>`` (it is
    ``<project>:<name>`` itself when the default project is ``proj``); a bare name is resolved by the agent (its
    project's channel, else the global one)."""
    if not isinstance(channel_id, str) or not channel_id.strip():
        raise InvalidInputError(f"a channel id is a non-empty string, got {channel_id!r}")
    prefix, sep, name = channel_id.partition(":")
    if not sep:
        return channel_id
    if prefix == "proj":
        return f"{default_project}:{name}"
    if prefix.startswith(PROJECT_PREFIX):
        return f"{prefix.removeprefix(PROJECT_PREFIX)}:{name}"
    return channel_id


def metadata_filter(spec: Any) -> dict[str, Any] | None:
    """claude-slack's ``metadata_filters`` as engram's metadata filter: the same MongoDB operators and dotted paths
    (``{"resolution.status": "solved", "type": {"$in": [...]}}``); ``$not`` at the top level is claude-slack's
    negation of a sub-filter, written as ``$nor`` here."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidFilterError(f"metadata_filters must be a dict, got {type(spec).__name__}")
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "$not" and isinstance(value, Mapping):
            out["$nor"] = [metadata_filter(value)]
        elif key in ("$and", "$or", "$nor"):
            if not isinstance(value, list):
                raise InvalidFilterError(f"{key} takes a list of filters, got {value!r}")
            out[key] = [metadata_filter(part) for part in value]
        elif isinstance(value, Mapping) and not key.startswith("$"):
            out[key] = _operators(key, value)
        else:
            out[key] = value
    return out


def _operators(field: str, ops: Mapping[str, Any]) -> dict[str, Any]:
    """One field's condition with claude-slack's own operators written in engram's: ``$not_contains`` as
    ``$not: {$contains}``, ``$null: true|false`` as ``$eq|$ne: None``, ``$empty: true|false`` as "missing, null, ``""``
    or ``[]``" (or not). Its other operators are engram's too; an unknown one is an :class:`InvalidFilterError`."""
    out: dict[str, Any] = {}
    for op, arg in ops.items():
        if op in ("$null", "$empty") and not isinstance(arg, bool):
            raise InvalidFilterError(f"{op} on {field!r} requires a boolean, got {arg!r}")
        if op == "$not_contains":
            out["$not"] = {"$contains": arg}
        elif op == "$null":
            out["$eq" if arg else "$ne"] = None
        elif op == "$empty":
            out["$in" if arg else "$nin"] = [None, "", []]
        else:
            out[op] = arg
    return out


def combine(*filters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The filters that are given, as one (``$and`` of several)."""
    parts = [dict(f) for f in filters if f]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


def breadcrumbs_in(crumbs: Any) -> list[dict[str, Any]]:
    """claude-slack's breadcrumbs (a dict of anything) as engram's typed breadcrumbs: one ``json`` breadcrumb;
    engram's own list form passes through."""
    if crumbs is None:
        return []
    if isinstance(crumbs, Mapping):
        return [{"type": "json", "value": dict(crumbs)}]
    if isinstance(crumbs, list | tuple):
        return [dict(c) for c in crumbs]
    raise InvalidInputError(f"breadcrumbs must be a dict (or engram's list of typed breadcrumbs), got {crumbs!r}")


def breadcrumbs_out(message: Message) -> Any:
    """A note's breadcrumbs as the caller wrote them: the dict for a single ``json`` breadcrumb, else the list."""
    crumbs = list(message.breadcrumbs)
    if len(crumbs) == 1 and crumbs[0].get("type") == "json" and isinstance(crumbs[0].get("value"), dict):
        return crumbs[0]["value"]
    if not crumbs:
        return message.metadata.get("breadcrumbs", {})
    return crumbs


def message_dict(message: Message) -> dict[str, Any]:
    """A message as claude-slack returns one: ``id``, ``channel_id``, ``sender_id``, ``content``, ``metadata``,
    ``confidence``, ``timestamp`` (ISO 8601), ``thread_id``, and for a search ``score`` and ``search_scores``."""
    score = message.score
    out: dict[str, Any] = {
        "id": message.id,
        "channel_id": message.channel,
        "sender_id": message.sender,
        "content": message.content,
        "metadata": dict(message.metadata),
        "confidence": message.confidence,
        "timestamp": message.created_at.isoformat(),
        "updated_at": message.updated_at.isoformat(),
        "thread_id": message.thread,
        "score": score,
    }
    if score is not None:
        out["search_scores"] = {"final_score": score, **(message.explain or {}).get("components", {})}
    return out


def note_dict(message: Message) -> dict[str, Any]:
    """A note as claude-slack returns one (its message shape plus ``tags``, ``session_context`` and
    ``search_score``), with ``breadcrumbs`` as written."""
    out = message_dict(message)
    out["tags"] = list(message.tags)
    out["session_context"] = message.metadata.get("session_context")
    out["breadcrumbs"] = breadcrumbs_out(message)
    out["search_score"] = message.score
    return out


def channel_dict(channel: Channel) -> dict[str, Any]:
    """A channel as claude-slack lists one."""
    return {
        "id": channel.id,
        "name": channel.name,
        "channel_type": CHANNEL_TYPES.get(channel.kind, channel.kind),
        "access_type": channel.access,
        "scope": channel.scope,
        "project_id": channel.project,
        "description": channel.description,
        "created_by": channel.owner,
        "is_default": channel.default,
        "is_archived": channel.archived,
        "message_count": channel.count,
    }


def strings(values: Sequence[str] | None, what: str) -> list[str] | None:
    """A list of strings or None; a bare string is refused (a common slip for a one-element list)."""
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidInputError(f"{what} must be a list of strings, got {values!r}")
    return list(values)
