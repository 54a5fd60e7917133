"""The offline extractor: rules plus embeddings, no model server, so the writer works out of the box.

From each sentence of the chosen speakers' turns it keeps durable first-person statements: facts ("I live in
Lyon", "my daughter is 6"), preferences ("I prefer tabs") and decisions ("we decided to use PostgreSQL").
Questions, greetings and short filler are skipped. A candidate is compared with the target's memories by
embedding similarity: a near-duplicate is not written again; one about the same subject (``my favourite
colour is ...``, ``I live in ...``) supersedes the older memory (an update, at its version).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engram.embed import Embedder, HashingEmbedder
from engram.errors import StaleMemoryError
from engram.writer.conversations import Turn
from engram.writer.extract import ExtractRequest, MemoryNote, Workspace

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|we|we're|we've|our|ours|let's)\b", re.IGNORECASE)
_PREFERENCE = re.compile(
    r"\b(i|we)\s+(really\s+|much\s+|do(?:n't| not)\s+)?(love|like|enjoy|prefer|hate|dislike|adore|can't stand)\b"
    r"|\bmy\s+favou?rite\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(we|i)\s+(have\s+)?(decided|agreed|chose|settled on|will use|are going to|'re going to|plan to|will go with)\b"
    r"|\blet's\s+(use|go with|switch|keep|stick)\b|\bwe(?:'ll| will)\b",
    re.IGNORECASE,
)
_SUBJECTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bmy\s+((?:favou?rite\s+)?[a-z]+(?:\s+[a-z]+)?)\s+(?:is|are|was)\b", re.IGNORECASE), "my {0}"),
    (re.compile(r"\bi\s+(?:now\s+)?(?:live|moved|relocated)\b", re.IGNORECASE), "home"),
    (re.compile(r"\bi\s+(?:now\s+)?work(?:\s+(?:as|at|for))\b", re.IGNORECASE), "work"),
    (re.compile(r"\bi(?:'m| am)\s+(\d{1,3})\s+years?\s+old\b", re.IGNORECASE), "age"),
    (re.compile(r"\bmy\s+name\s+is\b", re.IGNORECASE), "name"),
)
_FILLER = re.compile(
    r"^(hi|hey|hello|thanks|thank you|ok|okay|sure|great|cool|wow|lol|yes|no|bye|good (morning|night))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A statement worth remembering, with its kind, subject (for superseding) and source message id."""

    text: str
    kind: str
    subject: str | None
    message_id: str


def candidates(turns: Sequence[Turn], roles: Sequence[str], min_words: int = 4) -> list[Candidate]:
    """The durable first-person statements in ``turns`` spoken by ``roles``, in order."""
    out: list[Candidate] = []
    for turn in turns:
        if turn.role not in roles or turn.status != "completed":
            continue
        for raw in _SENTENCE.split(turn.text):
            sentence = raw.strip().strip("\"'")
            if (
                len(sentence.split()) < min_words
                or sentence.endswith("?")
                or (_FILLER.match(sentence) and len(sentence.split()) < 7)
                or not _FIRST_PERSON.search(sentence)
                or "[REDACTED" in sentence
            ):
                continue
            kind = (
                "preference" if _PREFERENCE.search(sentence) else "decision" if _DECISION.search(sentence) else "fact"
            )
            subject = None
            for pattern, template in _SUBJECTS:
                match = pattern.search(sentence)
                if match:
                    subject = template.format(*(g.lower() for g in match.groups()))
                    break
            if subject is not None and turn.name:
                subject = f"{turn.name}: {subject}"
            text = f"{turn.name}: {sentence}" if turn.name else sentence
            out.append(Candidate(text, kind, subject, turn.message_id))
    return out


class OfflineExtractor:
    """Rule- and embedding-based extraction (see the module docstring); needs no model server.

    Args:
        embedder: the embedder used to compare a candidate with existing memories (default: the no-model
            hashing embedder; pass the store's embedder for semantic de-duplication).
        roles: whose turns are mined (default the user's; add ``"assistant"`` when both sides are people).
        duplicate_threshold: cosine similarity at or above which a candidate repeats an existing memory.
    """

    model = "offline"

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        roles: Sequence[str] = ("user",),
        duplicate_threshold: float = 0.9,
        min_words: int = 4,
    ) -> None:
        self.embedder = embedder if embedder is not None else HashingEmbedder()
        self.roles = tuple(roles)
        self.duplicate_threshold = duplicate_threshold
        self.min_words = min_words

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        """Write the step's durable statements, skipping near-duplicates and superseding same-subject memories."""
        found = candidates(request.turns, self.roles, self.min_words)
        if not found:
            workspace.no_new_memories("no durable first-person statement")
            return
        vectors = np.asarray(self.embedder.embed([c.text for c in found]), dtype=np.float32)
        written: list[tuple[np.ndarray, str]] = []
        for candidate, vector in zip(found, vectors, strict=True):
            if any(float(vector @ other) >= self.duplicate_threshold for other, _ in written):
                continue
            related = workspace.search(candidate.text, 5)
            if self._repeats(vector, related):
                continue
            same = next((n for n in related if candidate.subject and n.subject == candidate.subject), None)
            try:
                workspace.write(
                    candidate.text,
                    key=None if same is None else same.key,
                    expected_version=None if same is None else same.version,
                    sources=[candidate.message_id],
                    kind=candidate.kind,
                    subject=candidate.subject,
                )
            except StaleMemoryError:  # changed under us within this run: keep the newer one, add ours beside it
                workspace.write(candidate.text, sources=[candidate.message_id], kind=candidate.kind)
            written.append((vector, candidate.text))

    def _repeats(self, vector: np.ndarray, notes: list[MemoryNote]) -> bool:
        if not notes:
            return False
        others = np.asarray(self.embedder.embed([n.text for n in notes]), dtype=np.float32)
        return bool(float(np.max(others @ vector)) >= self.duplicate_threshold)
