"""The access policy every door applies: API keys, tenants, scopes and namespace prefixes.

A key maps to a **tenant** (one repository each: no request ever reaches another tenant's data), to
**scopes** (``read``, ``write``, ``admin``; ``admin`` implies the other two) and optionally to a
**namespace prefix** that every item it reads or writes must be under. The ``system`` scope, never implied,
lets a key read and change the **system namespaces** (first label ``_``: channels' state, the writer's
conversations) through the generic doors; without it they are hidden and refused at every door (see
:mod:`engram.store.system`), and their services (channels, writer) reach them by their own rules.

Keys live in a JSON file (by default ``<store dir>/keys.json``) that holds only SHA-256 hashes of
the keys; a key itself is shown once, when it is created. The file is re-read when it changes, so
``engram keys revoke`` takes effect on a running server.

The HTTP API and the MCP server over HTTP both authenticate with :func:`authenticate` and act through
:meth:`Principal.handle`: a key without the ``write`` scope gets a read-only handle, so no read it makes
can write (not even a TTL refresh).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.errors import AuthenticationError, ConfigError, PermissionDeniedError
from engram.store import Memory
from engram.store.system import is_system, refused
from engram.store.urls import StoreUrl, check_tenant
from engram.writer.run import review_target
from engram.writer.state import slug

#: Every scope a key can hold (``admin`` holds read and write; ``system`` only itself).
SCOPES = ("read", "write", "admin", "system")
#: The tenant of a server without keys (local development: the base store itself).
LOCAL_TENANT = "default"
KEY_PREFIX = "ek_"


def hash_key(secret: str) -> str:
    """The SHA-256 hex digest under which a key is stored."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One stored key (never the key itself, only its hash).

    Attributes:
        id: public id, to list and revoke the key.
        sha256: SHA-256 hex digest of the key.
        tenant: the tenant (repository) the key reaches.
        scopes: what the key may do: ``read``, ``write``, ``admin``.
        namespace_prefix: the namespace every item the key touches must be under (empty: anywhere).
        created: when the key was made (ISO 8601, UTC).
    """

    id: str
    sha256: str
    tenant: str
    scopes: tuple[str, ...]
    namespace_prefix: tuple[str, ...] = ()
    created: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The key as stored in the keys file."""
        return {
            "id": self.id,
            "sha256": self.sha256,
            "tenant": self.tenant,
            "scopes": list(self.scopes),
            "namespace_prefix": list(self.namespace_prefix) or None,
            "created": self.created,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApiKey:
        """Read a stored key."""
        return cls(
            id=str(data["id"]),
            sha256=str(data["sha256"]),
            tenant=str(data["tenant"]),
            scopes=tuple(data["scopes"]),
            namespace_prefix=tuple(data.get("namespace_prefix") or ()),
            created=str(data.get("created", "")),
        )


#: The keys file's name in a store's directory.
KEYS_FILE = "keys.json"


def default_keys_path(store: str | None) -> Path | None:
    """Where a server on the store at ``store`` keeps its API keys by default: ``<store dir>/keys.json``
    (None for stores without a directory: memory, PostgreSQL)."""
    path = StoreUrl.parse(store).path  # <store dir>/engram.db for file stores
    return None if path is None else path.parent / KEYS_FILE


def check_prefix(prefix: Sequence[str]) -> tuple[str, ...]:
    """Check a key's namespace prefix (labels are non-empty and have no periods; not a system namespace: a
    service's state is reached through the service)."""
    labels = tuple(prefix)
    for label in labels:
        if not isinstance(label, str) or not label or "." in label:
            raise ConfigError(f"bad namespace prefix {labels!r}: labels are non-empty and have no '.'")
    if is_system(labels):
        raise ConfigError(f"bad namespace prefix {labels!r}: namespaces starting with '_' belong to services")
    return labels


class KeyRing:
    """The API keys of a server, kept hashed in a JSON file that is re-read when it changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._keys: list[ApiKey] = []
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def keys(self) -> list[ApiKey]:
        """Every key, re-reading the file when it changed on disk."""
        stamp = self._file_stamp()
        with self._lock:
            if stamp != self._stamp:
                self._keys = self._read() if stamp is not None else []
                self._stamp = stamp
            return list(self._keys)

    def _read(self) -> list[ApiKey]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [ApiKey.from_dict(entry) for entry in data["keys"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"cannot read the keys file {self.path}: {exc}") from exc

    def _write(self, keys: list[ApiKey]) -> None:
        if self.path is None:
            raise ConfigError("this server has no keys file; pass one (--keys-file) to create keys")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"version": 1, "keys": [key.as_dict() for key in keys]}, out, indent=2)
            out.write("\n")
        os.replace(tmp, self.path)

    def create(self, tenant: str, scopes: Sequence[str], namespace_prefix: Sequence[str] = ()) -> tuple[ApiKey, str]:
        """Make a key; return it and its secret, which is shown once and never stored."""
        check_tenant(tenant)  # raises ConfigError for a bad tenant name
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise ConfigError(f"scopes are one or more of {', '.join(SCOPES)}; got {list(scopes)!r}")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(
            id=secrets.token_hex(6),
            sha256=hash_key(secret),
            tenant=tenant,
            scopes=tuple(s for s in SCOPES if s in scopes),
            namespace_prefix=check_prefix(namespace_prefix),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        with self._lock:
            self._write([*self._read_current(), key])
        return key, secret

    def revoke(self, key_id: str) -> bool:
        """Delete a key; False when no key has that id."""
        with self._lock:
            keys = self._read_current()
            kept = [key for key in keys if key.id != key_id]
            if len(kept) == len(keys):
                return False
            self._write(kept)
        return True

    def _read_current(self) -> list[ApiKey]:
        return self._read() if self._file_stamp() is not None else []

    def has(self, key_id: str) -> bool:
        """Whether a key with this id exists (not revoked): what an open stream re-checks."""
        return any(key.id == key_id for key in self.keys())

    def find(self, secret: str) -> ApiKey | None:
        """The key whose hash matches ``secret``, compared in constant time against every key."""
        digest = hash_key(secret)
        found = None
        for key in self.keys():
            if hmac.compare_digest(key.sha256, digest):
                found = key
        return found


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, its scopes and its namespace restriction."""

    tenant: str
    scopes: frozenset[str]
    namespace_prefix: tuple[str, ...] = ()
    key_id: str | None = field(default=None)

    @property
    def author(self) -> str:
        """Recorded as the author of the commits this caller makes (unless a write names one)."""
        return "api" if self.key_id is None else f"key:{self.key_id}"

    def require(self, scope: str) -> None:
        """Raise :class:`PermissionDeniedError` unless the caller holds ``scope`` (``admin`` holds every scope)."""
        if not self.holds(scope):
            raise PermissionDeniedError(
                f"this API key lacks the {scope!r} scope (it has: {', '.join(sorted(self.scopes))})", "missing_scope"
            )

    def holds(self, scope: str) -> bool:
        """True when the caller holds ``scope`` (``admin`` holds read and write; ``system`` must be explicit)."""
        return scope in self.scopes or (scope != "system" and "admin" in self.scopes)

    @property
    def system(self) -> bool:
        """Whether this caller may reach the system namespaces through the generic doors."""
        return "system" in self.scopes

    def handle(self, memory: Memory, branch: str | None = None) -> Memory:
        """A handle on the tenant's ``memory`` acting as this caller: commits name the caller as author, a
        caller without the ``write`` scope gets a read-only handle (its reads never refresh a TTL), and one
        without the ``system`` scope a handle that hides and refuses the system namespaces."""
        return memory.handle(branch, author=self.author, read_only=not self.holds("write"), system=self.system)

    def service(self, memory: Memory, branch: str | None = None) -> Memory:
        """The handle a service (channels, the writer) acts through for this caller: it reaches the service's
        system namespaces, which the service guards by its own rules; read-only without ``write``."""
        return memory.handle(branch, author=self.author, read_only=not self.holds("write"), system=True)

    def sees_branch(self, name: str) -> bool:
        """Whether the branch ``name`` is listed to this caller: a prefix-restricted key sees the writer's review
        branches (``writer/<target>/<run>``) of its own targets only."""
        target = review_target(name)
        if target is None or not self.namespace_prefix:
            return True
        own = slug(".".join(self.namespace_prefix))
        return target == own or target.startswith(own + ".")

    def require_unrestricted(self, action: str) -> None:
        """Refuse a namespace-restricted key: ``action`` reaches every namespace."""
        if self.namespace_prefix:
            raise PermissionDeniedError(
                f"{action} reaches every namespace; this API key is restricted to {_shown(self.namespace_prefix)}",
                "namespace_forbidden",
            )

    def check(self, namespace: Sequence[str]) -> tuple[str, ...]:
        """Return ``namespace`` if this caller may touch it, else raise :class:`PermissionDeniedError` (outside
        the key's prefix, or a system namespace without the ``system`` scope)."""
        labels = tuple(namespace)
        if labels[: len(self.namespace_prefix)] != self.namespace_prefix:
            raise self._forbidden(labels)
        if not self.system and is_system(labels):
            raise refused(labels)
        return labels

    def narrow(self, prefix: Sequence[str] | None) -> tuple[str, ...] | None:
        """The part of namespace prefix ``prefix`` this caller may see: ``prefix`` itself, or the
        key's own prefix when ``prefix`` is wider; :class:`PermissionDeniedError` when they do not overlap."""
        own = self.namespace_prefix
        if not self.system and prefix is not None and is_system(prefix):
            raise refused(tuple(prefix))
        if not own:
            return None if prefix is None else tuple(prefix)
        labels = tuple(prefix or ())
        if labels[: len(own)] == own:
            return labels
        if own[: len(labels)] == labels:
            return own
        raise self._forbidden(labels)

    def narrow_pattern(self, prefix: Sequence[str] | None) -> tuple[str, ...] | None:
        """Like :meth:`narrow` for a LangGraph namespace pattern, where ``*`` matches any one label."""
        own = self.namespace_prefix
        if not own:
            return None if prefix is None else tuple(prefix)
        labels = list(prefix or ())
        merged = list(own) + labels[len(own) :]
        for i, label in enumerate(labels[: len(own)]):
            if label not in ("*", own[i]):
                raise self._forbidden(tuple(labels))
        return tuple(merged)

    def _forbidden(self, labels: tuple[str, ...]) -> PermissionDeniedError:
        return PermissionDeniedError(
            f"namespace {_shown(labels)} is outside this API key's prefix {_shown(self.namespace_prefix)}",
            "namespace_forbidden",
        )


def _shown(labels: Sequence[str]) -> str:
    return ".".join(labels) or "(root)"


#: The caller on a server without keys: the local tenant, every scope, no restriction.
LOCAL = Principal(LOCAL_TENANT, frozenset(SCOPES))


def principal(key: ApiKey) -> Principal:
    """The caller a key makes."""
    return Principal(key.tenant, frozenset(key.scopes), key.namespace_prefix, key.id)


def key_from_headers(headers: Mapping[str, str]) -> str | None:
    """The API key an HTTP request carries: ``Authorization: Bearer <key>``, else ``X-API-Key: <key>``; None
    when it carries neither (an empty value is none). ``headers`` is looked up by lowercase name (Starlette's
    headers, or a dict of lowercased names); every door reads the key with this one rule."""
    scheme, _, credentials = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key") or None


def authenticate(keyring: KeyRing, secret: str | None) -> Principal:
    """The caller a key makes; :class:`AuthenticationError` for a missing or unknown key."""
    if not secret:
        raise AuthenticationError("send an API key: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
    key = keyring.find(secret)
    if key is None:
        raise AuthenticationError("this API key is not valid (unknown or revoked)", "invalid_key")
    return principal(key)


__all__ = [
    "KEYS_FILE",
    "KEY_PREFIX",
    "LOCAL",
    "LOCAL_TENANT",
    "SCOPES",
    "ApiKey",
    "KeyRing",
    "Principal",
    "authenticate",
    "check_prefix",
    "default_keys_path",
    "hash_key",
    "key_from_headers",
    "principal",
]
