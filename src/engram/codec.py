"""Byte encodings shared by the layers: tree keys for (namespace, key) and canonical JSON.

An entry key encodes a namespace (a tuple of labels) and an item key so that

* every namespace prefix is one contiguous range of entry keys, and
* the items of a namespace sort before the entries of its sub-namespaces.

Each label is ``0x02 + escaped(utf-8) + 0x00``; the item key is ``0x01 + escaped(utf-8)``.
Escaping turns ``0x00`` into ``0x00 0xFF``, so a terminator is ``0x00`` followed by anything but
``0xFF``, and what follows an encoded prefix always starts with ``0x01`` or ``0x02``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram.errors import IntegrityError

_LABEL = b"\x02"
_ITEM = b"\x01"
_END = b"\x00"


def _escape(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\x00", b"\x00\xff")


def encode_namespace(namespace: Sequence[str]) -> bytes:
    """Encode a namespace as the common prefix of the entry keys below it."""
    return b"".join(_LABEL + _escape(label) + _END for label in namespace)


def encode_key(namespace: Sequence[str], key: str) -> bytes:
    """Encode (namespace, key) as one tree entry key."""
    return encode_namespace(namespace) + _ITEM + _escape(key)


def decode_key(data: bytes) -> tuple[tuple[str, ...], str]:
    """Invert :func:`encode_key`."""
    labels: list[str] = []
    pos = 0
    while data[pos : pos + 1] == _LABEL:
        out = bytearray()
        pos += 1
        while True:
            nul = data.index(b"\x00", pos)
            out += data[pos:nul]
            if data[nul + 1 : nul + 2] == b"\xff":
                out += b"\x00"
                pos = nul + 2
            else:
                pos = nul + 1
                break
        labels.append(out.decode("utf-8"))
    if data[pos : pos + 1] != _ITEM:
        raise ValueError(f"not an entry key: {data!r}")
    return tuple(labels), data[pos + 1 :].replace(b"\x00\xff", b"\x00").decode("utf-8")


def prefix_range(namespace: Sequence[str]) -> tuple[bytes, bytes]:
    """Half-open range ``[start, end)`` of every entry key in ``namespace`` and its sub-namespaces."""
    base = encode_namespace(namespace)
    return base + _ITEM, base + b"\x03"


#: The first character of a system namespace's first label (state a service owns: see ``engram.store.system``).
SYSTEM_MARK = "_"
#: The half-open range of entry keys holding every system namespace: one range, in the tree's key order.
SYSTEM_RANGE = (_LABEL + b"_", _LABEL + b"`")


def is_system(namespace: Sequence[str]) -> bool:
    """True when ``namespace`` (or a prefix of it) is a system namespace: its first label starts with ``_``."""
    return bool(namespace) and str(namespace[0]).startswith(SYSTEM_MARK)


def items_range(namespace: Sequence[str]) -> tuple[bytes, bytes]:
    """Half-open range of the entry keys of the items directly in ``namespace``."""
    base = encode_namespace(namespace)
    return base + _ITEM, base + _LABEL


def dumps(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8. Equal objects give equal bytes.

    Raises ValueError for what JSON cannot carry (NaN, infinities, lone surrogates) and TypeError for
    values that are not JSON types."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text that is not valid Unicode (it holds a lone surrogate)") from exc


def loads(data: bytes) -> Any:
    """Parse stored JSON bytes; bytes that are not JSON are a corrupt chunk (:class:`IntegrityError`)."""
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise IntegrityError(f"stored bytes that are not JSON: a corrupt chunk ({exc}); run fsck") from None
