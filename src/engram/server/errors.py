"""One JSON error shape for every HTTP error, and the one table from engram's errors to status codes.

Every error the server sends, whatever raised it (engram's errors, authentication, request
validation, an unknown route, a wrong method, a body over the size limit, or a bug), has the shape::

    {"error": {"code": "invalid_filter", "message": "unknown operator '$foo' ...", "details": null}}

``code`` is a stable machine-readable name; ``message`` is for people; ``details`` is structured data
or null (the conflicts of a refused merge, the fields of a failed validation).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import errors
from engram.errors import (
    AmbiguousRefError,
    AuthenticationError,
    ChunkNotFoundError,
    CircuitOpenError,
    ConfigError,
    ConflictError,
    EmbedderError,
    EngramError,
    IntegrityError,
    InvalidFilterError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidRefError,
    InvalidValueError,
    ItemNotFoundError,
    MergeConflictError,
    NotFoundError,
    PermissionDeniedError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    StorageError,
    UnavailableError,
)
from engram.store.serialize import conflict_json

log = logging.getLogger("engram.server")

#: The one table: engram error class -> (HTTP status, error code). The most specific class wins.
STATUS: dict[type[EngramError], tuple[int, str]] = {
    ItemNotFoundError: (404, "item_not_found"),
    RefNotFoundError: (404, "ref_not_found"),
    ChunkNotFoundError: (500, "chunk_missing"),  # a damaged store, not a caller's mistake
    NotFoundError: (404, "not_found"),
    InvalidNamespaceError: (422, "invalid_namespace"),
    InvalidKeyError: (422, "invalid_key"),
    InvalidValueError: (422, "invalid_value"),
    InvalidRefError: (422, "invalid_ref"),
    InvalidFilterError: (422, "invalid_filter"),
    AmbiguousRefError: (422, "ambiguous_ref"),
    InvalidInputError: (422, "invalid_input"),
    MergeConflictError: (409, "merge_conflict"),
    RefExistsError: (409, "ref_exists"),
    ConflictError: (409, "conflict"),
    ReadOnlyError: (409, "read_only"),
    IntegrityError: (500, "integrity_error"),
    AuthenticationError: (401, "unauthorized"),
    PermissionDeniedError: (403, "forbidden"),
    CircuitOpenError: (503, "storage_unavailable"),  # a breaker failing fast (engram.breakers)
    UnavailableError: (503, "storage_unavailable"),
    StorageError: (500, "storage_error"),  # a real backend fault; a dependency that is down is an UnavailableError
    EmbedderError: (503, "embedder_unavailable"),
    ConfigError: (500, "config_error"),
    EngramError: (500, "engram_error"),
}
# channels: each under its base class's status, with its own code
STATUS.update({
    errors.ChannelNotFoundError: (404, "channel_not_found"),
    errors.AgentNotFoundError: (404, "agent_not_found"),
    errors.MessageNotFoundError: (404, "message_not_found"),
    errors.InvalidChannelNameError: (422, "invalid_channel_name"),
    errors.InvalidConfidenceError: (422, "invalid_confidence"),
    errors.ContentTooLargeError: (422, "content_too_large"),
    errors.NotAMemberError: (403, "not_a_member"),
    errors.DirectMessageBlockedError: (403, "dm_blocked"),
    errors.ChannelExistsError: (409, "channel_exists"),
    errors.ChannelArchivedError: (409, "channel_archived"),
})  # fmt: skip
# the memory writer: a model server that failed is a bad gateway, not the caller's mistake
STATUS.update({
    errors.WriterError: (502, "writer_model_error"),
    errors.StaleMemoryError: (409, "stale_memory"),
    errors.RunInFlightError: (409, "run_in_flight"),
})  # fmt: skip

#: Codes of errors that do not come from engram's library (raised by the server or the framework).
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    422: "invalid_request",
    500: "internal_error",
    503: "unavailable",
}


class ErrorDetail(BaseModel):
    """The body of an error: a stable code, a message for people, and optional structured details."""

    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    """Every error response: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail


class ApiError(HTTPException):
    """An error the server raises itself (authentication, scopes, namespace restrictions, limits)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, headers)
        self.code = code
        self.message = message
        self.details = details


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """A response in the one error shape."""
    body = {"error": {"code": code, "message": message, "details": details}}
    return JSONResponse(body, status_code=status, headers=headers)


#: Classes whose instances carry their own code (``missing_scope``, ``invalid_key`` ...): the code is the error's
#: when one of these is its most specific class in :data:`STATUS`; a subclass with an entry keeps the table's code.
OWN_CODE = (PermissionDeniedError, AuthenticationError)


def status_of(exc: EngramError) -> tuple[int, str]:
    """The HTTP status and error code of an engram error (its most specific class in :data:`STATUS`)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            status, code = STATUS[cls]
            return (status, getattr(exc, "code", code)) if cls in OWN_CODE else (status, code)
    return STATUS[EngramError]


#: At most this many conflicts are listed in an error's details (the count is always given).
MAX_CONFLICTS = 50


def _details(exc: EngramError) -> Any:
    if not isinstance(exc, MergeConflictError):
        return None
    shown = [conflict_json(c) for c in exc.conflicts[:MAX_CONFLICTS]]
    return {"conflict_count": len(exc.conflicts), "conflicts": shown}


async def _engram_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EngramError)
    status, code = status_of(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = "Bearer"
    elif isinstance(exc, UnavailableError | EmbedderError):
        headers["Retry-After"] = str(max(1, math.ceil(getattr(exc, "retry_after", None) or 1)))
    if status >= 500 and status != 503:
        log.error("%s %s failed: %s", request.method, request.url.path, code, exc_info=exc)
    elif status == 503:
        log.warning("%s %s: %s: %s", request.method, request.url.path, code, exc)
    return error_response(status, code, str(exc), _details(exc), headers or None)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, ApiError):
        return error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)
    code = HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = dict(exc.headers or {})
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}; see /docs"
    elif exc.status_code == 405:
        allowed = _allowed(request)
        headers["Allow"] = ", ".join(allowed)
        message = f"{request.method} is not allowed on {request.url.path}; use {' or '.join(allowed)}"
    return error_response(exc.status_code, code, message, None, headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route accepts on this path (the router's own 405 names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def _where(loc: Any) -> str:
    return ".".join(str(part) for part in loc) if isinstance(loc, list | tuple) else str(loc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [
        {"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", "")), "type": err.get("type")}
        for err in exc.errors()
    ]
    first = problems[0] if problems else {"loc": [], "msg": "invalid request", "type": None}
    message = f"{_where(first['loc'])}: {first['msg']}" if first["loc"] else str(first["msg"])
    if first["type"] == "json_invalid":
        reason = exc.errors()[0].get("ctx", {}).get("error", "")
        message = f"the body is not valid JSON: {reason} (at character {first['loc'][-1]})"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem(s), see details)"
    return error_response(422, "invalid_request", message, problems)


def install(app: FastAPI, max_body: int) -> None:
    """Render every error of ``app`` in the one shape, and limit request bodies to ``max_body`` bytes."""
    app.add_exception_handler(EngramError, _engram_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(CatchAll)
    app.add_middleware(BodyLimit, max_body=max_body)


class CatchAll:
    """Turns an unexpected exception into a 500 in the error shape (the traceback goes to the log)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            response = error_response(500, "internal_error", "internal server error; the details are in the server log")
            await response(scope, receive, send)


def too_large(limit: int) -> ApiError:
    """The error for a request body over the limit."""
    return ApiError(413, "payload_too_large", f"request body is larger than the limit of {limit} bytes")


class BodyLimit:
    """Refuses request bodies over ``max_body`` bytes with a 413, before anything parses them.

    A declared ``Content-Length`` over the limit is refused at once; a body without one is counted
    as it arrives and refused as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                response = error_response(400, "bad_request", "Content-Length is not a number")
                await response(scope, receive, send)
                return
            if int(declared) > self.max_body:
                error = too_large(self.max_body)
                await error_response(413, error.code, error.message)(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise too_large(self.max_body)
            return message

        await self.app(scope, counted, send)


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise ApiError(422, "invalid_json", f"{name} is not valid JSON; send numbers only")


def parse_json(body: bytes) -> Any:
    """Parse a request body as strict JSON: no NaN or Infinity, and text that is valid Unicode.

    Raises:
        json.JSONDecodeError: the body is not JSON (the framework reports it as a 422).
        ApiError: the body is JSON engram cannot store (a 422 in the error shape).
    """
    data = json.loads(body, parse_constant=_no_constant)
    if _SURROGATE.search(body):  # only an escaped lone surrogate can make text that is not Unicode
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, "invalid_json", "the body has a lone Unicode surrogate (\\ud800-\\udfff)") from None
    return data


class _StrictRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictRoute(APIRoute):
    """Parses JSON bodies strictly (no NaN or Infinity, valid Unicode): engram stores only real JSON."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            response: Response = await handler(_StrictRequest(request.scope, request.receive))
            return response

        return strict
