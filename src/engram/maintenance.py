"""Keeping a store sound: ``fsck`` proves every chunk reachable from every ref exists and hashes right, ``gc``
deletes the chunks nothing reaches. Free functions over a chunk store, a ref store and the node store that
reads trees (DESIGN.md §3: a crash leaves unreachable chunks, never a ref pointing at something missing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from engram.backends.base import ChunkStore, RefStore, now_ms
from engram.errors import ChunkNotFoundError, IntegrityError
from engram.hashing import ChunkId, chunk_id
from engram.objects import decode_commit, is_commit
from engram.tree import NodeStore, decode_node

#: Chunks written this recently are never collected: a writer may not have moved its ref yet.
GC_GRACE_MS = 10 * 60 * 1000
#: Chunks per read of the reachability walk.
WALK_BATCH = 500


@dataclass(frozen=True, slots=True)
class FsckReport:
    """What :func:`fsck` checked and found."""

    commits: int
    nodes: int
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every reachable chunk is present and hashes right."""
        return not self.missing and not self.corrupt


@dataclass(frozen=True, slots=True)
class GcReport:
    """What :func:`gc` kept and removed."""

    kept: int
    removed: int
    reflog_pruned: int


def roots(refs: RefStore, keep_reflog_ms: int | None = None) -> tuple[set[ChunkId], int]:
    """Every ref's value and every reflog entry's new value, after pruning reflog entries older than
    ``keep_reflog_ms`` (None: prune nothing); returns them and how many entries were pruned."""
    pruned = 0 if keep_reflog_ms is None else refs.prune_reflog(now_ms() - keep_reflog_ms)
    found = set(refs.list().values())
    found.update(entry.new for entry in refs.reflog() if entry.new is not None)
    return found, pruned


def iter_reachable(
    chunks: ChunkStore,
    nodes: NodeStore,
    start: set[ChunkId],
    verify: bool = False,
    problems: dict[str, list[str]] | None = None,
    seen: set[ChunkId] | None = None,
) -> Iterator[tuple[ChunkId, str]]:
    """Yield (id, kind) of every chunk reachable from ``start`` (commits, their parents and trees). With
    ``problems``, missing and corrupt chunks are recorded there instead of raising. ``seen``: chunks the walk
    neither reads nor goes below (checked otherwise); the walk adds what it reaches to it.

    The walk goes wave by wave (each wave: the chunks the last one refers to), reading the next batch of a wave
    on another thread while this one checks and decodes the current batch (a store's reads and
    decompression overlap the hashing). Nodes are decoded from the bytes read (``nodes`` is not consulted)."""
    seen = set() if seen is None else seen
    wave = [cid for cid in dict.fromkeys(start) if cid not in seen]
    with ThreadPoolExecutor(1, thread_name_prefix="engram-walk") as reader:
        while wave:
            seen.update(wave)
            batches = [wave[i : i + WALK_BATCH] for i in range(0, len(wave), WALK_BATCH)]
            following: list[ChunkId] = []
            pending = reader.submit(_read_for_check, chunks, batches[0])
            for k, batch in enumerate(batches):
                found, bad = pending.result()
                if k + 1 < len(batches):
                    pending = reader.submit(_read_for_check, chunks, batches[k + 1])
                for cid in batch:
                    if cid in bad and problems is not None:
                        problems["corrupt"].append(cid.hex())
                        continue
                    data = found.get(cid)
                    if data is None:
                        if problems is not None:
                            problems["missing"].append(cid.hex())
                            continue
                        raise ChunkNotFoundError(f"chunk {cid.hex()} is missing; run fsck")
                    if verify and chunk_id(data) != cid:
                        if problems is not None:
                            problems["corrupt"].append(cid.hex())
                        continue
                    if is_commit(data):
                        commit = decode_commit(cid, data)
                        following.extend(commit.parents)
                        following.append(commit.tree)
                        yield cid, "commit"
                    else:
                        try:
                            node = decode_node(cid, data)
                        except IntegrityError:
                            if problems is not None:
                                problems["corrupt"].append(cid.hex())
                                continue
                            raise
                        if node.level > 0:
                            following.extend(node.child(i) for i in range(len(node.keys)))
                        yield cid, "node"
            wave = [cid for cid in dict.fromkeys(following) if cid not in seen]


def _read_for_check(chunks: ChunkStore, batch: list[ChunkId]) -> tuple[dict[ChunkId, bytes], set[ChunkId]]:
    """Read chunks; a store that validates on read raises for a corrupt one: isolate it."""
    try:
        return chunks.get_many(batch), set()
    except IntegrityError:
        found: dict[ChunkId, bytes] = {}
        bad: set[ChunkId] = set()
        for cid in batch:
            try:
                found.update(chunks.get_many([cid]))
            except IntegrityError:
                bad.add(cid)
        return found, bad


def fsck(
    chunks: ChunkStore, refs: RefStore, nodes: NodeStore, progress: Callable[[int], None] | None = None
) -> FsckReport:
    """Check that every chunk reachable from every ref and reflog entry exists and hashes right."""
    start, _ = roots(refs)
    problems: dict[str, list[str]] = {"missing": [], "corrupt": []}
    counts = {"commit": 0, "node": 0}
    for _, kind in iter_reachable(chunks, nodes, start, verify=True, problems=problems):
        counts[kind] += 1
        if progress is not None:
            progress(1)
    return FsckReport(counts["commit"], counts["node"], problems["missing"], problems["corrupt"])


def gc(
    chunks: ChunkStore,
    refs: RefStore,
    nodes: NodeStore,
    keep_reflog_ms: int | None = None,
    progress: Callable[[int], None] | None = None,
    *,
    grace_ms: int = GC_GRACE_MS,
) -> GcReport:
    """Delete chunks unreachable from refs and the (kept) reflog.

    ``keep_reflog_ms`` drops reflog entries older than that first (``None`` keeps the reflog). Only chunks last
    written more than ``grace_ms`` ago are candidates (re-storing a chunk renews it), so the chunks of a commit
    whose ref has not moved yet survive. ``grace_ms=0`` is safe only while no one writes.
    """
    candidates = set(chunks.iter_ids(written_before=now_ms() - grace_ms))
    start, pruned = roots(refs, keep_reflog_ms)
    while True:
        reachable = {cid for cid, _ in iter_reachable(chunks, nodes, start)}
        again, _ = roots(refs)
        if again <= start:
            break
        start |= again
    doomed = candidates - reachable
    listed = list(doomed)
    for i in range(0, len(listed), 1000):
        chunks.delete_many(listed[i : i + 1000])
        if progress is not None:
            progress(min(1000, len(listed) - i))
    return GcReport(kept=len(candidates) - len(doomed), removed=len(doomed), reflog_pruned=pruned)


__all__ = ["GC_GRACE_MS", "FsckReport", "GcReport", "fsck", "gc", "iter_reachable", "roots"]
