"""The memory writer at the HTTP door: how long an append takes while the model is slow, and how recovery after a
crash costs against the size of the branch's history.

Appends: a server (in process, over ASGI) with an OpenAI-compatible scripted model that takes ``--model-delay``
seconds per call; each round appends a user turn and an assistant turn (interval 1, so the second makes a run
due) and times the second append, then waits for the run. Beside it, the same turns through a library writer that
runs inside the call (``background=False``), as the server did before: the ratio is what the background worker
saves a request.

Recovery: a run killed after its commit (SIGKILL) is found by its run id in the branch's history; this times
``find_published`` with 0, 1,000 and 10,000 commits made on the branch after the killed run started.

    .venv/bin/python benchmarks/bench_writer_doors.py --rounds 5 --model-delay 1.0
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

import engram
from engram.server import ServerConfig, create_app
from engram.writer import MemoryWriter, OpenAIExtractor
from engram.writer.recovery import find_published
from engram.writer.scripted import Reply, ScriptedModelServer
from engram.writer.state import Lease


def reply(delay: float) -> Any:
    def answer(body: dict[str, Any]) -> Reply:
        return Reply.tools(("no_new_memories", {"reason": "bench"}), delay=delay)

    return answer


def http_appends(rounds: int, delay: float, folder: Path) -> list[float]:
    took: list[float] = []
    with ScriptedModelServer(reply(delay)) as model:
        config = ServerConfig(store=str(folder / "http"), embedder="hashing", writer_interval=1,
                              writer_extractor=f"openai:bench@{model.url}", writer_timeout=delay * 10)  # fmt: skip
        with TestClient(create_app(config)) as client:
            client.post("/v1/conversations", json={"conversation_id": "c1", "target": ["users", "bench"]})
            for i in range(rounds):
                client.post("/v1/conversations/c1/turns", json={"role": "user", "text": f"I like item {i}."})
                started = time.perf_counter()
                sent = client.post("/v1/conversations/c1/turns", json={"role": "assistant", "text": "ok"})
                took.append((time.perf_counter() - started) * 1000)
                assert sent.json()["decision"]["action"] == "queued", sent.text
                client.get("/v1/writer/users.bench/status", params={"wait": 30})
    return took


def library_appends(rounds: int, delay: float, folder: Path) -> list[float]:
    took: list[float] = []
    with ScriptedModelServer(reply(delay)) as model:
        mem = engram.open(str(folder / "lib.db"), embedder="hashing")
        writer = MemoryWriter(mem, extractor=OpenAIExtractor(model.url, "bench", timeout=delay * 10), interval=1,
                              background=False, trace_dir=folder / "traces")  # fmt: skip
        writer.start_conversation("c1", ("users", "bench"))
        for i in range(rounds):
            writer.append("c1", "user", f"I like item {i}.")
            started = time.perf_counter()
            writer.append("c1", "assistant", "ok")
            took.append((time.perf_counter() - started) * 1000)
        mem.close()
    return took


def recovery(folder: Path, sizes: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for size in sizes:
        mem = engram.open(str(folder / f"rec-{size}.db"), embedder="hashing")
        old = Lease("killed-run", "gone:1:x", int(time.time() * 1000) - 1000, 0)
        mem.put(("users", "bench"), "m", {"text": "x"})  # stands for the killed run's commit: found by metadata
        with mem.transaction("writer run", author="writer") as tx:
            tx.put(("users", "bench"), "m-killed", {"text": "from the killed run"})
            tx.metadata = {"writer": {"run": "killed-run", "conversations": {}}}
        for i in range(size):
            mem.put(("users", "other"), f"k{i % 50}", {"text": f"later write {i}"})
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            found = find_published(mem, old)
            runs.append((time.perf_counter() - started) * 1000)
            assert found is not None
        out[size] = statistics.median(runs)
        mem.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model-delay", type=float, default=1.0)
    parser.add_argument("--recovery-sizes", default="0,1000,10000")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        http = http_appends(args.rounds, args.model_delay, folder)
        library = library_appends(args.rounds, args.model_delay, folder)
        found = recovery(folder, [int(s) for s in args.recovery_sizes.split(",")])
    result = {
        "model_delay_s": args.model_delay, "rounds": args.rounds,
        "http_append_ms_p50": round(statistics.median(http), 1), "http_append_ms_max": round(max(http), 1),
        "in_call_append_ms_p50": round(statistics.median(library), 1),
        "ratio": round(statistics.median(library) / statistics.median(http), 1),
        "recovery_find_ms_by_later_commits": {str(k): round(v, 2) for k, v in found.items()},
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
