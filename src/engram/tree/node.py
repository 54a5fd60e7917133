"""Node format of the prolly tree, and the node store that loads, caches and writes nodes.

A node is one chunk::

    b"N" | level: u8 | n: u32 | key ends: n * u32 | value ends: n * u32 | keys | values

Leaves (level 0) map entry keys to entry values. An internal node has one entry per child:
the child's last key -> the child's id (20 bytes) + the number of leaf entries below it (u64).
The format is pinned by a golden-hash test; changing it changes every root id.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable

from engram.backends.base import ChunkStore
from engram.errors import ChunkNotFoundError, IntegrityError
from engram.hashing import ID_SIZE, ChunkId, chunk_id

_HEADER = struct.Struct("<cBI")
_MAGIC = b"N"


class Node:
    """A decoded tree node: parallel lists of keys and values, at a level (0 = leaf)."""

    __slots__ = ("id", "keys", "level", "values")

    def __init__(self, cid: ChunkId, level: int, keys: list[bytes], values: list[bytes]) -> None:
        self.id = cid
        self.level = level
        self.keys = keys
        self.values = values

    def count(self) -> int:
        """Number of leaf entries in this subtree."""
        if self.level == 0:
            return len(self.keys)
        return sum(int.from_bytes(v[ID_SIZE:], "little") for v in self.values)

    def child(self, i: int) -> ChunkId:
        """Id of the i-th child of an internal node."""
        return self.values[i][:ID_SIZE]


def child_ref(cid: ChunkId, count: int) -> bytes:
    """The value of an internal-node entry: child id + leaf count."""
    return cid + count.to_bytes(8, "little")


def ref_count(ref: bytes) -> int:
    """Leaf count stored in an internal-node entry value."""
    return int.from_bytes(ref[ID_SIZE:], "little")


def encode_node(level: int, keys: list[bytes], values: list[bytes]) -> bytes:
    """Serialize a node."""
    n = len(keys)
    ends: list[int] = []
    total = 0
    for k in keys:
        total += len(k)
        ends.append(total)
    total = 0
    for v in values:
        total += len(v)
        ends.append(total)
    return b"".join(
        (_HEADER.pack(_MAGIC, level, n), struct.pack(f"<{2 * n}I", *ends), b"".join(keys), b"".join(values))
    )


def decode_node(cid: ChunkId, data: bytes) -> Node:
    """Parse a node chunk."""
    try:
        magic, level, n = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a tree node")
        ends = struct.unpack_from(f"<{2 * n}I", data, _HEADER.size)
    except (struct.error, ValueError) as exc:
        raise IntegrityError(f"chunk {cid.hex()} is not a tree node: {exc}") from exc
    base = _HEADER.size + 8 * n
    keys: list[bytes] = []
    start = base
    for i in range(n):
        end = base + ends[i]
        keys.append(data[start:end])
        start = end
    vbase = start
    values: list[bytes] = []
    for i in range(n, 2 * n):
        end = vbase + ends[i]
        values.append(data[start:end])
        start = end
    return Node(cid, level, keys, values)


def node_links(cid: ChunkId, data: bytes) -> tuple[int, list[ChunkId]]:
    """(level, child ids) of a node chunk, without building its keys and values: what a walk of the tree needs
    (a leaf has no children, so its entries are not parsed). A chunk that is not a node is an
    :class:`IntegrityError`, as in :func:`decode_node`."""
    try:
        magic, level, n = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a tree node")
        if level == 0:
            return 0, []
        ends = struct.unpack_from(f"<{n}I", data, _HEADER.size + 4 * n)  # the value ends
    except (struct.error, ValueError) as exc:
        raise IntegrityError(f"chunk {cid.hex()} is not a tree node: {exc}") from exc
    base = _HEADER.size + 8 * n + (struct.unpack_from("<I", data, _HEADER.size + 4 * n - 4)[0] if n else 0)
    refs = _REFS[n]
    if ends == refs[0] and len(data) == base + refs[1].size:  # every value a child ref: one unpack
        return level, list(refs[1].unpack_from(data, base))
    children = [data[base + at : base + at + ID_SIZE] for at in (0, *ends[:-1])]
    if any(len(child) != ID_SIZE for child in children):
        raise IntegrityError(f"chunk {cid.hex()} is not a tree node: an entry is cut short")
    return level, children


class _Refs(dict[int, tuple[tuple[int, ...], struct.Struct]]):
    """For an internal node of n entries whose values are all child refs (id + count): the value ends (28, 56,
    ...) and a struct that unpacks the n child ids at once."""

    def __missing__(self, n: int) -> tuple[tuple[int, ...], struct.Struct]:
        size = ID_SIZE + 8
        found = self[n] = (tuple(range(size, size * (n + 1), size)), struct.Struct("<" + f"{ID_SIZE}s8x" * n))
        return found


_REFS = _Refs()


class NodeStore:
    """Loads and writes tree nodes over a :class:`ChunkStore`.

    Decoded nodes are cached (bounded by count; nodes are immutable, so never stale). Written
    nodes are buffered until :meth:`flush`, so one mutation is one ``put_many``.
    """

    def __init__(self, chunks: ChunkStore, cache_nodes: int = 20_000) -> None:
        self.chunks = chunks
        self.cache_nodes = cache_nodes
        self._cache: OrderedDict[ChunkId, Node] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, cid: ChunkId) -> Node:
        """Return the node with id ``cid``."""
        with self._lock:
            node = self._cache.get(cid)
            if node is not None:
                self._cache.move_to_end(cid)
                return node
        found = self.chunks.get_many([cid])
        if cid not in found:
            raise ChunkNotFoundError(f"tree node {cid.hex()} is missing from the store; run fsck")
        node = decode_node(cid, found[cid])
        self._remember(node)
        return node

    def load_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, Node]:
        """Return several nodes at once (one backend round trip for the uncached ones)."""
        out: dict[ChunkId, Node] = {}
        missing: list[ChunkId] = []
        with self._lock:
            for cid in ids:
                node = self._cache.get(cid)
                if node is None:
                    missing.append(cid)
                else:
                    out[cid] = node
        if missing:
            found = self.chunks.get_many(missing)
            for cid in missing:
                if cid not in found:
                    raise ChunkNotFoundError(f"tree node {cid.hex()} is missing from the store; run fsck")
                node = decode_node(cid, found[cid])
                self._remember(node)
                out[cid] = node
        return out

    def _remember(self, node: Node) -> None:
        with self._lock:
            self._cache[node.id] = node
            if len(self._cache) > self.cache_nodes:
                self._cache.popitem(last=False)

    def writer(self) -> NodeWriter:
        """A buffer for the nodes of one mutation."""
        return NodeWriter(self)


class NodeWriter:
    """Collects new nodes; :meth:`flush` writes them in batches. Nodes are readable before the flush."""

    def __init__(self, store: NodeStore, flush_every: int = 2000) -> None:
        self.store = store
        self.pending: dict[ChunkId, bytes] = {}
        self.flush_every = flush_every

    def write(self, level: int, keys: list[bytes], values: list[bytes]) -> Node:
        """Encode, hash and buffer a node; return it decoded."""
        data = encode_node(level, keys, values)
        cid = chunk_id(data)
        node = Node(cid, level, keys, values)
        self.pending[cid] = data
        self.store._remember(node)
        if len(self.pending) >= self.flush_every:
            self.flush()
        return node

    def load(self, cid: ChunkId) -> Node:
        """Load a node, including one written here and not flushed yet."""
        data = self.pending.get(cid)
        return self.store.load(cid) if data is None else decode_node(cid, data)

    def flush(self) -> None:
        """Write buffered chunks to the chunk store."""
        if self.pending:
            self.store.chunks.put_many(self.pending)
            self.pending = {}
