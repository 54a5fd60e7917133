"""Vector search by slot: exact below ``ANN_MIN`` vectors, an HNSW graph (:mod:`engram.index.ann`) above.

Vectors not yet in the graph wait in a float32 *tail* that every query scores exactly, so a vector is
searchable the moment it is set: a bulk load is searchable at once, and a background thread moves the
tail into the graph (``backlog`` says how many wait). A vector is in the tail (float32) or in the graph
(float16, one copy: exact scoring of chosen slots, for filtered searches over few items and the best keyword
matches, reads the rows the graph itself points into).

Graph keys are a counter, mapped to slots by an array, so a saved graph survives the renumbering of
slots that a snapshot or a compaction does (only the array is rewritten).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from engram import runtime
from engram.index.ann import Graph

#: Below this many vectors every query scores every vector (exact; ~4 ms at 20k).
ANN_MIN = 20_000
#: Vectors moved from the tail into the graph per step of the background builder (each step holds the
#: index's lock: at ~2,000 inserts/s on one core this keeps a concurrent query's wait near 30 ms).
STEP = 64
#: A background build that moved this many vectors gives the freed heap back to the system when it ends.
TRIM_AFTER = 10_000
#: A filtered query scores its eligible vectors exactly (instead of asking the graph) up to this many.
GATHER_MAX = 4_000
#: How many more neighbours than wanted a filtered search asks the graph for, per eligible share: a search
#: where 1 slot in 8 is eligible asks for ``FILTER_OVERSAMPLE * 8`` times as many.
FILTER_OVERSAMPLE = 2

#: A graph of this many vectors or more is searched in a worker thread while a hybrid search scores its keywords
#: (the graph library releases the GIL): at 1M vectors each half takes ~10-15 ms on this machine.
OVERLAP_MIN = 50_000
#: Worker threads for those graph searches, per process.
OVERLAP_THREADS = 2

Rows = npt.NDArray[np.float32]
Slots = npt.NDArray[np.int64]


# Builder threads stop at interpreter exit (a thread still inside the graph library then would abort it).
_EXITING = threading.Event()
_BUILDERS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


@atexit.register
def _stop_builders() -> None:
    _EXITING.set()
    for thread in list(_BUILDERS):
        thread.join()


_SEARCHERS: dict[int, tuple[ThreadPoolExecutor, threading.BoundedSemaphore]] = {}
_SEARCHERS_LOCK = threading.Lock()
_T = TypeVar("_T")


def _stop_searchers() -> None:
    """Stop the graph-search threads (:mod:`engram.runtime`'s hook); the next search starts new ones."""
    with _SEARCHERS_LOCK:
        found = [pool for pool, _ in _SEARCHERS.values()]
        _SEARCHERS.clear()
    for pool in found:
        pool.shutdown(wait=True)


runtime.register("engram.index.vector.searchers", close=_stop_searchers, reset=_stop_searchers)


def _overlapped(work: Callable[[], _T]) -> Future[_T] | None:
    """``work`` started in an idle worker thread, or None when every worker is busy (the caller then does it
    itself: a loaded server gains nothing from queueing it). One pool per process, so a forked child starts
    its own."""
    with _SEARCHERS_LOCK:
        found = _SEARCHERS.get(os.getpid())
        if found is None:
            _SEARCHERS.clear()
            pool = ThreadPoolExecutor(OVERLAP_THREADS, thread_name_prefix="engram-graph-search")
            found = _SEARCHERS[os.getpid()] = (pool, threading.BoundedSemaphore(OVERLAP_THREADS))
    pool, idle = found
    if not idle.acquire(blocking=False):
        return None

    def run() -> _T:
        try:
            return work()
        finally:
            idle.release()

    try:
        return pool.submit(run)
    except RuntimeError:  # the interpreter is shutting down
        idle.release()
        return None


def give_back_memory() -> None:
    """Return the heap pages freed since (decoded documents, vector bytes read, a drained tail) to the
    operating system: glibc keeps them otherwise (~50-70 MB after a 100k bulk load and again after its graph
    build). Does nothing where ``malloc_trim`` is missing."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (or no C library to load by that name)
        return
    trim(0)


def cosines(rows: Rows, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row's dot product with ``query``, computed row by row the same way whatever rows come with it.

    A BLAS matrix-vector product (``rows @ query``) groups its sums by the shape of the whole matrix, so one row
    scores differently (in the last bit) alone, in a gathered subset or in the whole tail: the tie order and a
    past search's equality with a rebuilt store would then depend on the path that scored it."""
    return np.asarray(np.einsum("ij,j->i", rows, np.asarray(query, dtype=np.float32)), dtype=np.float32)


def stored(matrix: Rows) -> Rows:
    """Vectors as the index keeps them: float16 precision (what the graph stores), held as float32 rows, so a
    vector scores the same in the tail, in the graph and in an overlay."""
    return np.asarray(matrix, dtype=np.float32).astype(np.float16).astype(np.float32)


#: Every float16 value as float32, by its bits: a lookup widens rows ~30 % faster than ``astype`` (numpy converts
#: float16 one element at a time), to the same values.
_WIDE = np.arange(65_536, dtype=np.uint16).view(np.float16).astype(np.float32)


def widened(rows: npt.NDArray[np.float16]) -> Rows:
    """float16 rows as float32 (exactly ``rows.astype(np.float32)``)."""
    return _WIDE[np.ascontiguousarray(rows).view(np.uint16)]


def _lookup(table: npt.NDArray[np.int64], slots: Slots) -> Slots:
    """``table[slot]`` for each slot, -1 past the table's end."""
    out = np.full(len(slots), -1, dtype=np.int64)
    inside = slots < len(table)
    out[inside] = table[slots[inside]]
    return out


def _grown(array: npt.NDArray[Any], size: int, fill: object = 0) -> npt.NDArray[Any]:
    if size <= len(array):
        return array
    out = np.full((max(size, 2 * len(array)), *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


class _PoliteLock:
    """A re-entrant lock the background graph builder takes only when no other thread is waiting for it.

    The builder takes the lock for every step of a few dozen inserts; a plain lock released and taken back at
    once by the same thread starves its waiters (CPython's locks are not fair), so a bulk load's
    ``set_many`` or a snapshot's save could wait seconds behind a graph build it does not need."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting = 0
        self._count = threading.Lock()

    def __enter__(self) -> _PoliteLock:
        with self._count:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._count:
                self._waiting -= 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def step_aside(self, limit: float = 1.0) -> None:
        """Wait (up to ``limit`` seconds) while other threads wait for the lock: called between builder steps."""
        deadline = time.monotonic() + limit
        while self._waiting and time.monotonic() < deadline:
            time.sleep(0.0005)


class VectorIndex:
    """Unit vectors by slot; a slot without one (or with a zero vector) scores 0. Cosine = dot product."""

    def __init__(
        self,
        dim: int,
        *,
        ann_min: int | None = None,
        background: bool = True,
        gather_max: int = GATHER_MAX,
        overlap_min: int = OVERLAP_MIN,
    ) -> None:
        self.dim = dim
        self.ann_min = ANN_MIN if ann_min is None else ann_min
        #: Eligible vectors up to which a filtered or scoped search scores them exactly instead of asking the graph.
        self.gather_max = gather_max
        #: Vectors from which on a graph is searched in a worker thread while the keywords are scored.
        self.overlap_min = overlap_min
        #: Move the tail into the graph in a background thread (else at the next query).
        self.background = background
        self.present = np.zeros(1024, dtype=bool)
        self.count = 0
        self._key = np.full(1024, -1, dtype=np.int64)  # slot -> graph key, -1 when not in the graph
        self._slot_of_key = np.zeros(1024, dtype=np.int64)  # graph key -> slot, -1 when dropped
        self._nkeys = 0  # graph keys used: 0 .. _nkeys - 1
        self._loaded: npt.NDArray[np.float16] | None = None  # vectors of a saved graph's keys, read on first use
        self._graph: Graph | None = None
        self._tail_at = np.full(1024, -1, dtype=np.int64)  # slot -> row of the tail, -1 when not in it
        self._tail_live = 0
        self._tail_slots = np.zeros(1024, dtype=np.int64)  # -1 for a dropped row
        self._tail_rows = np.zeros((1024, dim), dtype=np.float32)
        self._tail_n = 0
        self._builder: threading.Thread | None = None
        #: Graph changes (vectors moved in, vectors dropped) since the graph was last saved.
        self.unsaved = 0
        self.lock = _PoliteLock()

    def set(self, slot: int, vector: npt.NDArray[np.float32]) -> None:
        """Store the vector of a slot."""
        self.set_many(np.array([slot], dtype=np.int64), np.asarray(vector, dtype=np.float32).reshape(1, -1))

    def set_many(self, slots: Slots, matrix: Rows) -> None:
        """Store the vectors of many slots (rows of ``matrix``) at once."""
        if not len(slots):
            return
        with self.lock:
            known = slots[slots < len(self.present)]
            for slot in known[self.present[known]].tolist():
                self.clear(slot)
            top = int(slots.max()) + 1
            self.present = _grown(self.present, top, False)
            self._key = _grown(self._key, top, -1)
            n = self._tail_n
            self._tail_slots = _grown(self._tail_slots, n + len(slots), -1)
            self._tail_rows = _grown(self._tail_rows, n + len(slots))
            self._tail_slots[n : n + len(slots)] = slots
            self._tail_rows[n : n + len(slots)] = stored(matrix)
            self._tail_at = _grown(self._tail_at, top, -1)
            self._tail_at[slots] = np.arange(n, n + len(slots))
            self._tail_live += len(slots)
            self._tail_n = n + len(slots)
            self.present[slots] = True
            self.count += len(slots)
            if self.count >= self.ann_min:
                self._build_soon()

    def reserve(self, count: int) -> None:
        """Make room in the tail for ``count`` more vectors at once (a bulk load: growing by doubling would
        leave up to twice the memory the vectors need)."""
        with self.lock:
            need = self._tail_n + count
            if need > len(self._tail_rows):
                rows = np.zeros((need, self.dim), dtype=np.float32)
                rows[: self._tail_n] = self._tail_rows[: self._tail_n]
                slots = np.full(need, -1, dtype=np.int64)
                slots[: self._tail_n] = self._tail_slots[: self._tail_n]
                self._tail_rows, self._tail_slots = rows, slots

    def clear(self, slot: int) -> None:
        """Forget the vector of a slot."""
        with self.lock:
            if slot >= len(self.present) or not self.present[slot]:
                return
            self.present[slot] = False
            self.count -= 1
            row = int(self._tail_at[slot]) if slot < len(self._tail_at) else -1
            if row >= 0:
                self._tail_at[slot] = -1
                self._tail_live -= 1
                self._tail_slots[row] = -1
                return
            key = int(self._key[slot])
            if key >= 0 and self._graph is not None:
                self._slot_of_key[key] = -1
                self.unsaved += 1
                self._graph.remove(np.array([key], dtype=np.int64))
            self._key[slot] = -1

    def present_below(self, size: int) -> npt.NDArray[np.bool_]:
        """Which slots below ``size`` have a vector."""
        out = np.zeros(size, dtype=bool)
        upto = min(size, len(self.present))
        out[:upto] = self.present[:upto]
        return out

    def get(self, slot: int) -> npt.NDArray[np.float32] | None:
        """The vector at a slot, if any."""
        found = self.rows(np.array([slot], dtype=np.int64))
        return found[0] if slot < len(self.present) and self.present[slot] else None

    def rows(self, slots: Slots) -> Rows:
        """The vectors of ``slots`` as float32 rows (zero rows for slots without one)."""
        with self.lock:  # positions as index arrays, rows converted before they are placed (masked copies are slow)
            out = np.zeros((len(slots), self.dim), dtype=np.float32)
            tail, keys = _lookup(self._tail_at, slots), _lookup(self._key, slots)
            in_tail = np.flatnonzero(tail >= 0)
            if len(in_tail):
                out[in_tail] = self._tail_rows[tail[in_tail]]
                keys[in_tail] = -1
            graph = self._graph
            if graph is not None:
                new = np.flatnonzero(keys >= graph.first)
                old = np.flatnonzero((keys >= 0) & (keys < graph.first))
                if len(new):
                    out[new] = widened(graph.stored(keys[new]))
                if len(old):
                    if self._loaded is None:  # a saved graph's vectors: copied out on the first exact read
                        self._loaded = graph.all_vectors(graph.first)
                    out[old] = widened(self._loaded[keys[old]])
            return out

    @property
    def approximate(self) -> bool:
        """True when some vectors are only reachable through the graph (queries are approximate)."""
        return self._graph is not None and len(self._graph) > 0

    @property
    def backlog(self) -> int:
        """Vectors waiting to move into the graph (scored exactly meanwhile); 0 below ``ann_min``."""
        return self._tail_live if self.count >= self.ann_min or self._graph is not None else 0

    def _build_soon(self) -> None:
        if not self.background or _EXITING.is_set():
            return
        if self._builder is None or not self._builder.is_alive():
            self._builder = threading.Thread(target=self._build_until_exit, name="engram-vector-graph", daemon=True)
            _BUILDERS.add(self._builder)
            self._builder.start()

    def _build_until_exit(self) -> None:
        moved = 0
        while not _EXITING.is_set():
            self.lock.step_aside()
            if not (step := self.build(STEP)):
                break
            moved += step
        if moved >= TRIM_AFTER:
            give_back_memory()

    def build(self, limit: int | None = None, *, threads: int = 1) -> int:
        """Move (up to ``limit``) tail vectors into the graph, a step at a time, inserting with ``threads``
        threads; return how many moved."""
        moved = 0
        while limit is None or moved < limit:
            # with several threads the steps are bigger: a bulk build, where no query waits
            size = STEP if threads == 1 else 4_096
            with self.lock:
                step = self._step(size if limit is None else min(size, limit - moved), threads)
            if not step:
                break
            moved += step
        return moved

    def _step(self, size: int, threads: int = 1) -> int:
        if self.count < self.ann_min and self._graph is None:
            return 0
        if self._graph is None:
            self._graph = Graph(self.dim)
        if self._graph.view_of is not None:  # a saved graph, memory-mapped: copy it in, drop what was cleared
            self._graph.writable()
            self._graph.remove(np.flatnonzero(self._slot_of_key[: self._nkeys] < 0))
        n = self._tail_n
        lo = max(0, n - size)
        slots, rows = self._tail_slots[lo:n], self._tail_rows[lo:n]
        live = slots >= 0
        slots, rows = slots[live], rows[live]
        nonzero = np.any(rows != 0, axis=1)  # a zero vector scores 0 anyway: never put it in the graph
        keys = np.arange(self._nkeys, self._nkeys + int(nonzero.sum()), dtype=np.int64)
        self._slot_of_key = _grown(self._slot_of_key, self._nkeys + len(keys), -1)
        self._slot_of_key[keys] = slots[nonzero]
        self._nkeys += len(keys)
        if len(keys):
            self._graph.add(keys, rows[nonzero], threads)
        self._key[slots[nonzero]] = keys
        self._tail_at[slots] = -1
        self._tail_live -= len(slots)
        self._tail_n = lo
        self.unsaved += n - lo
        if len(self._tail_slots) > 1024 and lo < len(self._tail_slots) // 4:  # give back a drained tail's memory
            keep = max(1024, 2 * lo)
            self._tail_slots, self._tail_rows = self._tail_slots[:keep].copy(), self._tail_rows[:keep].copy()
        return n - lo

    def wait(self) -> None:
        """Block until the background builder has emptied the tail (tests, benchmarks)."""
        self.build()
        builder = self._builder
        if builder is not None:
            builder.join()

    def scores(self, query: npt.NDArray[np.float32], size: int, *, want: int = 100) -> npt.NDArray[np.float32]:
        """Cosine to ``query`` for every slot below ``size``: exact for the tail, and for the ``want``
        nearest the graph finds (0 for the rest)."""
        return self.search(query, size, None, want)[0]

    def search(
        self,
        query: npt.NDArray[np.float32],
        size: int,
        eligible: npt.NDArray[np.bool_] | None,
        want: int,
        extra: Slots | None = None,
    ) -> tuple[npt.NDArray[np.float32], bool]:
        """Cosine to ``query`` for slots below ``size``, and whether it is exact for every ``eligible`` slot.

        Exact for the tail, for ``extra`` slots (e.g. the best keyword matches) and, when few slots are
        eligible, for all of them; otherwise for about the ``want`` nearest eligible slots the graph finds.
        """
        return self.start(query, size, eligible, want)(extra)

    def start(
        self,
        query: npt.NDArray[np.float32],
        size: int,
        eligible: npt.NDArray[np.bool_] | None,
        want: int,
        *,
        overlap: bool = False,
    ) -> Callable[[Slots | None], tuple[npt.NDArray[np.float32], bool]]:
        """:meth:`search` in two halves: this call starts it and the function it returns finishes it with the
        ``extra`` slots. With ``overlap``, a graph of ``overlap_min`` vectors or more is searched in a worker
        thread (when one is idle) while the caller goes on, e.g. to score the query's keywords."""
        query = np.asarray(query, dtype=np.float32)
        nearest = functools.partial(self._nearest, query, size, eligible, want)
        graph = self._graph
        pending = _overlapped(nearest) if overlap and graph is not None and len(graph) >= self.overlap_min else None
        if pending is None:
            pending = Future()
            pending.set_result(nearest())

        def finish(extra: Slots | None) -> tuple[npt.NDArray[np.float32], bool]:
            out, complete, in_graph = pending.result()
            if in_graph is not None and extra is not None and len(extra):
                picked = extra[in_graph[np.minimum(extra, size - 1)]]
                out[picked] = cosines(self.rows(picked), query)
            return out, complete

        return finish

    def _nearest(
        self, query: npt.NDArray[np.float32], size: int, eligible: npt.NDArray[np.bool_] | None, want: int
    ) -> tuple[npt.NDArray[np.float32], bool, npt.NDArray[np.bool_] | None]:
        """The tail's cosines and the graph's nearest (or every eligible slot's, when exact is cheaper), whether
        that is exact for every eligible slot, and which slots the graph holds (None when it was not asked)."""
        out = np.zeros(size, dtype=np.float32)
        with self.lock:
            if not self.background and self.count >= self.ann_min:
                self.build()
            n = self._tail_n
            if n:
                slots = self._tail_slots[:n]
                keep = (slots >= 0) & (slots < size)
                # score every tail row in place and drop the unwanted scores: selecting the rows first would copy
                # them all (1.5 GB per query with a million vectors in the tail, during a bulk load's graph build)
                out[slots[keep]] = cosines(self._tail_rows[:n], query)[keep]
            graph = self._graph
            if graph is None or not len(graph):
                return out, True, None
            upto = min(size, len(self._key))
            in_graph = np.zeros(size, dtype=bool)
            in_graph[:upto] = self._key[:upto] >= 0
            wanted = in_graph if eligible is None else in_graph & eligible[:size]
            total = int(np.count_nonzero(wanted))
            if total <= self.gather_max:  # few eligible in the graph (none: a new tenant's first items): exact
                count = total
            else:
                share = total / max(1, int(np.count_nonzero(in_graph)))
                count = min(len(graph), int(FILTER_OVERSAMPLE * want / share) if share < 1 else want)
            if total <= self.gather_max or 4 * count >= total:  # few eligible, or most of them wanted: exact
                chosen = np.flatnonzero(wanted)
                for lo in range(0, len(chosen), 65_536):
                    part = chosen[lo : lo + 65_536]
                    out[part] = cosines(self.rows(part), query)
                return out, True, None
            keys, _ = graph.search(query, count, deep=share < 1)
            found = self._slot_of_key[keys]
            found = found[(found >= 0) & (found < size)]
            # the graph chooses the nearest; their cosines are computed as every other path computes them
            out[found] = cosines(self.rows(found), query)
            return out, count >= len(graph), in_graph

    def save_graph(self, path: Path, new_slot: Slots) -> Slots | None:
        """Write the graph to ``path`` and return the slots of its keys renumbered by ``new_slot`` (-1 for
        dropped keys); None without a graph. Vectors still in the tail are not saved."""
        with self.lock:
            if self._graph is None:
                return None
            self._graph.save(path)
            self.unsaved = 0
            keys = self._slot_of_key[: self._nkeys]
            return np.where(keys >= 0, new_slot[np.maximum(keys, 0)], -1).astype(np.int64)

    def load_graph(self, graph: Graph, slot_of_key: Slots) -> None:
        """Adopt a saved graph whose keys map to slots by ``slot_of_key`` (before any vector is set)."""
        with self.lock:
            self._graph = graph
            self._slot_of_key = np.array(slot_of_key, dtype=np.int64)
            self._nkeys = len(self._slot_of_key)
            self._loaded = None
            live = self._slot_of_key >= 0
            top = int(self._slot_of_key.max()) + 1 if len(self._slot_of_key) else 0
            self.present = _grown(self.present, top, False)
            self._key = _grown(self._key, top, -1)
            self._tail_at = _grown(self._tail_at, top, -1)
            self._key[self._slot_of_key[live]] = np.flatnonzero(live)
            self.present[self._slot_of_key[live]] = True
            self.count = int(live.sum())

    def renumber(self, new_slot: Slots) -> None:
        """Move every vector to slot ``new_slot[old]`` (dropping those mapped to -1), keeping the graph."""
        with self.lock:
            keys, graph, loaded = self._slot_of_key[: self._nkeys], self._graph, self._loaded
            tail = np.flatnonzero(self._tail_at >= 0)
            rows = self._tail_rows[self._tail_at[tail]]
            lock = self.lock
            self.__init__(  # type: ignore[misc]
                self.dim,
                ann_min=self.ann_min,
                background=self.background,
                gather_max=self.gather_max,
                overlap_min=self.overlap_min,
            )
            self.lock = lock  # held by this thread now, and waited for by others: the same lock goes on
            if graph is not None:
                mapped = np.where(keys >= 0, new_slot[np.maximum(keys, 0)], -1)
                self.load_graph(graph, mapped)
                self._loaded = loaded
            moved = new_slot[tail]
            keep = moved >= 0
            self.set_many(moved[keep], rows[keep])
