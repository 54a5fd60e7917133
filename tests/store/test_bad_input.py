"""Bad input is refused alike on every backend, and never stalls or breaks a search (issue #9)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from engram import codec
from engram.errors import (
    InvalidFilterError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidRefError,
    InvalidValueError,
)
from engram.objects import Record, encode_record
from engram.store import Memory

NS = ("docs",)
CATASTROPHIC = {"text": {"$regex": "(a+)+$"}}


def test_regex_catastrophic_pattern_searches_fast(smem: Memory) -> None:
    with smem.transaction() as tx:
        tx.put(NS, "long", {"text": "a" * 10_000 + "!"})
        tx.put(NS, "short", {"text": "a" * 27 + "!"})
        tx.put(NS, "hit", {"text": "aaa"})
    smem.search(NS, "a")  # the first search builds the PostgreSQL index: not what is timed
    for query in (None, "a"):
        start = time.perf_counter()
        smem.search(NS, query, filter={"text": {"$regex": "a+$"}}, limit=10)  # the same matches, no nesting
        healthy = time.perf_counter() - start
        start = time.perf_counter()
        with _deadline(5.0):  # a backtracking engine would run for ages: fail instead of hanging the run
            found = smem.search(NS, query, filter=CATASTROPHIC, limit=10)
        assert time.perf_counter() - start < 10 * healthy + 0.5, healthy  # as fast as the harmless pattern
        assert [item.key for item in found] == (["hit"] if query is None else [])  # "aaa" has no term "a"


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in this (main) thread after ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


NUL_WRITES: list[tuple[str, Callable[[Memory], Any], type[InvalidInputError]]] = [
    ("value string", lambda m: m.put(NS, "k", {"text": "a\x00b"}), InvalidValueError),
    ("nested value string", lambda m: m.put(NS, "k", {"a": [{"b": "\x00"}]}), InvalidValueError),
    ("value object key", lambda m: m.put(NS, "k", {"a": {"b\x00": 1}}), InvalidValueError),
    ("item key", lambda m: m.put(NS, "k\x00", {"text": "x"}), InvalidKeyError),
    ("index field", lambda m: m.put(NS, "k", {"text": "x"}, index=["te\x00xt"]), InvalidInputError),
    ("namespace label", lambda m: m.put(("do\x00cs",), "k", {"text": "x"}), InvalidNamespaceError),
    ("get key", lambda m: m.get(NS, "k\x00"), InvalidKeyError),
    ("search prefix", lambda m: m.search(("\x00",)), InvalidNamespaceError),
    ("filter field", lambda m: m.search(NS, filter={"te\x00xt": "x"}), InvalidFilterError),
    ("filter argument", lambda m: m.search(NS, "x", filter={"text": {"$in": ["\x00"]}}), InvalidFilterError),
    ("filter regex", lambda m: m.search(NS, filter={"text": {"$regex": "\x00"}}), InvalidFilterError),
    ("branch name", lambda m: m.create_branch("b\x00"), InvalidRefError),
    ("tag name", lambda m: m.tag("t\x00"), InvalidRefError),
    ("ref expression", lambda m: m.at("main\x00"), InvalidRefError),
    ("as-of time", lambda m: m.at("main@{2026-01-01\x00}"), InvalidRefError),
    ("search at", lambda m: m.search(NS, at="HEAD\x00~1"), InvalidRefError),
]


@pytest.mark.parametrize(("where", "call", "error"), NUL_WRITES, ids=[w for w, _, _ in NUL_WRITES])
def test_nul_is_refused_alike_on_every_backend(
    smem: Memory, where: str, call: Callable[[Memory], Any], error: type[InvalidInputError]
) -> None:
    smem.put(NS, "k", {"text": "kept"})
    head = smem.resolve().id
    with pytest.raises(error, match=r"U\+0000 \(NUL\) cannot be stored") as info:
        call(smem)
    assert type(info.value) is error
    assert smem.resolve().id == head and smem.branches().keys() == {"main"} and not smem.tags()
    assert [item.key for item in smem.search(NS, "kept")] == ["k"]  # the branch still searches


def test_nul_in_a_query_is_just_not_a_word(smem: Memory) -> None:
    smem.put(NS, "k", {"text": "kept words"})
    for mode in ("keyword", "hybrid", "semantic"):
        assert [item.key for item in smem.search(NS, "kept\x00words", mode=mode)] == ["k"]


def test_records_with_nul_from_before_the_rule_never_break_a_search(smem: Memory) -> None:
    smem.put(NS, "plain", {"text": "apples and pears"})
    now = int(time.time() * 1000)
    old = Record({"text": "apples\x00 and more", "k\x00": 1, "tags": ["a\x00"]}, now, now, author="old")
    key = codec.encode_key(NS, "old\x00key")
    smem.repo.commit_edits("main", {key: encode_record(old)}, author="old", message="written before the rule")
    assert sorted(item.key for item in smem.search(NS, "apples")) == ["old\x00key", "plain"]
    assert [item.key for item in smem.search(NS, "apples", filter={"text": {"$regex": "more$"}})] == ["old\x00key"]
    assert [item.key for item in smem.search(NS, filter={"tags": {"$exists": True}})] == ["old\x00key"]


def test_items_many_half_lives_old_still_rank(smem: Memory) -> None:
    ancient = Record({"text": "an ancient note"}, 0, 0)
    smem.repo.commit_edits("main", {codec.encode_key(NS, "ancient"): encode_record(ancient)}, author="t", message="m")
    smem.put(NS, "fresh", {"text": "a fresh note"})
    for profile in ("recent", "balanced", "similarity"):
        found = smem.search(NS, "note", profile=profile, explain=True)
        assert [item.key for item in found] == ["fresh", "ancient"], profile


def test_huge_integers_in_values_and_filters(smem: Memory) -> None:
    big = 10**400
    smem.put(NS, "big", {"text": "a huge count", "n": big, "confidence": big})
    smem.put(NS, "small", {"text": "a small count", "n": 1, "confidence": -big})
    for profile in ("similarity", "balanced", "quality"):
        found = smem.search(NS, "count", profile=profile, explain=True)
        assert {item.key for item in found} == {"big", "small"}
    assert [i.key for i in smem.search(NS, "count", filter={"n": {"$gt": 10**399}})] == ["big"]
    assert [i.key for i in smem.search(NS, filter={"n": {"$lt": -big}})] == []
    assert [i.key for i in smem.search(NS, filter={"n": big})] == ["big"]
    assert smem.get(NS, "big").value["n"] == big  # type: ignore[union-attr]


def test_ties_go_by_namespace_then_key_whenever_they_were_written(smem: Memory) -> None:
    """Equal scores are ordered by (namespace, key) alone, never by write time: two stores holding the same items
    (or a past version and a store rebuilt from it) answer with the same page. A listing is newest first, then
    by (namespace, key) among items of one commit."""
    value = {"text": "the same words in every item"}
    smem.put(("t", "b"), "z", value)
    time.sleep(0.003)
    smem.put(("t", "a"), "y", value)
    time.sleep(0.003)
    with smem.transaction() as tx:  # one commit: the same updated_at
        for ns, key in [(("t", "b"), "a"), (("t", "a"), "x"), (("t", "a"), "b"), (("t",), "q")]:
            tx.put(ns, key, value)
    expected = [(("t",), "q"), (("t", "a"), "b"), (("t", "a"), "x"), (("t", "a"), "y"), (("t", "b"), "a"),
                (("t", "b"), "z")]  # fmt: skip
    for mode in ("keyword", "hybrid", "semantic"):
        found = smem.search(("t",), "same words", mode=mode, limit=10)
        assert len({item.score for item in found}) == 1, mode
        assert [(item.namespace, item.key) for item in found] == expected, mode
        page = smem.search(("t",), "same words", mode=mode, limit=2, offset=2)
        assert [(item.namespace, item.key) for item in page] == expected[2:4], mode
    listed = smem.search(("t",), limit=10)
    newest = [(("t",), "q"), (("t", "a"), "b"), (("t", "a"), "x"), (("t", "b"), "a"), (("t", "a"), "y"),
              (("t", "b"), "z")]  # fmt: skip
    assert [(item.namespace, item.key) for item in listed] == newest


def test_deeply_nested_filters_are_refused_before_anything_recurses(smem: Memory) -> None:
    nested: dict[str, Any] = {"a": 1}
    for _ in range(400):
        nested = {"$and": [nested]}
    with pytest.raises(InvalidFilterError, match="nests more than 64 levels"):
        smem.search(NS, filter=nested)
    shallow: dict[str, Any] = {"a": 1}
    for _ in range(30):
        shallow = {"$or": [shallow]}
    assert list(smem.search(NS, filter=shallow)) == []


@pytest.mark.parametrize("pattern", ["a{99999999999}", "a{2,1001}", "(ab){5000,}"])
def test_regex_repetition_counts_beyond_re2s_limit_are_refused(smem: Memory, pattern: str) -> None:
    with pytest.raises(InvalidFilterError, match="repetition counts up to 1000"):
        smem.search(NS, filter={"text": {"$regex": pattern}})


def test_branch_and_tag_names_longer_than_255_characters_are_refused(smem: Memory) -> None:
    for create in (smem.create_branch, smem.tag):
        with pytest.raises(InvalidRefError, match="at most 255 characters"):
            create("b" * 3000)
    smem.create_branch("b" * 255)
    assert "b" * 255 in smem.branches()


def test_a_string_namespace_is_refused_by_every_read_and_write(smem: Memory) -> None:
    smem.put(("users",), "k", {"text": "dark mode"})
    calls: list[Callable[[], object]] = [
        lambda: smem.get("users", "k"),  # type: ignore[arg-type]
        lambda: smem.search("users", "dark"),  # type: ignore[arg-type]
        lambda: smem.list_namespaces(prefix="users"),  # type: ignore[arg-type]
        lambda: smem.list_namespaces(suffix="users"),  # type: ignore[arg-type]
        lambda: smem.put("users", "k", {}),  # type: ignore[arg-type]
        lambda: smem.delete("users", "k"),  # type: ignore[arg-type]
        lambda: smem.history("users", "k"),  # type: ignore[arg-type]
        lambda: smem.count("users"),  # type: ignore[arg-type]
        lambda: smem.at("HEAD").get("users", "k"),  # type: ignore[arg-type]
        lambda: smem.at("HEAD").search("users", "dark"),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidNamespaceError, match=r"pass a tuple, e.g. \('users',\)"):
            call()


def test_keys_labels_and_namespaces_have_one_size_limit_on_every_backend(smem: Memory) -> None:
    smem.put(("n",), "k" * 1024, {"text": "tea"})
    smem.put(("l" * 256, "m" * 256), "k", {"text": "tea"})
    assert len(smem.search((), "tea")) == 2  # long names are indexed on every backend
    for namespace, key, error in [
        (("n",), "k" * 1025, InvalidKeyError),
        (("n",), "é" * 513, InvalidKeyError),  # bytes, not characters
        (("l" * 257,), "k", InvalidNamespaceError),
        (("l" * 256,) * 4, "k", InvalidNamespaceError),
    ]:
        with pytest.raises(error, match="at most"):
            smem.put(namespace, key, {"text": "tea"})
    assert len(smem.search((), "tea")) == 2


def test_namespace_patterns_refuse_what_no_label_can_hold(smem: Memory) -> None:
    smem.put(("a", "b"), "k", {})
    assert smem.list_namespaces(prefix=("*", "b")) == [("a", "b")]
    for bad in (("a\x00",), ("a.b",), (1,)):
        with pytest.raises(InvalidNamespaceError):
            smem.list_namespaces(prefix=bad)  # type: ignore[arg-type]
