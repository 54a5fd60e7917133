"""A no-model embedder: signed feature hashing of words, word pairs and character trigrams.

It needs nothing but numpy and gives the same vector for the same text in every process and on every
machine. It is lexical, not semantic: "car" and "automobile" share nothing. Use it where no model can
run, and never as a silent stand-in for one (its ``model_id`` differs, so its vectors never mix).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from engram.embed.base import Vectors, check_texts, normalize_rows, require_positive

#: Version of the feature scheme; part of ``model_id``. Bump it when any feature or hash changes.
SCHEME_VERSION = 1

_WORD = re.compile(r"\w+")

#: Weight of each kind of feature before normalisation: whole words count most, trigrams least
#: (a word of n letters yields n trigrams, which would otherwise drown the word features).
_WORD_WEIGHT = 1.0
_PAIR_WEIGHT = 0.7
_TRIGRAM_WEIGHT = 0.35


class HashingEmbedder:
    """Embeds texts by hashing their features into ``dim`` signed buckets.

    Features: lowercased words (``\\w+``), adjacent word pairs, and character trigrams of each word
    padded with ``<`` and ``>``. Each feature adds ``weight * (1 + log tf)`` to the bucket its
    BLAKE2b hash picks, with a sign from the same hash, so collisions cancel out on average.

    Args:
        dim: vector length.

    Raises:
        ConfigError: ``dim`` is not a positive integer.
    """

    def __init__(self, dim: int = 384) -> None:
        self._dim = require_positive("dim", dim)
        self._bucket = lru_cache(maxsize=65536)(self._bucket_uncached)

    @property
    def model_id(self) -> str:
        """``hashing-v1-<dim>``."""
        return f"hashing-v{SCHEME_VERSION}-{self._dim}"

    @property
    def spec(self) -> str:
        """``hashing``, or ``hashing:<dim>`` for another size (see :func:`~engram.embed.embedder_from_spec`)."""
        return "hashing" if self._dim == 384 else f"hashing:{self._dim}"

    @property
    def dim(self) -> int:
        """The vector length."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into unit rows of shape ``(len(texts), dim)``; a text without words gives zeros."""
        items = check_texts(texts)
        matrix = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            for feature, weight in features(text).items():
                index, sign = self._bucket(feature)
                matrix[row, index] += sign * weight
        return normalize_rows(matrix)

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a vector of shape ``(dim,)``."""
        vector: Vectors = self.embed([text])[0]
        return vector

    def _bucket_uncached(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return (value >> 1) % self._dim, 1.0 if value & 1 else -1.0


def features(text: str) -> dict[str, float]:
    """The weighted features of ``text``: ``w:`` words, ``p:`` word pairs, ``c:`` trigrams, with sublinear tf."""
    words = _WORD.findall(text.lower())
    counts: Counter[str] = Counter()
    counts.update("w:" + word for word in words)
    counts.update(f"p:{first} {second}" for first, second in itertools.pairwise(words))
    for word in words:
        padded = f"<{word}>"
        counts.update("c:" + padded[start : start + 3] for start in range(len(padded) - 2))
    weights = {"w": _WORD_WEIGHT, "p": _PAIR_WEIGHT, "c": _TRIGRAM_WEIGHT}
    return {feature: weights[feature[0]] * (1.0 + math.log(count)) for feature, count in counts.items()}
