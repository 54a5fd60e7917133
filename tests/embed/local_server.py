"""The scripted state of the local OpenAI-compatible embeddings server that the ``embeddings_server`` fixture runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def server_vector(text: str) -> list[float]:
    """The (unnormalised) vector the fake server returns for ``text``: distinct for distinct test texts."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0, 0.5]


@dataclass
class Reply:
    """A scripted answer: an HTTP status and a body (JSON-encoded unless it is bytes), after a delay."""

    status: int
    body: Any
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class EmbeddingsServer:
    """A local OpenAI-compatible ``/v1/embeddings`` server: plays ``script`` first, then embeds for real."""

    url: str
    port: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    script: list[Reply] = field(default_factory=list)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        if self.script:
            return self.script.pop(0)
        data = [{"object": "embedding", "index": i, "embedding": server_vector(t)} for i, t in enumerate(body["input"])]
        data.reverse()  # answer out of order: the client must sort by "index"
        return Reply(200, {"object": "list", "data": data, "model": body["model"]})
