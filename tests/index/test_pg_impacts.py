"""Search migration 110 recomputes the PostgreSQL postings' BM25 impacts in place: after it, every impact is what a
write computes now (engram.index.keyword.bm25 at the branch's reference length), so the lists' bounds hold and both
engines keep returning the same page."""

from __future__ import annotations

import uuid

import numpy as np

import engram
from engram.backends.postgres import PostgresDatabase
from engram.embed import HashingEmbedder
from engram.index import keyword
from engram.index.pgschema import SEARCH_MIGRATIONS
from engram.store import Memory, tenant_url
from engram.store.indexing import IndexPool


def _impacts(db: PostgresDatabase) -> dict[tuple[str, bytes], tuple[float, float]]:
    """(term, key) -> (stored impact, the impact a write computes now)."""
    ref = db.run("SELECT ref_avgdl FROM engram_index_heads WHERE repo = %s", (db.repo,))[0][0]
    rows = db.run(
        "SELECT p.term, p.key, p.impact, d.length, u.tf FROM engram_postings p JOIN engram_docs d "
        "ON d.repo = p.repo AND d.branch = p.branch AND d.key = p.key "
        "CROSS JOIN LATERAL unnest(d.term_list, d.tf_list) AS u(term, tf) WHERE p.repo = %s AND u.term = p.term",
        (db.repo,),
    )
    now = keyword.bm25(
        np.array([r[4] for r in rows], np.float32), np.array([r[3] for r in rows], np.float32), 1.0, float(ref)
    )
    return {(r[0], bytes(r[1])): (float(r[2]), float(w)) for r, w in zip(rows, now, strict=True)}


def test_migration_110_recomputes_every_impact(pgvector_url: str) -> None:
    mem = engram.open(
        tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres"
    )
    try:
        with mem.transaction() as tx:
            for i in range(40):  # lengths 1 to 40 words, repeats: impacts differ by length and frequency
                tx.put(("s",), f"k{i}", {"text": " ".join(["apple"] * (1 + i % 3) + [f"w{j}" for j in range(i)])})
        mem.search((), "apple")
        sql = mem.pool.sql
        assert sql is not None
        db = sql.db
        assert all(abs(a - b) < 1e-6 for a, b in _impacts(db).values())  # as written
        db.run("UPDATE engram_postings SET impact = impact * 0.5 + 0.25 WHERE repo = %s", (db.repo,))  # stale
        assert not all(abs(a - b) < 1e-6 for a, b in _impacts(db).values())
        migration = next(m for m in SEARCH_MIGRATIONS if m.version == 110)
        mine = migration.sql.replace("WHERE p.repo = d.repo", "WHERE p.repo = %(repo)s AND p.repo = d.repo")
        assert mine != migration.sql  # only this test's rows: other tests may share the database
        db.run(mine, {"repo": db.repo})
        found = _impacts(db)
        assert found and all(abs(a - b) < 1e-6 for a, b in found.values())
        local = Memory(mem.repo, pool=IndexPool(mem.repo, embedder=HashingEmbedder()))
        for query in ["apple", "apple w3", "w30 w1"]:
            ours = [(h.key, round(h.score, 6)) for h in mem.search((), query, mode="keyword", limit=10)]
            assert ours == [(h.key, round(h.score, 6)) for h in local.search((), query, mode="keyword", limit=10)]
    finally:
        mem.close()
