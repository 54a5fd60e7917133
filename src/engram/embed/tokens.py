"""Token counters: how many model tokens a text costs, for budgets such as :meth:`Memory.context`.

Forms (:func:`token_counter`):

- ``"wordpiece"`` (the default): the WordPiece tokenizer of all-MiniLM-L6-v2 that ships inside engram
  (``data/tokenizer.json``), run by the ``tokenizers`` package; no special tokens, no truncation. It is a real
  tokenizer that works offline; on English prose it counts within a few per cent of OpenAI's ``cl100k_base``
  (measured on LoCoMo's turns, see ``docs/search.md``).
- ``"tiktoken:<encoding>"``, e.g. ``"tiktoken:cl100k_base"``: OpenAI's tokenizer, when ``tiktoken`` is installed and
  its encoding file is already on disk (``tiktoken`` downloads it on first use, which fails offline; point
  ``TIKTOKEN_CACHE_DIR`` at a folder holding it).
- ``"estimate"``: one token per 4 characters, rounded up; no tokenizer needed. The default falls back to it
  when the ``tokenizers`` package cannot be imported.

Any object with a ``name`` and a ``count_many(texts) -> list[int]`` method is a counter too. One whose ``additive``
attribute is True promises more: texts joined by a newline count as the sum of their counts, and every
whitespace-separated word costs at least one token (true of WordPiece, which splits on whitespace first); a budget
then needs no count of the joined text and skips lines too long to fit without tokenizing them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from engram import runtime
from engram.embed.minilm import BUNDLED_TOKENIZER
from engram.errors import ConfigError

#: Characters per token of the ``estimate`` counter (a conservative average for English).
CHARS_PER_TOKEN = 4
#: Token counts a counter remembers (texts seen most recently).
COUNT_CACHE = 65_536
SPEC_FORMS = '"wordpiece", "tiktoken:<encoding>" or "estimate"'


@runtime_checkable
class TokenCounter(Protocol):
    """Counts model tokens; ``name`` says which tokenizer (reported with every count)."""

    @property
    def name(self) -> str:
        """The tokenizer, e.g. ``wordpiece:all-MiniLM-L6-v2``."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each text, in order."""
        ...


@dataclass(frozen=True)
class EstimateCounter:
    """One token per :data:`CHARS_PER_TOKEN` characters, rounded up: the fallback with no tokenizer."""

    name: str = "estimate:chars/4"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """The estimated number of tokens of each text."""
        return [(len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN for text in texts]


class WordPieceCounter:
    """The bundled all-MiniLM-L6-v2 WordPiece tokenizer (``tokenizers``), counting without special tokens."""

    name = "wordpiece:all-MiniLM-L6-v2"
    #: Lines joined by newlines count as the sum of their counts; each word is at least one token.
    additive = True

    def __init__(self) -> None:
        # loaded lazily on purpose: importing engram.embed needs numpy only (see engram.embed)
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(BUNDLED_TOKENIZER))
        except Exception as exc:  # tokenizers raises untyped errors
            raise ConfigError(f"cannot load the bundled tokenizer {BUNDLED_TOKENIZER}: {exc}") from exc
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        # the same memories come back query after query: their counts are remembered (a pure function of the text)
        self._count = lru_cache(maxsize=COUNT_CACHE)(self._encode)

    def _encode(self, text: str) -> int:
        with self._lock:  # one text at a time: encode_batch's thread pool was slower on a busy machine (measured)
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """The number of WordPiece tokens of each text."""
        return [self._count(text) for text in texts]


class TiktokenCounter:
    """OpenAI's tokenizer through ``tiktoken`` (its encoding file must be on disk already: see the module doc)."""

    def __init__(self, encoding: str) -> None:
        try:
            # optional dependency, loaded lazily on purpose: only this counter needs it
            import tiktoken  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError("tokenizer 'tiktoken:...' needs the tiktoken package: pip install tiktoken") from exc
        try:
            self._encoding: Any = tiktoken.get_encoding(encoding)
        except Exception as exc:  # tiktoken raises ValueError, or requests' errors when it cannot download
            raise ConfigError(
                f"tiktoken cannot load the encoding {encoding!r} ({type(exc).__name__}: {exc}); it downloads the "
                "encoding file on first use: set TIKTOKEN_CACHE_DIR to a folder holding it, or use 'wordpiece'"
            ) from exc
        self.name = f"tiktoken:{encoding}"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each text."""
        return [len(ids) for ids in self._encoding.encode_ordinary_batch(list(texts))]


_lock = threading.Lock()
_made: dict[str, TokenCounter] = {}


def _forget() -> None:
    with _lock:
        _made.clear()


runtime.register("engram.embed.tokens", reset=_forget)


def _make(spec: str) -> TokenCounter:
    if spec == "wordpiece":
        return WordPieceCounter()
    if spec == "estimate":
        return EstimateCounter()
    if spec.startswith("tiktoken:") and len(spec) > len("tiktoken:"):
        return TiktokenCounter(spec.split(":", 1)[1])
    raise ConfigError(f"unknown tokenizer {spec!r}: use {SPEC_FORMS}")


def default_counter() -> TokenCounter:
    """The bundled WordPiece counter, or the estimate when the ``tokenizers`` package cannot be imported."""
    try:
        return token_counter("wordpiece")
    except ImportError:  # tokenizers missing: the documented fallback
        return token_counter("estimate")


def token_counter(spec: str | TokenCounter | None = None) -> TokenCounter:
    """The counter a spec names (one per spec and process), a counter object as is, or :func:`default_counter`.

    Raises:
        ConfigError: the spec has none of the forms in the module doc, or its tokenizer cannot load.
    """
    if spec is None:
        return default_counter()
    if not isinstance(spec, str):
        if isinstance(spec, TokenCounter):
            return spec
        raise ConfigError(f"tokenizer must be a spec string ({SPEC_FORMS}) or a token counter, got {spec!r}")
    with _lock:
        found = _made.get(spec)
    if found is None:
        found = _make(spec)
        with _lock:
            found = _made.setdefault(spec, found)
    return found


__all__ = [
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "WordPieceCounter",
    "default_counter",
    "token_counter",
]
