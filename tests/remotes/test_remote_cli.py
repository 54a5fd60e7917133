"""The remote and backup commands, and export --with-history, through click's runner on dir:// remotes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from engram.cli import cli


def _run(store: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(store), "--embedder", "hashing", *args], obj={})
    return result.exit_code, result.output


def test_cli_remote_push_clone_pull(tmp_path: Path) -> None:
    a, b, remote = tmp_path / "a", tmp_path / "b", f"dir://{tmp_path / 'remote'}"
    assert _run(a, "put", "notes", "k1", '{"text": "one"}')[0] == 0
    assert _run(a, "remote", "add", "origin", remote)[0] == 0
    code, shown = _run(a, "remote", "list")
    assert code == 0 and f"origin  {remote}" in shown
    assert _run(a, "remote", "add", "origin", remote)[0] == 1  # exists: one red line
    code, shown = _run(a, "push", "origin", "--all")
    assert code == 0 and "heads/main" in shown
    code, shown = _run(b, "clone", remote)
    assert code == 0, shown
    assert json.loads(_run(b, "get", "notes", "k1")[1]) == {"text": "one"}
    _run(a, "put", "notes", "k2", '{"text": "two"}')
    _run(a, "push")
    code, shown = _run(b, "pull")
    assert code == 0 and "fast-forward" in shown
    assert json.loads(_run(b, "get", "notes", "k2")[1]) == {"text": "two"}
    _run(b, "put", "notes", "k3", '{"text": "three"}')
    code, shown = _run(a, "put", "notes", "k4", '{"text": "four"}')
    code, shown = _run(b, "push")
    assert code == 0
    code, shown = _run(a, "push")
    assert code == 1 and "pull first" in shown
    assert _run(a, "remote", "remove", "origin")[0] == 0
    assert "no remotes" in _run(a, "remote", "list")[1]


def test_cli_backup_create_list_verify_restore_prune(tmp_path: Path) -> None:
    a, remote = tmp_path / "a", f"dir://{tmp_path / 'remote'}"
    _run(a, "put", "notes", "k1", '{"text": "one"}')
    _run(a, "remote", "add", "backups", remote)
    code, shown = _run(a, "backup", "create", "--remote", "backups", "--name", "first")
    assert code == 0 and "backup first" in shown, shown
    _run(a, "put", "notes", "k2", '{"text": "two"}')
    assert _run(a, "backup", "create", "--remote", "backups", "--name", "second")[0] == 0
    code, shown = _run(a, "backup", "list", "--remote", "backups", "--json")
    assert [b["name"] for b in json.loads(shown)] == ["first", "second"]
    code, shown = _run(a, "backup", "verify", "--remote", "backups")
    assert code == 0 and shown.count(": ok") == 2, shown
    target = tmp_path / "restored"
    code, shown = _run(a, "backup", "restore", "first", "--to", str(target), "--dry-run", "--remote", "backups")
    assert code == 0 and "dry run" in shown and "heads/main: (new store) -> " in shown, shown
    assert not target.exists()
    planned = [line for line in shown.splitlines() if "dry run" not in line]
    code, shown = _run(a, "backup", "restore", "first", "--to", str(target), "--remote", "backups")
    assert code == 0 and "ok" in shown, shown
    assert shown.splitlines()[: len(planned)] == planned  # one plan: the dry run prints what the restore does
    assert _run(target, "get", "notes", "k2")[0] != 0 and _run(target, "get", "notes", "k1")[0] == 0
    code, shown = _run(a, "backup", "prune", "--keep-last", "1", "--remote", "backups")
    assert code == 0 and "removed 1 backup (first)" in shown
    assert _run(a, "backup", "prune", "--remote", "backups")[0] == 1  # no rule: an error, not a wipe


def test_cli_export_with_history_then_import(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, "put", "notes", "k1", '{"text": "one"}', "--author", "alice", "-m", "first note")
    _run(a, "put", "notes", "k1", '{"text": "uno"}', "--author", "bob", "-m", "in Italian")
    dump = tmp_path / "history.jsonl"
    code, shown = _run(a, "export", "--with-history", str(dump))
    assert code == 0 and "3 commits" in shown
    code, shown = _run(b, "import", str(dump))
    assert code == 0 and "replayed 3 commits (3 with their original ids)" in shown, shown
    log_a = json.loads(_run(a, "log", "--json")[1])
    log_b = json.loads(_run(b, "log", "--json")[1])
    assert log_a == log_b


def test_cli_remote_urls_never_store_or_show_a_credential(tmp_path: Path) -> None:
    store = tmp_path / "a"
    assert _run(store, "init")[0] == 0
    leaky = "s3://AKIAEXAMPLE:TOPSECRETKEY@bucket/p?endpoint=http://127.0.0.1:1"
    code, shown = _run(store, "remote", "add", "origin", leaky)
    assert code == 1 and "carries a credential" in shown and "TOPSECRETKEY" not in shown
    code, shown = _run(store, "remote", "add", "signed", "s3://bucket/p?X-Amz-Signature=abc123def")
    assert code == 1 and "abc123def" not in shown
    # a remote named before the rule is listed, and fails to open, with its secret masked
    (tmp_path / "a" / "engram.db.remotes.json").write_text(json.dumps({"remotes": {"old": leaky}}))
    for args in (("remote", "list"), ("remote", "list", "--json"), ("fetch", "old")):
        code, shown = _run(store, *args)
        assert "TOPSECRETKEY" not in shown and ("AKIAEXAMPLE:***@bucket" in shown or code == 1), (args, shown)
