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

With history (:func:`export_history`) the header says ``"history": true`` and names every branch and
tag; then each commit, parents before children, is a line followed by the changes it made to its first parent
(one item line each, or ``{"namespace", "key", "deleted": true}``)::

    {"commit": "9f0c...", "tree": "41aa...", "parents": ["77d1..."], "time": 1763800000000,
     "author": "agent:onboarding", "message": "remember prefs", "metadata": {}, "changes": 1}

:func:`import_history` replays them with their original authors, times, messages and metadata; trees are
history-independent, so the replayed commits get the very ids they had.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np

from engram import codec
from engram.errors import ConflictError, InvalidInputError
from engram.hashing import ChunkId
from engram.index.cache import MemoryVectorCache, VectorCache, embed_through, text_hash
from engram.index.embedtext import embedded_text
from engram.index.paths import document_text
from engram.objects import Commit, Record, decode_record, encode_commit, encode_record
from engram.repo import HEADS, TAGS, Repository
from engram.store import _validate
from engram.store.memory import Memory
from engram.tree import count, empty_tree, iter_entries, mutate

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
            texts = [_vector_text(r, memory.pool.fields) for _, r in wanted]
            for (i, _), found in zip(wanted, embed_through(embedder, _cache(memory), texts), strict=True):
                vectors[i] = [round(float(x), 7) for x in found]
        for ((ns, key), record), vector in zip(records, vectors, strict=True):
            line = _item_line(ns, key, record)
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
    for number, data in _parsed(lines):
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
            vectors[text_hash(_vector_text(record, memory.pool.fields))] = vector
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


def _item_line(ns: tuple[str, ...], key: str, record: Record) -> dict[str, Any]:
    return {
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


def is_history(first_line: str) -> bool:
    """True when the first line of an export is the header of an export with history."""
    try:
        data = json.loads(first_line)
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("engram") == "export" and data.get("history") is True


def export_history(repo: Repository, out: IO[str], *, progress: Progress | None = None) -> int:
    """Write every commit reachable from every branch and tag, parents first, each with the changes it made;
    returns how many commits. ``progress`` is called with the number of commits written since its last call."""
    branches, tags = repo.branches(), repo.tags()
    order = _parents_first(repo, [*branches.values(), *tags.values()])
    header = {"engram": "export", "format": FORMAT, "history": True, "commits": len(order),
              "branches": {n: c.hex() for n, c in branches.items()},
              "tags": {n: c.hex() for n, c in tags.items()}}  # fmt: skip
    out.write(json.dumps(header) + "\n")
    for commit in order:
        changes = list(repo.changes(commit))
        line = {"commit": commit.id.hex(), "tree": commit.tree.hex(), "parents": [p.hex() for p in commit.parents],
                "time": commit.time, "author": commit.author, "message": commit.message,
                "metadata": commit.metadata, "changes": len(changes)}  # fmt: skip
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
        for change in changes:
            ns, key = codec.decode_key(change.key)
            if change.new is None:
                item: dict[str, Any] = {"namespace": list(ns), "key": key, "deleted": True}
            else:
                item = _item_line(ns, key, decode_record(change.new))
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
        if progress is not None:
            progress(1)
    return len(order)


def _parents_first(repo: Repository, starts: list[ChunkId]) -> list[Commit]:
    order: list[Commit] = []
    done: set[ChunkId] = set()
    stack: list[tuple[ChunkId, bool]] = [(cid, False) for cid in reversed(list(dict.fromkeys(starts)))]
    while stack:
        cid, expanded = stack.pop()
        if cid in done:
            continue
        commit = repo.commit(cid)
        if expanded:
            done.add(cid)
            order.append(commit)
            continue
        stack.append((cid, True))
        stack.extend((p, False) for p in reversed(commit.parents) if p not in done)
    return order


def import_history(
    repo: Repository, lines: Iterable[str], *, force: bool = False, progress: Progress | None = None
) -> tuple[int, int]:
    """Replay an export with history into ``repo``: every commit with its original author, time, message and
    metadata, then its branches and tags. A branch that exists must be the store's empty first commit or in the
    imported history (it fast-forwards), unless ``force``; a tag that exists must agree. Returns (commits,
    commits whose replayed id is the exported one). A malformed line raises :class:`InvalidInputError` naming it;
    refs move last, so a failed import leaves only unreferenced chunks (``gc`` collects them)."""
    ids: dict[str, ChunkId] = {}
    header: dict[str, Any] | None = None
    pending: dict[str, Any] | None = None
    edits: dict[bytes, bytes | None] = {}
    same = 0

    def finish() -> None:
        nonlocal same
        if pending is None:
            return
        if len(edits) != pending["changes"]:
            raise InvalidInputError(
                f"commit {pending['commit']}: {len(edits)} change lines, expected {pending['changes']}"
            )
        try:
            parents = tuple(ids[p] for p in pending["parents"])
        except KeyError as exc:
            raise InvalidInputError(f"commit {pending['commit']}: parent {exc} comes later or not at all") from None
        base = repo.commit(parents[0]).tree if parents else empty_tree(repo.nodes)
        writer = repo.nodes.writer()
        tree = mutate(repo.nodes, base, edits, writer)
        cid, data = encode_commit(tree, parents, pending["time"], pending["author"], pending["message"],
                                  pending["metadata"] or None)  # fmt: skip
        writer.pending[cid] = data
        writer.flush()
        ids[pending["commit"]] = cid
        same += cid.hex() == pending["commit"]
        if progress is not None:
            progress(1)

    for number, data in _parsed(lines):
        if header is None:
            header = _header(data, number)
            if header.get("history") is not True:
                raise InvalidInputError("this export has no history: import it without --with-history")
        elif isinstance(data, dict) and "commit" in data:
            finish()
            pending, edits = _commit_line(data, number), {}
        elif pending is None:
            raise InvalidInputError(f"line {number}: a change before any commit line")
        elif isinstance(data, dict) and data.get("deleted") is True:
            try:
                key = codec.encode_key(_validate.namespace(tuple(data["namespace"])), _validate.key(data["key"]))
            except (KeyError, TypeError, InvalidInputError) as exc:
                raise InvalidInputError(f"line {number}: malformed deletion ({exc})") from None
            edits[key] = None
        else:
            key, record, _ = _item(data, number)
            edits[key] = encode_record(record)
    finish()
    if header is None:
        raise InvalidInputError("empty file: not an engram export")
    _move_imported_refs(repo, header, ids, force)
    return len(ids), same


def _commit_line(data: dict[str, Any], number: int) -> dict[str, Any]:
    try:
        checked = {"commit": str(data["commit"]), "parents": [str(p) for p in data["parents"]],
                   "time": int(data["time"]), "author": str(data["author"]), "message": str(data["message"]),
                   "changes": int(data["changes"]), "metadata": dict(data.get("metadata") or {})}  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"line {number}: malformed commit line ({exc})") from None
    return checked


def _move_imported_refs(repo: Repository, header: dict[str, Any], ids: dict[str, ChunkId], force: bool) -> None:
    wanted: dict[str, ChunkId] = {}
    for prefix, field in ((HEADS, "branches"), (TAGS, "tags")):
        for name, old in (header.get(field) or {}).items():
            if old not in ids:
                raise InvalidInputError(f"{field[:-1]} {name!r} points at commit {old}, which the file lacks")
            wanted[prefix + name] = ids[old]
    moves: dict[str, tuple[ChunkId | None, ChunkId]] = {}
    for ref, new in wanted.items():
        current = repo.refs.get(ref)
        if current == new:
            continue
        if current is not None and not force:
            first = repo.commit(current)
            movable = ref.startswith(HEADS) and (
                (not first.parents and first.tree == empty_tree(repo.nodes)) or repo.is_ancestor(current, new)
            )
            if not movable:
                raise ConflictError(f"{ref} exists here with other history; import into a new store (or force)")
        moves[ref] = (current, new)
    for ref, (current, new) in moves.items():
        if not repo.refs.set(ref, new, current, reason="import with history"):
            raise ConflictError(f"{ref} moved during the import; run it again")


def _parsed(lines: Iterable[str]) -> Iterator[tuple[int, Any]]:
    """The JSON value of each non-blank line of an export, with its line number (a line that is not JSON: an
    :class:`InvalidInputError` naming it)."""
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"line {number}: not JSON ({exc.msg})") from None


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


def _vector_text(record: Record, default: tuple[str, ...]) -> str:
    """The text an item's vector embeds (engram.index.embedtext), as the search index embeds it."""
    text = document_text(record.value, _fields(record, default))
    return embedded_text(record.value, record.extra.get("index"), default, text)


def _chunks(entries: Iterator[tuple[bytes, bytes]], size: int) -> Iterator[list[tuple[bytes, bytes]]]:
    chunk: list[tuple[bytes, bytes]] = []
    for entry in entries:
        chunk.append(entry)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
