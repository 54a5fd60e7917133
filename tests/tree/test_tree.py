"""The prolly tree: golden hashes, history independence, reads, and edits, against a plain dict."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.backends import MemoryChunkStore, ValidatingChunkStore
from engram.errors import IntegrityError
from engram.tree import (
    NodeStore,
    build_tree,
    count,
    decode_node,
    empty_tree,
    get,
    iter_entries,
    mutate,
    node_links,
    rank,
)
from engram.tree.chunker import LEAF_TARGET, MAX_FACTOR

GOLDEN_10K = "0bc1394d916fee2ccc8617a8f39111f6b608cc33"
GOLDEN_EMPTY = "e0fbfb6aabe6c7805317efa65cd62496359be644"


def store() -> NodeStore:
    return NodeStore(ValidatingChunkStore(MemoryChunkStore()), cache_nodes=64)


def golden_entries() -> list[tuple[bytes, bytes]]:
    return [(b"key-%06d" % i, b"value-%d" % (i * i)) for i in range(10_000)]


def test_build_golden_root_hash_pins_the_format() -> None:
    assert build_tree(store(), golden_entries()).hex() == GOLDEN_10K


def test_empty_tree_golden_root_hash() -> None:
    assert empty_tree(store()).hex() == GOLDEN_EMPTY


def test_mutate_from_empty_reaches_the_golden_root() -> None:
    ns = store()
    entries = golden_entries()
    root = empty_tree(ns)
    for i in range(0, len(entries), 997):  # uneven batches, out of key order across batches
        root = mutate(ns, root, dict(entries[i : i + 997][::-1]))
    assert root.hex() == GOLDEN_10K


def test_build_rejects_unsorted_input() -> None:
    with pytest.raises(ValueError, match="sorted"):
        build_tree(store(), [(b"b", b"1"), (b"a", b"2")])


def test_build_rejects_duplicate_keys() -> None:
    with pytest.raises(ValueError, match="sorted"):
        build_tree(store(), [(b"a", b"1"), (b"a", b"2")])


def test_value_changes_never_move_boundaries() -> None:
    ns = store()
    entries = golden_entries()
    small = build_tree(ns, entries)
    large = build_tree(ns, [(k, v * 50) for k, v in entries])

    def shape(root: bytes) -> list[list[bytes]]:
        node = ns.load(root)
        while node.level > 1:
            node = ns.load(node.child(0))
        return [ns.load(node.child(i)).keys for i in range(len(node.keys))]

    assert shape(small) == shape(large)


def test_node_sizes_stay_under_the_cap() -> None:
    ns = store()
    root = build_tree(ns, golden_entries())
    node = ns.load(root)
    leaves = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.level == 0:
            leaves.append(len(n.keys))
        else:
            stack.extend(ns.load(n.child(i)) for i in range(len(n.keys)))
    assert max(leaves) <= LEAF_TARGET * MAX_FACTOR
    assert LEAF_TARGET / 2 < sum(leaves) / len(leaves) < LEAF_TARGET * 2


def test_get_count_rank_and_ranges() -> None:
    ns = store()
    entries = golden_entries()
    root = build_tree(ns, entries)
    assert get(ns, root, b"key-004242") == b"value-%d" % (4242 * 4242)
    assert get(ns, root, b"key-004242x") is None
    assert get(ns, root, b"zzz") is None
    assert count(ns, root) == 10_000
    assert rank(ns, root, b"key-000100") == 100
    assert count(ns, root, b"key-000100", b"key-000200") == 100
    assert list(iter_entries(ns, root, b"key-009998")) == entries[-2:]
    assert list(iter_entries(ns, root, b"key-000010", b"key-000013")) == entries[10:13]
    assert list(iter_entries(ns, root)) == entries


keys = st.binary(min_size=0, max_size=6)
values = st.binary(min_size=0, max_size=8)
edit_batches = st.lists(st.dictionaries(keys, st.one_of(st.none(), values), max_size=60), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(keys, values, max_size=400), edit_batches)
def test_random_edits_equal_one_bulk_build(
    initial: dict[bytes, bytes], batches: list[dict[bytes, bytes | None]]
) -> None:
    """History independence: any sequence of edit batches gives the root a bulk build of the result gives."""
    ns = store()
    model = dict(initial)
    root = build_tree(ns, sorted(model.items()))
    for batch in batches:
        root = mutate(ns, root, batch)
        for key, value in batch.items():
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        assert list(iter_entries(ns, root)) == sorted(model.items())
        assert count(ns, root) == len(model)
    assert root == build_tree(ns, sorted(model.items()))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(keys, values), max_size=300), st.randoms(use_true_random=False))
def test_insertion_order_does_not_matter(pairs: list[tuple[bytes, bytes]], rnd: object) -> None:
    ns = store()
    model = dict(pairs)
    items = list(model.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    root = empty_tree(ns)
    for i in range(0, len(items), 7):
        root = mutate(ns, root, dict(items[i : i + 7]))
    assert root == build_tree(ns, sorted(model.items()))


def test_a_single_edit_writes_a_path_not_the_tree() -> None:
    chunks = MemoryChunkStore()
    ns = NodeStore(chunks)
    root = build_tree(ns, golden_entries())
    before = set(chunks.iter_ids())
    mutate(ns, root, {b"key-005000": b"changed"})
    written = set(chunks.iter_ids()) - before
    assert 1 <= len(written) <= ns.load(root).level + 2


def test_node_links_are_the_levels_and_children_of_a_full_decode() -> None:
    """The walk of a copy reads (level, children) without decoding keys and values: the same as decode_node's,
    at every level of a three-level tree; a chunk that is not a node, or one cut short, is an IntegrityError."""
    inner = MemoryChunkStore()
    build_tree(NodeStore(inner), golden_entries())
    chunks = inner.get_many(list(inner.iter_ids()))
    levels = set()
    for cid, data in chunks.items():
        node = decode_node(cid, data)
        levels.add(node.level)
        expected = [node.child(i) for i in range(len(node.keys))] if node.level else []
        assert node_links(cid, data) == (node.level, expected)
    assert levels == {0, 1, 2}
    internal = next(data for cid, data in chunks.items() if data[1] > 0)
    with pytest.raises(IntegrityError):
        node_links(b"x" * 20, b"C{}")
    with pytest.raises(IntegrityError):
        node_links(b"x" * 20, internal[:-30])
