"""Pattern detection: cluster similar messages by embedding, and record clusters as pattern notes.

Clustering is leader clustering in message order (oldest first): a message joins the first cluster whose
first message (its *seed*) has a cosine of at least ``threshold`` with it, else it seeds a new cluster.
The same messages always give the same clusters, and a cluster keeps its seed as messages are added, so
its id (the seed's message id) is stable across runs: re-running never duplicates a pattern note.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engram.channels import _layout as layout
from engram.channels._steps import Writer, confidence_of
from engram.channels.hub import Hub
from engram.channels.model import Agent, Message, Pattern, Patterns
from engram.channels.notes import edit_note, write_note
from engram.embed import HashingEmbedder
from engram.embed.base import Embedder
from engram.errors import EmbedderError, InvalidInputError
from engram.store import Memory

#: The confidence of a pattern note: 0.5 + 0.05 per member past the first, at most this much.
MAX_PATTERN_CONFIDENCE = 0.95


def pattern_confidence(count: int) -> float:
    """The confidence a pattern note of a ``count``-message cluster is written with: 0.5 + 0.05 per member past
    the first (3 -> 0.6, 4 -> 0.65), at most :data:`MAX_PATTERN_CONFIDENCE`; feedback moves it from there."""
    return round(min(MAX_PATTERN_CONFIDENCE, 0.5 + 0.05 * (count - 1)), 6)


def cluster(memory: Memory, messages: list[Message], *, min_cluster: int = 3, threshold: float = 0.75) -> Patterns:
    """Clusters of at least ``min_cluster`` similar messages, largest first (ties: oldest seed first), embedded by
    ``memory``'s embedder; ``degraded`` on the result says why the lexical hashing embedder was used instead."""
    if isinstance(min_cluster, bool) or not isinstance(min_cluster, int) or min_cluster < 2:
        raise InvalidInputError(f"min_cluster must be an integer >= 2, got {min_cluster!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not -1 <= threshold <= 1:
        raise InvalidInputError(f"threshold must be a cosine between -1 and 1, got {threshold!r}")
    ordered = sorted(messages, key=lambda m: (m.created_at, m.channel, m.number))
    if not ordered:
        return Patterns([])
    vectors, degraded = _embed(memory.pool.embedder, [m.content for m in ordered])
    seeds: list[int] = []
    members: dict[int, list[int]] = {}
    for i in range(len(ordered)):
        home = next((s for s in seeds if float(vectors[s] @ vectors[i]) >= threshold), None)
        if home is None:
            seeds.append(i)
            members[i] = [i]
        else:
            members[home].append(i)
    found = []
    for seed in seeds:
        group = members[seed]
        if len(group) < min_cluster:
            continue
        sims = vectors[group] @ vectors[group].T
        best = group[int(np.argmax(sims.mean(axis=1)))]  # argmax takes the first (oldest) of equals
        found.append(Pattern(
            id=ordered[seed].id,
            members=tuple(ordered[j].id for j in group),
            representative=ordered[best].content,
            count=len(group),
            channels=tuple(sorted({ordered[j].channel for j in group})),
        ))  # fmt: skip
    found.sort(key=lambda p: -p.count)
    return Patterns(found, degraded)


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


def _embed(embedder: Embedder | None, texts: list[str]) -> tuple[np.ndarray, str | None]:
    """Unit vectors of ``texts`` from the store's embedder, or (no embedder, or it fails) the lexical hashing
    embedder, which needs no model; and why it fell back (None when it did not)."""
    if embedder is None:
        degraded = "the store has no embedder: clustered with the lexical hashing embedder instead"
    else:
        try:
            return np.asarray(embedder.embed(texts), dtype=np.float32), None
        except EmbedderError as exc:
            degraded = f"embedder unavailable, clustered with the lexical hashing embedder instead: {exc}"
    return np.asarray(HashingEmbedder().embed(texts), dtype=np.float32), degraded
