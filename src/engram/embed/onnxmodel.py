"""Any local sentence-transformers-style ONNX model, by path: ``embedder="onnx:<dir>"``.

A model directory holds an ONNX file (``model.onnx`` or ``onnx/model.onnx``) and its ``tokenizer.json``.
The pipeline is sentence-transformers': pooling as ``1_Pooling/config.json`` says (mean when it is
absent), at most ``max_seq_length`` tokens (``sentence_bert_config.json``, else the tokenizer's truncation,
else ``tokenizer_config.json``'s ``model_max_length``, else 512), L2 normalisation. The vector length is
the model's output width. A model whose first output is already one vector per text (``sentence_embedding``)
is used as is.

The model id recorded with every vector names the model (the directory's name unless given) and carries
the sha256 of the ONNX file and of the tokenizer, the pooling and the token limit: two files that differ
never share vectors, and a file changed after the embedder was made is refused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engram.embed import onnxrun
from engram.embed.base import Vectors, check_texts, normalize_rows, require_positive
from engram.errors import ConfigError, EmbedderError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: Where a model directory's ONNX file may be, in the order looked for.
MODEL_FILES = ("model.onnx", "onnx/model.onnx")
#: The token limit when neither the model's files nor the caller say one.
DEFAULT_MAX_TOKENS = 512
#: ``tokenizer_config.json`` says this (or more) when it means "no limit".
_UNLIMITED = 1_000_000


@dataclass(frozen=True)
class ModelFiles:
    """The files of a local model directory, found and hashed: shared by ONNX embedders and rerankers."""

    directory: Path
    model: Path
    tokenizer: Path
    model_sha256: str
    tokenizer_sha256: str

    @classmethod
    def find(cls, directory: str | Path, what: str) -> ModelFiles:
        """Find the ONNX file and ``tokenizer.json`` of ``directory``; :class:`ConfigError` when absent."""
        root = Path(directory).expanduser()
        if not root.is_dir():
            raise ConfigError(f"{what} directory {str(root)!r} does not exist or is not a directory")
        model = next((root / name for name in MODEL_FILES if (root / name).is_file()), None)
        if model is None:
            raise ConfigError(f"{what} directory {str(root)!r} holds no {' or '.join(MODEL_FILES)}")
        tokenizer = next((p for p in (root / "tokenizer.json", model.parent / "tokenizer.json") if p.is_file()), None)
        if tokenizer is None:
            raise ConfigError(f"{what} directory {str(root)!r} holds no tokenizer.json")
        return cls(root.resolve(), model, tokenizer, onnxrun.sha256_file(model), onnxrun.sha256_file(tokenizer))

    def json(self, name: str) -> dict[str, Any]:
        """A JSON file of the directory as a dict ({} when absent); :class:`ConfigError` when unreadable."""
        path = self.directory / name
        if not path.is_file():
            return {}
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        return found if isinstance(found, dict) else {}

    def max_tokens(self) -> int:
        """The model's token limit, from its own files (see the module's docstring)."""
        for found in (
            self.json("sentence_bert_config.json").get("max_seq_length"),
            (self.json("tokenizer.json").get("truncation") or {}).get("max_length"),
            self.json("tokenizer_config.json").get("model_max_length"),
        ):
            if isinstance(found, int) and not isinstance(found, bool) and 0 < found < _UNLIMITED:
                return found
        return DEFAULT_MAX_TOKENS

    def load(self, threads: int, max_tokens: int) -> tuple[Any, Tokenizer]:
        """The onnxruntime session and the tokenizer, refused when a file changed since :meth:`find`."""
        fix = "it was replaced after this model was opened"
        model = onnxrun.read_verified(self.model, self.model_sha256, fix)
        tokenizer = onnxrun.read_verified(self.tokenizer, self.tokenizer_sha256, fix)
        return onnxrun.load_session(model, threads, self.model), onnxrun.load_tokenizer(
            tokenizer, max_tokens, self.tokenizer
        )


def pooling_mode(files: ModelFiles) -> str:
    """The pooling ``1_Pooling/config.json`` asks for (mean when absent); :class:`ConfigError` for one this
    runner does not implement."""
    config = files.json("1_Pooling/config.json")
    if not config:
        return "mean"
    asked = sorted(key for key, value in config.items() if key.startswith("pooling_mode_") and value is True)
    known = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}
    if len(asked) != 1 or asked[0] not in known:
        raise ConfigError(
            f"{files.directory}/1_Pooling/config.json asks for pooling {asked}; engram runs exactly one of "
            f"{', '.join(onnxrun.POOLINGS)}"
        )
    return known[asked[0]]


@dataclass(frozen=True)
class _Loaded:
    session: Any  # onnxruntime.InferenceSession (untyped library)
    tokenizer: Tokenizer
    inputs: set[str]
    dim: int


class OnnxEmbedder:
    """A local sentence-transformers-style ONNX model on onnxruntime, fully offline.

    Construction finds and hashes the files; the model loads on the first :meth:`embed` (or :attr:`dim`,
    or :meth:`load`). Vectors are unit rows, in the order given.

    Args:
        directory: the model directory (see the module's docstring).
        name: the model's name in its id (default: the directory's name); the fusion weights of a hybrid
            search are chosen by it (:func:`engram.index.ranking.fusion_weights`).
        max_tokens: cut texts to this many tokens instead of the model's own limit.
        threads: onnxruntime intra-op threads.
        batch_size: texts per model run.

    Raises:
        ConfigError: the directory, its ONNX file or its tokenizer is missing, a setting is bad, or the
            pooling is one engram does not run.
        EmbedderError: onnxruntime or tokenizers is not installed.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        name: str | None = None,
        max_tokens: int | None = None,
        threads: int = 1,
        batch_size: int = 32,
    ) -> None:
        self._threads = require_positive("threads", threads)
        self._batch_size = require_positive("batch_size", batch_size)
        onnxrun.require_runtime("an ONNX embedder")
        self._files = ModelFiles.find(directory, "embedding model")
        limit = self._files.max_tokens() if max_tokens is None else require_positive("max_tokens", max_tokens)
        self._max_tokens = limit
        self._pooling = pooling_mode(self._files)
        self._name = name or self._files.directory.name
        if "/" in self._name or not self._name.strip():
            raise ConfigError(f"model name {self._name!r} must be non-empty and hold no '/'")
        self._model_id = (
            f"{self._name}/onnx-sha256:{self._files.model_sha256[:16]}"
            f"+tokenizer-sha256:{self._files.tokenizer_sha256[:16]}+{self._pooling}+{self._max_tokens}"
        )
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``<name>/onnx-sha256:<16 hex>+tokenizer-sha256:<16 hex>+<pooling>+<max tokens>``."""
        return self._model_id

    @property
    def spec(self) -> str:
        """``onnx:<absolute directory>``: the spec that makes this embedder again."""
        return f"onnx:{self._files.directory}"

    @property
    def dim(self) -> int:
        """The model's output width (loads the model)."""
        return self._get_loaded().dim

    @property
    def files(self) -> ModelFiles:
        """The model's files and their hashes."""
        return self._files

    def load(self) -> None:
        """Load and verify the model now rather than on first use."""
        self._get_loaded()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into unit rows of shape ``(len(texts), dim)``, in the order given."""
        items = check_texts(texts)
        loaded = self._get_loaded()
        result = np.zeros((len(items), loaded.dim), dtype=np.float32)
        encodings = [loaded.tokenizer.encode(text) for text in items]  # one thread: no rayon pool, no fork warning
        for rows, ids, types, mask in onnxrun.batches(encodings, self._batch_size):
            result[rows] = self._run(loaded, ids, types, mask)
        return result

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a vector of shape ``(dim,)``."""
        vector: Vectors = self.embed([text])[0]
        return vector

    def _run(self, loaded: _Loaded, ids: onnxrun.Tokens, types: onnxrun.Tokens, mask: onnxrun.Tokens) -> Vectors:
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out = onnxrun.run(loaded.session, {k: v for k, v in feeds.items() if k in loaded.inputs}, self._files.model)
        if out.ndim == 3 and out.shape[:2] == ids.shape:
            out = onnxrun.pool(out, mask, self._pooling)
        if out.shape != (len(ids), loaded.dim):
            raise EmbedderError(
                f"the ONNX model {self._files.model} returned shape {out.shape}, not (batch, tokens, {loaded.dim}) "
                f"or (batch, {loaded.dim})"
            )
        return normalize_rows(out)

    def _get_loaded(self) -> _Loaded:
        loaded = self._loaded
        if loaded is None:
            with self._lock:
                if self._loaded is None:
                    self._loaded = self._load()
                loaded = self._loaded
        return loaded

    def _load(self) -> _Loaded:
        session, tokenizer = self._files.load(self._threads, self._max_tokens)
        inputs = onnxrun.input_names(session)
        if not {"input_ids", "attention_mask"} <= inputs:
            raise EmbedderError(f"the ONNX model {self._files.model} does not take input_ids and attention_mask")
        width = session.get_outputs()[0].shape[-1]
        if not isinstance(width, int):  # a symbolic width: run one tiny input to learn it
            probe = np.ones((1, 1), dtype=np.int64)
            feeds = {"input_ids": probe, "attention_mask": probe, "token_type_ids": np.zeros_like(probe)}
            width = onnxrun.run(session, {k: v for k, v in feeds.items() if k in inputs}, self._files.model).shape[-1]
        return _Loaded(session, tokenizer, inputs, int(width))
