"""Reliability probes on the store: racing writer processes and SIGKILL loops, on SQLite and PostgreSQL.

tests/test_concurrency.py and tests/test_crash.py pin the semantics on SQLite with puts only; these probes
add PostgreSQL (with and without search tables), transactions and gc in the mix, and kills at random moments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.store import tenant_url

from .probes_store import run_process_race, run_sigkill_loop

PROCESSES = 5
WRITES = 25  # per process: 20 puts and 5 transactions of 3 puts
KILLS = 10


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    base = request.getfixturevalue("postgres_url" if backend == "postgres" else "pgvector_url")
    return tenant_url(base, request.getfixturevalue("pg_repo_id"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "pgvector"])
def test_processes_on_one_branch_lose_no_acknowledged_write(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Five processes write one branch at once: every acknowledged write is found, fsck is clean, no process
    gets an error; with pgvector the search tables list every item too."""
    embedder = "hashing" if backend == "pgvector" else None
    result = run_process_race(
        _url(backend, tmp_path, request),
        processes=PROCESSES,
        writes=WRITES,
        embedder=embedder,
        check_search=backend == "pgvector",
    )
    result.assert_clean()
    assert result.acknowledged == PROCESSES * (WRITES + (WRITES // 5) * 2)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "pgvector"])
def test_writer_sigkilled_at_random_moments_loses_no_acknowledged_write(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A writer of puts, transactions and gc is SIGKILLed at random moments: after each kill the store opens,
    fsck is clean and every write it acknowledged (fsync'd to a file) is there; with pgvector, in the search
    tables too (they move with the branch in one transaction)."""
    url = _url(backend, tmp_path, request)
    result = run_sigkill_loop(url, tmp_path / "kills", kills=KILLS, check_search=backend == "pgvector")
    result.assert_clean()
    assert result.acknowledged > KILLS  # the writer got going in most rounds
