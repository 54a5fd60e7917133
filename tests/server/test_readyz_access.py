"""What ``/readyz`` and ``/metrics`` show to whom: only up or down without an admin key, details to an admin,
never a credential or a server path, a removed remote gone at once, and each remote probed once per a few
seconds however many probes come."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import engram
from engram.ops import health
from engram.ops.health import Check
from engram.ops.remotes import remote_config
from engram.ops.remotes.config import config_file
from engram.server import ServerConfig, create_app

from .conftest import Keyed, error_of

SECRET = "TOPSECRETKEY"


def _name_legacy_remotes(client: TestClient, store: Path, remotes: dict[str, str]) -> None:
    """Name remotes of the served base store as they were stored before URLs with credentials were refused."""
    client.app.state.engram.tenants.probe()  # type: ignore[attr-defined]  # the base store exists from now on
    path = config_file(str(store))
    assert path is not None
    path.write_text(json.dumps({"remotes": remotes}), encoding="utf-8")


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No S3 credentials anywhere: a probe of an S3 remote fails at once, before any connection."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    engram.reset()  # the process's shared S3 clients keep the credentials they were made with: make new ones


def _admin_readyz(client: TestClient, admin: dict[str, str]) -> Any:
    """``/readyz`` as an admin sees it once the remote probes have answered: on a loaded machine the first
    probe of an S3 remote (making its client) can outlast the 1 s deadline; it goes on running, and a later
    call gets its answer."""
    deadline = time.monotonic() + 60
    while True:
        answer = client.get("/readyz", headers=admin)
        remotes = answer.json()["checks"].get("remotes", {})
        if "timed out" not in remotes.get("error", "") or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def _remotes(tmp_path: Path) -> dict[str, str]:
    bucket = f"engram-readyz-{uuid.uuid4().hex[:8]}"  # a bucket of its own: remote answers are kept by URL
    return {
        "leaky": f"s3://AKIAEXAMPLE:{SECRET}@{bucket}/p?endpoint=http://127.0.0.1:1",
        "nokeys": f"s3://{bucket}/p?endpoint=http://127.0.0.1:1",
        "folder": f"dir://{tmp_path / 'remote'}",
    }


def test_readyz_without_an_admin_key_says_only_up_or_down(keyed: Keyed, tmp_path: Path, no_aws: None) -> None:
    client, make_key = keyed()
    _name_legacy_remotes(client, tmp_path / "base", _remotes(tmp_path))
    callers = {
        "anonymous": {},
        "unknown key": {"X-API-Key": "ek_not-a-key"},
        "reader": make_key("acme", "read", "write"),
        "admin of a prefix": make_key("acme", "admin", prefix=("a",)),
    }
    for who, headers in callers.items():
        answer = client.get("/readyz", headers=headers)
        assert answer.status_code == 200, (who, answer.text)
        assert answer.json() == {"status": "ok", "checks": {}}, who  # not even "degraded"

    client.app.state.engram.tenants.probe().chunks.close()  # type: ignore[attr-defined]
    down = client.get("/readyz")
    error = error_of(down, 503, "not_ready")
    assert error["details"] is None and down.headers["Retry-After"] == "1"
    assert "store" not in error["message"] and SECRET not in down.text


def test_readyz_an_admin_sees_details_without_a_credential_or_a_path(
    keyed: Keyed, tmp_path: Path, no_aws: None
) -> None:
    client, make_key = keyed()
    _name_legacy_remotes(client, tmp_path / "base", _remotes(tmp_path))
    admin = make_key("ops", "admin")
    answer = _admin_readyz(client, admin)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "degraded" and {"store", "remotes"} <= set(body["checks"])
    shown = body["checks"]["remotes"]["remotes"]
    assert set(shown) == {"leaky", "nokeys", "folder"} and shown["folder"]["ok"] is True
    assert not shown["leaky"]["ok"] and "carries a credential" in shown["leaky"]["error"]
    assert SECRET not in answer.text and str(tmp_path) not in answer.text
    metrics = client.get("/metrics", headers=admin)
    assert metrics.status_code == 200 and "engram_disk_free_bytes" in metrics.text
    assert SECRET not in metrics.text and str(tmp_path) not in metrics.text


def test_readyz_a_removed_remote_is_gone_from_readyz_and_metrics_at_once(
    keyed: Keyed, tmp_path: Path, no_aws: None
) -> None:
    client, make_key = keyed()
    remotes = _remotes(tmp_path)
    _name_legacy_remotes(client, tmp_path / "base", remotes)
    bucket = remotes["nokeys"].split("/")[2]
    admin = make_key("ops", "admin")
    before = _admin_readyz(client, admin).text
    assert "leaky" in before and "nokeys" in before and "no S3 credentials" in before
    config = remote_config(client.app.state.engram.tenants.probe(), str(tmp_path / "base"))  # type: ignore[attr-defined]
    assert config.shown()["leaky"] == remotes["leaky"].replace(SECRET, "***")  # what `engram remote list` prints
    for name in ("leaky", "nokeys"):
        config.remove(name)
    after = _admin_readyz(client, admin)
    assert set(after.json()["checks"]["remotes"]["remotes"]) == {"folder"}
    metrics = client.get("/metrics", headers=admin).text
    assert bucket not in after.text and bucket not in metrics  # no breaker of the removed S3 remote lingers
    assert SECRET not in after.text + metrics


def test_readyz_a_flood_of_probes_probes_each_remote_once(
    keyed: Keyed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = keyed()
    _name_legacy_remotes(client, tmp_path / "base", {"folder": f"dir://{tmp_path / 'remote'}"})
    probed: list[str] = []
    real = health._probe_remote

    def counted(url: str) -> Check:
        probed.append(url)
        time.sleep(0.2)  # slow enough that the concurrent calls below overlap it
        return real(url)

    monkeypatch.setattr(health, "_probe_remote", counted)
    answers: list[int] = []
    calls = [threading.Thread(target=lambda: answers.append(client.get("/readyz").status_code)) for _ in range(6)]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    assert answers == [200] * 6
    assert client.get("/readyz").status_code == 200 and client.get("/readyz").status_code == 200
    assert len(probed) == 1, probed  # concurrent calls shared one probe, later ones reused its answer
    monkeypatch.setattr(health, "REMOTE_TTL", 0.0)
    client.get("/readyz")
    assert len(probed) == 2  # once the answer is old, the remote is probed again


def test_readyz_a_server_without_keys_shows_details_to_every_caller(tmp_path: Path, no_aws: None) -> None:
    store = tmp_path / "store"
    with TestClient(create_app(ServerConfig(store=str(store), embedder="hashing"))) as client:
        _name_legacy_remotes(client, store, _remotes(tmp_path))
        answer = client.get("/readyz")
    assert answer.status_code == 200 and set(answer.json()["checks"]["remotes"]["remotes"]) == {
        "leaky", "nokeys", "folder"}  # fmt: skip
    assert SECRET not in answer.text and str(tmp_path) not in answer.text
