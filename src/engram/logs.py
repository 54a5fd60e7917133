"""Where engram's own log lines go at the doors: the ``engram`` logger and every ``engram.*`` logger under it.

The library never configures logging (an application decides); each door does, so that what engram logs (the
memory writer's runs at INFO, its skips at DEBUG, failures at WARNING) shows at every door, on stderr, never stdout
(MCP over stdio speaks its protocol there):

- ``engram serve`` and ``engram mcp --transport http`` run uvicorn with :func:`uvicorn_config`: uvicorn's own logging
  configuration plus the ``engram`` logger at the server's ``--log-level``, on uvicorn's stderr handler;
- the other commands (``engram writer``, ``engram mcp`` over stdio) call :func:`log_to_stderr`.

This is a base-layer module: it imports nothing of engram (nor uvicorn: the configuration it extends is given).
"""

from __future__ import annotations

import copy
import logging
import sys
from typing import Any

#: The root of engram's loggers.
LOGGER = "engram"
#: The levels the doors' ``--log-level`` options accept, least verbose first.
LEVELS = ("critical", "error", "warning", "info", "debug")
#: How an engram line looks on stderr (uvicorn's lines keep their own format).
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def level_of(name: str) -> int:
    """The :mod:`logging` level of a ``--log-level`` value (``info`` -> ``logging.INFO``).

    Raises:
        ValueError: not one of :data:`LEVELS`.
    """
    if name.lower() not in LEVELS:
        raise ValueError(f"unknown log level {name!r}: one of {', '.join(LEVELS)}")
    level: int = logging.getLevelName(name.upper())
    return level


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment (a test runner or a door may replace it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        """The current ``sys.stderr``."""
        return sys.stderr


def log_to_stderr(level: str) -> logging.Handler:
    """Send engram's log lines at ``level`` and above to stderr (one handler, replaced by a later call); returns it.

    The ``engram`` logger is never made less verbose than it was, and its lines still reach the root logger's
    handlers (an application's, or a test runner's)."""
    wanted = level_of(level)
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(old)
    handler = _StderrHandler()
    handler.setLevel(wanted)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    logger.setLevel(min(wanted, logger.getEffectiveLevel()))
    return handler


def uvicorn_config(base: dict[str, Any], level: str) -> dict[str, Any]:
    """The logging configuration ``base`` of uvicorn (``uvicorn.config.LOGGING_CONFIG``, a
    :func:`logging.config.dictConfig` dict), unchanged but for the ``engram`` logger: at ``level``, on stderr,
    through a copy of uvicorn's default formatter that also names the logger."""
    config = copy.deepcopy(base)
    formatters = config.setdefault("formatters", {})
    formatter = dict(formatters.get("default", {}))
    formatter["fmt"] = "%(levelprefix)s %(name)s: %(message)s" if "()" in formatter else FORMAT
    formatters[LOGGER] = formatter
    config.setdefault("handlers", {})[LOGGER] = {
        "formatter": LOGGER,
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    config.setdefault("loggers", {})[LOGGER] = {"handlers": [LOGGER], "level": level.upper(), "propagate": True}
    config["disable_existing_loggers"] = False
    return config


__all__ = ["FORMAT", "LEVELS", "LOGGER", "level_of", "log_to_stderr", "uvicorn_config"]
