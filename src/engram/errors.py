"""The one error hierarchy of engram.

Every error engram raises on purpose is an :class:`EngramError`. Driver exceptions (sqlite3,
psycopg, redis, httpx) are translated at the backend boundary and never leak::

    EngramError
    ├── NotFoundError (LookupError)
    │   ├── RefNotFoundError          unknown branch, tag, commit or ref expression
    │   ├── ChunkNotFoundError        a chunk a ref points at is missing
    │   ├── ItemNotFoundError         no item at (namespace, key)
    │   ├── ChannelNotFoundError      unknown channel or project, or one the caller may not see
    │   ├── AgentNotFoundError        unknown agent (also an unknown @mention)
    │   └── MessageNotFoundError      unknown message or note, or one the caller may not read
    ├── InvalidInputError (ValueError)
    │   ├── InvalidNamespaceError     empty namespace, empty or non-string label, "." in a label
    │   ├── InvalidKeyError           empty or non-string key
    │   ├── InvalidValueError         value is not a JSON object
    │   ├── InvalidRefError           malformed ref expression or branch/tag name
    │   ├── InvalidFilterError        unknown operator or malformed search filter
    │   ├── InvalidChannelNameError   a channel, project or agent name breaks the name rules
    │   ├── InvalidConfidenceError    a confidence outside 0..1
    │   ├── ContentTooLargeError      a message or note over the configured size limit
    │   └── AmbiguousRefError         a short commit id that matches several commits
    ├── ConflictError                 a concurrent change or a merge the policy could not resolve
    │   ├── MergeConflictError        carries the conflicts (data) of a refused merge
    │   ├── RefExistsError            creating a branch or tag that exists
    │   ├── ChannelExistsError        creating a channel, project or agent that exists
    │   ├── ChannelArchivedError      writing to an archived channel
    │   ├── StaleMemoryError          a writer's write at an item version that is no longer current
    │   └── RunInFlightError          another process runs the memory writer on that target
    ├── ReadOnlyError                 writing through a read-only view
    ├── IntegrityError                a chunk whose bytes do not hash to its id; a corrupt store
    ├── AuthenticationError           no credentials, or credentials nobody issued (HTTP 401)
    ├── PermissionDeniedError         the caller lacks a scope or may not touch a namespace (HTTP 403)
    │   ├── NotAMemberError           not a member of a channel, or lacking a capability in it
    │   └── DirectMessageBlockedError the recipient's DM policy refuses the sender
    ├── StorageError                  the backend failed (I/O error, a corrupt or unexpected answer)
    │   └── UnavailableError          a dependency is down or overloaded: retry later (HTTP 503)
    │       └── CircuitOpenError      its circuit breaker is open: failing fast until a probe succeeds
    ├── EmbedderError                 the embedding model failed or is unavailable
    ├── WriterError                   the memory writer's model failed, timed out or broke the tool rules
    └── ConfigError                   bad store URL or settings
        └── EmbedderMismatchError     a store opened with another embedder than it records (engram.embed)
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


class CircuitOpenError(UnavailableError):
    """A dependency's circuit breaker is open (:mod:`engram.breakers`): it failed repeatedly and is not called
    until ``retry_after`` seconds pass.

    Attributes:
        dependency: the breaker's name (``postgresql:...``, ``redis:...``, ``embedder:...`` ...).
        retry_after: seconds until the breaker lets a probe through (at least 1).
    """

    def __init__(self, message: str, dependency: str, retry_after: float) -> None:
        super().__init__(message, retry_after)
        self.dependency = dependency


class EmbedderError(EngramError):
    """The embedding model failed, timed out, or is not available."""


class ConfigError(EngramError):
    """A store URL or setting is invalid."""


# Each maps to HTTP by its base class: not found 404, invalid input 422, permission 403, conflict 409.


class ChannelNotFoundError(NotFoundError):
    """No channel (or project, or direct-message channel) by that name, or one the caller may not see."""


class AgentNotFoundError(NotFoundError):
    """No agent by that id is registered (also an ``@mention`` of an unknown agent)."""


class MessageNotFoundError(NotFoundError):
    """No message or note by that id, or one the caller may not read."""


class InvalidChannelNameError(InvalidInputError):
    """A channel, project or agent name breaks the name rules (lowercase, digits, hyphens; at most 80)."""


class InvalidConfidenceError(InvalidInputError):
    """A confidence is not a number between 0 and 1."""


class ContentTooLargeError(InvalidInputError):
    """A message or note is longer than the configured limit."""


class NotAMemberError(PermissionDeniedError):
    """The agent is not a member of the channel, or lacks the capability (send, invite, manage) it needs."""


class DirectMessageBlockedError(PermissionDeniedError):
    """The recipient's direct-message policy (closed, restricted, block list) refuses the sender."""


class ChannelExistsError(ConflictError):
    """A channel, project or agent with that name already exists."""


class ChannelArchivedError(ConflictError):
    """The channel is archived: it can be read and searched, not written."""


class WriterError(EngramError):
    """The memory writer could not run: its model failed or broke the rules of the tool loop.

    Attributes:
        outcome: the run outcome this error records (``model_error``, ``timeout``, ``policy_violation``).
    """

    def __init__(self, message: str, outcome: str = "model_error") -> None:
        super().__init__(message)
        self.outcome = outcome


class StaleMemoryError(ConflictError):
    """A memory writer wrote a memory item at a version that is no longer its current one (re-read it).

    Attributes:
        current_version: the item's version now (None: the item no longer exists).
    """

    def __init__(self, message: str, current_version: str | None) -> None:
        super().__init__(message)
        self.current_version = current_version


class RunInFlightError(ConflictError):
    """Another process holds the memory writer's lease on that target: one run in flight per target."""
