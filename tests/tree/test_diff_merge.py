"""diff skips equal subtrees and is exact; three-way merge keeps every conflict as data."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engram.backends import MemoryChunkStore
from engram.tree import Change, Conflict, NodeStore, build_tree, diff_trees, iter_entries, merge_trees, mutate


class CountingStore(MemoryChunkStore):
    """Counts chunk reads, to prove diff cost follows the change, not the map."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get_many(self, ids):  # type: ignore[no-untyped-def]
        ids = list(ids)
        self.reads += len(ids)
        return super().get_many(ids)


def apply(ns: NodeStore, root: bytes, changes: list[Change]) -> bytes:
    return mutate(ns, root, {c.key: c.new for c in changes})


keys = st.binary(max_size=5)
maps = st.dictionaries(keys, st.binary(max_size=6), max_size=300)


@settings(max_examples=60, deadline=None)
@given(maps, maps)
def test_applying_diff_a_b_to_a_gives_b(a: dict[bytes, bytes], b: dict[bytes, bytes]) -> None:
    ns = NodeStore(MemoryChunkStore())
    ra, rb = build_tree(ns, sorted(a.items())), build_tree(ns, sorted(b.items()))
    changes = list(diff_trees(ns, ra, rb))
    assert [c.key for c in changes] == sorted(c.key for c in changes)
    expected = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    assert [c.key for c in changes] == expected
    assert all(c.old == a.get(c.key) and c.new == b.get(c.key) for c in changes)
    assert apply(ns, ra, changes) == rb


def test_diff_of_identical_roots_reads_nothing() -> None:
    chunks = CountingStore()
    ns = NodeStore(chunks, cache_nodes=0)
    root = build_tree(ns, [(b"k%06d" % i, b"v") for i in range(50_000)])
    chunks.reads = 0
    assert list(diff_trees(ns, root, root)) == []
    assert chunks.reads == 0


def test_diff_cost_grows_with_change_not_size() -> None:
    chunks = CountingStore()
    ns = NodeStore(chunks, cache_nodes=0)
    entries = [(b"k%06d" % i, b"v%d" % i) for i in range(100_000)]
    old = build_tree(ns, entries)
    new = mutate(ns, old, {b"k%06d" % i: b"changed" for i in range(0, 100_000, 10_000)})
    chunks.reads = 0
    changes = list(diff_trees(ns, old, new))
    assert len(changes) == 10
    height = ns.load(old).level + 1
    assert chunks.reads <= 2 * 10 * (height + 1), chunks.reads  # about one path per change per side


def test_diff_range_limits_keys() -> None:
    ns = NodeStore(MemoryChunkStore())
    old = build_tree(ns, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    new = mutate(ns, old, {b"a": b"2", b"b": None, b"c": b"2", b"d": b"2"})
    assert [c.key for c in diff_trees(ns, old, new, b"b", b"d")] == [b"b", b"c"]


def build(ns: NodeStore, data: dict[bytes, bytes]) -> bytes:
    return build_tree(ns, sorted(data.items()))


def test_merge_takes_each_sides_changes() -> None:
    ns = NodeStore(MemoryChunkStore())
    base = {b"a": b"1", b"b": b"1", b"c": b"1"}
    ours = {**base, b"a": b"ours", b"x": b"new"}
    theirs = {**base, b"c": b"theirs"}
    del theirs[b"b"]
    result = merge_trees(ns, build(ns, base), build(ns, ours), build(ns, theirs))
    assert result.conflicts == []
    assert dict(iter_entries(ns, result.root)) == {b"a": b"ours", b"c": b"theirs", b"x": b"new"}


def test_merge_same_change_on_both_sides_is_not_a_conflict() -> None:
    ns = NodeStore(MemoryChunkStore())
    base = build(ns, {b"a": b"1"})
    both = build(ns, {b"a": b"2", b"b": b"3"})
    assert merge_trees(ns, base, both, both).conflicts == []


def test_merge_reports_every_kind_of_conflict() -> None:
    ns = NodeStore(MemoryChunkStore())
    base = {b"mod": b"0", b"del-vs-mod": b"0", b"mod-vs-del": b"0"}
    ours = {b"mod": b"ours", b"mod-vs-del": b"ours", b"add": b"ours"}
    theirs = {b"mod": b"theirs", b"del-vs-mod": b"theirs", b"add": b"theirs"}
    result = merge_trees(ns, build(ns, base), build(ns, ours), build(ns, theirs))
    assert result.conflicts == [
        Conflict(b"add", None, b"ours", b"theirs"),
        Conflict(b"del-vs-mod", b"0", None, b"theirs"),
        Conflict(b"mod", b"0", b"ours", b"theirs"),
        Conflict(b"mod-vs-del", b"0", b"ours", None),
    ]
    assert dict(iter_entries(ns, result.root)) == ours  # unresolved keys keep ours


def test_merge_resolver_decides_conflicts() -> None:
    ns = NodeStore(MemoryChunkStore())
    base, ours, theirs = build(ns, {b"k": b"0"}), build(ns, {b"k": b"1"}), build(ns, {})
    result = merge_trees(ns, base, ours, theirs, resolve=lambda c: c.theirs)
    assert result.conflicts == [] and dict(iter_entries(ns, result.root)) == {}


@settings(max_examples=40, deadline=None)
@given(maps, maps)
def test_merge_with_an_unchanged_side_returns_the_other(base: dict[bytes, bytes], other: dict[bytes, bytes]) -> None:
    ns = NodeStore(MemoryChunkStore())
    rb, ro = build(ns, base), build(ns, other)
    assert merge_trees(ns, rb, rb, ro).root == ro
    assert merge_trees(ns, rb, ro, rb).root == ro


@settings(max_examples=40, deadline=None)
@given(maps, st.dictionaries(keys, st.binary(max_size=4), max_size=40), st.dictionaries(keys, st.none(), max_size=40))
def test_merge_of_disjoint_edits_equals_applying_both(
    base: dict[bytes, bytes], puts: dict[bytes, bytes], deletes: dict[bytes, None]
) -> None:
    ns = NodeStore(MemoryChunkStore())
    deletes = {k: None for k in deletes if k not in puts}
    rb = build(ns, base)
    ours, theirs = mutate(ns, rb, puts), mutate(ns, rb, deletes)
    result = merge_trees(ns, rb, ours, theirs)
    assert result.conflicts == []
    assert result.root == mutate(ns, rb, {**puts, **deletes})
