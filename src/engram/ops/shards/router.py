"""Routing tenants to shards: a cached view of the shard map, and tenant stores that refuse stale writes.

A :class:`ShardRouter` answers "which database holds this tenant?" from a copy of the map it re-reads only when
the map's version changed, checking the version at most every ``ttl`` seconds (one indexed read). The stores it
opens (:meth:`ShardRouter.open`) put every ref move of the tenant behind the catalog's write gate: the move runs
while the gate's shared locks are held, and only if the tenant still routes to the store's shard at the map
version read under them. So a write either finishes before a move freezes the tenant (and the move copies it),
or waits for the freeze and then fails with :class:`~.catalog.TenantMovedError`, to be retried on the new shard;
an acknowledged write is never left behind on the old copy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engram.backends import ForwardingRefStore, RefStore
from engram.errors import ConfigError, ReadOnlyError
from engram.hashing import ChunkId
from engram.ops.shards._rendezvous import Shard
from engram.ops.shards.catalog import WRITE_WAIT, ShardCatalog, ShardMap, TenantMovedError
from engram.store import Memory, tenant_url
from engram.store import open as open_store

#: Seconds a router trusts its copy of the map before checking the version again.
TTL = 1.0


class ShardRouter:
    """Tenant -> shard, from a copy of the catalog's map refreshed when its version changes.

    Args:
        catalog: the shard catalog (or its PostgreSQL URL).
        ttl: seconds between version checks (a map change is seen within this long).
        write_wait: seconds a write waits behind a move's freeze before failing as unavailable.
    """

    def __init__(self, catalog: ShardCatalog | str, *, ttl: float = TTL, write_wait: float = WRITE_WAIT) -> None:
        self.catalog = catalog if isinstance(catalog, ShardCatalog) else ShardCatalog(catalog)
        self._owns = not isinstance(catalog, ShardCatalog)
        self.ttl = ttl
        self.write_wait = write_wait
        self._lock = threading.Lock()
        self._map = self.catalog.load()
        self._checked = time.monotonic()

    def map(self, *, refresh: bool = True) -> ShardMap:
        """The map as this router knows it; ``refresh`` checks the catalog's version when ``ttl`` has passed
        (``refresh=False`` never does I/O)."""
        if refresh and time.monotonic() - self._checked >= self.ttl:
            self.refresh()
        return self._map

    def refresh(self, version: int | None = None, load: Callable[[], ShardMap] | None = None) -> ShardMap:
        """Re-read the map (with ``load``, else from the catalog) if its version (``version``, else read now)
        differs from the copy's."""
        latest = self.catalog.version() if version is None else version
        with self._lock:
            self._checked = time.monotonic()
            if latest == self._map.version:
                return self._map
        loaded = (load or self.catalog.load)()
        with self._lock:
            if loaded.version > self._map.version:
                self._map = loaded
            return self._map

    def route(self, tenant: str, *, refresh: bool = True) -> Shard:
        """The shard ``tenant`` lives on.

        Raises:
            ConfigError: the map has no active shard (checked against the catalog's latest map first).
        """
        try:
            return self.map(refresh=refresh).route(tenant)
        except ConfigError:
            if not refresh:
                raise
            return self.refresh().route(tenant)  # shards may have been added since the last check

    def url(self, tenant: str, *, refresh: bool = True) -> str:
        """The store URL of ``tenant``'s repository on its shard."""
        return tenant_url(self.route(tenant, refresh=refresh).url, tenant)

    def open(self, tenant: str, **options: Any) -> Memory:
        """Open ``tenant``'s store on its shard (``options`` go to :func:`engram.open`), its writes gated."""
        shard = self.route(tenant)
        memory = open_store(tenant_url(shard.url, tenant), **options)
        memory.repo.refs = GatedRefStore(memory.repo.refs, self, tenant, shard.name)
        return memory

    def current(self, tenant: str, memory: Memory, *, refresh: bool = True) -> bool:
        """True while ``memory`` (opened by :meth:`open`) is on the shard ``tenant`` routes to."""
        refs = memory.repo.refs
        if not isinstance(refs, GatedRefStore):
            return True
        return self.route(tenant, refresh=refresh).name == refs.shard

    def close(self) -> None:
        """Close the catalog connections (when this router opened them)."""
        if self._owns:
            self.catalog.close()


class GatedRefStore(ForwardingRefStore):
    """A tenant's ref store whose moves run behind the catalog's write gate (see the module docstring)."""

    def __init__(self, inner: RefStore, router: ShardRouter, tenant: str, shard: str) -> None:
        super().__init__(inner)
        self.router = router
        self.tenant = tenant
        self.shard = shard

    @property
    def health(self) -> Any:
        """The inner store's cache health, if it has one (for :func:`engram.store.connect.cache_status`)."""
        return getattr(self.inner, "health", None)

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        with self.router.catalog.write_gate(self.tenant, self.router.write_wait) as gate:
            shard = self.router.refresh(gate.version, gate.load).route(self.tenant)
            if shard.name != self.shard:
                raise TenantMovedError(
                    f"tenant {self.tenant!r} moved from shard {self.shard!r} to {shard.name!r}: retry the write", 0.0
                )
            if shard.status == "readonly":
                raise ReadOnlyError(f"shard {shard.name!r} is read-only: tenant {self.tenant!r} takes no writes now")
            return self.inner.set(name, new, expected, actor=actor, reason=reason)


def sharded_opener(router: ShardRouter, **options: Any) -> Callable[[str], Memory]:
    """A :class:`~engram.ops.tenants.TenantPool` opener opening each tenant on its shard (``options`` go to
    :func:`engram.open`)."""

    def open_tenant(tenant: str) -> Memory:
        return router.open(tenant, **options)

    return open_tenant


__all__ = ["TTL", "GatedRefStore", "ShardRouter", "sharded_opener"]
