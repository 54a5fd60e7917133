"""The writer's one configuration, as every door takes it: extractors named by a short spec, and
:class:`WriterConfig` (what ``engram serve``, ``engram writer`` and ``engram mcp`` build their writer from)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engram.errors import ConfigError, InvalidInputError
from engram.store import Memory
from engram.writer.extract import Extractor
from engram.writer.metrics import WriterMetrics
from engram.writer.offline import OfflineExtractor
from engram.writer.openai import OpenAIExtractor
from engram.writer.settings import WriterSettings
from engram.writer.writer import MemoryWriter


def extractor_from_spec(
    spec: str | None, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 2
) -> Extractor | None:
    """``offline`` (no model server), ``openai:<model>@<base url>`` (any OpenAI-compatible server, called with
    ``api_key``, which the door reads: ``OPENAI_API_KEY``; each call waits ``timeout`` seconds and is tried
    ``retries`` more times), or None / ``none`` (no extractor: every run is gated with ``no_model``)."""
    if spec is None or spec == "none":
        return None
    if spec == "offline":
        return OfflineExtractor()
    model, sep, base = spec.removeprefix("openai:").partition("@")
    if not spec.startswith("openai:") or not sep or not model or not base:
        raise ConfigError(f"unknown extractor {spec!r}: use offline, openai:<model>@<base url> or none")
    return OpenAIExtractor(base, model, api_key=api_key, timeout=timeout, retries=retries)


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """The writer settings a door takes (the same at every door; ``status`` shows what runs used).

    Attributes:
        extractor: ``offline``, ``openai:<model>@<url>`` or None (runs gated).
        interval / policy / instructions / max_failures / max_model_calls / max_input_chars: as
            :class:`~engram.writer.WriterSettings`.
        timeout / retries: of each model call (an ``openai:`` extractor).
        trace_dir: where traces go (None: the writer's default).
        background: run in the writer's background worker (the doors' default) or inside the call.
        redact_turns: store turns with secrets redacted (default: as sent; what leaves a turn is redacted anyway).

    A value out of range is refused when the config is built (:class:`InvalidInputError`, naming the range)."""

    extractor: str | None = "offline"
    interval: int = 2
    policy: str = "auto"
    timeout: float = 30.0
    retries: int = 2
    instructions: str | None = None
    trace_dir: Path | None = None
    background: bool = True
    max_failures: int = 3
    max_model_calls: int = 40
    max_input_chars: int = 100_000
    redact_turns: bool = False

    def __post_init__(self) -> None:
        if not self.timeout > 0 or self.retries < 0:
            raise InvalidInputError(
                f"invalid writer timeout {self.timeout!r} / retries {self.retries!r}: a timeout above 0 seconds "
                "and 0 or more retries"
            )
        if self.extractor not in (None, "none", "offline") and not str(self.extractor).startswith("openai:"):
            raise ConfigError(f"unknown extractor {self.extractor!r}: use offline, openai:<model>@<base url> or none")
        self.settings()  # refuses what WriterSettings refuses, now rather than at the first run

    def settings(self) -> WriterSettings:
        """These values as :class:`~engram.writer.WriterSettings`."""
        return WriterSettings(
            interval=self.interval, policy=self.policy, instructions=self.instructions,  # type: ignore[arg-type]
            trace_dir=self.trace_dir, background=self.background, max_failures=self.max_failures,
            max_model_calls=self.max_model_calls, max_input_chars=self.max_input_chars,
            redact_turns=self.redact_turns,
        )  # fmt: skip

    def build(
        self, memory: Memory, *, api_key: str | None = None, metrics: WriterMetrics | None = None
    ) -> MemoryWriter:
        """A writer on ``memory`` with these settings (``api_key`` for an ``openai:`` extractor)."""
        extractor = extractor_from_spec(self.extractor, api_key, timeout=self.timeout, retries=self.retries)
        return MemoryWriter(memory, extractor=extractor, settings=self.settings(), metrics=metrics)
