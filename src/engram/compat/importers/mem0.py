"""mem0 (open source, 2.x): its history database, and the payloads of its local Qdrant store.

mem0's ``history`` table holds every ADD, UPDATE and DELETE of every memory (``memory_id``, ``old_memory``,
``new_memory``, ``event``, ``created_at``, ``updated_at``, ``actor_id``, ``role``). Each row becomes one commit,
in time order, stamped with the time mem0 wrote it, authored by its ``actor_id`` (else ``mem0:<role>``), with
the row id as the version's source: ``mem.history(ns, memory_id)`` is mem0's ``history(memory_id)`` with
commit ids. The Qdrant payloads give each memory its scope and metadata. The layout is the one
:mod:`engram.compat.mem0` reads and writes, so imported memories are that adapter's memories: a memory of
``user_id="alice"`` is the item ``("mem0", "users", "alice") / <memory_id>`` (else ``("mem0", "agents", ...)``,
else ``("mem0", "runs", ...)``; ``("mem0",)`` when its payload is gone, as a deleted memory's is, or the Qdrant
folder was not given), valued ``{"text", "hash", "metadata", "user_id", "agent_id", "run_id", "actor_id",
"role"}`` (absent ids left out) with ``text`` searchable, and the id index ``("mem0-ids",) / <memory_id>`` (its
namespace) is written in the same commit.

The location is mem0's ``history.db``, or a directory holding it and the Qdrant local store (the folder with
``collection/``: the directory itself or its ``qdrant/``), as ``history_db_path`` and the ``qdrant`` vector
store's ``path`` configure them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram.compat.importers.common import ImportSourceError, SourceVersion, open_sqlite, to_ms

WHAT = "a mem0 history database (history.db)"
COLUMNS = {"id", "memory_id", "old_memory", "new_memory", "event", "created_at", "updated_at", "actor_id", "role"}
#: The Qdrant collection mem0 writes by default (``collection_name``).
COLLECTION = "mem0"
#: Payload keys mem0 returns beside ``metadata`` (everything else in a payload is the memory's metadata).
CORE = {"data", "hash", "created_at", "updated_at", "id", "text_lemmatized", "attributed_to"}
PROMOTED = ("user_id", "agent_id", "run_id", "actor_id", "role", "attributed_to", "expiration_date")
EVENTS = {"ADD": 0, "UPDATE": 1, "DELETE": 2}


def _paths(location: str) -> tuple[Path, Path | None]:
    """The history database and the Qdrant local store (None: not found) a location names."""
    where = Path(location)
    if not where.is_dir():
        return where, None
    for candidate in (where, where / "qdrant"):
        if (candidate / "collection").is_dir():
            return where / "history.db", candidate
    return where / "history.db", None


def read_payloads(path: Path, collection: str = COLLECTION) -> dict[str, dict[str, Any]]:
    """Memory id -> payload, from a Qdrant local store (mem0's ``qdrant`` vector store with a ``path``)."""
    # qdrant-client comes with mem0ai, not with engram: loaded only when a mem0 store has a Qdrant folder, on purpose
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(path))
    try:
        names = [c.name for c in client.get_collections().collections]
        if collection not in names:
            found = ", ".join(names) or "none"
            raise ImportSourceError(f"{path}: no Qdrant collection {collection!r} (found: {found})")
        payloads: dict[str, dict[str, Any]] = {}
        offset: Any = None
        while True:
            points, offset = client.scroll(collection, limit=256, offset=offset, with_payload=True, with_vectors=False)
            for point in points:
                payloads[str(point.id)] = dict(point.payload or {})
            if offset is None:
                return payloads
    finally:
        client.close()


#: The adapter's id index: memory id -> ``{"namespace": [...]}``.
INDEX_NAMESPACE = ("mem0-ids",)
#: The scope ids, in the order a namespace is derived from them, and their namespace labels.
SCOPES = (("user_id", "users"), ("agent_id", "agents"), ("run_id", "runs"))


def _namespace(payload: dict[str, Any] | None) -> tuple[str, ...]:
    for name, label in SCOPES:
        if payload and payload.get(name):
            return ("mem0", label, str(payload[name]))
    return ("mem0",)


def _value(text: str, payload: dict[str, Any] | None, actor: str | None, role: str | None) -> dict[str, Any]:
    payload = payload or {}
    value: dict[str, Any] = {
        "text": text,
        "hash": hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest(),  # mem0's hash of a text
        "metadata": {k: v for k, v in payload.items() if k not in CORE and k not in PROMOTED},
    }
    for key in PROMOTED:
        if payload.get(key) is not None:
            value[key] = payload[key]
    if actor is not None:
        value["actor_id"] = actor
    if role is not None:
        value["role"] = role
    return value


def _index(memory_id: str, namespace: tuple[str, ...], deleted: bool) -> tuple[Any, ...]:
    return ((INDEX_NAMESPACE, memory_id, None if deleted else {"namespace": list(namespace)}),)


class Mem0Source:
    """mem0's history rows (and current payloads), as versions in time order."""

    kind = "mem0"

    def __init__(self, location: str, *, collection: str = COLLECTION) -> None:
        self.location = str(location)
        history, vectors = _paths(self.location)
        self.connection: sqlite3.Connection = open_sqlite(history, WHAT, {"history": COLUMNS})
        try:
            self.payloads = read_payloads(vectors, collection) if vectors is not None else {}
        except ImportSourceError:
            self.connection.close()
            raise

    def _rows(self) -> list[tuple[Any, ...]]:
        return self.connection.execute(
            "SELECT rowid, id, memory_id, old_memory, new_memory, event, created_at, updated_at, actor_id, role "
            "FROM history"
        ).fetchall()

    def count(self) -> int:
        return len(list(self._all()))

    def versions(self) -> Iterator[SourceVersion]:
        yield from self._all()

    def _all(self) -> list[SourceVersion]:
        found: list[tuple[int, int, int, SourceVersion]] = []
        seen: set[str] = set()
        for rowid, hid, memory_id, _old, new, event, created, updated, actor, role in self._rows():
            kind = str(event).upper()
            if kind not in EVENTS:
                raise ImportSourceError(f"{self.location}: history row {hid} has an unknown event {event!r}")
            created_ms = to_ms(created)
            when = created_ms if kind == "ADD" else (to_ms(updated) or created_ms)
            if when is None:
                raise ImportSourceError(f"{self.location}: history row {hid} has no timestamp")
            payload = self.payloads.get(str(memory_id))
            author = actor or (f"mem0:{role}" if role else "mem0")
            namespace = _namespace(payload)
            version = SourceVersion(
                id=str(hid),
                namespace=namespace,
                key=str(memory_id),
                value=None if kind == "DELETE" else _value(str(new or ""), payload, actor, role),
                time_ms=when,
                created_ms=created_ms,
                author=author,
                message=f"mem0: {kind.lower()} memory {memory_id}",
                metadata={"mem0": {"event": kind, "memory_id": str(memory_id), "history_id": str(hid)}},
                index=("text",),
                also=_index(str(memory_id), namespace, kind == "DELETE"),
            )
            found.append((when, EVENTS[kind], rowid, version))
            seen.add(str(memory_id))
        for memory_id, payload in self.payloads.items():  # a memory without history rows: its current version
            if memory_id in seen:
                continue
            when = to_ms(payload.get("updated_at")) or to_ms(payload.get("created_at")) or 0
            text = str(payload.get("data", ""))
            namespace = _namespace(payload)
            version = SourceVersion(
                id=f"payload:{memory_id}@{when}",
                namespace=namespace,
                key=memory_id,
                value=_value(text, payload, payload.get("actor_id"), payload.get("role")),
                time_ms=when,
                created_ms=to_ms(payload.get("created_at")),
                author=payload.get("actor_id") or "mem0",
                message=f"mem0: add memory {memory_id}",
                index=("text",),
                also=_index(memory_id, namespace, False),
            )
            found.append((when, 0, 0, version))
        found.sort(key=lambda entry: entry[:3])
        return [entry[3] for entry in found]

    def close(self) -> None:
        self.connection.close()
