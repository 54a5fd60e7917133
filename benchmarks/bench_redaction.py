"""Secret redaction (issue #28): recall and false positives on the corpus kept in the tests, and the cost per KB.

Compares, on ``tests/writer/redaction_corpus.json`` (made-up secrets in prose, config and code, and near-miss
negatives: prose about passwords and tokens, hashes, commit ids, UUIDs, versions, code identifiers):

- **before**: the hand-written patterns engram used until this change (frozen below);
- **detect-secrets alone**: ``detect_secrets.core.scan.scan_line`` with the library's default settings (every
  plugin, default filters; an entropy finding counts only above the plugin's limit, as ``detect-secrets scan
  --string`` reports it), each secret value it reports removed from the line;
- **detect-secrets, parts**: its two high-entropy plugins (unquoted, as an ad-hoc scan runs them) and its keyword
  plugin in its unquoted config-file mode, on the negatives: why engram leaves them out;
- **engram**: ``engram.writer.redact`` (detect-secrets' format plugins and filters, plus what they lack).

A positive counts as caught when none of its secrets is left in the output; a negative is a false positive when
the output differs from the input. Then, when ``../shared/data/locomo10.json`` is there, the LoCoMo turns (real
conversation, no secrets): how many each redactor changes. Then the time per KB on the negatives (every line a
near miss), the positives, the LoCoMo turns (one call per turn) and a 1 MB log, and the time of one 10 MB input
of each shape (a log, one 10 MB line of JSON, a text made only of keyword and header triggers).

    .venv/bin/python benchmarks/bench_redaction.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from detect_secrets.core.scan import scan_line
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP, KeywordDetector
from detect_secrets.settings import default_settings

from engram.writer.redact import redact

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "writer" / "redaction_corpus.json"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo10.json"

# The redactor before this change (src/engram/writer/redact.py at 7f061b2), kept here as the baseline.
_OLD = (
    ("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)),
    ("api-key", re.compile(r"\b(?:sk|pk|rk)-(?:[A-Za-z0-9_-]{2,}-)?[A-Za-z0-9_-]{16,}")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google-key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{12,}")),
    ("url-credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@")),
    (
        "secret",
        re.compile(
            r"(?i)\b(password|passwd|passphrase|pwd|secret|api[_ -]?key|access[_ -]?key|auth[_ -]?token|token)"
            r"(\s*(?:is|=|:)\s*)(['\"]?)[^\s'\",;]{4,}\3"
        ),
    ),
)


def old_redact(text: str) -> str:
    for name, pattern in _OLD:
        if name == "secret":
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED:secret]", text)
        elif name == "url-credentials":
            text = pattern.sub(lambda m: f"{m.group(1)}:[REDACTED:password]@", text)
        else:
            text = pattern.sub(f"[REDACTED:{name}]", text)
    return text


_HEX, _B64 = HexHighEntropyString(), Base64HighEntropyString()
_LIMITS = {_HEX.secret_type: _HEX, _B64.secret_type: _B64}


def _remove(line: str, values: set[str]) -> str:
    for value in sorted(values, key=len, reverse=True):
        line = line.replace(value, "[REDACTED]")
    return line


def detect_secrets_alone(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        values = set()
        for found in scan_line(line):
            plugin = _LIMITS.get(found.type)
            value = found.secret_value or ""
            if value and (plugin is None or plugin.calculate_shannon_entropy(value) > plugin.entropy_limit):
                values.add(value)
        lines.append(_remove(line, values))
    return "\n".join(lines)


def _high(plugin: Base64HighEntropyString | HexHighEntropyString, text: str) -> set[str]:
    return {v for v in plugin.analyze_string(text) if plugin.calculate_shannon_entropy(v) > plugin.entropy_limit}


def entropy_only(text: str) -> str:
    values: set[str] = set()
    for plugin in (_HEX, _B64):
        with plugin.non_quoted_string_regex(is_exact_match=False):
            values |= _high(plugin, text)
    return _remove(text, values)


def entropy_quoted(text: str) -> str:
    return _remove(text, _high(_HEX, text) | _high(_B64, text))


_KEYWORD = KeywordDetector()


def keyword_unquoted(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        lines.append(_remove(line, set(_KEYWORD.analyze_string(line, CONFIG_DENYLIST_REGEX_TO_GROUP))))
    return "\n".join(lines)


def score(corpus: dict[str, list[dict[str, object]]], fn: Callable[[str], str]) -> tuple[int, int, list[str]]:
    caught = sum(1 for p in corpus["positives"] if not any(str(s) in fn(str(p["text"])) for s in p["secrets"]))  # type: ignore[attr-defined]
    flagged = [str(n["text"]) for n in corpus["negatives"] if fn(str(n["text"])) != n["text"]]
    return caught, len(flagged), flagged


def per_kb(fn: Callable[[str], str], text: str, rounds: int) -> float:
    """Median microseconds per KB of ``fn(text)`` over ``rounds`` rounds."""
    times = []
    repeat = max(1, 200_000 // max(1, len(text)))
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeat):
            fn(text)
        times.append((time.perf_counter() - started) / repeat)
    return statistics.median(times) * 1e6 / (len(text.encode()) / 1024)


def log_text(size: int, rng: random.Random) -> str:
    lines, total = [], 0
    while total < size:
        n = rng.randrange(10_000)
        line = (
            f"2026-11-27T10:{n % 60:02d}:{n % 59:02d}Z INFO req={rng.getrandbits(128):032x} path=/api/v1/items/{n} "
            f"status=200 took={n % 97}ms user=user{n % 50} commit={rng.getrandbits(160):040x}"
        )
        if n % 500 == 0:
            line += f" password=Pw{n}x9q"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    corpus = json.loads(CORPUS.read_text())
    positives, negatives = len(corpus["positives"]), len(corpus["negatives"])
    print(f"corpus: {positives} positives, {negatives} near-miss negatives\n")
    print("| redactor | positives caught | recall | false positives |")
    print("|---|---|---|---|")
    with default_settings():
        variants: list[tuple[str, Callable[[str], str]]] = [
            ("before (hand-written patterns)", old_redact),
            ("detect-secrets alone (default settings)", detect_secrets_alone),
            ("detect-secrets entropy plugins, unquoted", entropy_only),
            ("detect-secrets entropy plugins, quoted only", entropy_quoted),
            ("detect-secrets keyword plugin, unquoted (config mode)", keyword_unquoted),
            ("engram.writer.redact (after)", redact),
        ]
        flagged_by: dict[str, list[str]] = {}
        for name, fn in variants:
            caught, fps, flagged = score(corpus, fn)
            flagged_by[name] = flagged
            print(f"| {name} | {caught} / {positives} | {caught / positives:.3f} | {fps} / {negatives} |")
    for name, flagged in flagged_by.items():
        if flagged and "entropy" not in name:
            print(f"\n{name}, false positives: " + "; ".join(repr(t) for t in flagged))

    turns = locomo_turns()
    if turns:
        before, after = (sum(1 for t in turns if fn(t) != t) for fn in (old_redact, redact))
        print(f"\nLoCoMo: {len(turns)} turns, turns changed: before {before}, after {after}")

    rng = random.Random(28)
    prose = "\n".join(str(n["text"]) for n in corpus["negatives"])
    dense = "\n".join(str(p["text"]) for p in corpus["positives"])
    log = log_text(1_000_000, rng)
    print("\n| text | before, µs/KB | after, µs/KB |")
    print("|---|---|---|")
    texts: list[tuple[str, Callable[[Callable[[str], str]], float]]] = [
        ("the negatives (a near miss on every line)", lambda fn: per_kb(fn, prose, args.rounds)),
        ("the positives", lambda fn: per_kb(fn, dense, args.rounds)),
        ("1 MB log", lambda fn: per_kb(fn, log, args.rounds)),
    ]
    if turns:
        texts.append((f"LoCoMo, one call per turn ({len(turns)} turns)", lambda fn: per_turn(fn, turns, args.rounds)))
    for label, measure in texts:
        print(f"| {label} | {measure(old_redact):.0f} | {measure(redact):.0f} |")

    print("\n| 10 MB input | before, s | after, s |")
    print("|---|---|---|")
    big_json = json.dumps([{"id": i, "url": f"https://example.com/a/{i}", "key": f"k{i}", "note": "plain text"}
                           for i in range(120_000)])[:10_000_000]  # fmt: skip
    triggers = "password: x token key=secret sk- ://a:b@ -----BEGIN RSA PRIVATE KEY----- Bearer "
    shapes = (("log", log_text(10_000_000, rng)), ("one line of JSON", big_json),
              ("only triggers", (triggers * 130_000)[:10_000_000]))  # fmt: skip
    for label, text in shapes:
        timings = []
        for fn in (old_redact, redact):
            started = time.perf_counter()
            fn(text)
            timings.append(time.perf_counter() - started)
        print(f"| {label} | {timings[0]:.2f} | {timings[1]:.2f} |")


def locomo_turns() -> list[str]:
    if not LOCOMO.exists():
        return []
    turns = []
    for sample in json.loads(LOCOMO.read_text()):
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns += [str(t["text"]) for t in session if "text" in t]
    return turns


def per_turn(fn: Callable[[str], str], turns: list[str], rounds: int) -> float:
    """Median microseconds per KB of ``fn`` called on each turn."""
    size = sum(len(t.encode()) for t in turns) / 1024
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for turn in turns:
            fn(turn)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6 / size


if __name__ == "__main__":
    main()
