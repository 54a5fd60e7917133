"""``engram doctor`` prints the readiness report of ``/readyz`` for the CLI's store (issue #15)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from engram.cli import cli


def doctor(store: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", store, "--embedder", "hashing", "doctor", *args], obj={})
    return result.exit_code, result.output


def test_doctor_a_healthy_store_prints_each_component_and_exits_0(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    runner = CliRunner()
    assert runner.invoke(cli, ["--store", store, "--embedder", "hashing", "init"], obj={}).exit_code == 0
    assert runner.invoke(cli, ["--store", store, "remote", "add", "origin", f"dir://{tmp_path / 'r'}"]).exit_code == 0
    code, out = doctor(store)
    assert code == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if "│" in line}
    assert set(rows) >= {"store", "embedder", "index", "remotes"}
    assert all(" ok " in row for row in rows.values())
    assert "model: hashing" in rows["embedder"] and "origin ok" in rows["remotes"]
    assert out.strip().splitlines()[-1] == "ok"

    code, out = doctor(store, "--json")
    report = json.loads(out)
    assert code == 0 and report["ready"] is True and report["status"] == "ok"
    assert report["checks"]["store"]["ok"] is True and report["checks"]["store"]["ms"] >= 0
    assert report["checks"]["remotes"]["remotes"]["origin"]["ok"] is True


def test_doctor_a_store_that_is_down_exits_2_and_says_why() -> None:
    code, out = doctor("postgresql://postgres@127.0.0.1:1/test", "--json", "--timeout", "5")
    assert code == 2, out
    report = json.loads(out)
    assert report["ready"] is False and report["status"] == "down"
    assert "127.0.0.1" in report["checks"]["store"]["error"]
    assert set(report["checks"]) - {"breakers"} == {"store"}  # nothing else can be checked without the store
    code, out = doctor("postgresql://postgres@127.0.0.1:1/test")
    assert code == 2 and "not ready" in out and "Traceback" not in out


def test_doctor_a_missing_store_is_a_usage_error(tmp_path: Path) -> None:
    code, out = doctor(str(tmp_path / "nothing"))
    assert code == 1 and "no engram store" in out and "Traceback" not in out


def test_doctor_refuses_a_bad_timeout(tmp_path: Path) -> None:
    code, out = doctor(str(tmp_path / "nothing"), "--timeout", "0")
    assert code == 2 and "--timeout" in out
