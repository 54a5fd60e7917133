"""The chunk store and ref store of a remote, written once over a :class:`~engram.backends.buckets.Bucket`.

Layout (the same in a folder and in S3)::

    packs/<40 hex>.pack                 many chunks back to back (a write of PACK_MIN chunks or more)
    packs/<40 hex>.idx                  its index: id, offset and length of each chunk, and the write time
    chunks/<first 2 hex>/<40 hex>       one object per chunk ("loose": a write of a few chunks)
    dicts/<8 hex>                       a zstd dictionary trained from the remote's chunks, named by its id
    refs/<ref name, %-quoted>           a ref: the hex id it points at
    reflog/<20-digit ns>-<random>       one JSON object per ref change

Each chunk is stored as one zstd frame (:mod:`engram.backends.compression`), loose or in a pack; offsets and
lengths in a pack's index are those of the stored frames. Pack writes use a dictionary trained from the first large
one (stored before any frame names it; a reader fetches it and checks it by its id); loose chunks never use one,
so a backup's record reads without it. Copies written before compression or without a dictionary still read: a
copy is good when what it decodes to hashes to its id.

A remote passes the storage contract suites (:mod:`engram.testing`) like every local backend, so
``fsck``, the reachability walk and the sweep of :mod:`engram.maintenance` run on a remote as they do locally.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from engram.backends.base import ChunkStore, now_ms
from engram.backends.buckets import Bucket
from engram.backends.compression import (
    DICT_BYTES,
    TRAIN_MIN_BYTES,
    Dictionary,
    compress,
    decode,
    frame_dictionary,
    train,
)
from engram.breakers import RetryPolicy
from engram.errors import IntegrityError, StorageError
from engram.hashing import ID_SIZE, ChunkId
from engram.ops.remotes.buckets import open_bucket
from engram.ops.remotes.packs import PACK_BYTES, PACKS, Pack, decode_index, make_packs, slice_pack
from engram.ops.remotes.refstore import BucketRefStore
from engram.runtime import Threads

log = logging.getLogger("engram.remotes")

CHUNKS = "chunks/"
#: The compression dictionaries of the remote's chunks (:mod:`engram.backends.compression`).
DICTS = "dicts/"
#: Where packs whose index cannot be read are moved by :meth:`BucketChunkStore.quarantine_damaged`.
DAMAGED = "damaged/"
#: Up to this many ids, ``has_many`` asks about each one (when no listing is at hand) instead of listing.
HEAD_MAX = 8
#: Seconds a listing of the remote's loose chunks and packs answers ``has_many`` for.
LISTING_TTL = 60.0
#: From this many chunks on, a write is packs (one object of chunks plus its index) instead of one object each.
PACK_MIN = 16
#: A read that wants at least this share of a pack's bytes reads the whole pack, else byte ranges of it.
FULL_READ_SHARE = 0.25
#: A pack of at most this many bytes is read whole (and kept) even for one chunk: a walk along a run of commits
#: finds the next ones in what it fetched, one request per pack instead of one per commit.
SMALL_PACK_BYTES = 256 << 10
#: A pack read by byte range this many times is read whole the next time (a walk is going through it).
RANGED_READS = 2
#: Packs whose ranged reads are counted (the least recently read are forgotten).
RANGED_MEMORY = 4096
#: Bytes of whole packs one read fetches on those two guesses (past it, byte ranges): bounded memory per read.
GUESS_BYTES = 64 << 20
#: Gaps up to this many bytes between wanted chunks of a pack are read through (one ranged request).
RANGE_GAP = 64 << 10
#: Bytes of whole packs kept after a read: a walk asks for one pack's chunks over several batches.
PACK_CACHE_BYTES = 128 << 20
#: A remote's dictionary is at most 1/DICT_SHARE of the write it is trained from: a small remote pays little.
DICT_SHARE = 16
#: Packs whose order of ids is kept for :meth:`BucketChunkStore.read_along`.
ORDERS = 64
#: Parallel requests of one read.
READERS = 16


#: A chunk as a remote stores it: one zstd frame, and the dictionary it needs (None: none).
Frame = tuple[bytes, Dictionary | None]


def chunk_key(cid: ChunkId) -> str:
    """The object key of a loose chunk."""
    text = cid.hex()
    return f"{CHUNKS}{text[:2]}/{text}"


def _chunk_of(key: str) -> ChunkId | None:
    name = key.rpartition("/")[2]
    try:
        cid = bytes.fromhex(name)
    except ValueError:
        return None
    return cid if len(cid) == ID_SIZE else None


class BucketChunkStore(ChunkStore):
    """Chunks in a bucket: a write of many chunks is packs, a write of a few is one object per chunk ("loose").

    ``put_many`` is idempotent, and a re-put renews the write time. A chunk in several places (loose and in a
    pack, or in two packs) counts as written at its newest copy. Deleting a chunk that shares a pack with kept
    ones rewrites the pack without it (the new pack first, then the old one is removed).
    """

    checks_reads = True  # every copy read is decoded and hashed (:meth:`read_checked`)

    def __init__(self, bucket: Bucket, *, pack_bytes: int = PACK_BYTES) -> None:
        self.bucket = bucket
        self.pack_bytes = pack_bytes
        self._listed: set[ChunkId] | None = None  # loose chunks, from a listing reused for LISTING_TTL seconds
        self._listed_at = 0.0
        self._packs: dict[str, Pack] | None = None  # every pack, from a listing reused for LISTING_TTL seconds
        self._where: dict[ChunkId, str] = {}  # chunk id -> the newest pack holding it
        self._older: dict[ChunkId, list[str]] = {}  # chunk id -> the other packs holding it, newest first
        self._damaged: dict[str, str] = {}  # pack -> why its index cannot be read (its chunks are unreadable)
        self._bad: dict[ChunkId, set[str]] = {}  # chunk id -> objects read with a copy that does not hash right
        self._packs_at = 0.0
        self._listing = threading.RLock()
        self._cache: OrderedDict[str, bytes] = OrderedDict()  # whole packs read lately
        self._cached = 0
        self._ranged: OrderedDict[str, int] = OrderedDict()  # packs read by byte range lately: how many times
        self._orders: OrderedDict[str, tuple[list[ChunkId], dict[ChunkId, int]]] = OrderedDict()  # see read_along
        self._dicts: dict[int, Dictionary | None] = {}  # dictionary id -> as read (None: missing or damaged)
        self._writing: Dictionary | None = None  # the dictionary writes use
        self._dicts_at = -LISTING_TTL  # when the remote was last searched for a dictionary to write with
        self._trained_at = -LISTING_TTL  # when one was last trained (a failed try is not repeated at once)

    def dictionary(self, did: int) -> Dictionary | None:
        """The dictionary ``did`` of the remote (read once, checked against its id), or None when it is missing
        or damaged (the frames that need it are then bad copies)."""
        with self._listing:
            if did in self._dicts:
                return self._dicts[did]
        key = f"{DICTS}{did:08x}"
        data = self.bucket.get_many([key]).get(key)
        found: Dictionary | None = None
        try:
            found = None if data is None else Dictionary.load(data, did)
        except IntegrityError as exc:
            log.warning("%s on the remote: %s", key, exc)
        with self._listing:
            self._dicts[did] = found
        return found

    def _dictionary_for(self, chunks: Mapping[ChunkId, bytes]) -> Dictionary | None:
        """The dictionary to write ``chunks`` with: the one this store uses, else the newest good one on the remote
        (looked for at most every LISTING_TTL seconds), else one trained from ``chunks`` when they are enough
        (tried at most every LISTING_TTL seconds; stored before any frame uses it), else None."""
        with self._listing:
            if self._writing is not None:
                return self._writing
            now = time.monotonic()
            if now - self._dicts_at >= LISTING_TTL:
                self._dicts_at = now
                keys = sorted(self.bucket.iter_keys(DICTS), key=lambda kw: kw[1], reverse=True)  # newest first
                for key, _ in keys:
                    try:
                        did = int(key.removeprefix(DICTS), 16)
                    except ValueError:
                        continue
                    if (found := self.dictionary(did)) is not None:
                        self._writing = found
                        return found
            size = sum(len(data) for data in chunks.values())
            if size < TRAIN_MIN_BYTES or now - self._trained_at < LISTING_TTL:
                return None
            self._trained_at = now
            trained = train(chunks.values(), min(DICT_BYTES, size // DICT_SHARE))
            if trained is not None:
                self.bucket.put_many({DICTS + trained.name: trained.data})
                self._dicts[trained.id] = self._writing = trained
            return trained

    def _present(self) -> set[ChunkId]:
        """Every loose chunk id on the remote, from a listing at most LISTING_TTL seconds old (a listing is one
        request per 1,000 objects: a copy's successive questions share one). Chunks only disappear in a sweep,
        which must not run during a copy."""
        with self._listing:
            if self._listed is None or time.monotonic() - self._listed_at > LISTING_TTL:
                self._listed = {cid for key, _ in self.bucket.iter_keys(CHUNKS) if (cid := _chunk_of(key))}
                self._listed_at = time.monotonic()
            return self._listed

    def _index(self, refresh: bool = False) -> tuple[dict[str, Pack], dict[ChunkId, str]]:
        """Every pack on the remote and where each packed chunk is; index objects never change, so only those
        of packs new since the last listing are read."""
        with self._listing:
            if self._packs is None or refresh or time.monotonic() - self._packs_at > LISTING_TTL:
                names = [key.removesuffix(".idx") for key, _ in self.bucket.iter_keys(PACKS) if key.endswith(".idx")]
                known = self._packs or {}
                fresh = [name for name in names if name not in known]
                found = self.bucket.get_many(name + ".idx" for name in fresh)
                packs = {name: known[name] for name in names if name in known}
                damaged: dict[str, str] = {}
                for name in fresh:
                    if name + ".idx" not in found:
                        continue  # removed by a sweep since the listing
                    try:
                        packs[name] = decode_index(name, found[name + ".idx"])
                    except StorageError as exc:  # the pack's chunks count as absent: a thorough copy re-sends them
                        damaged[name] = str(exc)
                        log.warning("%s; its chunks count as absent until a thorough push re-sends them", exc)
                self._damaged = damaged
                self._set_packs(packs)
            assert self._packs is not None
            return self._packs, self._where

    def _set_packs(self, packs: dict[str, Pack]) -> None:
        self._packs = packs
        self._packs_at = time.monotonic()
        where: dict[ChunkId, str] = {}
        older: dict[ChunkId, list[str]] = {}
        for name, pack in sorted(packs.items(), key=lambda p: p[1].written):
            for cid in pack.entries:
                before = where.get(cid)
                if before is not None:
                    older.setdefault(cid, []).insert(0, before)
                where[cid] = name
        self._where, self._older = where, older

    @property
    def damaged(self) -> dict[str, str]:
        """Packs whose index cannot be read (as of the last listing), each with the reason."""
        self._index()
        return dict(self._damaged)

    def bad_copies(self, cid: ChunkId) -> list[str]:
        """The objects this store read a copy of ``cid`` from that does not hash to its id."""
        with self._listing:
            return sorted(self._bad.get(cid, ()))

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        """The chunks found, each checked against its id: a copy that does not hash right is passed over for
        another copy (in an older pack, or loose); a chunk with no good copy is an :class:`IntegrityError`."""
        found, bad = self.read_checked(ids)
        if bad:
            cid, places = next(iter(bad.items()))
            raise IntegrityError(f"chunk {cid.hex()} on the remote is corrupt (in {', '.join(sorted(places))}); "
                                 f"{len(bad)} corrupt in this read: `engram backup verify` names them all")  # fmt: skip
        return found

    def read_checked(
        self, ids: Iterable[ChunkId], *, frames: dict[ChunkId, Frame] | None = None
    ) -> tuple[dict[ChunkId, bytes], dict[ChunkId, set[str]]]:
        """(the chunks found with a good copy, the chunks found only in copies that do not hash right, each with
        the objects holding those copies); a chunk in neither is absent. ``frames``, when given, receives the
        stored copy (a zstd frame) and its dictionary of each good chunk that was stored compressed: a third of
        its bytes to keep in memory, which :func:`~engram.backends.compression.decompress` turns back into the
        chunk checked here."""
        wanted = list(dict.fromkeys(ids))
        found: dict[ChunkId, bytes] = {}
        bad: dict[ChunkId, set[str]] = {}
        if not wanted:
            return found, bad
        packs, where = self._index()
        self._read_copies([cid for cid in wanted if cid in where], packs, found, bad, frames)
        rest = {chunk_key(cid): cid for cid in wanted if cid not in found}
        if rest:
            loose = self.bucket.get_many(rest)
            self._check({rest[key]: data for key, data in loose.items()}, {cid: key for key, cid in rest.items()},
                        found, bad, frames)  # fmt: skip
            still = [cid for cid in rest.values() if cid not in found and cid not in bad]
            if still:  # packed by another process since our listing, or repacked by a sweep
                packs, where = self._index(refresh=True)
                self._read_copies([cid for cid in still if cid in where], packs, found, bad, frames)
        return found, {cid: places for cid, places in bad.items() if cid not in found}

    def read_along(self, ids: Iterable[ChunkId], count: int) -> tuple[dict[ChunkId, bytes], dict[ChunkId, set[str]]]:
        """:meth:`read_checked` of ``ids`` and, in the chunks found, of up to ``count`` chunks stored after each
        in its pack (the bad ones of those are left out: nobody asked for them). A copy writes commits newest
        first, each followed by its parent: a walk down a run of commits gets the next ones in one read."""
        wanted = list(dict.fromkeys(ids))
        packs, where = self._index()
        extra: list[ChunkId] = []
        for cid in wanted:
            name = where.get(cid)
            if name is not None and name in packs:
                order, position = self._order(name, packs[name])
                at = position[cid] + 1
                extra.extend(order[at : at + count])
        found, bad = self.read_checked([*wanted, *extra])
        asked = set(wanted)
        return found, {cid: places for cid, places in bad.items() if cid in asked}

    def _order(self, name: str, pack: Pack) -> tuple[list[ChunkId], dict[ChunkId, int]]:
        """The ids of a pack in the order stored, and the position of each (kept for the packs used lately)."""
        with self._listing:
            found = self._orders.get(name)
            if found is not None:
                self._orders.move_to_end(name)
                return found
        order = list(pack.entries)
        found = (order, {cid: i for i, cid in enumerate(order)})
        with self._listing:
            self._orders[name] = found
            while len(self._orders) > ORDERS:
                self._orders.popitem(last=False)
        return found

    def _read_copies(
        self, ids: list[ChunkId], packs: dict[str, Pack], found: dict[ChunkId, bytes], bad: dict[ChunkId, set[str]],
        frames: dict[ChunkId, Frame] | None,
    ) -> None:  # fmt: skip
        """Read ``ids`` from the newest pack holding each, then from older packs for those not good yet."""
        rank = 0
        while ids:
            where: dict[ChunkId, str] = {}
            for cid in ids:
                names = [self._where.get(cid, ""), *self._older.get(cid, ())]
                if rank < len(names) and names[rank] in packs:
                    where[cid] = names[rank]
            self._check(self._read_packed(list(where), packs, where), {c: n + ".pack" for c, n in where.items()},
                        found, bad, frames)  # fmt: skip
            ids = [cid for cid in where if cid not in found]
            rank += 1

    def _check(
        self, read: dict[ChunkId, bytes], places: Mapping[ChunkId, str], found: dict[ChunkId, bytes],
        bad: dict[ChunkId, set[str]], frames: dict[ChunkId, Frame] | None = None,
    ) -> None:  # fmt: skip
        for cid, stored in read.items():
            did = frame_dictionary(stored)
            dictionary = self.dictionary(did) if did else None
            data = decode(cid, stored, dictionary)
            if data is not None:
                found[cid] = data
                if frames is not None and data is not stored:  # decoded from a frame (not stored as it is)
                    frames[cid] = (stored, dictionary)
                continue
            where = {places[cid], f"{DICTS}{did:08x}"} if did and dictionary is None else {places[cid]}
            bad.setdefault(cid, set()).update(where)
            with self._listing:
                self._bad.setdefault(cid, set()).add(places[cid])

    def _read_packed(
        self, ids: list[ChunkId], packs: dict[str, Pack], where: dict[ChunkId, str]
    ) -> dict[ChunkId, bytes]:
        by_pack: dict[str, list[ChunkId]] = {}
        for cid in ids:
            by_pack.setdefault(where[cid], []).append(cid)
        found: dict[ChunkId, bytes] = {}
        reads: list[tuple[str, int, int, list[ChunkId]]] = []  # (pack, start, length (-1: whole), chunks)
        guessed = 0  # bytes of whole packs read on a guess that more of them will be wanted
        for name, cids in by_pack.items():
            pack = packs[name]
            with self._listing:
                whole = self._cache.get(name)
                if whole is not None:
                    self._cache.move_to_end(name)
                ranged = self._ranged.pop(name, 0)
            if whole is not None:
                found.update(slice_pack(pack, whole, 0, cids))
                continue
            if sum(pack.entries[cid][1] for cid in cids) >= pack.size * FULL_READ_SHARE:
                reads.append((name, 0, -1, cids))
                continue
            if (pack.size <= SMALL_PACK_BYTES or ranged >= RANGED_READS) and guessed + pack.size <= GUESS_BYTES:
                guessed += pack.size
                reads.append((name, 0, -1, cids))
                continue
            with self._listing:
                self._ranged[name] = ranged + 1
                while len(self._ranged) > RANGED_MEMORY:
                    self._ranged.popitem(last=False)
            spans = sorted(cids, key=lambda cid: pack.entries[cid][0])
            start, end = -1, -1
            group: list[ChunkId] = []
            for cid in spans:
                at, n = pack.entries[cid]
                if group and at - end > RANGE_GAP:
                    reads.append((name, start, end - start, group))
                    group = []
                if not group:
                    start = at
                group.append(cid)
                end = max(end, at + n) if len(group) > 1 else at + n
            reads.append((name, start, end - start, group))
        for (name, start, _, cids), data in zip(reads, _readers().map(self._fetch, reads), strict=True):
            if data is not None:
                found.update(slice_pack(packs[name], data, start, cids))
        return found

    def _fetch(self, read: tuple[str, int, int, list[ChunkId]]) -> bytes | None:
        name, start, length, _ = read
        if length >= 0:
            return self.bucket.get_range(name + ".pack", start, length)
        data = self.bucket.get_many([name + ".pack"]).get(name + ".pack")
        if data is not None and len(data) <= PACK_CACHE_BYTES:
            with self._listing:
                if name not in self._cache:
                    self._cache[name] = data
                    self._cached += len(data)
                while self._cached > PACK_CACHE_BYTES:
                    self._cached -= len(self._cache.popitem(last=False)[1])
        return data

    def locate(self, cid: ChunkId) -> tuple[str, int, int] | None:
        """Where a chunk is stored: (object key, offset, length) in a pack, or its loose object's key with
        offset 0 and length -1; None when the remote does not have it."""
        _, where = self._index(refresh=True)
        if cid in where:
            name = where[cid]
            at, n = self._index()[0][name].entries[cid]
            return name + ".pack", at, n
        return (chunk_key(cid), 0, -1) if self.bucket.exists_many([chunk_key(cid)]) else None

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        wanted = set(ids)
        if not wanted:
            return set()
        _, where = self._index()
        rest = {cid for cid in wanted if cid not in where}
        if not rest:
            return set()
        if len(rest) <= HEAD_MAX and self._listed is None:
            present = self.bucket.exists_many(chunk_key(cid) for cid in rest)
            return {cid for cid in rest if chunk_key(cid) not in present}
        return rest - self._present()

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        # packs only: a loose write (a backup's record, a push of a few chunks) reads even without the dictionary
        dictionary = self._dictionary_for(chunks) if len(chunks) >= PACK_MIN else None
        items = [(cid, compress(data, dictionary)) for cid, data in chunks.items()]  # ids: hash of the chunk itself
        if len(items) < PACK_MIN:
            self.bucket.put_many({chunk_key(cid): data for cid, data in items})
            with self._listing:
                if self._listed is not None:
                    self._listed.update(chunks)
        else:
            self._write_packs(make_packs(items, now_ms(), self.pack_bytes))
        self._drop_bad_copies(chunks, loose=len(items) < PACK_MIN)

    def _drop_bad_copies(self, written: Mapping[ChunkId, bytes], *, loose: bool) -> None:
        """After a write of good copies, remove the copies read before that did not hash right: a loose one is
        deleted (unless just rewritten), a pack is rewritten without them (the new pack first)."""
        with self._listing:
            repaired = {cid: self._bad.pop(cid) for cid in written if cid in self._bad}
        if not repaired:
            return
        doomed_loose = [place for places in repaired.values() for place in places if place.startswith(CHUNKS)]
        if not loose:
            self.bucket.delete_many(doomed_loose)
        by_pack: dict[str, set[ChunkId]] = {}
        for cid, places in repaired.items():
            for place in places:
                if place.endswith(".pack"):
                    by_pack.setdefault(place.removesuffix(".pack"), set()).add(cid)
        packs, _ = self._index(refresh=True)
        for name, cids in by_pack.items():
            if name in packs:
                self._rewrite_without(name, packs[name], cids)
        self._index(refresh=True)

    def _rewrite_without(self, name: str, pack: Pack, doomed: set[ChunkId]) -> None:
        """Rewrite a pack without ``doomed``: the kept chunks go to a new pack first, then the old one is removed,
        so an interruption leaves copies, never a loss."""
        kept = [cid for cid in pack.entries if cid not in doomed]
        if kept:
            data = self._read_packed(kept, {name: pack}, dict.fromkeys(kept, name))
            if len(data) != len(kept):
                raise StorageError(f"pack {name} on the remote is damaged: cannot rewrite it without deletions")
            self._write_packs(make_packs([(cid, data[cid]) for cid in kept], pack.written, self.pack_bytes))
        self.bucket.delete_many([name + ".idx", name + ".pack"])
        with self._listing:
            self._cached -= len(self._cache.pop(name, b""))

    def quarantine_damaged(self) -> list[str]:
        """Move the packs whose index cannot be read to ``damaged/`` (kept for a post-mortem, out of the store);
        returns their names. Their chunks were unreadable already: run it after a thorough copy re-sent them."""
        self._index(refresh=True)
        moved = sorted(self._damaged)
        for name in moved:
            keys = [name + ".idx", name + ".pack"]
            found = self.bucket.get_many(keys)
            self.bucket.put_many({DAMAGED + key.removeprefix(PACKS): data for key, data in found.items()})
            self.bucket.delete_many(keys)
            log.warning("moved pack %s, whose index is damaged, to %s", name, DAMAGED)
        self._index(refresh=True)
        return moved

    def _write_packs(self, packs: list[tuple[Pack, bytes]]) -> None:
        self.bucket.put_many({pack.name + ".pack": data for pack, data in packs})
        self.bucket.put_many({pack.name + ".idx": pack.encode_index() for pack, _ in packs})  # visible from now
        with self._listing:
            if self._packs is not None:
                self._set_packs({**self._packs, **{pack.name: pack for pack, _ in packs}})

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        def inside(cid: ChunkId) -> bool:
            return (start is None or cid >= start) and (end is None or cid < end)

        ids: set[ChunkId] = set()
        young: set[ChunkId] = set()  # written at or after written_before, in some copy
        for key, written in self.bucket.iter_keys(CHUNKS):
            cid = _chunk_of(key)
            if cid is None or not inside(cid):
                continue
            ids.add(cid)
            if written_before is not None and written > written_before - self.bucket.precision_ms:
                exact = written if written >= written_before else self.bucket.written_at(key)
                if exact is None or exact >= written_before:
                    young.add(cid)
        packs, _ = self._index(refresh=True)
        for pack in packs.values():
            for cid in pack.entries:
                if inside(cid):
                    ids.add(cid)
                    if written_before is not None and pack.written >= written_before:
                        young.add(cid)
        yield from sorted(ids - young)

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        doomed = set(ids)
        with self._listing:
            self._listed = None
        self.bucket.delete_many(chunk_key(cid) for cid in doomed)
        packs, _ = self._index(refresh=True)
        for name, pack in list(packs.items()):
            if not doomed.isdisjoint(pack.entries):
                self._rewrite_without(name, pack, doomed)
        self._index(refresh=True)

    def close(self) -> None:
        self.bucket.close()


_READERS = Threads("engram-remote-read", READERS)  # owned by engram.runtime: close_all stops them


def _readers() -> ThreadPoolExecutor:
    """The threads that read packs, shared by every remote of the process (started on first use)."""
    return _READERS.get()


@dataclass
class Remote:
    """A remote repository: chunks and refs in a bucket, named by its URL."""

    url: str
    chunks: BucketChunkStore
    refs: BucketRefStore

    def close(self) -> None:
        """Release the bucket's connections."""
        self.chunks.close()


def open_remote(url: str, *, retry: RetryPolicy | None = None) -> Remote:
    """Open the remote at ``url`` (``dir:///path`` or ``s3://bucket/prefix?endpoint=...``); nothing is written.
    ``retry``: how transient failures are retried (default the remotes' policy; a health probe tries once)."""
    bucket = open_bucket(url, retry=retry)
    return Remote(url, BucketChunkStore(bucket), BucketRefStore(bucket))
