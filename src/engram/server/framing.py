"""How the server reads HTTP/1.1 requests: ambiguous framing is refused, slow headers are cut off.

Two defences against a client (or a proxy in front) that frames requests badly or on purpose:

- **Content-Length and Transfer-Encoding together** (request smuggling): h11 reads such a body as
  chunked, so bytes a proxy counted as body would be answered as a second request. The
  :class:`RefuseAmbiguousLength` middleware answers ``400 bad_request`` with ``Connection: close``
  instead; the server closes the connection after it, and what followed the first request is
  never read. It is ASGI, so it holds under any server that passes both headers through.
- **Slow request headers** (slowloris): uvicorn's keep-alive timeout only runs between requests, so
  a client that sent half a request line held its connection forever. :func:`uvicorn_options` serves
  with :class:`HeaderDeadlineProtocol`, uvicorn's h11 protocol with a deadline: a connection must
  deliver a whole request line and headers within ``header_timeout`` seconds of opening, and each
  later request within that time of its first byte. A late connection is closed (after a ``408``
  when part of a request had arrived). The deadline is fixed when it starts, so trickling a byte at
  a time does not extend it.

``engram serve`` and the tests' servers run uvicorn with :func:`uvicorn_options`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from engram.server.errors import error_response

#: Seconds a client has to send a request's line and headers (from opening the connection, or from the first
#: byte of a later request on it).
HEADER_TIMEOUT = 10.0
#: Seconds an idle keep-alive connection stays open between requests (uvicorn's default).
KEEP_ALIVE_TIMEOUT = 5


class RefuseAmbiguousLength:
    """ASGI middleware: a request with both ``Content-Length`` and ``Transfer-Encoding`` gets a 400 (and the
    connection is closed), before the app reads any of its body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name.lower() for name, _ in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                response = error_response(
                    400,
                    "bad_request",
                    "a request cannot have both Content-Length and Transfer-Encoding: its length would be "
                    "ambiguous (RFC 9112, section 6.1); send one of them",
                    headers={"connection": "close"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request line and headers arrive too slowly.

    The deadline starts when the connection opens, and again with the first byte of each later request;
    it ends when h11 has read a whole request head. Subclasses set :attr:`header_timeout`.
    """

    #: Seconds allowed for a request's line and headers.
    header_timeout: float = HEADER_TIMEOUT
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the deadline of the first request as the connection opens."""
        super().connection_made(transport)
        self._start_deadline()

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does (which stops its keep-alive timer), then follow the deadline."""
        super().data_received(data)
        self._follow_deadline(started=True)

    def on_response_complete(self) -> None:
        """After a response, a pipelined request already partly buffered is on the clock too."""
        super().on_response_complete()
        self._follow_deadline(started=bool(self.conn.trailing_data[0]))

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline with the connection."""
        self._stop_deadline()
        super().connection_lost(exc)

    def _follow_deadline(self, started: bool) -> None:
        """No deadline once a request head is in; one (kept, not restarted) while a ``started`` request's is not."""
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self._stop_deadline()
        elif started and self._header_deadline is None:
            self._start_deadline()

    def _start_deadline(self) -> None:
        self._stop_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _stop_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0] and self.conn.our_state is h11.IDLE:
            try:
                self.transport.write(
                    self.conn.send(
                        h11.Response(
                            status_code=408,
                            headers=[(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")],
                            reason=b"Request Timeout",
                        )
                    )
                    or b""
                )
                self.transport.write(self.conn.send(h11.Data(data=b"request headers took too long")) or b"")
                self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
            except h11.LocalProtocolError:
                pass  # h11 would not send it now: closing is enough
        self.logger.info("closed a connection whose request headers took over %.3g s", self.header_timeout)
        self.transport.close()


def header_deadline_protocol(header_timeout: float = HEADER_TIMEOUT) -> type[HeaderDeadlineProtocol]:
    """:class:`HeaderDeadlineProtocol` with its deadline set to ``header_timeout`` seconds."""
    if not header_timeout > 0:
        raise ValueError(f"header_timeout is a positive number of seconds, not {header_timeout!r}")
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout": float(header_timeout)})


def uvicorn_options(header_timeout: float = HEADER_TIMEOUT) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.Config`` / ``uvicorn.run`` that engram serves with: the h11 protocol
    with a header deadline (whatever else is installed) and uvicorn's keep-alive timeout."""
    return {"http": header_deadline_protocol(header_timeout), "timeout_keep_alive": KEEP_ALIVE_TIMEOUT}


__all__ = [
    "HEADER_TIMEOUT",
    "KEEP_ALIVE_TIMEOUT",
    "HeaderDeadlineProtocol",
    "RefuseAmbiguousLength",
    "header_deadline_protocol",
    "uvicorn_options",
]
