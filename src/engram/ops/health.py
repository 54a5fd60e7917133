"""Readiness: does each dependency of a repository answer, and how fast (``/readyz``, ``engram doctor``).

:func:`readiness` checks the store (read a ref and a chunk, rewrite that chunk: an idempotent write)
and, when there is one, the Redis cache; given a :class:`~engram.store.Memory`, also its embedder (one
query embedded) and its search index (engine, and commits behind the head); given remotes, that each
answers a ref read; and the state of every tracked circuit breaker (:mod:`engram.ops.metrics`). It answers
within its deadline whatever they do: each check runs on a worker thread, and a check still running at the
deadline is reported down with "timed out". A check that hangs is not started again while it runs: later
calls wait for the same one, so a stuck database never piles up threads. Only the store (and the ``essential``
checks a caller adds, such as a sharded server's catalog and shards) decides readiness; any other component
that fails makes the status ``degraded``. The breakers are listed, not judged: a breaker's state is
process-wide, and the component behind an open breaker fails its own check anyway.

Each remote's answer is reused for :data:`REMOTE_TTL` seconds (keyed by its URL), and concurrent checks of one
remote share one probe, so a flood of readiness probes costs each remote one request per ``REMOTE_TTL``; the list
of remotes is read at every check, so a remote that was removed is gone from the next report. No report holds a
credential: a remote's error names its URL with the password and secret parameters masked
(:func:`engram.redaction.redact_url`).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from engram import breakers as engram_breakers
from engram import runtime
from engram.breakers import RetryPolicy
from engram.ops.remotes.stores import open_remote
from engram.redaction import redact_url
from engram.repo import Repository
from engram.store import Memory
from engram.store.connect import cache_status

#: Seconds a readiness check takes at most, by default.
TIMEOUT = 1.0
#: Seconds a remote's answer is reused by later checks (a probe of an S3 remote takes a round trip or more).
REMOTE_TTL = 5.0

Check = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Readiness:
    """What :func:`readiness` found.

    Attributes:
        ready: the store answered a read and a write in time (and every ``essential`` check passed).
        status: ``ok``; ``degraded`` (ready, but a component such as the Redis cache is down); ``down``.
        checks: each component's status, by name (``store``, ``cache``, ``embedder``, ``index``, ``remotes``,
            ``breakers``; those that do not apply are left out): ``ok``, ``ms`` (latency), ``error`` when it
            failed, and the component's own fields (the cache's ``degraded`` and ``since``, the embedder's
            ``model``, the index's ``engine`` and ``lag``, each remote's status, each breaker's state).
    """

    ready: bool
    status: str
    checks: dict[str, Check]


def probe_store(repo: Repository) -> None:
    """Read a ref and a chunk, and rewrite that chunk (an idempotent write), or raise."""
    heads = list(repo.branches().values())[:1]
    repo.chunks.put_many(repo.chunks.get_many(heads))


def readiness(
    repo: Repository | Memory | Callable[[], Repository | Memory],
    *,
    timeout: float = TIMEOUT,
    remotes: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
    essential: Mapping[str, Callable[[], Check | None]] | None = None,
    components: Mapping[str, Callable[[], Check | None]] | None = None,
) -> Readiness:
    """Check the store and every other component, answering within ``timeout`` seconds whatever they do.

    ``repo`` is the repository or a :class:`~engram.store.Memory` (whose embedder and search index are then
    checked too), or a function that opens either (the time it takes counts too). ``remotes`` (name -> URL, or
    a function returning them, called within the check) are checked by reading one ref from each. A store that
    fails or does not answer in time makes the repository not ready; any other component that does makes it
    ``degraded`` (reads and writes still work: through the store, with keyword search when the embedder is
    down). ``essential`` are more checks that decide readiness like the store's (name -> a function returning
    the check's fields, raising :class:`CheckFailed` or any error when it fails; a sharded server's catalog
    and shards, :class:`engram.ops.shards.health.ShardProbe`); one may report itself ``degraded``. ``components``
    are more checks that do not decide it (a failing one makes the status ``degraded``: a server's read replicas).
    The report
    is also kept for ``/metrics`` (:func:`engram.ops.metrics.record_readiness`).
    """
    deadline = time.monotonic() + timeout
    direct = isinstance(repo, Repository | Memory)
    owner = repo if direct else getattr(repo, "__self__", repo)

    def opened() -> Repository | Memory:
        return repo if isinstance(repo, Repository | Memory) else repo()

    def opened_repo() -> Repository:
        found = opened()
        return found.repo if isinstance(found, Memory) else found

    def opened_or_none() -> Repository | Memory | None:
        try:
            return opened()
        except Exception:  # the store check reports it
            return None

    def opened_memory() -> Memory | None:
        found = opened_or_none()
        return found if isinstance(found, Memory) else None

    def store() -> Check | None:
        probe_store(opened_repo())
        return {}

    def cache() -> Check | None:
        found = opened_or_none()
        return None if found is None else cache_status(found.repo if isinstance(found, Memory) else found, probe=True)

    def embedder() -> Check | None:
        memory = opened_memory()
        if memory is None or memory.pool.embedder is None:
            return None
        memory.pool.embedder.embed_query("engram readiness")
        return {"model": memory.pool.embedder.model_id}

    def index() -> Check | None:
        memory = opened_memory()
        if memory is None:
            return None
        lag = memory.index_lags().get(memory.branch)
        found: Check = {"engine": "postgres" if memory.pool.sql is not None else "in-process", "branch": memory.branch}
        if lag is None:
            return {**found, "lag": None}  # not loaded yet: built at the next search
        return {**found, "lag": lag.commits, "pending_vectors": lag.vectors, "graph_backlog": lag.graph}

    def remote_checks() -> Check | None:
        if remotes is None or opened_or_none() is None:
            return None
        named = remotes() if callable(remotes) else remotes
        if not named:
            return None
        running = {name: _remote_check(url) for name, url in sorted(named.items())}
        found = {name: answer.result() or {"ok": False, "error": "no answer"} for name, answer in running.items()}
        failed = [name for name, check in found.items() if not check["ok"]]
        if failed:
            raise CheckFailed(f"unreachable: {', '.join(failed)}", {"remotes": found})
        return {"remotes": found}

    def breakers() -> Check | None:
        # Informational: the component behind an open breaker fails its own check (the breaker refuses the
        # probe), and breakers of dependencies this store does not use must not degrade it.
        states = engram_breakers.states()
        if not states:
            return None
        return {"states": states, "open": [name for name, state in states.items() if state != "closed"]}

    works: list[tuple[str, Callable[[], Check | None]]] = [
        ("store", store), ("cache", cache), ("embedder", embedder), ("index", index), ("remotes", remote_checks),
        ("breakers", breakers), *(essential or {}).items(), *(components or {}).items(),
    ]  # fmt: skip
    deciding = {"store", *(essential or {})}
    running = {name: _start(owner, name, work) for name, work in works}
    checks: dict[str, Check] = {}
    for name, future in running.items():
        try:
            found = future.result(timeout=max(deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            found = {"ok": False, "ms": round(timeout * 1000, 2), "error": f"timed out after {timeout:g} s"}
            if name not in deciding:
                found["degraded"] = True
        if found is not None:
            checks[name] = found
    ready = all(checks[name]["ok"] for name in deciding if name in checks)
    degraded = any(check.get("degraded") or (not check.get("ok") and name not in deciding)
                   for name, check in checks.items())  # fmt: skip
    report = Readiness(ready, "down" if not ready else "degraded" if degraded else "ok", checks)
    with _lock:
        _last[:] = [report]
    return report


def last_readiness() -> Readiness | None:
    """The last readiness check of this process (None before the first): what ``/metrics`` exports."""
    with _lock:
        return _last[0] if _last else None


class CheckFailed(Exception):
    """A check that failed with details to report beside its error."""

    def __init__(self, message: str, details: Check) -> None:
        super().__init__(message)
        self.details = details


def _probe_remote(url: str) -> Check:
    """Read one ref of the remote at ``url``: ``{"ok", "ms"}``, with ``error`` (no credential) when it failed."""
    started = time.perf_counter()
    try:
        _read_head(url)
        found: Check = {"ok": True}
    except Exception as exc:  # a check reports every failure; it never raises
        found = {"ok": False, "error": redact_url(str(exc) or type(exc).__name__)}
        _forget_frames(exc)
    found["ms"] = round((time.perf_counter() - started) * 1000, 2)
    return found


def _read_head(url: str) -> None:
    remote = open_remote(url, retry=ONE_TRY)  # a probe measures the remote: it does not retry
    try:
        remote.refs.get("heads/main")
    finally:
        remote.close()


def _forget_frames(exc: BaseException | None) -> None:
    """Drop the locals of the frames an error's traceback holds (its causes' too): a failed probe's remote, and
    the circuit breaker it holds, are then freed at once instead of at the next garbage collection, so a remote
    removed meanwhile leaves no breaker behind in ``/readyz`` and ``/metrics``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


#: Stands for "every remote" as the owner of the remote probes in :func:`_start`.
_REMOTES = object()
#: URL -> (when its last probe ended, its answer).
_remote_answers: dict[str, tuple[float, Check]] = {}


def _remote_check(url: str) -> Future[Check | None]:
    """The answer of the remote at ``url``: its last one while younger than :data:`REMOTE_TTL`, else the probe
    running now, else a new probe."""
    now = time.monotonic()
    with _lock:
        for known, (ended, _) in list(_remote_answers.items()):
            if now - ended >= REMOTE_TTL:
                del _remote_answers[known]
        found = _remote_answers.get(url)
    if found is not None:
        done: Future[Check | None] = Future()
        done.set_result(found[1])
        return done

    def probe() -> Check:
        answer = _probe_remote(url)
        with _lock:
            _remote_answers[url] = (time.monotonic(), answer)
        return answer

    return _start(_REMOTES, url, probe)


#: A readiness probe tries once: retries belong to work, and a probe's answer is whether the remote answers now.
ONE_TRY = RetryPolicy(attempts=1)
_lock = threading.Lock()
_last: list[Readiness] = []
#: Checks running now: (id of what they check, component) -> (that object, kept alive meanwhile; its future).
_running: dict[tuple[int, str], tuple[object, Future[Check | None]]] = {}


def _forget() -> None:
    """Forget the last readiness report, the remotes' answers and the running checks (their threads finish
    on their own): :mod:`engram.runtime`'s hook, for tests."""
    with _lock:
        _last.clear()
        _remote_answers.clear()
        _running.clear()


runtime.register("engram.ops.health", reset=_forget)


def _start(owner: object, name: str, work: Callable[[], Check | None]) -> Future[Check | None]:
    """The running check of ``name`` on ``owner``, or a new one on a worker thread."""
    key = (id(owner), name)
    with _lock:
        found = _running.get(key)
        if found is not None and found[0] is owner and not found[1].done():
            return found[1]
        future: Future[Check | None] = Future()
        _running[key] = (owner, future)
    threading.Thread(target=_run, args=(key, future, work), name=f"engram-readiness-{name}", daemon=True).start()
    return future


def _run(key: tuple[int, str], future: Future[Check | None], work: Callable[[], Check | None]) -> None:
    started = time.perf_counter()
    result: Check | None
    try:
        found = work()
        result = None if found is None else {"ok": True, **found}
    except Exception as exc:  # a check reports every failure; it never raises
        result = {"ok": False, "error": str(exc) or type(exc).__name__}
        if isinstance(exc, CheckFailed):
            result.update(exc.details)
    if result is not None:
        result["ms"] = round((time.perf_counter() - started) * 1000, 2)
    with _lock:
        if _running.get(key, (None, None))[1] is future:
            del _running[key]
    future.set_result(result)


__all__ = ["REMOTE_TTL", "TIMEOUT", "Check", "CheckFailed", "Readiness", "last_readiness", "probe_store", "readiness"]
