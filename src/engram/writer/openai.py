"""The OpenAI-compatible tool-calling extractor: any ``/chat/completions`` server (hosted, Ollama, vLLM,
llama.cpp server) over ``httpx``.

Each step is a real multi-step tool loop: the model reads and searches memories, writes (an update names the
version it read: a stale one gets a conflict result and the model reads again, the loop continues), deletes, or
calls ``no_new_memories``. A request has a timeout and bounded retries with exponential backoff (timeouts,
connection errors, 429, 5xx and unreadable answers; jittered); each retry resends the conversation built so far,
whose memory reads are fresh tool results. Malformed tool calls are answered with an error the model can correct;
too many of them, or too many rounds, end the run as a policy violation.

Every request goes through the endpoint's circuit breaker (:mod:`engram.breakers`, ``model:<host[:port]>``): while
it is open a request fails at once, and the memory writer skips its runs with the reason ``model_unavailable``
instead of starting them.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx

from engram.breakers import CircuitBreaker, CircuitOpenError
from engram.breakers import breaker as shared_breaker
from engram.errors import InvalidInputError, ItemNotFoundError, StaleMemoryError, WriterError
from engram.writer.extract import SYSTEM, ExtractRequest, Workspace
from engram.writer.redact import redact, redact_value

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search_memories", "description": "Search the subject's memories by meaning and keywords.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                       "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "read_memory", "description": "Read one memory and its current version.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}},
    {"type": "function", "function": {
        "name": "write_memory",
        "description": "Add a memory (no key) or update one (key + the version you read).",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string"}, "key": {"type": "string"}, "expected_version": {"type": "string"},
            "kind": {"type": "string", "enum": ["fact", "preference", "decision"]}, "subject": {"type": "string"},
            "source_message_ids": {"type": "array", "items": {"type": "string"}}}, "required": ["text"]}}},
    {"type": "function", "function": {
        "name": "delete_memory", "description": "Delete a memory proven wrong, at the version you read.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"},
                                                        "expected_version": {"type": "string"}},
                       "required": ["key", "expected_version"]}}},
    {"type": "function", "function": {
        "name": "no_new_memories", "description": "Nothing in the new turns is worth remembering.",
        "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}}}},
]  # fmt: skip
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Characters of an error or unreadable reply's body kept in the trace (redacted).
BODY_CHARS = 2000


def reply_body(response: httpx.Response) -> str:
    """A reply's body as a trace keeps it: at most :data:`BODY_CHARS` characters, redacted."""
    text = response.text
    cut = len(text) - BODY_CHARS
    return redact(text[:BODY_CHARS]) + (f"... [{cut} chars cut]" if cut > 0 else "")


class OpenAIExtractor:
    """Extraction by a tool-calling model behind an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:11434/v1`` (Ollama) or ``https://api.openai.com/v1``.
        model: the model name sent with each request (and recorded in each run's commit).
        api_key: sent as a bearer token when given (never logged or traced).
        timeout: seconds per request.
        retries: extra attempts per request after a retryable failure.
        backoff: seconds before the first retry, doubled at each one.
        max_rounds: model requests per step (each answer's tool calls run before the next).
        max_invalid: malformed tool calls tolerated per step before the run fails as a policy violation.
        temperature: sent with each request.
        transport: an httpx transport (tests and custom networking); None uses the default.
        breaker: the circuit breaker to use; None: the process's breaker ``model:<host[:port]>``.
    """

    #: The system prompt every request starts with (a run's trace records it).
    system: str = SYSTEM

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_rounds: int = 8,
        max_invalid: int = 3,
        temperature: float = 0.0,
        transport: httpx.BaseTransport | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if timeout <= 0 or retries < 0 or backoff < 0 or max_rounds < 1:
            raise InvalidInputError("timeout must be > 0, retries and backoff >= 0, max_rounds >= 1")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_rounds = max_rounds
        self.max_invalid = max_invalid
        self.temperature = temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self.breaker = (
            breaker if breaker is not None else shared_breaker(f"model:{httpx.URL(self.base_url).netloc.decode()}")
        )

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def _complete(self, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat completion, with retries; returns the assistant message."""
        body = {"model": self.model, "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                "temperature": self.temperature}  # fmt: skip
        last = "no attempt"
        timed_out = False
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                time.sleep(self.backoff * 2 ** (attempt - 2) * random.uniform(0.5, 1.0))
            try:
                probe = self.breaker.acquire()
            except CircuitOpenError as exc:
                calls.append({"attempt": attempt, "status": None, "response": None, "error": str(exc)})
                raise WriterError(f"the model endpoint is unavailable: {exc}", "model_error") from exc
            started = time.perf_counter()
            entry: dict[str, Any] = {"attempt": attempt, "status": None, "response": None, "error": None}
            calls.append(entry)
            answered = False
            response: httpx.Response | None = None
            try:
                response = self._client.post(f"{self.base_url}/chat/completions", json=body)
                entry["status"] = response.status_code
                if response.status_code in _RETRY_STATUS:
                    entry["body"] = reply_body(response)
                    last = entry["error"] = f"HTTP {response.status_code}"
                    continue
                answered = True
                if response.status_code >= 400:
                    entry["body"] = reply_body(response)
                    entry["error"] = f"HTTP {response.status_code}: {redact(response.text[:500])}"
                    raise WriterError(f"the model server refused the request: {entry['error']}", "model_error")
                message = response.json()["choices"][0]["message"]
                if not isinstance(message, dict):
                    raise TypeError("message is not an object")
                entry["response"] = redact_value(message)
                return message
            except httpx.TimeoutException as exc:
                timed_out = True
                last = entry["error"] = f"timeout after {self.timeout}s ({type(exc).__name__})"
            except httpx.HTTPError as exc:
                last = entry["error"] = f"{type(exc).__name__}: {exc}"
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                last = entry["error"] = f"unreadable answer ({type(exc).__name__}: {exc})"
                if response is not None:
                    entry["body"] = reply_body(response)
            finally:
                entry["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
                if answered:
                    self.breaker.record_success(probe)
                elif entry["error"] is not None:  # no answer, a retryable status, or one we could not read
                    self.breaker.record_failure(str(entry["error"]), probe=probe)
                elif probe:
                    self.breaker.release_probe()
        outcome = "timeout" if timed_out and last.startswith("timeout") else "model_error"
        raise WriterError(f"the model failed after {self.retries + 1} attempts: {last}", outcome)

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        """Run the tool loop for one step (see the module docstring)."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": request.prompt},
        ]
        calls = workspace.step.model_calls if workspace.step is not None else []
        invalid = 0
        acted = False
        for _ in range(self.max_rounds):
            message = self._complete(messages, calls)
            tool_calls = message.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                tool_calls = []
            reply: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
            if tool_calls:
                reply["tool_calls"] = tool_calls
            messages.append(reply)
            if not tool_calls:
                if acted:  # a closing remark after its tool calls: the step is done
                    return
                said = len(str(message.get("content") or ""))
                raise WriterError(f"the model replied without a tool call ({said} characters of text, kept in the "
                                  "run's trace); its turns stay pending", "no_tool_call")  # fmt: skip
            acted = True
            done = False
            for call in tool_calls:
                result, ok, finished = self._call(call, workspace)
                invalid += 0 if ok else 1
                done = done or finished
                call_id = call.get("id") if isinstance(call, dict) else None
                messages.append({"role": "tool", "tool_call_id": str(call_id or "call"), "content": json.dumps(result)})
            if invalid > self.max_invalid:
                raise WriterError(f"the model made {invalid} malformed tool calls in one step", "policy_violation")
            if done:
                return
        raise WriterError(f"the tool loop did not finish within {self.max_rounds} rounds", "policy_violation")

    def _call(self, call: Any, workspace: Workspace) -> tuple[dict[str, Any], bool, bool]:
        """Run one tool call; returns (result for the model, well-formed?, finished?)."""
        try:
            function = call["function"]
            name = function["name"]
            raw = function.get("arguments") or "{}"
            args = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(args, dict):
                raise TypeError("arguments must be a JSON object")
        except (KeyError, TypeError, ValueError) as exc:
            return (
                {"error": f"malformed tool call ({type(exc).__name__}: {exc}); send valid JSON arguments"},
                False,
                False,
            )
        try:
            if name == "search_memories":
                found = workspace.search(str(args["query"]), int(args.get("limit", 5)))
                return {"memories": [n.dict() for n in found]}, True, False
            if name == "read_memory":
                note = workspace.read(str(args["key"]))
                return ({"error": "not found"} if note is None else note.dict()), True, False
            if name == "write_memory":
                note = workspace.write(
                    str(args["text"]), key=args.get("key") or None, expected_version=args.get("expected_version"),
                    sources=[str(s) for s in args.get("source_message_ids") or []],
                    kind=str(args.get("kind") or "fact"), subject=args.get("subject"),
                )  # fmt: skip
                return {"written": note.dict()}, True, False
            if name == "delete_memory":
                workspace.delete(str(args["key"]), args.get("expected_version"))
                return {"deleted": str(args["key"])}, True, False
            if name == "no_new_memories":
                workspace.no_new_memories(str(args.get("reason") or ""))
                return {"ok": True}, True, True
            return {"error": f"unknown tool {name!r}"}, False, False
        except StaleMemoryError as exc:
            return {"error": "conflict", "detail": str(exc), "current_version": exc.current_version,
                    "hint": "read_memory again and retry with its version"}, True, False  # fmt: skip
        except ItemNotFoundError as exc:
            return {"error": "not found", "detail": str(exc)}, True, False
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": f"invalid arguments for {name} ({type(exc).__name__}: {exc})"}, False, False
