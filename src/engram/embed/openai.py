"""Embeddings from any server that speaks the OpenAI ``/embeddings`` API (OpenAI, vLLM, Ollama, LiteLLM ...)."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from engram.breakers import CircuitBreaker, CircuitOpenError
from engram.breakers import breaker as shared_breaker
from engram.embed.base import Vectors, check_texts, normalize_rows, require_positive
from engram.errors import ConfigError, EmbedderError
from engram.redaction import redact_url

if TYPE_CHECKING:
    import httpx

#: Statuses worth another try: rate limited, or the server is failing for now.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Longest wait honoured from a ``Retry-After`` header, in seconds.
MAX_RETRY_AFTER = 10.0


class OpenAIEmbedder:
    """Embeds texts with a remote model through ``POST {base_url}/embeddings``.

    Connection errors and 429/5xx answers are retried ``retries`` times, waiting up to ``backoff``, then up
    to twice that, and so on (jittered: between half and all of it; or the server's ``Retry-After``, up to
    10 s). Every failure ends as an :class:`EmbedderError` carrying the server's own message when it sent one.

    Every request goes through a circuit breaker (:mod:`engram.breakers`), shared by every embedder of the
    same host: after 5 failed requests in a row it opens, and embedding fails at once (hybrid searches run
    as keyword search, flagged ``degraded``; new items wait for their vectors) until a probe succeeds.

    Args:
        base_url: the API root, e.g. ``http://localhost:11434/v1``.
        model: the model name the server knows.
        api_key: sent as a bearer token when given.
        timeout: seconds for each request.
        dim: the expected vector length; when None it is learned from the first answer (reading
            :attr:`dim` before that sends a one-text request, and so does ``isinstance(x, Embedder)``
            on Python 3.11, which reads every protocol member).
        batch_size: texts per request.
        client: an ``httpx.Client`` to send with (its transport, proxies, TLS); it is not closed here.
        retries: further tries after a failed one.
        backoff: seconds before the first retry; doubled each time.
        breaker: the circuit breaker to use; None: the process's breaker ``embedder:<host[:port]>``.

    Raises:
        ConfigError: a bad URL, an empty model name or a non-positive number.
        EmbedderError: httpx is not installed.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        dim: int | None = None,
        batch_size: int = 64,
        client: httpx.Client | None = None,
        *,
        retries: int = 2,
        backoff: float = 0.5,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"base_url has a bad port: {base_url!r}") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("model must be a non-empty model name")
        if not timeout > 0 or not backoff >= 0 or isinstance(retries, bool) or retries < 0:
            raise ConfigError("timeout must be positive, backoff and retries non-negative")
        self._dim = require_positive("dim", dim) if dim is not None else None
        self._batch_size = require_positive("batch_size", batch_size)
        try:
            import httpx
        except ImportError as exc:
            raise EmbedderError("the OpenAI embedder needs httpx; install with: pip install httpx") from exc
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)
        host = parts.hostname + (f":{port}" if port else "")
        self._model_id = f"openai:{model}@{host}"
        self.breaker = breaker if breaker is not None else shared_breaker(f"embedder:{host}")
        self._spec = f"openai:{model}@{base_url}"

    @property
    def model_id(self) -> str:
        """``openai:<model>@<host[:port]>``."""
        return self._model_id

    @property
    def spec(self) -> str:
        """``openai:<model>@<base_url>`` (the API key is not part of it)."""
        return self._spec

    @property
    def dim(self) -> int:
        """The vector length, asking the server once if it was not given."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into unit rows of shape ``(len(texts), dim)``, one request per batch."""
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [
            self._embed_batch(items[start : start + self._batch_size])
            for start in range(0, len(items), self._batch_size)
        ]
        matrix: Vectors = np.concatenate(parts)
        return matrix

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a vector of shape ``(dim,)``."""
        vector: Vectors = self.embed([text])[0]
        return vector

    def close(self) -> None:
        """Close the HTTP client, unless it was passed in."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _embed_batch(self, texts: list[str]) -> Vectors:
        body = self._post({"model": self._model, "input": texts})
        matrix = _parse_embeddings(body, len(texts), self._url)
        if self._dim is None:
            self._dim = matrix.shape[1]
        elif matrix.shape[1] != self._dim:
            raise EmbedderError(f"{self._url} returned {matrix.shape[1]}-dimensional vectors, expected {self._dim}")
        return normalize_rows(matrix)

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            try:
                response = self._send(payload)
            except httpx.TimeoutException as exc:
                if isinstance(exc, httpx.ConnectTimeout) and not last:
                    self._sleep(attempt, None)
                    continue
                raise EmbedderError(f"{self._url} did not answer within {self._timeout} s") from exc
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if not last:
                    self._sleep(attempt, None)
                    continue
                raise EmbedderError(f"cannot reach {self._url} after {attempt + 1} tries: {exc}") from exc
            except httpx.HTTPError as exc:
                raise EmbedderError(f"request to {self._url} failed: {exc}") from exc
            if response.status_code in RETRY_STATUSES and not last:
                self._sleep(attempt, response.headers.get("retry-after"))
                continue
            if not response.is_success:
                message = _server_message(response)
                raise EmbedderError(f"{self._url} answered {response.status_code} after {attempt + 1} tries: {message}")
            try:
                return response.json()
            except ValueError as exc:
                raise EmbedderError(f"{self._url} answered with malformed JSON: {response.text[:200]!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, payload: dict[str, Any]) -> httpx.Response:
        """One request through the breaker: a transport failure, 429 or 5xx counts against the endpoint."""
        import httpx

        try:
            probe = self.breaker.acquire()
        except CircuitOpenError as exc:
            raise EmbedderError(f"the embedding endpoint {self._url} is unavailable: {exc}") from exc
        try:
            response = self._client.post(self._url, json=payload, headers=self._headers, timeout=self._timeout)
        except httpx.HTTPError as exc:
            self.breaker.record_failure(f"{type(exc).__name__}: {exc}", probe=probe)
            raise
        except BaseException:
            if probe:
                self.breaker.release_probe()
            raise
        if response.status_code in RETRY_STATUSES:
            self.breaker.record_failure(f"HTTP {response.status_code}", probe=probe)
        else:
            self.breaker.record_success(probe)
        return response

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self._backoff * 2**attempt * random.uniform(0.5, 1.0)  # jitter: clients that failed together
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                delay = min(max(float(retry_after), 0.0), MAX_RETRY_AFTER)
        time.sleep(delay)


def _server_message(response: httpx.Response) -> str:
    """The error message a server put in its body (OpenAI, Ollama and FastAPI shapes), or the raw text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return error if isinstance(error, str) else json.dumps(error)
    return response.text[:500] or response.reason_phrase


def _parse_embeddings(body: Any, count: int, url: str) -> Vectors:
    """The ``data[i].embedding`` lists of an answer, ordered by ``index``, as a float32 matrix."""
    try:
        data = body["data"]
        by_index = {int(entry["index"]): entry["embedding"] for entry in data}
        if sorted(by_index) != list(range(count)) or len(data) != count:
            raise ValueError(f"expected indexes 0..{count - 1}, got {sorted(by_index)}")
        matrix = np.array([by_index[index] for index in range(count)], dtype=np.float32)
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbedderError(f"{redact_url(url)} answered with a malformed embeddings response: {exc}") from exc
    if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
        raise EmbedderError(f"{redact_url(url)} answered with embeddings that are not equal-length finite vectors")
    return matrix
