"""Scheduled backups (issue #15): ``engram serve --backup-every``, against a real ``dir://`` remote."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import engram
from engram.cli import cli
from engram.errors import ConfigError, InvalidInputError, NotFoundError, StorageError
from engram.observe import LAST_BACKUP
from engram.ops.backup import create_backup, list_backups, metric_label
from engram.ops.remotes import Remote, open_remote
from engram.ops.schedule import BackupSchedule, parse_duration
from engram.repo import Repository
from engram.server.app import create_app
from engram.server.config import ServerConfig


def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[engram.Memory]:
    mem = engram.open(str(tmp_path / "store"), embedder=None)
    mem.put(("a",), "k", {"text": "hello"})
    yield mem
    mem.close()


@pytest.fixture
def remote_url(tmp_path: Path) -> str:
    return f"dir://{tmp_path / 'remote'}"


def _lease(repo: Repository) -> object:
    @contextlib.contextmanager
    def lease() -> Iterator[Repository]:
        yield repo

    return lease


def test_parse_duration_units_and_errors() -> None:
    assert [parse_duration(t) for t in ("30m", "6h", "24h", "7d", "90s", "1.5h", " 2 d ")] == [
        1800.0, 21600.0, 86400.0, 604800.0, 90.0, 5400.0, 172800.0,
    ]  # fmt: skip
    for bad in ("", "24", "h", "0h", "-1h", "5x", "1e3s", "1 hour"):
        with pytest.raises(InvalidInputError, match="invalid duration"):
            parse_duration(bad)


def test_schedule_backs_up_every_interval_and_stops(store: engram.Memory, remote_url: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, "engram.backup")
    schedule = BackupSchedule(_lease(store.repo), lambda: open_remote(remote_url), 0.2)  # type: ignore[arg-type]
    started = time.time()
    schedule.start()
    try:
        _until(lambda: len(list_backups(open_remote(remote_url))) >= 2)
        store.put(("a",), "k2", {"text": "more"})
        count = len(list_backups(open_remote(remote_url)))
        _until(lambda: len(list_backups(open_remote(remote_url))) > count)
    finally:
        schedule.stop()
    assert not schedule.running
    done = len(list_backups(open_remote(remote_url)))
    time.sleep(0.5)
    assert len(list_backups(open_remote(remote_url))) == done  # stopped: no more backups
    assert schedule.last_success is not None and schedule.last_success >= started
    assert schedule.last_error is None and schedule.failures == 0 and schedule.runs == done
    newest = list_backups(open_remote(remote_url))[-1]
    assert newest.items == {"main": 2}
    assert LAST_BACKUP.labels(metric_label(remote_url))._value.get() == pytest.approx(newest.time / 1000)
    assert any("scheduled backup" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_schedule_first_run_waits_unless_the_last_backup_is_old(store: engram.Memory, remote_url: str) -> None:
    remote = open_remote(remote_url)
    hour = 3600.0
    fresh = BackupSchedule(_lease(store.repo), lambda: remote, hour)  # type: ignore[arg-type]
    assert fresh.first_delay() == 0.0  # no backup yet: at once
    gauge = LAST_BACKUP.labels(metric_label(remote_url))
    assert gauge._value.get() == 0.0  # exported as "never", so that an alert can fire if it keeps failing
    made, _ = create_backup(store.repo, remote)
    now = made.time / 1000
    gauge.set(-1.0)
    soon = BackupSchedule(_lease(store.repo), lambda: remote, hour, clock=lambda: now + 600)  # type: ignore[arg-type]
    assert soon.first_delay() == pytest.approx(hour - 600)
    assert gauge._value.get() == pytest.approx(now)  # a new process learns the newest backup's time from the remote
    late = BackupSchedule(_lease(store.repo), lambda: remote, hour, clock=lambda: now + 2 * hour)  # type: ignore[arg-type]
    assert late.first_delay() == 0.0


def test_schedule_first_run_after_the_interval_when_the_last_is_recent(store: engram.Memory, remote_url: str) -> None:
    remote = open_remote(remote_url)
    create_backup(store.repo, remote)
    schedule = BackupSchedule(_lease(store.repo), lambda: open_remote(remote_url), 0.6)  # type: ignore[arg-type]
    schedule.start()
    try:
        time.sleep(0.2)
        assert len(list_backups(remote)) == 1  # the last one is younger than the interval: wait for it
        _until(lambda: len(list_backups(open_remote(remote_url))) == 2)
    finally:
        schedule.stop()


def test_schedule_never_overlaps_itself(store: engram.Memory, remote_url: str) -> None:
    entered, release = threading.Event(), threading.Event()

    @contextlib.contextmanager
    def slow() -> Iterator[Repository]:
        entered.set()
        release.wait(10)
        yield store.repo

    schedule = BackupSchedule(slow, lambda: open_remote(remote_url), 3600)
    first = threading.Thread(target=schedule.run_once)
    first.start()
    assert entered.wait(10)
    assert schedule.run_once() is None  # the first is still running: skipped, not queued
    release.set()
    first.join(10)
    assert schedule.runs == 1 and len(list_backups(open_remote(remote_url))) == 1
    assert schedule.run_once() is not None


def test_schedule_failure_is_logged_and_retried(store: engram.Memory, remote_url: str,
                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    attempts: list[int] = []

    def flaky() -> Remote:
        attempts.append(1)
        if len(attempts) < 3:
            raise StorageError("the remote is down")
        return open_remote(remote_url)

    schedule = BackupSchedule(_lease(store.repo), flaky, 3600, retry_after=0.1)  # type: ignore[arg-type]
    schedule.start()
    try:
        _until(lambda: schedule.last_success is not None)
    finally:
        schedule.stop()
    assert schedule.failures >= 1 and schedule.last_error is None
    assert any("scheduled backup failed" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_schedule_rejects_bad_intervals(store: engram.Memory) -> None:
    with pytest.raises(InvalidInputError):
        BackupSchedule(_lease(store.repo), lambda: None, 0)  # type: ignore[arg-type, return-value]


def test_server_runs_the_schedule_and_stops_it_at_shutdown(tmp_path: Path, remote_url: str) -> None:
    config = ServerConfig(store=str(tmp_path / "served"), embedder=None, backup_every=0.2, backup_remote=remote_url,
                          index_delay=None)  # fmt: skip
    app = create_app(config)
    with TestClient(app) as client:
        assert client.put("/v1/items", json={"namespace": ["a"], "key": "k", "value": {"x": 1}}).status_code < 300
        _until(lambda: any(b.items.get("main") == 1 for b in list_backups(open_remote(remote_url))))
    done = len(list_backups(open_remote(remote_url)))
    assert not any(t.name == "engram-backup-schedule" for t in threading.enumerate())
    time.sleep(0.4)
    assert len(list_backups(open_remote(remote_url))) == done


def test_server_schedule_config_errors(tmp_path: Path, remote_url: str) -> None:
    with pytest.raises(NotFoundError, match="no remote 'nowhere'"):
        create_app(ServerConfig(store=str(tmp_path / "s"), embedder=None, backup_every=60,
                                backup_remote="nowhere")).state.engram.tenants.backups()  # fmt: skip
    keyed = ServerConfig(store=str(tmp_path / "k"), embedder=None, backup_every=60, backup_remote=remote_url,
                         require_keys=True)  # fmt: skip
    with pytest.raises(ConfigError, match="API keys"):
        create_app(keyed).state.engram.tenants.backups()
    assert create_app(ServerConfig(store=str(tmp_path / "n"), embedder=None)).state.engram.tenants.backups() is None


def test_cli_serve_backup_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["--store", str(tmp_path / "c"), "serve", "--backup-every", "soon"])
    assert bad.exit_code == 2 and "invalid duration 'soon'" in bad.output
    alone = runner.invoke(cli, ["--store", str(tmp_path / "c"), "serve", "--backup-remote", "origin"])
    assert alone.exit_code == 2 and "--backup-remote needs --backup-every" in alone.output
    missing = runner.invoke(cli, ["--store", str(tmp_path / "c"), "--embedder", "hashing", "serve",
                                   "--backup-every", "24h", "--backup-remote", "nowhere"])  # fmt: skip
    assert missing.exit_code != 0 and "no remote 'nowhere'" in missing.output
