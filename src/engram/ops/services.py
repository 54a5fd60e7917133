"""One tenant's services, built once at the doors: one :class:`~engram.channels.Channels` hub and one
:class:`~engram.writer.MemoryWriter`, created on first use over the tenant's store and closed with it.

A door that built a hub and a writer per request would throw their caches away with every call (the channels
directory, the writer's worker). A :class:`~engram.ops.tenants.TenantPool` keeps a :class:`TenantServices` beside
each open store instead, and closes it when the store is evicted or the pool closes. The caller still decides
every access: each request acts through a view bound to its own handle (``services.channels.for_caller(handle)``,
``services.writer.for_caller(handle)``), so commits, read-only refusals and system namespaces are the caller's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from engram.channels import Channels
from engram.ops.access import LOCAL_TENANT
from engram.store import Memory
from engram.writer import MemoryWriter, WriterConfig

#: Builds a tenant's writer over its store, given the tenant's name: the one writer configuration of a door.
WriterFactory = Callable[[Memory, str], MemoryWriter]


def default_writer(memory: Memory, tenant: str = LOCAL_TENANT, trace_dir: Path | None = None) -> MemoryWriter:
    """The writer of a door given no writer settings: :class:`~engram.writer.WriterConfig`'s defaults (the offline
    extractor, every 2 completed assistant turns, each run merged, in the writer's background worker), its traces
    in ``trace_dir`` (None: the library's default folder)."""
    return WriterConfig(trace_dir=trace_dir).build(memory)


class TenantServices:
    """A tenant's channels hub and memory writer over its store ``memory``, each built on first use (``writer``
    builds the writer; ``max_content`` is the hub's content limit, None: the library's) and shared by every
    request of the tenant; safe to use from many threads."""

    def __init__(
        self, memory: Memory, writer: WriterFactory = default_writer, tenant: str = LOCAL_TENANT, *,
        max_content: int | None = None,
    ) -> None:  # fmt: skip
        self.memory = memory
        self.max_content = max_content
        self.tenant = tenant
        self._build_writer = writer
        self._lock = threading.Lock()
        self._channels: Channels | None = None
        self._writer: MemoryWriter | None = None
        self._closed = False

    @property
    def channels(self) -> Channels:
        """The tenant's channels hub (act through ``channels.for_caller(handle)``)."""
        with self._lock:
            if self._channels is None:
                if self.max_content is None:
                    self._channels = Channels(self.memory)
                else:
                    self._channels = Channels(self.memory, max_content=self.max_content)
            return self._channels

    @property
    def writer(self) -> MemoryWriter:
        """The tenant's memory writer (act through ``writer.for_caller(handle)``); a configuration error (an
        unknown extractor) is raised here, at every use, and nothing is kept."""
        with self._lock:
            if self._writer is None:
                self._writer = self._build_writer(self.memory, self.tenant)
            return self._writer

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def close(self) -> None:
        """Finish the writer's queued runs, close its extractor's connections, and drop the channels' caches."""
        with self._lock:
            writer, self._writer, self._channels, self._closed = self._writer, None, None, True
        if writer is None:
            return
        writer.close()
        close = getattr(writer.extractor, "close", None)  # a model client (OpenAIExtractor) holds connections
        if callable(close):
            close()


__all__ = ["TenantServices", "WriterFactory", "default_writer"]
