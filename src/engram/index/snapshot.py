"""A file of named numpy arrays plus a JSON header, written atomically and read back by memory map.

Layout: ``b"ENGRAMIX"``, a little-endian u64 header length, the header (JSON: format version,
caller's metadata, and per array its dtype, shape and offset), then each array's bytes at a
64-byte-aligned offset. Reading maps the file and wraps each array without copying, so opening a
snapshot of a million documents costs what the caller reads, not the file's size.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

MAGIC = b"ENGRAMIX"
VERSION = 1
ALIGN = 64


def write(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]) -> None:
    """Write ``arrays`` and ``meta`` to ``path`` atomically (a reader sees the old file or the new one)."""
    specs: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, array in arrays.items():
        specs[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}
        offset += -(-array.nbytes // ALIGN) * ALIGN
    header = json.dumps({"version": VERSION, "meta": meta, "arrays": specs}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            for name, array in arrays.items():
                f.seek(start + specs[name]["offset"])
                f.write(np.ascontiguousarray(array).tobytes())
            f.truncate(start + offset)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]] | None:
    """The metadata and (memory-mapped, read-only) arrays of a snapshot; None if absent or unreadable."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < len(MAGIC) + 8:
                return None
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError:
        return None
    try:
        if mapped[: len(MAGIC)] != MAGIC:
            return None
        (size,) = struct.unpack_from("<Q", mapped, len(MAGIC))
        header = json.loads(mapped[len(MAGIC) + 8 : len(MAGIC) + 8 + size])
        if header.get("version") != VERSION:
            return None
        start = -(-(len(MAGIC) + 8 + size) // ALIGN) * ALIGN
        arrays: dict[str, npt.NDArray[Any]] = {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            count = int(np.prod(spec["shape"], dtype=np.int64))
            if count == 0:
                arrays[name] = np.zeros(spec["shape"], dtype=dtype)
                continue
            flat = np.frombuffer(mapped, dtype=dtype, count=count, offset=start + spec["offset"])
            arrays[name] = flat.reshape(spec["shape"])
        return header["meta"], arrays
    except (ValueError, KeyError, TypeError, struct.error):
        return None
