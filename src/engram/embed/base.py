"""The embedder seam: texts in, L2-normalised float32 vectors out.

Every vector engram stores is recorded with the ``model_id`` of the embedder that made it, so an
index built with one model is never searched with another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np
import numpy.typing as npt

from engram.errors import ConfigError, InvalidInputError

Vectors: TypeAlias = npt.NDArray[np.float32]
"""A float32 array: ``(n, dim)`` from :meth:`Embedder.embed`, ``(dim,)`` from :meth:`Embedder.embed_query`."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of one fixed size.

    Implementations: :class:`~engram.embed.MiniLMEmbedder` (local model, the default),
    :class:`~engram.embed.OnnxEmbedder` (any local sentence-transformers-style ONNX model),
    :class:`~engram.embed.HashingEmbedder` (no model, lexical only) and
    :class:`~engram.embed.OpenAIEmbedder` (any OpenAI-compatible server).
    """

    @property
    def model_id(self) -> str:
        """A stable id of the model and its settings, recorded with every vector it makes."""
        ...

    @property
    def dim(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into a float32 array of shape ``(len(texts), dim)``, one unit-length row per text.

        A row may be all zeros when its text has nothing to embed (an empty string).

        Raises:
            EmbedderError: the model failed or is unavailable.
            InvalidInputError: ``texts`` is a single string or holds a non-string.
        """
        ...

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a float32 vector of shape ``(dim,)``."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list, refusing a bare string (a common slip) and non-strings."""
    if isinstance(texts, str | bytes):
        raise InvalidInputError("embed() takes a sequence of strings; use embed_query() for a single text")
    result = list(texts)
    for position, text in enumerate(result):
        if not isinstance(text, str):
            raise InvalidInputError(f"text {position} is a {type(text).__name__}, not a str")
    return result


def normalize_rows(matrix: npt.ArrayLike) -> Vectors:
    """Scale each row of ``matrix`` to unit L2 length, as float32; all-zero rows stay zero."""
    array = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    result: Vectors = np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)
    return result


def require_positive(name: str, value: int) -> int:
    """Return ``value`` if it is a positive int, else raise :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def embedder_spec(embedder: Embedder) -> str:
    """The short spec that makes ``embedder`` again (``minilm``, ``hashing:64``, ``openai:<model>@<url>``), or its
    ``model_id`` when it has none (a custom embedder, or model files given by path)."""
    spec = getattr(embedder, "spec", None)
    return spec if isinstance(spec, str) and spec else embedder.model_id


class EmbedderMismatchError(ConfigError):
    """A store indexed with one embedder was opened with another: its vectors would not compare.

    Attributes:
        recorded: the spec of the embedder the store records (``model_id`` when it has no spec).
        given: the spec of the embedder asked for.
    """

    def __init__(self, recorded: str, given: str) -> None:
        super().__init__(
            f"this store was indexed with {recorded!r}, not {given!r}: pass --embedder {recorded} "
            f"(embedder={recorded!r}), or re-embed every item with `engram reindex --embedder {given}` "
            f"(Memory.reindex(embedder={given!r}))"
        )
        self.recorded = recorded
        self.given = given
