"""Shard clusters for the scale-out tests: several real PostgreSQL databases as shards and one as the catalog,
created for a test and dropped after it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import pytest

from engram.ops.shards import ShardCatalog, ShardRouter, add_shard


@dataclass
class Cluster:
    """Shard databases (name -> URL), the catalog, and a router on it; ``extra`` are databases made but not yet
    in the map (to add during a test)."""

    catalog: ShardCatalog
    router: ShardRouter
    shards: dict[str, str]
    extra: dict[str, str] = field(default_factory=dict)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def make_databases(admin_url: str, count: int) -> list[tuple[str, str]]:
    """``count`` fresh databases: (name, URL) each."""
    import psycopg

    made = []
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for _ in range(count):
            name = f"engram_shard_{uuid.uuid4().hex[:10]}"
            conn.execute(f'CREATE DATABASE "{name}"')
            made.append((name, _with_db(admin_url, name)))
    return made


def drop_databases(admin_url: str, names: list[str]) -> None:
    """Drop databases, ending their connections."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def shard_databases(postgres_url: str) -> Iterator[list[str]]:
    """Four databases for the session (a catalog and three shards), dropped at its end: creating and dropping
    databases costs seconds each (a checkpoint), so tests empty them instead (:func:`cluster`)."""
    made = make_databases(postgres_url, 4)
    try:
        yield [url for _, url in made]
    finally:
        drop_databases(postgres_url, [name for name, _ in made])


def _empty(url: str) -> None:
    """Empty every engram table of a database (schemas stay)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'engram%%' "
            "AND tablename <> 'engram_schema'"
        )]  # fmt: skip
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
        if "engram_shard_map" in tables:
            conn.execute("INSERT INTO engram_shard_map (id, version) VALUES (1, 1)")


@pytest.fixture
def cluster(shard_databases: list[str]) -> Iterator[Cluster]:
    """Two shards in the map (``s1``, ``s2``) and one more database (``s3``) ready to be added, all empty."""
    catalog_url, *shard_urls = shard_databases
    for url in shard_databases:
        _empty(url)
    catalog = ShardCatalog(catalog_url)
    names = [f"s{i + 1}" for i in range(len(shard_urls))]
    urls = dict(zip(names, shard_urls, strict=True))
    for name in names[:2]:
        add_shard(catalog, urls[name], name=name)
    router = ShardRouter(catalog, ttl=0.2)
    try:
        yield Cluster(catalog, router, {n: urls[n] for n in names[:2]}, {n: urls[n] for n in names[2:]})
    finally:
        router.close()
        catalog.close()
