"""Retrieval quality on LoCoMo: recall@5, recall@10 and nDCG@10 per search mode and ranking profile.

One memory per dialog turn (``"speaker: text"``, the session date as metadata), each question searched
in its own conversation's namespace. The data is read from ``../shared/data/locomo10.json`` (never
copied here: its licence is non-commercial); without it the script says so and exits 0.

    python benchmarks/bench_retrieval.py [--data PATH] [--modes hybrid,keyword,semantic] [--out FILE]

``--context`` measures ``Memory.context`` instead: for each question, whether its evidence is inside the context
block at ``--budget`` tokens (1,000 by default) versus inside the top-10 hits of the same hybrid search, and the
p50 latency of each (``--questions N`` takes N questions spread evenly over the data set).

``--latency`` times the hybrid search with the default ``when`` against ``when="off"``, question by question, the arms
interleaved (``--reps`` each; retrieval_latency.py): p50 and p90 for all questions and for those with a time
expression, asking when, or neither.

Each search runs with the library's default ``when`` (``"auto"``: time expressions in the question favour turns of
matching session dates; each question's reference time is its conversation's last session). ``--when off`` runs every
mode and profile a second time with that ``when`` (``off``: no time), and reports how many questions hold a time
expression and what parsing costs per query (with ``--chats``, the generated data set too). ``--cv-time`` chooses
``when="auto"``'s constants (``TIME_WEIGHT``, ``HALF_LIFE_DAYS``, ``ANSWER_WEIGHT``) by cross-validation over
``--time-weights`` x ``--half-lives`` x ``--answer-weights`` (retrieval_cv_time.py). ``--levers`` measures changes
of the scoring offline (keyword and semantic transforms, BM25's constants and statistics), each over ``--grid`` and
cross-validated on both data sets (retrieval_levers.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import memory_chats
import retrieval_cv
import retrieval_cv_time
import retrieval_latency
import retrieval_levers

import engram
from engram.store.timeq import parse_time

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def repair(evidence: list[str], known: set[str]) -> list[str]:
    """Fix the data set's malformed evidence ids ("D8:6; D9:17", "D:11:26", "D30:05"); drop unknown ones."""
    out: list[str] = []
    for raw in evidence:
        for part in re.split(r"[;,\s]+", raw.strip()):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part)
            if match:
                fixed = f"D{int(match.group(1))}:{int(match.group(2))}"
                if fixed in known:
                    out.append(fixed)
    return list(dict.fromkeys(out))


def load(
    path: Path | list[dict[str, Any]], mem: engram.Memory, fields: tuple[str, ...] | None = ("text",)
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Store every turn as a memory; return the questions with repaired evidence and what was dropped.
    ``fields``: the memories' index fields (None: the store's default, the whole value)."""
    data = json.loads(path.read_text()) if isinstance(path, Path) else path
    questions: list[dict[str, Any]] = []
    dropped = {"questions_without_evidence": 0, "evidence_ids_repaired": 0, "evidence_ids_dropped": 0}
    for sample in data:
        conv = sample["conversation"]
        ns = ("locomo", sample["sample_id"])
        known: set[str] = set()
        with mem.transaction(f"load {sample['sample_id']}") as tx:
            for name in sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])):
                date = last = conv.get(f"{name}_date_time", "")
                for turn in conv[name]:
                    known.add(turn["dia_id"])
                    text = f"{turn['speaker']}: {turn['text']}"
                    if turn.get("blip_caption"):
                        text += f" [shares a photo: {turn['blip_caption']}]"
                    tx.put(ns, turn["dia_id"], {"text": text, "session": name, "date": date}, index=fields)
        for qa in sample["qa"]:
            evidence = repair(qa.get("evidence", []), known)
            exact = [e for e in qa.get("evidence", []) if e in known]
            dropped["evidence_ids_repaired"] += len(evidence) - len(exact)
            dropped["evidence_ids_dropped"] += max(0, len(qa.get("evidence", [])) - len(evidence))
            if not evidence:
                dropped["questions_without_evidence"] += 1
                continue
            questions.append({"ns": ns, "q": qa["question"], "evidence": evidence, "category": qa["category"],
                              "reference": last})  # fmt: skip
    return questions, dropped


def metrics(ranked: list[str], relevant: set[str]) -> dict[str, float]:
    """recall@5, recall@10 (share of evidence found) and nDCG@10 (binary relevance)."""
    dcg = sum(1 / math.log2(i + 2) for i, key in enumerate(ranked[:10]) if key in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return {
        "recall@5": len(relevant & set(ranked[:5])) / len(relevant),
        "recall@10": len(relevant & set(ranked[:10])) / len(relevant),
        "ndcg@10": dcg / ideal,
    }


def evaluate(
    mem: engram.Memory, questions: list[dict[str, Any]], mode: str, profile: str, when: str | None = None
) -> dict[str, Any]:
    """Run every question (its reference time is its conversation's last session; ``when`` None: the library's
    default, ``"auto"``); return overall and per-category means and the median latency."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    latencies: list[float] = []
    cache = mem.pool.query_cache
    for item in questions:
        if cache is not None:
            cache.clear()  # each search timed as asked for the first time: not a hit of an earlier run's search
        start = time.perf_counter()
        results = mem.search(item["ns"], item["q"], limit=10, mode=mode, profile=profile,  # type: ignore[arg-type]
                             when=when, reference_time=item["reference"])  # fmt: skip
        latencies.append(time.perf_counter() - start)
        scores = metrics([r.key for r in results], set(item["evidence"]))
        for group in ("all", CATEGORIES.get(item["category"], item["category"])):
            counts[group] += 1
            for name, value in scores.items():
                sums[group][name] += value
    # the p50 of questions with and without a time expression apart: only the first pay for the time stage
    timed = [parse_time(item["q"], item["reference"]).windows != () for item in questions]
    split = {f"p50_ms_{name}": 1000 * _median([t for t, w in zip(latencies, timed, strict=True) if w == want])
             for name, want in (("time", True), ("no_time", False))}  # fmt: skip
    latencies.sort()
    table = {g: {m: v / counts[g] for m, v in sums[g].items()} | {"n": counts[g]} for g in sums}
    label = profile if when is None else f"{profile}, when={when}"
    return {"mode": mode, "profile": label, "p50_ms": 1000 * latencies[len(latencies) // 2], "results": table} | split


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else math.nan


def parse_cost(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """How many questions hold a time expression (per category), and the cost of parsing every question."""
    found: dict[str, int] = defaultdict(int)
    timings: list[float] = []
    for item in questions:
        start = time.perf_counter()
        parsed = parse_time(item["q"], item["reference"])
        timings.append(time.perf_counter() - start)
        if parsed.windows:
            for group in ("all", CATEGORIES.get(item["category"], item["category"])):
                found[group] += 1
    timings.sort()
    at = {f"p{p}_ms": 1000 * timings[min(len(timings) - 1, len(timings) * p // 100)] for p in (50, 90, 99)}
    return {"with_time_expression": dict(found), **at, "max_ms": 1000 * timings[-1]}


def coverage(found: set[str], relevant: set[str]) -> dict[str, float]:
    """Whether all, and whether any, of a question's evidence is in ``found``, and the share that is."""
    hit = len(relevant & found)
    return {"all": float(hit == len(relevant)), "any": float(hit > 0), "recall": hit / len(relevant)}


def evaluate_context(mem: engram.Memory, questions: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Evidence inside the context block at ``budget`` tokens vs inside the top-10 hits, per category."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    timings: dict[str, list[float]] = {"context": [], "top10": []}
    for n, item in enumerate(questions):
        relevant = set(item["evidence"])
        # each is timed where it runs first (embedding the question: the second call reuses its vector), on every
        # other question
        start = time.perf_counter()
        if n % 2 == 0:
            block = mem.context(item["ns"], item["q"], budget_tokens=budget, reference_time=item["reference"])
            timings["context"].append(time.perf_counter() - start)
            hits = mem.search(item["ns"], item["q"], limit=10, reference_time=item["reference"])
        else:
            hits = mem.search(item["ns"], item["q"], limit=10, reference_time=item["reference"])
            timings["top10"].append(time.perf_counter() - start)
            block = mem.context(item["ns"], item["q"], budget_tokens=budget, reference_time=item["reference"])
        scores = {f"context_{k}": v for k, v in coverage({i.key for i in block.items}, relevant).items()}
        scores |= {f"top10_{k}": v for k, v in coverage({h.key for h in hits}, relevant).items()}
        scores |= {"context_tokens": block.tokens, "context_lines": len(block.items)}
        for group in ("all", CATEGORIES[item["category"]]):
            counts[group] += 1
            for name, value in scores.items():
                sums[group][name] += value
    table = {g: {m: v / counts[g] for m, v in sums[g].items()} | {"n": counts[g]} for g in sums}
    p50 = {f"{name}_p50_ms": 1000 * sorted(t)[len(t) // 2] for name, t in timings.items()}
    return {"budget_tokens": budget, "tokenizer": block.tokenizer, **p50, "results": table}


def print_context_table(run: dict[str, Any]) -> None:
    """Markdown table: questions whose evidence is all (any) inside the block vs the top-10, per category."""
    print(f"context at {run['budget_tokens']} tokens ({run['tokenizer']}): p50 {run['context_p50_ms']:.1f} ms; "
          f"top-10 search p50 {run['top10_p50_ms']:.1f} ms (each timed where it ran first)\n")  # fmt: skip
    print(
        "| questions | n | all evidence: context | all evidence: top-10 | any: context | any: top-10 | "
        "evidence recall: context | evidence recall: top-10 | mean tokens | mean lines |\n" + "|---" * 10 + "|"
    )
    for group in ("all", *CATEGORIES.values()):
        r = run["results"].get(group)
        if r:
            print(f"| {group} | {r['n']} | {r['context_all']:.3f} | {r['top10_all']:.3f} | {r['context_any']:.3f} | "
                  f"{r['top10_any']:.3f} | {r['context_recall']:.3f} | {r['top10_recall']:.3f} | "
                  f"{r['context_tokens']:.0f} | {r['context_lines']:.1f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="hybrid,keyword,semantic")
    parser.add_argument("--profiles", default="similarity,balanced,recent,quality")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "retrieval.json")
    parser.add_argument("--context", action="store_true", help="measure Memory.context against the top-10 hits")
    parser.add_argument("--budget", type=int, default=1000, help="the context's token budget (with --context)")
    parser.add_argument("--questions", type=int, default=None, help="only N questions, spread evenly")
    parser.add_argument("--when", default=None, help="also run each search with this when= (e.g. off)")
    parser.add_argument(
        "--fields",
        choices=["text", "default"],
        default="text",
        help="index the turns' text field only (as before), or store them with the default fields",
    )
    parser.add_argument("--latency", action="store_true", help="p50 / p90 of the default against when='off', "
                        "paired question by question (retrieval_latency.py)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=3, help="with --latency: timed searches per question and arm")
    parser.add_argument("--chats", action="store_true", help="also the generated data set (memory_chats.py)")
    parser.add_argument("--cv", action="store_true", help="cross-validate the fusion weights (retrieval_cv.py)")
    parser.add_argument("--grid", default="0.5:0.9:0.05", help="keyword weights tried by --cv (start:stop:step)")
    parser.add_argument("--cv-folds", default="2,5", help="fold counts of --cv, split by conversation")
    parser.add_argument("--cv-latency", default=None, help="with --cv: p50 of the hybrid search at these keyword "
                        "weights (e.g. 0.8,0.6), interleaved question by question")  # fmt: skip
    parser.add_argument("--levers", action="store_true", help="measure ranking levers offline over --grid, "
                        "cross-validated (retrieval_levers.py)")  # fmt: skip
    parser.add_argument("--levers-only", default=None, help="with --levers: only the levers whose name holds this")
    parser.add_argument("--cv-time", action="store_true", help="cross-validate when='auto''s time constants")
    parser.add_argument("--time-weights", default="0.05,0.1,0.15,0.2,0.25,0.3,0.4", help="weights tried by --cv-time")
    parser.add_argument("--half-lives", default="1,3,7,14,30", help="half-lives (days) tried by --cv-time")
    parser.add_argument("--answer-weights", default=None,
                        help="answer weights tried by --cv-time (default: the library's)")  # fmt: skip
    args = parser.parse_args(argv)
    fields = ("text",) if args.fields == "text" else None
    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}: skipping the retrieval benchmark.")
        return 0
    mem = engram.open(":memory:", embedder=args.embedder)
    start = time.perf_counter()
    questions, dropped = load(args.data, mem, fields)
    mem.search(("locomo",), "warm up")  # builds the index and embeds every turn
    mem.flush_index()  # the background indexer's last vectors too: no question is asked of a partial index
    print(f"loaded and indexed {mem.count()} turns in {time.perf_counter() - start:.1f} s; "
          f"{len(questions)} questions with evidence; {dropped}", file=sys.stderr)  # fmt: skip
    if args.questions is not None and 0 < args.questions < len(questions):
        step = len(questions) / args.questions
        questions = [questions[int(i * step)] for i in range(args.questions)]
    extra = {}
    if args.chats:  # the generated data set, in a store of its own
        chats = engram.open(":memory:", embedder=args.embedder)
        extra["chats"] = (chats, load(memory_chats.generate(), chats, fields)[0])
        chats.search(("locomo",), "warm up")
        chats.flush_index()
    if args.levers:
        stores = {"locomo": (mem, questions), **extra}
        found = retrieval_levers.run(stores, retrieval_cv.parse_grid(args.grid),
                                     [int(k) for k in args.cv_folds.split(",")], lambda c: CATEGORIES.get(c, str(c)),
                                     lambda line: print(line, file=sys.stderr), args.levers_only)  # fmt: skip
        out = args.out.with_name("retrieval_levers.json") if args.out.name == "retrieval.json" else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(found, indent=2, default=str))
        return 0
    if args.cv_time:
        stores = {"locomo": (mem, questions), **extra}
        grid = retrieval_cv_time.parse_pairs(args.time_weights, args.half_lives, args.answer_weights)
        found = retrieval_cv_time.run(stores, grid, [int(k) for k in args.cv_folds.split(",")], metrics,
                                      lambda line: print(line, file=sys.stderr))  # fmt: skip
        out = args.out.with_name("retrieval_cv_time.json") if args.out.name == "retrieval.json" else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(found, indent=2, default=str))
        return 0
    if args.cv:
        stores = {"locomo": (mem, questions), **extra}
        folds = [int(k) for k in args.cv_folds.split(",")]
        found = retrieval_cv.run(stores, retrieval_cv.parse_grid(args.grid), folds, metrics,
                                 lambda line: print(line, file=sys.stderr))  # fmt: skip
        if args.cv_latency:
            timed = retrieval_cv.paired_latency(mem, questions, [float(w) for w in args.cv_latency.split(",")])
            found["latency_p50_ms"] = {str(w): ms for w, ms in timed.items()}
            print("\n| keyword / semantic | LoCoMo hybrid search p50 (interleaved) |\n|---|---|")
            for w, ms in timed.items():
                print(f"| {w:.2f} / {1 - w:.2f} | {ms:.1f} ms |")
        out = args.out.with_name("retrieval_cv.json") if args.out.name == "retrieval.json" else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(found, indent=2))
        return 0
    if args.latency:
        timed = retrieval_latency.paired(mem, questions, args.reps, lambda line: print(line, file=sys.stderr))
        retrieval_latency.print_table(timed)
        out = args.out.with_name("retrieval_latency.json") if args.out.name == "retrieval.json" else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"questions": len(questions), "reps": args.reps, "latency": timed}, indent=2))
        return 0
    if args.context:
        run = evaluate_context(mem, questions, args.budget)
        print_context_table(run)
        out = args.out.with_name("context.json") if args.out.name == "retrieval.json" else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"questions": len(questions), "dropped": dropped, "context": run}, indent=2))
        return 0
    runs = []
    whens = (None, args.when) if args.when else (None,)
    for mode in args.modes.split(","):
        for profile, when in ((p, w) for p in (args.profiles.split(",") if mode == "hybrid" else ["similarity"])
                              for w in whens):  # fmt: skip
            run = evaluate(mem, questions, mode, profile, when)
            runs.append(run)
            for name, (other, asked) in extra.items():
                runs.append(evaluate(other, asked, mode, profile, when) | {"mode": f"{mode} [{name}]"})
            overall = run["results"]["all"]
            print(f"{mode:>8} {run['profile']:>10}: recall@5 {overall['recall@5']:.3f} "
                  f"recall@10 {overall['recall@10']:.3f} nDCG@10 {overall['ndcg@10']:.3f}  p50 {run['p50_ms']:.1f} ms",
                  file=sys.stderr)  # fmt: skip
    print_table(runs)
    cost = parse_cost(questions) if args.when else None
    for name, (_, asked) in {"locomo": (mem, questions), **extra}.items() if args.when else ():
        each = parse_cost(asked)
        print(f"\n{name}: time expressions: {each['with_time_expression']}; parse per question p50 "
              f"{each['p50_ms']:.3f} ms, p90 {each['p90_ms']:.3f} ms, p99 {each['p99_ms']:.3f} ms, "
              f"max {each['max_ms']:.1f} ms")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"questions": len(questions), "dropped": dropped, "runs": runs, "parse": cost},
                                   indent=2))  # fmt: skip
    return 0


def print_table(runs: list[dict[str, Any]]) -> None:
    """Markdown tables: overall per mode/profile, then per category for each run."""
    print("| mode | profile | recall@5 | recall@10 | nDCG@10 | p50 ms | p50 ms, questions with / without a time "
          "expression |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for run in runs:
        r = run["results"]["all"]
        print(f"| {run['mode']} | {run['profile']} | {r['recall@5']:.3f} | {r['recall@10']:.3f} | "
              f"{r['ndcg@10']:.3f} | {run['p50_ms']:.1f} | "
              f"{run['p50_ms_time']:.1f} / {run['p50_ms_no_time']:.1f} |")  # fmt: skip
    print("\n| mode | profile | category | n | recall@10 | nDCG@10 |\n|---|---|---|---|---|---|")
    for run in runs:
        for group in dict.fromkeys((*CATEGORIES.values(), *memory_chats.KINDS)):
            r = run["results"].get(group)
            if r:
                print(f"| {run['mode']} | {run['profile']} | {group} | {r['n']} | {r['recall@10']:.3f} | "
                      f"{r['ndcg@10']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
