"""Running local ONNX text models on onnxruntime: shared by every ONNX embedder and reranker.

Files are read once and hashed; the session runs on the CPU with a fixed number of threads; texts are
tokenised one by one (no tokenizers thread pool), sorted by length and batched so padding stays small.
onnxruntime and tokenizers are optional dependencies, imported when a model is loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from engram.errors import EmbedderError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

#: How to install what every ONNX model needs.
RUNTIME_HINT = "pip install 'engram[embeddings]'  (or: pip install onnxruntime tokenizers)"
#: The pooling modes of sentence-transformers' ``1_Pooling/config.json`` this runner implements.
POOLINGS = ("mean", "cls", "max")

Tokens = npt.NDArray[np.int64]


def require_runtime(what: str, hint: str = RUNTIME_HINT) -> None:
    """Raise :class:`EmbedderError` naming the install command when onnxruntime or tokenizers is missing."""
    missing = [name for name in ("onnxruntime", "tokenizers") if importlib.util.find_spec(name) is None]
    if missing:
        raise EmbedderError(f"{what} needs {' and '.join(missing)}; install with: {hint}")


def read(path: Path) -> bytes:
    """The bytes of ``path``; :class:`EmbedderError` when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EmbedderError(f"cannot read {path}: {exc}") from exc


def sha256_file(path: Path) -> str:
    """The sha256 of a file, in hex."""
    return hashlib.sha256(read(path)).hexdigest()


def read_verified(path: Path, expected: str, fix: str) -> bytes:
    """The bytes of ``path``, refused unless their sha256 is ``expected`` (``fix`` says what to do)."""
    data = read(path)
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise EmbedderError(f"model file {path} has sha256 {actual}, expected {expected}: {fix}")
    return data


def load_tokenizer(data: bytes, max_tokens: int, where: Path) -> Tokenizer:
    """A tokenizer from the bytes of a ``tokenizer.json``: no padding, truncated at ``max_tokens``."""
    from tokenizers import Tokenizer  # optional dependency, loaded with the model

    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_tokens)
    except Exception as exc:  # tokenizers raises untyped errors
        raise EmbedderError(f"cannot load the tokenizer {where}: {exc}") from exc
    return tokenizer


def load_session(model: bytes, threads: int, where: Path) -> Any:
    """An onnxruntime CPU session (untyped library) over the bytes of an ONNX file."""
    ort: Any = importlib.import_module("onnxruntime")  # optional and untyped: loaded with the model
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise EmbedderError(f"cannot load the ONNX model {where}: {exc}") from exc


def input_names(session: Any) -> set[str]:
    """The names of a session's inputs."""
    return {item.name for item in session.get_inputs()}


def batches(encodings: Sequence[Encoding], batch_size: int) -> Iterator[tuple[Tokens, Tokens, Tokens, Tokens]]:
    """(rows, ids, type ids, attention mask) per batch, texts sorted by token count so padding stays small;
    ``rows`` says which input each row of the batch is."""
    lengths = np.array([len(encoding.ids) for encoding in encodings])
    order = np.argsort(lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = int(lengths[rows].max())
        ids = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for row, index in enumerate(rows):
            n = lengths[index]
            ids[row, :n] = encodings[index].ids
            types[row, :n] = encodings[index].type_ids
            mask[row, :n] = 1
        yield rows, ids, types, mask


def run(session: Any, feeds: dict[str, Tokens], where: Path, output: int = 0) -> npt.NDArray[np.float32]:
    """One run of a session: the chosen output as float32; :class:`EmbedderError` when the model fails."""
    try:
        return np.asarray(session.run(None, feeds)[output], dtype=np.float32)
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise EmbedderError(f"the ONNX model {where} failed: {exc}") from exc


def pool(hidden: npt.NDArray[np.float32], mask: Tokens, mode: str = "mean") -> npt.NDArray[np.float32]:
    """Token vectors ``(batch, tokens, dim)`` pooled into one vector per row over the attention mask."""
    if mode == "cls":
        return np.asarray(hidden[:, 0, :], dtype=np.float32)
    weights = mask[:, :, None].astype(np.float32)
    if mode == "max":
        masked = np.where(weights > 0, hidden, -np.inf)
        return np.asarray(np.max(masked, axis=1), dtype=np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return np.asarray(pooled, dtype=np.float32)
