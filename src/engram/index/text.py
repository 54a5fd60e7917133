"""Text analysis for keyword search: Unicode word split, lowercase, English stop words, Snowball stems."""

from __future__ import annotations

import re
from itertools import repeat

import Stemmer

from engram import runtime

# A compact English stop list: function words that carry no topic. Question words are stop words too,
# since memories are searched with questions ("what did Alice say about ...").
STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself
    him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't
    my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves then there
    there's these they they'd they'll they're they've this those through to too under until up very was wasn't we
    we'd we'll we're we've were weren't what what's when when's where where's which while who who's whom why
    why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves s t d ll m re ve
    also just like get got yeah oh really""".split()
)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
#: Longer words are cut to this many characters (hashes and blobs are not prose; PostgreSQL's text
#: search refuses words over 2,047 bytes, and both search engines must see the same terms).
MAX_WORD = 100
_stemmer = Stemmer.Stemmer("english")


#: Words seen, mapped to their index term (None for stop words): one dict lookup per word after the first
#: time. Emptied when it reaches this many words (hashes and other one-off tokens would grow it forever).
KNOWN_MAX = 200_000
_known: dict[str, str | None] = {}
_UNKNOWN = object()  # what a lookup of a word not seen yet gives
runtime.register("engram.index.text.known", reset=_known.clear)


def _analyse(word: str) -> str | None:
    """The index term of one lowercased word, or None for a stop word."""
    if word in STOPWORDS:
        return None
    if "'" in word:
        word = word.split("'", 1)[0]
        if word in STOPWORDS:
            return None
    return str(_stemmer.stemWord(word[:MAX_WORD]))


def _learn(word: str) -> str | None:
    """Analyse a word not seen yet and remember its term."""
    if len(_known) >= KNOWN_MAX:
        _known.clear()
    term = _known[word] = _analyse(word)
    return term


def terms(text: str) -> list[str]:
    """The index terms of a text, in order (stop words removed, words stemmed)."""
    words = _WORD.findall(text.lower())
    found: list[object] = list(map(_known.get, words, repeat(_UNKNOWN)))  # the lookups in C, no Python loop
    if _UNKNOWN in found:
        found = [_learn(w) if t is _UNKNOWN else t for w, t in zip(words, found, strict=True)]
    return [t for t in found if t is not None]  # type: ignore[misc]
