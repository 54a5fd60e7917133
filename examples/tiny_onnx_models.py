"""Build two tiny ONNX models, laid out as sentence-transformers exports are, to try engram's model seams offline.

    python examples/tiny_onnx_models.py models      # makes models/tiny-embedder and models/tiny-reranker

- ``tiny-embedder``: a word-vector table (4 dimensions, mean pooling): ``embedder="onnx:models/tiny-embedder"``.
- ``tiny-reranker``: a "cross-encoder" whose logit for (query, passage) is +4 per "cherry" in the passage and
  -2 per "banana": ``rerank="onnx:models/tiny-reranker"``.

Real models are exported the same way (an ONNX file and ``tokenizer.json`` in one folder); these two need only the
``onnx`` and ``tokenizers`` packages to build (``pip install onnx``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

WORDS = {
    "apple": [1.0, 0.2, 0.0, 0.0],
    "cherry": [0.9, 0.3, 0.1, 0.0],
    "banana": [0.7, 0.0, 0.5, 0.0],
    "fruit": [0.8, 0.2, 0.2, 0.0],
    "red": [0.3, 0.9, 0.0, 0.0],
    "pie": [0.2, 0.0, 0.0, 1.0],
    "train": [0.0, 0.0, 0.0, -1.0],
}
RERANK = {"cherry": 4.0, "banana": -2.0}


def _tokenizer(folder: Path) -> dict[str, int]:
    vocab = {"[PAD]": 0, "[UNK]": 1, **{word: i + 2 for i, word in enumerate(WORDS)}}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()  # type: ignore[assignment]
    tokenizer.save(str(folder / "tokenizer.json"))
    return vocab


def _save(folder: Path, nodes: list[onnx.NodeProto], inputs: list[str], output: onnx.ValueInfoProto,
          weights: dict[str, np.ndarray]) -> None:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        folder.name,
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in inputs],
        [output],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "model.onnx"))


def build(root: Path) -> None:
    """Write ``root/tiny-embedder`` and ``root/tiny-reranker``."""
    embedder = root / "tiny-embedder"
    (embedder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer(embedder)
    table = np.zeros((len(vocab), 4), dtype=np.float32)
    for word, row in WORDS.items():
        table[vocab[word]] = row
    gather = helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0)
    hidden = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", 4])
    _save(embedder, [gather], ["input_ids", "attention_mask"], hidden, {"table": table})
    (embedder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))

    reranker = root / "tiny-reranker"
    reranker.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer(reranker)
    per_word = np.zeros(len(vocab), dtype=np.float32)
    for word, weight in RERANK.items():
        per_word[vocab[word]] = weight
    nodes = [
        helper.make_node("Gather", ["per_word", "input_ids"], ["weight"], axis=0),
        helper.make_node("Cast", ["token_type_ids"], ["in_passage"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["weight", "in_passage"], ["passage"]),
        helper.make_node("ReduceSum", ["passage", "axis"], ["logits"], keepdims=1),
    ]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    weights = {"per_word": per_word, "axis": np.array([1], dtype=np.int64)}
    _save(reranker, nodes, ["input_ids", "attention_mask", "token_type_ids"], logits, weights)


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "models"))
    print("built tiny-embedder and tiny-reranker")
