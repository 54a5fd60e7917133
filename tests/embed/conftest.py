"""Fixtures for the embedder tests: the real MiniLM model, loaded once, and a real local embeddings server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from local_server import EmbeddingsServer

from engram.embed import MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    """The default MiniLM embedder, loaded once for the whole run."""
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    """A real HTTP server on 127.0.0.1 (an ephemeral port), in a thread, for one test."""
    state: list[EmbeddingsServer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            body = json.loads(raw)
            server = state[0]
            server.requests.append(
                {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body}
            )
            reply = server.next_reply(body)
            time.sleep(reply.delay)
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class QuietServer(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that gave up (timeout test) closes the socket under the handler

    httpd = QuietServer(("127.0.0.1", 0), Handler)
    port = httpd.server_address[1]
    state.append(EmbeddingsServer(url=f"http://127.0.0.1:{port}/v1", port=port))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state[0]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
