"""How a server runs (:class:`ServerConfig`) and the tenant stores it serves (:class:`Tenants`), each with its
services (one channels hub, one memory writer) built from that one configuration."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engram.breakers import configure as configure_breakers
from engram.embed import Embedder
from engram.errors import ConfigError
from engram.objects import Commit
from engram.ops.access import LOCAL_TENANT, default_keys_path
from engram.ops.remotes import open_remote, remote_config
from engram.ops.schedule import BackupSchedule
from engram.ops.services import TenantServices
from engram.ops.shards import ShardRouter
from engram.ops.shards.catalog import TenantMovedError
from engram.ops.tenants import MAX_OPEN, TenantPool, store_opener
from engram.repo import Repository
from engram.store import Memory, open_repository, tenant_url
from engram.store.aio import Coalescer
from engram.store.operations import Op
from engram.store.urls import check_tenant
from engram.writer import MemoryWriter, WriterConfig
from engram.writer.traces import check_folder, store_dir

MiB = 1 << 20
#: Most write batchers (tenant, branch, author) kept; an idle one holds nothing and is recreated on demand.
MAX_COALESCERS = 1024


@dataclass
class ServerConfig:
    """How a server runs.

    Attributes:
        store: the base store URL (``None``: ``./.engram``; ``:memory:``; a directory; ``sqlite:///file.db``).
            Without keys it is the store served; with keys each tenant gets its own store derived from it.
        embedder: embedder spec (``minilm``, ``hashing``, ``openai:<model>@<url>``), an Embedder, or None.
        keys_file: the API keys file; default ``<store dir>/keys.json`` (none for ``:memory:``).
        max_body: the largest request body accepted, in bytes.
        branch: the branch requests read and write when they name none.
        require_keys: True/False forces keys on/off; None (default) requires them when the keys file has any.
        redis: a Redis URL caching a PostgreSQL store (see :func:`engram.open`).
        sweep_ttl: delete expired items in the background (every 5 minutes) in every open store.
        max_tenants: how many tenant stores stay open when idle (least recently used ones are closed).
        index_delay: seconds after a write when a background thread brings the branch's search index up
            to date (None: the next search does it).
        vector_cache: a file of embeddings shared by every tenant store (see :func:`engram.open`).
        writer_extractor / writer_interval / writer_policy: the memory writer of ``/v1/conversations``:
            ``offline``, ``openai:<model>@<url>`` or None (runs gated); every N completed assistant turns;
            ``auto`` (merge each run) or ``review`` (leave its branch for approve/reject).
        writer_timeout / writer_retries / writer_instructions / writer_max_failures / writer_max_model_calls /
            writer_max_input_chars / writer_redact_turns: the rest of the writer's settings (see
            :class:`~engram.writer.WriterConfig`); runs happen in each tenant's background worker, never inside a
            request.
        writer_traces: a folder under which each tenant's writer keeps its traces in a folder of its own
            (``<writer_traces>/<tenant>``); None: inside each tenant's store (see :meth:`trace_dir`).
        backup_every / backup_remote: back up the served store every so many seconds (None: never) to a remote,
            by name (``engram remote add``) or URL (see :class:`~engram.ops.schedule.BackupSchedule`).
        shard_catalog: a PostgreSQL URL of a shard catalog: each tenant's repository lives on the
            shard the catalog routes it to, and map changes (moves) are picked up without a restart.
        replicas / replica_max_lag: read replicas (PostgreSQL standbys of a PostgreSQL store; also ``?replica=``
            in its URL) and the seconds one may lag before reads skip it (engram.server.consistency).
        channel_max_content: the longest message or note content the channels service accepts, in characters
            (None: the library's default, see :class:`~engram.channels.Channels`).
        rerank: the operator's reranker (``onnx:<dir>`` or ``onnx:<dir>@<top_k>``): a search asking for
            ``rerank`` runs it (:mod:`engram.ops.rerankers`); None: such a search is refused (422).
        breakers: circuit breaker settings by kind of dependency (``postgresql``, ``redis``, ``embedder``,
            ``model``, ``s3``), e.g. ``{"embedder": {"failure_threshold": 3, "reset_timeout": 10}}``; applied to
            the whole process when the server starts (:func:`engram.breakers.configure`).
    """

    store: str | None = None
    embedder: Embedder | str | None = "minilm"
    keys_file: Path | str | None = None
    max_body: int = MiB
    branch: str = "main"
    require_keys: bool | None = None
    redis: str | None = None
    sweep_ttl: bool = True
    max_tenants: int = MAX_OPEN
    index_delay: float | None = 0.2
    vector_cache: str | None = None
    writer_extractor: str | None = "offline"
    writer_interval: int = 2
    writer_policy: str = "auto"
    writer_timeout: float = 30.0
    writer_retries: int = 2
    writer_instructions: str | None = None
    writer_max_failures: int = 3
    writer_max_model_calls: int = 40
    writer_max_input_chars: int = 100_000
    writer_redact_turns: bool = False
    writer_traces: str | Path | None = None
    backup_every: float | None = None
    backup_remote: str = "origin"
    shard_catalog: str | None = None
    replicas: tuple[str, ...] = ()
    replica_max_lag: float = 10.0
    breakers: dict[str, dict[str, Any]] | None = None
    channel_max_content: int | None = None
    rerank: str | None = None

    def __post_init__(self) -> None:
        self.writer_config()  # a writer setting out of range fails when the server is configured, not at a run
        limit = self.channel_max_content
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"channel_max_content must be a positive number of characters, got {limit!r}")

    def open_options(self) -> dict[str, Any]:
        """Keyword arguments every store of this server is opened with."""
        options: dict[str, Any] = {} if self.redis is None else {"redis": self.redis}
        if self.vector_cache is not None:
            options["vector_cache"] = self.vector_cache
        return options

    def keys_path(self) -> Path | None:
        """Where the API keys are kept (None: this store has no default place for them)."""
        return Path(self.keys_file) if self.keys_file is not None else default_keys_path(self.store)

    def writer_config(self) -> WriterConfig:
        """This server's ``writer_*`` settings (refused here when out of range)."""
        return WriterConfig(
            extractor=self.writer_extractor, interval=self.writer_interval, policy=self.writer_policy,
            timeout=self.writer_timeout, retries=self.writer_retries, instructions=self.writer_instructions,
            max_failures=self.writer_max_failures, max_model_calls=self.writer_max_model_calls,
            max_input_chars=self.writer_max_input_chars, redact_turns=self.writer_redact_turns,
        )  # fmt: skip

    def trace_dir(self, tenant: str, local: bool) -> Path:
        """The folder of ``tenant``'s writer traces, never another tenant's: ``<writer_traces>/<tenant>``, else
        inside the tenant's store (``local``: the served store itself; see :func:`engram.writer.traces.store_dir`)."""
        if self.writer_traces is not None:
            return Path(self.writer_traces) / check_tenant(tenant)
        return store_dir(self.store if local else tenant_url(self.store, tenant), tenant)

    def writer(self, memory: Memory, trace_dir: Path | None = None) -> MemoryWriter:
        """A memory writer on ``memory`` with this server's ``writer_*`` settings and its traces in ``trace_dir``,
        running in its background worker: what each tenant's :class:`~engram.ops.services.TenantServices` builds
        once."""
        config = replace(self.writer_config(), trace_dir=trace_dir)
        return config.build(memory, api_key=os.environ.get("OPENAI_API_KEY"))  # a door reads it


class Tenants:
    """The server's tenant stores: a bounded :class:`~engram.ops.tenants.TenantPool` (one repository per tenant)
    opened with the server's options, one embedder shared by all, each tenant's services (:meth:`services`), and
    the repository readiness checks probe."""

    def __init__(self, config: ServerConfig, local: bool) -> None:
        self.config = config
        self.local = local
        for kind, settings in (config.breakers or {}).items():
            try:  # before any store opens: its breakers start with these settings
                configure_breakers(kind, **settings)
            except TypeError as exc:
                raise ConfigError(f"breakers[{kind!r}]: only failure_threshold and reset_timeout ({exc})") from None
        if local:  # a foreign folder named by --writer-traces fails here, not at the first failed run
            check_folder(config.trace_dir(LOCAL_TENANT, local))
        self._probe: Repository | None = None
        self._lock = threading.Lock()
        self.router: ShardRouter | None = None
        if config.shard_catalog is not None and local:
            raise ConfigError("a shard catalog places tenants: it needs API keys (engram keys create --tenant ...)")
        if config.shard_catalog is not None:
            self.router = ShardRouter(config.shard_catalog)
        opener = store_opener(config.store, local=local, branch=config.branch, embedder=config.embedder,
                              router=self.router, **config.open_options())  # fmt: skip
        self.pool = TenantPool(
            opener,
            max_open=config.max_tenants,
            sweep_minutes=5.0 if config.sweep_ttl else None,
            index_delay=config.index_delay,
            router=self.router,
            writer=self.writer,
            max_content=config.channel_max_content,
        )
        self._coalescers: OrderedDict[tuple[str, str, str], Coalescer] = OrderedDict()

    def writer(self, memory: Memory, tenant: str) -> MemoryWriter:
        """``tenant``'s memory writer over its store ``memory``, its traces in the tenant's own folder."""
        return self.config.writer(memory, self.config.trace_dir(tenant, self.local))

    def services(self, tenant: str, memory: Memory | None = None) -> TenantServices:
        """``tenant``'s channels hub and memory writer (of ``memory``, the store a request leased, when given):
        built once per open tenant store and closed with it. Requests act through views bound to their caller's
        handle (``channels.for_caller(...)``, ``writer.for_caller(...)``)."""
        return self.pool.services(tenant, memory)

    def coalescer(self, tenant: str, branch: str, author: str) -> Coalescer:
        """The batcher of plain writes to ``branch`` of ``tenant`` by ``author``: concurrent writes in one
        event-loop tick become one commit, or consecutive ones when two write the same key (DESIGN.md §2)."""
        key = (tenant, branch, author)
        with self._lock:
            found = self._coalescers.get(key)
            if found is None:
                found = self._coalescers[key] = Coalescer(lambda ops: self._execute(key, ops))
                while len(self._coalescers) > MAX_COALESCERS:
                    self._coalescers.popitem(last=False)  # an idle batcher holds nothing: drop the oldest
            self._coalescers.move_to_end(key)
            return found

    def _execute(self, key: tuple[str, str, str], ops: list[Op]) -> tuple[list[Any], Commit | None]:
        tenant, branch, author = key
        try:
            with self.pool.lease(tenant) as memory:
                outcome = memory.handle(branch, author=author).execute(ops)
        except TenantMovedError:  # the tenant moved to another shard meanwhile: write there
            with self.pool.lease(tenant) as memory:
                outcome = memory.handle(branch, author=author).execute(ops)
        self.pool.written(tenant, branch)
        return outcome

    def probe(self) -> Repository:
        """The repository readiness checks write to: the served store, or with keys the base store."""
        if self.local:
            with self.pool.lease(LOCAL_TENANT) as memory:
                return memory.repo
        with self._lock:
            if self._probe is None:
                self._probe = open_repository(self.config.store, redis=self.config.redis)
            return self._probe

    def backups(self) -> BackupSchedule | None:
        """The schedule of ``backup_every`` (not started), or None without one.

        Raises:
            ConfigError: a schedule on a server with API keys (each tenant is its own store: back them up with
                ``engram backup create``).
            NotFoundError: an unknown remote name.
        """
        every = self.config.backup_every
        if every is None:
            return None
        if not self.local:
            raise ConfigError("--backup-every backs up a single-store server; with API keys back up each tenant "
                              "store with `engram backup create`")  # fmt: skip
        name = self.config.backup_remote
        url = name if "://" in name else remote_config(self.probe(), self.config.store).url(name)
        open_remote(url)  # a malformed URL fails now, not at the first backup

        @contextmanager
        def served() -> Iterator[Repository]:
            with self.pool.lease(LOCAL_TENANT) as memory:
                yield memory.repo

        return BackupSchedule(served, lambda: open_remote(url), every)

    def close(self) -> None:
        """Close every open store, and forget the write batchers (they belong to the event loop that is ending)."""
        self.pool.close()
        if self.router is not None:
            self.router.close()
        with self._lock:
            self._coalescers.clear()
            if self._probe is not None:
                self._probe.chunks.close()
                self._probe.refs.close()
                self._probe = None


__all__ = ["MAX_COALESCERS", "MiB", "ServerConfig", "Tenants"]
