"""Where channels live in the versioned store, and the rules every name, id and value follows.

Everything is an item under the namespace label ``_channels`` (see ``docs/channels.md``)::

    ("_channels", "projects")                   key = project id      {name, description}
    ("_channels", "agents")                     key = agent id        {project, description, status, dm_policy, ...}
    ("_channels", "channels")                   key = channel id      {name, kind, scope, project, access, count, ...}
    ("_channels", "members", <channel id>)      key = agent id        {capabilities, muted, read}
    ("_channels", "memberships", <agent id>)    key = channel id      {}  (the same membership, by agent)
    ("_channels", "messages", <channel id>)     key = 12-digit number {content, text, metadata, confidence, ...}
    ("_channels", "feedback", <channel id>, <n>) key = agent id       {worked, note}
    ("_channels", "patterns", <agent id>)       key = seed message    {note, count}
    ("_channels", "events")                     key = 12-digit bucket {events: [{seq, topic, channel, message, ...}]}
    ("_channels", "state")                      key = "counters"      {events}
    ("_channels", "keys")                       key = API key id      {agents, read_all_notes}

Channel ids: ``global:<name>``, ``<project>:<name>``, ``dm:<agent>+<agent>`` (sorted) and ``notes:<agent>``.
A message id is ``<channel id>#<n>``, ``n`` counting from 1 in its channel, so a channel's messages are
dense keys and reading "the last 20" or "everything after my cursor" is a few direct lookups.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engram.errors import (
    ContentTooLargeError,
    InvalidChannelNameError,
    InvalidConfidenceError,
    InvalidFilterError,
    InvalidInputError,
)
from engram.store.filters import compile_filter

ROOT = "_channels"
PROJECTS = (ROOT, "projects")
AGENTS = (ROOT, "agents")
CHANNELS = (ROOT, "channels")
MESSAGES = (ROOT, "messages")
EVENTS = (ROOT, "events")
STATE = (ROOT, "state")
KEYS = (ROOT, "keys")
COUNTERS = "counters"

#: The confidence of a message or note sent without one: the ranking's neutral value, stored explicitly so
#: ``min_confidence``, ranking profiles and feedback all read the same number.
DEFAULT_CONFIDENCE = 0.5
NAME_RULE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?")
MENTION = re.compile(r"(?<![\w@.])@([a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?)(?![\w-])")
BREADCRUMB_TYPES = ("file", "commit", "decision", "pattern", "json")
RESERVED = frozenset({"global", "dm", "notes"})


def members_ns(channel: str) -> tuple[str, ...]:
    """The namespace of a channel's members."""
    return (ROOT, "members", channel)


def memberships_ns(agent: str) -> tuple[str, ...]:
    """The namespace of an agent's memberships (the same facts as ``members_ns``, keyed the other way)."""
    return (ROOT, "memberships", agent)


def messages_ns(channel: str) -> tuple[str, ...]:
    """The namespace of a channel's messages."""
    return (ROOT, "messages", channel)


def feedback_ns(channel: str, number: int) -> tuple[str, ...]:
    """The namespace of the feedback on one message."""
    return (ROOT, "feedback", channel, seq_key(number))


def patterns_ns(agent: str) -> tuple[str, ...]:
    """The namespace recording which clusters an agent already wrote as pattern notes."""
    return (ROOT, "patterns", agent)


#: Events per item of the event log: event ``seq`` is in bucket ``seq // EVENTS_PER_BUCKET``. Buckets keep the
#: log from being most of the store's items (it grows by one event per message).
EVENTS_PER_BUCKET = 32


def bucket_of(seq: int) -> int:
    """The bucket holding event ``seq``."""
    return seq // EVENTS_PER_BUCKET


def seq_key(number: int) -> str:
    """A sequence number as a key that sorts in numeric order."""
    return f"{number:012d}"


def check_name(name: Any, what: str = "channel name") -> str:
    """A valid name: lowercase letters, digits and hyphens (not first or last), at most 80 characters."""
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name):
        raise InvalidChannelNameError(
            f"invalid {what} {name!r}: use 1-80 lowercase letters, digits and hyphens, starting and ending "
            "with a letter or digit"
        )
    return name


def check_project(project: Any) -> str:
    """A valid project id (a name that is not one of the reserved channel prefixes)."""
    check_name(project, "project id")
    if project in RESERVED:
        raise InvalidChannelNameError(f"{project!r} is reserved and cannot be a project id")
    return str(project)


def channel_id(name: str, project: str | None) -> str:
    """The id of a named channel: ``global:<name>`` or ``<project>:<name>``."""
    return f"{project or 'global'}:{name}"


def dm_id(a: str, b: str) -> str:
    """The id of the direct-message channel of two agents (the same whoever starts it)."""
    first, second = sorted((a, b))
    return f"dm:{first}+{second}"


def notes_id(agent: str) -> str:
    """The id of an agent's private notes channel."""
    return f"notes:{agent}"


def message_id(channel: str, number: int) -> str:
    """The public id of message ``number`` of a channel."""
    return f"{channel}#{number}"


def parse_message_id(mid: Any) -> tuple[str, int]:
    """``(channel id, number)`` of a message id; :class:`InvalidInputError` when malformed."""
    if isinstance(mid, str) and "#" in mid:
        channel, _, number = mid.rpartition("#")
        if channel and number.isdigit() and int(number) > 0:
            return channel, int(number)
    raise InvalidInputError(f"malformed message id {mid!r}: expected '<channel id>#<number>'")


def check_confidence(value: Any, what: str = "confidence") -> float:
    """A confidence: a finite number in 0..1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidConfidenceError(f"{what} must be a number between 0 and 1, got {value!r}")
    if not 0 <= value <= 1:
        raise InvalidConfidenceError(f"{what} must be between 0 and 1, got {value!r}")
    return float(value)


def check_content(content: Any, limit: int, *, what: str = "content", empty: bool = False) -> str:
    """Message text: a string of at most ``limit`` characters, with more than whitespace unless ``empty``."""
    if not isinstance(content, str):
        raise InvalidInputError(f"{what} must be a string, got {type(content).__name__}")
    if not empty and not content.strip():
        raise InvalidInputError(f"{what} is empty: a message or note needs some text")
    if len(content) > limit:
        raise ContentTooLargeError(f"{what} is {len(content):,} characters; the limit is {limit:,}")
    return content


def check_json(value: Any, what: str, limit: int) -> dict[str, Any]:
    """A JSON object (metadata, session context) of at most ``limit`` encoded characters."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a JSON object, got {type(value).__name__}")
    try:
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not JSON: {exc}") from None
    if size > limit:
        raise ContentTooLargeError(f"{what} is {size:,} characters as JSON; the limit is {limit:,}")
    return dict(value)


def check_tags(tags: Any) -> list[str]:
    """Tags: non-empty strings, de-duplicated, in the order given."""
    if tags is None:
        return []
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise InvalidInputError(f"tags must be a list of strings, got {tags!r}")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or "\x00" in tag:
            raise InvalidInputError(f"a tag must be a non-empty string, got {tag!r}")
        if tag not in out:
            out.append(tag)
    return out


def check_breadcrumbs(crumbs: Any) -> list[dict[str, Any]]:
    """Typed breadcrumbs: ``{"type": file|commit|decision|pattern|json, "value": <JSON>}`` each."""
    if crumbs is None:
        return []
    if not isinstance(crumbs, Sequence) or isinstance(crumbs, str):
        raise InvalidInputError(f"breadcrumbs must be a list of objects, got {crumbs!r}")
    out = []
    for crumb in crumbs:
        if not isinstance(crumb, Mapping) or set(crumb) != {"type", "value"}:
            raise InvalidInputError(f"a breadcrumb is {{'type': ..., 'value': ...}}, got {crumb!r}")
        if crumb["type"] not in BREADCRUMB_TYPES:
            raise InvalidInputError(f"breadcrumb type must be one of {', '.join(BREADCRUMB_TYPES)}: {crumb!r}")
        out.append({"type": crumb["type"], "value": crumb["value"]})
    return out


def embedded_text(content: str, tags: Sequence[str] = (), crumbs: Sequence[Mapping[str, Any]] = ()) -> str:
    """The text a message or note is searched by: its content, then its tags and breadcrumbs."""
    parts = [content]
    if tags:
        parts.append("tags: " + " ".join(tags))
    for crumb in crumbs:
        value = crumb["value"]
        parts.append(f"{crumb['type']}: {value if isinstance(value, str) else json.dumps(value, sort_keys=True)}")
    return "\n".join(parts)


def mentions(content: str) -> list[str]:
    """The agent ids ``@mentioned`` in a text, in order, once each."""
    found: list[str] = []
    for name in MENTION.findall(content):
        if name not in found:
            found.append(name)
    return found


def metadata_filter(spec: Any) -> dict[str, Any] | None:
    """A user's filter on message metadata, as a filter on the stored value: every field path gains the
    ``metadata.`` prefix; operators and their arguments are kept. The filter is first compiled as given, so
    a malformed one raises :class:`InvalidFilterError` with the compiler's own message."""
    if spec is None:
        return None
    compile_filter(spec)
    return _prefixed(spec)


def _prefixed(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, arg in spec.items():
        if name in ("$and", "$or", "$nor"):
            out[name] = [_prefixed(part) for part in arg]
        elif name.startswith("$"):
            raise InvalidFilterError(f"unknown top-level operator {name!r}")
        else:
            out["metadata." + name] = arg
    return out
