"""The PostgreSQL search engine against the in-process one, on the same repository and data.

The PostgreSQL engine reads candidates from sorted lists (postings by impact, nearest vectors, ...) and
stops when no unread item can reach the page; the in-process engine scores every item. Both rank with
the one ranking function, so on the same data they must return the same items with the same scores:
these tests compare them on a few thousand synthetic items with common and rare words, where the lists
are truncated and several rounds are needed.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import engram
from engram.backends.base import now_ms
from engram.embed import HashingEmbedder
from engram.index import pgengine, pglists, pgquery
from engram.store import Memory, tenant_url
from engram.store.indexing import IndexPool
from engram.store.operations import SearchOp
from engram.store.pgsearch import PgSearch
from engram.store.ranking import Profile

SIZE = 3000
KINDS = ("pref", "fact", "event", "task")


def texts(n: int, seed: int = 0) -> list[str]:
    """Sentences of 6-20 words over a Zipf vocabulary: a few words in most items, most words in few."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" + "".join(chr(97 + (i * 7 + j) % 26) for j in range(3)) for i in range(2000)]
    ranks = np.minimum(rng.zipf(1.3, size=(n, 20)), 2000) - 1
    lengths = rng.integers(6, 21, size=n)
    return [" ".join(vocab[r] for r in row[:k]) for row, k in zip(ranks, lengths, strict=True)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Memory, Memory]]:
    """A PostgreSQL store of SIZE items searched in PostgreSQL, and a handle on the same repository that
    searches in process."""
    url = request.getfixturevalue("pgvector_url")
    mem = engram.open(tenant_url(url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres")
    mem.put(("u0",), "first", {"text": "the very first item"})
    mem.search((), "index this branch from now on")
    rng = np.random.default_rng(3)
    found = texts(SIZE)
    for lo in range(0, SIZE, 1000):
        with mem.transaction("load") as tx:
            for i in range(lo, min(SIZE, lo + 1000)):
                value = {"text": found[i], "kind": KINDS[i % 4], "n": i % 10, "confidence": float(rng.random())}
                tx.put((f"u{i % 7}", "notes"), f"k{i}", value)
    for i in range(0, 60, 3):  # updates and deletes after the bulk load
        mem.put((f"u{i % 7}", "notes"), f"k{i}", {"text": found[i + 1], "kind": "fact", "n": 1})
        mem.delete((f"u{(i + 1) % 7}", "notes"), f"k{i + 1}")
    local = Memory(mem.repo, pool=IndexPool(mem.repo, embedder=HashingEmbedder()))
    assert local.pool.sql is None and mem.pool.sql is not None
    yield mem, local
    mem.close()


def queries(n: int, seed: int) -> list[str]:
    """Query texts: 1-4 words of stored items (so common and rare words mix), and one unknown word."""
    rng = np.random.default_rng(seed)
    found = texts(SIZE)
    out = [
        " ".join(found[int(i)].split()[: int(k)])
        for i, k in zip(rng.integers(0, SIZE, n), rng.integers(1, 5, n), strict=True)
    ]
    return [*out, "w0abc w1hij", "w2opq w3vwx w1hij", "nothingmatches"]  # common words only: deep reads


def same(a: Sequence[Any], b: Sequence[Any], context: Any) -> None:
    """Same items with the same scores, in the same order except among near-ties."""
    assert [i.key for i in a] == [i.key for i in b] or sorted(i.key for i in a) == sorted(i.key for i in b), context
    theirs = {i.key: i.score for i in b}
    for item in a:
        assert item.score == pytest.approx(theirs[item.key], abs=1e-5), (context, item.key)
    where = {i.key: n for n, i in enumerate(b)}
    for first, second in itertools.pairwise(a):
        if first.score - second.score > 1e-5:
            assert where[first.key] < where[second.key], context


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "semantic"])
def test_pg_engine_ranks_like_the_in_process_engine(corpus: tuple[Memory, Memory], mode: str) -> None:
    mem, local = corpus
    profiles: list[str | Profile] = ["similarity", "balanced", Profile(0.7, 0.3)]
    filters: list[dict[str, Any] | None] = [None, {"kind": "fact"}, {"n": {"$gte": 8}}]
    combos = itertools.product(queries(4, 1), profiles, filters)
    for n, (query, profile, spec) in enumerate(combos):
        prefix = ("u3",) if n % 3 == 0 else ()
        args: dict[str, Any] = {"mode": mode, "profile": profile, "filter": spec, "limit": 10}
        same(mem.search(prefix, query, **args), local.search(prefix, query, **args), (query, profile, spec, prefix))
    for query in queries(3, 2):  # deeper pages and min_score
        for offset, min_score in ((0, 0.3), (20, None), (45, 0.1)):
            args = {"mode": mode, "limit": 15, "offset": offset, "min_score": min_score}
            same(mem.search((), query, **args), local.search((), query, **args), (query, offset, min_score))


def test_pg_engine_reads_a_small_share_of_the_postings(corpus: tuple[Memory, Memory]) -> None:
    """The lists stop early: a query mixing a common and a rare word settles without reading the common
    word's postings to the end (so cost follows the query's postings, not the branch)."""
    mem, _ = corpus
    sql = mem.pool.sql
    assert sql is not None
    depths: list[dict[int, int]] = []
    seen = pglists.Lists.read

    def spy(self: pglists.Lists, summary: dict[int, tuple[int, float]]) -> None:
        depths.append(dict(self.depths))
        seen(self, summary)

    common, rare = "w0abc", texts(SIZE)[5].split()[-1]
    frequency = sql.db.run(
        "SELECT df FROM engram_index_terms WHERE repo = %s AND branch = 'main' AND term = %s", (sql.db.repo, common)
    )[0][0]
    pglists.Lists.read = spy  # type: ignore[method-assign]
    try:
        mem.search((), f"{common} {rare}", mode="keyword")
    finally:
        pglists.Lists.read = seen  # type: ignore[method-assign]
    assert frequency > SIZE // 3
    assert depths and max(d[0] for d in depths) < frequency // 4


def test_hnsw_candidates_score_the_same_and_find_most_neighbours(corpus: tuple[Memory, Memory]) -> None:
    """Through the HNSW index (as on a large branch) the nearest vectors are approximate: every item
    returned has its exact score, and most of the exact top 10 is found."""
    mem, local = corpus
    sql = mem.pool.sql
    assert sql is not None
    approximate = PgSearch(sql.db, mem.repo, embedder=sql.embedder, fields=sql.fields, cache=sql.cache, exact_below=0)
    root = mem.head.tree
    found = 0
    for query in queries(20, 3):
        op = SearchOp((), query, None, 10, 0, "semantic")
        got = approximate.search("main", root, op, now_ms())
        assert got is not None
        exact = local.search((), query, mode="semantic", limit=10)
        scores = {i.key: i.score for i in exact}
        theirs = {i.key: i.score for i in local.search((), query, mode="semantic", limit=SIZE + 100)}
        for item in got:
            assert item.score == pytest.approx(theirs[item.key], abs=1e-5)
        found += len({i.key for i in got} & set(scores))
    assert found >= 0.9 * 10 * 22


def _everything_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every item the lists read be fetched and scored (no bound skips one)."""
    monkeypatch.setattr(
        pglists.Lists, "bounds", lambda self, values, ref, cap: np.full(len(next(iter(values.values()))), np.inf)
    )


@pytest.mark.parametrize("exact_below", [pgengine.EXACT_BELOW, 0])
def test_items_read_that_cannot_reach_the_page_are_not_fetched_and_the_page_is_the_same(
    corpus: tuple[Memory, Memory], monkeypatch: pytest.MonkeyPatch, exact_below: int
) -> None:
    """From the second round on, an item read is fetched only when its bound (its values on the lists that
    gave it, the lists' last values elsewhere) can reach the page: the pages equal those of a search that
    fetches every item read, in every mode and with filters, profiles and pages, through an exact vector
    scan or the HNSW index; and common-word queries do skip items."""
    mem, _ = corpus
    sql = mem.pool.sql
    assert sql is not None
    engine = PgSearch(
        sql.db, mem.repo, embedder=sql.embedder, fields=sql.fields, cache=sql.cache, exact_below=exact_below
    )
    root, now = mem.head.tree, now_ms()
    read = skipped = 0
    promising = pgquery.PgQuery._promising

    def spy(self: pgquery.PgQuery, lists: pglists.Lists, ref: float, pending: Any) -> Any:
        nonlocal read, skipped
        kept = promising(self, lists, ref, pending)
        read, skipped = read + len(pending), skipped + len(pending) - len(kept)
        return kept

    ops = [
        SearchOp(prefix, query, spec, limit, offset, mode, profile, min_score=min_score)  # type: ignore[arg-type]
        for query in [*queries(6, 5), "w0abc w1hij w2opq", "w3vwx w0abc"]
        for mode in ("keyword", "hybrid", "semantic")
        for prefix, spec, limit, offset, profile, min_score in (
            ((), None, 10, 0, "similarity", None),
            ((), {"kind": "fact"}, 10, 0, "similarity", None),
            (("u3",), None, 5, 10, "balanced", None),
            ((), None, 15, 20, "similarity", 0.2),
        )
    ]
    with monkeypatch.context() as patched:
        patched.setattr(pgquery.PgQuery, "_promising", spy)
        pruned = [engine.search("main", root, op, now) for op in ops]
    _everything_fetched(monkeypatch)
    for op, got in zip(ops, pruned, strict=True):
        full = engine.search("main", root, op, now)
        assert got is not None and full is not None
        assert [(i.key, i.score) for i in got] == [(i.key, i.score) for i in full], op
    assert skipped > 0.2 * read


def test_a_round_reads_only_the_lists_that_grew_and_fetches_no_item_twice(corpus: tuple[Memory, Memory]) -> None:
    """A search of common words needs several rounds: each fetches only items not fetched before, and the
    vector list is read again only when it deepens."""
    mem, _ = corpus
    sql = mem.pool.sql
    assert sql is not None
    fetched: list[bytes] = []
    rounds: list[tuple[bool, bool]] = []  # per round: whether the vector list deepened, and was read again
    signals, read = pgquery.PgQuery._signals, pgquery.PgQuery._read

    def spy_signals(self: pgquery.PgQuery, *args: Any) -> Any:
        fetched[:] = [self._reads.keys[i] for ids in self._row_ids for i in ids.tolist()]
        return signals(self, *args)

    def spy_read(self: pgquery.PgQuery, lists: pglists.Lists, *, fetch: bool) -> Any:
        depth, before = self._read_to.get(pglists.VECTOR), self._reads.lists.get(pglists.VECTOR)
        out = read(self, lists, fetch=fetch)
        rounds.append((depth != lists.depths[pglists.VECTOR], self._reads.lists.get(pglists.VECTOR) is not before))
        return out

    pgquery.PgQuery._signals = spy_signals  # type: ignore[method-assign]
    pgquery.PgQuery._read = spy_read  # type: ignore[method-assign]
    try:
        mem.search((), "w0abc w1hij w2opq", limit=10)
    finally:
        pgquery.PgQuery._signals = signals  # type: ignore[method-assign]
        pgquery.PgQuery._read = read  # type: ignore[method-assign]
    assert len(rounds) > 1 and (False, False) in rounds
    assert all(deepened == again for deepened, again in rounds)
    assert len(fetched) == len(set(fetched))


def test_search_in_the_past_runs_in_postgresql_and_equals_the_in_process_engine(
    corpus: tuple[Memory, Memory],
) -> None:
    mem, local = corpus
    sql = mem.pool.sql
    assert sql is not None
    past = mem.head.id.hex()
    for i in range(12):
        mem.put((f"u{i % 7}", "notes"), f"k{100 + i}", {"text": f"a rewritten memory w0abc w{i}xyz", "kind": "task"})
    mem.delete(("u3", "notes"), "k3")
    mem.search((), "bring the head index up to date")
    for query in queries(6, 4):
        for mode in ("keyword", "hybrid"):
            op = SearchOp(("u3",), query, {"kind": "fact"}, 10, 0, mode)  # type: ignore[arg-type]
            got = sql.search_past("main", mem.repo.commit(bytes.fromhex(past)).tree, op, now_ms())
            assert got is not None  # a few changes: an overlay on the head rows, not a fallback
            expected = local.at(past).search(("u3",), query, filter={"kind": "fact"}, limit=10, mode=mode)
            same(got, expected, (query, mode))


def test_vectors_move_to_the_hnsw_index_in_the_background_and_searches_see_them_before(
    corpus: tuple[Memory, Memory],
) -> None:
    mem, local = corpus
    sql = mem.pool.sql
    assert sql is not None
    sql.settle()
    assert sql.lag("main") == 0
    with mem.transaction("more") as tx:
        for i in range(40):
            tx.put(("fresh",), f"f{i}", {"text": f"zebra crossing number {i} w1{i}abc"})
    before = mem.search((), "zebra crossing", limit=10)
    same(before, local.search((), "zebra crossing", limit=10), "fresh")
    sql.settle()
    assert sql.lag("main") == 0
    same(mem.search((), "zebra crossing", limit=10), before, "settled")


class _Unprepared:
    """A ref-move hook that drops the plan made before the move, as when another writer moved the index
    meanwhile: the move then plans again under the lock, taking vectors from the cache only."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def prepare(self, name: str, old: Any, new: Any) -> Any:
        return None

    def pipelined(self, prepared: Any) -> bool:
        return True

    def start(self, conn: Any, name: str) -> Any:
        return self.inner.start(conn, name)

    def apply(self, conn: Any, name: str, old: Any, new: Any, prepared: Any, started: Any) -> None:
        self.inner.apply(conn, name, old, new, prepared, started)


def test_a_plan_made_under_the_lock_embeds_nothing_and_the_next_search_fills_the_vectors(
    pgvector_url: str,
) -> None:
    mem = engram.open(
        tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres"
    )
    try:
        sql = mem.pool.sql
        assert sql is not None
        mem.put(("n",), "a", {"text": "apples and pears"})
        mem.search((), "apples")
        refs = sql.repo.refs
        while not hasattr(refs, "hook") and hasattr(refs, "inner"):  # under wrappers (metrics, breakers)
            refs = refs.inner
        assert getattr(refs, "hook", None) is sql
        refs.hook = _Unprepared(sql)  # type: ignore[attr-defined]
        mem.put(("n",), "b", {"text": "an unseen sentence about quinces"})
        pending = sql.db.run("SELECT vector_pending FROM engram_index_heads WHERE repo = %s", (sql.db.repo,))
        assert pending == [(1,)]
        found = mem.search((), "quinces", mode="semantic")
        assert [i.key for i in found][:1] == ["b"] and found[0].score is not None and found[0].score > 0.3
        pending = sql.db.run("SELECT vector_pending FROM engram_index_heads WHERE repo = %s", (sql.db.repo,))
        assert pending == [(0,)]
    finally:
        mem.close()


def test_impacts_follow_a_drifting_average_length(pgvector_url: str) -> None:
    """Short items first, then much longer ones: the reference length moves and the stored impacts are
    recomputed, so the lists still bound the scores (results equal the in-process engine's)."""
    mem = engram.open(
        tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres"
    )
    try:
        mem.put(("s",), "0", {"text": "w0abc"})
        mem.search((), "w0abc")
        found = texts(400, seed=5)
        with mem.transaction() as tx:
            for i in range(200):
                tx.put(("s",), f"short{i}", {"text": " ".join(found[i].split()[:2])})
        sql = mem.pool.sql
        assert sql is not None
        first = sql.db.run("SELECT ref_avgdl FROM engram_index_heads WHERE repo = %s", (sql.db.repo,))[0][0]
        with mem.transaction() as tx:
            for i in range(200, 400):
                tx.put(("s",), f"long{i}", {"text": " ".join([found[i]] * 4)})
        second = sql.db.run("SELECT ref_avgdl FROM engram_index_heads WHERE repo = %s", (sql.db.repo,))[0][0]
        assert second > 2 * first
        local = Memory(mem.repo, pool=IndexPool(mem.repo, embedder=HashingEmbedder()))
        for query in ["w0abc", "w1hij w0abc", found[250].split()[0]]:
            same(mem.search((), query, mode="keyword"), local.search((), query, mode="keyword"), query)
    finally:
        mem.close()


def test_moving_vectors_while_writers_replace_them_keeps_one_current_vector_per_item(pgvector_url: str) -> None:
    mem = engram.open(
        tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres"
    )
    try:
        sql = mem.pool.sql
        assert sql is not None
        mem.put(("r",), "first", {"text": "first"})
        mem.search((), "first")
        stop = threading.Event()

        def move() -> None:
            while not stop.is_set():
                sql.settler.settle_all()

        mover = threading.Thread(target=move)
        mover.start()
        try:
            for n in range(12):
                with mem.transaction() as tx:
                    for i in range(20):
                        tx.put(("r",), f"k{i}", {"text": f"round {n} item {i} w{n}abc"})
        finally:
            stop.set()
            mover.join()
        sql.settle()
        rows = sql.db.run(
            "SELECT key, embedding::text FROM engram_doc_vectors WHERE repo = %s UNION ALL "
            "SELECT key, embedding::text FROM engram_doc_vectors_fresh WHERE repo = %s",
            (sql.db.repo, sql.db.repo),
        )
        assert len(rows) == len({bytes(k) for k, _ in rows}) == 21  # one vector per item, none left behind
        stored = {engram.codec.decode_key(bytes(k))[1]: np.asarray(json.loads(v), dtype=np.float32) for k, v in rows}
        embedder = HashingEmbedder()
        for i in range(20):
            current = np.asarray(embedder.embed([f"round 11 item {i} w11abc"])[0], dtype=np.float32)
            # the current vector, kept at float16 precision
            assert float(stored[f"k{i}"] @ current) == pytest.approx(1.0, abs=1e-3)
    finally:
        mem.close()
