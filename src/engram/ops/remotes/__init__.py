"""Remotes (DESIGN.md §3, §9): push, fetch, pull and clone between a store and a folder or an S3 prefix.

One seam, :class:`~engram.backends.buckets.Bucket`, with two backends (``dir:///path``, ``s3://bucket/prefix``);
over it a remote is a chunk store and a ref store like any local backend. Copies send only the chunks the other
side lacks and move refs last, by compare-and-swap::

    from engram.ops import remotes

    remote = remotes.open_remote("dir:///srv/backups/agents")
    report = remotes.push(mem.repo, remote.chunks, remote.refs)            # every branch and tag
    remotes.fetch(other.repo, remote.chunks, remote.refs, "origin")        # remotes/origin/<branch>
    remotes.pull(other, remote, "origin", strategy="newest")               # fetch + fast-forward or merge

Search indexes never travel: the receiving side rebuilds them from the trees.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.backends.buckets import Bucket, DirBucket, S3Bucket
from engram.errors import RefNotFoundError
from engram.objects import Commit
from engram.ops.remotes.buckets import open_bucket
from engram.ops.remotes.config import REMOTES_REF, RemoteConfig, config_file, remote_config
from engram.ops.remotes.refstore import BucketRefStore
from engram.ops.remotes.stores import BucketChunkStore, Remote, open_remote
from engram.ops.remotes.sync import (
    SHARED,
    Progress,
    TransferReport,
    clone_into,
    copy_chunks,
    fetch,
    is_fresh,
    push,
)
from engram.repo import HEADS
from engram.store.memory import Memory
from engram.store.versioning import Strategy


@dataclass(frozen=True)
class PullReport:
    """What a pull did: the fetch, then ``how`` the branch moved (``up to date``, ``fast-forward``, ``merge``)."""

    fetched: TransferReport
    how: str
    head: Commit


def pull(
    memory: Memory, remote: Remote, remote_name: str, branch: str | None = None, *, strategy: Strategy = "fail",
    progress: Progress | None = None,
) -> PullReport:  # fmt: skip
    """Fetch, then bring the remote's ``branch`` (default: the handle's) into the handle's branch: a fast-forward
    when the local head is in its history, else a merge commit decided by ``strategy`` (as :meth:`Memory.merge`)."""
    fetched = fetch(memory.repo, remote.chunks, remote.refs, remote_name, actor=memory.author, progress=progress)
    name = branch or memory.branch
    source = memory.repo.refs.get(f"remotes/{remote_name}/{name}")
    if source is None:
        raise RefNotFoundError(f"the remote {remote_name!r} has no branch {name!r}")
    while True:
        head = memory.repo.head(memory.branch)
        if memory.repo.is_ancestor(source, head):
            return PullReport(fetched, "up to date", memory.repo.commit(head))
        if not memory.repo.is_ancestor(head, source):
            text = f"merge {remote_name}/{name} into {memory.branch}"
            return PullReport(fetched, "merge", memory.merge(source.hex(), strategy=strategy, message=text))
        reason = f"pull: fast-forward to {remote_name}/{name}"
        if memory.repo.refs.set(HEADS + memory.branch, source, head, actor=memory.author, reason=reason):
            return PullReport(fetched, "fast-forward", memory.repo.commit(source))


__all__ = [
    "REMOTES_REF",
    "SHARED",
    "Bucket",
    "BucketChunkStore",
    "BucketRefStore",
    "DirBucket",
    "Progress",
    "PullReport",
    "Remote",
    "RemoteConfig",
    "S3Bucket",
    "TransferReport",
    "clone_into",
    "config_file",
    "copy_chunks",
    "fetch",
    "is_fresh",
    "open_bucket",
    "open_remote",
    "pull",
    "push",
    "remote_config",
]
