"""The one error hierarchy of engram.

Every error engram raises on purpose is an :class:`EngramError`. Driver exceptions (sqlite3,
psycopg, redis, httpx) are translated at the backend boundary and never leak::

    EngramError
    ├── NotFoundError (LookupError)
    │   ├── RefNotFoundError          unknown branch, tag, commit or ref expression
    │   ├── ChunkNotFoundError        a chunk a ref points at is missing
    │   └── ItemNotFoundError         no item at (namespace, key)
    ├── InvalidInputError (ValueError)
    │   ├── InvalidNamespaceError     empty namespace, empty or non-string label, "." in a label
    │   ├── InvalidKeyError           empty or non-string key
    │   ├── InvalidValueError         value is not a JSON object
    │   ├── InvalidRefError           malformed ref expression or branch/tag name
    │   ├── InvalidFilterError        unknown operator or malformed search filter
    │   └── AmbiguousRefError         a short commit id that matches several commits
    ├── ConflictError                 a concurrent change or a merge the policy could not resolve
    │   ├── MergeConflictError        carries the conflicts (data) of a refused merge
    │   └── RefExistsError            creating a branch or tag that exists
    ├── ReadOnlyError                 writing through a read-only view
    ├── IntegrityError                a chunk whose bytes do not hash to its id; a corrupt store
    ├── AuthenticationError           no credentials, or credentials nobody issued (HTTP 401)
    ├── PermissionDeniedError         the caller lacks a scope or may not touch a namespace (HTTP 403)
    ├── StorageError                  the backend failed (I/O error, a corrupt or unexpected answer)
    │   └── UnavailableError          a dependency is down or overloaded: retry later (HTTP 503)
    ├── EmbedderError                 the embedding model failed or is unavailable
    └── ConfigError                   bad store URL or settings
"""

from __future__ import annotations

from typing import Any


class EngramError(Exception):
    """Root of every error engram raises on purpose."""


class NotFoundError(EngramError, LookupError):
    """Something the caller named does not exist."""


class RefNotFoundError(NotFoundError):
    """A branch, tag, commit or ref expression names nothing."""


class ChunkNotFoundError(NotFoundError):
    """A chunk that should exist is missing from the store."""


class ItemNotFoundError(NotFoundError):
    """No item exists at the given namespace and key."""


class InvalidInputError(EngramError, ValueError):
    """The caller passed something engram cannot accept."""


class InvalidNamespaceError(InvalidInputError):
    """A namespace is empty, or one of its labels is empty, not a string, or contains a period."""


class InvalidKeyError(InvalidInputError):
    """An item key is empty or not a string."""


class InvalidValueError(InvalidInputError):
    """An item value is not a JSON object."""


class InvalidRefError(InvalidInputError):
    """A ref expression, branch name or tag name is malformed."""


class InvalidFilterError(InvalidInputError):
    """A search filter uses an unknown operator or is malformed."""


class AmbiguousRefError(InvalidInputError):
    """A short commit id matches more than one commit."""


class ConflictError(EngramError):
    """A write could not be applied because of a concurrent or conflicting change."""


class MergeConflictError(ConflictError):
    """A merge found conflicts that its policy did not resolve.

    Attributes:
        conflicts: the conflicts, as data (see :class:`engram.tree.Conflict`).
    """

    def __init__(self, message: str, conflicts: list[Any]) -> None:
        super().__init__(message)
        self.conflicts = conflicts


class RefExistsError(ConflictError):
    """A branch or tag with that name already exists."""


class ReadOnlyError(EngramError):
    """A write was attempted through a read-only view (``mem.at(ref)``)."""


class IntegrityError(EngramError):
    """Stored bytes do not match their hash, or the store is otherwise corrupt."""


class AuthenticationError(EngramError):
    """No credentials were given, or nobody issued the ones given (unknown or revoked key).

    Attributes:
        code: a stable machine-readable reason (``unauthorized``: none given; ``invalid_key``: unknown).
    """

    def __init__(self, message: str, code: str = "unauthorized") -> None:
        super().__init__(message)
        self.code = code


class PermissionDeniedError(EngramError):
    """The caller is known but may not do this: a scope it lacks, or a namespace outside its prefix.

    Attributes:
        code: a stable machine-readable reason (``missing_scope``, ``namespace_forbidden`` ...).
    """

    def __init__(self, message: str, code: str = "forbidden") -> None:
        super().__init__(message)
        self.code = code


class StorageError(EngramError):
    """The storage backend failed (I/O error, a corrupt or unexpected answer)."""


class UnavailableError(StorageError):
    """A dependency (database, cache, remote) is down, unreachable or overloaded: the same request may
    succeed later. Never raised for bad input.

    Attributes:
        retry_after: seconds after which a retry makes sense (None: unknown).
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EmbedderError(EngramError):
    """The embedding model failed, timed out, or is not available."""


class ConfigError(EngramError):
    """A store URL or setting is invalid."""
