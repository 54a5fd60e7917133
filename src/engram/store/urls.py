"""Store URLs, parsed once into a :class:`StoreUrl`: which kind of store a URL names and the parts its opener needs.

A store URL is one of:

- ``None``: the embedded default, ``./.engram/engram.db``;
- ``:memory:``: a store that lives as long as this process;
- a SQLite file, after SQLAlchemy's convention: ``sqlite:///relative/path.db`` (relative to the working directory),
  ``sqlite:////absolute/path.db``, or a plain path (a directory holds ``engram.db``);
- a PostgreSQL database: ``postgresql://user@host/db?repo=<id>&redis=<url>&replica=<url>&chunks=s3://bucket/prefix``
  (``postgres://`` too); engram reads its own options and hands libpq the rest.

Every door (``engram.open``, the CLI, the server, tenants, shards, replicas) asks the parsed value, never the text's
prefix; the opener for each kind is chosen from a table in :mod:`engram.store.connect`. A bad URL raises
:class:`~engram.errors.ConfigError` whose message never shows a password.

Examples:
    >>> StoreUrl.parse("postgresql://app@db/engram?repo=acme").repo
    'acme'
    >>> StoreUrl.parse("sqlite:///memories.db").path.as_posix()
    'memories.db'
    >>> StoreUrl.parse("/srv/engram").tenant("acme")
    '/srv/engram/tenants/acme/engram.db'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engram.errors import ConfigError
from engram.redaction import redact_url

#: The kinds of store a URL can name.
Kind = Literal["memory", "sqlite", "postgres"]

#: Where ``engram.open()`` keeps the embedded store, and the file's name in a store directory.
DEFAULT_DIR = ".engram"
DB_NAME = "engram.db"

#: The URL schemes engram opens, and the kind of store each names.
SCHEMES: dict[str, Kind] = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres"}

#: A path ending in one of these is a SQLite file; any other path is a store directory (holding ``engram.db``).
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")

#: Options of a PostgreSQL store URL besides ``repo`` and ``redis`` that engram reads and libpq never sees: where
#: chunks live (``chunks=s3://bucket/prefix``, ``chunks_endpoint=``, ``chunks_region=``; see
#: :mod:`engram.backends.s3`) and read replicas (``replica=<URL>``, repeatable; see :mod:`engram.store.replicas`).
STORE_OPTIONS = ("chunks", "chunks_endpoint", "chunks_region", "replica")

_USAGE = "use ':memory:', sqlite:///relative/file.db, sqlite:////absolute/file.db, a path or postgresql://..."


@dataclass(frozen=True, slots=True)
class ChunkLocation:
    """Where a PostgreSQL store keeps its chunks in S3 (``?chunks=s3://bucket/prefix``, ``?chunks_endpoint=``,
    ``?chunks_region=``); its refs and indexes stay in PostgreSQL."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL (see the module's docstring); build one with :meth:`parse`.

    Attributes:
        kind: ``memory``, ``sqlite`` or ``postgres``.
        text: the URL as given (None: the default store).
        path: the SQLite file (``sqlite`` only).
        conninfo: the connection URL libpq sees, engram's options removed (``postgres`` only).
        repo: the repository id in a PostgreSQL database (``?repo=``, default ``default``).
        redis: the Redis URL of the store's cache (``?redis=``), if any.
        replicas: the read replicas' URLs (``?replica=``, in order).
        chunks: where the chunks live when not in PostgreSQL (``?chunks=s3://...``).
        options: the :data:`STORE_OPTIONS` as given, in order (what a tenant's URL keeps).
    """

    kind: Kind
    text: str | None = None
    path: Path | None = None
    conninfo: str | None = None
    repo: str = "default"
    redis: str | None = None
    replicas: tuple[str, ...] = ()
    chunks: ChunkLocation | None = None
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> StoreUrl:
        """Parse a store URL (None: the default store, ``./.engram``).

        Raises:
            ConfigError: an unknown scheme, an empty path, a ``sqlite://`` URL with a host, an option given twice,
                or S3 chunk options without ``?chunks=s3://bucket/prefix``; the message never shows a password.
        """
        if text == ":memory:":
            return cls("memory", text)
        if text is None:
            return cls("sqlite", text, path=Path(DEFAULT_DIR) / DB_NAME)
        scheme, sep, rest = text.partition("://")
        if not sep:
            return cls("sqlite", text, path=_sqlite_file(_nonempty(text)))
        kind = SCHEMES.get(scheme)
        if kind == "postgres":
            return _parse_postgres(text)
        if kind == "sqlite":
            if rest and not rest.startswith("/"):
                raise ConfigError(
                    f"a sqlite URL names no host: use sqlite:///relative/file.db or sqlite:////absolute/file.db, "
                    f"not {redact_url(text)!r}"
                )
            return cls("sqlite", text, path=_sqlite_file(_nonempty(rest.removeprefix("/"))))
        raise ConfigError(f"unsupported store URL {redact_url(text)!r}: {_USAGE}")

    def tenant(self, name: str) -> str:
        """The store URL of tenant ``name``'s repository, derived from this (a server's base store URL).

        Tenants never share a repository: on SQLite each tenant gets its own file under
        ``<store dir>/tenants/<tenant>/``; in memory, its own store (``:memory:`` again, opened afresh); on
        PostgreSQL, its own repository id (``?repo=<tenant>``), keeping the cache, chunk and replica options
        (each replica's URL derived in turn).

        Raises:
            ConfigError: a tenant name other than letters, digits, ``-`` and ``_``.
        """
        check_tenant(name)
        if self.kind == "memory":
            return ":memory:"
        if self.kind == "postgres":
            conninfo = self.conninfo or ""
            conninfo += f"{'&' if '?' in conninfo else '?'}redis={self.redis}" if self.redis else ""
            kept = [(key, StoreUrl.parse(value).tenant(name) if key == "replica" else value)
                    for key, value in self.options]  # fmt: skip
            return conninfo + ("&" if "?" in conninfo else "?") + urlencode([("repo", name), *kept], safe=":/@")
        assert self.path is not None  # a SQLite store always has its file
        return str(self.path.parent / "tenants" / name / DB_NAME)


def check_tenant(name: str) -> str:
    """``name`` if it can name a tenant (letters, digits, ``-`` and ``_``); raises :class:`ConfigError` if not."""
    if not name or not all(ch.isalnum() or ch in "-_" for ch in name):
        raise ConfigError(f"invalid tenant name {name!r}: use letters, digits, '-' and '_'")
    return name


def is_postgres(text: str | None) -> bool:
    """True when ``text`` is a PostgreSQL URL (by its scheme alone: nothing else is checked, nothing raised)."""
    scheme, sep, _ = (text or "").partition("://")
    return bool(sep) and SCHEMES.get(scheme) == "postgres"


def conninfo_of(text: str) -> str:
    """The connection URL libpq sees for the PostgreSQL URL ``text`` (engram's own options removed).

    Raises:
        ConfigError: ``text`` is not a PostgreSQL URL, or is malformed.
    """
    parsed = StoreUrl.parse(text)
    if parsed.conninfo is None:
        raise ConfigError(f"not a PostgreSQL URL: {redact_url(text)!r}")
    return parsed.conninfo


def _nonempty(raw: str) -> Path:
    if not raw:
        raise ConfigError("empty store path: use sqlite:///path/to/file.db or a directory")
    return Path(raw)


def _sqlite_file(path: Path) -> Path:
    if path.is_dir() or path.suffix not in SQLITE_SUFFIXES:
        return path / DB_NAME
    return path


def _parse_postgres(text: str) -> StoreUrl:
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours: dict[str, str] = {}
    for name, value in query:
        if name in ("repo", "redis"):
            if name in ours:
                raise ConfigError(f"give ?{name}= once in a PostgreSQL store URL")
            ours[name] = value
    rest = urlencode([(name, value) for name, value in query if name not in ours and name not in STORE_OPTIONS])
    options = tuple((name, value) for name, value in query if name in STORE_OPTIONS)
    return StoreUrl(
        "postgres", text, conninfo=urlunsplit(parts._replace(query=rest)), repo=ours.get("repo", "default"),
        redis=ours.get("redis") or None, replicas=tuple(value for name, value in options if name == "replica"),
        chunks=_chunk_location(options), options=options,
    )  # fmt: skip


def _chunk_location(options: tuple[tuple[str, str], ...]) -> ChunkLocation | None:
    """The S3 chunk location a PostgreSQL store URL's options name, or None."""
    given: dict[str, str] = {}
    for name, value in options:
        if name != "replica":
            if name in given:
                raise ConfigError(f"give ?{name}= once in a PostgreSQL store URL")
            given[name] = value
    if "chunks" not in given:
        if given:
            raise ConfigError(f"?{', ?'.join(sorted(given))} need ?chunks=s3://bucket/prefix in the store URL")
        return None
    where = urlsplit(given["chunks"])
    if where.scheme != "s3" or not where.netloc or where.query:
        raise ConfigError(f"?chunks= takes s3://bucket/prefix, not {redact_url(given['chunks'])!r}")
    return ChunkLocation(where.netloc, where.path, given.get("chunks_endpoint") or None,
                         given.get("chunks_region") or None)  # fmt: skip


__all__ = [
    "DB_NAME",
    "DEFAULT_DIR",
    "SCHEMES",
    "SQLITE_SUFFIXES",
    "STORE_OPTIONS",
    "ChunkLocation",
    "Kind",
    "StoreUrl",
    "check_tenant",
    "conninfo_of",
    "is_postgres",
]
