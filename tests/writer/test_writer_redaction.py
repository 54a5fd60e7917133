"""Secret redaction: recall and false positives on the corpus kept beside this file, the shapes of what it
replaces, its cost on large inputs, and where the writer applies it (turns stored as sent; prompts, traces and
memories redacted; ``redact_turns`` to store turns redacted)."""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path

import pytest

from engram.errors import WriterError
from engram.store import Memory
from engram.writer import ExtractRequest, MemoryWriter, OfflineExtractor, Workspace, WriterMetrics, read_trace
from engram.writer.redact import find_secrets, gates, has_secret, redact, redact_value
from engram.writer.traces import trace_path

CORPUS = json.loads((Path(__file__).parent / "redaction_corpus.json").read_text())
POSITIVES: list[dict[str, object]] = CORPUS["positives"]
NEGATIVES: list[dict[str, object]] = CORPUS["negatives"]
ALICE = ("users", "alice")
KEY = "sk-proj-uV-aWaeOp-NGH0IpXk9ui5LQE6x6HWj28WJBmn04zzvIGrCh"


def test_redaction_corpus_is_large_enough() -> None:
    assert len(POSITIVES) >= 40 and len(NEGATIVES) >= 40
    assert all(p["secrets"] and all(str(s) in str(p["text"]) for s in p["secrets"]) for p in POSITIVES)  # type: ignore[attr-defined]


def test_redaction_catches_every_positive_of_the_corpus() -> None:
    missed = [
        (p["text"], redact(str(p["text"])))
        for p in POSITIVES
        if any(str(s) in redact(str(p["text"])) for s in p["secrets"])  # type: ignore[attr-defined]
    ]
    assert missed == [], f"recall {1 - len(missed) / len(POSITIVES):.3f}: {missed}"


def test_redaction_leaves_every_negative_of_the_corpus_intact() -> None:
    changed = [(n["text"], redact(str(n["text"]))) for n in NEGATIVES if redact(str(n["text"])) != n["text"]]
    assert changed == [], f"{len(changed)} false positives: {changed}"
    assert not any(has_secret(str(n["text"])) for n in NEGATIVES)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("my password is: Tr0ub4dor&3", "my password is: [REDACTED:secret]"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [REDACTED:secret]",
        ),
        ("pw: hunter22", "pw: [REDACTED:secret]"),
        ("Authorization: Basic ZGVwbG95Okh1bnRlcjIyIQ==", "Authorization: Basic [REDACTED:password]"),
        ("Authorization: Bearer 4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c", "Authorization: Bearer [REDACTED:token]"),
        ("my key is sk-abc123def456ghi789jkl012", "my key is [REDACTED:api-key]"),
        ("Use AKIAIOSFODNN7EXAMPLE now", "Use [REDACTED:aws-key] now"),
        ("https://alice:hunter22@git.example.com/x", "https://alice:[REDACTED:password]@git.example.com/x"),
        ('{"password": "N0t-So-Secret"}', '{"password": "[REDACTED:secret]"}'),
        ("The token is expired", "The token is expired"),
        ("my password is too short", "my password is too short"),
    ],
)
def test_redaction_replaces_the_value_and_keeps_the_words_around_it(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_redaction_is_idempotent() -> None:
    for sample in [str(p["text"]) for p in POSITIVES] + [str(n["text"]) for n in NEGATIVES]:
        once = redact(sample)
        assert redact(once) == once, sample


def test_redaction_replaces_a_private_key_block_with_one_marker() -> None:
    body = "\n".join(["MIIEpAIBAAKCAQEA7Zq1x9v2Lk3mN8pQ4rS6tU0wY2aB4cD6eF8gH0iJ2kL4mN6o"] * 20)
    text = f"before\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nafter"
    assert redact(text) == "before\n[REDACTED:private-key]\nafter"
    cut = f"key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n\nthat was all"
    assert redact(cut) == "key:\n[REDACTED:private-key]\n\nthat was all"
    prose = "A key file starts with -----BEGIN RSA PRIVATE KEY-----\nand the body follows."
    assert redact(prose) == prose


def test_redaction_of_json_values_reaches_keys_and_nested_strings() -> None:
    value = {
        "headers": {"Authorization": "Bearer 4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"}, f"k {KEY}": [1, "pw: hunter22"],
        "arguments": {"user": "bob", "password": "hunter22", "db_password": "", "token_count": "12345678"},
    }  # fmt: skip
    assert redact_value(value) == {
        "headers": {"Authorization": "Bearer [REDACTED:token]"}, "k [REDACTED:api-key]": [1, "pw: [REDACTED:secret]"],
        "arguments": {"user": "bob", "password": "[REDACTED:secret]", "db_password": "", "token_count": "12345678"},
    }  # fmt: skip
    assert has_secret(f"x {KEY}") and not has_secret("The token is expired")


def test_redaction_findings_are_ordered_and_disjoint() -> None:
    text = "\n".join(str(p["text"]) for p in POSITIVES)
    found = find_secrets(text)
    assert found and all(a.end <= b.start for a, b in itertools.pairwise(found))
    assert all(0 <= f.start < f.end <= len(text) for f in found)


def test_redaction_gate_opens_only_where_a_detector_could_match() -> None:
    assert gates("We walked along the river and talked about the weather.") == frozenset()
    for sample in [str(p["text"]) for p in POSITIVES] + [str(n["text"]) for n in NEGATIVES]:
        opened = gates(sample)
        for pattern in _DETECTOR_PATTERNS:
            if pattern.search(sample):
                assert pattern in opened, (pattern.pattern, sample)


_DETECTOR_PATTERNS = sorted(gates("\n".join(str(p["text"]) for p in POSITIVES)), key=lambda p: p.pattern)


def _timed(text: str) -> float:
    started = time.perf_counter()
    redact(text)
    return time.perf_counter() - started


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit",
    [
        "password: x token key=secret sk- ://a:b@ -----BEGIN RSA PRIVATE KEY----- Bearer ",
        '{"id": 1, "url": "https://example.com/a/1", "key": "k1", "note": "plain text"}, ',
    ],
    ids=["triggers", "json-line"],
)
def test_redaction_time_grows_linearly_with_the_text(unit: str) -> None:
    small, large = unit * (100_000 // len(unit)), unit * (800_000 // len(unit))
    _timed(small)  # warm up
    ratio = min(_timed(large) for _ in range(2)) / max(min(_timed(small) for _ in range(2)), 1e-3)
    assert ratio < 24, f"8x the text took {ratio:.1f}x the time"  # linear: ~8; quadratic: ~64


@pytest.mark.slow
def test_redaction_finds_secrets_anywhere_in_a_10_mb_input() -> None:
    line = "2026-11-27T10:00:00Z INFO request ok took=12ms user=alice commit=3f2a9c1d7e8b4a6f0c2d1e3b5a7c9d0e1\n"
    log = line * (5_000_000 // len(line)) + "retry with password=Zx9kq2Lm\n" + line * (5_000_000 // len(line))
    blob = '{"a": "' + "x" * 5_000_000 + f'", "token": "{KEY}", "b": "' + "y" * 5_000_000 + '"}'
    for text, secret, kind in ((log, "Zx9kq2Lm", "secret"), (blob, KEY, "api-key")):
        started = time.perf_counter()
        out = redact(text)
        assert time.perf_counter() - started < 120
        assert out == text.replace(secret, f"[REDACTED:{kind}]")


def _writer(mem: Memory, tmp_path: Path, metrics: WriterMetrics, **kw: object) -> MemoryWriter:
    return MemoryWriter(mem, trace_dir=tmp_path / "traces", metrics=metrics, background=False, interval=1,
                        trace_successes=True, **kw)  # type: ignore[arg-type]  # fmt: skip


class Recording:
    """An extractor that keeps what it was shown and writes one memory from the first turn's text."""

    model = "recording"

    def __init__(self) -> None:
        self.requests: list[ExtractRequest] = []

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        self.requests.append(request)
        workspace.write(f"noted: {request.turns[0].text}")


def test_writer_stores_turns_as_sent_and_redacts_prompts_traces_and_memories(
    wmem: Memory, tmp_path: Path, metrics: WriterMetrics
) -> None:
    extractor = Recording()
    writer = _writer(wmem, tmp_path, metrics, extractor=extractor)
    writer.start_conversation("c1", ALICE)
    sent = f"The token is expired. My new key is {KEY} and pw: hunter22"
    writer.append("c1", "user", sent, message_id="u1", tool_calls=[{"name": "login", "password": "hunter22"}])
    run = writer.append("c1", "assistant", "Noted.", message_id="a1").run
    assert run["outcome"] == "merged"
    stored = writer.conversations.turns("c1", 1, 1)[0]
    assert stored.text == sent and stored.tool_calls[0]["password"] == "hunter22"  # the user's text, recoverable
    request = extractor.requests[0]
    shown = request.prompt + " ".join(t.text + json.dumps(t.tool_calls) for t in request.turns)
    assert KEY not in shown and "hunter22" not in shown and "The token is expired" in request.prompt
    assert request.turns[0].message_id == "u1"
    trace = trace_path(writer.traces.directory, run["trace"]).read_text()
    assert (
        read_trace(writer.traces, run["trace"])["outcome"] == "merged" and KEY not in trace and "hunter22" not in trace
    )
    memories = writer.memories_for(ALICE, "token key", 1000)
    assert memories and all(KEY not in m.text and "hunter22" not in m.text for m in memories)
    assert any("The token is expired" in m.text and "[REDACTED:api-key]" in m.text for m in memories)
    assert "u1" in memories[0].sources  # the memory leads back to the turn as sent


def test_writer_run_error_is_recorded_redacted(wmem: Memory, tmp_path: Path, metrics: WriterMetrics) -> None:
    class Failing:
        model = "failing"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            raise WriterError(f"the server echoed Authorization: Bearer {KEY[3:]} back", "model_error")

    writer = _writer(wmem, tmp_path, metrics, extractor=Failing())
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "hello there")
    run = writer.append("c1", "assistant", "hi").run
    assert run["outcome"] == "model_error" and "Bearer [REDACTED:token]" in run["error"]
    assert KEY[3:] not in json.dumps(writer.runs(ALICE)) and KEY[3:] not in json.dumps(
        read_trace(writer.traces, run["trace"])
    )


def test_writer_redact_turns_stores_turns_redacted(wmem: Memory, tmp_path: Path, metrics: WriterMetrics) -> None:
    writer = _writer(wmem, tmp_path, metrics, extractor=OfflineExtractor(), redact_turns=True)
    assert writer.settings.redact_turns is True
    writer.start_conversation("c1", ALICE)
    sent = f"The token is expired and my key is {KEY}"
    _, turn = writer.conversations.append("c1", "user", sent, message_id="u1")
    assert turn.text == "The token is expired and my key is [REDACTED:api-key]"
    _, again = writer.conversations.append("c1", "user", sent, message_id="u1")  # a retry is still a no-op
    assert again == turn and writer.conversations.get("c1").turns == 1  # type: ignore[union-attr]
    assert writer.conversations.turns("c1", 1, 1)[0].text == turn.text


def test_writer_offline_extractor_skips_sentences_holding_a_secret(
    wmem: Memory, tmp_path: Path, metrics: WriterMetrics
) -> None:
    writer = _writer(wmem, tmp_path, metrics, extractor=OfflineExtractor())
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I prefer short answers. My password is hunter22, by the way.")
    run = writer.append("c1", "assistant", "Got it.").run
    texts = [m.text for m in writer.memories_for(ALICE, "answers password", 1000)]
    assert run["outcome"] == "merged" and texts == ["I prefer short answers."]
    trace = json.dumps(read_trace(writer.traces, run["trace"]))
    assert "hunter22" not in trace and re.search(r"My password is \[REDACTED:secret\]", trace)
