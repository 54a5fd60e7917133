"""Backups are pushes, restores are clones, both verified (DESIGN.md §3).

A backup named ``N`` on a remote is a set of refs ``backups/N/refs/<ref>`` (every branch, tag and store record
of the store, at the moment of the backup) plus, written last, ``backups/N/manifest``: a commit whose metadata
says when, by whom, how many items and how many bytes. Only the chunks the remote lacks are sent, so a backup
after a few changes costs a few chunks. A backup without its manifest was interrupted: it is not listed and the
next prune removes it.

``verify`` reads back every chunk a backup reaches and checks its hash; ``restore`` copies a backup into a store
and then runs a full ``fsck`` there; ``prune`` drops backups past a retention rule, then sweeps the chunks that
no kept backup (nor any other ref of the remote) reaches, parents before children so that an interrupted sweep
never leaves a chunk without what it refers to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from engram import observe
from engram.backends.base import now_ms
from engram.errors import ConflictError, IntegrityError, InvalidInputError, NotFoundError
from engram.hashing import ChunkId, chunk_id
from engram.maintenance import GC_GRACE_MS, FsckReport, iter_reachable, roots
from engram.objects import decode_commit, encode_commit, is_commit
from engram.ops.remotes.stores import Remote
from engram.ops.remotes.sync import (
    BATCH,
    Progress,
    TransferReport,
    clone_into,
    copy_chunks,
    full_names,
    move_refs,
    plan_copy,
)
from engram.redaction import redact_url
from engram.repo import HEADS, Repository
from engram.tree import NodeStore, count, decode_node, empty_tree

BACKUPS = "backups/"
MANIFEST = "/manifest"


@dataclass(frozen=True)
class Backup:
    """One complete backup on a remote."""

    name: str
    time: int
    author: str
    refs: dict[str, ChunkId]
    items: dict[str, int]
    bytes: int
    manifest: ChunkId

    @property
    def when(self) -> datetime:
        """The backup's time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time / 1000, tz=UTC)


def _prefix(name: str) -> str:
    return f"{BACKUPS}{name}"


def default_name(time_ms: int) -> str:
    """A backup name from its time: ``20261120T111500Z-123`` (UTC, with milliseconds)."""
    moment = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
    return moment.strftime("%Y%m%dT%H%M%SZ") + f"-{time_ms % 1000:03d}"


def create_backup(
    repo: Repository, remote: Remote, name: str | None = None, *, actor: str = "engram",
    progress: Progress | None = None,
) -> tuple[Backup, TransferReport]:  # fmt: skip
    """Back up every branch, tag and store record of ``repo`` to ``remote`` as backup ``name`` (default: from the
    time); returns the backup and what was sent."""
    time = now_ms()
    name = name or default_name(time)
    if not name or "/" in name or name.strip() != name:
        raise InvalidInputError(f"invalid backup name {name!r}: no '/' and no surrounding spaces")
    if remote.refs.get(_prefix(name) + MANIFEST) is not None:
        raise ConflictError(f"a backup named {name!r} exists on {remote.url}")
    refs = full_names(repo, None)
    known = {cid for ref, cid in remote.refs.list().items() if not ref.startswith("meta/") and "/meta/" not in ref}
    report = copy_chunks(repo.chunks, remote.chunks, set(refs.values()), known=known, progress=progress)
    wanted = {f"{_prefix(name)}/refs/{ref}": cid for ref, cid in refs.items()}
    before: dict[str, ChunkId | None] = {ref: remote.refs.get(ref) for ref in wanted}
    move_refs(remote.refs, wanted, before, report, actor=actor, reason=f"backup {name}")
    if report.rejected:
        raise ConflictError(f"backup {name!r} collided with another one being written; nothing is listed")
    items = {ref[len(HEADS) :]: count(repo.nodes, repo.commit(cid).tree) for ref, cid in refs.items()
             if ref.startswith(HEADS)}  # fmt: skip
    metadata = {"backup": name, "refs": {ref: cid.hex() for ref, cid in refs.items()}, "items": items,
                "bytes": report.bytes, "chunks": report.chunks}  # fmt: skip
    tree = empty_tree(NodeStore(remote.chunks))
    cid, data = encode_commit(tree, (), time, actor, f"backup {name}", metadata)
    remote.chunks.put_many({cid: data})
    if not remote.refs.set(_prefix(name) + MANIFEST, cid, None, actor=actor, reason=f"backup {name}"):
        raise ConflictError(f"a backup named {name!r} was written meanwhile")
    observe.backup_succeeded(metric_label(remote.url), time / 1000)  # engram_last_backup_success_timestamp_seconds
    return _backup(cid, data), report


def metric_label(url: str) -> str:
    """The ``remote`` label of a backup's metric: the URL with no credential, and a ``dir://`` remote's folder by
    its name only (``dir://.../backups``), so ``/metrics`` shows no server path."""
    shown = redact_url(url)
    if shown.startswith("dir://"):
        return "dir://.../" + shown.split("?", 1)[0].rstrip("/").rpartition("/")[2]
    return shown


def _backup(cid: ChunkId, data: bytes) -> Backup:
    commit = decode_commit(cid, data)
    meta = commit.metadata
    refs = {ref: bytes.fromhex(value) for ref, value in meta["refs"].items()}
    return Backup(meta["backup"], commit.time, commit.author, refs, dict(meta["items"]), int(meta["bytes"]), cid)


def list_backups(remote: Remote) -> list[Backup]:
    """The complete backups on ``remote``, oldest first."""
    manifests = {ref: cid for ref, cid in remote.refs.list(BACKUPS).items() if ref.endswith(MANIFEST)}
    found = remote.chunks.get_many(manifests.values())
    backups = [_backup(cid, found[cid]) for cid in manifests.values() if cid in found and is_commit(found[cid])]
    return sorted(backups, key=lambda b: (b.time, b.name))


def get_backup(remote: Remote, name: str) -> Backup:
    """The backup called ``name`` (``latest``: the newest)."""
    backups = list_backups(remote)
    if name == "latest" and backups:
        return backups[-1]
    for backup in backups:
        if backup.name == name:
            return backup
    known = ", ".join(b.name for b in backups[-5:]) or "none"
    raise NotFoundError(f"no backup {name!r} on {remote.url} (newest: {known})")


def verify_backup(remote: Remote, backup: Backup, progress: Callable[[int], None] | None = None) -> FsckReport:
    """Read back every chunk ``backup`` reaches on the remote and check its hash (nothing is restored).

    The same check as :func:`engram.maintenance.fsck`, walked level by level so that each level's chunks are
    read in large parallel batches: on S3 a depth-first walk would wait for one small batch at a time.
    """
    seen: set[ChunkId] = set()
    wave = list(dict.fromkeys(backup.refs.values()))
    counts = {"commit": 0, "node": 0}
    missing: list[str] = []
    corrupt: list[str] = []
    while wave:
        seen.update(wave)
        following: list[ChunkId] = []
        for i in range(0, len(wave), BATCH):
            batch = wave[i : i + BATCH]
            found = remote.chunks.get_many(batch)
            for cid in batch:
                data = found.get(cid)
                if data is None:
                    missing.append(cid.hex())
                elif chunk_id(data) != cid:
                    corrupt.append(cid.hex())
                elif is_commit(data):
                    commit = decode_commit(cid, data)
                    counts["commit"] += 1
                    following.extend([*commit.parents, commit.tree])
                else:
                    try:
                        node = decode_node(cid, data)
                    except IntegrityError:
                        corrupt.append(cid.hex())
                        continue
                    counts["node"] += 1
                    following.extend(node.child(j) for j in range(len(node.keys)) if node.level > 0)
            if progress is not None:
                progress(len(batch))
        wave = [cid for cid in dict.fromkeys(following) if cid not in seen]
    return FsckReport(counts["commit"], counts["node"], missing, corrupt)


@dataclass(frozen=True)
class RestorePlan:
    """What restoring a backup into a store does: ``changes`` maps each ref to (its value there now, after)."""

    backup: Backup
    commits: int
    chunks: int
    bytes: int
    changes: dict[str, tuple[ChunkId | None, ChunkId]]


@dataclass(frozen=True)
class RestoreReport:
    """A restore that ran: its plan, what was copied, and the ``fsck`` of the restored store."""

    plan: RestorePlan
    transfer: TransferReport
    fsck: FsckReport


def plan_restore(remote: Remote, backup: Backup, target: Repository) -> RestorePlan:
    """What :func:`restore_backup` would copy and change at ``target`` (nothing is written: the dry run)."""
    plan = plan_copy(remote.chunks, target.chunks, set(backup.refs.values()))
    seen: set[ChunkId] = set()
    commits = 0
    todo = [cid for ref, cid in backup.refs.items() if not ref.startswith("meta/")]
    while todo:
        batch = [cid for cid in dict.fromkeys(todo[-500:]) if cid not in seen]
        del todo[-500:]
        seen.update(batch)
        for cid, data in remote.chunks.get_many(batch).items():
            if is_commit(data):
                commits += 1
                todo.extend(decode_commit(cid, data).parents)
    changes = {ref: (target.refs.get(ref), cid) for ref, cid in backup.refs.items()}
    return RestorePlan(backup, commits, plan.chunks, plan.bytes, changes)


def restore_backup(
    remote: Remote, backup: Backup, target: Repository, *, force: bool = False, actor: str = "engram",
    progress: Progress | None = None,
) -> RestoreReport:  # fmt: skip
    """Copy ``backup`` into ``target`` (a fresh store, unless ``force``), then ``fsck`` the whole store (the
    report's plan is what was done: :func:`plan_restore` is the dry run)."""
    changes = {ref: (target.refs.get(ref), cid) for ref, cid in backup.refs.items()}
    transfer = clone_into(target, remote.chunks, remote.refs, refs=dict(backup.refs), force=force, actor=actor,
                          progress=progress)  # fmt: skip
    fsck = target.fsck()
    commits = {c.id for ref, cid in backup.refs.items() if not ref.startswith("meta/") for c in target.iter_log(cid)}
    plan = RestorePlan(backup, len(commits), transfer.chunks, transfer.bytes, changes)
    return RestoreReport(plan, transfer, fsck)


@dataclass(frozen=True)
class PruneReport:
    """What a prune removed: backups, reflog entries and chunks (and the backups it kept)."""

    removed: list[str]
    kept: list[str]
    chunks_removed: int
    chunks_kept: int
    dry_run: bool = False
    reasons: dict[str, str] = field(default_factory=dict)


def prune_backups(
    remote: Remote, *, keep_last: int | None = None, keep_days: float | None = None, dry_run: bool = False,
    grace_ms: int = GC_GRACE_MS, progress: Callable[[int], None] | None = None,
) -> PruneReport:  # fmt: skip
    """Keep the newest ``keep_last`` backups and those younger than ``keep_days`` (either rule keeps a backup),
    remove the rest, then delete every chunk of the remote nothing reaches any more (written over ``grace_ms``
    ago: a push running meanwhile keeps its chunks). Do not prune while a push to the same remote runs."""
    if keep_last is None and keep_days is None:
        raise InvalidInputError("say what to keep: --keep-last N and/or --keep-days D")
    backups = sorted(list_backups(remote), key=lambda b: (b.time, b.name), reverse=True)
    horizon = None if keep_days is None else now_ms() - int(timedelta(days=keep_days).total_seconds() * 1000)
    kept: list[Backup] = []
    removed: list[Backup] = []
    for i, backup in enumerate(backups):
        recent = horizon is not None and backup.time >= horizon
        (kept if (keep_last is not None and i < keep_last) or recent else removed).append(backup)
    if dry_run:
        return PruneReport([b.name for b in removed], [b.name for b in kept], 0, 0, dry_run=True)
    complete = {b.name for b in kept}
    for ref, cid in remote.refs.list(BACKUPS).items():
        name = ref[len(BACKUPS) :].split("/", 1)[0]
        if name not in complete:  # removed backups, and interrupted ones (no manifest)
            remote.refs.delete(ref, cid, reason="prune")
    removed_chunks, kept_chunks = sweep(remote, grace_ms=grace_ms, progress=progress)
    return PruneReport([b.name for b in removed], [b.name for b in kept], removed_chunks, kept_chunks)


def sweep(
    remote: Remote, *, grace_ms: int = GC_GRACE_MS, progress: Callable[[int], None] | None = None
) -> tuple[int, int]:
    """Mark and sweep on the remote itself: delete the chunks no ref reaches, written over ``grace_ms`` ago,
    commits first and then tree nodes from the top level down; returns (removed, kept)."""
    candidates = set(remote.chunks.iter_ids(written_before=now_ms() - grace_ms))
    start, _ = roots(remote.refs, keep_reflog_ms=0)
    reachable = {cid for cid, _ in iter_reachable(remote.chunks, NodeStore(remote.chunks), start)}
    doomed = list(candidates - reachable)
    ranked: list[tuple[int, ChunkId]] = []
    for i in range(0, len(doomed), 500):
        for cid, data in remote.chunks.get_many(doomed[i : i + 500]).items():
            ranked.append((-1 if is_commit(data) else decode_node(cid, data).level, cid))
    for level in sorted({rank for rank, _ in ranked}, key=lambda r: (r >= 0, -r)):  # commits, then top level down
        batch = [cid for rank, cid in ranked if rank == level]
        for i in range(0, len(batch), 1000):
            remote.chunks.delete_many(batch[i : i + 1000])
            if progress is not None:
                progress(len(batch[i : i + 1000]))
    return len(ranked), len(candidates) - len(ranked)


__all__ = [
    "BACKUPS",
    "Backup",
    "PruneReport",
    "RestorePlan",
    "RestoreReport",
    "create_backup",
    "default_name",
    "get_backup",
    "list_backups",
    "metric_label",
    "plan_restore",
    "prune_backups",
    "restore_backup",
    "sweep",
    "verify_backup",
]
