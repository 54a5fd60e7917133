"""The web UI's timeline (issue #16): server time of ``GET /v1/timeline`` pages on long histories.

Usage::

    python benchmarks/bench_ui.py                       # 10,000 and 100,000 commits
    python benchmarks/bench_ui.py --sizes 2000 --runs 5 # smoke run

Each size builds a fresh SQLite store (``synchronous=normal``) with one item per commit written through the
repository (``Repository.commit_edits``, one minute apart under a simulated clock, so the reflog holds those
times as a store that grew for real would; commit ``i`` changes key
``k<i % 200>`` of ``users.u<i % 50>``, by one of three authors), then serves it with ``create_app`` and times
requests in process (``fastapi.testclient``: the server's time, no network): the first call after the store is
open (cold: no commit cached), then the median of ``--runs`` warm calls. The UI's first page is 50 commits
with their changed-item counts. Progress goes to stderr, the markdown table to stdout, figures to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

import engram
from engram import clock, codec
from engram.backends.sqlite import set_synchronous
from engram.objects import Record, encode_record
from engram.server import ServerConfig, create_app

AUTHORS = ("agent:chat", "agent:scheduler", "agent:personalization")


def build(path: Path, commits: int) -> float:
    """Write ``commits`` one-item commits; returns the seconds it took."""
    set_synchronous(path, "normal")
    started = time.perf_counter()
    step = timedelta(minutes=1)
    first = datetime.now(UTC) - step * (commits + 1)
    # The store opens at the simulated start, so its reflog holds the history's times (as-of lookups use it).
    with clock.simulated(first - step) as sim, engram.open(f"sqlite:///{path}", embedder="hashing") as mem:
        repo = mem.repo
        for i in range(commits):
            sim.set(first + step * i)
            now = clock.now_ms()
            record = Record({"text": f"memory {i}", "n": i}, now, now, author=AUTHORS[i % 3], sources=(f"msg-{i}",))
            raw = codec.encode_key(("users", f"u{i % 50}"), f"k{i % 200}")
            repo.commit_edits("main", {raw: encode_record(record)}, author=AUTHORS[i % 3], message=f"write {i}")
            if i and i % 10_000 == 0:
                print(f"  {i} commits, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return time.perf_counter() - started


def timed(client: TestClient, params: dict[str, Any], runs: int) -> dict[str, Any]:
    """Cold (first) and warm (median of ``runs``) milliseconds of one timeline request, and its page."""
    times, body = [], {}
    for _ in range(runs + 1):
        start = time.perf_counter()
        response = client.get("/v1/timeline", params=params)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.text
        body = response.json()
    return {"cold_ms": round(times[0], 1), "warm_ms": round(statistics.median(times[1:]), 1),
            "commits": len(body["commits"]), "scanned": body["scanned"], "cursor": body["cursor"]}  # fmt: skip


def measure(size: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="engram-bench-ui-") as tmp:
        path = Path(tmp) / "store.db"
        print(f"building {size} commits", file=sys.stderr)
        seconds = build(path, size)
        out: dict[str, Any] = {"commits": size, "build_s": round(seconds, 1)}
        middle = (datetime.now(UTC) - timedelta(minutes=size // 2)).isoformat()
        cases = {
            "first page (50)": {"limit": 50},
            "as of the middle (50)": {"ref": f"main@{{{middle}}}", "limit": 50},
            "author filter (50)": {"author": AUTHORS[1], "limit": 50},
            "one key (50; scans <= 5000)": {"namespace": "users.u7", "key": "k7", "limit": 50},
        }
        with TestClient(create_app(ServerConfig(store=str(path), embedder="hashing"))) as client:
            assert client.get("/v1/whoami").status_code == 200  # the store is open, no commit cached yet
            for name, params in cases.items():
                out[name] = timed(client, params, runs)
            cursor = out["first page (50)"]["cursor"]
            out["second page (50, by cursor)"] = timed(client, {"limit": 50, "cursor": cursor}, runs)
        for result in out.values():
            if isinstance(result, dict):
                result.pop("cursor", None)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "ui.json"))
    args = parser.parse_args()
    load = os.getloadavg()
    results = [measure(int(n), args.runs) for n in args.sizes.split(",")]
    cases = [k for k, v in results[0].items() if isinstance(v, dict)]
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs\n")
    print("| request | " + " | ".join(f"{r['commits']:,} commits: cold / warm ms (commits, scanned)" for r in results)
          + " |")  # fmt: skip
    print("|---|" + "---|" * len(results))
    for case in cases:
        cells = [f"{r[case]['cold_ms']} / {r[case]['warm_ms']} ({r[case]['commits']}, {r[case]['scanned']})"
                 for r in results]  # fmt: skip
        print(f"| {case} | " + " | ".join(cells) + " |")
    print("\nbuild: " + ", ".join(f"{r['commits']:,} commits in {r['build_s']} s" for r in results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"load": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
