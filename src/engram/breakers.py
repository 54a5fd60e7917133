"""Circuit breakers and bounded, jittered retries around every remote dependency.

engram talks to five kinds of remote dependency: PostgreSQL, Redis, S3, an embedding endpoint and a model
endpoint. Each one is guarded by a :class:`CircuitBreaker` named ``<kind>:<where>`` (``postgresql:db-host/engram``,
``redis:127.0.0.1:6379/0``, ``embedder:api.openai.com``, ``model:127.0.0.1:11434``, ``s3:http://minio:9000/bucket``):

- **closed**: calls go through; consecutive failures are counted.
- **open**: after ``failure_threshold`` consecutive failures, calls fail at once with :class:`CircuitOpenError`
  (an :class:`~engram.errors.UnavailableError`: HTTP 503 with ``Retry-After``) for ``reset_timeout`` seconds,
  instead of each waiting for a timeout.
- **half-open**: then one caller (the probe) is let through; its success closes the breaker, its failure
  opens it again for another ``reset_timeout``. Everyone else keeps failing fast meanwhile.

Every breaker of a process is in one registry: :func:`snapshot` returns their states for ``/readyz``,
``engram doctor`` and the metrics (``engram_breaker_state``), and :func:`add_listener` reports each transition.
:func:`retry_call` runs a call with bounded retries and full-jitter exponential backoff (tenacity) through a
breaker: a transient failure is retried, a rejection by an open breaker never is.

Settings are per kind (:data:`DEFAULTS`, changed with :func:`configure` or per breaker), never read from the
environment here: only the interfaces (CLI, server) do that.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import tenacity

from engram import runtime
from engram.errors import CircuitOpenError, ConfigError, InvalidInputError

__all__ = [
    "DEFAULTS",
    "BreakerSettings",
    "CircuitBreaker",
    "CircuitOpenError",
    "RetryPolicy",
    "add_listener",
    "breaker",
    "configure",
    "forget",
    "is_registered",
    "register",
    "remove_listener",
    "retry_call",
    "s3_transient",
    "snapshot",
    "states",
    "track",
    "unregister",
    "untrack",
]

log = logging.getLogger("engram.breakers")

T = TypeVar("T")
State = Literal["closed", "open", "half_open"]
#: Called on every transition with (breaker name, old state, new state).
Listener = Callable[[str, str, str], None]


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """How a breaker trips and recovers.

    Attributes:
        failure_threshold: consecutive failures that open the breaker (1: the first one).
        reset_timeout: seconds the breaker stays open before it lets one probe through.
    """

    failure_threshold: int = 5
    reset_timeout: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.failure_threshold, bool) or self.failure_threshold < 1:
            raise ConfigError(f"failure_threshold must be at least 1, not {self.failure_threshold!r}")
        if not self.reset_timeout >= 0:
            raise ConfigError(f"reset_timeout must be >= 0 seconds, not {self.reset_timeout!r}")


#: Settings of the breakers of each kind of dependency (the part of a breaker's name before the first ``:``).
#: PostgreSQL and Redis open on the first lost connection (a pool or a cache has nothing better to try);
#: endpoints and S3 tolerate a few failed attempts, since one says less about the whole service. Stores
#: (PostgreSQL, S3) probe again after 2 s, so a restarted server is used again at once; a model endpoint
#: that failed is left alone longer (each failure costs a request timeout).
DEFAULTS: dict[str, BreakerSettings] = {
    "postgresql": BreakerSettings(failure_threshold=1, reset_timeout=2.0),
    "redis": BreakerSettings(failure_threshold=1, reset_timeout=5.0),
    "embedder": BreakerSettings(failure_threshold=5, reset_timeout=30.0),
    "model": BreakerSettings(failure_threshold=5, reset_timeout=60.0),
    "s3": BreakerSettings(failure_threshold=5, reset_timeout=2.0),
}


class CircuitBreaker:
    """A thread-safe closed / open / half-open circuit breaker with an injectable clock.

    Use :meth:`call` for one guarded call, or :meth:`acquire` then :meth:`record_success` /
    :meth:`record_failure` (and :meth:`release_probe` when a probe ends without a verdict) when the call
    cannot be wrapped in a function.

    Args:
        name: ``<kind>:<where>``; shown in ``/readyz``, logs and metrics.
        failure_threshold: consecutive failures that open the breaker.
        reset_timeout: seconds it stays open before one probe is let through.
        clock: monotonic seconds (tests pass a fake one).
        wall: wall-clock seconds, for ``opened_at``.
        label: how errors and logs name the dependency (default: ``name``).

    Examples:
        >>> b = CircuitBreaker("embedder:example", failure_threshold=1, reset_timeout=30)
        >>> b.record_failure("connection refused")
        >>> b.state
        'open'
    """

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 5,
        reset_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        label: str | None = None,
    ) -> None:
        self.name = name
        self.label = label or name
        self.settings = BreakerSettings(failure_threshold, reset_timeout)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._failures = 0  # consecutive failures
        self._until: float | None = None  # None: closed; else open until this clock time
        self._probing = False
        self._reason: str | None = None
        self._opened_at: float | None = None  # wall time the current outage began
        self._trips = 0

    def _state(self, now: float) -> State:
        if self._until is None:
            return "closed"
        return "half_open" if self._probing or now >= self._until else "open"

    @property
    def state(self) -> State:
        """``closed``, ``open`` (callers fail fast) or ``half_open`` (a probe may run, or runs)."""
        with self._lock:
            return self._state(self._clock())

    @property
    def is_open(self) -> bool:
        """True unless closed: callers fail fast, or only a probe gets through."""
        return self._until is not None

    def snapshot(self) -> dict[str, Any]:
        """``{"state", "failures", "opened_at", "retry_in", "reason", "trips"}``: what ``/readyz`` and metrics show.

        ``opened_at`` is when the current outage began (UNIX seconds, None while closed), ``retry_in`` the
        seconds until a probe is let through (0 while closed or half-open), ``trips`` how often it opened.
        """
        with self._lock:
            now = self._clock()
            return {
                "state": self._state(now),
                "failures": self._failures,
                "opened_at": self._opened_at,
                "retry_in": 0.0 if self._until is None else round(max(self._until - now, 0.0), 3),
                "reason": self._reason,
                "trips": self._trips,
            }

    def acquire(self) -> bool:
        """Let a caller through, or raise :class:`CircuitOpenError`; True when the caller is the half-open probe."""
        notify = False
        with self._lock:
            if self._until is None:
                return False
            now = self._clock()
            if now < self._until or self._probing:
                wait = max(self._until - now, 0.0)
                raise CircuitOpenError(
                    f"{self.label} is unavailable ({self._reason}); trying it again in {wait:.1f} s",
                    self.name,
                    max(wait, 1.0),
                )
            self._probing = notify = True
        if notify:
            _notify(self.name, "open", "half_open")
        return True

    def try_acquire(self) -> bool:
        """:meth:`acquire` without raising: False when the caller must skip the dependency."""
        try:
            self.acquire()
        except CircuitOpenError:
            return False
        return True

    def record_success(self, probe: bool = False) -> None:
        """The dependency answered: reset the failure count, and close the breaker unless another caller is
        probing (a late success of a call made before the outage says little about now)."""
        with self._lock:
            self._failures = 0
            if self._until is None or not (probe or not self._probing):
                return
            old = self._state(self._clock())
            outage = self._wall() - (self._opened_at or self._wall())
            self._until, self._probing, self._reason, self._opened_at = None, False, None, None
        log.info("%s answered again after %.1f s: breaker %s closed", self.label, outage, self.name)
        _notify(self.name, old, "closed")

    def record_failure(self, reason: str, *, probe: bool = False, retry_in: float | None = None) -> None:
        """The dependency failed (down, timing out, overloaded).

        Opens the breaker at the threshold (or again, when the probe failed) for ``reset_timeout`` seconds,
        or ``retry_in`` when given: ``retry_in=0`` means "a connection broke, let the next caller probe at once".
        """
        with self._lock:
            self._failures += 1
            now = self._clock()
            old = self._state(now)
            if self._until is None and self._failures < self.settings.failure_threshold:
                return
            if retry_in == 0 and self._until is not None and not self._probing and not probe:
                return  # already open: a stale connection breaking says nothing new
            if self._until is None:
                self._reason = reason  # the first failure says most: a probe that fails often just times out
                self._opened_at = self._wall()
                self._trips += 1
            self._until = now + (self.settings.reset_timeout if retry_in is None else retry_in)
            self._probing = False
            new = self._state(now)
        if old == "closed":
            log.warning(
                "%s is unavailable (%s): breaker %s open, failing fast for %g s",
                self.label,
                reason,
                self.name,
                self.settings.reset_timeout if retry_in is None else retry_in,
            )
        if old != new or old == "half_open":
            _notify(self.name, old, new)

    def probe_now(self) -> None:
        """The dependency seems back (something saw it answer): let the next caller probe at once instead of at
        the end of the window."""
        with self._lock:
            if self._until is not None and not self._probing:
                self._until = min(self._until, self._clock())

    def release_probe(self) -> None:
        """The probe ended without saying whether the dependency answered: the next caller probes."""
        with self._lock:
            self._probing = False

    def call(self, fn: Callable[[], T], *, failure: Callable[[BaseException], bool] = lambda exc: True) -> T:
        """Run ``fn()`` through the breaker. An exception for which ``failure(exc)`` is true counts as a failure
        of the dependency; any other (e.g. a 4xx answer: the dependency did answer) counts as a success."""
        probe = self.acquire()
        try:
            result = fn()
        except Exception as exc:
            if failure(exc):
                self.record_failure(f"{type(exc).__name__}: {exc}"[:300], probe=probe)
            else:
                self.record_success(probe)
            raise
        except BaseException:
            if probe:
                self.release_probe()
            raise
        self.record_success(probe)
        return result

    def reset(self) -> None:
        """Close the breaker and forget its failures (an operator's override, and tests)."""
        with self._lock:
            old = self._state(self._clock())
            self._until, self._probing, self._reason, self._opened_at, self._failures = None, False, None, None, 0
        if old != "closed":
            _notify(self.name, old, "closed")


#: Every live breaker by its unique name: a breaker lives while a client holds it, then drops out, so a
#: dependency nothing uses any more never shows in :func:`snapshot`.
_REGISTRY: weakref.WeakValueDictionary[str, CircuitBreaker] = weakref.WeakValueDictionary()
_LISTENERS: list[Listener] = []
_LOCK = threading.Lock()


def _kind(name: str) -> str:
    return name.partition(":")[0]


def _register(found: CircuitBreaker) -> CircuitBreaker:
    if _REGISTRY.get(found.name, found) is not found:
        base, n = found.name, 2
        while f"{base}#{n}" in _REGISTRY:
            n += 1
        found.name = f"{base}#{n}"
    _REGISTRY[found.name] = found
    return found


def register(found: CircuitBreaker) -> CircuitBreaker:
    """Show a breaker a client made itself in :func:`snapshot` while the client holds it (a name taken by another
    live breaker gets a ``#2``, ``#3`` ... suffix). Returns the breaker."""
    with _LOCK:
        return _register(found)


def is_registered(found: CircuitBreaker) -> bool:
    """Whether ``found`` is shown by :func:`snapshot` (its client has not closed it)."""
    with _LOCK:
        return _REGISTRY.get(found.name) is found


def unregister(found: CircuitBreaker) -> None:
    """Stop showing a breaker (its client closed); another breaker of the same name stays."""
    with _LOCK:
        if _REGISTRY.get(found.name) is found:
            del _REGISTRY[found.name]


def breaker(name: str, **overrides: Any) -> CircuitBreaker:
    """The process's breaker for the dependency ``name`` (``<kind>:<where>``), created on first use with the
    settings of its kind (:data:`DEFAULTS`) and ``overrides`` (``failure_threshold``, ``reset_timeout``).
    Every client of one dependency shares its breaker while any of them holds it, so one outage trips it once
    for all of them."""
    with _LOCK:
        found = _REGISTRY.get(name)
        if found is None:
            settings = replace(DEFAULTS.get(_kind(name), BreakerSettings()), **overrides)
            found = _register(
                CircuitBreaker(name, failure_threshold=settings.failure_threshold, reset_timeout=settings.reset_timeout)
            )
        elif overrides:
            found.settings = replace(found.settings, **overrides)
        return found


def configure(kind: str, *, failure_threshold: int | None = None, reset_timeout: float | None = None) -> None:
    """Change the settings of a kind of dependency (``postgresql``, ``redis``, ``embedder``, ``model``, ``s3``):
    for breakers created from now on, and for the existing ones of that kind."""
    if kind not in DEFAULTS:
        raise ConfigError(f"unknown dependency kind {kind!r}: one of {', '.join(sorted(DEFAULTS))}")
    changes: dict[str, Any] = {
        key: value
        for key, value in (("failure_threshold", failure_threshold), ("reset_timeout", reset_timeout))
        if value is not None
    }
    with _LOCK:
        DEFAULTS[kind] = replace(DEFAULTS[kind], **changes)
        for name, found in list(_REGISTRY.items()):
            if _kind(name) == kind:
                found.settings = replace(found.settings, **changes)


def snapshot() -> dict[str, dict[str, Any]]:
    """Every breaker of this process by name: ``{"state", "failures", "opened_at", "retry_in", "reason", "trips"}``
    (see :meth:`CircuitBreaker.snapshot`). ``/readyz``, ``engram doctor`` and the metrics read this."""
    with _LOCK:
        found = sorted(_REGISTRY.items())  # strong references: none vanishes while we read it
    return {name: each.snapshot() for name, each in found}


def forget(name: str | None = None) -> None:
    """Drop one breaker (or all) from the registry: its clients keep it, :func:`snapshot` no longer shows it."""
    with _LOCK:
        if name is None:
            _REGISTRY.clear()
        else:
            _REGISTRY.pop(name, None)


def add_listener(listener: Listener) -> None:
    """Call ``listener(name, old_state, new_state)`` on every transition of every breaker (metrics, alerts).
    A listener that raises is logged and otherwise ignored."""
    with _LOCK:
        if listener not in _LISTENERS:
            _LISTENERS.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling a listener added by :func:`add_listener`."""
    with _LOCK:
        if listener in _LISTENERS:
            _LISTENERS.remove(listener)


def _notify(name: str, old: str, new: str) -> None:
    with _LOCK:
        listeners = list(_LISTENERS)
    for listener in listeners:
        try:
            listener(name, old, new)
        except Exception:  # a broken listener must never break the call it observes
            log.exception("breaker listener %r failed", listener)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries with full-jitter exponential backoff.

    Attempt ``n`` (from 1) waits a random time in ``[0, min(maximum, initial * 2**(n-1))]`` before the next,
    or the dependency's ``retry_after`` when it gave one (capped at ``maximum``).

    Attributes:
        attempts: tries in all (1: no retry).
        initial: the backoff ceiling after the first failure, in seconds.
        maximum: the largest wait, in seconds.
    """

    attempts: int = 3
    initial: float = 0.2
    maximum: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or self.attempts < 1:
            raise ConfigError(f"attempts must be at least 1, not {self.attempts!r}")
        if not (self.initial >= 0 and self.maximum >= 0):
            raise ConfigError("initial and maximum backoff must be >= 0 seconds")

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (from 1)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.maximum)
        return random.uniform(0.0, min(self.maximum, self.initial * 2 ** (attempt - 1)))


def retry_call(
    fn: Callable[[], T],
    *,
    transient: Callable[[BaseException], bool],
    policy: RetryPolicy | None = None,
    breaker: CircuitBreaker | None = None,
    sleep: Callable[[float], None] = time.sleep,
    what: str = "call",
) -> T:
    """Run ``fn()`` with bounded, jittered retries of the failures ``transient(exc)`` accepts, through ``breaker``.

    Every attempt is one call of the breaker (a transient failure counts against it; any other exception
    means the dependency answered). A :class:`CircuitOpenError` is never retried: the breaker already knows.
    The last failure is re-raised as it was. ``policy`` defaults to ``RetryPolicy()`` (3 attempts).
    """
    policy = policy or RetryPolicy()

    def attempt() -> T:
        if breaker is None:
            return fn()
        return breaker.call(fn, failure=transient)

    def retryable(exc: BaseException) -> bool:
        return not isinstance(exc, CircuitOpenError) and transient(exc)

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hint = getattr(exc, "retry_after", None)
        return policy.wait(state.attempt_number, hint if isinstance(hint, int | float) else None)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.info("%s failed (attempt %d of %d): %s; retrying", what, state.attempt_number, policy.attempts, exc)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(policy.attempts),
        wait=wait,
        retry=tenacity.retry_if_exception(retryable),
        reraise=True,
        sleep=sleep,
        before_sleep=before_sleep,
    )
    return retrying(attempt)


#: S3 error codes that mean "slow down" or "failing for now": worth another try.
S3_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "PriorRequestNotComplete",
        "BandwidthLimitExceeded",
    }
)


def s3_transient(exc: BaseException) -> bool:
    """True for an S3 failure worth retrying: a 5xx or throttling answer, or a connection that failed, reset or
    timed out (botocore's errors, recognised without importing botocore)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:  # botocore ClientError: the server answered
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return status >= 500 or status == 429 or code in S3_TRANSIENT_CODES
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names
        & {
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "ConnectionError",  # botocore.exceptions.ConnectionError and the builtin (resets, refusals)
            "ResponseStreamingError",
            "IncompleteReadError",
        }
    )


#: Breakers kept elsewhere (another library's, a sidecar's), each read through a function returning its state.
_TRACKED: dict[str, Callable[[], str]] = {}
#: Breaker states, in the order of ``engram_breaker_state``'s ``state`` label.
STATES = ("closed", "half_open", "open")


def track(name: str, state: Callable[[], str]) -> None:
    """Report a breaker kept outside this module: ``state()`` returns ``closed``, ``half_open`` (or ``half-open``)
    or ``open``, read by readiness and at each metrics scrape. Tracking a name again replaces it."""
    if not name:
        raise InvalidInputError("a breaker needs a name")
    with _LOCK:
        _TRACKED[name] = state


def untrack(name: str) -> None:
    """Stop reporting the breaker ``name`` (nothing happens if it is not tracked)."""
    with _LOCK:
        _TRACKED.pop(name, None)


def states() -> dict[str, str]:
    """Breaker name -> state (``closed``, ``half_open``, ``open``; ``unknown`` when it cannot be read): the tracked
    breakers and this process's :class:`CircuitBreaker` s, by name."""
    with _LOCK:
        tracked = dict(_TRACKED)
    found = {name: _normal(_read(state)) for name, state in tracked.items()}
    for name, each in snapshot().items():
        found.setdefault(name, _normal(each.get("state", "unknown")))
    return dict(sorted(found.items()))


def _read(state: Callable[[], str]) -> str:
    try:
        return state()
    except Exception:  # a breaker that cannot say its state is reported, never raised from a check or a scrape
        return "unknown"


def _normal(state: Any) -> str:
    text = str(getattr(state, "value", state)).lower().replace("-", "_")
    return text if text in STATES else "unknown"


#: The settings of each kind as shipped, which :func:`reset` restores.
_SHIPPED = dict(DEFAULTS)


def _reset() -> None:
    """Forget every breaker, listener and tracked breaker and restore the shipped settings (:mod:`engram.runtime`'s
    hook, for tests): clients keep the breakers they hold."""
    with _LOCK:
        _REGISTRY.clear()
        _LISTENERS.clear()
        _TRACKED.clear()
        DEFAULTS.clear()
        DEFAULTS.update(_SHIPPED)


runtime.register("engram.breakers", reset=_reset)
