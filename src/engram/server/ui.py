"""The web UI and the offline API docs: static pages that call the public ``/v1`` API, nothing else.

``/`` serves the UI to a browser (``Accept: text/html``) and the JSON discovery document to every other
client (also at ``/api``); ``/ui/<file>`` serves the UI's assets (package data of :mod:`engram.ui`);
``/docs`` (Swagger UI) takes its assets from the ``fastapi-offline`` package, so no page needs a network (ReDoc is
not served: it loads its logo from a CDN).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from engram.ui import ASSETS

try:  # Swagger UI's files, from the ``server`` extra's ``fastapi-offline`` package
    import fastapi_offline

    _DOCS: Path | None = Path(fastapi_offline.__file__).resolve().parent / "static"
except ImportError:  # pragma: no cover - the server extra installs it; without it /docs says how to get it
    _DOCS = None


#: Files a browser may cache for a while; the UI asks again after an upgrade (the page's URLs carry the version).
_CACHE = "public, max-age=300"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml",
          ".png": "image/png", ".map": "application/json"}  # fmt: skip
#: Content-Security-Policy of the UI's pages: everything from engram itself, nothing from elsewhere.
CSP = "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"


def _files(root: Path) -> dict[str, Path]:
    """Every file under ``root`` by its relative path (a fixed list: no path from a request reaches the disk)."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _file(files: dict[str, Path], name: str) -> Response:
    path = files.get(name)
    if path is None:
        raise HTTPException(404, f"no file {name!r} in the web UI's assets")
    kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Response(path.read_bytes(), media_type=kind, headers={"Cache-Control": _CACHE})


def wants_html(request: Request) -> bool:
    """True for a browser: ``Accept`` names ``text/html`` (API clients send ``*/*`` or ``application/json``)."""
    return "text/html" in request.headers.get("accept", "")


def routes(info: dict[str, Any]) -> APIRouter:
    """The routes serving the UI at ``/`` (``info``, the discovery document, at ``/api`` and to non-browsers at
    ``/``), its assets at ``/ui/``, and Swagger UI at ``/docs`` from local files (none in the OpenAPI)."""
    assets = _files(ASSETS)
    index = (ASSETS / "index.html").read_text(encoding="utf-8")
    docs_dir = _DOCS
    docs_files = {} if docs_dir is None else _files(docs_dir)
    info = {**info, "ui": "/", "api": "/api"}
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    async def root(request: Request) -> Response:
        if wants_html(request):
            return HTMLResponse(index, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})
        return JSONResponse(info)

    async def api(request: Request) -> Response:
        return JSONResponse(info)

    async def ui_file(request: Request) -> Response:
        return _file(assets, request.path_params["name"])

    def need_docs() -> None:
        if docs_dir is None:  # pragma: no cover - the server extra installs fastapi-offline
            raise HTTPException(404, "the API docs need the fastapi-offline package (pip install 'engram[server]')")

    async def docs(request: Request) -> Response:
        need_docs()
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="engram API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # no validator badge fetched from swagger.io
        )

    async def docs_file(request: Request) -> Response:
        return _file(docs_files, request.path_params["name"])

    router.add_route("/api", api, methods=["GET"], include_in_schema=False)
    router.add_route("/ui/{name:path}", ui_file, methods=["GET"], include_in_schema=False)
    router.add_route("/docs", docs, methods=["GET"], include_in_schema=False)
    router.add_route("/docs/assets/{name:path}", docs_file, methods=["GET"], include_in_schema=False)
    return router


__all__ = ["CSP", "routes", "wants_html"]
