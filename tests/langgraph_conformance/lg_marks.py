"""Which LangGraph tests are excluded (with the reason for each) and which are slow: the one place for both.

A test is excluded only when it cannot apply to EngramStore: it tests another store class's private
internals (its SQL helpers, migrations, connection pool, the exact text of its errors, SQL run on its
tables) or LangGraph's own helpers with no store at all. A test that fails because EngramStore behaves
differently from LangGraph's stores is never listed here: it stays red until engram is fixed.
docs/langgraph.md repeats this list; keep the two in step.

Keys are ``<distribution>/tests/<file>::<test>`` (``<Class>::<test>`` for methods); a key without a
``[params]`` part covers every parametrization.
"""

from __future__ import annotations

_MEM = "langgraph-checkpoint/tests/test_store.py"
_SQL = "langgraph-checkpoint-sqlite/tests/test_store.py"
_SQL_ASYNC = "langgraph-checkpoint-sqlite/tests/test_async_store.py"
_PG = "langgraph-checkpoint-postgres/tests/test_store.py"
_PG_ASYNC = "langgraph-checkpoint-postgres/tests/test_async_store.py"

_NO_STORE = "uses no store: it tests LangGraph's own helper"
_ASYNC_ONLY = (
    "pins a limit of LangGraph's async-only stores: their sync methods hop onto the store's event loop, so "
    "they raise InvalidStateError when called on it; EngramStore serves sync calls directly on any thread"
)

EXCLUDED: dict[str, str] = {
    # LangGraph's own helpers, no store involved
    f"{_MEM}::test_dedupe_ops_maps_repeated_reads_and_puts_to_one_op": f"{_NO_STORE} _dedupe_ops",
    f"{_MEM}::test_get_text_at_path": f"{_NO_STORE} get_text_at_path",
    f"{_MEM}::test_get_text_at_path_with_non_dict_mapping": f"{_NO_STORE} get_text_at_path",
    f"{_MEM}::test_async_batch_store": f"{_NO_STORE} AsyncBatchedBaseStore, over a mock store",
    f"{_MEM}::test_async_batch_store_handles_cancellation": f"{_NO_STORE} AsyncBatchedBaseStore, over a mock store",
    f"{_MEM}::test_validate_op_namespace_rejects_invalid_labels": f"{_NO_STORE} validate_op_namespace",
    f"{_MEM}::test_validate_op_namespace_allows_empty_prefix_and_wildcards": f"{_NO_STORE} validate_op_namespace",
    # SqliteStore internals
    f"{_SQL}::test_escape_glob_literal": "SqliteStore's private SQL helper _escape_glob_literal",
    f"{_SQL}::test_namespace_match_pattern": "SqliteStore's private SQL helper _namespace_match_pattern",
    f"{_SQL}::test_list_namespaces_prefix_uses_indexable_condition": (
        "the SQL that BaseSqliteStore._get_batch_list_namespaces_queries generates (built on LangGraph's class)"
    ),
    f"{_SQL}::test_nonnull_migrations": "SqliteStore.MIGRATIONS, its schema migrations",
    f"{_SQL}::test_vector_store_initialization": (
        "SqliteStore's `embeddings` attribute and its vector tables, read with SQL on `store.conn` (sqlite_master)"
    ),
    f"{_SQL}::test_sql_injection_vulnerability": (
        "the exact text of SqliteStore's error for a bad filter key ('Invalid filter key'); EngramStore raises "
        "a ValueError too (InvalidFilterError), with its own message"
    ),
    f"{_SQL_ASYNC}::test_no_running_loop": _ASYNC_ONLY,
    # PostgresStore internals
    f"{_PG}::test_escape_like_literal": "PostgresStore's private SQL helper _escape_like_literal",
    f"{_PG}::test_namespace_match_pattern": "PostgresStore's private SQL helper _namespace_match_pattern",
    f"{_PG}::test_nonnull_migrations": "PostgresStore.MIGRATIONS, its schema migrations",
    f"{_PG}::test_omit_expired_search_pagination": (
        "backdates updated_at with SQL on PostgresStore's `store` table through `store._cursor()` in the test body"
    ),
    f"{_PG_ASYNC}::test_no_running_loop": _ASYNC_ONLY,
    f"{_PG_ASYNC}::test_abatch_uses_single_pool_checkout": (
        "counts connection checkouts from AsyncPostgresStore's pool (monkeypatches its _ainternal.get_connection)"
    ),
    f"{_PG_ASYNC}::test_omit_expired_search_pagination": (
        "backdates updated_at with SQL on AsyncPostgresStore's `store` table through `store._cursor()`"
    ),
}

#: Tests that take long by design (sleeps, thousands of writes): marked ``slow`` (``make test`` still runs them).
SLOW: dict[str, str] = {
    "langgraph-checkpoint-sqlite/tests/test_ttl.py": "every test sleeps through real TTLs (1-6 s each)",
    f"{_PG}::test_store_ttl": "sleeps ~17 s through a 6 s TTL",
    f"{_PG_ASYNC}::test_large_batches": "6,000 sync calls from 10 threads",
    f"{_PG_ASYNC}::test_large_batches_async": "10,000 async calls",
}
