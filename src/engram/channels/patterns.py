"""Pattern detection: cluster similar messages by embedding, and record clusters as pattern notes.

Clustering is leader clustering in message order (oldest first): a message joins the first cluster whose
first message (its *seed*) has a cosine of at least ``threshold`` with it, else it seeds a new cluster.
The same messages always give the same clusters, and a cluster keeps its seed as messages are added, so
its id (the seed's message id) is stable across runs: re-running never duplicates a pattern note.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from engram.channels import _layout as layout
from engram.channels._steps import Writer, confidence_of
from engram.channels.hub import Hub
from engram.channels.model import Agent, Message, Pattern, Patterns
from engram.channels.notes import edit_note, write_note
from engram.embed import HashingEmbedder
from engram.errors import EmbedderError, InvalidInputError
from engram.index.cache import embed_through
from engram.store import Memory

#: What a message is clustered on by default: its text as indexed (see :func:`clustered_text`).
ON_MESSAGE = "message"
#: Cluster on the first non-blank line of the content (e.g. the error line of a report).
ON_FIRST_LINE = "first_line"
#: The prefix of a metadata field to cluster on, e.g. ``metadata.error.message``.
METADATA = "metadata."
#: The cosine a message needs with a cluster's seed to join it when the caller names none, by what clusters: a model
#: (MiniLM, and any other than the hashing one) or the lexical hashing embedder, on the whole message or on one line
#: (``first_line`` or a metadata field). Calibrated on error reports with stack traces (tests/channels/error_reports.py:
#: clusters of 3 found, pairs and single errors not); docs/channels.md gives the measured ranges.
DEFAULT_THRESHOLDS = {("model", "message"): 0.58, ("model", "line"): 0.7,
                      ("hashing", "message"): 0.46, ("hashing", "line"): 0.35}  # fmt: skip

#: The confidence of a pattern note: 0.5 + 0.05 per member past the first, at most this much.
MAX_PATTERN_CONFIDENCE = 0.95


def pattern_confidence(count: int) -> float:
    """The confidence a pattern note of a ``count``-message cluster is written with: 0.5 + 0.05 per member past
    the first (3 -> 0.6, 4 -> 0.65), at most :data:`MAX_PATTERN_CONFIDENCE`; feedback moves it from there."""
    return round(min(MAX_PATTERN_CONFIDENCE, 0.5 + 0.05 * (count - 1)), 6)


def cluster(
    memory: Memory, messages: list[Message], *, min_cluster: int = 3, threshold: float | None = None,
    on: str = ON_MESSAGE,
) -> Patterns:  # fmt: skip
    """Clusters of at least ``min_cluster`` similar messages, largest first (ties: oldest seed first), compared on
    ``on`` (see :func:`clustered_text`) with ``memory``'s embedder through its vector cache, so a text the index
    (or an earlier run) embedded is not embedded again. ``threshold`` None is the calibrated default for the
    embedder and ``on`` (:data:`DEFAULT_THRESHOLDS`); the result's ``threshold`` says which was used, and its
    ``degraded`` why the lexical hashing embedder was used instead of the store's."""
    if isinstance(min_cluster, bool) or not isinstance(min_cluster, int) or min_cluster < 2:
        raise InvalidInputError(f"min_cluster must be an integer >= 2, got {min_cluster!r}")
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, int | float) or not -1 <= threshold <= 1
    ):
        raise InvalidInputError(f"threshold must be a cosine between -1 and 1, got {threshold!r}")
    check_on(on)
    chosen = [(m, t) for m in sorted(messages, key=lambda m: (m.created_at, m.channel, m.number))
              if (t := clustered_text(m, on))]  # fmt: skip
    if not chosen:
        return Patterns([], threshold=threshold)
    ordered, texts = [m for m, _ in chosen], [t for _, t in chosen]
    vectors, degraded = _vectors(memory, texts)
    if threshold is None:
        lexical = degraded is not None or isinstance(memory.pool.embedder, HashingEmbedder)
        threshold = DEFAULT_THRESHOLDS["hashing" if lexical else "model", "message" if on == ON_MESSAGE else "line"]
    found = []
    for group in _leaders(vectors, threshold):
        if len(group) < min_cluster:
            continue
        sims = vectors[group] @ vectors[group].T
        best = group[int(np.argmax(sims.mean(axis=1)))]  # argmax takes the first (oldest) of equals
        found.append(Pattern(
            id=ordered[group[0]].id,
            members=tuple(ordered[j].id for j in group),
            representative=ordered[best].content if on == ON_MESSAGE else texts[best],
            count=len(group),
            channels=tuple(sorted({ordered[j].channel for j in group})),
        ))  # fmt: skip
    found.sort(key=lambda p: -p.count)
    return Patterns(found, degraded, threshold=threshold)


def check_on(on: Any) -> str:
    """``on`` when it names what messages can be clustered on, else :class:`InvalidInputError` saying what can."""
    if isinstance(on, str) and (on in (ON_MESSAGE, ON_FIRST_LINE) or (on.startswith(METADATA) and on != METADATA)):
        return on
    raise InvalidInputError(
        f"on must be {ON_MESSAGE!r}, {ON_FIRST_LINE!r} or a metadata field such as 'metadata.error.message', got {on!r}"
    )


def clustered_text(message: Message, on: str) -> str | None:
    """What ``message`` is compared on: ``"message"``, its text as indexed (content, tags and breadcrumbs, whose
    vector the store keeps); ``"first_line"``, the first non-blank line of its content; ``"metadata.<path>"``, that
    metadata field (a string as is, any other value as JSON). None (the message is left out) when it has none."""
    if on == ON_MESSAGE:
        return layout.embedded_text(message.content, message.tags, message.breadcrumbs)
    if on == ON_FIRST_LINE:
        return next((line.strip() for line in message.content.splitlines() if line.strip()), None)
    value: Any = message.metadata
    for part in on.removeprefix(METADATA).split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or value == "":
        return None
    return value.strip() or None if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _leaders(vectors: np.ndarray, threshold: float) -> list[list[int]]:
    """Leader clustering in order: each row joins the first group whose first row (its seed) has a cosine of at
    least ``threshold`` with it, else it seeds a new group. Groups in the order of their seeds."""
    seeds = np.empty_like(vectors)
    groups: list[list[int]] = []
    for i, vector in enumerate(vectors):
        hits = np.flatnonzero(seeds[: len(groups)] @ vector >= threshold)
        if len(hits):
            groups[int(hits[0])].append(i)
        else:
            seeds[len(groups)] = vector
            groups.append([i])
    return groups


def record(hub: Hub, agent: Agent, pattern: Pattern) -> Pattern:
    """Write (or bring up to date) ``agent``'s pattern note of a cluster; returns it with ``note`` and ``new`` set."""
    key = pattern.id.replace(":", "~")
    seen = hub.memory.get(layout.patterns_ns(agent.id), key)
    confidence = pattern_confidence(pattern.count)
    content = f"Recurring pattern ({pattern.count} messages): {pattern.representative}"
    crumbs = [{"type": "pattern", "value": {"seed": pattern.id, "members": list(pattern.members),
                                             "channels": list(pattern.channels)}}]  # fmt: skip
    if seen is not None:
        note = str(seen.value["note"])
        if int(seen.value["count"]) != pattern.count:

            def change(v: dict[str, Any]) -> dict[str, Any]:
                meta = {**v.get("metadata", {}), "count": pattern.count}
                text = layout.embedded_text(content, v.get("tags", ()), crumbs)
                moved = {"base_confidence": confidence, "confidence": confidence_of(confidence, v.get("feedback", {}))}
                return {**v, "content": content, "text": text, "breadcrumbs": crumbs, "metadata": meta, "edited": True,
                        **moved}  # fmt: skip

            edit_note(hub, agent, note, change, lambda w: _remember(w, agent.id, key, note, pattern))
        return _with(pattern, note, new=False)
    written = write_note(
        hub, agent, content, confidence=confidence, tags=["pattern"], breadcrumbs=crumbs,
        metadata={"type": "error_pattern", "seed": pattern.id, "count": pattern.count},
        then=lambda w, mid: _remember(w, agent.id, key, mid, pattern),
    )  # fmt: skip
    return _with(pattern, written.id, new=True)


def _remember(w: Writer, agent: str, key: str, note: str, pattern: Pattern) -> None:
    w.put(layout.patterns_ns(agent), key, {"note": note, "count": pattern.count, "seed": pattern.id})
    w.emit("pattern.detected", layout.notes_id(agent), note, seed=pattern.id, count=pattern.count)


def _with(pattern: Pattern, note: str, *, new: bool) -> Pattern:
    return Pattern(pattern.id, pattern.members, pattern.representative, pattern.count, pattern.channels, note, new)


def _vectors(memory: Memory, texts: list[str]) -> tuple[np.ndarray, str | None]:
    """Unit vectors of ``texts`` from the store's embedder through the store's vector cache (where both search
    engines keep the vectors of what they index), or (no embedder, or it fails) from the lexical hashing embedder,
    which needs no model; and why it fell back (None when it did not)."""
    pool = memory.pool
    if pool.embedder is None:
        degraded = "the store has no embedder: clustered with the lexical hashing embedder instead"
    else:
        cache = pool.cache if pool.cache is not None else pool.index(memory.branch).cache
        try:
            return np.stack(embed_through(pool.embedder, cache, texts)).astype(np.float32, copy=False), None
        except EmbedderError as exc:
            degraded = f"embedder unavailable, clustered with the lexical hashing embedder instead: {exc}"
    return np.asarray(HashingEmbedder().embed(texts), dtype=np.float32), degraded
