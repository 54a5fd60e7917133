"""engram as a LangGraph store: ``graph.compile(store=EngramStore(...))``.

:class:`EngramStore` is a real ``langgraph.store.base.BaseStore`` that behaves like LangGraph's own
stores (their test suites run against it: docs/langgraph.md): searches rank every item in scope by
vector similarity per field, expired items stay readable until swept unless ``omit_expired``, a read
refreshes a TTL exactly. Writes (and TTL refreshes) of one batch are one commit in engram's history
(``store.memory.log()``); async calls made in one event-loop tick are coalesced into one batch.
Needs the ``langgraph`` extra: ``pip install 'engram[langgraph]'``.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

try:
    from langgraph.store.base import (
        NOT_PROVIDED as LANGGRAPH_NOT_PROVIDED,
    )
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        validate_op_namespace,
    )
    from langgraph.store.base.embed import ensure_embeddings
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("engram.integrations.langgraph needs LangGraph: pip install 'engram[langgraph]'") from exc

import numpy as np
import numpy.typing as npt

from engram import errors
from engram.backends.base import now_ms
from engram.embed import Embedder, embedder_from_spec
from engram.embed.base import normalize_rows
from engram.index.cache import MemoryVectorCache
from engram.integrations._langgraph_reads import Entry, Reads, without_nul
from engram.integrations._langgraph_search import DISTANCE_TYPES, DistanceType, FieldVectors, rank
from engram.objects import Commit
from engram.store import operations as engram_ops
from engram.store.aio import Coalescer, check_put
from engram.store.connect import open as open_memory
from engram.store.filters import compile_filter
from engram.store.indexing import IndexPool
from engram.store.memory import Memory

T = TypeVar("T")
SearchMode = Literal["langgraph", "hybrid"]


class LangChainEmbedder:
    """Adapts LangGraph's ``index["embed"]`` (a LangChain ``Embeddings``, a function of texts, or a provider
    string) to engram's embedder seam.

    ``normalize=False`` keeps the model's vectors as they are (LangGraph's ``inner_product`` and ``l2``
    distances see their length); engram's own indexes need unit vectors (the default). The two kinds are
    cached under different model ids.
    """

    def __init__(self, embed: Any, dims: int, model_id: str | None = None, *, normalize: bool = True) -> None:
        self._embeddings = ensure_embeddings(embed)
        self._dim = int(dims)
        self._normalize = normalize
        self._id = (model_id or _model_id(embed, self._dim)) + ("" if normalize else ":raw")

    @property
    def model_id(self) -> str:
        """Identifies vectors made by this embedding model."""
        return self._id

    @property
    def dim(self) -> int:
        """Vector length (``index["dims"]``)."""
        return self._dim

    def _rows(self, rows: Any, count: int) -> npt.NDArray[np.float32]:
        array = np.asarray(rows, dtype=np.float32)
        if array.shape != (count, self._dim):
            raise errors.EmbedderError(
                f"the embeddings returned an array of shape {array.shape} for {count} text(s), "
                f"but the index config says dims={self._dim}"
            )
        return np.asarray(normalize_rows(array), dtype=np.float32) if self._normalize else array

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed documents (``embed_documents``)."""
        texts = list(texts)
        return self._rows(self._embeddings.embed_documents(texts) if texts else [], len(texts))

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query (``embed_query``, which some models treat differently from documents)."""
        row: npt.NDArray[np.float32] = self._rows([self._embeddings.embed_query(text)], 1)[0]
        return row


def _model_id(embed: Any, dims: int) -> str:
    """A cache id for vectors of ``embed``: its provider string, or its class or function name and, when it
    has one, its ``model``/``model_name`` (two models of one class must never share cached vectors)."""
    if isinstance(embed, str):
        return f"langchain:{embed}:{dims}"
    name = getattr(embed, "__qualname__", None) or type(embed).__qualname__
    model = getattr(embed, "model", None) or getattr(embed, "model_name", None)
    return f"langchain:{name}{f':{model}' if isinstance(model, str) else ''}:{dims}"


async def _now(value: T) -> T:
    return value


class Done(Generic[T]):
    """The result of a call that has already run, usable as it is or awaited.

    LangGraph's sync stores make ``start_ttl_sweeper`` and ``stop_ttl_sweeper`` plain calls and its async
    stores coroutines; one EngramStore serves both kinds of callers, so it does the work at once and
    returns this (``bool()`` and ``==`` see the value; ``await`` gives it).
    """

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, T]:
        return _now(self.value).__await__()

    def __bool__(self) -> bool:
        return bool(self.value)

    def __eq__(self, other: object) -> bool:
        return bool(self.value == (other.value if isinstance(other, Done) else other))

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Done({self.value!r})"


class Swept(int):
    """How many expired items :meth:`EngramStore.sweep_ttl` deleted; ``await`` gives the same number (as
    LangGraph's async stores' coroutine ``sweep_ttl`` does)."""

    def __await__(self) -> Generator[Any, None, int]:
        return _now(int(self)).__await__()


class EngramStore(BaseStore):
    """A LangGraph ``BaseStore`` backed by a versioned engram memory.

    Args:
        memory: an open :class:`engram.Memory`; the store works on a handle of it (``store.memory``), on the
            same branch, with its embedder and index fields unless ``index`` names others. Or give ``url``.
        url: a store URL for :func:`engram.open` (``None``: ``./.engram``).
        embedder: engram embedder or spec for query search when ``index`` has no ``embed`` (with ``memory=``,
            that memory's own embedder comes first); ``None``: no vectors (a query lists, as LangGraph's stores
            do without an index).
        index: LangGraph's ``IndexConfig``: ``fields`` (or SqliteStore's ``text_fields``) choose the texts that
            get a vector each; ``embed`` (a LangChain ``Embeddings``, a function or a provider string) with
            ``dims`` replaces engram's embedder; ``distance_type`` is ``cosine`` (default), ``inner_product``
            or ``l2``, scored as PostgresStore scores them.
        ttl: LangGraph's ``TTLConfig`` (minutes): ``default_ttl``, ``refresh_on_read`` (default True),
            ``sweep_interval_minutes``, ``omit_expired`` (default False: expired items are read until swept).
            Read live from ``store.ttl_config``, so changing it takes effect at once.
        search: ``"langgraph"`` (default): LangGraph's ranking, every item in scope by cosine (or the
            configured distance) per field; ``"hybrid"``: engram's BM25 + vector ranking (profiles, an index
            that scales), which never returns expired items.
    """

    supports_ttl = True

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        url: str | None = None,
        embedder: Embedder | str | None = "minilm",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        search: SearchMode = "langgraph",
    ) -> None:
        if search not in ("langgraph", "hybrid"):
            raise errors.ConfigError(f"search is 'langgraph' or 'hybrid', got {search!r}")
        config: dict[str, Any] = dict(index or {})
        given = config.get("fields") or config.get("text_fields")
        fields = given or (list(memory.pool.fields) if memory is not None else ["$"])
        #: The field paths whose texts get a vector each (an item's own ``index=[...]`` list comes first).
        self.fields: list[str] = [fields] if isinstance(fields, str) else list(fields)
        distance = config.get("distance_type") or "cosine"
        if distance not in DISTANCE_TYPES:
            raise errors.ConfigError(f"distance_type is one of {', '.join(DISTANCE_TYPES)}, got {distance!r}")
        self.distance_type: DistanceType = distance
        self.search_mode: SearchMode = search
        self.index_config = index
        self.ttl_config = ttl
        lc_embed, dims = config.get("embed"), int(config.get("dims", 0))
        native = LangChainEmbedder(lc_embed, dims) if lc_embed is not None else None
        if memory is None:
            chosen = (native or embedder) if search == "hybrid" else None  # LangGraph-mode vectors are ours
            memory = open_memory(url, embedder=chosen, index_fields=self.fields)
            handle = memory
        elif search == "hybrid" and (native is not None or tuple(self.fields) != tuple(memory.pool.fields)):
            pool = IndexPool(
                memory.repo, embedder=native or memory.pool.embedder, fields=self.fields, cache=memory.pool.cache,
                snapshots=memory.pool.snapshots,
            )  # fmt: skip
            handle = Memory(memory.repo, branch=memory.branch, author=memory.author, pool=pool,
                            read_only=memory.read_only)  # fmt: skip
        else:
            handle = memory.handle()
        handle.refresh_share = 0.0  # LangGraph refreshes a TTL on every read that asks
        handle.ttl_config = dict(ttl or {})  # type: ignore[assignment]
        #: The engram handle this store reads and writes (its history: ``store.memory.log()``).
        self.memory = handle
        raw = LangChainEmbedder(lc_embed, dims, normalize=False) if lc_embed is not None else None
        self._embedder: Embedder | str | None = raw or handle.pool.embedder or embedder
        self._vectors: FieldVectors | None = None
        self._vectors_lock = threading.Lock()
        self._coalescer = Coalescer(self._execute, _written)  # type: ignore[arg-type]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph ops as one batch: reads see the state before it; its writes (and the TTL refreshes its
        reads cause) are one commit."""
        return self._execute(self._checked(ops))[0]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async batch; concurrent calls in one event-loop tick share one engram batch, or consecutive ones when
        two calls write the same item, so each write is a version (a call with a bad op fails alone: ops are
        checked before they join it)."""
        checked = self._checked(ops)
        return (await self._coalescer.submit(checked))[0]  # type: ignore[arg-type]

    def _checked(self, ops: Iterable[Op]) -> list[Op]:
        """LangGraph's label checks (raising its ``InvalidNamespaceError``), then engram's checks of writes, so a
        bad op rejects its whole batch before anything runs."""
        checked: list[Op] = []
        for op in ops:
            if isinstance(op, ListNamespacesOp):
                conditions = tuple(
                    MatchCondition(c.match_type, (c.path,) if isinstance(c.path, str) else tuple(c.path))
                    for c in op.match_conditions or ()
                )
                op = op._replace(match_conditions=conditions)
            elif not isinstance(op, GetOp | SearchOp | PutOp):
                raise ValueError(f"unknown LangGraph operation: {op!r}")
            validate_op_namespace(op)
            with _langgraph_namespace_errors():
                if isinstance(op, PutOp):
                    check_put(self._put(op))
                elif isinstance(op, SearchOp):
                    _encodable(op.namespace_prefix)
                    compile_filter(without_nul(op.filter))
                elif isinstance(op, GetOp):
                    _encodable(op.namespace)
            checked.append(op)
        return checked

    def _execute(self, ops: Sequence[Op]) -> tuple[list[Result], Commit | None]:
        """Run checked ops: reads at the head's root, then one engram batch for writes and TTL refreshes."""
        with _langgraph_namespace_errors():
            return self._run(ops)

    def _run(self, ops: Sequence[Op]) -> tuple[list[Result], Commit | None]:
        memory = self.memory
        now = now_ms()
        reads = Reads(memory.repo.nodes, memory.head.tree, now, omit_expired=self._omit_expired())
        results: list[Result] = [None] * len(ops)
        writes: dict[tuple[tuple[str, ...], str], engram_ops.PutOp] = {}
        refresh: dict[tuple[tuple[str, ...], str], None] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                put = self._put(op)
                writes[(put.namespace, put.key)] = put
            elif isinstance(op, GetOp):
                entry = reads.get(op.namespace, str(op.key))
                if entry is not None:
                    results[i] = _item(entry)
                    if op.refresh_ttl:
                        _mark(refresh, entry, now)
            elif isinstance(op, SearchOp):
                results[i], found = self._search(reads, op)
                if op.refresh_ttl:
                    for entry in found:
                        _mark(refresh, entry, now)
            else:
                conditions = [(c.match_type, tuple(c.path)) for c in op.match_conditions or ()]
                results[i] = reads.list_namespaces(conditions, op.max_depth, op.limit, op.offset)
        batch: list[engram_ops.Op] = list(writes.values())
        batch += [engram_ops.GetOp(ns, key, True) for ns, key in refresh if (ns, key) not in writes]
        return results, memory.execute(batch)[1] if batch else None

    def _put(self, op: PutOp) -> engram_ops.PutOp:
        ttl: Any = op.ttl
        if ttl is LANGGRAPH_NOT_PROVIDED:  # a PutOp built by hand with LangGraph's marker: the default TTL
            ttl = (self.ttl_config or {}).get("default_ttl")
        index: Literal[False] | list[str] | None = None if op.index is None else op.index and list(op.index)
        return engram_ops.PutOp(tuple(op.namespace), str(op.key), op.value, index, ttl)

    def _omit_expired(self) -> bool:
        return bool((self.ttl_config or {}).get("omit_expired"))

    def _search(self, reads: Reads, op: SearchOp) -> tuple[list[SearchItem], list[Entry]]:
        """A listing (no query, or an empty one), LangGraph's ranking, or engram's hybrid ranking; returns the
        page and the entries on it (whose TTLs the search may refresh)."""
        if op.query and self.search_mode == "hybrid":
            return self._hybrid(reads, op)
        entries = reads.scope(op.namespace_prefix, op.filter)
        vectors = self._field_vectors() if op.query else None
        if vectors is None:
            ranked: list[tuple[Entry, float | None]] = [(entry, None) for entry in entries]
        else:
            ranked = rank(entries, self.fields, vectors, str(op.query), self.distance_type)
        page = ranked[op.offset : op.offset + op.limit]
        return [_search_item(entry, score) for entry, score in page], [entry for entry, _ in page]

    def _hybrid(self, reads: Reads, op: SearchOp) -> tuple[list[SearchItem], list[Entry]]:
        found = self.memory.search(
            op.namespace_prefix, op.query, filter=without_nul(op.filter), limit=op.limit, offset=op.offset,
            refresh_ttl=False,
        )  # fmt: skip
        items = [SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, r.score) for r in found]
        entries = [entry for r in found if (entry := reads.get(r.namespace, r.key)) is not None]
        return items, entries

    def _field_vectors(self) -> FieldVectors | None:
        """The in-process vectors of field texts (built on the first query), or None without an embedder."""
        with self._vectors_lock:
            if self._vectors is None and self._embedder is not None:
                embedder = embedder_from_spec(self._embedder) if isinstance(self._embedder, str) else self._embedder
                cache = self.memory.pool.cache or MemoryVectorCache()
                self._vectors = FieldVectors(embedder, cache)
            return self._vectors

    def sweep_ttl(self) -> Swept:
        """Delete expired items now (one commit); return how many (an int that can also be awaited)."""
        return Swept(self.memory.sweep_expired())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Done[threading.Event]:
        """Start the background sweeper thread (every ``sweep_interval_minutes``, else the TTL config's, else 5);
        returns at once with its stop event (awaitable too, like LangGraph's async stores' coroutine)."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        return Done(self.memory.start_ttl_sweeper(minutes))

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Done[bool]:
        """Stop the sweeper thread (at once); true when it is not running any more (awaitable too)."""
        return Done(self.memory.stop_ttl_sweeper(timeout))


@contextmanager
def _langgraph_namespace_errors() -> Iterator[None]:
    """Translate engram's ``InvalidNamespaceError`` into LangGraph's at the adapter boundary."""
    try:
        yield
    except errors.InvalidNamespaceError as exc:
        raise InvalidNamespaceError(str(exc)) from exc


def _written(op: object) -> tuple[tuple[str, ...], str] | None:
    """The item a LangGraph put writes (None for reads): the coalescer commits two writes of one item apart."""
    return (tuple(op.namespace), str(op.key)) if isinstance(op, PutOp) else None


def _encodable(namespace: Sequence[str]) -> None:
    for label in namespace:
        try:
            label.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidNamespaceError(f"namespace labels must be valid Unicode text: {label!r}") from exc


def _mark(refresh: dict[tuple[tuple[str, ...], str], None], entry: Entry, now: int) -> None:
    """Queue a TTL refresh for a live item that has a TTL (an expired one stays expired until swept)."""
    if entry.record.extra.get("ttl") is not None and not entry.expired(now):
        refresh[(entry.namespace, entry.key)] = None


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _item(entry: Entry) -> Item:
    record = entry.record
    return Item(
        value=record.value,
        key=entry.key,
        namespace=entry.namespace,
        created_at=_dt(record.created_at),
        updated_at=_dt(record.updated_at),
    )


def _search_item(entry: Entry, score: float | None) -> SearchItem:
    record = entry.record
    return SearchItem(entry.namespace, entry.key, record.value, _dt(record.created_at), _dt(record.updated_at), score)


__all__ = ["Done", "EngramStore", "LangChainEmbedder", "Swept"]
