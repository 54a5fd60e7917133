"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests, benchmarks and dry runs.

It is a real HTTP server (a thread of the standard library's ``ThreadingHTTPServer``): the extractor talks
to it over TCP exactly as to a hosted model. Each request takes the next :class:`Reply` of the script (or
asks a function for one): tool calls, plain content, an HTTP error status, a delay (to provoke timeouts) or
raw bytes (garbage)::

    with ScriptedModelServer([Reply.tools(("no_new_memories", {}))]) as server:
        extractor = OpenAIExtractor(server.url, "scripted")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer. ``tool_calls`` items are (name, arguments): a dict is sent as JSON, a string as is
    (so a test can send malformed JSON)."""

    tool_calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()
    content: str | None = None
    status: int = 200
    delay: float = 0.0
    raw: bytes | None = None

    @classmethod
    def tools(cls, *calls: tuple[str, dict[str, Any] | str], delay: float = 0.0) -> Reply:
        """A reply making these tool calls."""
        return cls(tool_calls=tuple(calls), delay=delay)

    def body(self, index: int) -> bytes:
        """The HTTP body of this reply."""
        if self.raw is not None:
            return self.raw
        if self.status >= 400:
            return json.dumps({"error": {"message": f"scripted HTTP {self.status}"}}).encode()
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{index}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(self.tool_calls)
            ]  # fmt: skip
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if self.tool_calls else "stop"}
        answer = {"id": f"chatcmpl-{index}", "object": "chat.completion", "model": "scripted", "choices": [choice]}
        return json.dumps(answer).encode()


@dataclass
class ScriptedModelServer:
    """Serves ``POST /v1/chat/completions`` from a script; ``requests`` records every request body received."""

    script: Sequence[Reply] | Callable[[dict[str, Any]], Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        """The base URL to give an OpenAI-compatible client (``http://127.0.0.1:<port>/v1``)."""
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, body: dict[str, Any]) -> tuple[Reply, int]:
        with self._lock:
            self.requests.append(body)
            index = len(self.requests) - 1
        if callable(self.script):
            return self.script(body), index
        if index >= len(self.script):
            return Reply(status=500, content="script exhausted"), index
        return self.script[index], index

    def start(self) -> ScriptedModelServer:
        """Start serving on a free port of 127.0.0.1."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                reply, index = owner._next(body)
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.body(index)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a timeout): nothing to answer
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
