"""Compressed remotes (docs/adr/0004-compression.md): bytes per item on the remote before and after compression, and
restore time from each.

Usage::

    python benchmarks/bench_compression.py --items 30000
    python benchmarks/bench_compression.py --items 30000 --remote dir:///tmp/engram-bench-zstd

A store of typical JSON memories (sentences of common words, tags, a user, a timestamp: ~330 bytes each) is backed
up to the remote (default: a private SeaweedFS on loopback, see ``bench_ops.py``), then copied to a sibling remote
as a version without compression would have written it (the same packs and loose chunks, uncompressed). Both are
restored (twice; the faster run counts) into fresh stores. Progress goes to stderr, a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from bench_ops import seaweedfs

import engram
from engram.backends.compression import compress, decompress
from engram.ops.backup import create_backup, get_backup, restore_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.packs import PACKS, decode_index, make_packs
from engram.ops.remotes.stores import CHUNKS, Remote

_WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
    for i in range(3000)
]
_WEIGHTS = [1 / (r + 1) for r in range(len(_WORDS))]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _item(rng: random.Random, i: int) -> dict[str, object]:
    words = rng.choices(_WORDS, weights=_WEIGHTS, k=rng.randint(15, 45))
    return {"text": " ".join(words).capitalize() + ".", "kind": rng.choice(["preference", "fact", "episode"]),
            "user": f"user-{i % 50}", "tags": rng.sample(_WORDS[:40], 3), "importance": round(rng.random(), 2),
            "created": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z"}  # fmt: skip


def _sibling(url: str, suffix: str) -> str:
    path, query = url.split("?", 1) if "?" in url else (url, "")
    return path.rstrip("/") + suffix + (f"?{query}" if query else "")


def _stored_bytes(remote: Remote) -> int:
    bucket = remote.chunks.bucket
    keys = [key for prefix in (PACKS, CHUNKS) for key, _ in bucket.iter_keys(prefix) if not key.endswith(".idx")]
    return sum(len(data) for data in bucket.get_many(keys).values())


def _uncompressed_copy(source: Remote, target: Remote) -> None:
    """Every object of ``source`` into ``target``, chunks as a version without compression wrote them."""
    keys = [key for key, _ in source.chunks.bucket.iter_keys("")]
    for start in range(0, len(keys), 200):
        found = source.chunks.bucket.get_many(keys[start : start + 200])
        out: dict[str, bytes] = {}
        for key, data in found.items():
            if key.startswith(CHUNKS):
                out[key] = decompress(data)
            elif key.endswith(".idx"):
                name = key.removesuffix(".idx")
                pack = decode_index(name, data)
                body = source.chunks.bucket.get_many([name + ".pack"])[name + ".pack"]
                chunks = [(cid, decompress(body[at : at + n])) for cid, (at, n) in pack.entries.items()]
                [(raw, raw_body)] = make_packs(chunks, pack.written, limit=1 << 62)
                assert raw.name == name
                out[name + ".pack"], out[key] = raw_body, raw.encode_index()
            elif not key.endswith(".pack"):
                out[key] = data
        target.chunks.bucket.put_many(out)


def run(items: int, url: str, folder: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"items": items, "remote": url.split("://")[0]}
    mem = engram.open(str(folder / "source"), embedder=None, author="bench")
    rng = random.Random(5)
    started = time.perf_counter()
    for start in range(0, items, 1000):
        with mem.transaction(f"load {start}") as tx:
            for i in range(start, min(items, start + 1000)):
                tx.put(("agents", f"a{i % 20}"), f"m{i:06d}", _item(rng, i))
    _log(f"loaded {items:,} items in {time.perf_counter() - started:.1f} s")
    chunks = mem.repo.chunks.get_many(list(mem.repo.chunks.iter_ids()))
    raw = sum(len(data) for data in chunks.values())
    results["zlib1_per_chunk_pct"] = round(100 * sum(len(zlib.compress(d, 1)) for d in chunks.values()) / raw, 1)
    results["zstd_per_chunk_pct"] = round(100 * sum(len(compress(d)) for d in chunks.values()) / raw, 1)
    frames = [compress(d) for d in chunks.values()]
    started = time.perf_counter()
    for frame in frames:
        decompress(frame)
    results["zstd_decode_mb_s"] = round(raw / 1e6 / (time.perf_counter() - started))
    deflated = [zlib.compress(d, 1) for d in chunks.values()]
    started = time.perf_counter()
    for frame in deflated:
        zlib.decompress(frame)
    results["zlib_decode_mb_s"] = round(raw / 1e6 / (time.perf_counter() - started))

    remote = open_remote(url)
    started = time.perf_counter()
    create_backup(mem.repo, remote, "b1")
    results["backup_s"] = round(time.perf_counter() - started, 2)
    old_url = _sibling(url, "-uncompressed")
    _uncompressed_copy(open_remote(url), open_remote(old_url))
    before, after = _stored_bytes(open_remote(old_url)), _stored_bytes(open_remote(url))
    results.update(bytes_per_item_before=round(before / items), bytes_per_item_after=round(after / items),
                   ratio_pct=round(100 * after / before, 1))  # fmt: skip
    _log(f"remote: {before / items:.0f} -> {after / items:.0f} B per item ({100 * after / before:.1f} %)")
    for label, which in (("before", old_url), ("after", url), ("before", old_url), ("after", url)):
        target = engram.open(str(folder / f"restore-{label}-{time.monotonic_ns()}"), embedder=None)
        fresh = open_remote(which)
        started = time.perf_counter()
        report = restore_backup(fresh, get_backup(fresh, "b1"), target.repo)
        seconds = time.perf_counter() - started
        assert report.fsck.ok and target.repo.chunks.get_many(list(chunks)) == chunks
        key = f"restore_{label}_s"
        results[key] = round(min(seconds, results.get(key, seconds)), 2)
        _log(f"restore from the {label} remote: {seconds:.2f} s")
        target.close()
        fresh.close()
    mem.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=30_000)
    parser.add_argument("--remote", help="Remote URL (default: a private SeaweedFS S3 server).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engram-bench-zstd-") as tmp:
        folder = Path(tmp)
        if args.remote:
            results = run(args.items, args.remote, folder)
        else:
            (folder / "s3").mkdir()
            with seaweedfs(folder / "s3") as url:
                results = run(args.items, url, folder)
    print(f"| {results['items']:,} typical JSON items -> {results['remote']} | uncompressed | zstd (per chunk) |")
    print("|---|---|---|")
    print(f"| remote bytes per item | {results['bytes_per_item_before']} | {results['bytes_per_item_after']} "
          f"({results['ratio_pct']} %) |")  # fmt: skip
    print(f"| restore (best of 2) | {results['restore_before_s']} s | {results['restore_after_s']} s |")
    print(f"| per chunk: zlib-1 / zstd-3 size | | {results['zlib1_per_chunk_pct']} % / "
          f"{results['zstd_per_chunk_pct']} % |")  # fmt: skip
    print(f"| decode speed: zlib / zstd | | {results['zlib_decode_mb_s']} / {results['zstd_decode_mb_s']} MB/s |")


if __name__ == "__main__":
    main()
