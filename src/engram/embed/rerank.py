"""Rerankers: a second stage that reads the query and each candidate's text together (a cross-encoder).

A search's first stage (BM25 and vectors) finds the top ``top_k`` candidates; a reranker scores each
(query, text) pair with one logit, which the memory API maps to [0, 1] and ranks by (see
:mod:`engram.store.rerank` and docs/adr/0004-rerank-scores.md). :class:`OnnxReranker` runs any local
cross-encoder exported to ONNX (a directory with ``model.onnx`` or ``onnx/model.onnx`` and ``tokenizer.json``):
nothing is downloaded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from engram import runtime
from engram.embed import onnxrun
from engram.embed.base import check_texts, require_positive
from engram.embed.onnxmodel import ModelFiles
from engram.errors import ConfigError, EmbedderError, InvalidInputError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: How many first-stage candidates a reranker reads by default.
TOP_K = 50
#: Pairs longer than this many tokens are cut (the text first), unless the model's files say otherwise.
DEFAULT_MAX_TOKENS = 512


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, text) pairs: one logit each, higher is more relevant."""

    @property
    def model_id(self) -> str:
        """A stable id of the model, shown by ``explain``."""
        ...

    @property
    def top_k(self) -> int:
        """How many first-stage candidates to rerank."""
        ...

    def score(self, query: str, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """One logit per text, in order: its relevance to ``query``.

        Raises:
            EmbedderError: the model failed or is unavailable.
        """
        ...


class OnnxReranker:
    """A local cross-encoder in ONNX format (sentence-transformers' ``CrossEncoder`` exported), on onnxruntime.

    The model takes ``input_ids``, ``attention_mask`` and (when it asks) ``token_type_ids`` of the pair
    ``(query, text)`` as its tokenizer encodes it, and gives one logit per pair (shape ``(n,)`` or ``(n, 1)``)
    or two class logits (``(n, 2)``: the logit of relevance is their difference). Construction finds and
    hashes the files; the model loads on first use.

    Args:
        directory: the model directory.
        top_k: first-stage candidates to rerank (default 50).
        name: the model's name in its id (default: the directory's name).
        max_tokens: cut pairs to this many tokens (default: the model's own limit, else 512).
        threads: onnxruntime intra-op threads.
        batch_size: pairs per model run.

    Raises:
        ConfigError: the directory or its files are missing, or a setting is bad.
        EmbedderError: onnxruntime or tokenizers is not installed.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        top_k: int = TOP_K,
        name: str | None = None,
        max_tokens: int | None = None,
        threads: int = 1,
        batch_size: int = 16,
    ) -> None:
        self._top_k = require_positive("top_k", top_k)
        self._threads = require_positive("threads", threads)
        self._batch_size = require_positive("batch_size", batch_size)
        onnxrun.require_runtime("an ONNX reranker")
        self._files = ModelFiles.find(directory, "reranker model")
        self._max_tokens = (
            self._files.max_tokens() if max_tokens is None else require_positive("max_tokens", max_tokens)
        )
        label = name or self._files.directory.name
        self._model_id = f"{label}/onnx-sha256:{self._files.model_sha256[:16]}"
        self._loaded: tuple[Any, Tokenizer, set[str]] | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``<name>/onnx-sha256:<16 hex of the ONNX file>``."""
        return self._model_id

    @property
    def top_k(self) -> int:
        """First-stage candidates to rerank."""
        return self._top_k

    @property
    def spec(self) -> str:
        """``onnx:<absolute directory>``."""
        return f"onnx:{self._files.directory}"

    def load(self) -> None:
        """Load and verify the model now rather than on first use."""
        self._get_loaded()

    def score(self, query: str, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """One relevance logit per text, in the order given."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        items = check_texts(texts)
        result = np.zeros(len(items), dtype=np.float64)
        if not items:
            return result
        session, tokenizer, inputs = self._get_loaded()
        encodings = [tokenizer.encode(query, text) for text in items]
        for rows, ids, types, mask in onnxrun.batches(encodings, self._batch_size):
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            out = onnxrun.run(session, {k: v for k, v in feeds.items() if k in inputs}, self._files.model)
            if out.shape in ((len(rows),), (len(rows), 1)):
                result[rows] = out.reshape(len(rows))
            elif out.shape == (len(rows), 2):
                result[rows] = out[:, 1] - out[:, 0]
            else:
                raise EmbedderError(
                    f"the reranker {self._files.model} returned shape {out.shape}, not (pairs,), (pairs, 1) or "
                    "(pairs, 2)"
                )
        return result

    def _get_loaded(self) -> tuple[Any, Tokenizer, set[str]]:
        loaded = self._loaded
        if loaded is None:
            with self._lock:
                if self._loaded is None:
                    session, tokenizer = self._files.load(self._threads, self._max_tokens)
                    self._loaded = (session, tokenizer, onnxrun.input_names(session))
                loaded = self._loaded
        return loaded


def reranker_from_spec(spec: str) -> Reranker:
    """A reranker from a spec: ``onnx:<dir>`` or ``onnx:<dir>@<top_k>``.

    Raises:
        ConfigError: the spec has no such form, or the directory is not a model directory.
    """
    name, colon, argument = spec.strip().partition(":")
    argument = argument.strip()
    path, at, suffix = argument.rpartition("@")
    top_k: str | None = suffix
    if not at or "/" in suffix:  # no "@<top_k>" after the folder ("@" may be part of a path)
        path, top_k = argument, None
    if name != "onnx" or not colon or not path:
        raise ConfigError(f"unknown reranker spec {spec!r}; expected onnx:<model directory> or onnx:<dir>@<top_k>")
    if top_k is not None and not top_k.isdigit():
        raise ConfigError(f"bad reranker spec {spec!r}: top_k after '@' must be a positive integer")
    return OnnxReranker(path) if top_k is None else OnnxReranker(path, top_k=int(top_k))


# Rerankers made from specs, one per spec: every search naming the same spec shares one loaded model.
_SHARED: dict[str, Reranker] = {}
_SHARED_LOCK = threading.Lock()
runtime.register("engram.embed.rerank.shared", reset=_SHARED.clear, close=_SHARED.clear)


def shared_reranker(spec: str) -> Reranker:
    """The reranker ``spec`` names, made once per process (:func:`reranker_from_spec`)."""
    with _SHARED_LOCK:
        found = _SHARED.get(spec)
        if found is None:
            found = _SHARED[spec] = reranker_from_spec(spec)
        return found
