"""engram as a LangGraph store: ``graph.compile(store=EngramStore(...))``.

:class:`EngramStore` is a real ``langgraph.store.base.BaseStore``: LangGraph's ops go to
:meth:`engram.Memory.batch` (one commit per batch), async calls made in one event-loop tick are
coalesced into one batch, and every write stays in engram's history (``store.memory.log()``).
Needs the ``langgraph`` extra: ``pip install 'engram[langgraph]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("engram.integrations.langgraph needs LangGraph: pip install 'engram[langgraph]'") from exc

import numpy as np
import numpy.typing as npt

from engram.embed import Embedder
from engram.embed.base import normalize_rows
from engram.store import ops as engram_ops
from engram.store.aio import Coalescer
from engram.store.connect import open as open_memory
from engram.store.item import Item as EngramItem
from engram.store.item import SearchItem as EngramSearchItem
from engram.store.memory import Memory


class LangChainEmbedder:
    """Adapts a LangChain ``Embeddings`` object or a function of texts (LangGraph's ``index.embed``)."""

    def __init__(self, embed: Any, dims: int, model_id: str | None = None) -> None:
        self._embed = embed
        self._dim = dims
        self._id = model_id or f"langchain:{type(embed).__qualname__}:{dims}"

    @property
    def model_id(self) -> str:
        """Identifies vectors made by this embedding function."""
        return self._id

    @property
    def dim(self) -> int:
        """Vector length (``index["dims"]``)."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed documents through the wrapped object or function."""
        fn = getattr(self._embed, "embed_documents", self._embed)
        rows = np.asarray(fn(list(texts)), dtype=np.float32).reshape(len(texts), self._dim)
        return np.asarray(normalize_rows(rows), dtype=np.float32)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query."""
        row: npt.NDArray[np.float32] = self.embed([text])[0]
        return row


class EngramStore(BaseStore):
    """A LangGraph ``BaseStore`` backed by a versioned engram memory.

    Args:
        memory: an open :class:`engram.Memory` (or give ``url`` to open one).
        url: a store URL for :func:`engram.open` (``None``: ``./.engram``).
        embedder: engram embedder or spec (default: the offline MiniLM) when ``index`` has no ``embed``.
        index: LangGraph's ``IndexConfig``: ``fields`` choose the searchable text; ``embed`` (a LangChain
            ``Embeddings`` or a function) with ``dims`` replaces engram's embedder.
        ttl: LangGraph's ``TTLConfig`` (minutes; refresh on read; sweep interval).
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
    ) -> None:
        if memory is None:
            chosen: Embedder | str | None = embedder
            if index is not None and index.get("embed") is not None:
                chosen = LangChainEmbedder(index["embed"], int(index.get("dims", 0)))
            fields = (index or {}).get("fields") or ["$"]
            memory = open_memory(url, embedder=chosen, index_fields=fields)
        memory.ttl_config = dict(ttl or memory.ttl_config)  # type: ignore[assignment]
        self.memory = memory
        self.ttl_config = ttl
        self.index_config = index
        self._coalescer = Coalescer(lambda ops: (self._batch_sync(ops), None))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph ops as one engram batch (one commit for the writes)."""
        return self._batch_sync(list(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async batch; concurrent calls in one event-loop tick share one engram batch."""
        return (await self._coalescer.submit(list(ops)))[0]  # type: ignore[arg-type]

    def _batch_sync(self, ops: Sequence[Any]) -> list[Result]:
        converted = [_to_engram(op) for op in ops]
        results = self.memory.batch([c for c, _ in converted])
        out: list[Result] = []
        for (_, extra), result in zip(converted, results, strict=True):
            out.append(_from_engram(result, extra))
        return out

    def sweep_ttl(self) -> int:
        """Delete expired items now (one commit); return how many."""
        return self.memory.sweep_expired()

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> Any:
        """Start a background sweeper thread (LangGraph's API)."""
        return self.memory.start_ttl_sweeper(sweep_interval_minutes)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread."""
        return self.memory.stop_ttl_sweeper(timeout)


def _to_engram(op: Op) -> tuple[engram_ops.Op, Any]:
    """Translate a LangGraph op; the second value carries what the result conversion needs."""
    if isinstance(op, GetOp):
        return engram_ops.GetOp(tuple(op.namespace), op.key, op.refresh_ttl), None
    if isinstance(op, PutOp):
        if op.index is False:
            return engram_ops.PutOp(tuple(op.namespace), op.key, op.value, False, op.ttl), None
        fields = None if op.index is None else list(op.index)
        return engram_ops.PutOp(tuple(op.namespace), op.key, op.value, fields, op.ttl), None
    if isinstance(op, SearchOp):
        converted = engram_ops.SearchOp(
            tuple(op.namespace_prefix), op.query, op.filter, op.limit, op.offset, refresh_ttl=op.refresh_ttl
        )
        return converted, None
    if isinstance(op, ListNamespacesOp):
        prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix"]
        suffixes = [c.path for c in op.match_conditions or () if c.match_type == "suffix"]
        if len(prefixes) > 1 or len(suffixes) > 1:
            raise ValueError("engram supports at most one prefix and one suffix condition per list_namespaces")
        prefix = tuple(prefixes[0]) if prefixes else None
        suffix = tuple(suffixes[0]) if suffixes else None
        return engram_ops.ListNamespacesOp(prefix, suffix, op.max_depth, op.limit, op.offset), None
    raise ValueError(f"unknown LangGraph operation: {op!r}")


def _item(item: EngramItem) -> Item:
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _from_engram(result: Any, _extra: Any) -> Result:
    if isinstance(result, EngramItem) and not isinstance(result, EngramSearchItem):
        return _item(result)
    if isinstance(result, list) and (not result or isinstance(result[0], EngramSearchItem)):
        if result and isinstance(result[0], EngramSearchItem):
            return [SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, r.score) for r in result]
        return list(result)
    return result  # type: ignore[no-any-return]


__all__ = ["EngramStore", "LangChainEmbedder"]
