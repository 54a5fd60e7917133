"""engram: versioned, searchable memory for AI agents.

Every write is a commit: open the memory as it was at any moment, diff two moments, see who wrote
an item and from which messages, branch to test a fix, merge it, revert a bad write.

    >>> import engram
    >>> mem = engram.open(":memory:")
    >>> commit = mem.put(("users", "alice"), "prefs", {"theme": "dark"})
    >>> mem.at(commit.parents[0]).get(("users", "alice"), "prefs") is None
    True
"""

from engram.embed import EmbedderMismatchError
from engram.errors import (
    AmbiguousRefError,
    AuthenticationError,
    ConfigError,
    ConflictError,
    EmbedderError,
    EngramError,
    IntegrityError,
    InvalidFilterError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidRefError,
    InvalidValueError,
    MergeConflictError,
    NotFoundError,
    PermissionDeniedError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    StorageError,
    UnavailableError,
)
from engram.maintenance import FsckReport, GcReport
from engram.objects import Commit
from engram.repo import Repository
from engram.runtime import close_all, reset
from engram.store import (
    AsyncMemory,
    CommitDetails,
    GetOp,
    Item,
    ItemChange,
    ItemConflict,
    ListNamespacesOp,
    Memory,
    MergeOutcome,
    Profile,
    PutOp,
    SearchItem,
    SearchOp,
    SearchResults,
    Transaction,
    TTLConfig,
    Version,
    View,
    aopen,
    open,
)

__all__ = [
    "AmbiguousRefError",
    "AsyncMemory",
    "AuthenticationError",
    "Commit",
    "CommitDetails",
    "ConfigError",
    "ConflictError",
    "EmbedderError",
    "EmbedderMismatchError",
    "EngramError",
    "FsckReport",
    "GcReport",
    "GetOp",
    "IntegrityError",
    "InvalidFilterError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidNamespaceError",
    "InvalidRefError",
    "InvalidValueError",
    "Item",
    "ItemChange",
    "ItemConflict",
    "ListNamespacesOp",
    "Memory",
    "MergeConflictError",
    "MergeOutcome",
    "NotFoundError",
    "PermissionDeniedError",
    "Profile",
    "PutOp",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "Repository",
    "SearchItem",
    "SearchOp",
    "SearchResults",
    "StorageError",
    "TTLConfig",
    "Transaction",
    "UnavailableError",
    "Version",
    "View",
    "aopen",
    "close_all",
    "open",
    "reset",
]
