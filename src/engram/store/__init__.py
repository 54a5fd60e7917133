"""The memory API (DESIGN.md §6): items, the versioning verbs, read-only views of the past."""

from engram.store.aio import AsyncMemory
from engram.store.connect import aopen, open, open_repository, tenant_url
from engram.store.item import (
    CommitDetails,
    Item,
    ItemChange,
    ItemConflict,
    MergeOutcome,
    SearchItem,
    SearchResults,
    Version,
)
from engram.store.memory import Memory, Transaction
from engram.store.operations import GetOp, ListNamespacesOp, PutOp, SearchOp, TTLConfig
from engram.store.ranking import Profile
from engram.store.view import View

__all__ = [
    "AsyncMemory",
    "CommitDetails",
    "GetOp",
    "Item",
    "ItemChange",
    "ItemConflict",
    "ListNamespacesOp",
    "Memory",
    "MergeOutcome",
    "Profile",
    "PutOp",
    "SearchItem",
    "SearchOp",
    "SearchResults",
    "TTLConfig",
    "Transaction",
    "Version",
    "View",
    "aopen",
    "open",
    "open_repository",
    "tenant_url",
]
