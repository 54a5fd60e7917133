"""The one ranking function: raw keyword and vector scores in; scored, ordered, explained results out.

Every search engine (in process: :mod:`engram.index.engine`; PostgreSQL: :mod:`engram.index.pgengine`)
only produces candidates, each with its raw BM25, its cosine, its confidence and its ``updated_at``.
Everything after that happens here, once, with no I/O: fusion, ranking profiles, ``min_score``, the
tie order, paging and ``explain``.

Scores are absolute (docs/adr/0002-score-fusion.md): the same item scores the same for the same query
whatever else the search returns, so a score can be compared across queries and ``min_score`` means
something. Nothing is rescaled within a result set::

    keyword    = tanh(bm25 / ideal)      ideal: the query's BM25 on an average-length item holding
                                         each query term once (the sum of the terms' idfs)
    semantic   = max(cosine, 0)
    similarity = kw * keyword + sem * semantic        (hybrid; keyword or semantic alone in those modes;
                                                     kw, sem by embedder: 0.5, 0.5 for MiniLM, engram.index.fusion)
    score      = w_similarity * similarity + w_confidence * confidence + w_recency * recency
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import EmbedderError, InvalidInputError
from engram.index.corpus import CorpusStats
from engram.index.fusion import DEFAULT_WEIGHTS, KEYWORD_WEIGHT, SEMANTIC_WEIGHT, fusion_weights
from engram.objects import Record

#: Recency exponents are capped here: 0.5 ** 1000 is 0 for ranking (and never underflows).
MAX_HALF_LIVES = 1000.0

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Profile:
    """Weights of the three signals, and the half-life of recency in hours.

    ``score = similarity * s + confidence * c + recency * r`` where recency is
    ``0.5 ** (age_hours / half_life_hours)`` and confidence is the item's ``confidence`` (0.5 if absent).
    """

    similarity: float
    confidence: float = 0.0
    recency: float = 0.0
    half_life_hours: float = 168.0
    name: str = "custom"

    def __post_init__(self) -> None:
        weights = (self.similarity, self.confidence, self.recency)
        if any(w < 0 for w in weights) or not any(weights):
            raise InvalidInputError(f"profile weights must be >= 0 and not all zero, got {weights}")
        if self.half_life_hours <= 0:
            raise InvalidInputError(f"half_life_hours must be > 0, got {self.half_life_hours}")


PROFILES: dict[str, Profile] = {
    "similarity": Profile(1.0, 0.0, 0.0, 168.0, "similarity"),
    "balanced": Profile(0.34, 0.33, 0.33, 168.0, "balanced"),
    "recent": Profile(0.3, 0.1, 0.6, 24.0, "recent"),
    "quality": Profile(0.4, 0.5, 0.1, 720.0, "quality"),
}


def get_profile(profile: str | Profile) -> Profile:
    """A named profile, or a custom :class:`Profile` as is."""
    if isinstance(profile, Profile):
        return profile
    found = PROFILES.get(profile)
    if found is None:
        raise InvalidInputError(f"unknown ranking profile {profile!r}: use {', '.join(PROFILES)} or a Profile(...)")
    return found


@dataclass(frozen=True, slots=True)
class Request:
    """One search as an engine sees it: plain values (the memory API builds it from a ``SearchOp``).

    ``accept`` is the exact filter on an item's value (None: no filter); engines may pre-filter with a
    superset of it, never a subset. ``stats``: corpus statistics to score keywords with instead of the
    engine's own (a fan-out over several repositories passes their sum, :mod:`engram.index.corpus`).
    """

    prefix: tuple[str, ...]
    text: str | None
    mode: str | None = None
    profile: Profile = PROFILES["similarity"]
    limit: int = 10
    offset: int = 0
    min_score: float | None = None
    explain: bool = False
    accept: Callable[[dict[str, Any]], bool] | None = None
    stats: CorpusStats | None = None
    #: Leave out namespaces whose first label starts with ``_`` (the system namespaces services own).
    hide_system: bool = False


@dataclass(frozen=True, slots=True)
class Hit:
    """One result: the item and, for a ranked search, its score and (when asked) its explanation."""

    namespace: tuple[str, ...]
    key: str
    record: Record
    score: float | None = None
    explain: dict[str, Any] | None = None


@dataclass(slots=True)
class Hits:
    """An engine's answer: hits best first, the mode that ran, the mode asked for, why it degraded, and
    how many items of the index still wait for their vectors (``lag``)."""

    hits: list[Hit]
    mode: str
    requested: str
    degraded: str | None = None
    lag: int = 0


@dataclass(frozen=True, slots=True)
class ModePlan:
    """The mode a search runs in, with the query vector when it needs one."""

    mode: str
    requested: str
    vector: Vector | None = None
    degraded: str | None = None


def plan_mode(
    requested: str | None, *, has_embedder: bool, vector_error: str | None, embed: Callable[[], Vector]
) -> ModePlan:
    """Choose the mode: the one asked for (default hybrid with an embedder, else keyword); a hybrid search
    whose embedder fails runs as keyword and says why; a semantic one raises :class:`EmbedderError`."""
    asked = requested or ("hybrid" if has_embedder else "keyword")
    if asked not in ("hybrid", "semantic"):
        return ModePlan(asked, asked)
    try:
        if not has_embedder:
            raise EmbedderError("no embedder is configured for this store")
        if vector_error is not None:
            raise EmbedderError(vector_error)
        return ModePlan(asked, asked, embed())
    except EmbedderError as exc:
        if asked == "semantic":
            raise
        return ModePlan("keyword", asked, None, f"embedder unavailable, ran keyword search instead: {exc}")


@dataclass(frozen=True, slots=True)
class Signals:
    """Raw signals of an engine's candidate positions, as parallel arrays.

    Attributes:
        eligible: positions that may be returned (in scope, not expired, searchable).
        updated: ``updated_at`` in ms (recency and the tie order).
        confidence: each item's confidence in [0, 1].
        bm25: raw BM25 (0 where no query term occurs); None when the mode has no keyword signal.
        cosine: raw cosine of item and query vectors; None when the mode has no vector signal.
        ideal: the query's ideal BM25 (:func:`engram.index.keyword.ideal`).
    """

    eligible: npt.NDArray[np.bool_]
    updated: npt.NDArray[np.int64]
    confidence: npt.NDArray[Any]
    bm25: npt.NDArray[Any] | None = None
    cosine: npt.NDArray[Any] | None = None
    ideal: float = 0.0


def keyword_score(bm25: npt.NDArray[Any], ideal: float) -> npt.NDArray[np.float64]:
    """BM25 on an absolute scale in [0, 1): ``tanh(bm25 / ideal)``.

    About linear up to the query's ideal (0.76 for an average-length item holding every query term
    once), then saturating towards 1 (repeats, shorter items); 0 when no query term occurs.
    """
    raw = np.asarray(bm25, dtype=np.float64)
    return np.tanh(raw / ideal) if ideal > 0 else np.zeros_like(raw)


def semantic_score(cosine: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """Cosine on [0, 1]: as is, negatives (unrelated or opposite) as 0."""
    return np.clip(np.asarray(cosine, dtype=np.float64), 0.0, 1.0)


def recency_score(updated: npt.NDArray[np.int64], now_ms: int, half_life_hours: float) -> npt.NDArray[np.float64]:
    """``0.5 ** (age_hours / half_life_hours)``; an item from the future counts as new."""
    age_hours = np.maximum(now_ms - updated.astype(np.int64), 0) / 3_600_000.0
    return np.power(0.5, np.minimum(age_hours / half_life_hours, MAX_HALF_LIVES))


@dataclass(slots=True)
class Ranking:
    """Scores of the candidates a query returns, and their order and explanations.

    ``positions`` are the engine's positions that have evidence (a query term, or a positive cosine)
    and reach ``min_score``, in increasing order; the other arrays are parallel to them.
    """

    mode: str
    profile: Profile
    positions: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    similarity: npt.NDArray[np.float64]
    updated: npt.NDArray[np.int64]
    confidence: npt.NDArray[np.float64]
    now_ms: int
    ideal: float
    bm25: npt.NDArray[np.float64] | None = None
    keyword: npt.NDArray[np.float64] | None = None
    cosine: npt.NDArray[np.float64] | None = None
    semantic: npt.NDArray[np.float64] | None = None
    embedder: str | None = None
    formula: str = field(default="")

    def order(self, key_of: Callable[[int], bytes], want: int) -> Iterator[int]:
        """Positions best first, ties by tree key (see :func:`best_first`)."""
        return best_first(self.scores, self.updated, self.positions, key_of, want)

    def score(self, position: int) -> float:
        """The score of a returned position."""
        return float(self.scores[self._at(position)])

    def scores_of(self, positions: Sequence[int]) -> list[float]:
        """The scores of returned positions, in one lookup (a page of hits)."""
        at = np.searchsorted(self.positions, np.asarray(positions, dtype=np.int64))
        found: list[float] = self.scores[at].tolist()
        return found

    def _at(self, position: int) -> int:
        return int(np.searchsorted(self.positions, position))

    def explain(self, position: int) -> dict[str, Any]:
        """Each signal's raw value, its weighted part of the score (``components`` sum to the score),
        the weights and the formula."""
        j, p = self._at(position), self.profile
        recency = float(recency_score(self.updated[j : j + 1], self.now_ms, p.half_life_hours)[0])
        confidence = float(self.confidence[j])
        out: dict[str, Any] = {
            "mode": self.mode,
            "profile": p.name,
            "formula": self.formula,
            "weights": {"similarity": p.similarity, "confidence": p.confidence, "recency": p.recency},
            "half_life_hours": p.half_life_hours,
            "similarity": float(self.similarity[j]),
            "confidence": confidence,
            "recency": recency,
        }
        components: dict[str, float] = {}
        weights = fusion_weights(self.embedder)
        share = {"hybrid": weights, "keyword": (1.0, 0.0), "semantic": (0.0, 1.0)}
        kw_share, sem_share = share[self.mode]
        if self.bm25 is not None and self.keyword is not None:
            out["bm25"], out["bm25_ideal"], out["keyword"] = float(self.bm25[j]), self.ideal, float(self.keyword[j])
            components["keyword"] = p.similarity * kw_share * float(self.keyword[j])
        if self.cosine is not None and self.semantic is not None:
            out["cosine"], out["semantic"] = float(self.cosine[j]), float(self.semantic[j])
            if self.embedder is not None:
                out["embedder"] = self.embedder
            components["semantic"] = p.similarity * sem_share * float(self.semantic[j])
        if self.mode == "hybrid":
            out["keyword_weight"], out["semantic_weight"] = weights
        components["confidence"] = p.confidence * confidence
        components["recency"] = p.recency * recency
        out["components"] = components
        return out


def rank(
    signals: Signals,
    mode: str,
    profile: Profile,
    now_ms: int,
    min_score: float | None = None,
    *,
    embedder: str | None = None,
) -> Ranking:
    """Score an engine's candidates for one query: the one ranking function (pure, no I/O).

    ``mode`` is ``keyword`` (needs ``signals.bm25``), ``semantic`` (needs ``signals.cosine``) or
    ``hybrid`` (both). A candidate is returned when it has evidence for the mode (a query term, or a
    positive cosine) and its score reaches ``min_score``.
    """
    has = np.asarray(signals.eligible, dtype=bool).copy()
    kw = signals.bm25 if mode != "semantic" else None
    cos = signals.cosine if mode != "keyword" else None
    if mode == "keyword":
        assert kw is not None
        has &= kw > 0
    elif mode == "semantic":
        assert cos is not None
        has &= cos > 0
    else:
        assert kw is not None and cos is not None
        has &= (kw > 0) | (cos > 0)
    positions = np.flatnonzero(has)
    bm25 = np.asarray(kw[positions], dtype=np.float64) if kw is not None else None
    cosine = np.asarray(cos[positions], dtype=np.float64) if cos is not None else None
    keyword = keyword_score(bm25, signals.ideal) if bm25 is not None else None
    semantic = semantic_score(cosine) if cosine is not None else None
    if keyword is not None and semantic is not None:
        keyword_weight, semantic_weight = fusion_weights(embedder)
        similarity = keyword_weight * keyword + semantic_weight * semantic
    else:
        found = keyword if keyword is not None else semantic
        assert found is not None
        similarity = found
    updated = np.asarray(signals.updated[positions], dtype=np.int64)
    confidence = np.asarray(signals.confidence[positions], dtype=np.float64)
    scores = profile.similarity * similarity
    if profile.confidence:
        scores = scores + profile.confidence * confidence
    if profile.recency:
        scores = scores + profile.recency * recency_score(updated, now_ms, profile.half_life_hours)
    if min_score is not None:
        keep = scores >= float(min_score)
        positions, updated, scores, similarity, confidence = (
            positions[keep], updated[keep], scores[keep], similarity[keep], confidence[keep]
        )  # fmt: skip
        bm25, keyword, cosine, semantic = (None if a is None else a[keep] for a in (bm25, keyword, cosine, semantic))
    return Ranking(
        mode, profile, positions, scores, similarity, updated, confidence, now_ms, signals.ideal,
        bm25, keyword, cosine, semantic, embedder, formula(mode, profile, signals.ideal, fusion_weights(embedder)),
    )  # fmt: skip


#: A ranked page is first looked for among this many best keyword matches (at least 4x the page) plus
#: every position with a positive cosine; the whole candidate set is ranked only when that cannot be shown
#: to give the same page.
SHORTLIST = 256


def shortlist_size(want: int) -> int:
    """How many best keyword matches the shortlist of a page of ``want`` results takes."""
    return max(SHORTLIST, 4 * want)


def shortlist(
    signals: Signals,
    mode: str,
    profile: Profile,
    now_ms: int,
    min_score: float | None = None,
    *,
    keep: int = SHORTLIST,
    matches: tuple[npt.NDArray[np.int64], float] | None = None,
    embedder: str | None = None,
) -> tuple[Ranking, float] | None:
    """:func:`rank` over a shortlist, and a bound on the score of every eligible position left out.

    The shortlist is the ``keep`` best keyword matches and every position with a positive cosine; a
    position left out has at most the best BM25 left out and no positive cosine, so its score is at most
    the score of such a position with the highest confidence and the newest ``updated_at`` among the
    eligible (-inf when none left out has evidence). None when the shortlist would not be much shorter
    than the candidates (e.g. exact cosines for every position).
    """
    eligible = signals.eligible
    size = len(eligible)
    kw = signals.bm25 if mode != "semantic" else None
    cos = signals.cosine if mode != "keyword" else None
    parts = []
    if cos is not None:
        near = np.flatnonzero((cos > 0) & eligible)
        if len(near) > size // 4:
            return None
        parts.append(near)
    rest = 0.0
    if kw is not None:
        matched, rest = matches if matches is not None else best_matches(kw, eligible, keep)
        parts.append(matched)
    chosen = np.unique(np.concatenate(parts)) if len(parts) > 1 else np.sort(parts[0])
    if len(chosen) > size // 4:
        return None

    def part(a: npt.NDArray[Any] | None, at: npt.NDArray[np.int64]) -> npt.NDArray[Any] | None:
        return None if a is None else a[at]

    sub = Signals(eligible[chosen], signals.updated[chosen], signals.confidence[chosen],
                  part(signals.bm25, chosen), part(signals.cosine, chosen), signals.ideal)  # fmt: skip
    ranking = rank(sub, mode, profile, now_ms, min_score, embedder=embedder)
    ranking.positions = chosen[ranking.positions]
    others = eligible.copy()
    others[chosen] = False
    if rest <= 0 or not others.any():
        return ranking, -np.inf
    confidence = float(signals.confidence[others].max()) if profile.confidence else 0.0
    newest = int(signals.updated[others].max()) if profile.recency else 0
    one = np.ones(1, dtype=bool)
    best = Signals(one, np.array([newest], dtype=np.int64), np.array([confidence]),
                   np.array([rest]), np.zeros(1) if cos is not None else None, signals.ideal)  # fmt: skip
    # a margin for the last bit: vectorised and scalar paths of tanh may round differently
    return ranking, float(rank(best, mode, profile, now_ms, embedder=embedder).scores[0]) + 1e-9


def best_matches(
    bm25: npt.NDArray[Any], eligible: npt.NDArray[np.bool_], keep: int
) -> tuple[npt.NDArray[np.int64], float]:
    """The ``keep`` eligible positions of highest BM25 (all with a query term when fewer), and the highest
    BM25 of the eligible positions left out (0 when none is).

    A query of common words matches most positions; selecting among all of them costs ~25 ms at 1M. Above
    ``SAMPLED_FROM`` positions a threshold read off a sample keeps a few times ``keep`` of them first, and
    the selection runs on those (exact: every position left out scores below the threshold); when the sample
    misjudged and too few pass, it selects among all."""
    scores = bm25 if np.count_nonzero(eligible) == len(eligible) else bm25 * eligible  # (no branches: 7x np.where)
    matched = None
    if len(scores) >= SAMPLED_FROM:
        step = len(scores) // SAMPLE
        sample = np.asarray(scores[::step])
        above = max(1, int(4 * keep / step))  # sampled positions expected above the threshold
        if above < len(sample):
            threshold = sample[np.argpartition(-sample, above)[above]]
            if threshold > 0:
                passed = np.flatnonzero(scores >= threshold)
                matched = passed if len(passed) > keep else None
    if matched is None:
        matched = np.flatnonzero(scores > 0)
    if len(matched) <= keep:
        return matched, 0.0
    values = scores[matched]
    split = np.argpartition(-values, keep)  # the top ``keep``, then the best of the rest at ``keep``
    return matched[split[:keep]], float(values[split[keep]])


#: :func:`best_matches` samples a threshold from this many positions on, reading ``SAMPLE`` of them.
SAMPLED_FROM = 200_000
SAMPLE = 4_096


def rank_page(
    signals: Signals,
    mode: str,
    profile: Profile,
    now_ms: int,
    min_score: float | None,
    *,
    key_of: Callable[[int], bytes],
    offset: int,
    limit: int,
    admit: Callable[[list[int]], list[bool]] | None = None,
    matches: tuple[npt.NDArray[np.int64], float] | None = None,
    embedder: str | None = None,
) -> tuple[Ranking, list[int]]:
    """One page of a ranked search: :func:`rank`, :meth:`Ranking.order` and :func:`select`, trying a
    :func:`shortlist` first. The page is the same as ranking every candidate: the shortlist's page is kept
    only when its last result scores above everything left out. ``matches`` is :func:`best_matches` of the
    BM25 when the caller has it, for at least :func:`shortlist_size` positions."""
    want = offset + limit
    keep = shortlist_size(want)
    found = shortlist(signals, mode, profile, now_ms, min_score, keep=keep, matches=matches, embedder=embedder)
    if found is not None:
        ranking, bound = found
        chosen = select(ranking.order(key_of, want), offset, limit, admit)
        full = len(chosen) == limit and (not chosen or ranking.score(chosen[-1]) > bound)
        if full or bound == -np.inf or (min_score is not None and min_score > bound):
            return ranking, chosen
    ranking = rank(signals, mode, profile, now_ms, min_score, embedder=embedder)
    return ranking, select(ranking.order(key_of, want), offset, limit, admit)


def formula(mode: str, profile: Profile, ideal: float, weights: tuple[float, float] = DEFAULT_WEIGHTS) -> str:
    """The score's formula for one query, with its numbers (``weights``: a hybrid search's keyword and semantic
    weights), as ``explain`` shows it."""
    parts = [f"{w:g}*{name}" for name, w in
             (("similarity", profile.similarity), ("confidence", profile.confidence), ("recency", profile.recency))
             if w]  # fmt: skip
    lines = ["score = " + " + ".join(parts)]
    if profile.similarity:
        if mode == "hybrid":
            lines.append(f"similarity = {weights[0]:g}*keyword + {weights[1]:g}*semantic")
        else:
            lines.append(f"similarity = {mode}")
        if mode != "semantic":
            lines.append(f"keyword = tanh(bm25 / {ideal:.6g})")
        if mode != "keyword":
            lines.append("semantic = max(cosine, 0)")
    if profile.recency:
        lines.append(f"recency = 0.5^(age_hours / {profile.half_life_hours:g})")
    return "; ".join(lines)


def best_first(
    values: npt.NDArray[Any],
    updated: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
    key_of: Callable[[int], bytes],
    want: int,
) -> Iterator[int]:
    """``positions`` by descending value, selected in growing rounds, so a page costs about its own size
    even when a filter rejects most of what ranks first.

    Equal values go by tree key, that is by namespace, then by item key: every engine and every path orders
    ties this way, so two stores holding the same items (or a past version and a store rebuilt from it) return
    the same page. ``values`` and ``updated`` are parallel to ``positions`` (a listing's values *are* the
    ``updated_at``; ``updated`` is kept for callers that rank by something else).
    """
    idx = np.arange(len(positions))
    take = max(4 * want, 64)
    while len(idx):
        vals = values[idx]
        if take < len(idx):
            part = np.argpartition(-vals, take - 1)[:take]
            chosen = vals >= vals[part].min()  # keep every tie at the cut
        else:
            chosen = np.ones(len(idx), dtype=bool)
        yield from (int(positions[j]) for j in _ordered(values, positions, key_of, idx[chosen]))
        idx = idx[~chosen]
        take *= 4


def _ordered(
    values: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    key_of: Callable[[int], bytes],
    idx: npt.NDArray[np.int64],
) -> list[int]:
    """``idx`` by descending value, then by tree key: sorted in numpy, and the tree keys are read only for runs
    of equal value."""
    vals = values[idx]
    idx = idx[np.argsort(-vals, kind="stable")]
    vals = values[idx]
    tied = vals[1:] == vals[:-1]
    out: list[int] = idx.tolist()
    if not tied.any():
        return out
    lo = 0
    for hi in [*(np.flatnonzero(~tied) + 1).tolist(), len(out)]:
        if hi - lo > 1:
            out[lo:hi] = sorted(out[lo:hi], key=lambda j: key_of(int(positions[j])))
        lo = hi
    return out


def select(
    order: Iterator[int], offset: int, limit: int, admit: Callable[[list[int]], list[bool]] | None = None
) -> list[int]:
    """The positions of one page: walk ``order``, keep what ``admit`` accepts (the exact filter, asked
    about growing batches so an engine can fetch what it needs at once), skip ``offset``, take ``limit``."""
    out: list[int] = []
    skipped = 0
    size = max(offset + limit, 1)
    while len(out) < limit:
        batch = list(itertools.islice(order, size))
        if not batch:
            break
        verdicts = admit(batch) if admit is not None else [True] * len(batch)
        for position, ok in zip(batch, verdicts, strict=True):
            if not ok:
                continue
            if skipped < offset:
                skipped += 1
                continue
            out.append(position)
            if len(out) >= limit:
                break
        size *= 4
    return out


__all__ = [
    "KEYWORD_WEIGHT",
    "PROFILES",
    "SEMANTIC_WEIGHT",
    "Hit",
    "Hits",
    "ModePlan",
    "Profile",
    "Ranking",
    "Request",
    "Signals",
    "best_first",
    "best_matches",
    "formula",
    "get_profile",
    "keyword_score",
    "plan_mode",
    "rank",
    "rank_page",
    "recency_score",
    "select",
    "semantic_score",
    "shortlist",
    "shortlist_size",
]
