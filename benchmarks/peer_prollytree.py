"""Peer benchmark: prollytree's ``VersionedKvStore`` (RocksDB or File backend) on engram's workload.

Usage::

    python benchmarks/peer_prollytree.py --backend rocksdb|file --items N --time-limit SECONDS --json OUT.json

Standalone: needs only the standard library, ``prollytree`` (PyPI, 0.4.x) and ``git`` on PATH, because
prollytree keeps its history in an enclosing git repository and shells out to ``git add`` on commit.
Each run works in a fresh ``git init``-ed temporary directory, with the store in a subdirectory (the
library refuses the repository root). Metrics whose phase did not finish before the time limit are
recorded as ``"timeout"``; ones the API cannot express are ``"unsupported"``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:
    import prollytree
except ImportError:  # pragma: no cover - depends on the environment
    prollytree = None

VALUE_BYTES = 300
ALPHABET = string.ascii_letters + string.digits + " .,:;-_/"
PHASES: dict[str, list[str]] = {
    "bulk_load": ["bulk_load_s", "bulk_load_items_per_s"],
    "put_commit": ["put_commit_p50_s", "put_commit_p99_s", "disk_bytes_per_commit"],
    "get_head": ["get_head_p50_s"],
    "get_old": ["get_old_commit_p50_s"],
    "checkout": ["checkout_branch_p50_s"],
    "diff": ["diff_10_p50_s"],
    "merge": ["merge_100x100_s"],
}


class Timeout(Exception):
    """Raised inside a phase once the run's time budget is spent."""


class Deadline:
    """Wall-clock budget shared by every phase of one run."""

    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def check(self) -> None:
        """Raise ``Timeout`` if the budget is exhausted."""
        if time.perf_counter() > self.end:
            raise Timeout


def key(i: int) -> bytes:
    """The i-th key of the shared workload."""
    return f"user-{i % 100}/prefs/ui.theme.{i}".encode()


def make_value(rng: random.Random) -> bytes:
    """A deterministic ~300-byte printable value."""
    return "".join(rng.choices(ALPHABET, k=VALUE_BYTES)).encode()


def p(samples: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds taken by one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def dir_bytes(root: str) -> int:
    """Total size of the regular files under ``root`` (the repo, including ``.git``)."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


class PeerRun:
    """One benchmark run against a fresh store; each ``phase_*`` method returns its metrics."""

    def __init__(self, backend: str, items: int, deadline: Deadline, workdir: str) -> None:
        self.items, self.deadline, self.repo = items, deadline, workdir
        self.rng = random.Random(42)
        for args in (["init", "-q"], ["config", "user.name", "bench"], ["config", "user.email", "b@x"]):
            subprocess.run(["git", *args], cwd=workdir, check=True)
        kind = {"rocksdb": prollytree.StorageBackend.RocksDB, "file": prollytree.StorageBackend.File}
        self.store = prollytree.VersionedKvStore(os.path.join(workdir, "data"), kind[backend])
        self.old_commit = ""

    def some_key(self) -> bytes:
        """A random key that exists in the store."""
        return key(self.rng.randrange(self.items))

    def phase_bulk_load(self) -> dict[str, Any]:
        """Insert N items and commit them as one commit."""
        pairs = [(key(i), make_value(self.rng)) for i in range(self.items)]
        start = time.perf_counter()
        for i, (k, v) in enumerate(pairs):
            if i % 1000 == 0:
                self.deadline.check()
            self.store.insert(k, v)
        self.old_commit = self.store.commit(f"bulk load {self.items}")
        elapsed = time.perf_counter() - start
        return {"bulk_load_s": elapsed, "bulk_load_items_per_s": self.items / elapsed}

    def phase_put_commit(self) -> dict[str, Any]:
        """50 single-item put+commit operations; also the disk growth per commit."""
        before, samples = dir_bytes(self.repo), []
        for n in range(50):
            self.deadline.check()
            k, v = self.some_key(), make_value(self.rng)
            samples.append(timed(lambda k=k, v=v, n=n: (self.store.insert(k, v), self.store.commit(f"p{n}"))))
        growth = (dir_bytes(self.repo) - before) / len(samples)
        return {
            "put_commit_p50_s": p(samples, 50),
            "put_commit_p99_s": p(samples, 99),
            "disk_bytes_per_commit": growth,
        }

    def phase_get_head(self) -> dict[str, Any]:
        """200 point gets on the working head."""
        samples = []
        for _ in range(200):
            self.deadline.check()
            k = self.some_key()
            samples.append(timed(lambda k=k: self.store.get(k)))
        return {"get_head_p50_s": p(samples, 50)}

    def phase_get_old(self) -> dict[str, Any]:
        """20 point reads at the bulk-load commit (51 commits back).

        prollytree has no keyed read at a ref and ``checkout`` accepts only branch names, so the
        only historical read is ``get_keys_at_ref(commit)``, which materialises the whole snapshot.
        """
        samples = []
        for _ in range(20):
            self.deadline.check()
            k = self.some_key()
            samples.append(timed(lambda k=k: dict(self.store.get_keys_at_ref(self.old_commit))[k]))
        return {"get_old_commit_p50_s": p(samples, 50)}

    def phase_checkout(self) -> dict[str, Any]:
        """5 timed checkouts of a side branch (one extra commit), each followed by a return to main."""
        self.store.create_branch("side")
        self.store.insert(key(0), make_value(self.rng))
        self.store.commit("side change")
        self.store.checkout("main")
        samples = []
        for _ in range(5):
            self.deadline.check()
            samples.append(timed(lambda: self.store.checkout("side")))
            self.store.checkout("main")
        return {"checkout_branch_p50_s": p(samples, 50)}

    def phase_diff(self) -> dict[str, Any]:
        """Diff two commits that differ in 10 items (5 timed runs)."""
        before = self.store.current_commit()
        for i in range(10):
            self.store.insert(key(i * 7 % self.items), make_value(self.rng))
        after = self.store.commit("ten changes")
        samples = []
        for _ in range(5):
            self.deadline.check()
            samples.append(timed(lambda: self.store.diff(before, after)))
        if len(self.store.diff(before, after)) != 10:
            raise RuntimeError("diff did not report 10 changes")
        return {"diff_10_p50_s": p(samples, 50)}

    def phase_merge(self) -> dict[str, Any]:
        """Three-way merge: 100 changes on a branch, 100 disjoint changes on main, merge into main."""
        half = self.items // 2
        self.store.create_branch("topic")
        for i in range(100):
            self.store.insert(key(i % half), make_value(self.rng))
        self.store.commit("topic: 100 changes")
        self.store.checkout("main")
        for i in range(100):
            self.store.insert(key(half + i % half), make_value(self.rng))
        self.store.commit("main: 100 changes")
        self.deadline.check()
        base = self.store.current_commit()
        elapsed = timed(lambda: self.store.merge("topic"))
        if len(self.store.diff(base, self.store.current_commit())) != 100:
            raise RuntimeError("merge did not bring in the branch's 100 changes")
        return {"merge_100x100_s": elapsed}


def run(backend: str, items: int, time_limit: float) -> dict[str, Any]:
    """Run every phase in order; on timeout, mark the current and all later phases ``"timeout"``."""
    results: dict[str, Any] = {"peer": "prollytree", "version": prollytree.__version__}
    results.update(backend=backend, items=items)
    deadline, started = Deadline(time_limit), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="peer-prollytree-") as workdir:
        bench = PeerRun(backend, items, deadline, workdir)
        timed_out = False
        for phase, metrics in PHASES.items():
            if not timed_out:
                try:
                    deadline.check()
                    results.update(getattr(bench, f"phase_{phase}")())
                    continue
                except Timeout:
                    timed_out = True
            results.update(dict.fromkeys(metrics, "timeout"))
        del bench  # release the RocksDB lock before the directory goes away
    results["wall_s"] = time.perf_counter() - started
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["rocksdb", "file"], default="rocksdb")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--json", dest="json_out", help="write the metrics here")
    args = parser.parse_args(argv)
    if prollytree is None:
        print("prollytree is not installed (pip install 'prollytree>=0.4'); skipping the peer benchmark.")
        return 0
    if args.items < 200:
        parser.error("--items must be at least 200 (the merge phase changes 2 x 100 distinct keys)")
    results = run(args.backend, args.items, args.time_limit)
    for name, value in results.items():
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"{name:<26} {shown}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
