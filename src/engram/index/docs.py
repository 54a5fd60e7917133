"""The search index of one tree root: documents by slot, with keyword and vector indexes.

A :class:`DocIndex` reflects one root and is moved to another by applying ``diff(old, new)``, so
keeping it current costs as much as the change. It can always be rebuilt from a root (sync from the
empty tree); it is never the source of truth.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.embed.base import Embedder
from engram.errors import EmbedderError
from engram.hashing import ChunkId
from engram.index import text as analysis
from engram.index.cache import MemoryVectorCache, VectorCache, as_array, as_blobs, text_hash
from engram.index.keyword import KeywordIndex
from engram.index.paths import document_text
from engram.index.vector import VectorIndex
from engram.objects import Record, decode_record
from engram.tree import NodeStore, diff_trees, empty_tree

NEVER = np.iinfo(np.int64).max
EMBED_BATCH = 64


@dataclass(slots=True)
class Doc:
    """An item as the index sees it."""

    key: bytes
    namespace: tuple[str, ...]
    item_key: str
    record: Record
    text: str
    terms: list[str]

    @property
    def indexed(self) -> bool:
        """False for items put with ``index=False``: listed and filtered, never matched by a query."""
        return self.record.extra.get("index") is not False


def confidence_of(value: dict[str, Any]) -> float:
    """An item's confidence: ``value["confidence"]`` or ``value["metadata"]["confidence"]``, else 0.5."""
    found = value.get("confidence")
    if not isinstance(found, int | float) or isinstance(found, bool):
        meta = value.get("metadata")
        found = meta.get("confidence") if isinstance(meta, dict) else None
    if not isinstance(found, int | float) or isinstance(found, bool):
        return 0.5
    return min(1.0, max(0.0, float(found)))


def make_doc(key: bytes, data: bytes, fields: Sequence[str]) -> Doc:
    """Decode a tree entry into a document, extracting its searchable text."""
    namespace, item_key = codec.decode_key(key)
    record = decode_record(data)
    chosen = record.extra.get("index")
    if chosen is False:
        return Doc(key, namespace, item_key, record, "", [])
    text = document_text(record.value, chosen if isinstance(chosen, list) else fields)
    return Doc(key, namespace, item_key, record, text, analysis.terms(text))


def _grow(array: npt.NDArray[Any], size: int, fill: Any = 0) -> npt.NDArray[Any]:
    if size <= len(array):
        return array
    grown = np.full(max(size, 2 * len(array)), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class DocIndex:
    """Documents of one root, by slot, with per-slot arrays the ranking reads in bulk."""

    def __init__(
        self,
        nodes: NodeStore,
        *,
        fields: Sequence[str] = ("$",),
        embedder: Embedder | None = None,
        cache: VectorCache | None = None,
    ) -> None:
        self.nodes = nodes
        self.fields = tuple(fields)
        self.embedder = embedder
        self.cache: VectorCache = cache if cache is not None else MemoryVectorCache()
        self.root: ChunkId | None = None
        self.docs: list[Doc | None] = []
        self.slot_of: dict[bytes, int] = {}
        self.namespaces: dict[tuple[str, ...], int] = {}
        self.ns_ids = np.zeros(1024, dtype=np.int32)
        self.updated = np.zeros(1024, dtype=np.int64)
        self.expires = np.full(1024, NEVER, dtype=np.int64)
        self.confidence = np.zeros(1024, dtype=np.float32)
        self.alive = np.zeros(1024, dtype=bool)
        self.indexed = np.zeros(1024, dtype=bool)
        self.keyword = KeywordIndex()
        self.vectors = VectorIndex(embedder.dim) if embedder is not None else None
        self.pending: set[int] = set()
        self.vector_error: str | None = None
        self._queries: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self.lock = threading.RLock()

    @property
    def size(self) -> int:
        """One past the highest slot used."""
        return len(self.docs)

    def __len__(self) -> int:
        return len(self.slot_of)

    def sync(self, root: ChunkId, progress: Callable[[int], None] | None = None) -> None:
        """Make the index reflect ``root`` by applying the diff from the root it reflects.

        ``progress`` is called with the number of documents handled since its last call.
        """
        with self.lock:
            if root == self.root:
                return
            old = self.root if self.root is not None else empty_tree(self.nodes)
            self.apply(((c.key, c.new) for c in diff_trees(self.nodes, old, root)), progress)
            self.root = root
            if self.keyword.dead_ratio() > 0.5 and len(self.slot_of) > 1000:
                self._rebuild()

    def apply(
        self, changes: Iterable[tuple[bytes, bytes | None]], progress: Callable[[int], None] | None = None
    ) -> None:
        """Apply (key, new tree value or None) changes, then embed what lacks a vector."""
        with self.lock:
            done = 0
            for key, data in changes:
                slot = self.slot_of.pop(key, None)
                if slot is not None:
                    self._drop(slot)
                if data is not None:
                    self._add(make_doc(key, data, self.fields))
                done += 1
                if progress is not None and done % 1000 == 0:
                    progress(1000)
            if progress is not None and done % 1000:
                progress(done % 1000)
            self.embed_pending()

    def _add(self, doc: Doc) -> None:
        slot = len(self.docs)
        self.docs.append(doc)
        self.slot_of[doc.key] = slot
        size = slot + 1
        self.ns_ids = _grow(self.ns_ids, size)
        self.updated = _grow(self.updated, size)
        self.expires = _grow(self.expires, size, NEVER)
        self.confidence = _grow(self.confidence, size)
        self.alive = _grow(self.alive, size, False)
        self.indexed = _grow(self.indexed, size, False)
        self.ns_ids[slot] = self.namespaces.setdefault(doc.namespace, len(self.namespaces))
        self.updated[slot] = doc.record.updated_at
        self.expires[slot] = NEVER if doc.record.expires_at is None else doc.record.expires_at
        self.confidence[slot] = confidence_of(doc.record.value)
        self.alive[slot] = True
        self.indexed[slot] = doc.indexed
        if doc.indexed:
            self.keyword.add(slot, doc.terms)
            if self.vectors is not None:
                self.pending.add(slot)

    def _drop(self, slot: int) -> None:
        self.docs[slot] = None
        self.alive[slot] = False
        self.indexed[slot] = False
        self.keyword.remove(slot)
        self.pending.discard(slot)
        if self.vectors is not None:
            self.vectors.clear(slot)

    def _rebuild(self) -> None:
        live = [d for d in self.docs if d is not None]
        embedder, cache, fields, root = self.embedder, self.cache, self.fields, self.root
        self.__init__(self.nodes, fields=fields, embedder=embedder, cache=cache)  # type: ignore[misc]
        for doc in live:
            self._add(doc)
        self.embed_pending()
        self.root = root

    def vectors_for(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Vectors of texts through the cache, embedding (in batches) only the texts it lacks."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured")
        model = self.embedder.model_id
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get_many(model, set(hashes))
        missing = list({h: t for h, t in zip(hashes, texts, strict=True) if h not in found}.items())
        for i in range(0, len(missing), EMBED_BATCH):
            part = missing[i : i + EMBED_BATCH]
            matrix = self.embedder.embed([t for _, t in part])
            blobs = as_blobs(matrix, [h for h, _ in part])
            self.cache.put_many(model, blobs)
            found.update(blobs)
        return [as_array(found[h]) for h in hashes]

    def query_vector(self, text: str) -> npt.NDArray[np.float32]:
        """The embedding of a query (the last 1,024 distinct queries are remembered)."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured")
        found = self._queries.get(text)
        if found is None:
            found = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
            self._queries[text] = found
            if len(self._queries) > 1024:
                self._queries.popitem(last=False)
        else:
            self._queries.move_to_end(text)
        return found

    def embed_pending(self) -> None:
        """Give every indexed slot a vector; on embedder failure keep them pending and say why."""
        if self.vectors is None or not self.pending:
            return
        slots = sorted(self.pending)
        texts = [doc.text if (doc := self.docs[s]) is not None else "" for s in slots]
        try:
            vectors = self.vectors_for(texts)
        except EmbedderError as exc:
            self.vector_error = str(exc)
            return
        for slot, vector in zip(slots, vectors, strict=True):
            self.vectors.set(slot, vector)
        self.pending.clear()
        self.vector_error = None

    def namespace_mask(self, prefix: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Slots whose namespace starts with ``prefix``."""
        size = self.size
        if not prefix:
            return self.alive[:size].copy()
        wanted = tuple(prefix)
        ids = [i for ns, i in self.namespaces.items() if ns[: len(wanted)] == wanted]
        return np.isin(self.ns_ids[:size], ids) & self.alive[:size]
