"""Read replicas with read-your-writes (DESIGN.md §9).

A :class:`ReplicatedStore` writes to a primary store and serves reads from read replicas (PostgreSQL streaming
standbys of the primary's database) whenever that cannot show the client an older state than it has seen.

The client carries a :class:`Token` (``<branch>@<commit id>``), the commit its last write made (or the newest
one it read). A replica serves a read carrying tokens only if it **has** each token's commit: the replica's ref
of the token's branch is that commit or descends from it. Why the ref and not the chunk: a write stores its
chunks first and moves the ref last, so a replica can hold the commit chunk before the ref moved (a read of the
branch there would still show the old head); with chunks in S3 every replica holds every chunk at once. The
ref is the complete answer because a streaming replica replays the primary's log in order: once it shows the
branch at the token's commit, or at a descendant (made after it), it holds everything the primary held when the
client got the token, on every branch. A read without a token goes to a replica unless the replica lags too much.

Health: a replica that fails (an error of the storage layer) is skipped for ``retry_interval`` seconds; its lag
is measured every ``probe_interval`` seconds by comparing it with snapshots of the primary's branch heads (the
age of the newest snapshot it has reached); a replica more than ``max_lag`` seconds behind is skipped.

Guarantees: read-your-writes for a client that sends its token; monotonic reads if the client keeps the newest
token it was given; nothing across clients that send no token (a tokenless read may be up to ``max_lag``
seconds old).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from engram.backends import ChunkStore, ForwardingChunkStore, LruChunkStore
from engram.backends.postgres import PostgresChunkStore, PostgresRefStore, shared_database
from engram.errors import ConfigError, InvalidRefError, NotFoundError, ReadOnlyError, StorageError
from engram.hashing import ID_SIZE, ChunkId
from engram.index.cache import MemoryVectorCache, PostgresVectorCache, VectorCache
from engram.objects import Commit
from engram.redaction import redact_url
from engram.repo import Repository
from engram.store.connect import open as open_store
from engram.store.connect import s3_chunk_store
from engram.store.indexing import IndexPool
from engram.store.memory import Memory
from engram.store.operations import GetOp, Op, SearchOp
from engram.store.urls import StoreUrl, conninfo_of, is_postgres

__all__ = ["Replica", "ReplicaMemory", "ReplicatedStore", "Routed", "Token", "open_replicated", "parse_tokens"]

log = logging.getLogger("engram.replicas")

T = TypeVar("T")
Server = Literal["primary", "replica"]
_HEADS = "heads/"
#: (branch, commit) pairs a replica is known to have reached, per replica (a replica never goes back).
_REACHED = 4096


@dataclass(frozen=True, slots=True)
class Token:
    """A commit a client has seen on a branch: ``<branch>@<commit id hex>`` (what HTTP writes return)."""

    branch: str
    commit: ChunkId

    def __str__(self) -> str:
        return f"{self.branch}@{self.commit.hex()}"

    @classmethod
    def parse(cls, text: str) -> Token:
        """A token from its text form; :class:`~engram.errors.InvalidRefError` when malformed."""
        branch, at, hexid = text.strip().rpartition("@")
        try:
            commit = bytes.fromhex(hexid)
        except ValueError:
            commit = b""
        if not at or not branch or len(commit) != ID_SIZE:
            raise InvalidRefError(f"invalid consistency token {text!r}: expected <branch>@<{2 * ID_SIZE} hex digits>")
        return cls(branch, commit)


def parse_tokens(text: str | None) -> list[Token]:
    """Tokens from a header value: none, one, or several separated by commas (one per branch written)."""
    if text is None or not text.strip():
        return []
    return [Token.parse(part) for part in text.split(",") if part.strip()]


class _ReplicaVectorCache:
    """Vectors read from the replica's copy of the primary's cache; vectors embedded here stay in process
    (a standby takes no writes)."""

    def __init__(self, replicated: VectorCache | None) -> None:
        self.replicated = replicated
        self.local = MemoryVectorCache()

    def get_many(self, model: str, hashes: Iterable[bytes]) -> dict[bytes, bytes]:
        wanted = list(hashes)
        found = self.local.get_many(model, wanted)
        rest = [h for h in wanted if h not in found]
        if rest and self.replicated is not None:
            with contextlib.suppress(StorageError):  # the cache is an optimisation: embed instead
                found.update(self.replicated.get_many(model, rest))
        return found

    def put_many(self, model: str, vectors: Mapping[bytes, bytes]) -> None:
        self.local.put_many(model, vectors)


class _ReplicaChunkStore(ForwardingChunkStore):
    """A standby's chunks, reads falling back to the primary's for what it has not replayed yet; writes (the
    derived chunks of search indexes built here) go to the primary, which is safe for content-addressed chunks."""

    def __init__(self, replica: ChunkStore, primary: ChunkStore) -> None:
        super().__init__(replica)
        self.primary = primary

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(ids)
        found = self.inner.get_many(wanted)
        rest = [cid for cid in wanted if cid not in found]
        if rest:
            found.update(self.primary.get_many(rest))
        return found

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        missing = self.inner.has_many(ids)
        return self.primary.has_many(missing) if missing else missing

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.primary.put_many(chunks)

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        raise ReadOnlyError("a read replica collects no garbage: run gc on the primary")

    def close(self) -> None:
        self.inner.close()
        self.primary.close()


class ReplicaMemory(Memory):
    """A read-only handle on a replica whose reads still refresh TTLs: the items a read found with an expiry
    are read again on the primary with the same ``refresh_ttl``, which commits the refresh there (a standby
    takes no writes). Items without a TTL, the common case, cost the primary nothing."""

    def __init__(
        self, repo: Repository, *, primary: Callable[[], Memory], refresh: bool = True, **options: Any
    ) -> None:
        super().__init__(repo, **{**options, "read_only": True})
        self.primary = primary
        #: False for a handle of a caller who may not write (such reads refresh nothing, as on the primary).
        self.refresh = refresh

    def handle(
        self,
        branch: str | None = None,
        *,
        author: str | None = None,
        read_only: bool | None = None,
        system: bool | None = None,
    ) -> Memory:
        """Another read-only replica handle; ``read_only=False`` (a caller who may write) keeps TTL refreshes."""
        refresh = self.refresh if read_only is None else not read_only
        return ReplicaMemory(self.repo, primary=self.primary, refresh=refresh, branch=branch or self.branch,
                             author=author or self.author, pool=self.pool, ttl=self.ttl_config,
                             system=self.system if system is None else system)  # fmt: skip

    def execute(
        self, ops: Iterable[Op], *, author: str | None = None, message: str | None = None
    ) -> tuple[list[Any], Commit | None]:
        ops = list(ops)
        results, _ = super().execute(ops, author=author, message=message)
        again: list[Op] = []
        for op, result in zip(ops, results, strict=True):
            asked = getattr(op, "refresh_ttl", None)
            if not self.refresh or not (asked if asked is not None else self.ttl_config.get("refresh_on_read", True)):
                continue
            if isinstance(op, GetOp) and result is not None and result.expires_at is not None:
                again.append(GetOp(tuple(op.namespace), op.key, asked))
            elif isinstance(op, SearchOp):
                again += [GetOp(hit.namespace, hit.key, asked) for hit in result if hit.expires_at is not None]
        if again:
            primary = self.primary().handle(self.branch, author=author or self.author, read_only=False)
            primary.system = self.system
            primary.execute(again)
        return results, None


@dataclass
class Replica:
    """One read replica of one repository: its read-only handle (opened on first use) and its health."""

    name: str
    opener: Callable[[], Memory]
    memory: Memory | None = None
    down_until: float = 0.0
    #: Seconds behind the primary at the last probe (None: not measured yet).
    lag: float | None = None
    error: str | None = None
    _reached: OrderedDict[tuple[str, ChunkId], None] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self) -> Memory:
        """The replica's read-only handle, opened on first use."""
        with self._lock:
            if self.memory is None:
                self.memory = self.opener()
            return self.memory

    def has(self, token: Token) -> bool:
        """True when the replica's ref of the token's branch is the token's commit or descends from it."""
        key = (token.branch, token.commit)
        with self._lock:
            if key in self._reached:
                return True
        repo = self.handle().repo
        head = repo.refs.get(_HEADS + token.branch)
        if head is None:
            return False
        try:
            reached = repo.is_ancestor(token.commit, head)
        except NotFoundError:
            reached = False  # the commit (or a commit between) is not on the replica yet
        if reached:
            with self._lock:
                self._reached[key] = None
                while len(self._reached) > _REACHED:
                    self._reached.popitem(last=False)
        return reached

    def status(self) -> dict[str, Any]:
        """``{"name", "up", "lag", "error"}`` for health reports."""
        return {"name": self.name, "up": time.monotonic() >= self.down_until, "lag": self.lag, "error": self.error}

    def close(self) -> None:
        """Close the replica's handle (it opens again on next use)."""
        with self._lock:
            memory, self.memory = self.memory, None
        if memory is not None:
            memory.close()


@dataclass(frozen=True, slots=True)
class Routed:
    """Where one read goes: the handle to read with and who serves it (``primary`` or ``replica``)."""

    memory: Memory
    served_by: Server
    replica: Replica | None = None


class ReplicatedStore:
    """A primary store and its read replicas; :meth:`route` picks where a read may go.

    Args:
        primary: the store every write goes to.
        replicas: the replicas, each a :class:`Replica` (see :func:`open_replicated`).
        max_lag: seconds a replica may lag before it is skipped.
        retry_interval: seconds a failed replica is skipped.
        probe_interval: seconds between lag measurements.
    """

    def __init__(
        self,
        primary: Memory,
        replicas: Sequence[Replica] = (),
        *,
        max_lag: float = 10.0,
        retry_interval: float = 5.0,
        probe_interval: float = 1.0,
    ) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.max_lag = max_lag
        self.retry_interval = retry_interval
        self.probe_interval = probe_interval
        #: Reads routed so far, by who served them.
        self.served: dict[Server, int] = {"primary": 0, "replica": 0}
        self._next_probe = 0.0
        self._snapshots: deque[tuple[float, dict[str, ChunkId]]] = deque()
        self._probe_lock = threading.Lock()
        self._lock = threading.Lock()
        self._turn = itertools.count()

    def token(self, branch: str | None = None) -> Token:
        """The token of the primary's head of ``branch`` (default: the primary handle's branch)."""
        name = branch or self.primary.branch
        return Token(name, self.primary.repo.head(name))

    def route(self, tokens: Sequence[Token] = (), primary: Memory | None = None) -> Routed:
        """Where a read carrying ``tokens`` goes: a healthy replica that has every token's commit (any healthy
        replica when there are none), else the primary (``primary``, when given, becomes the primary handle)."""
        if primary is not None:
            self.primary = primary
        self._probe_if_due(self.primary)
        count = len(self.replicas)
        start = next(self._turn) if count > 1 else 0
        for i in range(count):
            replica = self.replicas[(start + i) % count]
            if not self._usable(replica, bool(tokens)):
                continue
            try:
                if all(replica.has(token) for token in tokens):
                    return self._count(Routed(replica.handle(), "replica", replica))
            except StorageError as exc:
                self.failed(replica, exc)
            except NotFoundError:
                continue  # the replica has not yet got the branch it opens on: it lacks the commit too
        return self._count(Routed(self.primary, "primary"))

    def read(self, fn: Callable[[Memory], T], tokens: Sequence[Token] = ()) -> tuple[T, Server]:
        """Run the read ``fn`` where :meth:`route` sends it; if the replica fails meanwhile, on the primary."""
        routed = self.route(tokens)
        if routed.replica is None:
            return fn(routed.memory), "primary"
        try:
            return fn(routed.memory), "replica"
        except StorageError as exc:
            self.failed(routed.replica, exc)
        self._count(Routed(self.primary, "primary"))
        return fn(self.primary), "primary"

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """Skip ``replica`` for ``retry_interval`` seconds after it failed."""
        with self._lock:
            first = time.monotonic() >= replica.down_until
            replica.down_until = time.monotonic() + self.retry_interval
            replica.error = str(exc)
        if first:
            log.warning("read replica %s failed, reading from the primary for %.0f s: %s", replica.name,
                        self.retry_interval, exc)  # fmt: skip

    def _usable(self, replica: Replica, checked: bool) -> bool:
        """Up, and not known to lag too much; a read without tokens (``checked=False``) also needs its lag
        measured (a replica that has reached no snapshot of the primary yet may be arbitrarily old)."""
        if time.monotonic() < replica.down_until:
            return False
        if replica.lag is None:
            return checked
        return replica.lag <= self.max_lag

    def _count(self, routed: Routed) -> Routed:
        with self._lock:
            self.served[routed.served_by] += 1
        return routed

    def _probe_if_due(self, primary: Memory) -> None:
        if time.monotonic() < self._next_probe or not self._probe_lock.acquire(blocking=False):
            return
        try:
            self.probe(primary)
        finally:
            self._probe_lock.release()

    def probe(self, primary: Memory | None = None) -> None:
        """Measure every replica's lag now: snapshot the primary's branch heads, and find the newest snapshot
        each replica has reached (every branch at that snapshot's commit or a descendant)."""
        now = time.monotonic()
        self._next_probe = now + self.probe_interval
        heads = (primary or self.primary).repo.refs.list(_HEADS)
        self._snapshots.append((now, {name.removeprefix(_HEADS): cid for name, cid in heads.items()}))
        horizon = now - 2 * self.max_lag - self.probe_interval
        while len(self._snapshots) > 1 and self._snapshots[0][0] < horizon:
            self._snapshots.popleft()
        for replica in self.replicas:
            if time.monotonic() < replica.down_until:
                continue
            try:
                replica.lag = self._lag(replica, now)
                replica.error = None
            except (StorageError, NotFoundError) as exc:
                if isinstance(exc, StorageError):
                    self.failed(replica, exc)
                replica.lag = None  # a replica that has no branch yet (a fresh standby) lags by definition

    def _lag(self, replica: Replica, now: float) -> float | None:
        for taken, heads in reversed(self._snapshots):
            if all(replica.has(Token(branch, cid)) for branch, cid in heads.items()):
                return now - taken
        oldest = self._snapshots[0][0]
        # Older than every snapshot kept: unknown until it has been so for longer than max_lag.
        return None if now - oldest <= self.max_lag else now - oldest

    def status(self) -> list[dict[str, Any]]:
        """Each replica's :meth:`Replica.status`."""
        return [replica.status() for replica in self.replicas]

    def close(self) -> None:
        """Close the replicas' handles and the primary."""
        for replica in self.replicas:
            replica.close()
        self.primary.close()


def replica_urls(url: str | None) -> list[str]:
    """The ``?replica=`` URLs of a PostgreSQL store URL (none for other stores)."""
    return list(StoreUrl.parse(url).replicas)


def replica_opener(replica_url: str, primary_url: str, primary: Callable[[], Memory]) -> Callable[[], Memory]:
    """A function opening the read-only handle of the standby at ``replica_url`` of the primary store
    ``primary_url``: the same repository id, its chunks in the standby (or in the primary's S3, shared), no
    schema change and no write (a standby refuses them), search in process, the primary's embedder."""
    if not is_postgres(replica_url) or not is_postgres(primary_url):
        raise ConfigError(
            f"read replicas are PostgreSQL standbys of a PostgreSQL store, not {redact_url(replica_url)!r}"
        )
    parsed = StoreUrl.parse(primary_url)
    conninfo, primary_conninfo, repo_id = conninfo_of(replica_url), conninfo_of(primary_url), parsed.repo

    def open_replica() -> Memory:
        db = shared_database(conninfo, repo_id)
        chunks: ChunkStore | None = None
        try:
            chunks = s3_chunk_store(parsed)  # in S3: the primary's chunks are the replica's
            if chunks is None:
                primary_chunks = PostgresChunkStore(shared_database(primary_conninfo, repo_id))
                chunks = _ReplicaChunkStore(PostgresChunkStore(db), primary_chunks)
            repo = Repository(LruChunkStore(chunks), PostgresRefStore(db))
            now = primary()
            pool = IndexPool(repo, embedder=now.pool.embedder, fields=now.pool.fields,
                             cache=_ReplicaVectorCache(PostgresVectorCache(db)))  # fmt: skip
            return ReplicaMemory(repo, primary=primary, branch=now.branch, author=now.author, pool=pool,
                                 ttl=now.ttl_config)  # fmt: skip
        except BaseException:
            if chunks is not None:
                chunks.close()
            db.close()
            raise

    return open_replica


def open_replicated(
    url: str,
    *,
    replicas: Sequence[str] = (),
    max_lag: float = 10.0,
    retry_interval: float = 5.0,
    probe_interval: float = 1.0,
    **options: Any,
) -> ReplicatedStore:
    """Open the PostgreSQL store at ``url`` with its read replicas: those named by ``?replica=<URL>`` in ``url``
    (repeatable) and by ``replicas``. ``options`` go to :func:`engram.open` for the primary.

    Example: ``open_replicated("postgresql://app@primary/db?replica=postgresql://app@standby/db")``, then
    ``store.route(parse_tokens(header)).memory`` is the handle a read with that header may use.
    """
    primary = open_store(url, **options)
    urls = [*replica_urls(url), *replicas]
    try:
        store = ReplicatedStore(primary, max_lag=max_lag, retry_interval=retry_interval, probe_interval=probe_interval)
        store.replicas = [Replica(f"replica-{i + 1}", replica_opener(replica, url, lambda: store.primary))
                          for i, replica in enumerate(urls)]  # fmt: skip
    except BaseException:
        primary.close()
        raise
    return store
