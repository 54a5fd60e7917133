"""A private PostgreSQL 15 cluster with a real streaming replica, for the read-replica tests and benchmark.

``start_cluster(delay)`` runs ``initdb`` for a primary (``wal_level=replica``) on a free port, takes a
``pg_basebackup -R`` of it as a standby, and starts the standby on another port with
``recovery_min_apply_delay`` (replication delayed on purpose). As root, every PostgreSQL program runs as the
``postgres`` user (``runuser``), in a folder it owns. ``replica_cluster`` is the session fixture (skipped when the
PostgreSQL 15 programs are missing; failed under ENGRAM_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from services import unavailable

BIN = Path(os.environ.get("ENGRAM_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    command = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload, no-any-return]


@dataclass
class Cluster:
    """A running primary and its delayed streaming standby."""

    folder: Path
    primary_port: int
    replica_port: int
    delay: float

    @property
    def primary_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/postgres"

    @property
    def replica_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.replica_port}/postgres"

    def _ctl(self, name: str, action: str, port: int | None = None) -> None:
        args = [str(BIN / "pg_ctl"), "-D", str(self.folder / name), "-l", str(self.folder / f"{name}.log"), "-w"]
        if port is not None:
            args += ["-o", f"-p {port}"]
        _as_postgres([*args, "-m", "immediate", action] if action == "stop" else [*args, action])

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Wait until the standby has replayed everything the primary wrote so far."""
        import psycopg

        with psycopg.connect(self.primary_url, autocommit=True) as primary:
            (lsn,) = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()  # type: ignore[misc]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.replica_url, autocommit=True) as replica:
            while time.monotonic() < deadline:
                (done,) = replica.execute(  # type: ignore[misc]
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
                ).fetchone()
                if done:
                    return
                time.sleep(0.05)
        raise TimeoutError(f"the standby did not replay up to {lsn} within {timeout} s")

    def stop(self) -> None:
        for name in ("replica", "primary"):
            if (self.folder / name / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.SubprocessError):
                    self._ctl(name, "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster(delay: float = 2.0) -> Cluster:
    """Start a primary and a standby replaying ``delay`` seconds behind it (see the module docstring)."""
    folder = Path(tempfile.mkdtemp(prefix="engram-replicas-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    cluster = Cluster(folder, _free_port(), _free_port(), delay)
    try:
        primary = folder / "primary"
        _as_postgres([str(BIN / "initdb"), "-D", str(primary), "-A", "trust", "-U", "postgres", "--no-sync",
                      "--no-instructions"])  # fmt: skip
        settings = (f"listen_addresses = '127.0.0.1'\nunix_socket_directories = '{folder}'\nwal_level = replica\n"
                    "max_wal_senders = 4\nfsync = off\nfull_page_writes = off\n"
                    "shared_buffers = 32MB\nmax_connections = 60\n")  # fmt: skip
        _as_postgres(["sh", "-c", f"cat >> {primary / 'postgresql.conf'}"], input=settings)
        cluster._ctl("primary", "start", cluster.primary_port)
        replica = folder / "replica"
        _as_postgres([str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.primary_port), "-U", "postgres",
                      "-D", str(replica), "-R", "-X", "stream", "--no-sync", "-c", "fast"])  # fmt: skip
        standby = f"hot_standby = on\nrecovery_min_apply_delay = '{int(delay * 1000)}ms'\n"
        _as_postgres(["sh", "-c", f"cat >> {replica / 'postgresql.auto.conf'}"], input=standby)
        cluster._ctl("replica", "start", cluster.replica_port)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def replica_cluster() -> Iterator[Cluster]:
    """The session's primary + delayed standby (2 s), with engram's schema migrated and replayed."""
    if not (BIN / "initdb").exists() or (shutil.which("runuser") is None and os.geteuid() == 0):
        unavailable("PostgreSQL 15 programs (initdb, pg_basebackup)", f"not found in {BIN}")
    try:
        cluster = start_cluster(2.0)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        unavailable("a private PostgreSQL cluster with a streaming replica", f"{exc!r} {detail[-500:]}")
    try:
        from engram.store.connect import migrate

        migrate(cluster.primary_url)
        cluster.wait_replayed()
        yield cluster
    finally:
        cluster.stop()
