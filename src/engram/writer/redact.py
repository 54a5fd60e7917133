"""Secret redaction: what the writer hands a model, writes in a trace or a log, or keeps as a memory, has no
credential in it.

The detector is Yelp's ``detect-secrets`` (see docs/adr/0003-secret-redaction.md): its format plugins (AWS,
GitHub, GitLab, Slack, Stripe, OpenAI, JWT, npm, PyPI, SendGrid, Twilio, URL credentials ...) find tokens by
their shape, its keyword plugin finds quoted assignments in code (``password = "..."``), its private-key plugin
finds key headers, and its filters drop UUIDs, templates (``<token>``, ``${VAR}``), indirect references
(``password = os.environ[...]``) and sequential strings. This module adds only what the library lacks for
conversation text: a PEM or PuTTY key block as one span, the ``Authorization: Basic|Bearer|Token`` header, URL
credentials with an empty user name or ``$``/``!`` in the password, key formats the library does not know
(``sk-`` model keys, ``github_pat_``, ``AIza``), and unquoted keyword forms in prose and config files
(``password is: x``, ``pw: x``, ``aws_secret_access_key = x``, ``--password x``). Its high-entropy plugins are
left out: measured on the corpus in the tests, they flag commit ids and hashes and catch nothing more.

A value after a keyword is redacted only when it can be one: common words (``my password is too short``) and
placeholders are not, and after an ambiguous keyword (``key``, ``token``, ``secret``) it must look generated
(letters and digits, 8 or more), so "The token is expired" and "the key is to relax" stay as they are::

    >>> redact("my key is sk-abc123def456ghi789jkl012")
    'my key is [REDACTED:api-key]'
    >>> redact("pw: hunter22, and the token is expired")
    'pw: [REDACTED:secret], and the token is expired'

Cost: the text is read in pieces of at most :data:`PIECE` characters, cut at line ends (a longer line is cut
where the piece is full, the next piece starting :data:`OVERLAP` characters earlier). For each piece, one
linear-time RE2 set match (:func:`gates`) tells which detectors could match in it, from each detector's pattern
less its lookarounds, anchors and bounds (a pattern that matches wherever the detector does); only those run, and
the keyword detectors only on lines that hold a keyword. The time grows linearly with the text, whatever its
shape (one 10 MB line included). A secret longer than :data:`OVERLAP` that straddles a cut inside such a line may
be redacted only in part.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2: linear-time matching, no stubs
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.filters.heuristic import (
    is_indirect_reference,
    is_likely_id_string,
    is_not_alphanumeric_string,
    is_potential_uuid,
    is_prefixed_with_dollar_sign,
    is_sequential_string,
    is_templated_secret,
)
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

#: The longest piece of text the detectors read at once, and the overlap of two pieces cut inside a line.
PIECE = 8192
OVERLAP = 512
#: How far a private key block may reach from its header to its footer, and the longest line inside one.
KEY_BLOCK = 65_536
KEY_LINE = 4096

#: detect-secrets plugins left out: IP addresses are not credentials; the entropy plugins flag hashes and commit
#: ids; keyword and private-key findings get the handling below.
_NOT_USED = frozenset({
    "Public IP (ipv4)", "Base64 High Entropy String", "Hex High Entropy String", "Secret Keyword", "Private Key",
})  # fmt: skip
#: Labels that keep the names engram used before; others are the secret type's slug (``stripe-access-key``).
_LABELS = {
    "AWS Access Key": "aws-key", "Basic Auth Credentials": "password", "GitHub Token": "github-token",
    "JSON Web Token": "jwt", "NPM tokens": "npm-token", "OpenAI Token": "api-key", "Slack Token": "slack-token",
}  # fmt: skip


def _label(secret_type: str) -> str:
    return _LABELS.get(secret_type) or re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def _vendors() -> tuple[tuple[RegexBasedDetector, str], ...]:
    """An instance of each format plugin the library ships (a plugin added by an upgrade is used too), labelled."""
    plugins: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    return tuple(
        (cls(), _label(name))
        for name, cls in sorted(plugins.items())
        if name not in _NOT_USED and issubclass(cls, RegexBasedDetector)
    )


_VENDORS = _vendors()
_KEYWORD = KeywordDetector()
#: The detectors' patterns that could match in a piece of text (see :func:`gates`).
Gates = frozenset[re.Pattern[str]]
_PRIVATE_KEY = PrivateKeyDetector()


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret found in a text: ``text[start:end]`` is replaced by ``[REDACTED:<kind>]``.

    ``rank`` is 0 for a finding by format (a vendor token, a key block, a header) and 1 for a value after a
    keyword; where two overlap, the lower rank names the merged span."""

    start: int
    end: int
    kind: str
    rank: int = 0


# What the library lacks (see the module docstring). Every pattern stays on one line and bounds its repeats.
_SUPPLEMENTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![A-Za-z0-9_-])(?:sk|pk|rk)-[A-Za-z0-9_-]{16,400}"), "api-key"),
    (re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,255}"), "github-token"),
    (re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), "google-key"),
    (re.compile(r"(?<![A-Za-z0-9])xox[abposre]-[A-Za-z0-9-]{10,250}"), "slack-token"),
)
_SCHEME = re.compile(
    r"(?i)(?:\bBearer|\bAuthorization[\"']?[ \t]*[:=][ \t]*[\"']?Token)[ \t]+([A-Za-z0-9._~+/-]{12,4096}=*)"
)
_BASIC = re.compile(r"\bBasic[ \t]+([A-Za-z0-9+/]{6,2048}={0,2})(?![A-Za-z0-9+/=])")
_URL_PASSWORD = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,30}://[^\s:/?#@\"'<>]{0,256}:([^\s/?#@\"'<>]{1,256})@")

# Keyword forms. Strong: a password, or a credential named as such (api key, client secret, access token ...);
# weak: a bare key, token, secret or credential.
_PREFIXES = (
    "api|access|secret|private|client|auth|app|master|signing|encryption|account|service|refresh|session|bot"
    "|oauth|webhook|deploy|admin|root|db|database|consumer|license|bearer|id|personal[_ .-]?access"
)
_STRONG = (
    r"pass(?:word|wd|phrase|code)|(?<![A-Za-z0-9])(?:pwd|pw)"
    rf"|(?<![A-Za-z0-9])(?:{_PREFIXES})[_ .-]?(?:access[_ .-]?)?(?:key|token|secret|pass(?:word)?|pwd)"
)
_WEAK = r"(?<![A-Za-z0-9])(?:key|token|secret|credentials?)"
_KEYWORDS = re.compile(rf"(?i)(?:{_STRONG}|{_WEAK})(?![A-Za-z0-9])")
_ASSIGN = re.compile(
    rf"(?i)(?:(?P<strong>{_STRONG})|(?P<weak>{_WEAK}))(?![A-Za-z0-9])"
    r"[\"'\]]{0,2}(?:[ \t]*(?::=|=>|={1,3}|:)"
    r"|(?:[ \t]+(?:for|to|of|on)(?:[ \t]+[^\s]{1,40}){1,4}?)?[ \t]+(?:is|was)(?:[ \t]*:)?)[ \t]*"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,256})(?P=q)|(?P<bare>[^\s\"'`<>]{1,256}))"
)
_FLAG = re.compile(
    r"(?i)(?<![A-Za-z0-9-])--(?:password|passwd|pass|pw|token|api-key|secret|access-token|auth-token)"
    r"(?:=|[ \t]+)(?P<bare>[^\s\"'`<>-][^\s\"'`<>]{0,255})"
)
#: Words that follow "password is", "key:", ... in prose or code and are never the secret.
_NOT_A_VALUE = frozenset(
    """a an the this that these those it its my your our their his her not no none null nil empty blank unset
    missing required optional needed necessary invalid valid wrong incorrect correct right expired expiring
    revoked rotated disabled enabled active inactive locked unlocked weak strong short long too very still now
    already also just only same different new old changed reset set stored saved kept hidden visible encrypted
    hashed sent shared known unknown secure insecure safe unsafe fine ok okay good bad easy hard simple complex
    case sensitive generated random used unused here there in on at for to of from with by about like as and or
    but if so then what which who where when how why being been be is are was were always never usually
    probably please see below above attached provided pending accepted rejected compromised leaked exposed
    public private secret confidential important changing true false yes raise return await lambda undefined
    default str string int bytes bool any self cls type todo tbd changeme""".split()
)
_PLACEHOLDER = re.compile(r"(?i)^(?:your|my|the|some)[_-]|^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^(.)\1{3,}$|^x{3,}|\*{3}")
_TRAILING = ".,;:)]}>'\""
#: What a format pattern may match around a token, and the characters a token goes on with (a plugin that
#: captures only a token's prefix, like ``ghp``, still has the whole token redacted).
_EDGES = " \t\r\n\"'=:"
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_JWT_TAIL = re.compile(r"[A-Za-z0-9_\-+/=.]*")


def _generated(value: str) -> bool:
    """True for a value after an ambiguous keyword that looks generated: 8+ characters, letters and digits."""
    return len(value) >= 8 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _value_ok(value: str, strong: bool) -> bool:
    """Whether a value after a keyword can be a secret (see the module docstring)."""
    if len(value) < 4 or value.startswith("[REDACTED") or value.lower() in _NOT_A_VALUE:
        return False
    if is_templated_secret(value) or is_prefixed_with_dollar_sign(value) or _PLACEHOLDER.search(value):
        return False
    if any(c in value for c in "([{"):  # a call or a subscript: a reference to the secret, not the secret
        return False
    return strong or _generated(value)


def _vendor_findings(piece: str, offset: int, gates: Gates) -> Iterator[Finding]:
    for plugin, kind in _VENDORS:
        for pattern in plugin.denylist:
            for match in pattern.finditer(piece) if pattern in gates else ():
                found = match.group(0)
                for value in {v.strip(_EDGES) for v in plugin.analyze_string(found)}:
                    if (
                        not value or is_sequential_string(value) or is_potential_uuid(value)
                        or is_templated_secret(value) or is_not_alphanumeric_string(value)
                    ):  # fmt: skip
                        continue
                    at = found.find(value)
                    while at >= 0:
                        tail = _JWT_TAIL if kind == "jwt" else _TOKEN_TAIL
                        end = tail.match(piece, match.start() + at + len(value)).end()  # type: ignore[union-attr]
                        while kind == "jwt" and piece[end - 1] == ".":
                            end -= 1
                        yield Finding(offset + match.start() + at, offset + end, kind)
                        at = found.find(value, at + len(value))


def _format_findings(piece: str, offset: int, gates: Gates) -> Iterator[Finding]:
    for pattern, kind in _SUPPLEMENTS:
        for match in pattern.finditer(piece) if pattern in gates else ():
            rest = match.group(0).split("-", 2)[-1] if kind == "api-key" else ""
            if kind == "api-key" and not (any(c.isdigit() for c in rest) or rest.lower() != rest != rest.upper()):
                continue  # sk-learn-compatible: a name, not a key
            yield Finding(offset + match.start(), offset + match.end(), kind)
    for match in _SCHEME.finditer(piece) if _SCHEME in gates else ():
        value = match.group(1)
        if any(c.isdigit() for c in value) and not is_templated_secret(value):
            yield Finding(offset + match.start(1), offset + match.end(1), "token")
    for match in _BASIC.finditer(piece) if _BASIC in gates else ():
        if _basic_credentials(match.group(1)):
            yield Finding(offset + match.start(1), offset + match.end(1), "password")
    for match in _URL_PASSWORD.finditer(piece) if _URL_PASSWORD in gates else ():
        if not match.group(1).startswith("[REDACTED"):
            yield Finding(offset + match.start(1), offset + match.end(1), "password")


def _basic_credentials(value: str) -> bool:
    """True when ``value`` decodes as HTTP Basic credentials (``user:password`` in printable text)."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in decoded and decoded.isprintable()


def _keyword_findings(piece: str, offset: int, gates: Gates) -> Iterator[Finding]:
    """Values after keywords, line by line: the library's keyword plugin on lines holding one of its words,
    engram's keyword forms on lines holding one of engram's."""
    library, forms = _DENYLIST in gates, bool(gates & {_KEYWORDS, _FLAG})
    at = 0
    for line in piece.splitlines(keepends=True):
        if library and _QUOTE.search(line) and _DENYLIST.search(line):  # the plugin's patterns need both
            yield from _library_keywords(line, offset + at)
        if forms and ("--" in line or _KEYWORDS.search(line)):
            yield from _keyword_forms(line, offset + at)
        at += len(line)


_DENYLIST = re.compile("|".join(DENYLIST), re.IGNORECASE)
_QUOTE = re.compile("[\"'`]")


def _library_keywords(line: str, offset: int) -> Iterator[Finding]:
    for value in set(_KEYWORD.analyze_string(line)):
        if (
            not _value_ok(value, True) or is_sequential_string(value) or is_potential_uuid(value)
            or is_likely_id_string(value, line, _KEYWORD) or is_indirect_reference(line)
        ):  # fmt: skip
            continue
        at = line.find(value)
        while at >= 0:
            yield Finding(offset + at, offset + at + len(value), "secret", 1)
            at = line.find(value, at + len(value))


def _keyword_forms(line: str, offset: int) -> Iterator[Finding]:
    for match in _ASSIGN.finditer(line):
        group = "quoted" if match.group("quoted") is not None else "bare"
        value, start = match.group(group), match.start(group)
        if group == "bare":
            if line[max(0, match.start() - 1) : match.start()] in ("?", "&", ";"):
                value = re.split(r"[&#;]", value, maxsplit=1)[0]  # a URL's query parameter ends at the next one
            value = value.rstrip(_TRAILING)
        if _value_ok(value, match.group("strong") is not None):
            yield Finding(offset + start, offset + start + len(value), "secret", 1)
    for match in _FLAG.finditer(line):
        value = match.group("bare").rstrip(_TRAILING)
        if _value_ok(value, True):
            yield Finding(offset + match.start("bare"), offset + match.start("bare") + len(value), "secret", 1)


class _Next:
    """The next match of a pattern in a text, for positions that only grow: every character is searched once."""

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self.pattern, self.text = pattern, text
        self.found: re.Match[str] | None = None
        self.clear = 0  # no match starts before this position (past the last one found)

    def within(self, at: int, span: int) -> re.Match[str] | None:
        """The first match that starts in ``[at, at + span)``, read up to 256 characters past that, or None."""
        if self.found is None or self.found.start() < at:
            start = max(at, self.clear)
            self.found = self.pattern.search(self.text, start, at + span + 256) if start < at + span else None
            self.clear = max(self.clear, at + span if self.found is None else self.found.start())
        found = self.found
        return found if found is not None and found.start() < at + span else None


_KEY_END = re.compile(r"END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?[ -]*")
_KEY_BODY = re.compile(
    r"[ \t]*(?:[A-Za-z0-9+/=]{16,}(?:[ \t]+[A-Za-z0-9+/=]{16,})*)?[ \t]*\r?"
    r"|(?:Proc-Type|DEK-Info|Comment|Encryption|Public-Lines|Private-Lines|Private-MAC|Version|Hash|Charset):.*"
)
_MATERIAL = re.compile(r"[A-Za-z0-9+/=]{16,}")


class _KeyBlocks:
    """Private key blocks of one text: from a header the library recognises to its footer, or to the end of the
    key lines that follow it (a block cut off when pasted); a header with no key material after it is prose."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.footers, self.material = _Next(_KEY_END, text), _Next(_MATERIAL, text)
        self.covered = 0

    def find(self, piece: str, offset: int, gates: Gates) -> Iterator[Finding]:
        text = self.text
        for pattern in _PRIVATE_KEY.denylist:
            for match in pattern.finditer(piece) if pattern in gates else ():
                start = offset + match.start()
                if start < self.covered:
                    continue
                end = self._end(_dashes_after(text, offset + match.end()))
                if end is not None:
                    self.covered = end
                    yield Finding(_dashes_before(text, start), end, "private-key")

    def _end(self, head: int) -> int | None:
        text = self.text
        footer = self.footers.within(head, KEY_BLOCK)
        if footer is not None and self.material.within(head, footer.start() - head):
            return footer.end()
        end = text.find("\n", head, head + KEY_LINE)  # the rest of the header's line belongs to the block
        end = min(len(text), head + KEY_LINE) if end < 0 else end
        last, material = end, self.material.within(head, end - head) is not None
        while text.startswith("\n", end) and end - head < KEY_BLOCK:
            start = end + 1
            stop = text.find("\n", start, start + KEY_LINE + 1)
            stop = len(text) if stop < 0 and len(text) - start <= KEY_LINE else stop
            if stop < 0 or not _KEY_BODY.fullmatch(text, start, stop):
                break
            if text[start:stop].strip():
                material = material or _MATERIAL.search(text, start, stop) is not None
                last = stop
            end = stop
        return last if material else None


def _dashes_before(text: str, at: int) -> int:
    """Where the dashes framing a key header start (``-----BEGIN`` and ``---- BEGIN``), else ``at``."""
    dashes = at - 1 if at > 0 and text[at - 1] == " " else at
    start = dashes
    while start > 0 and text[start - 1] == "-":
        start -= 1
    return start if start < dashes else at


def _dashes_after(text: str, at: int) -> int:
    """Where the dashes closing a key header (``KEY-----`` and ``KEY ----``) end, else ``at``."""
    dashes = at + 1 if text[at : at + 2] == " -" else at
    end = dashes
    while end < len(text) and text[end] == "-":
        end += 1
    return end if end > dashes else at


# The pre-filter: RE2 reads Python's patterns, less their lookarounds, anchors and word boundaries, with wider
# classes and bounds: a pattern that matches wherever one of the detectors could.
_WIDER = {"\\d": "\\pN", "\\w": "[\\pL\\pN\\pM_]", "\\s": "[\\s\\pZ\\x0b\\x1c-\\x1f\\x85]", "\\b": ""}
_WIDER_IN_CLASS = {"\\d": "\\pN", "\\w": "\\pL\\pN\\pM_", "\\s": "\\s\\pZ\\x0b\\x1c-\\x1f\\x85"}
_BOUNDS = re.compile(r"\{(\d+),\d+\}")


def _group_end(src: str, at: int) -> int:
    """The index after the group that opens at ``src[at]``."""
    depth, i, in_class = 0, at, False
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 2 if src[i + 1 : i + 2] == "]" else 1
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced group in {src!r}")


def _superset(pattern: re.Pattern[str]) -> str:
    """``pattern`` as an RE2 pattern that matches wherever it does (and more); ValueError when none is known."""
    src, out, i, in_class = pattern.pattern, [], 0, False
    while i < len(src):
        c = src[i]
        if c == "\\":
            token = src[i : i + 2]
            if token[1:].isdigit() and not in_class:  # a back-reference: any text
                token = "(?s:.*)"
            out.append((_WIDER_IN_CLASS if in_class else _WIDER).get(token, token))
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            first = 2 if src[i + 1 : i + 2] == "^" else 1
            first += 1 if src[i + first : i + first + 1] == "]" else 0
            out.append(src[i : i + first])
            i += first
            continue
        elif src.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            i = _group_end(src, i)
            continue
        elif src.startswith("(?P=", i):  # a named back-reference: any text
            out.append("(?s:.*)")
            i = src.index(")", i) + 1
            continue
        elif src.startswith("(?P<", i):
            out.append("(?:")
            i = src.index(">", i) + 1
            continue
        elif c not in "^$":
            out.append(c)
        i += 1
    flags = "(?i)" if pattern.flags & re.IGNORECASE else ""
    return "(?:" + flags + _BOUNDS.sub(r"{\1,}", "".join(out)) + ")"


#: Every pattern a detector starts from: the gate is the RE2 set of their supersets.
_GATED: tuple[re.Pattern[str], ...] = (
    *(p for plugin, _ in _VENDORS for p in plugin.denylist),
    *_PRIVATE_KEY.denylist,
    *(p for p, _ in _SUPPLEMENTS),
    _SCHEME,
    _BASIC,
    _URL_PASSWORD,
    _FLAG,
    _KEYWORDS,
    _DENYLIST,
)
_KEYWORD_GATES = frozenset({_FLAG, _KEYWORDS, _DENYLIST})


def _gate() -> Any:
    """The RE2 set that tells which detectors could match a piece of text, or None when RE2 cannot read one of
    them (then every detector reads every piece)."""
    options = re2.Options()
    options.log_errors, options.max_mem = False, 64 << 20
    gate = re2.Set.SearchSet(options)
    try:
        for pattern in _GATED:
            gate.Add(_superset(pattern))
        gate.Compile()
    except (ValueError, re2.error):
        return None
    return gate


_GATE = _gate()


def gates(piece: str) -> Gates:
    """The detectors' patterns that could match in ``piece`` (one linear-time pass)."""
    if _GATE is None:
        return frozenset(_GATED)
    return frozenset(_GATED[i] for i in _GATE.Match(piece) or ())


def _pieces(text: str) -> Iterator[tuple[int, str]]:
    """``text`` in pieces of at most :data:`PIECE` characters cut at line ends; a longer line is cut where the
    piece is full, and the next piece starts :data:`OVERLAP` characters before the cut."""
    start, size = 0, len(text)
    while start < size:
        end = min(size, start + PIECE)
        cut = text.rfind("\n", start, end) if end < size else end - 1
        if cut >= start:
            yield start, text[start : cut + 1]
            start = cut + 1
        else:
            yield start, text[start:end]
            start = end - OVERLAP


def find_secrets(text: str) -> list[Finding]:
    """Every secret in ``text``, in order, overlapping findings merged."""
    found: list[Finding] = []
    keys = _KeyBlocks(text)
    for start, piece in _pieces(text):
        opened = gates(piece)
        if not opened:
            continue
        found += keys.find(piece, start, opened)
        found += _vendor_findings(piece, start, opened)
        found += _format_findings(piece, start, opened)
        if opened & _KEYWORD_GATES:
            found += _keyword_findings(piece, start, opened)
    found.sort(key=lambda f: (f.start, f.rank, -f.end))
    merged: list[Finding] = []
    for finding in found:
        last = merged[-1] if merged else None
        if last is not None and finding.start < last.end:
            kind = last.kind if last.rank <= finding.rank else finding.kind
            merged[-1] = Finding(last.start, max(last.end, finding.end), kind, min(last.rank, finding.rank))
        else:
            merged.append(finding)
    return merged


def redact(text: str) -> str:
    """``text`` with every secret :func:`find_secrets` finds replaced by ``[REDACTED:<kind>]``."""
    out: list[str] = []
    at = 0
    for finding in find_secrets(text):
        out += [text[at : finding.start], f"[REDACTED:{finding.kind}]"]
        at = finding.end
    return "".join([*out, text[at:]]) if out else text


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string in it redacted (dict keys included); a string under a key that names a
    credential (``password``, ``api_key``, ``token``, ``Authorization`` ...) is a secret as a whole."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redact_field(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


_FIELD = re.compile(rf"(?i)[\w.-]*?(?:{_STRONG}|token|secret|credentials?|authorization|cookie)")


def _redact_field(key: str, value: Any) -> Any:
    clean = redact_value(value)
    if isinstance(value, str) and clean == value and _FIELD.fullmatch(key) and _value_ok(value, True):
        return "[REDACTED:secret]"
    return clean


def has_secret(text: str) -> bool:
    """True when :func:`redact` would change ``text``."""
    return bool(find_secrets(text))
