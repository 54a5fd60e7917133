"""The memory API (DESIGN.md §6): items, the versioning verbs, read-only views of the past."""

from engram.store.connect import open, open_repository
from engram.store.item import CommitDetails, Item, ItemChange, ItemConflict, Version
from engram.store.memory import Memory, Transaction
from engram.store.view import View

__all__ = [
    "CommitDetails",
    "Item",
    "ItemChange",
    "ItemConflict",
    "Memory",
    "Transaction",
    "Version",
    "View",
    "open",
    "open_repository",
]
