"""Prometheus metrics of the memory writer.

- ``engram_writer_runs_total{outcome}``: runs by outcome.
- ``engram_writer_run_duration_seconds``: run duration (histogram).
- ``engram_writer_skips_total{reason}``: skipped runs by gate reason.
- ``engram_writer_lag_turns{target}``: completed assistant turns not yet processed, per target.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY

from engram import runtime

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


def default_metrics() -> WriterMetrics:
    """The metrics on prometheus-client's default registry (created on first use, kept by :mod:`engram.runtime`
    for the process's life)."""
    return runtime.default.once("engram.writer.metrics", WriterMetrics)


def observe_run(metrics: WriterMetrics, record: dict[str, Any]) -> None:
    """Count a finished run in ``metrics`` and log it (metadata only)."""
    metrics.runs.labels(outcome=record["outcome"]).inc()
    metrics.duration.observe(float(record.get("duration_ms", 0.0)) / 1000)
    log.info(
        "writer run end: run=%s target=%s outcome=%s actions=%s steps=%s duration_ms=%.1f trace=%s",
        record["id"], record["target"], record["outcome"], record.get("actions"), record.get("steps"),
        float(record.get("duration_ms", 0.0)), record.get("trace"),
    )  # fmt: skip
