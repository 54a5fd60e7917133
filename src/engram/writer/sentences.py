"""Prose for the offline extractor: sentences, what is not prose, filler, and who is speaking.

Free functions over plain strings, no I/O:

- :func:`prose_lines` drops what was pasted rather than said (code blocks, logs, stack traces, tables, base64 or hex
  blobs, lines of symbols); a paste that fills most of a long text is dropped whole.
- :func:`split_sentences` cuts prose at real sentence ends: not after an abbreviation (``Dr.``, ``e.g.``), an
  initial, inside a number (``3.5``) or a URL; a line break ends a sentence when the line reads as finished.
- :func:`is_filler` says a sentence carries nothing to remember (``Thanks for sharing!``, ``I totally agree,
  Mel.``): every word is a function word, a reaction or a name; ``I love sushi.`` and ``I'm vegan.`` are kept.
- :func:`first_person` finds the speaker in a sentence, reading a lowercase ``i`` as "I" only where it is a
  pronoun (not ``i.e.``, a list marker ``(i)`` / ``i)`` or a numeral such as ``part i``).
"""

from __future__ import annotations

import re
from collections.abc import Collection

#: A sentence longer than this is not a statement worth a memory (a run-on paste); it is skipped, never cut.
MAX_SENTENCE_CHARS = 400
#: A line or text with more non-prose lines than this share (and at least :data:`PASTE_MIN_LINES` lines) is a paste.
PASTE_SHARE = 0.5
PASTE_MIN_LINES = 5

ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx dept est inc ltd co corp no nos vol fig figs "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun "
    "a.m p.m u.s u.k u.n ph.d b.a m.a b.sc m.sc gen col capt lt sgt rev hon gov sen rep ave blvd rd".split()
)
_BOUNDARY = re.compile(r"(\.{3}|…|[.!?]+)([\"'\u201d\u2019)\]]*)(\s+)")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*•·>]+|\d{1,3}[.)]|[a-z][.)](?=\s)|\((?:[ivx]{1,4}|[a-z]|\d{1,2})\))\s+")
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[?\d\d:\d\d:\d\d\b|\[?\d{1,2}/\w{3}/\d{4}:)"
    r"|\b(?:DEBUG|INFO|WARN|WARNING|ERROR|FATAL|TRACE|CRITICAL)\b[\]:]"
    r"|^\s*(?:at [\w$.]+\(.*\)|File \".*\", line \d+|Traceback \(most recent call last\)|\w+(?:Error|Exception):)"
)
_CODE_LINE = re.compile(
    r"[;{}]\s*$|^\s*[{}\])]|^\s*(?:def|class|import|from \S+ import|return|function|const|let|var|public|private|"
    r"#include|package|fn|func|SELECT|INSERT|UPDATE|CREATE)\b[^.!?]*$|^\s*(?:\$|>>>|#!)\s|=>|::|==|!=|\)\s*\{"
)
_BLOB = re.compile(r"[A-Za-z0-9+/=_-]{40,}")
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]+(?:['\u2019][A-Za-z]+)?")
_I = re.compile(r"(?<![\w(/-])[iI](?![\w/)-]|\.\w)")
_OTHER_FIRST_PERSON = re.compile(
    r"\b(?:[Mm][Ee]|[Mm][Yy]|[Mm]ine|[Mm]yself|[Ww][Ee](?:['\u2019](?:re|ve|d|ll))?|us|[Oo]urs?|[Oo]urselves|[Ll]et['\u2019]s)\b"
)
#: Words before an ``i`` or ``I`` that make it a numeral (``part i``, ``chapter I``, ``World War I``).
_NUMERAL_BEFORE = frozenset(
    "part chapter section appendix annex phase type volume vol book act scene step stage level class article item "
    "figure fig table schedule clause lesson unit week round season episode world war henry louis george".split()
)

STOP_WORDS = frozenset(
    "a an the and or but if so as at by for from in into of on onto to up with about over than then too very "
    "just also even still only really totally truly absolutely definitely certainly quite pretty super such "
    "honestly actually seriously literally basically anyway anyways btw "
    "i me my mine myself we us our ours you your yours yourself he him his she her hers it its they them their "
    "theirs this that these those there here what which who whom whose when where why how all any both each "
    "some much many more most lot lots bit kind sort thing things stuff way "
    "am is are was were be been being do does did doing done have has had having will would shall should can "
    "could may might must ought i'm i've i'd i'll you're you've you'd you'll he's she's it's we're we've we'd "
    "we'll they're they've they'd they'll that's there's here's what's who's how's let's isn't aren't wasn't "
    "weren't don't doesn't didn't haven't hasn't hadn't won't wouldn't can't couldn't shouldn't not no nope "
    "yes yeah yep yup ok okay oh ah aw aww um uh hmm well like now again always never ever one ones".split()
)
#: Reactions, agreement, thanks, greetings and closings: a sentence made only of these and stop words is filler.
REACTIONS = frozenset(
    "hi hey hello hiya howdy bye goodbye cya later soon talk chat catch morning evening night afternoon "
    "thanks thank thx ty cheers welcome appreciate appreciated appreciation sharing share shared telling told "
    "agree agreed right true exactly indeed sure course totally same "
    "cool great awesome amazing wow whoa nice good fine fun lovely wonderful fantastic fabulous incredible "
    "impressive inspiring inspirational beautiful gorgeous stunning brilliant excellent perfect sweet neat "
    "interesting exciting excited happy glad pleased proud sad sorry bummer shame congrats congratulations "
    "love loved loving lovin like liked enjoy hope hoping wish wishing luck care best regards "
    "sounds sound seems seem looks look looking feel feels hear heard hearing see seeing seen know knew mean "
    "means meant get got go going keep kept up work tell wait can't believe lol haha hahaha omg yay woohoo "
    "yes definitely much many lot lots big huge whole world mean means awesome well done job day always "
    "friend buddy dear mate guys safe worries worry forward fun care have take stay awesome blast hang "
    "hugs hug xoxo pic pics photo photos picture pictures snap shot touch".split()
)
_NAME = re.compile(r"^[A-Z][a-z]+$")
_VOCATIVE = re.compile(
    r"(?:^|,\s*|\b(?:[Hh]ey|[Hh]i|[Hh]ello|[Tt]hanks|[Tt]hank you|[Bb]ye|[Cc]ongrats|[Dd]ear|[Ww]ow|[Oo]h)\s+)"
    r"([A-Z][a-z]+)(?=\s*(?:[,.!?]|$))"
)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves|ya|u|ur)\b|\byou['\u2019](?:re|ve|d|ll)\b",
                            re.IGNORECASE)  # fmt: skip
_IMPERATIVE = re.compile(
    r"^(?:(?:oh|hey|so|and|but|well|please|just|now|definitely|totally|always|never)[,!]?\s+)*(?:take|keep|tell|"
    r"check|look|have|stay|don't|do not|go|come|give|make|try|enjoy|remember|feel|hang|send|show|let|drop|hit|"
    r"believe|trust|imagine|think about|consider|good luck|hope|wish|catch|knock|break|get|be)\b",
    re.IGNORECASE,
)
#: A sentence that starts with its verb, the "I" left out as chat does ("Been reading that book you recommended.").
_ELIDED_I = re.compile(
    r"^(?:(?:just|finally|recently|still|also|lately|so)\s+)*(?:been|gonna|wanna|gotta|went|got|had|did|made|took|"
    r"tried|found|started|finished|joined|bought|saw|met|visited|learned|learnt|signed|picked|spent|moved|decided|"
    r"planning|thinking|working|hoping|reading|watching|getting|going|taking|doing|trying|loving)\b",
    re.IGNORECASE,
)
_ORDER_ME = re.compile(r"^(?:please\s+)?(?:tell|show|give|send|let|help|remind)\s+me\b", re.IGNORECASE)


def strip_code(text: str) -> str:
    """``text`` without its fenced code blocks (a blank line in place of each)."""
    return _FENCE.sub("\n\n", text)


def is_prose_line(line: str) -> bool:
    """False for a line that reads as pasted rather than said: a log or stack-trace line, code, a table row, a
    blob of base64 or hex, or a line that is mostly symbols."""
    stripped = line.strip()
    if not stripped:
        return True
    if _LOG_LINE.search(stripped) or _CODE_LINE.search(stripped):
        return False
    if stripped.count("|") >= 2 or "\t" in stripped:
        return False
    if _BLOB.search(_URL.sub(" ", stripped)):
        return False
    letters = sum(c.isalpha() for c in stripped)
    return letters >= 0.6 * len(stripped.replace(" ", "")) if len(stripped) >= 12 else letters > 0


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` that are prose, code blocks removed. A text whose non-empty lines are mostly not prose
    (at least :data:`PASTE_MIN_LINES` of them) is a paste: only the prose lines before and after its first and
    last non-prose line are kept (the words around a paste, never the paste)."""
    lines = strip_code(text).splitlines()
    filled = [line for line in lines if line.strip()]
    verdicts = [is_prose_line(line) for line in lines]
    odd = [i for i, ok in enumerate(verdicts) if not ok]
    if len(filled) >= PASTE_MIN_LINES and len(odd) > PASTE_SHARE * len(filled):
        return [line for i, line in enumerate(lines) if i < odd[0] or i > odd[-1]]
    return [line for line, ok in zip(lines, verdicts, strict=True) if ok]


def _ends_sentence(before: str, after: str, mark: str) -> bool:
    """Whether ``mark`` (the punctuation after the word ``before``) ends a sentence followed by ``after``."""
    if mark in ("...", "…"):
        return bool(after) and (after[0].isupper() or after[0] in "\"'\u201c\u2018(")
    if mark != ".":
        return True
    token = before.rsplit(None, 1)[-1] if before.strip() else ""
    word = token.lstrip("\"'\u201c\u2018([").lower()
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha() and token[-1:].isupper()):
        return False  # "Dr. Smith", "e.g. apples", "J. R. R. Tolkien"
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", word):
        return False  # an acronym with dots ("u.s.a.")
    return not (after[:1].islower() and word in ABBREVIATIONS)


def _split_line(line: str) -> list[str]:
    out: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(line):
        end = match.end(2)
        after = line[match.end() :]
        if _ends_sentence(line[start : match.start()], after, match.group(1)):
            out.append(line[start:end])
            start = match.end()
    out.append(line[start:])
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of prose ``text`` (stripped, list markers removed), in order. A line break ends a sentence
    unless the line ends without punctuation and the next goes on in lowercase (one paragraph, wrapped)."""
    paragraphs: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            if current:
                paragraphs.append(current)
            current = ""
            continue
        if current and current[-1] not in '.!?:;…)"\u201d' and line[:1].islower() and not _BULLET.match(raw):
            current = f"{current} {line}"
        else:
            if current:
                paragraphs.append(current)
            current = line
    if current:
        paragraphs.append(current)
    sentences: list[str] = []
    for paragraph in paragraphs:
        for piece in _split_line(paragraph):
            sentence = _BULLET.sub("", piece.strip(), count=1).strip()
            if sentence:
                sentences.append(sentence)
    return sentences


def words(sentence: str) -> list[str]:
    """The words of ``sentence`` (letters and inner apostrophes; URLs and numbers are not words)."""
    return _WORD.findall(_URL.sub(" ", sentence).replace("\u2019", "'"))


def content_words(sentence: str, names: Collection[str] = ()) -> list[str]:
    """The words of ``sentence`` that carry meaning: not a function word, a reaction or a name in ``names`` (a
    vocative such as "Mel"). Digits count as content ("I ran 5k")."""
    known = {n.lower() for n in names}
    out = [
        w
        for w in words(sentence)
        if w.lower() not in STOP_WORDS and w.lower() not in REACTIONS and w.lower() not in known
    ]
    return out + re.findall(r"\d+", _URL.sub(" ", sentence))


def is_filler(sentence: str, names: Collection[str] = ()) -> bool:
    """True when ``sentence`` says nothing to remember: only function words, reactions (thanks, agreement,
    greetings, "so cool") and the names in ``names`` or a capitalised word set off as a vocative."""
    found = content_words(sentence, names)
    if not found:
        return True
    vocative = {m.group(1) for m in _VOCATIVE.finditer(sentence.strip())}
    return all(_NAME.match(w) and w in vocative for w in found)


def _pronouns(sentence: str) -> list[re.Match[str]]:
    """Where ``sentence`` says "I" (either case), leaving out ``i.e.``, list markers (``i.``, ``(i)``, ``i)``) and
    numerals after words such as "part", "chapter" or "war"."""
    out = []
    for match in _I.finditer(sentence):
        before, after = sentence[: match.start()], sentence[match.end() :]
        if not before.strip() and after[:1] in (".", ":"):
            continue  # "i. the first point"
        previous = before.rstrip().rsplit(None, 1)
        if previous and previous[-1].lower().strip(",;:\"'(") in _NUMERAL_BEFORE:
            continue
        out.append(match)
    return out


def addresses_listener(sentence: str) -> bool:
    """True when ``sentence`` speaks to or of the listener and not of the speaker: a compliment, advice or an order
    ("You'd be a great counselor!", "Keep at it!", "Tell me more about your movie!"), not a statement about the
    speaker."""
    if _ELIDED_I.match(sentence) or (
        first_person(sentence.replace("Let me", "").replace("let me", "")) and not _ORDER_ME.match(sentence)
    ):
        return False
    return bool(_SECOND_PERSON.search(sentence) or _IMPERATIVE.match(sentence))


def first_person(sentence: str) -> bool:
    """True when the speaker speaks of themselves (I, me, my, we, our, ...). An ``i`` counts only as the pronoun:
    "i went hiking" does; "i.e. the server", "(i) the first point", "part i of the book" do not."""
    return bool(_OTHER_FIRST_PERSON.search(sentence) or _pronouns(sentence))


def pronoun_i(sentence: str) -> str:
    """``sentence`` with each lowercase pronoun ``i`` (see :func:`first_person`) written as "I"."""
    out = sentence
    for match in reversed(_pronouns(sentence)):
        out = out[: match.start()] + "I" + out[match.end() :]
    return out


def complete(sentence: str) -> bool:
    """True for a sentence that reads as whole: ends in terminal punctuation (or a closing quote after it)."""
    return bool(re.search(r"[.!?…][\"'\u201d\u2019)\]]*$", sentence.strip()))
