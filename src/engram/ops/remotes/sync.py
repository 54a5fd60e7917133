"""Moving history between repositories: copy the chunks the other side lacks, then move refs by compare-and-swap.

The same copy serves ``push`` (local -> remote), ``fetch`` and ``clone`` (remote -> local), backups and
restores. It walks down from the refs being sent and stops at every tree node the receiving side already has,
so a second push after a small change copies a few chunks, not the store. That stop is sound because every
copy writes tree levels bottom up (the batches of one level at once) and commits after all nodes: a node that
is there has everything under it there, even after an interrupted copy. Commits are written together (one
parallel batch), so the walk follows a present commit's parents back to the commits the receiving side is known
to have (its refs' values), reading a run of commits ahead to ask about them at once; from a remote, each next
commit is found in the pack fetched for the ones before (:mod:`engram.ops.remotes.stores` reads small packs
whole), so a run of commits costs a request per pack, not per commit. The walk reads in large batches, the next
one fetched while the one before is decoded. ``thorough=True`` walks everything instead and reads each chunk
back from the receiving side, checking its hash (not an index's word that it is there): a chunk missing there,
deleted by hand or corrupt, is sent again.

Every chunk read from the sending side is checked against its id before anything is written: a copy from a
damaged side refuses with an :class:`~engram.errors.IntegrityError` (corrupt) or a
:class:`~engram.errors.ChunkNotFoundError` (missing) and writes nothing, so damage never spreads.

Refs move last and by compare-and-swap, so an interrupted copy leaves the receiving side as it was plus
unreferenced chunks (which a later copy reuses and a sweep may collect).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from engram.backends.base import ChunkStore, RefStore
from engram.backends.compression import decompress
from engram.errors import ChunkNotFoundError, ConflictError, IntegrityError, RefNotFoundError
from engram.hashing import ChunkId, chunk_id
from engram.objects import Commit, decode_commit, is_commit
from engram.ops.remotes.stores import BucketChunkStore, Frame
from engram.repo import HEADS, TAGS, Repository
from engram.tree import empty_tree, node_links

#: Ref namespaces a push of everything sends: branches, tags and the store's records (its embedder).
SHARED = (HEADS, TAGS, "meta/")
#: Chunks per write batch (the bucket parallelises inside a batch).
BATCH = 512
#: Chunks per read of the walk: a remote fetches the packs holding them in parallel.
READ_BATCH = 4096
#: Commits read ahead along a run of new commits, to ask the receiving side about them at once (and to walk
#: their trees together, in large batches).
READ_AHEAD = 10_000
#: Chunks read along with a commit of a remote, from those stored after it: a copy writes commits newest first,
#: each followed by its parent, so a walk down a run of commits finds the next ones in what it read.
ALONG = 512
#: Bytes of chunks kept in memory between finding and writing them (a remote's as stored: compressed); past it
#: they are read again.
HOLD_BYTES = 1024 * 1024 * 1024
#: Batches of one group written at once (a group's chunks never refer to each other).
WRITERS = 4

T = TypeVar("T")

#: ``progress(phase, done, total)``: ``phase`` is "finding" (chunks examined) or "copying" (chunks written).
Progress = Callable[[str, int, int | None], None]


@dataclass
class TransferReport:
    """What a copy did: chunks and bytes copied, chunks the receiving side already had, and the refs; the ids of
    the chunks written (``written``, each hash-checked as it was read from the sending side; ``commits`` of them
    are commits) and of those the walk found there already (``had``: not read, nor gone below)."""

    chunks: int = 0
    bytes: int = 0
    present: int = 0
    commits: int = 0
    written: list[ChunkId] = field(default_factory=list, repr=False)
    had: list[ChunkId] = field(default_factory=list, repr=False)
    updated: dict[str, tuple[ChunkId | None, ChunkId]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no ref was refused."""
        return not self.rejected


@dataclass
class _Plan:
    nodes: dict[int, list[ChunkId]] = field(default_factory=dict)
    commits: dict[ChunkId, tuple[ChunkId, ...]] = field(default_factory=dict)
    held: dict[ChunkId, bytes] = field(default_factory=dict)
    frames: dict[ChunkId, Frame] = field(default_factory=dict)
    held_bytes: int = 0
    present: int = 0
    had: list[ChunkId] = field(default_factory=list)
    bytes: int = 0
    missing: list[ChunkId] = field(default_factory=list)
    corrupt: list[ChunkId] = field(default_factory=list)

    def order(self) -> list[list[ChunkId]]:
        """Groups to write one after the other: tree levels bottom up, then every commit at once. A group may be
        written in parallel: no node of a group is under another, and commits come after every tree node."""
        groups = [self.nodes[level] for level in sorted(self.nodes)]
        return [*groups, list(self.commits)] if self.commits else groups


@dataclass(frozen=True)
class CopyPlan:
    """The chunks a copy must write, in ``groups`` to write in turn (children before parents), the bytes of those
    kept in memory (``held``), how many reachable chunks the target already had, the bytes to write, and the
    chunks the source lacks (``missing``) or holds with bytes that do not hash to their id (``corrupt``), the
    chunks the walk found in the target (``had``), how many of those to write are commits, and the chunks kept
    as a remote stores them (``frames``: compressed, each decoded and hashed once as it was read)."""

    groups: list[list[ChunkId]]
    held: dict[ChunkId, bytes]
    present: int
    bytes: int
    missing: list[ChunkId] = field(default_factory=list)
    corrupt: list[ChunkId] = field(default_factory=list)
    had: list[ChunkId] = field(default_factory=list)
    commits: int = 0
    frames: dict[ChunkId, Frame] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every chunk the copy reaches was read intact from the source."""
        return not self.missing and not self.corrupt

    def refuse(self) -> None:
        """Raise when the source is damaged: :class:`IntegrityError` for a corrupt chunk, else
        :class:`ChunkNotFoundError` for a missing one (nothing has been written)."""
        if self.corrupt:
            first = self.corrupt[0].hex()
            raise IntegrityError(f"{len(self.corrupt)} chunk(s) are corrupt on the sending side (first: {first}); "
                                 "nothing was copied. Run fsck or `backup verify` there")  # fmt: skip
        if self.missing:
            raise ChunkNotFoundError(f"chunk {self.missing[0].hex()} is missing from the sending side "
                                     f"({len(self.missing)} missing); nothing was copied. Run fsck there")  # fmt: skip

    @property
    def chunks(self) -> int:
        """How many chunks the copy writes."""
        return sum(map(len, self.groups))


def plan_copy(
    source: ChunkStore, target: ChunkStore, starts: Iterable[ChunkId], *, thorough: bool = False,
    known: Collection[ChunkId] = (), progress: Progress | None = None,
) -> CopyPlan:  # fmt: skip
    """What copying everything reachable from ``starts`` into ``target`` would write (nothing is written).

    ``known`` are commits the target is known to have (its ref values): the walk does not ask about them, and
    a run of new commits is read ahead along its parents up to them, so it costs one question, not one each.
    """
    plan = _Plan()
    seen: set[ChunkId] = set()
    wave = list(dict.fromkeys(starts))
    read: dict[ChunkId, tuple[bytes, Commit]] = {}  # commits read ahead, decoded
    spare: dict[ChunkId, bytes] = {}  # commits read along with others, before the walk asks for them
    examined = 0
    commitish = set(wave)  # ids that may be commits: the starts, and every parent met
    while wave:
        seen.update(wave)
        asked = wave if thorough else [cid for cid in wave if cid not in known]
        missing = _absent(target, asked) if thorough else target.has_many(asked)
        plan.present += len(wave) - len(missing)
        plan.had.extend(cid for cid in wave if cid not in missing)
        # a present commit still leads to its parents: commits are written all at once, so one may be there
        # without its parent after an interrupted copy (up to the known ones, whose history is complete)
        descend = asked if thorough else [cid for cid in asked if cid in missing or cid in commitish]
        following: list[ChunkId] = []
        batches = [descend[i : i + READ_BATCH] for i in range(0, len(descend), READ_BATCH)]
        # each batch read while the one before is looked at; what the read-ahead of commits held is not read again
        reads = prefetched(lambda batch: _read_frames(source, [cid for cid in batch if cid not in read]), batches)
        for batch, (good, bad, frames) in zip(batches, reads, strict=True):
            ahead = {cid: read.pop(cid) for cid in batch if cid in read}
            for cid in batch:
                data, commit = ahead[cid] if cid in ahead else (good.get(cid), None)
                if data is None:
                    (plan.corrupt if cid in bad else plan.missing).append(cid)
                    continue
                children, parents = _classify(plan, cid, data, cid in missing, thorough, commit, frames.get(cid))
                commitish.update(parents)
                following.extend(children)
                chain = _read_ahead(source, parents, seen, known, read, spare)
                commitish.update(chain)
                following.extend(chain)
            examined += len(batch)
            if progress is not None:
                progress("finding", examined, None)
        wave = [cid for cid in dict.fromkeys(following) if cid not in seen]
    return CopyPlan(plan.order(), plan.held, plan.present, plan.bytes, plan.missing, plan.corrupt, plan.had,
                    len(plan.commits), plan.frames)  # fmt: skip


def _read_frames(
    source: ChunkStore, ids: list[ChunkId]
) -> tuple[dict[ChunkId, bytes], set[ChunkId], dict[ChunkId, Frame]]:
    """:func:`read_checked` of ``ids``, and from a remote the stored (compressed) copy of each good chunk."""
    if not isinstance(source, BucketChunkStore):
        return (*read_checked(source, ids), {})
    frames: dict[ChunkId, Frame] = {}
    found, bad = source.read_checked(ids, frames=frames)
    return found, set(bad), frames


def prefetched(read: Callable[[list[ChunkId]], T], batches: list[list[ChunkId]]) -> Iterator[T]:
    """``read(batch)`` of each batch in turn, the next one running (in one thread) while the caller works on the
    one before: the requests of a walk overlap its decoding. Call ``read`` from one thread at a time."""
    if len(batches) <= 1:
        yield from map(read, batches)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="engram-read-ahead") as pool:
        ahead = pool.submit(read, batches[0])
        for following in [*batches[1:], None]:
            done = ahead.result()
            if following is not None:
                ahead = pool.submit(read, following)
            yield done


def read_checked(store: ChunkStore, ids: list[ChunkId]) -> tuple[dict[ChunkId, bytes], set[ChunkId]]:
    """(the chunks of ``ids`` that ``store`` holds with bytes that hash to their id, those it holds corrupt); a
    store that checks on read raises for a corrupt chunk: the batch is halved until it is isolated. What such a
    store returns was hashed as it was read (:attr:`ChunkStore.checks_reads`): it is not hashed again."""
    try:
        found = store.get_many(ids)
    except IntegrityError:
        if len(ids) <= 1:
            return {}, set(ids)
        first, first_bad = read_checked(store, ids[: len(ids) // 2])
        second, second_bad = read_checked(store, ids[len(ids) // 2 :])
        return {**first, **second}, first_bad | second_bad
    if store.checks_reads:
        return found, set()
    bad = {cid for cid, data in found.items() if chunk_id(data) != cid}
    return {cid: data for cid, data in found.items() if cid not in bad}, bad


def _absent(target: ChunkStore, ids: list[ChunkId]) -> set[ChunkId]:
    """The chunks of ``ids`` that ``target`` lacks or holds corrupt, by reading each one back and hashing it."""
    absent: set[ChunkId] = set()
    for i in range(0, len(ids), BATCH):
        batch = ids[i : i + BATCH]
        good, _ = read_checked(target, batch)
        absent.update(cid for cid in batch if cid not in good)
    return absent


def _read_ahead(
    source: ChunkStore, parents: list[ChunkId], seen: set[ChunkId], known: Collection[ChunkId],
    read: dict[ChunkId, tuple[bytes, Commit]], spare: dict[ChunkId, bytes],
) -> list[ChunkId]:  # fmt: skip
    """Commits along ``parents`` back to the known ones (at most READ_AHEAD), read and decoded once and kept in
    ``read``. From a remote, each read brings the commits stored after the ones asked for (:data:`ALONG`), kept
    in ``spare`` (hash-checked, at most READ_AHEAD of them) until the walk asks for them."""
    chain: list[ChunkId] = []
    todo = [cid for cid in parents if cid not in seen and cid not in known and cid not in read]
    while todo and len(chain) < READ_AHEAD:
        found = {cid: spare.pop(cid) for cid in todo if cid in spare}
        rest = [cid for cid in todo if cid not in found]
        if rest and isinstance(source, BucketChunkStore):
            asked = set(rest)
            for cid, data in source.read_along(rest, ALONG)[0].items():
                if cid in asked:
                    found[cid] = data
                elif len(spare) < READ_AHEAD and is_commit(data):
                    spare[cid] = data
        elif rest:
            found.update(read_checked(source, rest)[0])
        following: list[ChunkId] = []
        for cid in todo:
            got = found.get(cid)
            if got is None or not is_commit(got):
                continue  # reported when the walk gets there
            commit = decode_commit(cid, got)
            read[cid] = (got, commit)
            chain.append(cid)
            following.extend(commit.parents)
        todo = [cid for cid in dict.fromkeys(following) if cid not in seen and cid not in known and cid not in read]
    return chain


def _classify(
    plan: _Plan, cid: ChunkId, data: bytes, missing: bool, thorough: bool, commit: Commit | None = None,
    frame: Frame | None = None,
) -> tuple[list[ChunkId], list[ChunkId]]:  # fmt: skip
    """Record a missing chunk in the plan; returns (the chunks to look at next, the parent commits among them).
    A present commit leads to its parents only (its tree is complete: commits are written after every node) and
    a present node nowhere, unless ``thorough``. ``commit``: the chunk decoded already (read ahead); ``frame``:
    its stored copy on a remote, kept instead of ``data`` (smaller)."""
    inside = missing or thorough
    parents: list[ChunkId] = []
    if is_commit(data):
        commit = commit or decode_commit(cid, data)
        if missing:
            plan.commits[cid] = commit.parents
        parents = list(commit.parents)
        children = [*commit.parents, commit.tree] if inside else parents
    else:
        level, below = node_links(cid, data)
        if missing:
            plan.nodes.setdefault(level, []).append(cid)
        children = below if inside else []
    plan.bytes += len(data) if missing else 0
    size = len(data) if frame is None else len(frame[0])
    if missing and plan.held_bytes + size <= HOLD_BYTES:
        if frame is None:
            plan.held[cid] = data
        else:
            plan.frames[cid] = frame
        plan.held_bytes += size
    return children, parents


def copy_chunks(
    source: ChunkStore, target: ChunkStore, starts: Iterable[ChunkId], *, thorough: bool = False,
    known: Collection[ChunkId] = (), progress: Progress | None = None,
) -> TransferReport:  # fmt: skip
    """Copy every chunk reachable from ``starts`` that ``target`` lacks (children first); no ref moves.
    ``known``: commits the target has (see :func:`plan_copy`)."""
    plan = plan_copy(source, target, starts, thorough=thorough, known=known, progress=progress)
    plan.refuse()
    held, frames, total = plan.held, plan.frames, plan.chunks
    report = TransferReport(present=plan.present, commits=plan.commits, had=plan.had)

    def write(batch: list[ChunkId]) -> int:
        chunks = {cid: held[cid] for cid in batch if cid in held}
        # a kept frame decodes to the bytes that were hashed as it was read (and zstd checks its checksum)
        chunks.update((cid, decompress(*frames[cid])) for cid in batch if cid in frames)
        reread = [cid for cid in batch if cid not in chunks]
        if reread:
            found, bad = read_checked(source, reread)
            if bad:
                raise IntegrityError(f"chunk {min(bad).hex()} went corrupt on the sending side during the copy")
            lost = [cid.hex() for cid in reread if cid not in found]
            if lost:
                raise ChunkNotFoundError(f"chunk {lost[0]} vanished from the sending side during the copy")
            chunks.update(found)
        target.put_many({cid: chunks[cid] for cid in batch})  # returns when durable
        return sum(len(chunks[cid]) for cid in batch)

    with ThreadPoolExecutor(WRITERS, thread_name_prefix="engram-copy") as pool:
        for group in plan.groups:  # one group after the other: children before parents
            batches = [group[i : i + BATCH] for i in range(0, len(group), BATCH)]
            for batch, size in zip(batches, pool.map(write, batches), strict=True):  # a group's batches at once
                report.chunks += len(batch)
                report.bytes += size
                report.written.extend(batch)
                if progress is not None:
                    progress("copying", report.chunks, total)
    return report


def move_refs(
    refs: RefStore, wanted: dict[str, ChunkId], before: dict[str, ChunkId | None], report: TransferReport, *,
    actor: str, reason: str,
) -> None:  # fmt: skip
    """Set each ref of ``wanted`` by compare-and-swap from its value in ``before``; a ref that moved meanwhile
    is reported as rejected and left alone."""
    for name, new in wanted.items():
        old = before.get(name)
        if old == new:
            report.unchanged.append(name)
        elif refs.set(name, new, old, actor=actor, reason=reason):
            report.updated[name] = (old, new)
        else:
            report.rejected[name] = "it changed on the receiving side during the copy; run the command again"


def full_names(repo: Repository, names: Sequence[str] | None) -> dict[str, ChunkId]:
    """The local refs to send: each name as a branch, else a tag, else a full ref name; None: every shared ref."""
    if names is None:
        return {name: cid for prefix in SHARED for name, cid in repo.refs.list(prefix).items()}
    chosen: dict[str, ChunkId] = {}
    for name in names:
        for candidate in (HEADS + name, TAGS + name, name):
            cid = repo.refs.get(candidate)
            if cid is not None:
                chosen[candidate] = cid
                break
        else:
            raise RefNotFoundError(f"no branch, tag or ref {name!r} to push")
    return chosen


def push(
    repo: Repository, remote_chunks: ChunkStore, remote_refs: RefStore, names: Sequence[str] | None = None, *,
    force: bool = False, thorough: bool = False, actor: str = "engram", progress: Progress | None = None,
) -> TransferReport:  # fmt: skip
    """Send refs (branch or tag names; None: every branch, tag and store record) and what they reach.

    A branch moves only forward (its remote head must be in the local history) and a tag never moves, unless
    ``force``; refused refs are in ``report.rejected`` and their chunks are not sent.
    """
    wanted = full_names(repo, names)
    before: dict[str, ChunkId | None] = {name: remote_refs.get(name) for name in wanted}
    rejected: dict[str, str] = {}
    for name, new in wanted.items():
        why = None if force else _refusal(repo, name, before[name], new)
        if why is not None:
            rejected[name] = why
    sending = {name: cid for name, cid in wanted.items() if name not in rejected}
    known = set(remote_refs.list(HEADS).values()) | set(remote_refs.list(TAGS).values())
    report = copy_chunks(repo.chunks, remote_chunks, set(sending.values()), thorough=thorough, known=known,
                         progress=progress)  # fmt: skip
    if thorough and isinstance(remote_chunks, BucketChunkStore):
        remote_chunks.quarantine_damaged()  # what their unreadable indexes held was just sent again
    move_refs(remote_refs, sending, before, report, actor=actor, reason="push")
    report.rejected.update(rejected)
    return report


def _refusal(repo: Repository, name: str, old: ChunkId | None, new: ChunkId) -> str | None:
    if old is None or old == new or not (name.startswith(HEADS) or name.startswith(TAGS)):
        return None
    if name.startswith(TAGS):
        return "the tag exists on the remote with another commit (tags never move; use --force)"
    try:
        ahead = repo.is_ancestor(old, new)
    except RefNotFoundError:
        ahead = False
    if not ahead:
        return "the remote has commits this store lacks: pull first (or --force to overwrite)"
    return None


def fetch(
    repo: Repository, remote_chunks: ChunkStore, remote_refs: RefStore, remote_name: str, *,
    actor: str = "engram", progress: Progress | None = None,
) -> TransferReport:  # fmt: skip
    """Copy the remote's branches and tags: branch ``b`` lands as ``remotes/<remote_name>/b`` (tracking refs,
    which always follow the remote), a tag as a tag (kept if the store has another one of that name)."""
    heads = remote_refs.list(HEADS)
    tags = remote_refs.list(TAGS)
    known = {*repo.refs.list(HEADS).values(), *repo.refs.list(TAGS).values(), *repo.refs.list("remotes/").values()}
    report = copy_chunks(remote_chunks, repo.chunks, {*heads.values(), *tags.values()}, known=known, progress=progress)
    tracking = f"remotes/{remote_name}/"
    wanted = {tracking + name[len(HEADS) :]: cid for name, cid in heads.items()}
    local_tags = repo.refs.list(TAGS)
    for name, cid in tags.items():
        if local_tags.get(name, cid) != cid:
            report.rejected[name] = "a local tag of that name points at another commit (kept)"
        else:
            wanted[name] = cid
    before: dict[str, ChunkId | None] = {name: repo.refs.get(name) for name in wanted}
    move_refs(repo.refs, wanted, before, report, actor=actor, reason=f"fetch: {remote_name}")
    return report


def is_fresh(repo: Repository) -> bool:
    """True when a repository holds nothing but what ``init`` made (a ``main`` at one empty first commit)."""
    heads = repo.refs.list(HEADS)
    if set(heads) - {HEADS + "main"} or repo.refs.list(TAGS):
        return False
    if not heads:
        return True
    first = repo.commit(heads[HEADS + "main"])
    return not first.parents and first.tree == empty_tree(repo.nodes)


def clone_into(
    repo: Repository, remote_chunks: ChunkStore, remote_refs: RefStore, *, refs: dict[str, ChunkId] | None = None,
    force: bool = False, thorough: bool = False, actor: str = "engram", progress: Progress | None = None,
) -> TransferReport:  # fmt: skip
    """Copy ``refs`` (default: every branch, tag and store record of the remote) into ``repo`` under the same
    names. Without ``force`` the repository must be fresh (nothing but ``init``'s empty ``main``); with it,
    those refs are overwritten (their old values stay in the reflog)."""
    if not force and not is_fresh(repo):
        raise ConflictError("the target store is not empty: clone or restore into a new store (or use --force)")
    wanted = refs if refs is not None else {n: c for p in SHARED for n, c in remote_refs.list(p).items()}
    report = copy_chunks(remote_chunks, repo.chunks, set(wanted.values()), thorough=thorough, progress=progress)
    before: dict[str, ChunkId | None] = {name: repo.refs.get(name) for name in wanted}
    move_refs(repo.refs, wanted, before, report, actor=actor, reason="clone")
    return report


__all__ = [
    "SHARED",
    "CopyPlan",
    "Progress",
    "TransferReport",
    "clone_into",
    "copy_chunks",
    "fetch",
    "full_names",
    "is_fresh",
    "move_refs",
    "plan_copy",
    "prefetched",
    "push",
    "read_checked",
]
