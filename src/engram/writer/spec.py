"""Extractors named by a short spec, as a command line or a server config gives them."""

from __future__ import annotations

import enum
import os

from engram.errors import ConfigError
from engram.writer.extract import Extractor
from engram.writer.offline import OfflineExtractor
from engram.writer.openai import OpenAIExtractor


class Unset(enum.Enum):
    """The type of :data:`UNSET`: ``api_key`` left out. Doors read the key and pass it (``api_key=None``: no key); a
    caller that leaves it out gets ``OPENAI_API_KEY`` for now. That fallback is transitional (issue #27): it goes
    once the HTTP server's writer (``engram.server.writer.writer_for``) passes the key it reads, as the CLI does."""

    UNSET = "unset"


UNSET = Unset.UNSET


def extractor_from_spec(spec: str | None, api_key: str | Unset | None = UNSET) -> Extractor | None:
    """``offline`` (no model server), ``openai:<model>@<base url>`` (any OpenAI-compatible server, called with
    ``api_key``), or None (no extractor: every run is gated with ``no_model``)."""
    if spec is None:
        return None
    if spec == "offline":
        return OfflineExtractor()
    model, sep, base = spec.removeprefix("openai:").partition("@")
    if not spec.startswith("openai:") or not sep or not model or not base:
        raise ConfigError(f"unknown extractor {spec!r}: use offline or openai:<model>@<base url>")
    key = os.environ.get("OPENAI_API_KEY") if api_key is UNSET else api_key  # transitional: see UNSET
    return OpenAIExtractor(base, model, api_key=key)
