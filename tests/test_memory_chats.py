"""The generated chats of benchmarks/memory_chats.py: deterministic, and its temporal questions' evidence is what
engram's own reading of the question's time expression points at."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from engram.store.timeq import parse_time, text_time_ms


def _chats() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_chats.py"
    spec = importlib.util.spec_from_file_location("memory_chats", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("memory_chats", module)
    spec.loader.exec_module(module)
    return module


def test_same_seed_same_bytes_and_the_questions_before_temporal_ones_unchanged() -> None:
    chats = _chats()
    first = json.dumps(chats.generate(users=6, seed=3))
    assert first == json.dumps(chats.generate(users=6, seed=3))
    assert first != json.dumps(chats.generate(users=6, seed=4))
    data = chats.generate()
    for sample in data:
        sample["qa"] = [q for q in sample["qa"] if q["category"] != "temporal"]
    # the turns and the other questions are the bytes they were before the temporal questions were added
    assert hashlib.md5(json.dumps(data).encode()).hexdigest() == "488f5e71bc0db9ca3e2a35f2816d9934"


def test_temporal_evidence_is_inside_the_window_and_the_same_request_is_outside() -> None:
    chats = _chats()
    temporal = 0
    for sample in chats.generate(users=8):
        conv = sample["conversation"]
        sessions = sorted((k for k in conv if k.startswith("session_") and k[8:].isdigit()), key=lambda k: int(k[8:]))
        reference = conv[f"{sessions[-1]}_date_time"]
        turns = {t["dia_id"]: (t["text"], text_time_ms(conv[f"{s}_date_time"])) for s in sessions for t in conv[s]}
        for qa in sample["qa"]:
            if qa["category"] != "temporal":
                continue
            temporal += 1
            (window,) = parse_time(qa["question"], reference).windows
            request = {turns[e][0] for e in qa["evidence"]}
            assert len(request) == 1 and qa["evidence"]
            same = [at for text, at in turns.values() if text in request]
            inside = [at for at in same if window.start_ms <= at < window.end_ms]  # type: ignore[operator]
            assert len(inside) == len(qa["evidence"]) < len(same), qa["question"]
    assert temporal >= 8 * 4
