"""A search fanned out over a tenant's repositories says whether more results exist, as one repository would."""

from __future__ import annotations

from conftest import Cluster

import engram
from engram.ops.shards import RoutedMemory, by_hash


def test_routed_search_says_whether_more_exist(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "acme", by_hash(4), embedder="hashing", author="tester")
    single = engram.open(":memory:", embedder="hashing", author="tester")
    try:
        for i in range(12):
            for mem in (routed, single):
                mem.put(("notes", f"u{i}"), "k", {"text": f"alpha memory number {i}"})
        for limit, offset in ((5, 0), (5, 5), (5, 10), (12, 0), (10, 3)):
            merged = routed.search(("notes",), "alpha memory", limit=limit, offset=offset, mode="keyword")
            alone = single.search(("notes",), "alpha memory", limit=limit, offset=offset, mode="keyword")
            assert (len(merged), merged.has_more, merged.next_offset) == (len(alone), alone.has_more, alone.next_offset)
        assert routed.search(("notes",), "alpha", limit=5, mode="keyword").has_more
        assert not routed.search(("notes",), "alpha", limit=12, mode="keyword").has_more
    finally:
        routed.close()
        single.close()
