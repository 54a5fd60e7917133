"""Readiness of every component (issue #15): embedder, search index, remotes and circuit breakers beside the store
and its cache; only the store decides readiness, any other failure is "degraded"; /readyz and metrics agree."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import engram
from engram.embed import HashingEmbedder
from engram.errors import EmbedderError
from engram.ops import metrics
from engram.ops.health import readiness
from engram.server import ServerConfig, create_app


class _Down(HashingEmbedder):
    """An embedder whose endpoint is down (every embedding fails)."""

    def embed(self, texts: Sequence[str]) -> object:  # type: ignore[override]
        raise EmbedderError("embedding endpoint unreachable: connection refused")

    def embed_query(self, text: str) -> object:  # type: ignore[override]
        raise EmbedderError("embedding endpoint unreachable: connection refused")


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[engram.Memory]:
    found = engram.open(str(tmp_path / "store"), embedder="hashing")
    yield found
    found.close()


def test_health_a_memory_reports_its_embedder_and_index(mem: engram.Memory) -> None:
    mem.put(("docs",), "a", {"text": "ready"})
    report = readiness(mem, timeout=5.0)
    assert report.ready and report.status == "ok", report.checks
    assert report.checks["embedder"]["ok"] and report.checks["embedder"]["model"] == mem.pool.embedder.model_id
    index = report.checks["index"]
    assert index["ok"] and index["engine"] == "in-process" and index["lag"] is None  # not loaded yet
    mem.search(("docs",), "ready")
    mem.put(("docs",), "b", {"text": "later"})
    assert readiness(mem, timeout=5.0).checks["index"]["lag"] == 1
    assert all(isinstance(check["ms"], float) for check in report.checks.values())


def test_health_an_embedder_that_is_down_degrades_but_stays_ready(tmp_path: Path) -> None:
    with engram.open(str(tmp_path / "store"), embedder=_Down()) as down:
        report = readiness(down, timeout=5.0)
    assert report.ready and report.status == "degraded"
    assert report.checks["embedder"]["ok"] is False and "connection refused" in report.checks["embedder"]["error"]
    assert report.checks["store"]["ok"] is True


def test_health_remotes_are_checked_and_one_unreachable_degrades(mem: engram.Memory, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    good = {"origin": f"dir://{tmp_path / 'remote'}"}
    report = readiness(mem, timeout=5.0, remotes=good)
    assert report.status == "ok" and report.checks["remotes"]["remotes"]["origin"]["ok"] is True
    report = readiness(mem, timeout=5.0, remotes=lambda: {**good, "broken": f"dir://{blocker}/inside"})
    assert report.ready and report.status == "degraded"
    remotes = report.checks["remotes"]
    assert remotes["ok"] is False and "broken" in remotes["error"] and "origin" not in remotes["error"]
    assert remotes["remotes"]["broken"]["ok"] is False and remotes["remotes"]["origin"]["ok"] is True


def test_health_breakers_are_listed_without_degrading_the_store(mem: engram.Memory) -> None:
    metrics.track_breaker("test:health", lambda: "open")
    try:
        report = readiness(mem, timeout=5.0)
    finally:
        metrics.untrack_breaker("test:health")
    assert report.checks["breakers"]["states"]["test:health"] == "open"
    assert "test:health" in report.checks["breakers"]["open"]
    assert report.ready and report.checks["store"]["ok"]


def test_health_each_report_is_kept_for_the_metrics(tmp_path: Path) -> None:
    with engram.open(str(tmp_path / "store"), embedder=_Down()) as down:
        readiness(down, timeout=5.0)
    registry = metrics.registry()
    assert registry.get_sample_value("engram_ready") == 1
    assert registry.get_sample_value("engram_component_up", {"component": "embedder"}) == 0
    assert registry.get_sample_value("engram_component_up", {"component": "store"}) == 1
    assert (registry.get_sample_value("engram_component_check_seconds", {"component": "store"}) or -1) >= 0


def test_readyz_reports_every_component_of_the_served_store(tmp_path: Path) -> None:
    with TestClient(create_app(ServerConfig(store=str(tmp_path / "store"), embedder="hashing"))) as client:
        body = client.get("/readyz").json()
    assert body["status"] == "ok"
    assert {"store", "embedder", "index"} <= set(body["checks"])
    assert body["checks"]["embedder"]["model"] == HashingEmbedder().model_id
