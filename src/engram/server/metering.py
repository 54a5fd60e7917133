"""HTTP request metrics: ``engram_http_requests_total`` and ``engram_http_request_duration_seconds``, labelled by
the route's template (bounded: never the path a client sent) and, for the counter, the status."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import observe

#: The route label of a request no route matched (a 404 of an unknown path, a probe of a scanner).
UNMATCHED = "unmatched"


class RequestMetrics:
    """ASGI middleware: counts every HTTP request by method, route template and status, and times it to the end
    of its response body (a stream such as server-sent events is timed until it ends)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]  # what a client sees when the app raises before answering

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            observe.request_done(scope.get("method", ""), route, status[0], time.perf_counter() - started)


__all__ = ["UNMATCHED", "RequestMetrics"]
