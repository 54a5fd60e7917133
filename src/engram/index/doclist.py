"""Documents by slot: an item as the index sees it (:class:`Doc`), the list that holds them, packed into
arrays once there are many (:class:`DocList`), and the map from tree key to slot (:class:`SlotMap`).

:class:`~engram.index.docs.DocIndex` keeps one of each beside its keyword and vector indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.index import text as analysis
from engram.index.embedtext import embedded_text
from engram.index.paths import document_text
from engram.objects import Record, decode_record

#: Keys added to a :class:`SlotMap` since its last merge are kept in a dict up to this many (or 1/8 of it).
RECENT_MAX = 4_096


@dataclass(slots=True)
class Doc:
    """An item as the index sees it."""

    key: bytes
    namespace: tuple[str, ...]
    item_key: str
    record: Record
    text: str
    terms: list[str]
    data: bytes
    #: The text its vector embeds (:mod:`engram.index.embedtext`: by default the memory's text only).
    vector_text: str = ""

    @property
    def indexed(self) -> bool:
        """False for items put with ``index=False``: listed and filtered, never matched by a query."""
        return self.record.extra.get("index") is not False


#: An entry key decoded (namespace, item key), remembered: a search decodes the keys of the items it returns, and the
#: same items come back across searches. Both parts are immutable, so a cached answer cannot be changed by a caller.
_decoded_key = lru_cache(maxsize=16_384)(codec.decode_key)


def confidence_of(value: dict[str, Any]) -> float:
    """An item's confidence: ``value["confidence"]`` or ``value["metadata"]["confidence"]``, else 0.5."""
    found = value.get("confidence")
    if not isinstance(found, int | float) or isinstance(found, bool):
        meta = value.get("metadata")
        found = meta.get("confidence") if isinstance(meta, dict) else None
    if not isinstance(found, int | float) or isinstance(found, bool):
        return 0.5
    return float(min(1, max(0, found)))  # clamp first: an integer too large for a float is still a number


def make_doc(key: bytes, data: bytes, fields: Sequence[str]) -> Doc:
    """Decode a tree entry into a document, extracting its searchable text."""
    namespace, item_key = codec.decode_key(key)
    record = decode_record(data)
    chosen = record.extra.get("index")
    if chosen is False:
        return Doc(key, namespace, item_key, record, "", [], data)
    text = document_text(record.value, chosen if isinstance(chosen, list) else fields)
    vector_text = embedded_text(record.value, chosen, fields, text)
    return Doc(key, namespace, item_key, record, text, analysis.terms(text), data, vector_text)


class DocList:
    """Documents by slot (None where dropped). Slots restored from a snapshot keep their key and
    encoded record in the snapshot's arrays and are decoded on first access."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)
        self._docs: list[Doc | None] = []
        self._unread = np.zeros(0, dtype=bool)
        self._blobs: dict[str, npt.NDArray[Any]] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, slot: int) -> Doc | None:
        if slot < len(self._unread) and self._unread[slot]:
            key, data = self.raw(slot)
            self._docs[slot] = make_doc(key, data, self.fields)
            self._unread[slot] = False
        return self._docs[slot]

    def append(self, doc: Doc) -> None:
        self._docs.append(doc)

    def extend_raw(self, keys: Sequence[bytes], datas: Sequence[bytes]) -> None:
        """Append documents given as tree keys and encoded records, kept encoded (decoded when first read):
        a bulk load never holds its documents as Python objects."""
        n, covered = len(self._docs), self._covered()
        blobs: dict[str, npt.NDArray[Any]] = {}
        for name, ends_name, pieces in (("keys", "key_ends", keys), ("data", "data_ends", datas)):
            old = self._blobs.get(name, np.zeros(0, dtype=np.uint8))
            old_ends = self._blobs.get(ends_name, np.zeros(0, dtype=np.int64))
            last = int(old_ends[-1]) if len(old_ends) else 0
            blob, ends = _packed(list(pieces))
            blobs[name] = np.concatenate([old, blob])
            # slots held as documents since the last pack get empty pieces: they are read from the documents
            blobs[ends_name] = np.concatenate([old_ends, np.full(n - covered, last, np.int64), ends + last])
        self._blobs = blobs
        self._docs.extend([None] * len(keys))
        unread = np.zeros(n + len(keys), dtype=bool)
        unread[: len(self._unread)] = self._unread
        unread[n:] = True
        self._unread = unread

    def _covered(self) -> int:
        """Slots the packed arrays cover (the first ones)."""
        found = self._blobs.get("key_ends")
        return 0 if found is None else len(found)

    def key(self, slot: int) -> bytes:
        """The tree key of a live slot, without decoding its document."""
        found = self._docs[slot]
        return found.key if found is not None else _piece(self._blobs["keys"], self._blobs["key_ends"], slot)

    def entry(self, slot: int) -> tuple[tuple[str, ...], str, Record]:
        """Namespace, item key and record of a live slot. An unread slot is decoded for this call only
        (no text analysis, nothing kept): results and filters read few slots, each maybe once."""
        found = self._docs[slot]
        if found is not None:
            return found.namespace, found.item_key, found.record
        key, data = self.raw(slot)
        namespace, item_key = _decoded_key(key)
        return namespace, item_key, decode_record(data)

    def drop(self, slot: int) -> None:
        self._docs[slot] = None
        if slot < len(self._unread):
            self._unread[slot] = False

    def raw(self, slot: int) -> tuple[bytes, bytes]:
        """The tree key and encoded record of a live slot, without decoding it."""
        found = self._docs[slot]
        if found is not None:
            return found.key, found.data
        b = self._blobs
        return _piece(b["keys"], b["key_ends"], slot), _piece(b["data"], b["data_ends"], slot)

    def pack(self, alive: npt.NDArray[np.bool_]) -> None:
        """Keep every live document as its encoded bytes only (decoded again when read): a decoded document
        costs ~20x its bytes in Python objects."""
        n = len(self._docs)
        live = np.array(alive[:n], dtype=bool)
        self._blobs = self.packed(live, keep_slots=True)
        self._docs = [None] * n
        self._unread = live

    def packed(self, live: npt.NDArray[np.bool_], *, keep_slots: bool = False) -> dict[str, npt.NDArray[Any]]:
        """The keys and encoded records of the ``live`` slots as packed arrays (``keys``, ``key_ends``,
        ``data``, ``data_ends``): the live ones only, or every slot with empty pieces for the dead ones
        (``keep_slots``). Array operations only when every slot is packed already (after a bulk load)."""
        n = len(self._docs)
        blobs: dict[str, npt.NDArray[Any]] = {}
        if self._covered() == n and self._docs.count(None) == n:
            for name, ends_name in (("keys", "key_ends"), ("data", "data_ends")):
                lengths = np.diff(self._blobs[ends_name], prepend=0)
                blobs[name] = self._blobs[name][np.repeat(live, lengths)]
                blobs[ends_name] = np.cumsum(lengths[live] if not keep_slots else np.where(live, lengths, 0))
            return blobs
        slots = range(n) if keep_slots else np.flatnonzero(live).tolist()
        raws = [self.raw(s) if live[s] else (b"", b"") for s in slots]
        blobs["keys"], blobs["key_ends"] = _packed([k for k, _ in raws])
        blobs["data"], blobs["data_ends"] = _packed([d for _, d in raws])
        return blobs

    @classmethod
    def restore(cls, fields: Sequence[str], blobs: dict[str, npt.NDArray[Any]]) -> DocList:
        """Documents of a snapshot, every one unread."""
        docs = cls(fields)
        n = len(blobs["key_ends"])
        docs._docs = [None] * n
        docs._unread = np.ones(n, dtype=bool)
        docs._blobs = blobs
        return docs


class SlotMap:
    """Tree key -> slot of every live document, without a Python object per key: 64-bit hashes of the keys,
    sorted, beside their slots (a key found is checked against the key its slot holds, so two keys that share
    a hash are told apart); keys added since the last :meth:`settle` wait in a dict. 100k keys take 1.6 MB
    instead of a dict's ~10 MB of small objects that also pin the heap pages around them."""

    def __init__(
        self,
        key_of: Callable[[int], bytes],
        *,
        recent_max: int = RECENT_MAX,
        hash_key: Callable[[bytes], int] = hash,
    ) -> None:
        self._key_of = key_of
        #: Recent keys wait in a dict until there are this many (or an eighth of the sorted ones).
        self.recent_max = recent_max
        self._hash = hash_key
        self._hashes = np.zeros(0, dtype=np.int64)
        self._slots = np.zeros(0, dtype=np.int64)  # -1 once popped
        self._live = 0
        self._recent: dict[bytes, int] = {}

    def __len__(self) -> int:
        return self._live + len(self._recent)

    def _find(self, key: bytes) -> int:
        """Where ``key`` is in the sorted arrays, or -1."""
        if not self._live:
            return -1
        wanted = self._hash(key)
        at = int(np.searchsorted(self._hashes, wanted))
        while at < len(self._hashes) and self._hashes[at] == wanted:
            slot = int(self._slots[at])
            if slot >= 0 and self._key_of(slot) == key:
                return at
            at += 1
        return -1

    def get(self, key: bytes) -> int | None:
        """The slot of ``key``, or None."""
        found = self._recent.get(key)
        if found is not None:
            return found
        at = self._find(key)
        return None if at < 0 else int(self._slots[at])

    def pop(self, key: bytes) -> int | None:
        """Forget ``key``; its slot, or None."""
        found = self._recent.pop(key, None)
        if found is not None:
            return found
        at = self._find(key)
        if at < 0:
            return None
        slot = int(self._slots[at])
        self._slots[at] = -1
        self._live -= 1
        return slot

    def __setitem__(self, key: bytes, slot: int) -> None:
        self._recent[key] = slot

    def settle(self) -> None:
        """Move the recent keys into the sorted arrays once there are many (every slot given must hold its
        document by now: a lookup reads the key there)."""
        recent = self._recent
        if len(recent) < max(self.recent_max, len(self._hashes) // 8):
            return
        keep = self._slots >= 0
        added = np.fromiter(map(self._hash, recent), dtype=np.int64, count=len(recent))
        hashes = np.concatenate([self._hashes[keep], added])
        slots = np.concatenate([self._slots[keep], np.fromiter(recent.values(), dtype=np.int64, count=len(recent))])
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._slots, self._live, self._recent = hashes[order], slots[order], len(hashes), {}


def _piece(blob: npt.NDArray[np.uint8], ends: npt.NDArray[np.int64], i: int) -> bytes:
    return blob[int(ends[i - 1]) if i else 0 : int(ends[i])].tobytes()


def _packed(pieces: list[bytes]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    ends = np.cumsum([len(p) for p in pieces], dtype=np.int64) if pieces else np.zeros(0, dtype=np.int64)
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), ends


__all__ = ["Doc", "DocList", "SlotMap", "confidence_of", "make_doc"]
