"""The search index of one tree root: documents by slot, with keyword and vector indexes.

A :class:`DocIndex` reflects one root and is moved to another by applying ``diff(old, new)``, so
keeping it current costs as much as the change. It can always be rebuilt from a root (sync from the
empty tree); it is never the source of truth.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.embed.base import Embedder
from engram.errors import EmbedderError
from engram.hashing import ChunkId
from engram.index import snapshot
from engram.index import text as analysis
from engram.index.ann import Graph
from engram.index.cache import MemoryVectorCache, QueryVectors, VectorCache, embed_through, text_hash
from engram.index.doclist import Doc, DocList, SlotMap, confidence_of, make_doc
from engram.index.embedtext import embedded_text
from engram.index.keyword import KeywordIndex
from engram.index.paths import document_text
from engram.index.scopes import SortedNamespaces
from engram.index.vector import VectorIndex, give_back_memory
from engram.objects import decode_records
from engram.tree import NodeStore, count, diff_trees, empty_tree

NEVER = np.iinfo(np.int64).max
#: After applying this many changes at once, documents and postings are packed into arrays.
PACK_AFTER = 10_000
#: A batch of at least this many new documents builds its postings with array operations (when it is
#: large next to the index too: that merges every posting).
BULK_MIN = 1_000
#: A bulk load reads, decodes and analyses its documents this many at a time (nothing per document is kept).
BULK_STEP = 2_048
#: Vectors read from the vector cache at once.
CACHE_STEP = 16_384
#: From this many vectors to look up, a vector cache that can scan (``scan_many``) is read in one scan.
SCAN_FROM = 20_000
#: Texts embedded between two progress reports (and two writes to the vector cache).
EMBED_STEP = 256
#: Texts embedded at once while a search embeds within a time budget (its last batch may overrun the budget).
INLINE_STEP = 16
#: Default of :attr:`DocIndex.scope_exact`. Measured (benchmarks/RESULTS.md, "Many-tenant search"): a scope of 100
#: items in a 200k store takes 0.7 ms scored exactly; one of 10,000 takes ~10 ms exactly (its float16 vectors are
#: widened row by row) but ~2 ms through the whole index (cached term weights, the graph with the scope as filter).
SCOPE_EXACT = 2_000
#: A progress callback taking ``(phase, done, total)``; phases are ``"index"`` and ``"embed"``.
Phases = Callable[[str, int, int], None]


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
        scope_exact: int = SCOPE_EXACT,
        ann_min: int | None = None,
        pack_after: int = PACK_AFTER,
        bulk_step: int = BULK_STEP,
        vector_settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.nodes = nodes
        self.vector_settings = dict(vector_settings or {})  # VectorIndex's (background, gather_max, overlap_min)
        self.pack_after = pack_after  # changes applied at once from which on docs and postings are packed (bulk)
        self.bulk_step = bulk_step  # documents of a bulk load read, decoded and analysed at a time
        self.fields = tuple(fields)
        self.embedder = embedder
        self.cache: VectorCache = cache if cache is not None else MemoryVectorCache()
        self.root: ChunkId | None = None
        self.docs = DocList(self.fields)
        self.slot_of = SlotMap(self.docs.key)
        self.hashes = np.zeros((1024, 32), dtype=np.uint8)  # text hash per slot, for the vector cache
        self.namespaces: dict[tuple[str, ...], int] = {}
        self._scopes = SortedNamespaces()  # which namespaces a prefix covers (namespace_mask)
        #: A search whose scope (namespace prefix) holds at most this many items scores them exactly, whatever the
        #: size of the index (engram.index.engine); larger scopes use the postings and the vector graph.
        self.scope_exact = scope_exact
        self.ns_ids = np.zeros(1024, dtype=np.int32)
        self.updated = np.zeros(1024, dtype=np.int64)
        self.expires = np.full(1024, NEVER, dtype=np.int64)
        self.confidence = np.zeros(1024, dtype=np.float32)
        self.alive = np.zeros(1024, dtype=bool)
        self.indexed = np.zeros(1024, dtype=bool)
        self.keyword = KeywordIndex()
        #: Vectors from which on the vector index searches an HNSW graph (None: ``vector.ANN_MIN``).
        self.ann_min = ann_min
        if embedder is None:
            self.vectors: VectorIndex | None = None
        else:  # ann_min None: the vector index's own default
            self.vectors = VectorIndex(embedder.dim, ann_min=ann_min, **self.vector_settings)
        self.pending: set[int] = set()
        self.vector_error: str | None = None
        self.unsaved = 0  # documents changed since the last snapshot
        self._generation = 0  # bumped when slots are renumbered (embed_step's results then do not apply)
        #: Seconds a search may spend embedding (None: all first); the rest waits for :meth:`embed_step`.
        self.embed_budget: float | None = None
        self._queries = QueryVectors()
        self.lock = threading.RLock()

    @property
    def size(self) -> int:
        """One past the highest slot used."""
        return len(self.docs)

    def __len__(self) -> int:
        return len(self.slot_of)

    def sync(
        self,
        root: ChunkId,
        progress: Callable[[int], None] | None = None,
        phases: Phases | None = None,
        *,
        embed_budget: float | None = None,
    ) -> None:
        """Make the index reflect ``root`` by applying the diff from the root it reflects.

        ``embed_budget``: seconds to spend embedding what lacks a vector (None: all of it; what is left stays
        pending, searchable by keyword, for :meth:`embed_step` to make in the background).

        ``progress`` is called with the number of documents handled since its last call; ``phases`` with
        ``(phase, done, total)``: ``"index"`` while documents are read and tokenised, then ``"embed"``
        while their vectors are found in the cache or embedded.
        """
        with self.lock:
            if root == self.root:
                return
            old = self.root if self.root is not None else empty_tree(self.nodes)
            total = abs(count(self.nodes, root) - count(self.nodes, old))
            done = 0

            def step(n: int) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(n)
                if phases is not None:
                    phases("index", done, max(total, done))

            changes = ((c.key, c.new) for c in diff_trees(self.nodes, old, root))
            self.apply(changes, step, phases, embed_budget=embed_budget)
            self.root = root
            # compact when most slots are dead (removed documents; a live document that is not searchable
            # holds no postings but is not dead, so an index of mostly index=False items never rebuilds)
            if self.size > 1000 and len(self.slot_of) < self.size / 2:
                self._rebuild()

    def apply(
        self,
        changes: Iterable[tuple[bytes, bytes | None]],
        progress: Callable[[int], None] | None = None,
        phases: Phases | None = None,
        *,
        embed_budget: float | None = None,
    ) -> None:
        """Apply (key, new tree value or None) changes, then embed what lacks a vector (for ``embed_budget``
        seconds at most, when given)."""
        with self.lock:
            done = 0
            keys: list[bytes] = []  # added, given slots from len(self.docs) on, filled in bulk (_add)
            datas: list[bytes] = []
            for key, data in changes:
                slot = self.slot_of.pop(key)
                if slot is not None:
                    if slot >= len(self.docs):  # added by this batch (a key seen twice): fill it first
                        self._add(keys, datas)
                        keys, datas = [], []
                    self._drop(slot)
                if data is not None:
                    self.slot_of[key] = len(self.docs) + len(keys)
                    keys.append(key)
                    datas.append(data)
                done += 1
                self.unsaved += 1
                if progress is not None and done % 1000 == 0:
                    progress(1000)
            self._add(keys, datas)
            del keys, datas
            self.slot_of.settle()
            if progress is not None and done % 1000:
                progress(done % 1000)
            if done >= self.pack_after:
                self.docs.pack(self.alive)
                self.keyword.freeze()
            self.embed_pending(phases, embed_budget)
            if done >= self.pack_after:
                give_back_memory()  # after the vector cache's bytes are gone too

    def _add(self, keys: list[bytes], datas: list[bytes]) -> None:
        """Add documents (tree keys and values) at the next slots: a few as documents, a bulk load
        (``pack_after`` or more) kept encoded and analysed ``bulk_step`` at a time, nothing kept per document
        but its encoded bytes, the per-slot arrays and the postings (the same index either way)."""
        if len(keys) < self.pack_after:
            docs = [make_doc(key, data, self.fields) for key, data in zip(keys, datas, strict=True)]
            for doc in docs:
                self.docs.append(doc)
            self._fill(docs)
            return
        start = len(self.docs)
        self.docs.extend_raw(keys, datas)
        self._grow_to(len(self.docs))
        namespaces = self.namespaces
        flat: list[str] = []  # the terms of every indexed document, one after the other
        lengths: list[int] = []
        slots: list[int] = []
        hashes: list[bytes] = []
        items, ns_id = b"\x03", 0  # no key starts with 0x03
        step = self.bulk_step
        for lo in range(0, len(keys), step):
            records = decode_records(datas[lo : lo + step])
            part = slice(start + lo, start + lo + len(records))
            ns_ids = []
            for key in keys[lo : lo + step]:  # in key order: a namespace's items come one after another
                if not key.startswith(items):
                    namespace = codec.decode_key(key)[0]
                    ns_id = namespaces.setdefault(namespace, len(namespaces))
                    items = codec.items_range(namespace)[0]  # what the keys of its items start with
                ns_ids.append(ns_id)
            self.ns_ids[part] = ns_ids
            self.updated[part] = [r.updated_at for r in records]
            self.expires[part] = [NEVER if r.expires_at is None else r.expires_at for r in records]
            self.confidence[part] = [confidence_of(r.value) for r in records]
            for i, record in enumerate(records, start + lo):
                chosen = record.extra.get("index")
                if chosen is False:
                    continue
                text = document_text(record.value, chosen if isinstance(chosen, list) else self.fields)
                terms = analysis.terms(text)
                flat += terms
                lengths.append(len(terms))
                slots.append(i)
                hashes.append(text_hash(embedded_text(record.value, chosen, self.fields, text)))
        self.alive[start : len(self.docs)] = True
        self.indexed[slots] = True
        self.keyword.add_flat(slots, flat, lengths)
        if self.vectors is not None and slots:
            self.hashes[slots] = np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(-1, 32)
            self.pending.update(slots)

    def _grow_to(self, size: int) -> None:
        """Make the per-slot arrays hold ``size`` slots."""
        self.ns_ids = _grow(self.ns_ids, size)
        self.updated = _grow(self.updated, size)
        self.expires = _grow(self.expires, size, NEVER)
        self.confidence = _grow(self.confidence, size)
        self.alive = _grow(self.alive, size, False)
        self.indexed = _grow(self.indexed, size, False)
        if len(self.hashes) < size:
            grown = np.zeros((max(size, 2 * len(self.hashes)), 32), dtype=np.uint8)
            grown[: len(self.hashes)] = self.hashes
            self.hashes = grown

    def _fill(self, docs: list[Doc]) -> None:
        """Fill the per-slot arrays and postings of the last ``len(docs)`` slots, given to ``docs``."""
        if not docs:
            return
        size = len(self.docs)
        start = size - len(docs)
        self._grow_to(size)
        part = slice(start, size)
        namespaces = self.namespaces
        self.ns_ids[part] = [namespaces.setdefault(d.namespace, len(namespaces)) for d in docs]
        self.updated[part] = [d.record.updated_at for d in docs]
        self.expires[part] = [NEVER if d.record.expires_at is None else d.record.expires_at for d in docs]
        self.confidence[part] = [confidence_of(d.record.value) for d in docs]
        self.alive[part] = True
        indexed = [d.indexed for d in docs]
        self.indexed[part] = indexed
        chosen = [d for d, ok in zip(docs, indexed, strict=True) if ok]
        slots = [start + i for i, ok in enumerate(indexed) if ok]
        if len(slots) >= BULK_MIN and (len(slots) >= self.pack_after or 4 * len(slots) >= self.keyword.live):
            self.keyword.add_many(slots, [d.terms for d in chosen])
        else:
            for slot, doc in zip(slots, chosen, strict=True):
                self.keyword.add(slot, doc.terms)
        if self.vectors is not None and slots:
            hashes = b"".join([text_hash(d.vector_text) for d in chosen])
            self.hashes[slots] = np.frombuffer(hashes, dtype=np.uint8).reshape(-1, 32)
            self.pending.update(slots)

    def _drop(self, slot: int) -> None:
        if self.indexed[slot]:
            doc = self.docs[slot]
            assert doc is not None
            self.keyword.remove(slot, Counter(doc.terms))
        self.docs.drop(slot)
        self.alive[slot] = False
        self.indexed[slot] = False
        self.pending.discard(slot)
        if self.vectors is not None:
            self.vectors.clear(slot)

    def settings(self) -> dict[str, Any]:
        """What this index was made with (fields, embedder, cache, thresholds): a rebuilt copy keeps them."""
        return {"fields": self.fields, "embedder": self.embedder, "cache": self.cache, "scope_exact": self.scope_exact,
                "ann_min": self.ann_min, "pack_after": self.pack_after, "bulk_step": self.bulk_step,
                "vector_settings": self.vector_settings}  # fmt: skip

    def _rebuild(self) -> None:
        """Renumber live documents densely (postings rebuilt; vectors, and their graph, moved along)."""
        alive = np.flatnonzero(self.alive[: self.size])
        raws = [self.docs.raw(s) for s in alive.tolist()]
        new_slot = np.full(self.size, -1, dtype=np.int64)
        new_slot[alive] = np.arange(len(alive))
        vectors, pending, root, unsaved = self.vectors, self.pending, self.root, self.unsaved
        generation, lock, budget = self._generation + 1, self.lock, self.embed_budget
        self.__init__(self.nodes, **self.settings())  # type: ignore[misc]
        self.lock = lock  # held by this thread now, and waited for by others: the same lock goes on
        self.embed_budget = budget
        keys = [key for key, _ in raws]
        for slot, key in enumerate(keys):
            self.slot_of[key] = slot
        self._add(keys, [data for _, data in raws])
        self.slot_of.settle()
        if vectors is not None:
            vectors.renumber(new_slot)
            self.vectors = vectors
            self.pending = {int(new_slot[s]) for s in pending if new_slot[s] >= 0}
            self.pending |= set(np.flatnonzero(self.indexed[: self.size] & ~vectors.present_below(self.size)).tolist())
        self._generation = generation
        self.embed_pending()
        self.root, self.unsaved = root, unsaved

    def vectors_for(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Vectors of texts through the cache, embedding (in batches) only the texts it lacks."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured")
        return embed_through(self.embedder, self.cache, texts)

    def query_vector(self, text: str) -> npt.NDArray[np.float32]:
        """The embedding of a query (the last 1,024 distinct queries are remembered)."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured")
        return self._queries.get(self.embedder, text)

    def embed_pending(self, phases: Phases | None = None, budget: float | None = None) -> None:
        """Give every indexed slot a vector; on embedder failure keep them pending and say why.

        ``phases`` gets ``("embed", done, total)``: vectors found in the cache count at once, the rest as
        each batch is embedded. With a ``budget`` (seconds) embedding stops once it is spent (vectors found in
        the cache are always taken): the rest stays pending for :meth:`embed_step`.
        """
        if self.vectors is None or not self.pending:
            return
        assert self.embedder is not None
        slots = np.array(sorted(self.pending), dtype=np.int64)
        total = len(slots)
        have = np.zeros(total, dtype=bool)
        if total >= CACHE_STEP:
            self.vectors.reserve(total)
        scan = getattr(self.cache, "scan_many", None)
        if scan is not None and total >= SCAN_FROM:
            have = self._scan_cache(scan, slots)
        else:
            for lo in range(0, total, CACHE_STEP):  # in steps: never hold every cached vector as bytes at once
                part = slots[lo : lo + CACHE_STEP]
                hashes = [h.tobytes() for h in self.hashes[part]]
                found = self.cache.get_many(self.embedder.model_id, set(hashes))
                hit = np.array([h in found for h in hashes], dtype=bool)
                if hit.any():
                    joined = b"".join([found[h] for h, ok in zip(hashes, hit, strict=True) if ok])
                    rows = np.frombuffer(joined, dtype=np.float32).reshape(-1, self.vectors.dim)
                    self.vectors.set_many(part[hit], rows)
                    self.pending.difference_update(part[hit].tolist())
                have[lo : lo + CACHE_STEP] = hit
        missing = slots[~have]
        if budget is not None:
            missing = missing[::-1]  # within a budget, the newest writes first: the likeliest to be searched for
        done = total - len(missing)
        if phases is not None:
            phases("embed", done, total)
        step = EMBED_STEP if budget is None else INLINE_STEP

        def report(n: int) -> None:
            nonlocal done
            done += n
            if phases is not None:
                phases("embed", done, total)

        if self._embed_slots(missing, step, budget, report):
            self.vector_error = None

    def embed_scope(self, slots: npt.NDArray[np.int64]) -> None:
        """Make the vectors a search of these slots (a small scope) lacks, newest first, within ``embed_budget``
        seconds (all of them when it is None): a tenant's own latest writes are searchable by meaning at once."""
        if self.vectors is None or not self.pending or not len(slots):
            return
        waiting = slots[self.indexed[slots] & ~self.vectors.present_below(self.size)[slots]][::-1]
        self._embed_slots(waiting, INLINE_STEP, self.embed_budget)

    def _embed_slots(
        self,
        slots: npt.NDArray[np.int64],
        step: int,
        budget: float | None,
        report: Callable[[int], None] | None = None,
    ) -> bool:
        """Embed these slots' texts ``step`` at a time and set their vectors, until done or ``budget`` seconds have
        passed; True when every one was embedded (False: out of time, or the embedder failed, which is recorded)."""
        assert self.vectors is not None
        deadline = None if budget is None else time.monotonic() + budget
        for lo in range(0, len(slots), step):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            part = slots[lo : lo + step]
            texts = [doc.vector_text if (doc := self.docs[s]) is not None else "" for s in part.tolist()]
            try:
                vectors = self.vectors_for(texts)
            except EmbedderError as exc:
                self.vector_error = str(exc)
                return False
            self.vectors.set_many(part, np.stack(vectors))
            self.pending.difference_update(part.tolist())
            if report is not None:
                report(len(part))
        return True

    def embed_step(self, size: int = EMBED_STEP) -> bool:
        """Embed up to ``size`` pending slots without holding the index while the embedder runs (a background
        indexer's step: searches go on meanwhile); True while more remain. The vectors go in only for slots still
        pending (a slot is never reused for another text), unless the index was renumbered meanwhile."""
        if self.vectors is None:
            return False
        with self.lock:
            if not self.pending:
                return False
            slots = list(itertools.islice(self.pending, size))
            texts = [doc.vector_text if (doc := self.docs[s]) is not None else "" for s in slots]
            generation = self._generation
        try:
            vectors = self.vectors_for(texts)
        except EmbedderError as exc:
            with self.lock:
                self.vector_error = str(exc)
            return False  # the next search (or write) tries again, through the embedder's breaker
        with self.lock:
            if generation == self._generation:
                keep = [i for i, slot in enumerate(slots) if slot in self.pending]
                if keep:
                    chosen = np.array([slots[i] for i in keep], dtype=np.int64)
                    self.vectors.set_many(chosen, np.stack([vectors[i] for i in keep]))
                    self.pending.difference_update(chosen.tolist())
            if not self.pending:
                self.vector_error = None
            return bool(self.pending)

    def _scan_cache(self, scan: Callable[..., None], slots: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Set the vectors of ``slots`` the cache has, read in one scan (``scan_many``); which it had."""
        assert self.vectors is not None and self.embedder is not None
        vectors = self.vectors
        blob = self.hashes[slots].tobytes()
        hashes = [blob[i : i + 32] for i in range(0, len(blob), 32)]
        first = dict(zip(hashes, range(len(hashes)), strict=True))  # hash -> a position (the last) with it
        again: dict[bytes, list[int]] = {}  # hash -> the other positions with it (one text in several items)
        if len(first) < len(hashes):
            for i, h in enumerate(hashes):
                if first[h] != i:
                    again.setdefault(h, []).append(i)
        have = np.zeros(len(slots), dtype=bool)

        def sink(part: dict[bytes, bytes]) -> None:
            rows = [first[h] for h in part]
            found = list(part.values())
            for h in again.keys() & part.keys() if again else ():
                rows += again[h]
                found += [part[h]] * len(again[h])
            at = np.array(rows, dtype=np.int64)
            vectors.set_many(slots[at], np.frombuffer(b"".join(found), dtype=np.float32).reshape(-1, vectors.dim))
            have[at] = True

        scan(self.embedder.model_id, first.keys(), sink, CACHE_STEP)
        self.pending.difference_update(slots[have].tolist())
        return have

    def namespace_mask(self, prefix: Sequence[str], hide_system: bool = False) -> npt.NDArray[np.bool_]:
        """Slots whose namespace starts with ``prefix`` (``hide_system``: at the root, not the system ones)."""
        size = self.size
        if not prefix:
            marked = self._scopes.marked(self.namespaces, codec.SYSTEM_MARK, self.ns_ids, size) if hide_system else None
            return self.alive[:size].copy() if marked is None else ~marked & self.alive[:size]
        ids = self._scopes.ids_under(self.namespaces, prefix)
        same = self.ns_ids[:size] == ids[0] if len(ids) == 1 else np.isin(self.ns_ids[:size], ids)
        return same & self.alive[:size]

    def save(self, path: Path) -> None:
        """Write the index (live documents renumbered densely, their postings and per-slot arrays) to
        ``path``; :meth:`restore` reads it back. Vectors are not copied: the vector cache has them."""
        with self.lock:
            if self.root is None:
                raise ValueError("an index that reflects no root cannot be saved")
            size = self.size
            live = np.flatnonzero(self.alive[:size])
            new_slot = np.full(size, -1, dtype=np.int64)
            new_slot[live] = np.arange(len(live))
            blobs = self.docs.packed(self.alive[:size])
            terms, postings = self.keyword.export(new_slot)
            meta = {"root": self.root.hex(), "fields": list(self.fields), "terms": terms,
                    "model": self.embedder.model_id if self.embedder is not None else None,
                    "namespaces": [list(ns) for ns in self.namespaces]}  # fmt: skip
            arrays: dict[str, npt.NDArray[Any]] = {
                **blobs,
                "ns_ids": self.ns_ids[live],
                "updated": self.updated[live],
                "expires": self.expires[live],
                "confidence": self.confidence[live],
                "indexed": self.indexed[live],
                "hashes": self.hashes[live],
                **postings,
            }
            graph = None
            if self.vectors is not None:
                graph = path.with_name(f"{path.name}.{os.urandom(6).hex()}.hnsw")
                slots = self.vectors.save_graph(graph, new_slot)
                if slots is None:
                    graph = None
                else:
                    meta["graph"], arrays["graph_slots"] = graph.name, slots
            snapshot.write(path, meta, arrays)
            for old in path.parent.glob(f"{path.name}.*.hnsw"):  # graphs of earlier saves
                if old != graph:
                    old.unlink(missing_ok=True)
            self.unsaved = 0

    @classmethod
    def restore(
        cls,
        path: Path,
        nodes: NodeStore,
        *,
        fields: Sequence[str] = ("$",),
        embedder: Embedder | None = None,
        **settings: Any,
    ) -> DocIndex | None:
        """The index saved at ``path``, or None if there is none or it was built with other fields or
        another embedder. Documents are decoded when first read; vectors come from the cache. ``settings``:
        the other arguments of :class:`DocIndex` (cache, thresholds)."""
        found = snapshot.read(path)
        if found is None:
            return None
        meta, arrays = found
        if meta.get("fields") != list(fields) or meta.get("model") != (embedder.model_id if embedder else None):
            return None
        index = cls(nodes, fields=fields, embedder=embedder, **settings)
        try:
            index.docs = DocList.restore(fields, {k: arrays[k] for k in ("keys", "key_ends", "data", "data_ends")})
            index.slot_of = SlotMap(index.docs.key)
            blob, ends = arrays["keys"].tobytes(), arrays["key_ends"].tolist()
            for i, (a, b) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
                index.slot_of[blob[a:b]] = i
            index.slot_of.settle()
            n = len(ends)
            index.namespaces = {tuple(ns): i for i, ns in enumerate(meta["namespaces"])}
            index.ns_ids = np.array(arrays["ns_ids"], dtype=np.int32)
            index.updated = np.array(arrays["updated"], dtype=np.int64)
            index.expires = np.array(arrays["expires"], dtype=np.int64)
            index.confidence = np.array(arrays["confidence"], dtype=np.float32)
            index.indexed = np.array(arrays["indexed"], dtype=bool)
            index.hashes = np.array(arrays["hashes"], dtype=np.uint8).reshape(n, 32)
            index.alive = np.ones(n, dtype=bool)
            index.keyword = KeywordIndex.load(meta["terms"], arrays, int(index.indexed.sum()))
            index.root = ChunkId(bytes.fromhex(meta["root"]))
        except (KeyError, ValueError, TypeError):
            return None
        if index.vectors is not None:
            graph = None
            if "graph" in meta:
                graph = Graph.open(path.parent / str(meta["graph"]), index.vectors.dim, len(arrays["graph_slots"]))
            if graph is not None:
                index.vectors.load_graph(graph, arrays["graph_slots"])
            missing = index.indexed & ~index.vectors.present_below(n)
            index.pending = set(np.flatnonzero(missing).tolist())
            index.embed_pending()
        return index
