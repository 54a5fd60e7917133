"""Run LangGraph's store test suites against ``EngramStore``: load a suite, swap its store, nothing else.

A suite's modules are imported from the extracted sdist (see ``lg_sdists``) as the package ``tests``
they were written in, then renamed so they cannot clash with anything. A ``test_langgraph_*.py``
module here copies a suite module's names (tests, fixtures, helpers) and replaces only what builds a
store: the store classes the tests name (``InMemoryStore``, ``SqliteStore``, ``AsyncSqliteStore``)
become thin ``EngramStore`` subclasses whose constructors take the same arguments, and fixtures that
build a PostgreSQL database per test build an ``EngramStore`` on a fresh repository instead. Every
``index=`` and ``ttl=`` config the tests give reaches ``EngramStore`` unchanged, except that the SQLite
stand-ins spell out SqliteStore's own default for an omitted ``refresh_on_read`` (False; see
:func:`sqlite_ttl`), because LangGraph's stores disagree on it and EngramStore follows TTLConfig (True).
"""

from __future__ import annotations

import importlib
import itertools
import sys
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from lg_sdists import check_installed, suite_dir

from engram.integrations.langgraph import EngramStore
from engram.store import tenant_url

# ---------------------------------------------------------------- loading a suite


class Suite:
    """The ``tests`` package of one pinned sdist, loaded under a private name."""

    def __init__(self, dist: str) -> None:
        check_installed(dist)
        self.dist = dist
        self.root = suite_dir(dist)
        self.package = ModuleType(f"_langgraph_suite_{dist.replace('-', '_')}")
        self.package.__path__ = [str(self.root)]
        self.modules: dict[str, ModuleType] = {}

    def module(self, name: str) -> ModuleType:
        """Import ``tests/<name>.py`` of the suite (with its own ``from tests.x import ...`` working)."""
        if name not in self.modules:
            saved = {k: m for k, m in sys.modules.items() if k == "tests" or k.startswith("tests.")}
            for k in saved:
                del sys.modules[k]
            sys.modules["tests"] = self.package
            sys.modules.update({f"tests.{n}": m for n, m in self.modules.items()})
            try:
                importlib.import_module(f"tests.{name}")
            finally:
                for k in [k for k in sys.modules if k == "tests" or k.startswith("tests.")]:
                    module = sys.modules.pop(k)
                    if k != "tests":
                        self.modules[k.removeprefix("tests.")] = module
                        sys.modules[f"{self.package.__name__}.{k.removeprefix('tests.')}"] = module
                sys.modules.update(saved)
        return self.modules[name]

    def names(self, name: str) -> dict[str, Any]:
        """Everything a suite module defines or imports, for a test module here to collect as its own."""
        return {k: v for k, v in vars(self.module(name)).items() if not k.startswith("__")}


_SUITES: dict[str, Suite] = {}


def suite(dist: str) -> Suite:
    """The loaded suite of ``dist`` (loaded once per session)."""
    if dist not in _SUITES:
        _SUITES[dist] = Suite(dist)
    return _SUITES[dist]


# ---------------------------------------------------------------- where stores live during one test


@dataclass
class Backend:
    """Where the current test's stores are created, and the stores to close after it."""

    tmp: Path
    postgres_url: str | None = None
    opened: list[EngramStore] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def url(self) -> str:
        """A fresh store: a new SQLite file, or a new repository id on PostgreSQL."""
        if self.postgres_url is not None:
            return tenant_url(self.postgres_url, f"lg{uuid.uuid4().hex[:16]}")
        return f"sqlite:///{self.tmp / f'engram-{next(self.counter)}.db'}"


_backend: Backend | None = None
_closed: weakref.WeakSet[EngramStore] = weakref.WeakSet()


@contextmanager
def backend(tmp: Path, postgres_url: str | None = None) -> Iterator[Backend]:
    """Make ``tmp`` (or a PostgreSQL server) the place where this test's stores are created."""
    global _backend
    _backend = Backend(tmp, postgres_url)
    try:
        yield _backend
    finally:
        opened, _backend = _backend.opened, None
        for store in opened:
            close(store)


def close(store: EngramStore) -> None:
    """Stop the sweeper and close the store's memory (once)."""
    if store in _closed:
        return
    _closed.add(store)
    store.stop_ttl_sweeper()
    store.memory.close()


def new_store(cls: type[EngramStore] = EngramStore, **kwargs: Any) -> EngramStore:
    """``cls(url=<fresh store>, **kwargs)``: how a LangGraph user would build an EngramStore."""
    if _backend is None:
        raise RuntimeError("an EngramStore was built outside a conformance test (no backend fixture)")
    store = cls(url=_backend.url(), **kwargs)
    _backend.opened.append(store)
    return store


# ---------------------------------------------------------------- store classes with LangGraph's constructors


class InMemoryStore(EngramStore):
    """``InMemoryStore(index=..., ...)`` as an EngramStore over a fresh SQLite file."""

    def __init__(self, **kwargs: Any) -> None:
        if _backend is None:
            raise RuntimeError("an EngramStore was built outside a conformance test (no backend fixture)")
        super().__init__(url=_backend.url(), **kwargs)
        _backend.opened.append(self)


def sqlite_ttl(ttl: dict[str, Any] | None) -> dict[str, Any] | None:
    """SqliteStore's TTL config as SqliteStore reads it: a missing ``refresh_on_read`` means False there
    (``ttl_config.get("refresh_on_read", False)``), while TTLConfig, PostgresStore and EngramStore take it
    as True. Made explicit, so the stand-in keeps the semantics of the store it stands for."""
    return None if ttl is None else {"refresh_on_read": False, **ttl}


class SqliteStore(EngramStore):
    """``SqliteStore.from_conn_string(conn, index=..., ttl=...)``: an EngramStore over a fresh SQLite file.

    The connection string is not used (each store gets its own file in the test's temporary
    directory); ``setup()`` has nothing to do because engram creates its schema on open. The ``ttl``
    config gets SqliteStore's default for an omitted ``refresh_on_read`` (see :func:`sqlite_ttl`).
    """

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[EngramStore]:
        store = new_store(cls, **{**kwargs, "ttl": sqlite_ttl(kwargs.get("ttl"))})
        try:
            yield store
        finally:
            close(store)

    def setup(self) -> None:
        """Nothing to migrate: engram creates its schema on open."""


class AsyncSqliteStore(EngramStore):
    """``AsyncSqliteStore.from_conn_string(...)`` (``async with``): the same EngramStore, awaitable setup."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn_string: str, **kwargs: Any) -> AsyncIterator[EngramStore]:
        store = new_store(cls, **{**kwargs, "ttl": sqlite_ttl(kwargs.get("ttl"))})
        try:
            yield store
        finally:
            close(store)

    async def setup(self) -> None:
        """Nothing to migrate: engram creates its schema on open."""


# ---------------------------------------------------------------- helpers that read a store's table directly
# LangGraph's PostgreSQL suite reaches into its ``store`` table with SQL to expire an item without deleting
# it and to read expires_at. These do the same through engram's public API, so the TTL tests still run.


def expire_now(store: EngramStore, namespace: tuple[str, ...], key: str) -> None:
    """Make the item expired but leave it stored (unswept): rewrite it with a TTL that has already run out."""
    versions = store.memory.history(namespace, key)
    assert versions and versions[0].item is not None, f"{namespace}/{key} is not stored"
    store.memory.put(namespace, key, versions[0].item.value, ttl=1e-9)
    time.sleep(0.002)


def row_exists(store: EngramStore, namespace: tuple[str, ...], key: str) -> bool:
    """The item is still stored (expired or not) on the head of the branch."""
    versions = store.memory.history(namespace, key)
    return bool(versions) and versions[0].item is not None


def stored_expires_at(store: EngramStore, namespace: tuple[str, ...], key: str) -> datetime | None:
    """The stored expiry of the item, expired or not."""
    versions = store.memory.history(namespace, key)
    assert versions and versions[0].item is not None, f"{namespace}/{key} is not stored"
    return versions[0].item.expires_at


async def aexpire_now(store: EngramStore, namespace: tuple[str, ...], key: str) -> None:
    """Async twin of :func:`expire_now`."""
    expire_now(store, namespace, key)


async def arow_exists(store: EngramStore, namespace: tuple[str, ...], key: str) -> bool:
    """Async twin of :func:`row_exists`."""
    return row_exists(store, namespace, key)


async def astored_expires_at(store: EngramStore, namespace: tuple[str, ...], key: str) -> datetime | None:
    """Async twin of :func:`stored_expires_at`."""
    return stored_expires_at(store, namespace, key)
