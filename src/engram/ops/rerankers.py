"""The reranker a server's operator configured (``engram serve --rerank``, ``engram mcp --rerank``), and the one
rule every door applies to a client asking for it.

A client never names a model or a path: it asks for the second stage with ``rerank: true`` and gets the operator's
cross-encoder (``onnx:<dir>`` or ``onnx:<dir>@<top_k>``, loaded once per process), or a clear
:class:`~engram.errors.InvalidInputError` (HTTP 422) when the operator configured none.
"""

from __future__ import annotations

from engram.embed.rerank import Reranker, shared_reranker
from engram.errors import InvalidInputError

#: What the refusal tells a client (and its operator) to do.
HINT = "its operator enables one with --rerank onnx:<model directory>[@<top_k>] (docs/search.md)"


def operator_reranker(spec: str | None) -> Reranker | None:
    """The reranker of an operator's setting, loaded and verified now (a bad setting fails at startup, not at the
    first search); None without a setting.

    Raises:
        ConfigError: the spec has no known form, or its directory is not a model directory.
        EmbedderError: the model cannot be loaded.
    """
    if spec is None or not spec.strip():
        return None
    reranker = shared_reranker(spec.strip())
    load = getattr(reranker, "load", None)
    if callable(load):
        load()
    return reranker


def requested_reranker(spec: str | None, asked: object) -> Reranker | None:
    """The reranker a request gets: None when it did not ask; the operator's when it asked and one is configured.

    Raises:
        InvalidInputError: the request asked (``asked`` is true) but the server has no reranker, or ``asked`` is
            not a boolean (a client may not name a model or a path).
    """
    if not isinstance(asked, bool):
        raise InvalidInputError(
            f"rerank must be true or false, not {type(asked).__name__}: the server's operator chooses the model"
        )
    if not asked:
        return None
    if spec is None or not spec.strip():
        raise InvalidInputError(f"rerank was asked for, but this server has no reranker; {HINT}")
    return shared_reranker(spec.strip())


__all__ = ["HINT", "operator_reranker", "requested_reranker"]
