"""How a server runs (:class:`ServerConfig`) and the tenant stores it serves (:class:`Tenants`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.embed import Embedder
from engram.objects import Commit
from engram.ops.access import LOCAL_TENANT, default_keys_path
from engram.ops.tenants import MAX_OPEN, TenantPool, store_opener
from engram.repo import Repository
from engram.store import open_repository
from engram.store.aio import Coalescer
from engram.store.ops import Op

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
        writer_extractor / writer_interval / writer_policy: the memory writer of ``/v1/conversations`` (issue
            #14): ``offline``, ``openai:<model>@<url>`` or None (runs gated); every N completed assistant turns;
            ``auto`` (merge each run) or ``review`` (leave its branch for approve/reject).
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

    def open_options(self) -> dict[str, Any]:
        """Keyword arguments every store of this server is opened with."""
        options: dict[str, Any] = {} if self.redis is None else {"redis": self.redis}
        if self.vector_cache is not None:
            options["vector_cache"] = self.vector_cache
        return options

    def keys_path(self) -> Path | None:
        """Where the API keys are kept (None: this store has no default place for them)."""
        return Path(self.keys_file) if self.keys_file is not None else default_keys_path(self.store)


class Tenants:
    """The server's tenant stores: a bounded :class:`~engram.ops.tenants.TenantPool` (one repository per tenant)
    opened with the server's options, one embedder shared by all, and the repository readiness checks probe."""

    def __init__(self, config: ServerConfig, local: bool) -> None:
        self.config = config
        self.local = local
        self._probe: Repository | None = None
        self._lock = threading.Lock()
        opener = store_opener(config.store, local=local, branch=config.branch, embedder=config.embedder,
                              **config.open_options())  # fmt: skip
        self.pool = TenantPool(
            opener,
            max_open=config.max_tenants,
            sweep_minutes=5.0 if config.sweep_ttl else None,
            index_delay=config.index_delay,
        )
        self._coalescers: OrderedDict[tuple[str, str, str], Coalescer] = OrderedDict()

    def coalescer(self, tenant: str, branch: str, author: str) -> Coalescer:
        """The batcher of plain writes to ``branch`` of ``tenant`` by ``author``: concurrent writes in one
        event-loop tick become one commit (DESIGN.md §2)."""
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

    def close(self) -> None:
        """Close every open store, and forget the write batchers (they belong to the event loop that is ending)."""
        self.pool.close()
        with self._lock:
            self._coalescers.clear()
            if self._probe is not None:
                self._probe.chunks.close()
                self._probe.refs.close()
                self._probe = None


__all__ = ["MAX_COALESCERS", "MiB", "ServerConfig", "Tenants"]
