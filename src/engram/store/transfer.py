"""Export and import: a version of the memory as JSON Lines, optionally with its embeddings.

The first line is a header (``{"engram": "export", "format": 1, ...}``: the commit, branch, item
count and, when embeddings are included, the embedder's model id). Each further line is one item
with everything its record holds, so an import reproduces values, timestamps, authors, sources and
index settings exactly::

    {"namespace": ["users", "alice"], "key": "prefs", "value": {...}, "created_at": 1763800000000,
     "updated_at": 1763800000000, "expires_at": null, "author": "agent:onboarding",
     "sources": ["msg-12"], "extra": {}, "embedding": [0.01, ...]}

Timestamps are UTC milliseconds. An import writes every item in one commit on the target branch;
embeddings made by the same model as the target store's are put in its vector cache, so nothing is
embedded again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np

from engram import codec
from engram.errors import InvalidInputError
from engram.index.cache import MemoryVectorCache, VectorCache, embed_through, text_hash
from engram.index.paths import document_text
from engram.objects import Commit, Record, decode_record, encode_record
from engram.store import _validate
from engram.store.memory import Memory
from engram.tree import count, iter_entries

FORMAT = 1
#: Items per vector-cache write while importing.
BATCH = 1_000

Progress = Callable[[int], None]


def export_items(
    memory: Memory,
    out: IO[str],
    *,
    at: str | None = None,
    namespace_prefix: tuple[str, ...] = (),
    embeddings: bool = False,
    progress: Progress | None = None,
) -> int:
    """Write the items of ``at`` (default: the handle's head) under ``namespace_prefix`` to ``out``;
    returns how many. ``progress`` is called with the number of items written since its last call."""
    commit: Commit = memory.resolve(at) if at else memory.head
    start, end = codec.prefix_range(namespace_prefix) if namespace_prefix else (None, None)
    embedder = memory.pool.embedder if embeddings else None
    if embeddings and embedder is None:
        raise InvalidInputError("this store has no embedder: export without embeddings")
    header = {
        "engram": "export",
        "format": FORMAT,
        "commit": commit.id.hex(),
        "branch": memory.branch,
        "items": count(memory.repo.nodes, commit.tree) if not namespace_prefix else None,
        "namespace_prefix": list(namespace_prefix),
        "model": embedder.model_id if embedder is not None else None,
    }
    out.write(json.dumps(header) + "\n")
    written = 0
    for chunk in _chunks(iter_entries(memory.repo.nodes, commit.tree, start, end), BATCH):
        records = [(codec.decode_key(key), decode_record(data)) for key, data in chunk]
        vectors: list[list[float] | None] = [None] * len(records)
        if embedder is not None:
            wanted = [(i, r) for i, (_, r) in enumerate(records) if r.extra.get("index") is not False]
            texts = [document_text(r.value, _fields(r, memory.pool.fields)) for _, r in wanted]
            for (i, _), found in zip(wanted, embed_through(embedder, _cache(memory), texts), strict=True):
                vectors[i] = [round(float(x), 7) for x in found]
        for ((ns, key), record), vector in zip(records, vectors, strict=True):
            line: dict[str, Any] = {
                "namespace": list(ns),
                "key": key,
                "value": record.value,
                "created_at": record.created_at,
                "updated_at": record.updated_at,
                "expires_at": record.expires_at,
                "author": record.author,
                "sources": list(record.sources),
                "extra": record.extra,
            }
            if vector is not None:
                line["embedding"] = vector
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        written += len(records)
        if progress is not None:
            progress(len(records))
    return written


def import_items(
    memory: Memory,
    lines: Iterable[str],
    *,
    message: str | None = None,
    progress: Progress | None = None,
) -> tuple[int, Commit | None]:
    """Write the items of an export into ``memory``'s branch as one commit (items not in the file are
    kept). Returns (items imported, the commit or None if the file held no items). A malformed line
    raises :class:`InvalidInputError` naming its line number, before anything is written."""
    embedder = memory.pool.embedder
    model = embedder.model_id if embedder is not None else None
    edits: dict[bytes, bytes | None] = {}
    vectors: dict[bytes, bytes] = {}
    header: dict[str, Any] | None = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"line {number}: not JSON ({exc.msg})") from None
        if header is None:
            header = _header(data, number)
            continue
        key, record, vector = _item(data, number)
        edits[key] = encode_record(record)
        if vector is not None and embedder is not None and header.get("model") == model:
            if len(vector) != 4 * embedder.dim:
                raise InvalidInputError(
                    f"line {number}: embedding has {len(vector) // 4} dimensions, {model} has {embedder.dim}"
                )
            fields = _fields(record, memory.pool.fields)
            vectors[text_hash(document_text(record.value, fields))] = vector
        if progress is not None and len(edits) % BATCH == 0:
            progress(BATCH)
    if header is None:
        raise InvalidInputError("empty file: not an engram export")
    if progress is not None and len(edits) % BATCH:
        progress(len(edits) % BATCH)
    if not edits:
        return 0, None
    if vectors and model is not None and memory.pool.cache is not None:
        memory.pool.cache.put_many(model, vectors)
    with memory.transaction(message or f"import {len(edits)} item(s)") as tx:
        tx.edits.update(edits)
    return len(edits), tx.commit


def _header(data: Any, number: int) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("engram") != "export":
        raise InvalidInputError(f"line {number}: not an engram export header (export with `engram export`)")
    if data.get("format") != FORMAT:
        raise InvalidInputError(
            f"line {number}: export format {data.get('format')!r} is not supported (expected {FORMAT})"
        )
    return data


def _item(data: Any, number: int) -> tuple[bytes, Record, bytes | None]:
    where = f"line {number}"
    if not isinstance(data, dict):
        raise InvalidInputError(f"{where}: an item must be a JSON object")
    try:
        ns = _validate.namespace(tuple(data["namespace"]))
        key = _validate.key(data["key"])
        value = data["value"]
        created, updated = int(data["created_at"]), int(data["updated_at"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{where}: missing or malformed field {exc}") from None
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: value must be a JSON object")
    expires = data.get("expires_at")
    sources = data.get("sources") or []
    extra = data.get("extra") or {}
    if expires is not None and not isinstance(expires, int):
        raise InvalidInputError(f"{where}: expires_at must be UTC milliseconds or null")
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources) or not isinstance(extra, dict):
        raise InvalidInputError(f"{where}: sources must be a list of strings and extra an object")
    record = Record(value, created, updated, expires, data.get("author"), tuple(sources), extra)
    vector: bytes | None = None
    embedding = data.get("embedding")
    if embedding is not None:
        try:
            array = np.asarray(embedding, dtype=np.float32)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{where}: embedding must be a list of numbers") from None
        if array.ndim != 1:
            raise InvalidInputError(f"{where}: embedding must be a list of numbers")
        vector = array.tobytes()  # float32, as the vector cache stores it
    return codec.encode_key(ns, key), record, vector


def _cache(memory: Memory) -> VectorCache:
    return memory.pool.cache if memory.pool.cache is not None else MemoryVectorCache()


def _fields(record: Record, default: tuple[str, ...]) -> tuple[str, ...]:
    chosen = record.extra.get("index")
    return tuple(chosen) if isinstance(chosen, list) else default


def _chunks(entries: Iterator[tuple[bytes, bytes]], size: int) -> Iterator[list[tuple[bytes, bytes]]]:
    chunk: list[tuple[bytes, bytes]] = []
    for entry in entries:
        chunk.append(entry)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
