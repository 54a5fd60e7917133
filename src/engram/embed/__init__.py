"""Embedders: the seam between engram and whatever turns text into vectors.

    >>> from engram.embed import embedder_from_spec
    >>> embedder = embedder_from_spec("hashing:64")
    >>> embedder.model_id, embedder.embed(["hello world"]).shape
    ('hashing-v1-64', (1, 64))

:class:`OnnxEmbedder` runs any local sentence-transformers-style ONNX model by path (``onnx:<dir>``), and
:class:`OnnxReranker` any local ONNX cross-encoder, the second stage of a search (``search(..., rerank=...)``).
:func:`default_embedder` is all-MiniLM-L6-v2 on onnxruntime, offline (``pip install 'engram[embeddings]'``).
Importing this package needs numpy only; onnxruntime, tokenizers and httpx are imported when an
embedder that needs them is made. This layer never reads environment variables: settings come in as
arguments (the CLI and server read the environment and pass them on).
"""

from __future__ import annotations

import re

from engram.embed.base import Embedder, EmbedderMismatchError, Vectors, embedder_spec, normalize_rows
from engram.embed.hashing import HashingEmbedder
from engram.embed.minilm import MiniLMEmbedder
from engram.embed.mpnet import MpnetEmbedder
from engram.embed.onnxmodel import OnnxEmbedder
from engram.embed.openai import OpenAIEmbedder
from engram.embed.rerank import OnnxReranker, Reranker, reranker_from_spec
from engram.errors import ConfigError

__all__ = [
    "Embedder",
    "EmbedderMismatchError",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "MpnetEmbedder",
    "OnnxEmbedder",
    "OnnxReranker",
    "OpenAIEmbedder",
    "Reranker",
    "Vectors",
    "default_embedder",
    "embedder_from_spec",
    "embedder_spec",
    "normalize_rows",
    "reranker_from_spec",
]

_OPENAI_SPEC = re.compile(r"openai:(?P<model>[^@]+)@(?P<base_url>https?://.+)")
SPEC_FORMS = '"minilm", "mpnet", "hashing", "hashing:<dim>", "onnx:<model directory>" or "openai:<model>@<base_url>"'


def default_embedder() -> Embedder:
    """The default embedder: all-MiniLM-L6-v2 on onnxruntime, loaded on first use.

    Raises:
        EmbedderError: onnxruntime, tokenizers or the model package is missing (the message says what to
            install).
    """
    return MiniLMEmbedder()


def embedder_from_spec(spec: str, *, api_key: str | None = None) -> Embedder:
    """Make an embedder from a short spec string, as found in a config file or on a command line.

    Forms: ``minilm``; ``mpnet``, all-mpnet-base-v2 from its optional PyPI parts (:class:`MpnetEmbedder`);
    ``hashing`` or ``hashing:<dim>``; ``onnx:<dir>``, any local sentence-transformers-style
    ONNX model (:class:`OnnxEmbedder`); ``openai:<model>@<base_url>``, e.g.
    ``openai:nomic-embed-text@http://localhost:11434/v1`` (``api_key`` is sent to that server).

    Raises:
        ConfigError: the spec has none of these forms.
        EmbedderError: the embedder it names cannot run here.
    """
    name, colon, argument = spec.strip().partition(":")
    if name == "minilm" and not colon:
        return MiniLMEmbedder()
    if name == "mpnet" and not colon:
        return MpnetEmbedder()
    if name == "hashing":
        if not colon:
            return HashingEmbedder()
        if not argument.isdigit():
            raise ConfigError(f"bad embedder spec {spec!r}: the hashing dimension must be a positive integer")
        return HashingEmbedder(int(argument))
    if name == "onnx":
        if not argument.strip():
            raise ConfigError(f"bad embedder spec {spec!r}: expected onnx:<model directory>")
        return OnnxEmbedder(argument.strip())
    match = _OPENAI_SPEC.fullmatch(spec.strip())
    if match:
        return OpenAIEmbedder(match["base_url"], match["model"], api_key=api_key)
    raise ConfigError(f"unknown embedder spec {spec!r}; expected {SPEC_FORMS}")
