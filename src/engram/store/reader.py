"""Reads over one tree root, shared by the live handle and by read-only views of the past."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from engram import codec
from engram.backends.base import now_ms
from engram.embed.rerank import Reranker
from engram.embed.tokens import TokenCounter
from engram.errors import InvalidInputError
from engram.hashing import ChunkId
from engram.index.corpus import CorpusStats
from engram.objects import Record, decode_record
from engram.repo import Repository
from engram.store import _validate, context, rerank, timerank
from engram.store import system as sysns
from engram.store.indexing import IndexPool
from engram.store.item import Item, SearchResults
from engram.store.operations import Mode, SearchOp, When
from engram.store.querycache import for_pool
from engram.store.ranking import Profile
from engram.tree import count, get, iter_entries


class Reader:
    """Read methods over the tree of a version; subclasses say which root is current."""

    repo: Repository
    #: False for a caller without the ``system`` scope: system namespaces (first label ``_...``) read as absent
    #: from listings and searches, and naming one is refused (:mod:`engram.store.system`).
    system: bool = True

    def _guard(self, namespace: Sequence[str], action: str = "read") -> None:
        if not self.system:
            sysns.check(namespace, action)

    def _root(self) -> ChunkId:
        raise NotImplementedError

    def _searched(self) -> tuple[IndexPool, str, bool]:
        """Where this reader's searches run: its store's index pool (its engine and query cache), the branch whose
        index they use, and whether the root is a past version (not the branch's head)."""
        raise NotImplementedError

    def search(
        self,
        namespace_prefix: Sequence[str] = (),
        /,
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        mode: Mode | None = None,
        profile: str | Profile = "similarity",
        explain: bool = False,
        min_score: float | None = None,
        stats: CorpusStats | None = None,
        rerank: Reranker | str | None = None,
        when: When = None,
        reference_time: datetime | str | int | None = None,
    ) -> SearchResults:
        """Find items under ``namespace_prefix`` by meaning and keywords, filtered and ranked.

        Without ``query`` it lists items newest first (``updated_at``). ``mode`` is ``hybrid`` (the
        default with an embedder), ``semantic`` or ``keyword``; a hybrid search whose embedder fails
        runs as keyword and says so in ``results.degraded``. ``filter`` uses MongoDB operators on the
        value's fields; ``profile`` mixes in confidence and recency; ``explain=True`` adds each signal's
        score to every result. ``stats`` is for callers fanning a search out over several repositories: keyword
        scores use these statistics (the sum of every repository's :meth:`corpus_stats`) instead of this one's.
        ``rerank`` (a :class:`~engram.embed.rerank.Reranker`, or a spec such as ``"onnx:<dir>"``) rescores the
        first stage's top candidates with a cross-encoder (:mod:`engram.store.rerank`). ``when="auto"`` favours
        items whose time matches the query's time expressions ("in May 2023", "last Tuesday"), counted from
        ``reference_time`` (the question's own date; now by default), and keeps only those inside a range the
        query states; ``when`` may also be an expression or a ``(start, end)`` range (:mod:`engram.store.timerank`).
        """
        prefix = _validate.namespace(namespace_prefix, allow_empty=True)
        request = SearchOp(prefix, query, filter, limit, offset, mode, profile, explain, min_score, stats=stats,
                           rerank=rerank, when=when, reference_time=reference_time)  # fmt: skip
        return self._run_search(request)

    def context(
        self,
        namespace_prefix: Sequence[str],
        query: str,
        *,
        budget_tokens: int = context.BUDGET_TOKENS,
        filter: Mapping[str, Any] | None = None,
        candidates: int = context.CANDIDATES,
        mode: Mode | None = None,
        tokenizer: str | TokenCounter | None = None,
        when: When = None,
        reference_time: datetime | str | int | None = None,
    ) -> context.Context:
        """The memories most relevant to ``query`` as one block of prompt text within ``budget_tokens``.

        Current facts only (superseded writer memories left out), each text once, most relevant first, each line
        with its date and source ids; chosen from the search's top ``candidates`` (``filter`` and ``mode`` as in
        :meth:`search`). ``tokenizer`` counts the budget: ``"wordpiece"`` (the default), ``"tiktoken:<encoding>"``,
        ``"estimate"`` or a counter object (:mod:`engram.embed.tokens`). Returns the block and the list of what it
        holds (:class:`~engram.store.context.Context`). Reads refresh no TTL. ``when`` and ``reference_time`` choose the
        hits by time as in :meth:`search` (``when="auto"``: the query's time expressions favour, or filter by, the
        memories' dates).
        """
        prefix = _validate.namespace(namespace_prefix, allow_empty=True)

        def search(namespace: Sequence[str], text: str | None, **options: Any) -> SearchResults:
            return Reader.search(self, namespace, text, **options)

        return context.build(search, prefix, query, budget_tokens=budget_tokens, filter=filter,
                             candidates=candidates, mode=mode, tokenizer=tokenizer, when=when,
                             reference_time=reference_time)  # fmt: skip

    def _run_search(self, request: SearchOp) -> SearchResults:
        """Run a search operation built once by the caller (its namespace validated): this reader's system rule
        applied, then through the store's query cache to its engine."""
        self._guard(request.namespace_prefix, "search")
        pool, branch, past = self._searched()
        root = self._root()
        limit, offset = request.limit, request.offset
        paged = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (limit, offset))
        changes: dict[str, Any] = {"when": timerank.effective(request.when, request.query)}
        if not self.system and not request.hide_system:
            changes["hide_system"] = True
        if paged:
            changes["limit"] = limit + 1  # one more than the page says whether more exist
        request = replace(request, **changes)  # one copy: a search's fixed cost counts

        def run(op: SearchOp, now: int) -> SearchResults:
            return pool.engine.search(branch, root, op, now, past=past)

        def cached(op: SearchOp, runner: Callable[[SearchOp, int], SearchResults], variant: str = "") -> SearchResults:
            found = for_pool(pool)
            if found is None:
                return runner(op, now_ms())
            cache, context = found
            return cache.search(root, op, now_ms(), runner, context, variant)

        def staged(op: SearchOp, first: Callable[[SearchOp], SearchResults]) -> SearchResults:
            reranks = op.rerank is not None and op.query is not None and paged
            return rerank.run(op, first, pool.fields) if reranks else first(op)

        def first(op: SearchOp) -> SearchResults:
            return cached(op, run)

        parsed = None
        if request.when != "off":
            timerank.check(request.when, request.reference_time, request.query)
            parsed = timerank.plan(request, now_ms()) if paged else None
        if parsed is None:
            found = staged(request, first)
        else:  # the time stage's result is cached whole; its first stage's candidate lists are not
            plan = parsed

            def uncached(op: SearchOp) -> SearchResults:
                return run(op, now_ms())

            def timed(op: SearchOp, _now: int) -> SearchResults:
                return timerank.run(op, lambda inner: staged(inner, uncached), plan)

            found = cached(request, timed, timerank.signature(parsed, request))
        return found.page(offset, limit) if paged else found

    def corpus_stats(self, query: str) -> CorpusStats:
        """The keyword (BM25) statistics a search of ``query`` here scores with: the indexed items, their total
        length in terms, and how many of them hold each of the query's terms. They are the whole version's,
        whatever a search's namespace prefix or filter.

        A search over several repositories ranks as one repository holding all their items would when it sums
        theirs (:meth:`CorpusStats.total <engram.index.corpus.CorpusStats.total>`) and passes the sum to each
        repository's search (``stats=``): Elasticsearch's ``dfs_query_then_fetch``.
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        pool, branch, past = self._searched()
        return pool.engine.corpus_stats(branch, self._root(), query, past=past)

    def lookup(self, namespace: Sequence[str], key: str, now: int | None = None) -> tuple[bytes, Record] | None:
        """The entry key and record at (namespace, key), unless absent or expired at ``now``."""
        ns = _validate.namespace(namespace)
        self._guard(ns)
        raw = codec.encode_key(ns, _validate.key(key))
        data = get(self.repo.nodes, self._root(), raw)
        if data is None:
            return None
        record = decode_record(data)
        if record.expires_at is not None and record.expires_at <= (now_ms() if now is None else now):
            return None
        return raw, record

    def get(self, namespace: Sequence[str], key: str) -> Item | None:
        """The item at (namespace, key), or None (also when it has expired)."""
        ns, k = _validate.namespace(namespace), _validate.key(key)
        found = self.lookup(ns, k)
        return None if found is None else Item.from_record(ns, k, found[1])

    def iter_items(self, namespace_prefix: Sequence[str] = ()) -> Iterator[Item]:
        """Yield every item in a namespace and its sub-namespaces, in key order."""
        prefix = _validate.namespace(namespace_prefix, allow_empty=True)
        self._guard(prefix)
        for start, end in self._ranges(prefix):
            for raw, data in iter_entries(self.repo.nodes, self._root(), start, end):
                ns, key = codec.decode_key(raw)
                yield Item.from_record(ns, key, decode_record(data))

    def _ranges(self, prefix: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
        """The entry key ranges of ``prefix`` this reader sees: at the root, without the system namespaces' range
        unless it holds the system scope."""
        return sysns.visible_ranges(prefix, self.system)

    def count(self, namespace_prefix: Sequence[str] = ()) -> int:
        """Number of items in a namespace and its sub-namespaces (O(log n))."""
        prefix = _validate.namespace(namespace_prefix, allow_empty=True)
        self._guard(prefix)
        return sum(count(self.repo.nodes, self._root(), start, end) for start, end in self._ranges(prefix))

    def list_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """Namespaces that hold items, LangGraph-style: ``*`` in prefix/suffix matches any one label,
        ``max_depth`` truncates (and dedupes) longer namespaces. Sorted; one seek per namespace."""
        prefix, suffix = _validate.namespace_pattern(prefix), _validate.namespace_pattern(suffix, "suffix")
        literal: list[str] = []
        for label in prefix or ():
            if label == "*":
                break
            literal.append(label)
        self._guard(literal)
        root = self._root()
        start, end = codec.prefix_range(literal)
        found: list[tuple[str, ...]] = []
        seen: set[tuple[str, ...]] = set()
        while True:
            entry = next(iter_entries(self.repo.nodes, root, start, end), None)
            if entry is None:
                break
            ns, _ = codec.decode_key(entry[0])
            if not self.system and sysns.is_system(ns):  # the system namespaces are one range: skip it
                start = sysns.RANGE[1]
                continue
            shown = ns if max_depth is None else ns[:max_depth]
            if _matches(ns, prefix, suffix) and shown not in seen:
                seen.add(shown)
                found.append(shown)
            # skip the rest of this namespace's items, or the whole truncated subtree
            start = codec.items_range(ns)[1] if shown == ns else codec.prefix_range(shown)[1]
        found.sort()
        return found[offset : offset + limit]


def _matches(ns: tuple[str, ...], prefix: Sequence[str] | None, suffix: Sequence[str] | None) -> bool:
    for part, labels in ((prefix, ns), (suffix, ns[::-1])):
        if part is None:
            continue
        pattern = list(part) if part is prefix else list(part)[::-1]
        if len(pattern) > len(labels):
            return False
        if any(p != "*" and p != label for p, label in zip(pattern, labels, strict=False)):
            return False
    return True
