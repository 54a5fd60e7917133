"""Writing a source's versions into a memory: as one commit (a snapshot) or one commit per version (a history).

Items keep the source's timestamps exactly (``created_at``, ``updated_at``, ``expires_at``), their author and
their source id (in the item's ``sources``); a history's commits carry the time each version was written
(through :func:`engram.clock.simulated`), its author and a message, and every commit records the source ids
it wrote (:func:`~engram.compat.importers.common.import_metadata`), which makes re-runs add nothing.

The simulated clock is process-wide: while a history is imported, every write of this process is stamped with the
source's times, so import with no other writer running in the process (the CLI runs alone).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from engram import clock, codec
from engram.compat.importers.common import (
    ImportReport,
    ImportSourceError,
    Progress,
    Source,
    SourceVersion,
    import_metadata,
    imported_ids,
)
from engram.objects import Record, encode_record
from engram.store import Memory, Transaction

#: A snapshot import commits this many versions per commit.
SNAPSHOT_BATCH = 5_000


def _checked(version: SourceVersion) -> tuple[tuple[str, ...], str]:
    ns = tuple(version.namespace)
    if not ns or any(not label or "." in label for label in ns) or not version.key:
        raise ImportSourceError(f"{version.id}: cannot store namespace {ns!r} key {version.key!r} in engram")
    return ns, version.key


def _record(version: SourceVersion, created: int) -> Record:
    assert version.value is not None
    extra: dict[str, Any] = {} if version.ttl_minutes is None else {"ttl": float(version.ttl_minutes)}
    if version.index is not None:
        extra["index"] = list(version.index)
    return Record(dict(version.value), created, version.time_ms, version.expires_ms, version.author,
                  (version.id,), extra)  # fmt: skip


def _also(tx: Transaction, version: SourceVersion) -> None:
    """Buffer the version's further items (unsearchable, with its time, author and source id)."""
    for ns, key, value in version.also:
        raw = codec.encode_key(ns, key)
        if value is None:
            tx.edits[raw] = None
            continue
        existing = tx.get(ns, key)
        created = _ms(existing.created_at) if existing is not None else version.time_ms
        record = Record(dict(value), created, version.time_ms, None, version.author, (version.id,), {"index": False})
        tx.edits[raw] = encode_record(record)


def _new(memory: Memory, source: Source, report: ImportReport, progress: Progress | None) -> Iterator[SourceVersion]:
    """The source's versions not imported yet (counting the others as skipped)."""
    done = imported_ids(memory, source.kind)
    for version in source.versions():
        report.seen += 1
        if version.id in done:
            report.skipped += 1
            if progress is not None:
                progress(1)
            continue
        yield version


def write_snapshot(
    memory: Memory, source: Source, report: ImportReport, *, dry_run: bool, progress: Progress | None
) -> None:
    """Write the new versions as few commits (last version of an item wins); commit time is now."""
    pending: list[SourceVersion] = []
    items: set[tuple[tuple[str, ...], str]] = set()

    def flush() -> None:
        if not pending:
            return
        report.versions += len(pending)
        if not dry_run:
            message = f"import {len(pending)} version(s) from {source.kind}"
            metadata = import_metadata(source.kind, source.location, (v.id for v in pending))
            with memory.transaction(message, metadata=metadata) as tx:
                for version in pending:
                    ns, key = _checked(version)
                    raw = codec.encode_key(ns, key)
                    _also(tx, version)
                    if version.value is None:
                        tx.edits[raw] = None
                        continue
                    existing = tx.get(ns, key)
                    created = version.created_ms or (
                        _ms(existing.created_at) if existing is not None else version.time_ms
                    )
                    tx.edits[raw] = encode_record(_record(version, created))
            if tx.commit is not None:
                report.commits += 1
                report.commit_ids.append(tx.commit.id.hex())
        else:
            report.commits += 1
        if progress is not None:
            progress(len(pending))
        pending.clear()

    for version in _new(memory, source, report, progress):
        _checked(version)
        pending.append(version)
        items.add((version.namespace, version.key))
        if len(pending) >= SNAPSHOT_BATCH:
            flush()
    flush()
    report.items = len(items)


def write_history(
    memory: Memory, source: Source, report: ImportReport, *, dry_run: bool, progress: Progress | None
) -> None:
    """Write each new version as its own commit, stamped with the time the source wrote it, in time order."""
    items: set[tuple[tuple[str, ...], str]] = set()
    versions = list(_new(memory, source, report, progress))
    for version in versions:
        _checked(version)
    if dry_run:
        report.versions = report.commits = len(versions)
        report.items = len({(v.namespace, v.key) for v in versions})
        if progress is not None and versions:
            progress(len(versions))
        return
    if not versions:
        return
    start = datetime.fromtimestamp(versions[0].time_ms / 1000, tz=UTC)
    with clock.simulated(start) as sim:
        for version in versions:
            moment = datetime.fromtimestamp(version.time_ms / 1000, tz=UTC)
            if moment > sim.now():
                sim.set(moment)
            ns, key = _checked(version)
            raw = codec.encode_key(ns, key)
            metadata = import_metadata(source.kind, source.location, [version.id]) | version.metadata
            message = version.message or f"import {'/'.join(ns)}/{key} from {source.kind}"
            with memory.transaction(message, author=version.author, metadata=metadata) as tx:
                existing = tx.get(ns, key)
                _also(tx, version)
                if version.value is None:
                    tx.edits[raw] = None
                else:
                    created = version.created_ms or (
                        _ms(existing.created_at) if existing is not None else version.time_ms
                    )
                    tx.edits[raw] = encode_record(_record(version, created))
            report.versions += 1
            if tx.commit is not None and tx.commit.id.hex() not in report.commit_ids[-1:]:
                report.commits += 1
                report.commit_ids.append(tx.commit.id.hex())
            items.add((ns, key))
            if progress is not None:
                progress(1)
    report.items = len(items)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
