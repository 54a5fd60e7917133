"""The prolly tree: a sorted map of bytes to bytes, stored as content-addressed chunks (DESIGN.md §4).

The tree sees bytes only; meaning lives above it. Algorithms are free functions over a
:class:`NodeStore` and root ids.
"""

from engram.tree.diff import Change, diff_trees
from engram.tree.merge import Conflict, MergeResult, Resolver, merge_trees
from engram.tree.mutate import build_tree, empty_tree, mutate
from engram.tree.node import Node, NodeStore, decode_node, node_links
from engram.tree.read import count, get, iter_entries, rank

__all__ = [
    "Change",
    "Conflict",
    "MergeResult",
    "Node",
    "NodeStore",
    "Resolver",
    "build_tree",
    "count",
    "decode_node",
    "diff_trees",
    "empty_tree",
    "get",
    "iter_entries",
    "merge_trees",
    "mutate",
    "node_links",
    "rank",
]
