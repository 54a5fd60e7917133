"""Extractors named by a short spec, as a command line or a server config gives them."""

from __future__ import annotations

from engram.errors import ConfigError
from engram.writer.extract import Extractor
from engram.writer.offline import OfflineExtractor
from engram.writer.openai import OpenAIExtractor


def extractor_from_spec(spec: str | None, api_key: str | None = None) -> Extractor | None:
    """``offline`` (no model server), ``openai:<model>@<base url>`` (any OpenAI-compatible server, called with
    ``api_key``, which the door reads: ``OPENAI_API_KEY``), or None (no extractor: every run is gated with
    ``no_model``)."""
    if spec is None:
        return None
    if spec == "offline":
        return OfflineExtractor()
    model, sep, base = spec.removeprefix("openai:").partition("@")
    if not spec.startswith("openai:") or not sep or not model or not base:
        raise ConfigError(f"unknown extractor {spec!r}: use offline or openai:<model>@<base url>")
    return OpenAIExtractor(base, model, api_key=api_key)
