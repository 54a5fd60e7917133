"""memoir's ProllyTreeStore over engram: the seed walkthrough runs with only its import changed, and the surface
memoir code calls behaves as memoir's (aggregation, snapshots, checkout, branches, merge)."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from services import unavailable

import engram
from compat import memoir_walkthrough as walkthrough
from engram.compat.memoir import ConflictResolution, MemoryItem, ProllyTreeStore, as_namespace
from engram.errors import InvalidInputError, InvalidNamespaceError, ReadOnlyError, RefExistsError, RefNotFoundError

NS = ("production_user",)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProllyTreeStore]:
    opened = ProllyTreeStore(path=str(tmp_path / "memory_store"), enable_versioning=True, cache_size=100)
    yield opened
    opened.close()


# -- the walkthrough ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def document() -> str:
    if not walkthrough.DOCUMENT.is_file():
        unavailable("the seed documents", f"{walkthrough.DOCUMENT} is absent (../shared/seeds beside the clone)")
    return walkthrough.DOCUMENT.read_text(encoding="utf-8")


def counts(printed: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for line in printed.splitlines():
        match = re.match(r"\s*(.+?): (\d+) memories\b", line)
        if match:
            found.setdefault(match[1], []).append(int(match[2]))
    return found


def test_the_walkthrough_runs_with_only_the_import_changed(
    document: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its tempfile.mkdtemp() store lands here
    script = walkthrough.script(document)
    assert "from engram.compat.memoir import ProllyTreeStore" in script
    assert "memoir.store" not in script

    printed, variables = walkthrough.run(document)
    store: ProllyTreeStore = variables["prolly_store"]
    fix = "system.fixes.accessibility_validation"
    try:
        timeline = counts(printed)
        assert timeline["Initial checkpoint"] == [145, 145]
        assert timeline["Before problem"] == [147, 147]
        assert timeline["Day before problem"] == [147, 147]
        assert timeline["At problem time"] == [167, 167]
        assert timeline["Current production state"] == [167]
        assert timeline["Current state"] == [167]
        assert "\nMemory state at problem time:\n Total memories then: 167\n" in printed
        assert "Found error: SYSTEM ERROR: Agent recommended bright yellow on w..." in printed
        assert re.search(r"^Time-travel through 167 memories: \d+\.\d{3}s$", printed, re.M)
        knowledge = printed.split("Agent's knowledge before problem:\n")[1].split("Root cause identified:")[0]
        assert len(knowledge.splitlines()) == 3 and "purple color scheme" in knowledge  # day 2's memory aggregated

        # The fix was made on a branch from day 2 and merged into main, after the problem.
        assert store.tree.current_branch() == "main"
        assert variables["fix_branch"] in store.tree.list_branches()
        merged = store.get(NS, fix)
        assert merged["memories"][0]["content"].startswith("Enhanced accessibility validation")
        assert len(store.search(NS, limit=500)) == 168
        store.tree.checkout(variables["problem_snapshot"])
        assert store.get(NS, fix) is None
        assert len(store.search(NS, limit=500)) == 167
        assert store.list_snapshots() == [
            variables[name] for name in ("initial_checkpoint", "day1_snapshot", "day2_snapshot", "problem_snapshot")
        ]
    finally:
        store.close()

    # The data is an ordinary engram store: a fresh handle on main sees the merged fix and the history.
    mem = engram.open(str(store.path), embedder=None)
    try:
        assert mem.get(NS, fix) is not None
        assert len(mem.head.parents) == 2  # the merge commit
        assert mem.at(variables["day2_snapshot"]).get(NS, "system.errors.accessibility") is None
    finally:
        mem.close()


def test_the_restored_indentation_nests_the_blocks(document: str) -> None:
    lines = walkthrough.script(document).splitlines()

    def depth(word: str) -> int:
        """Block depth of the first statement line holding ``word`` (less the wrapping function)."""
        line = next(line for line in lines if word in line and not line.lstrip().startswith("#"))
        return (len(line) - len(line.lstrip())) // 4 - 1

    assert depth("ui_preferences.append") == 2  # for / if / body
    assert depth("affected") == 3  # for / for / if / body
    assert depth(".merge(") == 1  # if / body
    assert depth("identified") == 0  # the blocks before it closed
    with pytest.raises(AssertionError, match="block openers"):
        walkthrough.indent(walkthrough.code_lines(document), (1, 1))


# -- the surface -------------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_memories_at_one_path_aggregate_into_one_item(store: ProllyTreeStore, anyio_backend: str) -> None:
    first = await store.store_memory_async("production_user", "prefers dark theme", "preferences.ui.theme")
    second = await store.store_memory_async("production_user", "now prefers light theme", "preferences.ui.theme")
    assert isinstance(first, MemoryItem) and first.key == "preferences.ui.theme" and first.confidence == 1.0
    assert first.version != second.version and second.version == store.tree.get_head()
    items = store.search(NS, limit=10)
    assert len(items) == 1
    namespace, path, data = items[0]
    assert (namespace, path) == (NS, "preferences.ui.theme")
    assert [m["content"] for m in data["memories"]] == ["prefers dark theme", "now prefers light theme"]
    assert data["count"] == 2 and data["path"] == "preferences.ui.theme"
    assert data["first_timestamp"] <= data["last_timestamp"] == data["memories"][1]["timestamp"]
    assert store.get(NS, "preferences.ui.theme") == data
    # one commit per memory, as memoir's auto-commit
    assert len(store.get_key_history(NS, "preferences.ui.theme")) == 2


def test_store_memory_sync_and_namespace_strings(store: ProllyTreeStore) -> None:
    store.store_memory("org:alice", "likes tea", "profile.drinks")
    assert as_namespace("org:alice") == ("org", "alice")
    assert store.get(("org", "alice"), "profile.drinks")["memories"][0]["content"] == "likes tea"
    # memoir's key-prefix scan: a parent namespace lists its sub-namespaces' items, the rest joined by ':'
    value = store.get("org:alice", "profile.drinks")
    assert store.search(("org",), limit=5) == [(("org",), "alice:profile.drinks", value)]
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})


def test_get_of_a_missing_path_is_none(store: ProllyTreeStore) -> None:
    assert store.get(NS, "nothing.here") is None
    store.put(NS, "here", {"v": 1})
    assert store.get(NS, "nothing.here") is None
    assert store.get(("other",), "here") is None


def test_put_get_delete_and_non_dict_values(store: ProllyTreeStore) -> None:
    store.put(NS, "config", {"theme": "dark"})
    store.put(NS, "note", "plain text")
    assert store.get(NS, "config") == {"theme": "dark"}
    assert store.get(NS, "note") == "plain text"
    store.delete(NS, "config")
    assert store.get(NS, "config") is None
    assert [path for _, path, _ in store.search(NS)] == ["note"]


def test_search_limit_and_filter(store: ProllyTreeStore) -> None:
    for n in range(12):
        store.put(NS, f"item.{n:02d}", {"n": n, "even": n % 2 == 0})
    assert len(store.search(NS)) == 10  # memoir's default limit
    assert [path for _, path, _ in store.search(NS, limit=3)] == ["item.00", "item.01", "item.02"]
    assert len(store.search(NS, limit=500)) == 12
    assert store.search(NS, limit=0) == []
    assert [data["n"] for _, _, data in store.search(NS, filter={"even": True}, limit=100)] == [0, 2, 4, 6, 8, 10]


def test_auto_commit_off_stages_until_commit(tmp_path: Path) -> None:
    store = ProllyTreeStore(str(tmp_path / "s"), auto_commit=False)
    try:
        head = store.tree.get_head()
        store.put(NS, "a", {"v": 1})
        store.store_memory("production_user", "staged memory", "b")
        store.store_memory("production_user", "second staged memory", "b")
        assert store.tree.get_head() == head
        assert store.get(NS, "a") == {"v": 1} and store.get(NS, "b")["count"] == 2
        assert [path for _, path, _ in store.search(NS)] == ["a", "b"]
        commit = store.commit("two items")
        assert commit != head and store.memory.head.message == "two items"
        assert store.memory.get(NS, "b") is not None
    finally:
        store.close()


def test_snapshots_are_listed_and_read_without_a_checkout(store: ProllyTreeStore) -> None:
    store.put(NS, "a", {"v": 1})
    assert store.create_time_snapshot("first") is True
    store.put(NS, "a", {"v": 2})
    store.put(NS, "b", {"v": 3})
    store.create_time_snapshot("second")
    assert store.list_snapshots() == ["first", "second"]
    assert store.get_state_at_snapshot(NS, "first") == {"a": {"v": 1}}
    assert store.get_state_at_snapshot("production_user", "second") == {"a": {"v": 2}, "b": {"v": 3}}
    assert store.memory.tags().keys() == {"first", "second"}  # engram tags
    with pytest.raises(RefExistsError):
        store.create_time_snapshot("first")


def test_checkout_of_a_snapshot_reads_the_past_and_refuses_writes(store: ProllyTreeStore) -> None:
    store.put(NS, "a", {"v": 1})
    store.create_time_snapshot("then")
    store.put(NS, "a", {"v": 2})
    store.tree.checkout("then")
    assert store.tree.current_branch() == "then"
    assert store.get(NS, "a") == {"v": 1}
    assert store.search(NS) == [(NS, "a", {"v": 1})]
    for write in (
        lambda: store.put(NS, "b", {"v": 1}),
        lambda: store.delete(NS, "a"),
        lambda: store.store_memory("production_user", "x", "p"),
        lambda: store.tree.merge("main"),
    ):
        with pytest.raises(ReadOnlyError, match="check out a branch"):
            write()
    store.tree.checkout("main")
    assert store.get(NS, "a") == {"v": 2}
    # a commit id checks out too (read-only)
    first = store.get_key_history(NS, "a")[-1]["id"]
    store.tree.checkout(first[:12])
    assert store.get(NS, "a") == {"v": 1}


def test_unknown_snapshot_or_branch_raises(store: ProllyTreeStore) -> None:
    store.put(NS, "a", {"v": 1})
    with pytest.raises(RefNotFoundError):
        store.tree.checkout("no_such_snapshot")
    with pytest.raises(RefNotFoundError):
        store.tree.merge("no_such_branch")
    with pytest.raises(RefNotFoundError):
        store.get_state_at_snapshot(NS, "no_such_snapshot")
    with pytest.raises(InvalidInputError):
        store.tree.merge("main", conflict_resolution="whatever")
    assert store.tree.current_branch() == "main"  # a failed checkout leaves the checkout alone


def test_branch_from_a_snapshot_and_merge_into_main(store: ProllyTreeStore) -> None:
    store.put(NS, "base", {"v": 1})
    store.create_time_snapshot("good")
    store.put(NS, "bug", {"v": "bad"})
    store.tree.checkout("good")
    store.tree.create_branch("hotfix")  # from the checkout, and switched to (prollytree's create_branch)
    assert store.tree.current_branch() == "hotfix"
    assert store.get(NS, "bug") is None
    store.put(NS, "fix", {"v": "good"})
    store.tree.checkout("main")
    assert store.get(NS, "fix") is None
    merge_id = store.tree.merge("hotfix")
    assert merge_id == store.tree.get_head()
    assert store.get(NS, "fix") == {"v": "good"} and store.get(NS, "bug") == {"v": "bad"}
    assert store.tree.list_branches() == ["hotfix", "main"]
    store.tree.branch("later")  # creates without switching
    assert store.tree.current_branch() == "main" and "later" in store.tree.list_branches()
    assert store.tree.log()[0]["id"] == merge_id


def test_merge_conflicts_follow_the_conflict_resolution(store: ProllyTreeStore) -> None:
    store.put(NS, "k", {"v": "base"})
    store.tree.branch("other")
    store.put(NS, "k", {"v": "main"})
    store.tree.checkout("other")
    store.put(NS, "k", {"v": "other"})
    store.tree.branch("other2")
    store.tree.checkout("main")
    store.tree.merge("other")  # IgnoreAll: this branch's version stays
    assert store.get(NS, "k") == {"v": "main"}
    store.put(NS, "k", {"v": "main again"})
    store.tree.checkout("other2")
    store.put(NS, "k", {"v": "other2"})
    store.tree.checkout("main")
    store.tree.merge("other2", ConflictResolution.TakeSource)
    assert store.get(NS, "k") == {"v": "other2"}


def test_checkout_is_per_store_and_a_second_store_sees_the_data(store: ProllyTreeStore) -> None:
    store.put(NS, "a", {"v": 1})
    store.create_time_snapshot("s1")
    store.put(NS, "b", {"v": 2})
    other = ProllyTreeStore(str(store.path))
    try:
        assert [path for _, path, _ in other.search(NS)] == ["a", "b"]
        store.tree.checkout("s1")
        assert other.tree.current_branch() == "main"  # the other store's checkout did not move
        assert [path for _, path, _ in other.search(NS)] == ["a", "b"]
        assert [path for _, path, _ in store.search(NS)] == ["a"]
        other.put(NS, "c", {"v": 3})
        assert store.get(NS, "c") is None  # still at the snapshot
        store.tree.checkout("main")
        assert store.get(NS, "c") == {"v": 3}
        assert other.list_snapshots() == ["s1"]
    finally:
        other.close()


def test_export_namespace_writes_the_checkout(store: ProllyTreeStore, tmp_path: Path) -> None:
    store.store_memory("production_user", "likes tea", "profile.drinks")
    store.create_time_snapshot("one")
    store.put(NS, "later", {"v": 1})
    store.tree.checkout("one")
    store.export_namespace("production_user", tmp_path / "export.json")
    exported = json.loads((tmp_path / "export.json").read_text())
    assert exported["namespace"] == "production_user"
    assert list(exported["memories"]) == ["profile.drinks"]
    assert exported["memories"]["profile.drinks"]["memories"][0]["content"] == "likes tea"
