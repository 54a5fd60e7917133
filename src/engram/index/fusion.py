"""Fusion weights of a hybrid search, chosen by the embedder: a table keyed by model name.

A hybrid search's similarity is ``keyword_weight * keyword + semantic_weight * semantic`` (ADR 0002). How
much the cosine is worth depends on the model that made it: a stronger embedder's cosine earns more weight.
The table is keyed by model name, the part of an embedder's ``model_id`` before its first ``/`` (MiniLM's
``all-MiniLM-L6-v2/onnx-int8`` is ``all-MiniLM-L6-v2``; an ``onnx:<dir>`` embedder's name is its directory's
name unless given). A model not in the table gets :data:`DEFAULT_WEIGHTS`.
"""

from __future__ import annotations

from types import MappingProxyType

#: Weights of the two signals in a hybrid search's similarity by default (they sum to 1); see ADR 0002.
KEYWORD_WEIGHT = 0.8
SEMANTIC_WEIGHT = 0.2
DEFAULT_WEIGHTS = (KEYWORD_WEIGHT, SEMANTIC_WEIGHT)

#: (keyword, semantic) weights by model name. MiniLM: 0.5 / 0.5, chosen with BM25's B by cross-validation on LoCoMo
#: (split by conversation) and a generated assistant-chat data set (benchmarks/bench_retrieval.py --levers --chats;
#: ADR 0002, fourth amendment). all-mpnet-base-v2: 0.4 / 0.6, by the same cross-validation with B 0 (ADR 0002,
#: third and fourth amendments).
FUSION_WEIGHTS = MappingProxyType(
    {
        "all-MiniLM-L6-v2": (0.5, 0.5),
        "all-mpnet-base-v2": (0.4, 0.6),
    }
)


def model_name(model_id: str) -> str:
    """The model name of a ``model_id``: its part before the first ``/``."""
    return model_id.split("/", 1)[0]


def fusion_weights(model_id: str | None) -> tuple[float, float]:
    """The (keyword, semantic) weights of a hybrid search whose vectors come from ``model_id`` (None: no
    embedder, the default weights)."""
    if model_id is None:
        return DEFAULT_WEIGHTS
    return FUSION_WEIGHTS.get(model_name(model_id), DEFAULT_WEIGHTS)


__all__ = ["DEFAULT_WEIGHTS", "FUSION_WEIGHTS", "KEYWORD_WEIGHT", "SEMANTIC_WEIGHT", "fusion_weights", "model_name"]
