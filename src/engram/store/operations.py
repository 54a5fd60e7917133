"""Operations of the memory API's one seam, :meth:`Memory.batch` (LangGraph's op records)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from engram.embed.rerank import Reranker
from engram.index.corpus import CorpusStats
from engram.store.ranking import Profile

Mode = Literal["hybrid", "semantic", "keyword"]
#: A search's ``when``: ``"auto"``, ``"off"``, a time expression, or a ``(start, end)`` range (engram.store.timerank).
When = str | tuple[datetime | None, datetime | None] | None


class _NotProvided:
    """Marks an argument left out (``ttl`` not given means the store's default TTL)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOT_PROVIDED"


NOT_PROVIDED: Any = _NotProvided()


class TTLConfig(TypedDict, total=False):
    """TTL settings, as in LangGraph: minutes; ``refresh_on_read`` defaults to True."""

    refresh_on_read: bool
    default_ttl: float | None
    sweep_interval_minutes: int | None


@dataclass(frozen=True, slots=True)
class GetOp:
    """Read one item."""

    namespace: tuple[str, ...]
    key: str
    refresh_ttl: bool | None = None


@dataclass(frozen=True, slots=True)
class PutOp:
    """Write (``value`` is a dict) or delete (``value`` is None) one item.

    ``index``: None = the store's fields, False = not searchable, or a list of field paths.
    ``ttl``: minutes until expiry; None = never; NOT_PROVIDED = the store's default.
    """

    namespace: tuple[str, ...]
    key: str
    value: Mapping[str, Any] | None
    index: Literal[False] | Sequence[str] | None = None
    ttl: float | None = NOT_PROVIDED
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchOp:
    """Search or list items under a namespace prefix (``stats``: keyword statistics to score with instead of
    the store's own, for a search fanned out over several repositories; see :mod:`engram.index.corpus`)."""

    namespace_prefix: tuple[str, ...]
    query: str | None = None
    filter: Mapping[str, Any] | None = None
    limit: int = 10
    offset: int = 0
    mode: Mode | None = None
    profile: str | Profile = "similarity"
    explain: bool = False
    min_score: float | None = None
    refresh_ttl: bool | None = None
    stats: CorpusStats | None = None
    #: Leave out the system namespaces (first label starting with ``_``): a root search by a caller without
    #: the ``system`` scope (see :mod:`engram.store.system`).
    hide_system: bool = False
    #: A second stage: a reranker (or its spec, ``onnx:<dir>``) rescoring the first stage's top candidates
    #: (:mod:`engram.store.rerank`).
    rerank: Reranker | str | None = None
    #: Questions about time (:mod:`engram.store.timerank`): ``"auto"`` parses the query's time expressions,
    #: a string is an expression to use instead, ``(start, end)`` datetimes a range; None or ``"off"``: none.
    when: When = None
    #: The question's own date, which relative expressions ("last Tuesday") count from (None: now).
    reference_time: datetime | str | int | None = None


@dataclass(frozen=True, slots=True)
class ListNamespacesOp:
    """List namespaces holding items."""

    prefix: tuple[str, ...] | None = None
    suffix: tuple[str, ...] | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


Op = GetOp | PutOp | SearchOp | ListNamespacesOp
