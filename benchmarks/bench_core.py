"""Core benchmark of engram on SQLite: bulk load, single-item commits, reads now and in the past,
``at(ref)``, diff, three-way merge and bytes per commit, against the project's targets.

Usage::

    python benchmarks/bench_core.py --sizes 10000,100000,1000000 --out benchmarks/out/core.json
    python benchmarks/bench_core.py --quick          # smoke run: N = 2000, short history, peer 60 s

Each size works in a fresh temporary directory. Items are ~300-byte JSON values
``{"text": <280 chars>, "n": i}`` at namespace ``("user-{i % 100}", "prefs")``, key ``ui.theme.{i}``.
When ``benchmarks/peer_prollytree.py`` and ``prollytree`` are available, the same workload runs on
prollytree (RocksDB and File backends) in a subprocess, and the table shows ours/theirs ratios.
Progress goes to stderr; the markdown table to stdout; every figure to the JSON file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import engram

HERE = Path(__file__).resolve().parent
PEER = HERE / "peer_prollytree.py"
_TEXT = "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz      .,ABCDEFGHIJ0123456789", k=1 << 16))
MERGE_MAX = 100_000
Row = dict[str, Any]
PeerResults = dict[str, dict[str, dict[str, Any]]]
OLD_COMMITS = 1_000

# metric -> (label, unit, target, "max" (value <= target) or "min", target applies at N, peer metric, its unit in ours)
METRICS: dict[str, tuple[str, str, float | None, str, int | None, str, float]] = {
    "bulk_load_items_per_s": ("bulk load", "items/s", 20_000, "min", None, "bulk_load_items_per_s", 1),
    "put_commit_p50_ms": ("single-item commit p50", "ms", 2.0, "max", 1_000_000, "put_commit_p50_s", 1000),
    "put_commit_p99_ms": ("single-item commit p99", "ms", None, "max", None, "put_commit_p99_s", 1000),
    "get_head_p50_ms": ("get at head p50", "ms", None, "max", None, "get_head_p50_s", 1000),
    "get_head_p99_ms": ("get at head p99", "ms", None, "max", None, "", 1),
    "get_old_p50_ms": (f"get {OLD_COMMITS} commits back p50", "ms", None, "max", None, "get_old_commit_p50_s", 1000),
    "get_old_p99_ms": (f"get {OLD_COMMITS} commits back p99", "ms", None, "max", None, "", 1),
    "at_commit_p50_ms": ("at(commit id) p50 in the N-item store", "ms", 1.0, "max", None, "", 1),
    "diff_10_p50_ms": ("diff of 10 changes p50", "ms", 10.0, "max", 1_000_000, "diff_10_p50_s", 1000),
    "merge_100x100_s": ("merge 100+100 changes (min(N,100k) map)", "s", None, "max", None, "merge_100x100_s", 1),
    "bytes_per_commit": ("bytes per single-item commit", "B", 20_000, "max", None, "disk_bytes_per_commit", 1),
}


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def item(i: int) -> tuple[tuple[str, str], str, dict[str, Any]]:
    """The i-th item: (namespace, key, ~300-byte value), deterministic and cheap to make."""
    start = (i * 7919) % (len(_TEXT) - 280)
    return (f"user-{i % 100}", "prefs"), f"ui.theme.{i}", {"text": _TEXT[start : start + 280], "n": i}


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def time_each(fn: Callable[..., Any], calls: Iterable[tuple[Any, ...]]) -> list[float]:
    """Milliseconds taken by ``fn(*args)`` for each ``args`` of ``calls``."""
    samples = []
    for args in calls:
        start = time.perf_counter()
        fn(*args)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def p50_p99(name: str, samples: list[float]) -> dict[str, float]:
    """``{name_p50_ms, name_p99_ms}`` of samples in ms."""
    return {f"{name}_p50_ms": pct(samples, 50), f"{name}_p99_ms": pct(samples, 99)}


def open_store(directory: str) -> engram.Memory:
    """A fresh SQLite-backed store in ``directory``."""
    return engram.open(f"sqlite:///{directory}/bench.db")


def put_random(mem: engram.Memory, n: int, rng: random.Random, salt: int) -> engram.Commit:
    """One single-item commit replacing a random existing item."""
    ns, key, value = item(rng.randrange(n))
    value["n"] = salt
    return mem.put(ns, key, value)


# ----------------------------------------------------------------------------------- metrics


def bench_bulk_load(mem: engram.Memory, n: int) -> dict[str, float]:
    """N puts in one transaction (one commit) -> items/s."""
    start = time.perf_counter()
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(*item(i))
    elapsed = time.perf_counter() - start
    return {"bulk_load_s": elapsed, "bulk_load_items_per_s": n / elapsed}


def bench_put_commit(mem: engram.Memory, n: int, rng: random.Random, runs: int = 200) -> dict[str, float]:
    """``runs`` single-item crash-safe commits (``mem.put``) at N items -> p50/p99 ms."""
    return p50_p99("put_commit", time_each(lambda r: put_random(mem, n, rng, -r), ((r,) for r in range(runs))))


def bench_get_head(mem: engram.Memory, n: int, rng: random.Random, runs: int = 1000) -> dict[str, float]:
    """Point gets of ``runs`` random keys at the head -> p50/p99 ms."""
    keys = [item(rng.randrange(n))[:2] for _ in range(runs)]
    return p50_p99("get_head", time_each(mem.get, keys))


def bench_get_old(mem: engram.Memory, n: int, rng: random.Random, runs: int = 1000) -> dict[str, float]:
    """Make OLD_COMMITS more single-put commits, then point gets at the commit before them through
    ``mem.at(commit_id_hex)`` (the view is made once), and ``mem.at(commit_id_hex)`` itself at N."""
    old = mem.head.id.hex()
    for r in range(OLD_COMMITS):
        put_random(mem, n, rng, -1_000_000 - r)
    view = mem.at(old)
    keys = [item(rng.randrange(n))[:2] for _ in range(runs)]
    samples = time_each(view.get, keys)
    assert view.get(*keys[0]) is not None
    at_samples = time_each(mem.at, [(old,)] * 100)  # at(ref) in a store of N items
    return {**p50_p99("get_old", samples), "at_commit_p50_ms": pct(at_samples, 50)}


def bench_diff(mem: engram.Memory, n: int, rng: random.Random, runs: int = 20) -> dict[str, float]:
    """``mem.diff(a, b)`` where b changes 10 items of a -> p50/p99 ms."""
    before = mem.head.id.hex()
    with mem.transaction("ten changes") as tx:
        for i in rng.sample(range(n), 10):
            ns, key, value = item(i)
            tx.put(ns, key, {**value, "n": -i - 1})
    after = mem.head.id.hex()
    assert len(mem.diff(before, after)) == 10
    return p50_p99("diff_10", time_each(mem.diff, [(before, after)] * runs))


def bench_merge(mem: engram.Memory, n: int, rng: random.Random, runs: int = 3) -> dict[str, float]:
    """Branch, 100 puts on each side (one transaction each, distinct keys), ``mem.merge`` -> median s."""
    samples = []
    for r in range(runs):
        mem.create_branch(f"side-{r}")
        keys = rng.sample(range(n), 200)
        for branch, part in ((f"side-{r}", keys[:100]), ("main", keys[100:])):
            mem.checkout(branch)
            with mem.transaction(f"100 changes on {branch}") as tx:
                for i in part:
                    ns, key, value = item(i)
                    tx.put(ns, key, {**value, "n": -r - 2})
        before = mem.head.id.hex()
        samples += [ms / 1000 for ms in time_each(mem.merge, [(f"side-{r}",)])]
        assert len(mem.diff(before)) == 100
    return {"merge_100x100_s": pct(samples, 50), "merge_items": n}


def bench_bytes_per_commit(mem: engram.Memory, n: int, rng: random.Random, runs: int = 200) -> dict[str, float]:
    """Growth of the database (file + WAL, after a TRUNCATE checkpoint) per single-item commit."""
    db = mem.repo.refs.db  # type: ignore[attr-defined]

    def size() -> int:
        db.run(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
        return sum(os.path.getsize(p) for p in (db.path, db.path + "-wal") if os.path.exists(p))

    before = size()
    for r in range(runs):
        put_random(mem, n, rng, -2_000_000 - r)
    return {"bytes_per_commit": (size() - before) / runs}


def bench_at_ref(points: list[int], samples: int = 200) -> dict[str, dict[str, float]]:
    """``mem.at(ref)`` (resolve + view) by commit id, tag and ``main@{time}``, with growing history.

    A separate small store gets single-put commits; at each point of ``points`` (commits so far)
    each ref kind is resolved ``samples`` times, at random commits of the history -> p50/p99 ms.
    """
    rng, out = random.Random(3), {}
    with tempfile.TemporaryDirectory(prefix="engram-bench-at-") as tmp:
        mem = open_store(tmp)
        commits: list[engram.Commit] = []
        for i in range(1, max(points) + 1):
            commits.append(mem.put(*item(i % 1000)))
            if i == 1:
                mem.tag("first")
            if i in points:
                picks = [rng.choice(commits) for _ in range(samples)]
                stamp = [datetime.fromtimestamp(c.time / 1000, UTC).isoformat(timespec="milliseconds") for c in picks]
                res = {
                    **p50_p99("at_commit", time_each(mem.at, [(c.id.hex(),) for c in picks])),
                    **p50_p99("at_tag", time_each(mem.at, [("first",)] * samples)),
                    **p50_p99("at_time", time_each(mem.at, [(f"main@{{{t}}}",) for t in stamp])),
                }
                out[str(i)] = res
                log(f"at(ref) with {i} commits: " + ", ".join(f"{k}={v:.3f}" for k, v in res.items()))
        mem.close()
    return out


def phase(n: int, name: str, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """Run one measurement with progress lines."""
    log(f"N={n}: {name} ...")
    start = time.perf_counter()
    res = run()
    log(f"N={n}: {name} done in {time.perf_counter() - start:.1f}s")
    return res


def bench_size(n: int) -> dict[str, float]:
    """Every per-size metric on a fresh store of N items."""
    rng, res = random.Random(n), {}
    with tempfile.TemporaryDirectory(prefix=f"engram-bench-{n}-") as tmp:
        mem = open_store(tmp)
        phases: list[tuple[str, Callable[[], dict[str, float]]]] = [
            ("bulk load", lambda: bench_bulk_load(mem, n)),
            ("get at head", lambda: bench_get_head(mem, n, rng)),
            ("single-item commits", lambda: bench_put_commit(mem, n, rng)),
            ("bytes per commit", lambda: bench_bytes_per_commit(mem, n, rng)),
            (f"get {OLD_COMMITS} commits back", lambda: bench_get_old(mem, n, rng)),
            ("diff", lambda: bench_diff(mem, n, rng)),
        ]
        if n <= MERGE_MAX:
            phases.append(("merge", lambda: bench_merge(mem, n, rng)))
        for name, run in phases:
            res.update(phase(n, name, run))
        mem.close()
    if n > MERGE_MAX:  # the merge runs on a map of MERGE_MAX items
        with tempfile.TemporaryDirectory(prefix="engram-bench-merge-") as tmp:
            mem = open_store(tmp)
            phase(n, f"load {MERGE_MAX:,} items for the merge", lambda: bench_bulk_load(mem, MERGE_MAX))
            res.update(phase(n, "merge", lambda: bench_merge(mem, MERGE_MAX, rng)))
            mem.close()
    return res


def run_peer(sizes: list[int], time_limit: float) -> PeerResults:
    """prollytree on the same workload, per backend, at each size until one does not finish in time."""
    out: PeerResults = {}
    for backend in ("rocksdb", "file"):
        out[backend] = {}
        for n in sorted(sizes):
            log(f"peer prollytree/{backend}: N={n} (limit {time_limit:.0f}s) ...")
            with tempfile.TemporaryDirectory(prefix="engram-bench-peer-") as tmp:
                dest = Path(tmp) / "peer.json"
                cmd = [sys.executable, str(PEER), "--backend", backend, "--items", str(n)]
                cmd += ["--time-limit", str(time_limit), "--json", str(dest)]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit + 120)
                if proc.returncode or not dest.exists():
                    log(f"peer failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
                    break
                out[backend][str(n)] = res = json.loads(dest.read_text())
            log(f"peer prollytree/{backend}: N={n} took {res.get('wall_s', 0):.0f}s")
            if res.get("wall_s", 0) >= time_limit or "timeout" in res.values():  # larger sizes would not finish
                res["stderr_tail"] = proc.stderr.strip()[-1000:]
                break
    return out


# ------------------------------------------------------------------------------------ report


def fmt(value: Any, unit: str = "") -> str:
    """A figure for the table."""
    if not isinstance(value, int | float):
        return str(value)
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}".strip()


def table(sizes_res: dict[str, dict[str, float]], at_res: dict[str, dict[str, float]], peer: PeerResults) -> list[Row]:
    """Rows: metric, N, value, target, met, and for each peer backend its figure and our ratio."""
    rows: list[Row] = []
    for n, res in sizes_res.items():
        for metric, (label, unit, target, kind, at_n, peer_metric, factor) in METRICS.items():
            row: Row = {"metric": label, "N": n, "value": res[metric], "unit": unit, "target": None, "met": None}
            if target is not None:
                row["target"] = (
                    f"{'<=' if kind == 'max' else '>='} {fmt(target, unit)}{f' at {at_n:,}' if at_n else ''}"
                )
                row["met"] = res[metric] <= target if kind == "max" else res[metric] >= target
            for backend, by_n in peer.items():
                theirs = by_n.get(n, {}).get(peer_metric) if peer_metric else None
                if isinstance(theirs, int | float):
                    row[backend] = theirs * factor
                    row[f"ours/{backend}"] = res[metric] / (theirs * factor) if theirs else None
                elif theirs is not None:
                    row[backend] = theirs
            rows.append(row)
    for history, res in at_res.items():
        for kind in ("commit", "tag", "time"):
            value, label = res[f"at_{kind}_p50_ms"], f"at(ref) by {kind} p50 (history {int(history):,})"
            rows.append(
                {"metric": label, "N": "-", "value": value, "unit": "ms", "target": "<= 1 ms", "met": value <= 1}
            )
    return rows


def markdown(rows: list[Row], backends: list[str]) -> str:
    """The rows as a markdown table."""
    head = ["metric", "N", "value", "target", "met?"]
    for b in backends:
        head += [f"prollytree {b}", f"ours/{b}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**NO**")
        n = r["N"] if r["N"] == "-" else f"{int(r['N']):,}"
        cells = [r["metric"], n, fmt(r["value"], r["unit"]), r["target"] or "-", met]
        for b in backends:
            theirs, ratio = r.get(b), r.get(f"ours/{b}")
            cells += [fmt(theirs, r["unit"]) if theirs is not None else "-", f"{ratio:.3g}x" if ratio else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated item counts")
    parser.add_argument("--out", default=str(HERE / "out" / "core.json"), help="JSON output file")
    parser.add_argument("--quick", action="store_true", help="smoke run: N=2000, history up to 1,000, peer 60 s")
    parser.add_argument("--no-peer", action="store_true", help="skip the prollytree comparison")
    parser.add_argument("--peer-time-limit", type=float, help="seconds per prollytree run (600; 60 with --quick)")
    args = parser.parse_args(argv)
    sizes = [2000] if args.quick else [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    points = [1, 100, 1000] if args.quick else [1, 1000, 10_000]
    started = time.perf_counter()
    git = subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"], capture_output=True, text=True)
    commit = git.stdout.strip() or None  # the source measured (taken now: others may commit during the run)

    sizes_res = {str(n): bench_size(n) for n in sizes}
    log("at(ref) on a separate store ...")
    at_res = bench_at_ref(points)
    peer: PeerResults = {}
    if args.no_peer or not PEER.exists() or importlib.util.find_spec("prollytree") is None:
        log("peer benchmark skipped (disabled, or peer_prollytree.py / prollytree missing)")
    else:
        peer = run_peer(sizes, args.peer_time_limit or (60.0 if args.quick else 600.0))

    rows = table(sizes_res, at_res, peer)
    print(markdown(rows, list(peer)), flush=True)
    meta: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    meta.update(python=platform.python_version(), sqlite=sqlite3.sqlite_version, platform=platform.platform())
    meta.update(engram_commit=commit)
    # other work on the machine skews the fsync-bound figures: keep the load with them
    meta.update(cpus=os.cpu_count(), loadavg_at_end=os.getloadavg(), wall_s=time.perf_counter() - started)
    result = {"meta": meta, "sizes": sizes_res, "at_ref": at_res, "peer": peer, "table": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    log(f"done in {meta['wall_s']:.0f}s; figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
