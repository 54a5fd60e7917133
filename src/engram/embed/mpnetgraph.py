"""An MPNet encoder as an ONNX graph, built from its weights: how engram runs all-mpnet-base-v2 without torch.

The model ships as a safetensors file (the weights) and a ``config.json`` (the shape). This module reads the
safetensors format with numpy (an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the bytes) and writes the MPNet forward pass as a graph of standard ONNX operators
(opset 17), the weights as initializers, in float32: word and position embeddings, then per layer self-attention
with MPNet's relative position bias and a GELU feed-forward block, each followed by a residual LayerNorm. The
graph takes ``input_ids`` and ``attention_mask`` and returns the last hidden state ``(batch, tokens, hidden)``;
pooling and normalisation are the embedder's (:mod:`engram.embed.onnxmodel`).

Position ids are counted over the attention mask from ``pad_token_id + 1``, as MPNet counts them over the
non-padding tokens, so any padding id gives the same vectors for the real tokens. ``onnx`` is an optional
dependency (``pip install 'engram[mpnet]'``), imported when a graph is built.
"""

from __future__ import annotations

import importlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import EmbedderError

#: How to install what building the graph needs.
ONNX_HINT = "pip install 'engram[mpnet]'  (or: pip install onnx)"
#: The ONNX opset and IR version of the graph (LayerNormalization needs opset 17).
OPSET = 17
IR_VERSION = 8

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}
#: A header longer than this is not a model's (the real one is about 30 kB).
_MAX_HEADER = 100_000_000

Array = npt.NDArray[Any]


def read_safetensors(data: bytes) -> dict[str, Array]:
    """The tensors of a safetensors file's bytes, as numpy arrays (views where the dtype allows).

    Raises:
        EmbedderError: the bytes are not a safetensors file, or hold a dtype this reader does not know.
    """
    if len(data) < 8:
        raise EmbedderError("not a safetensors file: shorter than its header length")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise EmbedderError("not a safetensors file: its header length runs past the file")
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as exc:
        raise EmbedderError(f"not a safetensors file: bad header ({exc})") from exc
    if not isinstance(header, dict):
        raise EmbedderError("not a safetensors file: the header is not an object")
    body = memoryview(data)[8 + size :]
    tensors: dict[str, Array] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[entry["dtype"]]
            begin, end = (int(x) for x in entry["data_offsets"])
            shape = tuple(int(x) for x in entry["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"safetensors entry {name!r} is malformed") from exc
        if dtype is None:
            raise EmbedderError(f"safetensors entry {name!r} has dtype {entry['dtype']}, which engram does not read")
        if not 0 <= begin <= end <= len(body) or (end - begin) != int(np.prod(shape)) * np.dtype(dtype).itemsize:
            raise EmbedderError(f"safetensors entry {name!r} has a byte range that does not fit its shape")
        tensors[name] = np.frombuffer(body[begin:end], dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
    return tensors


@dataclass(frozen=True)
class MPNetConfig:
    """The shape of an MPNet encoder, from its ``config.json``."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    buckets: int
    pad_token_id: int
    eps: float

    @classmethod
    def from_json(cls, config: Mapping[str, Any]) -> MPNetConfig:
        """Read ``config.json``; :class:`EmbedderError` when it is not an MPNet model's."""
        if config.get("model_type") != "mpnet" or config.get("hidden_act", "gelu") != "gelu":
            raise EmbedderError(
                f"config.json describes a {config.get('model_type')!r} model with {config.get('hidden_act')!r}; "
                "only MPNet with GELU is built here"
            )
        try:
            found = cls(
                hidden=int(config["hidden_size"]),
                layers=int(config["num_hidden_layers"]),
                heads=int(config["num_attention_heads"]),
                intermediate=int(config["intermediate_size"]),
                max_positions=int(config["max_position_embeddings"]),
                buckets=int(config.get("relative_attention_num_buckets", 32)),
                pad_token_id=int(config.get("pad_token_id", 1)),
                eps=float(config.get("layer_norm_eps", 1e-5)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"config.json lacks a field of an MPNet model: {exc}") from exc
        if found.hidden % found.heads or min(found.hidden, found.layers, found.heads, found.buckets) <= 0:
            raise EmbedderError("config.json's hidden size is not a positive multiple of its attention heads")
        return found

    @property
    def max_tokens(self) -> int:
        """The longest input the position embeddings cover."""
        return self.max_positions - self.pad_token_id - 1


def relative_position_buckets(length: int, buckets: int, max_distance: int = 128) -> npt.NDArray[np.int64]:
    """MPNet's bucket of every (query, key) offset for sequences up to ``length``: ``(length, length)``.

    Half the buckets are for keys before the query, half for keys after; within a half, offsets under a quarter
    of the buckets have one bucket each, longer ones share buckets on a log scale up to ``max_distance``.
    Computed in float32, as the reference implementation does.
    """
    positions = np.arange(length, dtype=np.int64)
    relative = positions[None, :] - positions[:, None]  # key position minus query position
    n = -relative
    half = buckets // 2
    result = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    far = np.maximum(n, exact).astype(np.float32)  # the log scale is only used for offsets of ``exact`` or more
    scaled = np.log(far / np.float32(exact)) / np.float32(math.log(max_distance / exact))
    large = np.minimum(exact + (scaled * np.float32(half - exact)).astype(np.int64), half - 1)
    return np.asarray(result + np.where(n < exact, n, large), dtype=np.int64)


def build_graph(weights: Mapping[str, Array], config: MPNetConfig) -> bytes:
    """The serialized ONNX model of the MPNet encoder with these weights (float32).

    Raises:
        EmbedderError: ``onnx`` is not installed, or a weight is missing or has the wrong shape.
    """
    try:
        onnx: Any = importlib.import_module("onnx")  # optional dependency, loaded to build the graph
    except ImportError as exc:
        raise EmbedderError(f"building the MPNet model needs onnx; install with: {ONNX_HINT}") from exc
    return bytes(_Builder(onnx, weights, config).model().SerializeToString())


class _Builder:
    """Writes the nodes and initializers of the graph."""

    def __init__(self, onnx: Any, weights: Mapping[str, Array], config: MPNetConfig) -> None:
        self.onnx = onnx
        self.helper = onnx.helper
        self.weights = weights
        self.config = config
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.counter = 0

    def weight(self, name: str, shape: tuple[int, ...], transpose: bool = False) -> str:
        """An initializer from a checkpoint tensor (``shape`` as stored), optionally transposed."""
        array = self.weights.get(name)
        if array is None:
            raise EmbedderError(f"the MPNet weights lack {name}")
        if tuple(array.shape) != shape:
            raise EmbedderError(f"the MPNet weight {name} has shape {tuple(array.shape)}, expected {shape}")
        value = np.ascontiguousarray(array.T if transpose else array, dtype=np.float32)
        return self.constant(value, name)

    def constant(self, value: Array, name: str | None = None) -> str:
        name = name or self.fresh("const")
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        out = self.fresh(kind.lower())
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], **attributes))
        return out

    def linear(self, x: str, prefix: str, rows: int, cols: int) -> str:
        """``x @ W.T + b`` for a checkpoint Linear of ``rows`` outputs and ``cols`` inputs."""
        weight = self.weight(f"{prefix}.weight", (rows, cols), transpose=True)
        return self.op("Add", self.op("MatMul", x, weight), self.weight(f"{prefix}.bias", (rows,)))

    def layer_norm(self, x: str, prefix: str) -> str:
        hidden = self.config.hidden
        scale, bias = self.weight(f"{prefix}.weight", (hidden,)), self.weight(f"{prefix}.bias", (hidden,))
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=self.config.eps)

    def ints(self, *values: int) -> str:
        return self.constant(np.array(values, dtype=np.int64))

    def model(self) -> Any:
        c = self.config
        ids, mask = "input_ids", "attention_mask"
        mask_f = self.op("Cast", mask, to=self.onnx.TensorProto.FLOAT)
        # positions: pad_token_id + 1, + 2, ... over the real tokens (MPNet's own numbering)
        counted = self.op("Mul", self.op("CumSum", mask, self.ints(1)), mask)
        positions = self.op("Add", counted, self.ints(c.pad_token_id))
        words = self.op("Gather", self.weight("embeddings.word_embeddings.weight", self._vocab()), ids)
        table = self.weight("embeddings.position_embeddings.weight", (c.max_positions, c.hidden))
        placed = self.op("Gather", table, positions)
        x = self.layer_norm(self.op("Add", words, placed), "embeddings.LayerNorm")
        # additive mask (batch, 1, 1, tokens): 0 for real tokens, the float32 minimum for padding
        minimum = self.constant(np.array(np.finfo(np.float32).min, dtype=np.float32))
        padding = self.op("Mul", self.op("Sub", self.constant(np.array(1.0, dtype=np.float32)), mask_f), minimum)
        additive = self.op("Unsqueeze", padding, self.ints(1, 2))
        bias = self.position_bias(ids)
        for index in range(c.layers):
            x = self.layer(x, f"encoder.layer.{index}", self.op("Add", bias, additive))
        self.nodes.append(self.helper.make_node("Identity", [x], ["last_hidden_state"]))
        graph = self.helper.make_graph(
            self.nodes,
            "mpnet",
            [
                self.helper.make_tensor_value_info(ids, self.onnx.TensorProto.INT64, ["batch", "tokens"]),
                self.helper.make_tensor_value_info(mask, self.onnx.TensorProto.INT64, ["batch", "tokens"]),
            ],
            [
                self.helper.make_tensor_value_info(
                    "last_hidden_state", self.onnx.TensorProto.FLOAT, ["batch", "tokens", c.hidden]
                )
            ],
            self.initializers,
        )
        model = self.helper.make_model(
            graph, opset_imports=[self.helper.make_opsetid("", OPSET)], producer_name="engram", ir_version=IR_VERSION
        )
        return model

    def _vocab(self) -> tuple[int, int]:
        """The word embeddings' shape: (the checkpoint's vocabulary size, hidden)."""
        found = self.weights.get("embeddings.word_embeddings.weight")
        rows = int(found.shape[0]) if found is not None and found.ndim == 2 else 0
        return (rows, self.config.hidden)

    def position_bias(self, ids: str) -> str:
        """The relative position bias ``(1, heads, tokens, tokens)``, shared by every layer."""
        c = self.config
        table = self.constant(relative_position_buckets(c.max_tokens, c.buckets).astype(np.int32))
        length = self.op("Slice", self.op("Shape", ids), self.ints(1), self.ints(2))
        square = self.op("Concat", length, length, axis=0)
        window = self.op("Slice", table, self.ints(0, 0), square, self.ints(0, 1))
        per_head = self.weight("encoder.relative_attention_bias.weight", (c.buckets, c.heads))
        gathered = self.op("Gather", per_head, window)  # (tokens, tokens, heads)
        return self.op("Unsqueeze", self.op("Transpose", gathered, perm=[2, 0, 1]), self.ints(0))

    def layer(self, x: str, prefix: str, bias: str) -> str:
        c = self.config
        size = c.hidden // c.heads
        split = self.ints(0, 0, c.heads, size)

        def heads(name: str, perm: list[int]) -> str:
            projected = self.linear(x, f"{prefix}.attention.attn.{name}", c.hidden, c.hidden)
            return self.op("Transpose", self.op("Reshape", projected, split), perm=perm)

        query, key, value = heads("q", [0, 2, 1, 3]), heads("k", [0, 2, 3, 1]), heads("v", [0, 2, 1, 3])
        scale = self.constant(np.array(1.0 / math.sqrt(size), dtype=np.float32))
        scores = self.op("Add", self.op("Mul", self.op("MatMul", query, key), scale), bias)
        context = self.op("MatMul", self.op("Softmax", scores, axis=-1), value)
        merged = self.op("Reshape", self.op("Transpose", context, perm=[0, 2, 1, 3]), self.ints(0, 0, c.hidden))
        attended = self.linear(merged, f"{prefix}.attention.attn.o", c.hidden, c.hidden)
        x = self.layer_norm(self.op("Add", attended, x), f"{prefix}.attention.LayerNorm")
        inner = self.linear(x, f"{prefix}.intermediate.dense", c.intermediate, c.hidden)
        root_half = self.constant(np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
        half = self.constant(np.array(0.5, dtype=np.float32))
        one = self.constant(np.array(1.0, dtype=np.float32))
        erf = self.op("Erf", self.op("Mul", inner, root_half))
        activated = self.op("Mul", self.op("Mul", inner, half), self.op("Add", erf, one))
        out = self.linear(activated, f"{prefix}.output.dense", c.hidden, c.intermediate)
        return self.layer_norm(self.op("Add", out, x), f"{prefix}.output.LayerNorm")
