"""The search schema on PostgreSQL: the tables :mod:`engram.index.pgengine` keeps each branch head's index in.

An ordered list of migrations with versions of their own range (101+), applied by
:func:`engram.backends.postgres.ensure_schema` once per database per process. Never edit an applied migration:
append a new one.
"""

from __future__ import annotations

from engram.backends.postgres import Migration

SEARCH_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        101,
        "search: documents with tsvector, JSONB and pgvector embeddings per indexed branch head",
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE engram_index_heads (
            repo text NOT NULL,
            branch text NOT NULL,
            root bytea NOT NULL,
            model text NOT NULL,
            fields text NOT NULL,
            docs bigint NOT NULL DEFAULT 0,
            length bigint NOT NULL DEFAULT 0,
            vector_error text,
            PRIMARY KEY (repo, branch)
        );
        CREATE TABLE engram_docs (
            repo text NOT NULL,
            branch text NOT NULL,
            key bytea NOT NULL,
            ns_path text NOT NULL,
            record bytea NOT NULL,
            value jsonb NOT NULL,
            updated bigint NOT NULL,
            expires bigint,
            confidence real NOT NULL,
            indexed boolean NOT NULL,
            length integer NOT NULL,
            terms jsonb NOT NULL,
            tsv tsvector NOT NULL,
            dim integer,
            embedding vector,
            PRIMARY KEY (repo, branch, key)
        );
        CREATE INDEX engram_docs_tsv ON engram_docs USING gin (tsv);
        CREATE INDEX engram_docs_ns ON engram_docs (repo, branch, ns_path text_pattern_ops);
        CREATE TABLE engram_index_terms (
            repo text NOT NULL,
            branch text NOT NULL,
            term text NOT NULL,
            df bigint NOT NULL,
            PRIMARY KEY (repo, branch, term)
        );
        """,
    ),
    Migration(
        102,
        "search: keep embeddings inline (a TOAST fetch per row made exact scoring 10x slower)",
        "ALTER TABLE engram_docs ALTER COLUMN embedding SET STORAGE MAIN;",
    ),
    Migration(
        103,
        "search: term frequencies as parallel arrays (4x faster to read per row than a JSONB map)",
        """
        ALTER TABLE engram_docs ADD COLUMN term_list text[], ADD COLUMN tf_list real[];
        UPDATE engram_docs SET term_list = ARRAY(SELECT jsonb_object_keys(terms)),
            tf_list = ARRAY(SELECT (terms->>k)::real FROM jsonb_object_keys(terms) AS k);
        ALTER TABLE engram_docs ALTER COLUMN term_list SET NOT NULL, ALTER COLUMN tf_list SET NOT NULL,
            DROP COLUMN terms;
        """,
    ),
    Migration(
        104,
        "search: no compression or out-of-line storage for rows under 8 KB (scoring reads every column per row)",
        "ALTER TABLE engram_docs SET (toast_tuple_target = 8160);",
    ),
    Migration(
        105,
        "search: embeddings in their own table, so keyword scoring reads narrow rows",
        """
        CREATE TABLE engram_doc_vectors (
            repo text NOT NULL,
            branch text NOT NULL,
            key bytea NOT NULL,
            dim integer NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (repo, branch, key)
        );
        ALTER TABLE engram_doc_vectors ALTER COLUMN embedding SET STORAGE MAIN;
        INSERT INTO engram_doc_vectors (repo, branch, key, dim, embedding)
            SELECT repo, branch, key, dim, embedding FROM engram_docs WHERE embedding IS NOT NULL;
        ALTER TABLE engram_docs DROP COLUMN embedding, DROP COLUMN dim;
        """,
    ),
    Migration(
        106,
        "search: postings per term with precomputed impacts (top-k keyword scoring), no tsvector; "
        "recency and confidence orders. Search rows are derived: they are dropped here and rebuilt from each "
        "branch's head at its next search",
        """
        DELETE FROM engram_docs;
        DELETE FROM engram_doc_vectors;
        DELETE FROM engram_index_terms;
        DELETE FROM engram_index_heads;
        ALTER TABLE engram_index_heads ADD COLUMN ref_avgdl double precision NOT NULL DEFAULT 0;
        CREATE TABLE engram_postings (
            repo text NOT NULL,
            branch text NOT NULL,
            term text NOT NULL,
            key bytea NOT NULL,
            impact real NOT NULL,
            PRIMARY KEY (repo, branch, term, key)
        );
        CREATE INDEX engram_postings_impact ON engram_postings (repo, branch, term, impact DESC) INCLUDE (key);
        CREATE INDEX engram_docs_updated ON engram_docs (repo, branch, updated DESC);
        CREATE INDEX engram_docs_confidence ON engram_docs (repo, branch, confidence DESC);
        DROP INDEX engram_docs_tsv;
        ALTER TABLE engram_docs DROP COLUMN tsv;
        """,
    ),
    Migration(
        107,
        "search: count of searchable rows written without a vector (embedded later, outside any lock)",
        "ALTER TABLE engram_index_heads ADD COLUMN vector_pending integer NOT NULL DEFAULT 0;",
    ),
    Migration(
        108,
        "search: new vectors land in a table without HNSW index (scanned exactly) and move to the HNSW-indexed "
        "table in the background, so a commit never pays for an HNSW insert",
        """
        CREATE TABLE engram_doc_vectors_fresh (
            repo text NOT NULL,
            branch text NOT NULL,
            key bytea NOT NULL,
            dim integer NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (repo, branch, key)
        );
        ALTER TABLE engram_doc_vectors_fresh ALTER COLUMN embedding SET STORAGE MAIN;
        """,
    ),
    Migration(
        109,
        "search: items per namespace of each indexed branch head, kept at write time, so a search estimates the "
        "size of its scope (a namespace prefix) before it chooses how to score it",
        """
        CREATE TABLE engram_index_namespaces (
            repo text NOT NULL,
            branch text NOT NULL,
            ns_path text COLLATE "C" NOT NULL,
            docs bigint NOT NULL,
            PRIMARY KEY (repo, branch, ns_path)
        );
        INSERT INTO engram_index_namespaces (repo, branch, ns_path, docs)
            SELECT repo, branch, ns_path, count(*) FROM engram_docs GROUP BY repo, branch, ns_path;
        """,
    ),
    Migration(
        110,
        "search: BM25 without length normalisation: a posting's impact is tf * 2.2 / (tf + 1.2) whatever the item's "
        "length, recomputed in place from each row's term frequencies",
        """
        UPDATE engram_postings p SET impact = (u.tf * 2.2 / (u.tf + 1.2))::real
            FROM engram_docs d CROSS JOIN LATERAL unnest(d.term_list, d.tf_list) AS u(term, tf)
            WHERE p.repo = d.repo AND p.branch = d.branch AND p.key = d.key AND p.term = u.term;
        """,
    ),
)


__all__ = ["SEARCH_MIGRATIONS"]
