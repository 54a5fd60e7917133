"""push, fetch, pull and clone through dir:// remotes, on SQLite and PostgreSQL local stores."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import engram
from engram.errors import ConflictError
from engram.ops.remotes import clone_into, copy_chunks, fetch, open_remote, pull, push
from engram.ops.remotes.sync import plan_copy
from engram.store import Memory, tenant_url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh local store URL factory's first URL: SQLite, or a fresh repository on PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "a" / "engram.db")
    return tenant_url(request.getfixturevalue("postgres_url"), "t" + uuid.uuid4().hex[:12])


def _open(url: str) -> Memory:
    return engram.open(url, embedder=None, author="tester")


def _other(url: str, tmp_path: Path, name: str) -> str:
    if url.startswith("postgresql"):
        return url.rsplit("repo=", 1)[0] + "repo=t" + uuid.uuid4().hex[:12]
    return str(tmp_path / name / "engram.db")


def test_push_then_clone_keeps_history_and_tags(store_url: str, tmp_path: Path) -> None:
    mem = _open(store_url)
    for i in range(5):
        mem.put(("notes",), f"k{i}", {"text": f"note {i}"})
    mem.tag("v1")
    mem.create_branch("dev")
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    report = push(mem.repo, remote.chunks, remote.refs)
    assert report.ok and report.chunks > 0
    assert set(report.updated) >= {"heads/main", "heads/dev", "tags/v1"}
    other = _open(_other(store_url, tmp_path, "b"))
    cloned = clone_into(other.repo, remote.chunks, remote.refs)
    assert cloned.ok
    assert [c.id for c in other.log()] == [c.id for c in mem.log()]
    assert other.get(("notes",), "k3").value == {"text": "note 3"}
    assert other.search(("notes",), query="note 3", mode="keyword")[0].key == "k3"  # the index is rebuilt
    assert other.repo.tags() == mem.repo.tags()
    assert other.fsck().ok


def test_second_push_sends_only_new_chunks(tmp_path: Path) -> None:
    mem = _open(str(tmp_path / "a"))
    with mem.transaction("bulk") as tx:
        for i in range(3000):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    first = push(mem.repo, remote.chunks, remote.refs)
    mem.put(("items",), "k00042", {"text": "changed"})
    second = push(mem.repo, remote.chunks, remote.refs)
    assert second.chunks < 10 < first.chunks
    assert second.bytes < first.bytes / 5
    again = push(mem.repo, remote.chunks, remote.refs)
    assert again.chunks == 0 and again.unchanged


def test_push_refuses_a_diverged_branch_and_force_overwrites(tmp_path: Path) -> None:
    a, b = _open(str(tmp_path / "a")), _open(str(tmp_path / "b"))
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    a.put(("n",), "x", {"v": 1})
    push(a.repo, remote.chunks, remote.refs, ["main"])
    b.put(("n",), "y", {"v": 2})
    refused = push(b.repo, remote.chunks, remote.refs, ["main"])
    assert "heads/main" in refused.rejected and not refused.updated
    assert remote.refs.get("heads/main") == a.head.id
    forced = push(b.repo, remote.chunks, remote.refs, ["main"], force=True)
    assert forced.ok and remote.refs.get("heads/main") == b.head.id


def test_pull_fast_forwards_then_merges(store_url: str, tmp_path: Path) -> None:
    a = _open(store_url)
    b = _open(_other(store_url, tmp_path, "b"))
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    a.put(("n",), "x", {"v": 1})
    push(a.repo, remote.chunks, remote.refs)
    clone_into(b.repo, remote.chunks, remote.refs, force=True)
    a.put(("n",), "y", {"v": 2})
    push(a.repo, remote.chunks, remote.refs)
    first = pull(b, remote, "origin")
    assert first.how == "fast-forward" and b.head.id == a.head.id
    b.put(("n",), "z", {"v": 3})
    a.put(("n",), "w", {"v": 4})
    push(a.repo, remote.chunks, remote.refs)
    merged = pull(b, remote, "origin", strategy="newest")
    assert merged.how == "merge" and len(merged.head.parents) == 2
    assert {i.key for i in b.search(("n",))} == {"x", "y", "z", "w"}
    assert pull(b, remote, "origin").how == "up to date"


def test_fetch_sets_tracking_refs_only(tmp_path: Path) -> None:
    a, b = _open(str(tmp_path / "a")), _open(str(tmp_path / "b"))
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    a.put(("n",), "x", {"v": 1})
    push(a.repo, remote.chunks, remote.refs)
    before = b.head.id
    report = fetch(b.repo, remote.chunks, remote.refs, "origin")
    assert b.repo.refs.get("remotes/origin/main") == a.head.id
    assert b.head.id == before and report.chunks > 0


def test_clone_refuses_a_store_with_history(tmp_path: Path) -> None:
    a, b = _open(str(tmp_path / "a")), _open(str(tmp_path / "b"))
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    push(a.repo, remote.chunks, remote.refs)
    b.put(("n",), "x", {"v": 1})
    with pytest.raises(ConflictError, match="not empty"):
        clone_into(b.repo, remote.chunks, remote.refs)


def test_interrupted_copy_leaves_the_remote_consistent(tmp_path: Path) -> None:
    """A push that dies after some chunk batches moved no ref; pushing again completes it."""
    mem = _open(str(tmp_path / "a"))
    with mem.transaction("bulk") as tx:
        for i in range(3000):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    calls = {"n": 0}
    real = remote.chunks.put_many

    def dying(chunks: dict[bytes, bytes]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk gone")
        real(chunks)

    remote.chunks.put_many = dying  # type: ignore[method-assign]
    with pytest.raises(OSError):
        push(mem.repo, remote.chunks, remote.refs)
    remote.chunks.put_many = real  # type: ignore[method-assign]
    assert remote.refs.list() == {}
    plan = plan_copy(mem.repo.chunks, remote.chunks, [mem.head.id])
    assert plan.chunks > 0
    report = push(mem.repo, remote.chunks, remote.refs)
    assert report.ok and report.present > 0
    other = _open(str(tmp_path / "b"))
    clone_into(other.repo, remote.chunks, remote.refs)
    assert other.count(("items",)) == 3000 and other.fsck().ok


def test_remote_names_live_beside_sqlite_or_in_a_ref(store_url: str) -> None:
    from engram.ops.remotes import REMOTES_REF, config_file, remote_config

    mem = _open(store_url)
    config = remote_config(mem.repo, store_url)
    config.add("origin", "dir:///srv/engram")
    config.add("vault", "s3://bucket/agents?endpoint=http://127.0.0.1:8333")
    assert remote_config(mem.repo, store_url).list() == {
        "origin": "dir:///srv/engram",
        "vault": "s3://bucket/agents?endpoint=http://127.0.0.1:8333",
    }
    path = config_file(store_url)
    if store_url.startswith("postgresql"):
        assert path is None and mem.repo.refs.get(REMOTES_REF) is not None
    else:
        assert path is not None and path.is_file() and mem.repo.refs.get(REMOTES_REF) is None
    config.remove("origin")
    assert list(config.list()) == ["vault"]
    with pytest.raises(ConflictError):
        config.add("vault", "dir:///elsewhere")
    assert mem.fsck().ok  # the ref's tree is a sound root


def test_a_commit_left_without_its_parent_is_completed(tmp_path: Path) -> None:
    """Commits are written in one parallel batch, so an interruption can leave one without its parent: the next
    push follows present commits back to known ones instead of trusting them."""
    mem = _open(str(tmp_path / "a"))
    for i in range(3):
        mem.put(("n",), f"k{i}", {"v": i})
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    tip = mem.head.id
    copy_chunks(mem.repo.chunks, remote.chunks, [mem.repo.commit(tip).tree])  # every node is written first
    remote.chunks.put_many(mem.repo.chunks.get_many([tip]))  # then the tip, but not its parents: interrupted
    report = push(mem.repo, remote.chunks, remote.refs)
    assert report.ok and report.chunks == 6  # the three older commits (init, k0, k1) and their one-node trees
    other = _open(str(tmp_path / "b"))
    clone_into(other.repo, remote.chunks, remote.refs)
    assert len(list(other.log())) == 4 and other.fsck().ok
