"""PostgreSQL's errors in engram's terms, and the breaker that fails fast while the database is down.

Private to :mod:`engram.backends.postgres` (which re-exports :func:`translate_error` and
:func:`translated`): the one place that decides what a driver error means.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.breakers import DEFAULTS, CircuitBreaker, is_registered, register
from engram.errors import ConfigError, EngramError, InvalidInputError, StorageError, UnavailableError


def psycopg_modules() -> Any:
    """The ``psycopg`` and ``psycopg_pool`` modules, or a :class:`ConfigError` saying how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigError("PostgreSQL stores need the postgres extra: pip install 'engram[postgres]'") from None
    return psycopg, psycopg_pool


#: SQLSTATEs (classes by their first two characters) that mean "the database is down, restarting or
#: overloaded: the same request may succeed later": connection exceptions, insufficient resources,
#: operator intervention (shutdown, cannot connect now, statement timeout), serialization failure,
#: deadlock, lock not available.
_UNAVAILABLE = ("08", "53", "57", "40001", "40P01", "55P03")
#: ... and those that mean the connection itself is gone or refused (they open the breaker).
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03", "53300")
#: Data exceptions (class 22: bad encoding, NUL, numbers out of range, bad text) and program limits
#: exceeded (class 54: a value too large to index): input PostgreSQL refuses.
_BAD_INPUT = ("22", "54")
ROLLED_BACK = ("40001", "40P01")


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a driver error ("" for errors raised by the client, such as a refused connection)."""
    return str(getattr(exc, "sqlstate", None) or "")


def said(exc: BaseException) -> str:
    """What PostgreSQL said: its primary message and detail (never the statement or its parameters)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    detail = getattr(diag, "message_detail", None)
    return f"{primary} ({detail})" if detail else str(primary)


def is_driver_error(exc: BaseException) -> bool:
    """True for the errors of psycopg and psycopg_pool (the ones :func:`translate_error` translates)."""
    psycopg, _ = psycopg_modules()
    return isinstance(exc, psycopg.Error)


def translate_error(exc: BaseException, context: str = "PostgreSQL") -> EngramError:
    """The engram error for a driver error: the one place that decides what a PostgreSQL failure means.

    Input PostgreSQL refuses (data exceptions, values over its limits) is an :class:`InvalidInputError`
    (the caller's to fix, HTTP 422); a database that is unreachable, restarting, overloaded, or that
    rolled a transaction back is an :class:`UnavailableError` (retry later, HTTP 503); anything else is
    a :class:`StorageError` (a real backend fault, HTTP 500).
    """
    psycopg, psycopg_pool = psycopg_modules()
    state, text = sqlstate(exc), said(exc)
    if isinstance(exc, psycopg.DataError) or state.startswith(_BAD_INPUT):
        return InvalidInputError(f"{context} refused the input: {text}")
    if isinstance(exc, psycopg_pool.PoolClosed):
        return StorageError(f"{context}: the store is closed ({text})")
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg_pool.TooManyRequests):
        return UnavailableError(f"{context} is unavailable: no connection was free in time ({text})", 1.0)
    if state.startswith(_UNAVAILABLE) or (isinstance(exc, psycopg.OperationalError) and not state):
        return UnavailableError(f"{context} is unavailable: {text}", 1.0)
    return StorageError(f"{context}: {text}")


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` says the connection failed or broke (not that one statement failed)."""
    psycopg, psycopg_pool = psycopg_modules()
    if isinstance(exc, psycopg_pool.PoolClosed | psycopg_pool.TooManyRequests | psycopg_pool.PoolTimeout):
        return False  # a pool timeout is judged by the caller (is anyone holding a connection?)
    state = sqlstate(exc)
    return state.startswith(_CONNECTION_LOST) or (isinstance(exc, psycopg.OperationalError) and not state)


@contextmanager
def translated(context: str = "PostgreSQL") -> Iterator[None]:
    """Translate the driver errors raised inside into engram's errors (see :func:`translate_error`)."""
    try:
        yield
    except EngramError:
        raise
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        raise translate_error(exc, context) from exc


#: Seconds between the connection attempts of an open breaker's watcher, and the connect timeout of each.
WATCH_EVERY = 0.25
WATCH_TIMEOUT = 2


class Breaker(CircuitBreaker):
    """PostgreSQL's circuit breaker: an :class:`engram.breakers.CircuitBreaker` (shown by
    :func:`engram.breakers.snapshot` as ``postgresql:<host>:<port>/<database>``) that opens on the first lost
    connection.

    When a connection breaks, the breaker goes half-open at once: the next caller (the probe) asks for
    a fresh connection while the others fail fast. When the probe (or any caller) cannot get one, the
    breaker opens: every caller fails fast for ``window`` seconds, then it is half-open again. Any
    answer from the database closes it. Given the database's ``url``, an open breaker also watches the database
    (a connection attempt every ``WATCH_EVERY`` seconds, in a thread of its own) and lets the next caller probe as
    soon as the database accepts a connection, before the window ends.
    """

    def __init__(self, window: float | None, name: str = "postgresql", url: str | None = None) -> None:
        window = DEFAULTS["postgresql"].reset_timeout if window is None else window
        super().__init__(name, failure_threshold=1, reset_timeout=window, label="PostgreSQL")
        self._url = url
        self._watching = threading.Lock()
        register(self)

    def admit(self) -> bool:
        """Let a caller through (True: it is the probe), or raise :class:`UnavailableError`."""
        return self.acquire()

    def opened(self, reason: str, *, suspect: bool = False) -> None:
        """The database did not answer: fail fast for the window (``suspect``: a connection broke,
        so let the next caller probe at once)."""
        self.record_failure(reason, retry_in=0.0 if suspect else None)
        if not suspect and self._url is not None and self.is_open and self._watching.acquire(blocking=False):
            threading.Thread(target=self._watch, name=f"engram-watch-{self.name}", daemon=True).start()

    def _watch(self) -> None:
        """While the breaker is open, try a connection of its own every ``WATCH_EVERY`` seconds; once the database
        accepts one, let the next caller probe at once: requests succeed again a fraction of a second after the
        database is back, not at the end of the window."""
        psycopg, _ = psycopg_modules()
        try:
            while self.is_open and is_registered(self):
                started = time.monotonic()
                try:
                    psycopg.connect(self._url, connect_timeout=WATCH_TIMEOUT, autocommit=True).close()
                except Exception:  # still down (or refusing): look again soon
                    time.sleep(max(0.0, WATCH_EVERY - (time.monotonic() - started)))
                    continue
                self.probe_now()
                return
        finally:
            self._watching.release()

    def closed(self, probe: bool) -> None:
        """The database answered (``probe``: this caller was the probe)."""
        self.record_success(probe)

    def released(self) -> None:
        """The probe ended without telling whether the database answered: the next caller probes."""
        self.release_probe()

    @property
    def open(self) -> bool:
        """True while callers fail fast (or one probes)."""
        return self.is_open


def dependency_name(url: str) -> str:
    """``postgresql:<host>:<port>/<database>`` for a connection URL (never its user or password)."""
    psycopg, _ = psycopg_modules()
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql"
    return f"postgresql:{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"
