"""Compressed remotes and Redis values (docs/adr/0005-compression.md): bytes per item on the remote uncompressed, as
plain zstd frames and with the trained dictionary, restore time from each, and Redis memory per cached chunk.

Usage::

    python benchmarks/bench_compression.py --items 30000
    python benchmarks/bench_compression.py --items 30000 --remote dir:///tmp/engram-bench-zstd
    python benchmarks/bench_compression.py --items 30000 --redis redis://127.0.0.1:6379/0

A store of typical JSON memories (sentences of common words, tags, a user, a timestamp: ~330 bytes each) is backed
up to the remote (default: a private SeaweedFS on loopback, see ``bench_ops.py``), then copied to two sibling
remotes as earlier versions wrote it (the same packs and loose chunks: uncompressed, and one plain zstd frame per
chunk without a dictionary). All three are restored (``--rounds`` times each, in rotating turns; the fastest run counts)
into fresh stores. With ``--redis``, every chunk is cached through :class:`RedisChunkCache` (under a unique
prefix, removed after) and ``MEMORY USAGE`` of each value is compared with the chunk cached as it is. Progress goes
to stderr, a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from bench_ops import seaweedfs

import engram
from engram.backends import MemoryChunkStore
from engram.backends.compression import Dictionary, compress, decompress, frame_dictionary
from engram.backends.redis import RedisChunkCache, open_redis
from engram.ops.backup import create_backup, get_backup, restore_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.packs import PACKS, decode_index, make_packs
from engram.ops.remotes.stores import CHUNKS, DICTS, Remote

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
    keys = [key for p in (PACKS, CHUNKS, DICTS) for key, _ in bucket.iter_keys(p) if not key.endswith(".idx")]
    return sum(len(data) for data in bucket.get_many(keys).values())


def _older_copy(source: Remote, target: Remote, plain_frames: bool) -> None:
    """Every object of ``source`` into ``target``, chunks as an earlier version wrote them: uncompressed, or (with
    ``plain_frames``) one zstd frame per chunk without a dictionary."""

    def stored(data: bytes) -> bytes:
        raw = decompress(data, source.chunks.dictionary(frame_dictionary(data)))
        return compress(raw) if plain_frames else raw

    keys = [key for key, _ in source.chunks.bucket.iter_keys("") if not key.startswith(DICTS)]
    for start in range(0, len(keys), 200):
        found = source.chunks.bucket.get_many(keys[start : start + 200])
        out: dict[str, bytes] = {}
        for key, data in found.items():
            if key.startswith(CHUNKS):
                out[key] = stored(data)
            elif key.endswith(".idx"):
                name = key.removesuffix(".idx")
                pack = decode_index(name, data)
                body = source.chunks.bucket.get_many([name + ".pack"])[name + ".pack"]
                chunks = [(cid, stored(body[at : at + n])) for cid, (at, n) in pack.entries.items()]
                [(raw, raw_body)] = make_packs(chunks, pack.written, limit=1 << 62)
                assert raw.name == name
                out[name + ".pack"], out[key] = raw_body, raw.encode_index()
            elif not key.endswith(".pack"):
                out[key] = data
        target.chunks.bucket.put_many(out)


def _redis(url: str, chunks: dict[bytes, bytes]) -> dict[str, Any]:
    """Redis memory per cached chunk: values of the cache (dictionary trained from the first chunks) against the
    chunks set as they are, and the dictionary's own memory."""
    client = open_redis(url, timeout=10)
    prefix = f"engram-bench-{uuid.uuid4().hex}:"
    try:
        RedisChunkCache(MemoryChunkStore(), client, prefix=prefix).put_many(chunks)
        for cid, data in chunks.items():
            client.set(f"{prefix}raw:{cid.hex()}", data)
        used = sum(int(client.memory_usage(f"{prefix}default:c:{cid.hex()}") or 0) for cid in chunks)
        before = sum(int(client.memory_usage(f"{prefix}raw:{cid.hex()}") or 0) for cid in chunks)
        dicts = sum(int(client.memory_usage(key) or 0) for key in client.scan_iter(match=f"{prefix}default:d:*"))
        plain = 0
        for cid, data in chunks.items():
            client.set(f"{prefix}plain:{cid.hex()}", compress(data))
            plain += int(client.memory_usage(f"{prefix}plain:{cid.hex()}") or 0)
    finally:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
        client.close()
    n = len(chunks)
    return {"redis_before": round(before / n), "redis_plain": round(plain / n), "redis_after": round(used / n),
            "redis_dict": dicts, "redis_chunks": n}  # fmt: skip


def run(items: int, url: str, folder: Path, redis_url: str | None = None, rounds: int = 2) -> dict[str, Any]:
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
    (key,) = [key for key, _ in remote.chunks.bucket.iter_keys(DICTS)]
    dictionary = Dictionary.load(remote.chunks.bucket.get_many([key])[key])
    framed = [compress(d, dictionary) for d in chunks.values()]
    started = time.perf_counter()
    for frame in framed:
        decompress(frame, dictionary)
    results["dict_decode_mb_s"] = round(raw / 1e6 / (time.perf_counter() - started))
    results["dict_kb"] = round(len(dictionary.data) / 1024)
    old_url, plain_url = _sibling(url, "-uncompressed"), _sibling(url, "-plain")
    _older_copy(open_remote(url), open_remote(old_url), plain_frames=False)
    _older_copy(open_remote(url), open_remote(plain_url), plain_frames=True)
    before, plain = _stored_bytes(open_remote(old_url)), _stored_bytes(open_remote(plain_url))
    after = _stored_bytes(open_remote(url))
    results.update(bytes_per_item_before=round(before / items), bytes_per_item_plain=round(plain / items),
                   bytes_per_item_after=round(after / items), plain_pct=round(100 * plain / before, 1),
                   ratio_pct=round(100 * after / before, 1))  # fmt: skip
    _log(f"remote: {before / items:.0f} -> {plain / items:.0f} (plain frames) -> {after / items:.0f} B per item "
         f"({100 * after / before:.1f} %)")  # fmt: skip
    if redis_url:
        results.update(_redis(redis_url, chunks))
    turns = (("before", old_url), ("plain", plain_url), ("after", url))
    order = [turns[(r + i) % len(turns)] for r in range(rounds) for i in range(len(turns))]  # each goes first too
    for label, which in order:
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
    parser.add_argument("--redis", help="Redis URL: measure memory per cached chunk too.")
    parser.add_argument("--rounds", type=int, default=2, help="Restores from each remote, in turns (the best counts).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engram-bench-zstd-") as tmp:
        folder = Path(tmp)
        if args.remote:
            results = run(args.items, args.remote, folder, args.redis, args.rounds)
        else:
            (folder / "s3").mkdir()
            with seaweedfs(folder / "s3") as url:
                results = run(args.items, url, folder, args.redis, args.rounds)
    r = results
    print(f"| {r['items']:,} typical JSON items -> {r['remote']} | uncompressed | zstd, plain frames | "
          "zstd, trained dictionary |")  # fmt: skip
    print("|---|---|---|---|")
    print(f"| remote bytes per item | {r['bytes_per_item_before']} | {r['bytes_per_item_plain']} ({r['plain_pct']} %) "
          f"| {r['bytes_per_item_after']} ({r['ratio_pct']} %) |")  # fmt: skip
    print(f"| restore (best of {args.rounds}) | {r['restore_before_s']} s | {r['restore_plain_s']} s | "
          f"{r['restore_after_s']} s |")  # fmt: skip
    if "redis_after" in r:
        before, plain, after = r["redis_before"], r["redis_plain"], r["redis_after"]
        print(f"| Redis memory per cached chunk ({r['redis_chunks']:,} chunks) | {before:,} B | {plain:,} B "
              f"({100 * plain / before:.1f} %) | {after:,} B ({100 * after / before:.1f} %), "
              f"+ {r['redis_dict']:,} B once for the dictionary |")  # fmt: skip
    print(f"| per chunk: zlib-1 / zstd-3 size | | {r['zlib1_per_chunk_pct']} % / {r['zstd_per_chunk_pct']} % | |")
    print(f"| decode speed: zlib / zstd | | {r['zlib_decode_mb_s']} / {r['zstd_decode_mb_s']} MB/s | "
          f"{r['dict_decode_mb_s']} MB/s (dictionary {r['dict_kb']} KB) |")  # fmt: skip


if __name__ == "__main__":
    main()
