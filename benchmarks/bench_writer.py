"""The memory writer on LoCoMo, and its own overhead per run against a scripted model server.

1. Each LoCoMo conversation is fed turn by turn to a :class:`MemoryWriter` with the offline extractor (interval
   2; speaker A is the ``user``, speaker B the ``assistant``; both are people, so both are mined), each session at
   its own date (a simulated clock: relative dates resolve against the session's time). Reported: memories against
   turns, run time per run (p50/p95), and recall@10 of the evidence per LoCoMo category and overall through the
   extracted memories (a question's evidence is found when a retrieved memory's ``sources`` include its dialog id),
   beside storing every turn raw, with the same embedder and search (both indexes flushed before the questions).
2. With the scripted OpenAI-compatible server on 127.0.0.1 (answers at once: one write, then done), the
   writer's overhead per run (run time minus model-call time) for 10-turn windows on SQLite.

    python benchmarks/bench_writer.py [--data PATH] [--conversations N] [--embedder hashing|minilm] [--out FILE]
    python benchmarks/bench_writer.py --overhead-only [--overhead-runs 40] [--synchronous full|normal]

``--overhead-only`` runs part 2 alone; ``--synchronous`` sets the SQLite store's durability mode for it (see
``docs/storage.md``; ``full`` is the default of every store).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

import engram
from engram import clock
from engram.writer import MemoryWriter, OfflineExtractor, OpenAIExtractor, WriterMetrics
from engram.writer.scripted import Reply, ScriptedModelServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import CATEGORIES, repair

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo10.json"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def turns_of(conv: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dialog turn in session order, with the time its session started (naive UTC)."""
    out = []
    for name in sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])):
        when = datetime.strptime(conv[f"{name}_date_time"], "%I:%M %p on %d %B, %Y")
        for turn in conv[name]:
            text = turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            out.append({"id": turn["dia_id"], "speaker": turn["speaker"], "text": text, "at": when})
    return out


def recall(found: list[set[str]], evidence: list[str]) -> float:
    """Share of the evidence cited by the retrieved memories."""
    cited = set().union(*found) if found else set()
    return sum(1 for e in evidence if e in cited) / len(evidence)


def feed(mem: engram.Memory, sid: str, conv: dict[str, Any], turns: list[dict[str, Any]], tmp: Path) -> MemoryWriter:
    """Feed one conversation to a writer turn by turn, each session at its own date (a simulated clock)."""
    extractor = OfflineExtractor(roles=("user", "assistant"))
    writer = MemoryWriter(mem, extractor=extractor, interval=2, background=False, trace_dir=tmp / "traces",
                          metrics=WriterMetrics(CollectorRegistry()))  # fmt: skip
    target = ("locomo", sid)
    with clock.simulated(turns[0]["at"]) as sim:
        writer.start_conversation(sid, target)
        for turn in turns:
            if turn["at"] > sim.now().replace(tzinfo=None):
                sim.set(turn["at"])
            role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
            writer.append(sid, role, turn["text"], message_id=turn["id"], name=turn["speaker"])
        writer.run_now(target)  # the tail after the last due run
    return writer


def locomo(data: list[dict[str, Any]], embedder: str, tmp: Path) -> dict[str, Any]:
    """Part 1 (see the module docstring)."""
    per_conv: list[dict[str, Any]] = []
    run_ms: list[float] = []
    scores: dict[str, dict[str, list[float]]] = {"writer": defaultdict(list), "raw": defaultdict(list)}
    for sample in data:
        conv, sid = sample["conversation"], sample["sample_id"]
        target = ("locomo", sid)
        mem = engram.open(f"sqlite:///{tmp / f'{sid}.db'}", embedder=embedder)
        turns = turns_of(conv)
        started = time.perf_counter()
        writer = feed(mem, sid, conv, turns, tmp)
        feed_s = time.perf_counter() - started
        runs = writer.runs(target, limit=10_000)
        run_ms += [float(r["duration_ms"]) for r in runs if "duration_ms" in r]
        memories = mem.search(target, limit=100_000)
        raw = engram.open(f"sqlite:///{tmp / f'{sid}-raw.db'}", embedder=embedder)
        with raw.transaction(f"raw {sid}") as tx:
            for turn in turns:
                tx.put(target, turn["id"], {"text": f"{turn['speaker']}: {turn['text']}"}, index=["text"])
        mem.flush_index()  # every memory and turn embedded before the first question: no keyword-only fallback
        raw.flush_index()
        known = {t["id"] for t in turns}
        for qa in sample["qa"]:
            evidence = repair(qa.get("evidence", []), known)
            if not evidence:
                continue
            category = CATEGORIES[qa["category"]]
            hits = mem.search(target, qa["question"], limit=10)
            found = recall([set(h.sources) for h in hits], evidence)
            raw_hits = raw.search(target, qa["question"], limit=10)
            raw_found = recall([{h.key} for h in raw_hits], evidence)
            for name, value in (("writer", found), ("raw", raw_found)):
                scores[name][category].append(value)
                scores[name]["overall"].append(value)
        per_conv.append({"conversation": sid, "turns": len(turns), "memories": len(memories), "runs": len(runs),
                         "feed_s": round(feed_s, 2)})  # fmt: skip
        print(f"{sid}: {len(turns)} turns, {len(memories)} memories, {len(runs)} runs, {feed_s:.1f}s", file=sys.stderr)
        writer.close()
        raw.close()
        mem.close()
    recall_at_10 = {side: {c: statistics.mean(v) for c, v in by.items()} for side, by in scores.items()}
    return {
        "conversations": per_conv, "turns": sum(c["turns"] for c in per_conv),
        "memories": sum(c["memories"] for c in per_conv),
        "run_ms_p50": pct(run_ms, 0.5), "run_ms_p95": pct(run_ms, 0.95), "runs": len(run_ms),
        "questions": {c: len(v) for c, v in scores["writer"].items()}, "recall@10": recall_at_10,
    }  # fmt: skip


def overhead(tmp: Path, runs: int, embedder: str, synchronous: str = "full") -> dict[str, Any]:
    """Part 2 (see the module docstring): 10-turn windows (interval 5) against the scripted server."""
    if synchronous != "full":
        from engram.backends.sqlite import set_synchronous

        set_synchronous(tmp / "overhead.db", synchronous)

    def answer(body: dict[str, Any]) -> Reply:
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply.tools(("no_new_memories", {}))
        return Reply.tools(("write_memory", {"text": f"fact number {len(body['messages'])} {time.time_ns()}"}))

    with ScriptedModelServer(answer) as server:
        mem = engram.open(f"sqlite:///{tmp / 'overhead.db'}", embedder=embedder)
        writer = MemoryWriter(mem, extractor=OpenAIExtractor(server.url, "scripted"), interval=5, background=False,
                              trace_dir=tmp / "traces", metrics=WriterMetrics(CollectorRegistry()))  # fmt: skip
        writer.start_conversation("c", ("bench", "user"))
        records = []
        for i in range(runs * 5):
            writer.append("c", "user", f"I tried recipe number {i} today and it was good.")
            appended = writer.append("c", "assistant", "Sounds tasty.")
            if appended.run is not None:
                records.append(appended.run)
        mem.close()
    total = [float(r["duration_ms"]) for r in records]
    own = [float(r["duration_ms"]) - float(r["model_ms"]) for r in records]
    return {"runs": len(records), "run_ms_p50": pct(total, 0.5), "overhead_ms_p50": pct(own, 0.5),
            "overhead_ms_p95": pct(own, 0.95)}  # fmt: skip


def table(lo: dict[str, Any], conversations: int, embedder: str) -> str:
    """Part 1 as Markdown: recall@10 per category through the writer's memories and through raw turns."""
    rec, questions = lo["recall@10"], lo["questions"]
    lines = [
        f"{conversations} conversations, {lo['turns']:,} turns, {lo['memories']:,} memories "
        f"({lo['memories'] / lo['turns']:.2f} per turn), embedder {embedder}; run time per run p50 / p95 "
        f"{lo['run_ms_p50']:.1f} / {lo['run_ms_p95']:.1f} ms ({lo['runs']} runs)",
        "",
        "| category | questions | recall@10, writer's memories | recall@10, raw turns |",
        "|---|---|---|---|",
    ]
    for category in [*sorted(c for c in questions if c != "overall"), "overall"]:
        lines.append(f"| {category} | {questions[category]:,} | {rec['writer'][category]:.3f} | "
                     f"{rec['raw'][category]:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--overhead-runs", type=int, default=40)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--overhead-only", action="store_true", help="measure part 2 only")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full")
    args = parser.parse_args(argv)
    if args.overhead_only:
        with tempfile.TemporaryDirectory() as tmp:
            ov = overhead(Path(tmp), args.overhead_runs, args.embedder, args.synchronous)
        print(f"| writer overhead per 10-turn run, p50 / p95 ({ov['runs']} runs, synchronous={args.synchronous}) | "
              f"{ov['overhead_ms_p50']:.1f} / {ov['overhead_ms_p95']:.1f} ms |")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps(ov, indent=1))
        return 0
    if not args.data.exists():
        print(f"LoCoMo not found at {args.data}: nothing to measure", file=sys.stderr)
        return 0
    data = json.loads(args.data.read_text())[: args.conversations]
    with tempfile.TemporaryDirectory() as tmp:
        found = locomo(data, args.embedder, Path(tmp))
        result = {"locomo": found, "overhead": overhead(Path(tmp), args.overhead_runs, args.embedder),
                  "embedder": args.embedder}  # fmt: skip
    lo, ov = result["locomo"], result["overhead"]
    print(table(lo, len(data), args.embedder))
    print(f"\n| writer overhead per 10-turn run, p50 / p95 ({ov['runs']} runs) | "
          f"{ov['overhead_ms_p50']:.1f} / {ov['overhead_ms_p95']:.1f} ms |")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
