"""engram: versioned, searchable memory for AI agents.

Every write is a commit: open the memory as it was at any moment, diff two moments, see who wrote
an item and from which messages, branch to test a fix, merge it, revert a bad write.

    >>> import engram
    >>> mem = engram.open(":memory:")
    >>> commit = mem.put(("users", "alice"), "prefs", {"theme": "dark"})
    >>> mem.at(commit.parents[0]).get(("users", "alice"), "prefs") is None
    True
"""

from engram.errors import (
    AmbiguousRefError,
    ConfigError,
    ConflictError,
    EngramError,
    IntegrityError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidRefError,
    InvalidValueError,
    MergeConflictError,
    NotFoundError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    StorageError,
)
from engram.objects import Commit
from engram.repo import FsckReport, GcReport, Repository
from engram.store import CommitDetails, Item, ItemChange, ItemConflict, Memory, Transaction, Version, View, open

__all__ = [
    "AmbiguousRefError",
    "Commit",
    "CommitDetails",
    "ConfigError",
    "ConflictError",
    "EngramError",
    "FsckReport",
    "GcReport",
    "IntegrityError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidNamespaceError",
    "InvalidRefError",
    "InvalidValueError",
    "Item",
    "ItemChange",
    "ItemConflict",
    "Memory",
    "MergeConflictError",
    "NotFoundError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "Repository",
    "StorageError",
    "Transaction",
    "Version",
    "View",
    "open",
]
