"""The Memory handle: items, validation, transactions, and provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

import engram
from engram.store import Memory


def test_put_get_delete_round_trip(mem: Memory) -> None:
    commit = mem.put(("users", "alice"), "prefs", {"theme": "dark"})
    item = mem.get(("users", "alice"), "prefs")
    assert item is not None and item.value == {"theme": "dark"}
    assert item.namespace == ("users", "alice") and item.key == "prefs"
    assert mem.head.id == commit.id
    mem.delete(("users", "alice"), "prefs")
    assert mem.get(("users", "alice"), "prefs") is None


def test_update_keeps_created_at_and_moves_updated_at(mem: Memory) -> None:
    mem.put(("n",), "k", {"v": 1})
    first = mem.get(("n",), "k")
    mem.put(("n",), "k", {"v": 2})
    second = mem.get(("n",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at


def test_items_carry_provenance(mem: Memory) -> None:
    mem.put(("n",), "k", {"v": 1}, author="writer-7", sources=["msg-1", "msg-2"])
    item = mem.get(("n",), "k")
    assert item is not None and item.author == "writer-7" and item.sources == ("msg-1", "msg-2")
    assert mem.head.author == "writer-7"
    assert mem.history(("n",), "k")[0].item == item


def test_item_dict_has_langgraph_shape(mem: Memory) -> None:
    mem.put(("a", "b"), "k", {"x": 1})
    item = mem.get(("a", "b"), "k")
    assert item is not None
    shape = item.dict()
    assert set(shape) == {"namespace", "key", "value", "created_at", "updated_at"}
    assert shape["namespace"] == ["a", "b"]


def test_deleting_a_missing_item_makes_no_commit(mem: Memory) -> None:
    head = mem.head.id
    mem.delete(("n",), "missing")
    assert mem.head.id == head


@pytest.mark.parametrize(
    ("namespace", "error"),
    [
        ((), engram.InvalidNamespaceError),
        (("a", ""), engram.InvalidNamespaceError),
        (("a.b",), engram.InvalidNamespaceError),
        (("a", 3), engram.InvalidNamespaceError),
        ("users", engram.InvalidNamespaceError),
    ],
)
def test_invalid_namespaces_raise_clear_errors(mem: Memory, namespace: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        mem.put(namespace, "k", {"v": 1})  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError) and str(info.value)


def test_invalid_key_and_value(mem: Memory) -> None:
    with pytest.raises(engram.InvalidKeyError):
        mem.put(("n",), None, {"v": 1})  # type: ignore[arg-type]
    with pytest.raises(engram.InvalidValueError, match="JSON object"):
        mem.put(("n",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    assert mem.count() == 0


def test_transaction_is_one_commit_with_read_your_writes(mem: Memory) -> None:
    before = len(mem.log())
    with mem.transaction("import 3") as tx:
        for i in range(3):
            tx.put(("n",), f"k{i}", {"i": i})
        tx.delete(("n",), "k0")
        assert tx.get(("n",), "k1") is not None and tx.get(("n",), "k0") is None
        assert mem.get(("n",), "k1") is None  # not visible outside until commit
    assert len(mem.log()) == before + 1
    assert tx.commit is not None and tx.commit.message == "import 3"
    assert [i.key for i in mem.iter_items(("n",))] == ["k1", "k2"]


def test_transaction_that_raises_writes_nothing(mem: Memory) -> None:
    head = mem.head.id
    with pytest.raises(RuntimeError), mem.transaction() as tx:
        tx.put(("n",), "k", {"v": 1})
        raise RuntimeError("boom")
    assert mem.head.id == head


def test_list_namespaces_prefix_suffix_depth(mem: Memory) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",), ("a", "b")]:
        mem.put(ns, "k", {"v": 1})
    assert mem.list_namespaces() == [("a", "b"), ("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]
    assert mem.list_namespaces(prefix=("a", "b")) == [("a", "b"), ("a", "b", "c"), ("a", "b", "d")]
    assert mem.list_namespaces(suffix=("d",)) == [("a", "b", "d")]
    assert mem.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c")]
    assert mem.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert mem.list_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("z",)]
    assert mem.list_namespaces(limit=2, offset=1) == [("a", "b", "c"), ("a", "b", "d")]


def test_count_and_iter_items_cover_sub_namespaces(mem: Memory) -> None:
    with mem.transaction() as tx:
        for user in ("u1", "u2"):
            for i in range(5):
                tx.put(("users", user, "prefs"), f"k{i}", {"i": i})
        tx.put(("usersx",), "k", {"i": 0})
    assert mem.count(("users",)) == 10
    assert mem.count(("users", "u1")) == 5
    assert mem.count() == 11
    assert len(list(mem.iter_items(("users", "u2")))) == 5


def test_open_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    default = engram.open()
    default.put(("n",), "k", {"v": 1})
    default.close()
    assert (tmp_path / ".engram" / "engram.db").exists()
    again = engram.open(str(tmp_path / ".engram"))
    assert again.get(("n",), "k") is not None
    again.close()
    file_store = engram.open(f"sqlite:///{tmp_path / 'x.db'}")
    assert file_store.count() == 0
    file_store.close()
    assert engram.open(":memory:").count() == 0
    with pytest.raises(engram.ConfigError, match="unsupported store URL"):
        engram.open("ftp://nope")
    with pytest.raises(engram.StorageError, match="PostgreSQL"):
        engram.open("postgresql://nobody@127.0.0.1:1/db?connect_timeout=1")


def test_public_surface_is_all() -> None:
    import inspect

    exported = {n for n in dir(engram) if not n.startswith("_") and not inspect.ismodule(getattr(engram, n))}
    assert exported == set(engram.__all__)
    for name in engram.__all__:
        assert getattr(engram, name).__doc__, name


def test_values_and_names_json_cannot_carry_are_rejected_cleanly(mem: Memory) -> None:
    for bad in ({"x": float("nan")}, {"x": float("inf")}, {"x": "\ud800"}, {"x": object()}):
        with pytest.raises(engram.InvalidValueError, match="must be JSON"):
            mem.put(("a",), "k", bad)
    with pytest.raises(engram.InvalidKeyError, match="valid Unicode"):
        mem.put(("a",), "\ud800", {})
    for label, why in (("\ud800", "valid Unicode"), ("a\x1fb", "U\\+001F")):
        with pytest.raises(engram.InvalidNamespaceError, match=why):
            mem.put((label,), "k", {})
    for ttl in (1e12, float("inf"), float("nan")):
        with pytest.raises(engram.InvalidInputError, match="ttl"):
            mem.put(("a",), "k", {}, ttl=ttl)
    assert len(mem.log()) == 1  # nothing was written
    mem.put(("tab\there",), "k", {})  # LangGraph's label rule: tab and newline are fine (engram._names)
    assert mem.get(("tab\there",), "k") is not None
    with pytest.raises(engram.InvalidNamespaceError, match="U\\+000D"):  # other controls are not
        mem.put(("cr\rhere",), "k", {})
    assert mem.get(("cr\rhere",), "k") is None  # a read with one is no error: older data stays readable


def test_extreme_refs_and_scores_are_user_errors(mem: Memory) -> None:
    with pytest.raises(engram.InvalidRefError, match="more than 1,000,000 commits"):
        mem.resolve("HEAD~999999999")
    with pytest.raises(engram.RefNotFoundError, match="no commit at or before"):
        mem.resolve("main@{0001-01-01T00:00:00+14:00}")
    mem.put(("a",), "k", {"text": "hello"})
    assert mem.search(("a",), "hello", min_score=1e300) == []
    with pytest.raises(engram.InvalidInputError, match="min_score"):
        mem.search(("a",), "hello", min_score=float("nan"))
