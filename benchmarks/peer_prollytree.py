"""Peer benchmark: prollytree's ``VersionedKvStore`` (RocksDB or File backend) on engram's workload.

Usage::

    python benchmarks/peer_prollytree.py --backend rocksdb|file --items N --time-limit SECONDS --json OUT.json

Standalone: needs only the standard library, ``prollytree`` (PyPI, 0.4.x) and ``git`` on PATH, because
prollytree keeps its history in an enclosing git repository and shells out to ``git add`` on commit.
Each run works in a fresh ``git init``-ed temporary directory, with the store in a subdirectory (the
library refuses the repository root). The phases run in a child process that reports each phase's
metrics as it finishes; at the time limit the child is killed, since one prollytree call (``checkout``
rebuilds the whole tree) can outlast any budget, and every metric not reported is ``"timeout"``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import shutil
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

try:
    import prollytree
except ImportError:  # pragma: no cover - depends on the environment
    prollytree = None

VALUE_BYTES = 300
ALPHABET = string.ascii_letters + string.digits + " .,:;-_/"
# Phase name -> the metrics it reports, in run order (cheap and independent first, checkout last).
PHASES: dict[str, list[str]] = {
    "bulk_load": ["bulk_load_s", "bulk_load_items_per_s", "bulk_load_commit_s"],
    "put_commit": ["put_commit_p50_s", "put_commit_p99_s", "disk_bytes_per_commit"],
    "get_head": ["get_head_p50_s"],
    "get_old": ["get_old_commit_p50_s"],
    "diff": ["diff_10_p50_s"],
    "merge": ["merge_100x100_s"],
    "checkout": ["checkout_branch_p50_s"],
}


def key(i: int) -> bytes:
    """The i-th key of the shared workload."""
    return f"user-{i % 100}/prefs/ui.theme.{i}".encode()


def make_value(rng: random.Random) -> bytes:
    """A deterministic 300-byte printable value."""
    return "".join(rng.choices(ALPHABET, k=VALUE_BYTES)).encode()


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds taken by one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def dir_bytes(root: str) -> int:
    """Total size of the regular files under ``root`` (the repository, ``.git`` included)."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


class PeerRun:
    """One run against a fresh store; each ``phase_*`` method returns its metrics."""

    def __init__(self, backend: str, items: int, repo: str) -> None:
        self.items, self.repo, self.rng = items, repo, random.Random(42)
        kind = {"rocksdb": prollytree.StorageBackend.RocksDB, "file": prollytree.StorageBackend.File}
        self.store = prollytree.VersionedKvStore(os.path.join(repo, "data"), kind[backend])
        self.old_commit = ""

    def some_key(self) -> bytes:
        """A random key that exists in the store."""
        return key(self.rng.randrange(self.items))

    def phase_bulk_load(self) -> dict[str, Any]:
        """Insert N items and commit them as one commit."""
        pairs = [(key(i), make_value(self.rng)) for i in range(self.items)]
        start = time.perf_counter()
        for k, v in pairs:
            self.store.insert(k, v)
        staged = time.perf_counter()
        self.old_commit = self.store.commit(f"bulk load {self.items}")
        elapsed = time.perf_counter() - start
        return {
            "bulk_load_s": elapsed,
            "bulk_load_items_per_s": self.items / elapsed,
            "bulk_load_commit_s": elapsed - (staged - start),
        }

    def phase_put_commit(self) -> dict[str, Any]:
        """50 single-item put+commit operations; also the repository's growth per commit."""
        before, samples = dir_bytes(self.repo), []
        for n in range(50):
            k, v = self.some_key(), make_value(self.rng)
            samples.append(timed(lambda k=k, v=v, n=n: (self.store.insert(k, v), self.store.commit(f"p{n}"))))
        return {
            "put_commit_p50_s": pct(samples, 50),
            "put_commit_p99_s": pct(samples, 99),
            "disk_bytes_per_commit": (dir_bytes(self.repo) - before) / len(samples),
        }

    def phase_get_head(self) -> dict[str, Any]:
        """200 point gets on the working head."""
        keys = [self.some_key() for _ in range(200)]
        return {"get_head_p50_s": pct([timed(lambda k=k: self.store.get(k)) for k in keys], 50)}

    def phase_get_old(self) -> dict[str, Any]:
        """20 point reads at the bulk-load commit (50 commits back).

        prollytree has no keyed read at a ref and ``checkout`` takes only branch names, so the one
        historical read is ``get_keys_at_ref(commit)``, which materialises the snapshot and returns
        at most 1,024 pairs: with more items a point read at a commit is ``"unsupported"``.
        """
        if len(self.store.get_keys_at_ref(self.old_commit)) < self.items:
            return {"get_old_commit_p50_s": "unsupported"}
        keys = [self.some_key() for _ in range(20)]
        return {"get_old_commit_p50_s": pct([timed(lambda k=k: self.read_old(k)) for k in keys], 50)}

    def read_old(self, k: bytes) -> bytes:
        """Value of ``k`` at the bulk-load commit."""
        return dict(self.store.get_keys_at_ref(self.old_commit))[k]

    def phase_diff(self) -> dict[str, Any]:
        """Diff two commits that differ in 10 items (5 timed runs)."""
        before = self.store.current_commit()
        for i in range(10):
            self.store.insert(key(i * 7 % self.items), make_value(self.rng))
        after = self.store.commit("ten changes")
        samples = [timed(lambda: self.store.diff(before, after)) for _ in range(5)]
        if len(self.store.diff(before, after)) != 10:
            raise RuntimeError("diff did not report 10 changes")
        return {"diff_10_p50_s": pct(samples, 50)}

    def phase_merge(self) -> dict[str, Any]:
        """Three-way merge: 100 changes on a branch, 100 disjoint changes on main, merge into main."""
        half = self.items // 2
        self.store.create_branch("topic")  # cheap: switches without rebuilding the tree
        for i in range(100):
            self.store.insert(key(i), make_value(self.rng))
        self.store.commit("topic: 100 changes")
        self.store.checkout("main")
        for i in range(100):
            self.store.insert(key(half + i), make_value(self.rng))
        base = self.store.commit("main: 100 changes")
        elapsed = timed(lambda: self.store.merge("topic"))
        if len(self.store.diff(base, self.store.current_commit())) != 100:
            raise RuntimeError("merge did not bring in the branch's 100 changes")
        return {"merge_100x100_s": elapsed}

    def phase_checkout(self) -> dict[str, Any]:
        """5 branch switches, alternating main -> topic -> main ...; each is reported as it ends."""
        samples: list[float] = []
        for n in range(5):
            samples.append(timed(lambda n=n: self.store.checkout("topic" if n % 2 == 0 else "main")))
            emit({"checkout_branch_p50_s": pct(samples, 50), "checkout_branch_samples": len(samples)})
        return {}


def emit(metrics: dict[str, Any]) -> None:
    """Child side: send metrics to the parent as one JSON line."""
    print(json.dumps(metrics), flush=True)


def child(backend: str, items: int, repo: str) -> None:
    """Run every phase in order, reporting each one's metrics when it finishes."""
    bench = PeerRun(backend, items, repo)
    for phase in PHASES:
        emit(getattr(bench, f"phase_{phase}")())


def pump(stream: Any, lines: queue.Queue[str | None]) -> None:
    """Parent side: move the child's output lines into ``lines``, then ``None`` at its end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def run(backend: str, items: int, time_limit: float) -> dict[str, Any]:
    """Run the phases in a child process; kill it at ``time_limit`` and mark what is missing."""
    results: dict[str, Any] = {"peer": "prollytree", "version": prollytree.__version__}
    results.update(backend=backend, items=items, time_limit_s=time_limit)
    started, repo = time.perf_counter(), tempfile.mkdtemp(prefix="peer-prollytree-")
    try:
        for args in (["init", "-q"], ["config", "user.name", "bench"], ["config", "user.email", "b@x"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", repo, "--backend", backend]
        proc = subprocess.Popen([*cmd, "--items", str(items)], stdout=subprocess.PIPE, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
        while (left := started + time_limit - time.perf_counter()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:  # the child exited: reap it so it is not taken for a timeout
                proc.wait()
                break
            if line.startswith("{"):  # skip anything else the library prints
                results.update(json.loads(line))
        timed_out = proc.poll() is None
        proc.kill()
        exit_code = proc.wait()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    missing = "timeout" if timed_out else f"error (child exit {exit_code})"
    for metric in (m for metrics in PHASES.values() for m in metrics):
        results.setdefault(metric, missing)
    results["wall_s"] = time.perf_counter() - started
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--backend", choices=["rocksdb", "file"], default="rocksdb")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--json", dest="json_out", help="write the metrics here")
    parser.add_argument("--child", metavar="REPO", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if prollytree is None:
        print("prollytree is not installed (pip install 'prollytree>=0.4'); skipping the peer benchmark.")
        return 0
    if args.items < 200:
        parser.error("--items must be at least 200 (the merge phase changes 2 x 100 distinct keys)")
    if args.child:
        child(args.backend, args.items, args.child)
        return 0
    results = run(args.backend, args.items, args.time_limit)
    for name, value in results.items():
        print(f"{name:<26} {value:.6g}" if isinstance(value, float) else f"{name:<26} {value}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
