"""Prometheus metrics of the memory writer.

- ``engram_writer_runs_total{outcome}``: runs by outcome.
- ``engram_writer_run_duration_seconds``: run duration (histogram).
- ``engram_writer_skips_total{reason}``: skipped runs by gate reason.
- ``engram_writer_lag_turns{target}``: completed assistant turns not yet processed, per target (set after every
  run and every status: it equals ``status()["pending_turns"]``).
- ``engram_writer_dead_letters_total``: targets whose automatic runs stopped after ``max_failures`` failed runs.
- ``engram_writer_dead_lettered{target}``: 1 while a target is dead-lettered (until ``retry``), else 0.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY

from engram import runtime
from engram.writer.redact import redact

log = logging.getLogger("engram.writer")


class WriterMetrics:
    """The writer's metrics on one registry (the process-wide default, or a given one).

    Attributes:
        registry: the registry they are on.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Register the metrics on ``registry`` (default: prometheus-client's default registry)."""
        reg = REGISTRY if registry is None else registry
        self.registry = reg
        self.runs = Counter("engram_writer_runs", "Memory writer runs by outcome.", ["outcome"], registry=reg)
        self.duration = Histogram(
            "engram_writer_run_duration_seconds",
            "Memory writer run duration.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=reg,
        )
        self.skips = Counter("engram_writer_skips", "Memory writer skipped runs by reason.", ["reason"], registry=reg)
        self.lag = Gauge(
            "engram_writer_lag_turns", "Completed assistant turns not yet processed.", ["target"], registry=reg
        )
        self.dead_letters = Counter(
            "engram_writer_dead_letters", "Targets dead-lettered after repeated failed runs.", registry=reg
        )
        self.dead_lettered = Gauge(
            "engram_writer_dead_lettered", "1 while a target's automatic runs are stopped.", ["target"], registry=reg
        )


def default_metrics() -> WriterMetrics:
    """The metrics on prometheus-client's default registry (created on first use, kept by :mod:`engram.runtime`
    for the process's life)."""
    return runtime.default.once("engram.writer.metrics", WriterMetrics)


#: Outcomes logged at WARNING (the others at INFO).
FAILURES = frozenset({"model_error", "timeout", "policy_violation", "conflict", "crashed", "lease_lost", "error",
                      "no_tool_call"})  # fmt: skip


def observe_run(metrics: WriterMetrics, record: dict[str, Any]) -> None:
    """Count a finished run in ``metrics`` and log it (metadata only): INFO for a success, WARNING for a failure."""
    metrics.runs.labels(outcome=record["outcome"]).inc()
    metrics.duration.observe(float(record.get("duration_ms", 0.0)) / 1000)
    left = record.get("left") or {}
    log.log(
        logging.WARNING if record["outcome"] in FAILURES else logging.INFO,
        "writer run end: run=%s target=%s outcome=%s added=%s updated=%s deleted=%s steps=%s left=%s "
        "duration_ms=%.1f error=%s trace=%s",
        record["id"], record["target"], record["outcome"], record.get("added"), record.get("updated"),
        record.get("deleted"), record.get("steps"), left.get("turns", 0), float(record.get("duration_ms") or 0.0),
        None if record.get("error") is None else redact(str(record["error"])), record.get("trace"),
    )  # fmt: skip


def dead_lettered(metrics: WriterMetrics, target: str, letter: dict[str, Any]) -> None:
    """Count and log a target that stopped retrying (see :attr:`~engram.writer.state.WriterState.dead_letter`)."""
    metrics.dead_letters.inc()
    metrics.dead_lettered.labels(target=target).set(1)
    log.warning(
        "writer dead-lettered: target=%s after %s failed runs (last run=%s outcome=%s); its turns stay pending "
        "until retry", target, letter.get("failures"), letter.get("run"), letter.get("outcome"),
    )  # fmt: skip
