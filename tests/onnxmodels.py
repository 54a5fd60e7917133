"""Tiny ONNX models built at test time, whose outputs are known: a sentence-transformers-style embedder and a
cross-encoder, each in a directory with its ``tokenizer.json`` (a word-level vocabulary, split on spaces)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

OPSET = [helper.make_opsetid("", 17)]


def write_tokenizer(directory: Path, words: Sequence[str], max_length: int | None = None) -> dict[str, int]:
    """A word-level ``tokenizer.json`` over ``words`` (id 0 is [PAD], 1 is [UNK]); returns the vocabulary."""
    vocab = {"[PAD]": 0, "[UNK]": 1, **{word: i + 2 for i, word in enumerate(words)}}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()  # type: ignore[assignment]
    if max_length is not None:
        tokenizer.enable_truncation(max_length=max_length)
    tokenizer.save(str(directory / "tokenizer.json"))
    return vocab


def _ids_inputs(*names: str) -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in names]


def build_embedder(
    directory: Path,
    table: Mapping[str, Sequence[float]],
    *,
    pooling: str | None = None,
    onnx_subdir: bool = False,
    max_length: int | None = None,
) -> Path:
    """An embedder whose token vectors are ``table[word]`` ([PAD] and [UNK] are zero vectors): mean pooling
    of a text gives the mean of its words' rows. ``pooling`` writes a ``1_Pooling/config.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(directory, list(table), max_length)
    dim = len(next(iter(table.values())))
    weights = np.zeros((len(vocab), dim), dtype=np.float32)
    for word, row in table.items():
        weights[vocab[word]] = row
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0)],
        "tiny-embedder",
        _ids_inputs("input_ids", "attention_mask"),
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", dim])],
        [numpy_helper.from_array(weights, "table")],
    )
    model_dir = directory / "onnx" if onnx_subdir else directory
    model_dir.mkdir(exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=OPSET), str(model_dir / "model.onnx"))
    if pooling is not None:
        (directory / "1_Pooling").mkdir(exist_ok=True)
        modes = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}
        config = {name: name == modes.get(pooling, pooling) for name in [*modes.values(), pooling]}
        (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": dim, **config}))
    return directory


def build_cross_encoder(directory: Path, words: Sequence[str], weights: Mapping[str, float]) -> Path:
    """A cross-encoder whose logit for (query, passage) is the sum of ``weights[word]`` over the passage's words
    (the second segment: token type 1); other words weigh 0."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(directory, words)
    per_token = np.zeros(len(vocab), dtype=np.float32)
    for word, weight in weights.items():
        per_token[vocab[word]] = weight
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["per_token"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["second"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["per_token", "mask"], ["kept"]),
        helper.make_node("Mul", ["kept", "second"], ["passage"]),
        helper.make_node("ReduceSum", ["passage", "axis"], ["logits"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        _ids_inputs("input_ids", "attention_mask", "token_type_ids"),
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(per_token, "weights"), numpy_helper.from_array(np.array([1], np.int64), "axis")],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET), str(directory / "model.onnx"))
    return directory
