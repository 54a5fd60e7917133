"""Versioning verbs on the Memory handle: refs, log, diff, history, branches, merge, revert, reset, gc, fsck."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

import engram
from engram.backends import MemoryChunkStore, MemoryRefStore
from engram.objects import encode_commit
from engram.repo import Repository
from engram.store import ItemConflict, Memory

NS = ("users", "alice")


def value(mem: Memory | engram.View, key: str = "k", ns: tuple[str, ...] = NS) -> object:
    item = mem.get(ns, key)
    return None if item is None else item.value


def test_ref_expressions_resolve(mem: Memory) -> None:
    c1 = mem.put(NS, "k", {"v": 1})
    mem.tag("one")
    c2 = mem.put(NS, "k", {"v": 2})
    c3 = mem.put(NS, "k", {"v": 3})
    assert mem.resolve("HEAD").id == c3.id
    assert mem.resolve("main").id == c3.id
    assert mem.resolve("HEAD~1").id == c2.id
    assert mem.resolve("HEAD~2").id == mem.resolve("one").id == c1.id
    assert mem.resolve("HEAD^").id == c2.id
    assert mem.resolve(c2.id.hex()).id == c2.id
    assert mem.resolve(c2.id.hex()[:7]).id == c2.id
    assert mem.resolve("one~1").message == "init"
    assert value(mem.at("one")) == {"v": 1}


def test_as_of_time_uses_the_reflog(mem: Memory) -> None:
    mem.put(NS, "k", {"v": 1})
    time.sleep(0.01)
    middle = datetime.now(UTC)
    time.sleep(0.01)
    mem.put(NS, "k", {"v": 2})
    assert value(mem.at(f"main@{{{middle.isoformat()}}}")) == {"v": 1}
    assert value(mem.at(middle)) == {"v": 1}
    assert value(mem.at(f"@{{{middle.isoformat()}}}")) == {"v": 1}
    with pytest.raises(engram.RefNotFoundError, match="no commit at or before"):
        mem.at(datetime(2000, 1, 1, tzinfo=UTC))


def test_as_of_time_sees_a_reset(mem: Memory) -> None:
    mem.put(NS, "k", {"v": 1})
    mem.put(NS, "k", {"v": 2})
    time.sleep(0.01)
    before_reset = datetime.now(UTC)
    time.sleep(0.01)
    mem.reset("HEAD~1")
    assert value(mem) == {"v": 1}
    assert value(mem.at(before_reset)) == {"v": 2}  # what the branch showed then


@pytest.mark.parametrize(
    ("ref", "error", "hint"),
    [
        ("nope", engram.RefNotFoundError, "not a branch"),
        ("HEAD~50", engram.RefNotFoundError, "past the first commit"),
        ("main@{last tuesday}", engram.InvalidRefError, "ISO 8601"),
        ("", engram.InvalidRefError, "cannot parse"),
        ("abcdef0123", engram.RefNotFoundError, "no commit id starts with"),
        ("nope@{2026-01-01}", engram.RefNotFoundError, "does not exist"),
    ],
)
def test_bad_refs_raise_actionable_errors(mem: Memory, ref: str, error: type[Exception], hint: str) -> None:
    with pytest.raises(error, match=hint):
        mem.at(ref)


def test_ambiguous_short_id() -> None:
    chunks, refs = MemoryChunkStore(), MemoryRefStore()
    repo = Repository(chunks, refs)
    repo.init()
    base = repo.head("main")
    _, data = encode_commit(repo.commit(base).tree, (base,), 0, "x", "fake")
    # two commit chunks stored under ids sharing a 7-character prefix (no validation on this store)
    chunks.put_many({bytes.fromhex("abcdef1" + "0" * 33): data, bytes.fromhex("abcdef1" + "1" * 33): data})
    with pytest.raises(engram.AmbiguousRefError, match="ambiguous"):
        repo.resolve("abcdef1")
    assert repo.resolve("abcdef10").hex().startswith("abcdef10")


def test_log_filters_by_namespace_and_key(mem: Memory) -> None:
    mem.put(("a",), "k1", {"v": 1})
    mem.put(("b",), "k1", {"v": 1})
    mem.put(("a", "sub"), "k2", {"v": 1})
    mem.put(("a",), "k1", {"v": 2})
    assert [c.message for c in mem.log()][-1] == "init"
    assert len(mem.log(namespace=("a",))) == 3
    assert len(mem.log(namespace=("a",), key="k1")) == 2
    assert len(mem.log(namespace=("b",))) == 1
    assert len(mem.log(limit=2)) == 2


def test_show_and_diff(mem: Memory) -> None:
    mem.put(NS, "keep", {"v": 1})
    mem.put(NS, "gone", {"v": 1})
    mem.tag("before")
    mem.put(NS, "keep", {"v": 2})
    mem.delete(NS, "gone")
    mem.put(("other",), "new", {"v": 1})
    changes = mem.diff("before")
    assert [(c.namespace, c.key, c.kind) for c in changes] == [
        (("other",), "new", "added"),
        (NS, "gone", "removed"),
        (NS, "keep", "modified"),
    ]
    assert [c.key for c in mem.diff("before", namespace=("users",))] == ["gone", "keep"]
    shown = mem.show("HEAD")
    assert shown.commit.id == mem.head.id and [c.key for c in shown.changes] == ["new"]


def test_history_is_blame(mem: Memory) -> None:
    c1 = mem.put(NS, "k", {"v": 1}, author="a1")
    mem.put(NS, "other", {"v": 1})
    c2 = mem.put(NS, "k", {"v": 2}, author="a2")
    c3 = mem.delete(NS, "k", author="a3")
    history = mem.history(NS, "k")
    assert [v.commit.id for v in history] == [c3.id, c2.id, c1.id]
    assert [None if v.item is None else v.item.value for v in history] == [None, {"v": 2}, {"v": 1}]
    assert [v.commit.author for v in history] == ["a3", "a2", "a1"]


def test_branches_are_per_handle(repo: Repository) -> None:
    one, two = Memory(repo), Memory(repo)
    one.put(NS, "k", {"v": "main"})
    one.create_branch("fix")
    two.checkout("fix")
    two.put(NS, "k", {"v": "fix"})
    assert one.branch == "main" and value(one) == {"v": "main"}
    assert two.branch == "fix" and value(two) == {"v": "fix"}
    assert set(one.branches()) == {"main", "fix"}
    with pytest.raises(engram.RefExistsError):
        one.create_branch("fix")
    with pytest.raises(engram.InvalidRefError):
        one.create_branch("bad..name")
    with pytest.raises(engram.RefNotFoundError):
        one.checkout("missing")
    with pytest.raises(engram.ConflictError, match="branch in use"):
        two.delete_branch("fix")
    one.delete_branch("fix")
    assert set(one.branches()) == {"main"}


def test_tags_do_not_move(mem: Memory) -> None:
    mem.put(NS, "k", {"v": 1})
    mem.tag("v1")
    mem.put(NS, "k", {"v": 2})
    assert value(mem.at("v1")) == {"v": 1}
    with pytest.raises(engram.RefExistsError, match="delete it first"):
        mem.tag("v1")
    mem.delete_tag("v1")
    assert mem.tags() == {}


def test_views_are_read_only(mem: Memory) -> None:
    view = mem.at("HEAD")
    with pytest.raises(engram.ReadOnlyError):
        view.put(NS, "k", {"v": 1})


def diverge(mem: Memory, ours: dict[str, object], theirs: dict[str, object]) -> None:
    mem.put(NS, "shared", {"v": "base"})
    mem.put(NS, "doomed", {"v": "base"})
    mem.create_branch("feature")
    mem.checkout("feature")
    for k, v in theirs.items():
        mem.delete(NS, k) if v is None else mem.put(NS, k, {"v": v})
    mem.checkout("main")
    for k, v in ours.items():
        mem.delete(NS, k) if v is None else mem.put(NS, k, {"v": v})


def test_merge_makes_a_two_parent_commit(mem: Memory) -> None:
    diverge(mem, {"ours-only": 1}, {"theirs-only": 2})
    head = mem.head.id
    merged = mem.merge("feature")
    assert merged.parents == (head, mem.resolve("feature").id)
    assert value(mem, "ours-only") == {"v": 1} and value(mem, "theirs-only") == {"v": 2}
    assert mem.merge("feature").id == merged.id  # already merged: nothing to do


def test_merge_conflict_fails_and_writes_nothing(mem: Memory) -> None:
    diverge(mem, {"shared": "ours", "doomed": None}, {"shared": "theirs", "doomed": "changed"})
    head = mem.head.id
    with pytest.raises(engram.MergeConflictError) as info:
        mem.merge("feature")
    conflicts = sorted(info.value.conflicts, key=lambda c: c.key)
    assert all(isinstance(c, engram.ItemConflict) for c in conflicts)  # item-level, decoded once
    assert [(c.namespace, c.key) for c in conflicts] == [(NS, "doomed"), (NS, "shared")]
    doomed, shared = conflicts
    assert doomed.ours is None and doomed.theirs is not None and doomed.theirs.value == {"v": "changed"}
    assert shared.ours is not None and shared.theirs is not None
    assert (shared.ours.value, shared.theirs.value) == ({"v": "ours"}, {"v": "theirs"})
    assert mem.head.id == head


@pytest.mark.parametrize(
    ("strategy", "shared", "doomed"),
    [("ours", "ours", None), ("theirs", "theirs", "changed"), ("newest", "theirs", "changed")],
)
def test_merge_strategies(mem: Memory, strategy: str, shared: str, doomed: str | None) -> None:
    diverge(mem, {"doomed": None, "shared": "ours"}, {"doomed": "changed", "shared": "theirs"})
    mem.checkout("feature")
    time.sleep(0.002)  # timestamps are in ms
    mem.put(NS, "shared", {"v": "theirs"})  # make theirs the newest write
    mem.checkout("main")
    mem.merge("feature", strategy=strategy)  # type: ignore[arg-type]
    assert value(mem, "shared") == {"v": shared}
    assert value(mem, "doomed") == (None if doomed is None else {"v": doomed})


def test_merge_with_a_function(mem: Memory) -> None:
    diverge(mem, {"shared": "ours"}, {"shared": "theirs"})
    seen: list[ItemConflict] = []

    def combine(conflict: ItemConflict) -> dict[str, object]:
        seen.append(conflict)
        assert conflict.ours is not None and conflict.theirs is not None
        return {"v": f"{conflict.ours.value['v']}+{conflict.theirs.value['v']}"}

    mem.merge("feature", strategy=combine)
    assert value(mem, "shared") == {"v": "ours+theirs"}
    assert len(seen) == 1 and seen[0].base is not None and seen[0].base.value == {"v": "base"}


def test_unknown_merge_strategy(mem: Memory) -> None:
    diverge(mem, {"shared": "ours"}, {"shared": "theirs"})
    with pytest.raises(engram.InvalidInputError, match="strategy"):
        mem.merge("feature", strategy="loudest")  # type: ignore[arg-type]


def test_revert_undoes_one_commit(mem: Memory) -> None:
    mem.put(NS, "a", {"v": 1})
    bad = mem.put(NS, "a", {"v": "bad"})
    mem.put(NS, "b", {"v": 1})
    reverted = mem.revert(bad.id.hex())
    assert value(mem, "a") == {"v": 1} and value(mem, "b") == {"v": 1}
    assert reverted.metadata == {"reverts": bad.id.hex()}


def test_revert_conflict_is_reported(mem: Memory) -> None:
    mem.put(NS, "a", {"v": 1})
    bad = mem.put(NS, "a", {"v": "bad"})
    mem.put(NS, "a", {"v": "later"})
    with pytest.raises(engram.MergeConflictError, match="conflicts"):
        mem.revert(bad.id.hex())
    mem.revert(bad.id.hex(), strategy="theirs")
    assert value(mem, "a") == {"v": 1}


def test_reset_moves_the_branch_and_rejects_missing_commits(mem: Memory) -> None:
    first = mem.put(NS, "a", {"v": 1})
    mem.put(NS, "a", {"v": 2})
    mem.reset(first.id.hex())
    assert value(mem, "a") == {"v": 1}
    with pytest.raises(engram.RefNotFoundError):
        mem.reset("0" * 40)
    assert mem.head.id == first.id


def test_gc_keeps_reachable_and_removes_the_rest(mem: Memory) -> None:
    mem.put(NS, "a", {"v": 1})
    for i in range(5):
        mem.put(NS, "b", {"v": i})
    mem.reset("HEAD~5")
    kept_all = mem.gc(grace=timedelta(0))
    assert kept_all.removed == 0  # the reflog still reaches the reset-away commits
    time.sleep(0.002)
    within_grace = mem.gc(keep_reflog=timedelta(0))
    assert within_grace.removed == 0 and within_grace.reflog_pruned > 0  # young chunks are kept
    report = mem.gc(grace=timedelta(0))
    assert report.removed > 0
    assert mem.fsck().ok
    assert value(mem, "a") == {"v": 1} and value(mem, "b") is None


def test_fsck_finds_missing_and_corrupt_chunks(repo: Repository) -> None:
    mem = Memory(repo)
    for i in range(40):
        mem.put(NS, f"k{i}", {"v": "x" * 50})
    assert mem.fsck().ok
    inner = repo.chunks.inner  # type: ignore[attr-defined]
    tree = repo.commit(repo.head("main")).tree
    leaf = tree
    while repo.nodes.load(leaf).level > 0:
        leaf = repo.nodes.load(leaf).child(0)
    doomed = repo.commit(repo.head("main")).parents[0]
    inner.delete_many([doomed])
    inner.delete_many([leaf])
    inner.put_many({leaf: b"corrupted bytes"})
    fresh = Repository(repo.chunks, repo.refs)
    report = fresh.fsck()
    assert not report.ok
    assert doomed.hex() in report.missing and leaf.hex() in report.corrupt


def test_gc_during_a_commit_keeps_the_new_chunks(repo: Repository) -> None:
    """gc that runs between a writer's chunk write and its ref move must not take the new chunks."""
    mem = Memory(repo)
    mem.put(NS, "x", {"v": 1})
    real_set = repo.refs.set
    reports: list[engram.GcReport] = []

    def gc_then_set(*args: object, **kwargs: object) -> bool:
        if not reports:
            reports.append(repo.gc(keep_reflog_ms=0))
        return real_set(*args, **kwargs)  # type: ignore[arg-type]

    repo.refs.set = gc_then_set  # type: ignore[method-assign]
    mem.put(NS, "y", {"v": 2})
    repo.refs.set = real_set  # type: ignore[method-assign]
    assert reports and mem.fsck().ok
    assert value(mem, "y") == {"v": 2}


def test_history_credits_the_commit_not_the_merge(mem: Memory) -> None:
    mem.put(NS, "base", {"v": 0})
    mem.create_branch("side")
    side = mem.handle("side")
    made = side.put(NS, "k", {"v": "side"})
    mem.put(NS, "other", {"v": 1})
    mem.merge("side")
    assert [v.commit.id for v in mem.history(NS, "k")] == [made.id]


def test_reflog_lists_a_branch_moves_newest_first(mem: Memory) -> None:
    c1 = mem.put(NS, "k", {"v": 1})
    c2 = mem.put(NS, "k", {"v": 2})
    mem.reset(c1.id.hex())
    entries = mem.reflog()
    assert [(e["old"], e["new"]) for e in entries[:3]] == [
        (c2.id.hex(), c1.id.hex()), (c1.id.hex(), c2.id.hex()), (entries[2]["old"], c1.id.hex())
    ]  # fmt: skip
    assert entries[0]["reason"].startswith("reset") and isinstance(entries[0]["time"], int)
    assert len(mem.reflog(limit=1)) == 1 and mem.reflog("main") == entries
    with pytest.raises(engram.errors.RefNotFoundError, match="no reflog"):
        mem.reflog("nope")
