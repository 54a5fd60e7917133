"""The offline extractor: rules plus embeddings, no model server, so the writer works out of the box.

From each turn of the chosen speakers it keeps what is worth remembering and drops the rest:

- **Prose only**: code blocks, logs, stack traces, tables and blobs are skipped (:mod:`engram.writer.sentences`); a
  turn that comes in parts (larger than the run's turn budget) is joined again at the cut, so no memory starts or
  ends mid-word, and a sentence is skipped rather than shortened.
- **Statements only**: questions, filler ("Thanks for sharing!", "I totally agree, Mel.") and what is said to the
  listener ("You'd be a great counselor!") are dropped; short facts ("I love sushi.", "I'm vegan.") are kept. Each
  statement about the speaker starts a memory, and the sentences that go on about it stay with it (see
  :func:`group`); a statement on a subject that can change ("I live in ...", "I like ...", "my favourite ... is
  ...") is a memory of its own.
- **Dates made absolute**: "yesterday", "last Friday", "two weeks ago" are resolved against the turn's time
  (:mod:`engram.writer.dates`).
- **Once**: statements of one step that say the same thing (embedding similarity at or above
  ``duplicate_threshold``, or the same content words; the same polarity and numbers) are one memory citing every
  message; one that repeats a stored memory is not written.
- **Reversals supersede**: a statement on a subject an older memory has ("I moved to Munich" after "I live in
  Berlin", "I don't like coffee anymore" after "I like coffee") updates that memory, at its version.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from engram.embed import Embedder, HashingEmbedder
from engram.errors import StaleMemoryError
from engram.writer.conversations import Turn
from engram.writer.dates import resolve
from engram.writer.extract import ExtractRequest, MemoryNote, Workspace
from engram.writer.sentences import (
    MAX_SENTENCE_CHARS,
    addresses_listener,
    complete,
    content_words,
    is_filler,
    pronoun_i,
    prose_lines,
    split_sentences,
)

_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|much\s+|also\s+|still\s+|do(?:n't| not)\s+|no longer\s+)?"
    r"(?:love|like|enjoy|prefer|hate|dislike|adore|can't stand)\b|\bmy\s+favou?rite\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:we|i)\s+(?:have\s+)?(?:decided|agreed|chose|settled on|will use|are going to|'re going to|plan to|"
    r"will go with)\b|\blet's\s+(?:use|go with|switch|keep|stick)\b|\bwe(?:'ll| will)\b",
    re.IGNORECASE,
)
_OBJECT_END = re.compile(
    r"[,.;:!?()\"]|\s(?:and|but|or|because|since|so|when|with|at|in|on|for|from|to|as|than|anymore|any more|"
    r"now|these days|nowadays|too|very|much|a lot|so much|more|at all)\b",
    re.IGNORECASE,
)
_LIKES = re.compile(
    r"\bI\s+(?:really\s+|also\s+|still\s+|truly\s+|absolutely\s+)?(?:(?:do(?:n't|n\u2019t| not)|no longer|never)\s+"
    r"(?:really\s+)?)?(?:love|like|enjoy|adore|hate|dislike|can't stand|stopped (?:liking|loving|enjoying))\s+"
    r"(?!to\b|it\b|that\b|this\b|them\b|you\b|how\b|when\b|the way\b)(.+)",
    re.IGNORECASE,
)
_HOME = re.compile(
    r"\bI\s+(?:(?:now|still|currently)\s+)?live\s+(?:in|at|near|on|by)\b"
    r"|\bI\s+(?:(?:just|recently|finally|have|'ve)\s+)*(?:moved|relocated)\s+(?:back\s+)?(?:to|into|from|out|away|abroad|here)\b"
    r"|\bI(?:'m| am)\s+(?:now\s+)?(?:based|living)\s+in\b",
    re.IGNORECASE,
)
_WORK = re.compile(
    r"\bI\s+(?:now\s+|still\s+)?work(?:\s+(?:as|at|for))\b|\bI\s+(?:quit|left)\s+my\s+job\b"
    r"|\bI\s+got\s+a\s+(?:new\s+)?job\b",
    re.IGNORECASE,
)
_AGE = re.compile(r"\bI(?:'m| am)\s+\d{1,3}\s+years?\s+old\b|\bI\s+(?:just\s+)?turned\s+\d{1,3}\b", re.IGNORECASE)
_SUBJECTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bmy\s+(favou?rite\s+[a-z]+(?:\s+[a-z]+)?)\s+(?:is|are|was)\b", re.IGNORECASE), "my {0}"),
    (re.compile(r"\bmy\s+(name|age|birthday|address|email|phone number|job|title)\s+is\b", re.IGNORECASE), "{0}"),
    (_HOME, "home"),
    (_WORK, "work"),
    (_AGE, "age"),
)
_SUBJECT_WORDS = {
    "home": "I live in lives living moved to relocated based home",
    "work": "I work as at for job working quit left",
    "age": "I am years old age turned",
}
_NEGATED = re.compile(r"\b(?:not|no longer|n't|never|anymore|any more|stopped|quit|hate|dislike)\b", re.IGNORECASE)
_SELF = re.compile(
    r"^(?:(?:so|and|but|also|well|yeah|yes|oh|actually|honestly|btw|plus|now|then|anyway|recently|lately|"
    r"last \w+|yesterday|today|this \w+)[,!]?\s+)*(?:I|I'm|I've|I'd|I'll|My|We|We're|We've|We'd|We'll|Our)\b(?![.)])",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\d+(?:[.,]\d+)?|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|"
    r"forty|fifty|hundred|thousand|million|first|second|third|once|twice)\b"
)
#: A statement with a question tag ("Sunflowers mean warmth, right?") is a statement.
_TAG_QUESTION = re.compile(r",\s*(?:right|isn't it|aren't they|don't you think|you know)\?$", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an|my|some|all|any)\s+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A statement worth remembering, with its kind, subject (for superseding) and source message ids."""

    text: str
    kind: str
    subject: str | None
    message_id: str
    sources: tuple[str, ...] = ()

    @property
    def cited(self) -> tuple[str, ...]:
        """Every message id the statement comes from (its own first)."""
        return tuple(dict.fromkeys((self.message_id, *self.sources)))


def subject_of(sentence: str) -> str | None:
    """The subject a statement sets, which a later statement on it supersedes (``home``, ``work``, ``age``, ``my
    favourite colour``, ``likes coffee``, ...), or None."""
    for pattern, template in _SUBJECTS:
        match = pattern.search(sentence)
        if match:
            return template.format(*(g.lower() for g in match.groups()))
    likes = _LIKES.search(sentence)
    if likes:
        thing = _OBJECT_END.split(" " + likes.group(1), maxsplit=1)[0].strip()
        thing = _ARTICLE.sub("", thing).lower()
        thing = " ".join(thing.split()[:3])
        if thing:
            return f"likes {thing}"
    return None


def subject_query(subject: str) -> str:
    """A search query that finds the memories on ``subject`` (as :func:`subject_of` names it, after the speaker's
    name when there is one), whatever their wording."""
    speaker, _, topic = subject.rpartition(": ")
    words = _SUBJECT_WORDS.get(topic)
    if words is None:
        words = f"like love enjoy {topic[6:]}" if topic.startswith("likes ") else topic
    return f"{speaker} {words}".strip()


def kind_of(sentence: str) -> str:
    """``preference``, ``decision`` or ``fact``."""
    return "preference" if _PREFERENCE.search(sentence) else "decision" if _DECISION.search(sentence) else "fact"


def statements(text: str, names: Collection[str] = (), *, partial_start: bool = False) -> list[str]:
    """The sentences of ``text`` worth remembering: prose only, no question, no filler, nothing said to the
    listener, none too long to be a statement, no redacted secret. ``partial_start`` drops the first sentence (the
    end of one cut off before ``text``)."""
    out: list[str] = []
    sentences = split_sentences("\n".join(prose_lines(text)))
    for index, raw in enumerate(sentences):
        sentence = _TAG_QUESTION.sub(".", pronoun_i(raw.strip().strip("\"'\u201c\u201d")))
        if index == 0 and partial_start:
            continue
        if (
            len(sentence) > MAX_SENTENCE_CHARS
            or re.search(r"\?[\"'\u201d\u2019)\]]*$", sentence)
            or "[REDACTED" in sentence
            or is_filler(sentence, names)
            or addresses_listener(sentence)
        ):
            continue
        out.append(sentence)
    return out


def speaks_of_self(sentence: str) -> bool:
    """True when the speaker is the sentence's subject ("I ...", "My sister ...", "We ...", after an opening such as
    "Yeah," or "Last week")."""
    return _SELF.match(sentence) is not None


def group(sentences: Sequence[str]) -> list[tuple[list[str], str | None]]:
    """The sentences of one turn as memories, each with its subject: a sentence about the speaker starts a new
    memory once the current one has one (``I play chess. I own a bicycle.`` are two), the others (``It's special to
    me.``, ``The stories were inspiring.``) stay with the memory they follow; a sentence on a subject (see
    :func:`subject_of`) is a memory of its own."""
    out: list[tuple[list[str], str | None]] = []
    about_self = False
    for sentence in sentences:
        subject = subject_of(sentence)
        mine = speaks_of_self(sentence)
        if subject is not None:
            out.append(([sentence], subject))
            about_self = True
        elif not out or out[-1][1] is not None or (mine and about_self):
            out.append(([sentence], None))
            about_self = mine
        else:
            out[-1][0].append(sentence)
            about_self = about_self or mine
    return out


def candidates(
    turns: Sequence[Turn], roles: Sequence[str], names: Collection[str] = (), *, partial_start: bool = False
) -> list[Candidate]:
    """The statements of ``turns`` spoken by ``roles``, in order, grouped into memories (see :func:`group`), dates
    resolved, prefixed with the speaker's name when the turn has one. ``names`` are words never counted as content
    (the speakers' names are added); ``partial_start``: the first turn starts mid-sentence (see
    :func:`statements`)."""
    known = set(names) | {t.name for t in turns if t.name}
    known |= {n.split()[0] for n in known if n.split()}
    out: list[Candidate] = []
    for index, turn in enumerate(turns):
        if turn.role in roles and turn.status == "completed":
            found = statements(turn.text, known, partial_start=partial_start and index == 0)
            out += [_candidate(turn, body, subject) for body, subject in group(found)]
    return out


def _candidate(turn: Turn, sentences: list[str], subject: str | None) -> Candidate:
    body = resolve(" ".join(sentences), turn.created_at)
    text = f"{turn.name}: {body}" if turn.name else body
    if subject is not None and turn.name:
        subject = f"{turn.name}: {subject}"
    return Candidate(text, kind_of(body), subject, turn.message_id)


class OfflineExtractor:
    """Rule- and embedding-based extraction (see the module docstring); needs no model server.

    Args:
        embedder: the embedder used to compare statements with each other and with existing memories (default:
            the no-model hashing embedder; pass the store's embedder for semantic de-duplication).
        roles: whose turns are mined (default the user's; add ``"assistant"`` when both sides are people).
        duplicate_threshold: cosine similarity at or above which two statements say the same thing (statements
            with the same content words and the same polarity do too).
    """

    model = "offline"

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        roles: Sequence[str] = ("user",),
        duplicate_threshold: float = 0.9,
    ) -> None:
        self.embedder = embedder if embedder is not None else HashingEmbedder()
        self.roles = tuple(roles)
        self.duplicate_threshold = duplicate_threshold
        self._lock = threading.Lock()
        self._cut: dict[tuple[str, str], tuple[str, str | None]] = {}

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        """Write the step's statements once each, skipping repeats of stored memories and superseding memories on
        the same subject.

        A turn larger than the run's turn budget comes in parts, one step each, cut anywhere (even mid-word). A
        lone turn ending mid-sentence in a step that is not the last may be such a part: its unfinished sentence
        is written as a memory of its own and remembered; when the next step starts with the same message, that
        memory is deleted and the sentence is read again, whole."""
        before = len(workspace.actions)
        turns = list(request.turns)
        names = {t.name for t in (*request.context, *turns) if t.name}
        partial = False
        if turns:
            with self._lock:
                cut = self._cut.pop((workspace.run_id, turns[0].message_id), None)
            if cut is not None:
                fragment, key = cut
                turns[0] = _with_text(turns[0], fragment + turns[0].text)
                partial = not fragment  # the cut sentence was too long to keep: its end is not a statement either
                note = None if key is None else workspace.read(key)
                if note is not None:
                    workspace.delete(note.key, note.version)
        held: str | None = None
        last = turns[-1] if turns else None
        if last is not None and len(turns) == 1 and request.step < request.steps - 1 and not complete(last.text):
            start = _last_boundary(last.text)
            held = last.text[start:]
            turns[-1] = _with_text(last, last.text[:start])
        found = candidates(turns, self.roles, names, partial_start=partial)
        tail = None
        if held is not None and last is not None and len(held) <= MAX_SENTENCE_CHARS:
            tail = next(iter(candidates([_with_text(last, held)], self.roles, names)), None)
        written = self._write(found + ([tail] if tail is not None else []), workspace, names)
        if last is not None and held is not None:
            key = written.get(tail) if tail is not None else None
            with self._lock:
                self._cut[(workspace.run_id, last.message_id)] = (held if len(held) <= MAX_SENTENCE_CHARS else "", key)
                while len(self._cut) > 256:
                    self._cut.pop(next(iter(self._cut)))
        if len(workspace.actions) == before:
            workspace.no_new_memories(
                "every statement repeats a stored memory"
                if found or tail is not None
                else "nothing to remember: questions, filler or pasted text only"
            )

    def _write(self, found: list[Candidate], workspace: Workspace, names: Collection[str]) -> dict[Candidate, str]:
        """Write ``found`` (merged, repeats skipped, same subjects superseded); returns each written candidate's key."""
        written: dict[Candidate, str] = {}
        if not found:
            return written
        for candidate, vector in self._merge(found, names):
            related = workspace.search(candidate.text, 5)
            if self._repeats(vector, related, candidate.text, names):
                continue
            if candidate.subject is not None:  # the memory it supersedes may share no word with it: ask by subject
                related += workspace.search(subject_query(candidate.subject), 10)
            same = next((n for n in related if candidate.subject and n.subject == candidate.subject), None)
            try:
                note = workspace.write(
                    candidate.text,
                    key=None if same is None else same.key,
                    expected_version=None if same is None else same.version,
                    sources=candidate.cited,
                    kind=candidate.kind,
                    subject=candidate.subject,
                )
            except StaleMemoryError:  # changed under us within this run: keep the newer one, add ours beside it
                note = workspace.write(candidate.text, sources=candidate.cited, kind=candidate.kind)
            written[candidate] = note.key
        return written

    def _merge(self, found: list[Candidate], names: Collection[str]) -> list[tuple[Candidate, np.ndarray]]:
        """One candidate per group of statements that say the same thing, citing every message of the group."""
        vectors = np.asarray(self.embedder.embed([c.text for c in found]), dtype=np.float32)
        kept: list[tuple[Candidate, np.ndarray]] = []
        for candidate, vector in zip(found, vectors, strict=True):
            for index, (other, other_vector) in enumerate(kept):
                if other.subject == candidate.subject and self._same(
                    float(vector @ other_vector), candidate.text, other.text, names
                ):
                    merged = Candidate(other.text, other.kind, other.subject, other.message_id,
                                       (*other.sources, candidate.message_id))  # fmt: skip
                    kept[index] = (merged, other_vector)
                    break
            else:
                kept.append((candidate, vector))
        return kept

    def _same(self, similarity: float, text: str, other: str, names: Collection[str]) -> bool:
        """Whether two statements say the same thing: the same polarity and numbers, and a similarity at or above
        the threshold or the same content words."""
        if _polarity(text) != _polarity(other) or _numbers(text) != _numbers(other):
            return False
        if similarity >= self.duplicate_threshold:
            return True
        mine, theirs = _content(text, names), _content(other, names)
        return bool(mine) and mine == theirs

    def _repeats(self, vector: np.ndarray, notes: list[MemoryNote], text: str, names: Collection[str]) -> bool:
        if not notes:
            return False
        others = np.asarray(self.embedder.embed([n.text for n in notes]), dtype=np.float32)
        return any(self._same(float(row @ vector), text, n.text, names) for row, n in zip(others, notes, strict=True))


def _content(text: str, names: Collection[str]) -> set[str]:
    return {w.lower() for w in content_words(text, names)}


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text.lower()))


def _polarity(text: str) -> bool:
    return _NEGATED.search(text) is None


def _with_text(turn: Turn, text: str) -> Turn:
    return Turn(turn.conversation_id, turn.seq, turn.role, text, turn.message_id, turn.status, turn.tool_calls,
                turn.name, turn.created_at)  # fmt: skip


def _last_boundary(text: str) -> int:
    """Where the unfinished last sentence of ``text`` starts (after the last sentence end or line break; 0 when
    there is none)."""
    best = 0
    for match in re.finditer(r"[.!?…][\"'\u201d\u2019)\]]*\s+|\n", text):
        best = match.end()
    return best
