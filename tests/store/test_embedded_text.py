"""What is embedded: by default only a memory's text; its dates and ids are still matched by keyword. Both engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import engram
from engram.embed import HashingEmbedder
from engram.index import embedtext
from engram.index.embedtext import embedded_text, memory_text
from engram.index.paths import document_text
from engram.store import Memory
from engram.store import indexing as store_indexing
from engram.store.transfer import export_items

NS = ("users", "alice")
NOTE = {"text": "Alice drinks green tea every morning", "date": "8 May 2023", "source": "msg-4711", "score": 3}


def cosine(a: str, b: str) -> float:
    vectors = np.asarray(HashingEmbedder().embed([a, b]), dtype=np.float64)
    return float(vectors[0] @ vectors[1] / np.linalg.norm(vectors[0]) / np.linalg.norm(vectors[1]))


def semantic_score(mem: Memory, query: str, key: str) -> float:
    found = {item.key: item.score for item in mem.search(NS, query, mode="semantic", min_score=-1.0, limit=50)}
    score = found[key]
    assert score is not None
    return score


def test_rules() -> None:
    whole = ("$",)
    indexed = document_text(NOTE, whole)
    assert embedded_text(NOTE, None, whole, indexed) == NOTE["text"]
    assert embedded_text(NOTE, ["text", "date"], whole, "x") == "x"  # the item's own fields: as indexed
    assert embedded_text(NOTE, None, ("text", "date"), "x") == "x"  # the store's own fields: as indexed
    assert embedded_text({"theme": "dark", "owner": "alice"}, None, whole, "dark\nalice") == "dark\nalice"
    assert memory_text({"text": "  ", "content": "from content", "memory": "m"}) == "from content"
    assert memory_text({"memory": "m", "text": 7}) == "m"
    assert memory_text({"text": {"nested": "no"}}) is None


def test_only_the_memory_text_is_embedded_by_default(smem: Memory) -> None:
    smem.put(NS, "tea", NOTE)
    smem.put(NS, "chosen", {**NOTE, "text": "Alice drinks black coffee"}, index=["text", "date"])
    smem.put(NS, "prefs", {"theme": "dark mode", "owner": "alice"})
    # the vector is the text's alone: the same text as a query has cosine 1 (the whole value would be less)
    assert semantic_score(smem, NOTE["text"], "tea") == pytest.approx(1.0, abs=1e-3)
    assert cosine(NOTE["text"], document_text(NOTE, ("$",))) < 0.95
    # an item indexed with its own fields embeds them all, the date too
    chosen = "Alice drinks black coffee\n8 May 2023"
    assert semantic_score(smem, "Alice drinks black coffee", "chosen") == pytest.approx(
        cosine("Alice drinks black coffee", chosen), abs=2e-3
    )
    assert semantic_score(smem, "Alice drinks black coffee", "chosen") < 0.99
    # a value with no memory text embeds all its text
    stored = smem.get(NS, "prefs")
    assert stored is not None
    prefs = document_text(stored.value, ("$",))  # the value as stored (its fields in the store's order)
    assert semantic_score(smem, prefs, "prefs") == pytest.approx(1.0, abs=1e-3)
    # the keyword index still reads the date and the id
    assert [item.key for item in smem.search(NS, "msg-4711", mode="keyword")] == ["tea"]
    assert {item.key for item in smem.search(NS, "2023", mode="keyword")} == {"tea", "chosen"}


def test_a_store_with_its_own_fields_embeds_them(tmp_path: Path) -> None:
    mem = engram.open(":memory:", embedder=HashingEmbedder(), index_fields=("text", "date"))
    mem.put(NS, "tea", NOTE)
    assert semantic_score(mem, NOTE["text"], "tea") == pytest.approx(
        cosine(NOTE["text"], f"{NOTE['text']}\n{NOTE['date']}"), abs=2e-3
    )
    mem.close()


def test_an_export_carries_the_vectors_of_the_embedded_text(tmp_path: Path) -> None:
    source = engram.open(":memory:", embedder=HashingEmbedder())
    source.put(NS, "tea", NOTE)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w") as out:
        export_items(source, out, embeddings=True)
    lines = [json.loads(line) for line in dump.read_text().splitlines()[1:]]
    (item,) = [line for line in lines if line.get("key") == "tea"]
    vector = np.asarray(item["embedding"], dtype=np.float64)
    expected = np.asarray(HashingEmbedder().embed([NOTE["text"]])[0], dtype=np.float64)
    assert float(vector @ expected / np.linalg.norm(vector) / np.linalg.norm(expected)) == pytest.approx(1.0, abs=1e-4)
    source.close()


def test_snapshots_are_keyed_by_what_is_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = engram.open(f"sqlite:///{tmp_path / 'mem.db'}", embedder=HashingEmbedder())
    pool = mem.pool
    pool.snapshots = tmp_path / "snapshots"
    before = pool._snapshot_path("main")
    monkeypatch.setattr(store_indexing, "EMBED_TEXT_VERSION", embedtext.EMBED_TEXT_VERSION + "-next")
    assert pool._snapshot_path("main") != before
    mem.close()
