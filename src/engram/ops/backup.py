"""Backups are pushes, restores are clones, both verified (DESIGN.md §3).

A backup named ``N`` on a remote is a set of refs ``backups/N/refs/<ref>`` (every branch, tag and store record
of the store, at the moment of the backup) plus, written last, ``backups/N/manifest``: a commit whose metadata
says when, by whom, how many items and how many bytes. Only the chunks the remote lacks are sent, so a backup
after a few changes costs a few chunks. A backup without its manifest was interrupted: it is not listed and the
next prune removes it.

``verify`` reads back every chunk a backup reaches and checks its hash, naming each bad chunk, the objects
holding it and every pack whose index cannot be read; ``create_backup(thorough=True)`` (automatic when the remote
has such a pack) reads back what is there and re-sends what is missing or corrupt. ``restore`` checks every
chunk as it copies and refuses a damaged backup before writing anything (:class:`IntegrityError`), then checks
the store as ``fsck`` does with each chunk hashed once (:func:`check_restored`); ``prune`` drops backups past a
retention rule, then sweeps the chunks that no kept backup (nor any other ref of the remote) reaches, parents
before children so that an interrupted sweep never leaves a chunk without what it refers to, re-reading the refs
after marking. Backups share the remote's lease
(:mod:`engram.ops.remotes.lease`) and a prune holds it alone, so a sweep never runs beside a backup.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from engram import observe
from engram.backends.base import now_ms
from engram.errors import ConflictError, IntegrityError, InvalidInputError, NotFoundError
from engram.hashing import ChunkId
from engram.maintenance import GC_GRACE_MS, FsckReport, iter_reachable, roots
from engram.objects import decode_commit, encode_commit, is_commit
from engram.ops.remotes.lease import hold_lease
from engram.ops.remotes.stores import Remote
from engram.ops.remotes.sync import (
    BATCH,
    READ_BATCH,
    Progress,
    TransferReport,
    clone_into,
    copy_chunks,
    full_names,
    move_refs,
    plan_copy,
    prefetched,
)
from engram.redaction import redact_url
from engram.repo import HEADS, Repository
from engram.tree import NodeStore, count, decode_node, empty_tree

BACKUPS = "backups/"
MANIFEST = "/manifest"
#: The sweep's rank of an unreachable chunk whose bytes do not hash right (its level cannot be read).
CORRUPT = -2


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
    progress: Progress | None = None, thorough: bool = False, lease_wait: float = 600.0,
) -> tuple[Backup, TransferReport]:  # fmt: skip
    """Back up every branch, tag and store record of ``repo`` to ``remote`` as backup ``name`` (default: from the
    time); returns the backup and what was sent.

    ``thorough`` reads back every chunk the backup reaches on the remote and re-sends the missing and corrupt
    ones (the repair after ``verify`` found damage); it is automatic when a pack index of the remote cannot be
    read. The backup holds the remote's lease (shared with other backups, waiting up to ``lease_wait`` seconds
    for a prune to end)."""
    time = now_ms()
    name = name or default_name(time)
    if not name or "/" in name or name.strip() != name:
        raise InvalidInputError(f"invalid backup name {name!r}: no '/' and no surrounding spaces")
    with hold_lease(remote.chunks.bucket, "backup", who=actor, wait=lease_wait) as lease:
        if remote.refs.get(_prefix(name) + MANIFEST) is not None:
            raise ConflictError(f"a backup named {name!r} exists on {remote.url}")
        thorough = thorough or bool(remote.chunks.damaged)
        refs = full_names(repo, None)
        report = _send(repo, remote, name, refs, actor, progress, thorough)
        lease.check()
        return _write_manifest(repo, remote, name, refs, time, actor, report), report


def _send(
    repo: Repository, remote: Remote, name: str, refs: dict[str, ChunkId], actor: str, progress: Progress | None,
    thorough: bool,
) -> TransferReport:  # fmt: skip
    """Send the chunks ``refs`` reach, then set the backup's refs on the remote."""
    known = {cid for ref, cid in remote.refs.list().items() if not ref.startswith("meta/") and "/meta/" not in ref}
    report = copy_chunks(repo.chunks, remote.chunks, set(refs.values()), known=known, progress=progress,
                         thorough=thorough)  # fmt: skip
    if thorough:
        remote.chunks.quarantine_damaged()  # what their unreadable indexes held was just sent again
    wanted = {f"{_prefix(name)}/refs/{ref}": cid for ref, cid in refs.items()}
    before: dict[str, ChunkId | None] = {ref: remote.refs.get(ref) for ref in wanted}
    move_refs(remote.refs, wanted, before, report, actor=actor, reason=f"backup {name}")
    if report.rejected:
        raise ConflictError(f"backup {name!r} collided with another one being written; nothing is listed")
    return report


def _write_manifest(
    repo: Repository, remote: Remote, name: str, refs: dict[str, ChunkId], time: int, actor: str,
    report: TransferReport,
) -> Backup:  # fmt: skip
    """Write the manifest of a backup whose refs are set (last: from now on it is listed)."""
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
    return _backup(cid, data)


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


@dataclass(frozen=True)
class VerifyReport(FsckReport):
    """What :func:`verify_backup` found: fsck's counts and bad chunks, the objects holding each corrupt chunk
    (``places``: chunk hex -> object keys) and the remote's packs whose index cannot be read (``damaged``: pack
    -> reason; their chunks count as missing)."""

    places: dict[str, list[str]] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every chunk is there and hashes right, and every pack index of the remote can be read."""
        return not self.missing and not self.corrupt and not self.damaged


def verify_backup(remote: Remote, backup: Backup, progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Read back every chunk ``backup`` reaches on the remote and check its hash (nothing is restored).

    The same check as :func:`engram.maintenance.fsck`, in two walks: the commits first, each read found in the
    packs already fetched for the ones before it (one request per pack of commits, not one per commit), then
    the trees of them all level by level, each level's chunks read in large batches whose packs are fetched in
    parallel: on S3 a depth-first walk would wait for one small batch at a time.
    """
    damaged = remote.chunks.damaged
    found = _Verified()
    nodes = _verify_commits(remote, list(dict.fromkeys(backup.refs.values())), found, progress)
    seen: set[ChunkId] = set()
    wave = list(dict.fromkeys(nodes))
    while wave:
        seen.update(wave)
        following: list[ChunkId] = []
        batches = [wave[i : i + READ_BATCH] for i in range(0, len(wave), READ_BATCH)]
        for batch, read in zip(batches, prefetched(remote.chunks.read_checked, batches), strict=True):
            for cid, data in found.record(batch, *read):
                try:
                    node = decode_node(cid, data)
                except IntegrityError:
                    found.corrupt.append(cid.hex())
                    continue
                found.nodes += 1
                following.extend(node.child(j) for j in range(len(node.keys)) if node.level > 0)
            if progress is not None:
                progress(len(batch))
        wave = [cid for cid in dict.fromkeys(following) if cid not in seen]
    return VerifyReport(found.commits, found.nodes, found.missing, found.corrupt, found.places, damaged)


@dataclass
class _Verified:
    """What a verify walk found so far: counts, and the missing and corrupt chunks (with the corrupt ones'
    places)."""

    commits: int = 0
    nodes: int = 0
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    places: dict[str, list[str]] = field(default_factory=dict)

    def record(
        self, batch: list[ChunkId], good: dict[ChunkId, bytes], bad: dict[ChunkId, set[str]]
    ) -> list[tuple[ChunkId, bytes]]:
        """The chunks of ``batch`` read intact (``good``), in order; the others recorded as corrupt (``bad``: the
        objects holding their bad copies) or missing."""
        intact: list[tuple[ChunkId, bytes]] = []
        for cid in batch:
            if cid in bad:
                self.corrupt.append(cid.hex())
                self.places[cid.hex()] = sorted(bad[cid])
            elif cid in good:
                intact.append((cid, good[cid]))
            else:
                self.missing.append(cid.hex())
        return intact


def _verify_commits(
    remote: Remote, starts: list[ChunkId], found: _Verified, progress: Callable[[int], None] | None
) -> list[ChunkId]:
    """Check every commit reachable from ``starts`` (newest first, each batch the parents of the one before);
    returns the trees to check: the commits' trees, and the starts that are tree nodes."""
    trees: list[ChunkId] = []
    seen = set(starts)
    todo = deque(starts)
    while todo:
        batch = [todo.popleft() for _ in range(min(BATCH, len(todo)))]
        for cid, data in found.record(batch, *remote.chunks.read_checked(batch)):
            if not is_commit(data):
                trees.append(cid)  # a ref at a tree node (a store record): checked with the trees
                continue
            commit = decode_commit(cid, data)
            found.commits += 1
            trees.append(commit.tree)
            parents = [parent for parent in commit.parents if parent not in seen]
            seen.update(parents)
            todo.extend(parents)
        if progress is not None:
            progress(len(batch))
    return trees


@dataclass(frozen=True)
class RestorePlan:
    """What restoring a backup into a store does: ``changes`` maps each ref to (its value there now, after);
    ``missing`` and ``corrupt`` (chunk hex) are the damage found on the remote, which makes a restore refuse."""

    backup: Backup
    commits: int
    chunks: int
    bytes: int
    changes: dict[str, tuple[ChunkId | None, ChunkId]]
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every chunk to copy was read intact from the remote."""
        return not self.missing and not self.corrupt


@dataclass(frozen=True)
class RestoreReport:
    """A restore that ran: its plan, what was copied, and the ``fsck`` of the restored store."""

    plan: RestorePlan
    transfer: TransferReport
    fsck: FsckReport


def plan_restore(remote: Remote, backup: Backup, target: Repository) -> RestorePlan:
    """What :func:`restore_backup` would copy and change at ``target`` (nothing is written: the dry run); every
    chunk to copy is read and checked, so the plan names the damage a restore would refuse."""
    plan = plan_copy(remote.chunks, target.chunks, set(backup.refs.values()))
    seen: set[ChunkId] = set()
    commits = 0
    todo = [cid for ref, cid in backup.refs.items() if not ref.startswith("meta/")]
    while todo:
        batch = [cid for cid in dict.fromkeys(todo[-500:]) if cid not in seen]
        del todo[-500:]
        seen.update(batch)
        for cid, data in remote.chunks.read_checked(batch)[0].items():
            if is_commit(data):
                commits += 1
                todo.extend(decode_commit(cid, data).parents)
    changes = {ref: (target.refs.get(ref), cid) for ref, cid in backup.refs.items()}
    return RestorePlan(backup, commits, plan.chunks, plan.bytes, changes, [c.hex() for c in plan.missing],
                       [c.hex() for c in plan.corrupt])  # fmt: skip


def restore_backup(
    remote: Remote, backup: Backup, target: Repository, *, force: bool = False, actor: str = "engram",
    progress: Progress | None = None,
) -> RestoreReport:  # fmt: skip
    """Copy ``backup`` into ``target`` (a fresh store, unless ``force``), then check the whole store
    (:func:`check_restored`; the report's plan is what was done: :func:`plan_restore` is the dry run). Every chunk
    is checked as it is read: a damaged backup raises :class:`IntegrityError` (or :class:`ChunkNotFoundError`)
    before anything is written or any ref moves."""
    changes = {ref: (target.refs.get(ref), cid) for ref, cid in backup.refs.items()}
    transfer = clone_into(target, remote.chunks, remote.refs, refs=dict(backup.refs), force=force, actor=actor,
                          progress=progress)  # fmt: skip
    fsck, commits = check_restored(target, transfer)
    plan = RestorePlan(backup, commits, transfer.chunks, transfer.bytes, changes)
    return RestoreReport(plan, transfer, fsck)


def check_restored(target: Repository, transfer: TransferReport) -> tuple[FsckReport, int]:
    """What ``fsck`` proves of ``target`` after a copy into it, each chunk hashed once: (the report, how many
    commits the copy reaches).

    The chunks the copy wrote were each decoded and hashed as they were read from the remote (a bad one refused
    the copy before any write): here they are only confirmed present by id, not read back and hashed again. The
    rest, what the target had before (where the copy stopped, every ref and reflog entry of the target), is read
    and hashed as fsck does, down to the chunks the copy wrote."""
    written = set(transfer.written)
    problems: dict[str, list[str]] = {"missing": [], "corrupt": []}
    listed = transfer.written
    for i in range(0, len(listed), READ_BATCH):
        problems["missing"].extend(cid.hex() for cid in target.chunks.has_many(listed[i : i + READ_BATCH]))
    counts = {"commit": transfer.commits, "node": len(written) - transfer.commits}
    seen = set(written)
    for _, kind in iter_reachable(target.chunks, target.nodes, set(transfer.had), True, problems, seen):
        counts[kind] += 1  # under the copy's stops: part of what it reaches
    commits = counts["commit"]
    start, _ = roots(target.refs)
    for _, kind in iter_reachable(target.chunks, target.nodes, start, True, problems, seen):
        counts[kind] += 1
    return FsckReport(counts["commit"], counts["node"], problems["missing"], problems["corrupt"]), commits


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
    grace_ms: int = GC_GRACE_MS, progress: Callable[[int], None] | None = None, lease_wait: float = 600.0,
) -> PruneReport:  # fmt: skip
    """Keep the newest ``keep_last`` backups and those younger than ``keep_days`` (either rule keeps a backup),
    remove the rest, then delete every chunk of the remote nothing reaches any more (written over ``grace_ms``
    ago: a push running meanwhile keeps its chunks). The prune holds the remote's lease alone (waiting up to
    ``lease_wait`` seconds for running backups to end), so no backup runs beside it; do not push meanwhile."""
    if keep_last is None and keep_days is None:
        raise InvalidInputError("say what to keep: --keep-last N and/or --keep-days D")
    if dry_run:
        return _choose(remote, keep_last, keep_days, dry_run=True)
    with hold_lease(remote.chunks.bucket, "prune", wait=lease_wait) as lease:
        chosen = _choose(remote, keep_last, keep_days, dry_run=False)
        complete = set(chosen.kept)
        for ref, cid in remote.refs.list(BACKUPS).items():
            name = ref[len(BACKUPS) :].split("/", 1)[0]
            if name not in complete:  # removed backups, and interrupted ones (no manifest; none runs: the lease)
                remote.refs.delete(ref, cid, reason="prune")
        lease.check()
        removed_chunks, kept_chunks = sweep(remote, grace_ms=grace_ms, progress=progress)
    return PruneReport(chosen.removed, chosen.kept, removed_chunks, kept_chunks)


def _choose(remote: Remote, keep_last: int | None, keep_days: float | None, *, dry_run: bool) -> PruneReport:
    """The backups a retention rule keeps and removes (nothing is changed)."""
    backups = sorted(list_backups(remote), key=lambda b: (b.time, b.name), reverse=True)
    horizon = None if keep_days is None else now_ms() - int(timedelta(days=keep_days).total_seconds() * 1000)
    kept: list[Backup] = []
    removed: list[Backup] = []
    for i, backup in enumerate(backups):
        recent = horizon is not None and backup.time >= horizon
        (kept if (keep_last is not None and i < keep_last) or recent else removed).append(backup)
    return PruneReport([b.name for b in removed], [b.name for b in kept], 0, 0, dry_run=dry_run)


def sweep(
    remote: Remote, *, grace_ms: int = GC_GRACE_MS, progress: Callable[[int], None] | None = None
) -> tuple[int, int]:
    """Mark and sweep on the remote itself: delete the chunks no ref reaches, written over ``grace_ms`` ago,
    commits first and then tree nodes from the top level down; returns (removed, kept). After marking, the refs
    are read again and what a new or moved ref reaches is marked too, until they hold still."""
    candidates = set(remote.chunks.iter_ids(written_before=now_ms() - grace_ms))
    start, _ = roots(remote.refs, keep_reflog_ms=0)
    marked = set(start)
    reachable = {cid for cid, _ in iter_reachable(remote.chunks, NodeStore(remote.chunks), start)}
    while fresh := roots(remote.refs)[0] - marked:  # refs set while marking (a ref moved by a push)
        marked |= fresh
        reachable.update(cid for cid, _ in iter_reachable(remote.chunks, NodeStore(remote.chunks), fresh))
    doomed = list(candidates - reachable)
    ranked: list[tuple[int, ChunkId]] = []
    for i in range(0, len(doomed), 500):
        found, bad = remote.chunks.read_checked(doomed[i : i + 500])
        ranked.extend((-1 if is_commit(data) else decode_node(cid, data).level, cid) for cid, data in found.items())
        ranked.extend((CORRUPT, cid) for cid in bad)  # unreadable anyway: deleted last
    order = sorted({rank for rank, _ in ranked}, key=lambda r: (r == CORRUPT, r >= 0, -r))  # commits, then top down
    for level in order:
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
    "VerifyReport",
    "check_restored",
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
