"""Secret redaction: API keys, tokens, passwords and private keys never reach a memory, a trace or a log.

Patterns are deliberately broad (a false positive costs a word of a memory; a false negative leaks a
credential into a versioned store, where it stays in history)::

    >>> redact("my key is sk-abc123def456ghi789jkl012")
    'my key is [REDACTED:api-key]'
"""

from __future__ import annotations

import re
from typing import Any

#: (name, pattern): the matched text is replaced by ``[REDACTED:<name>]``.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private-key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL),
    ),
    ("api-key", re.compile(r"\b(?:sk|pk|rk)-(?:[A-Za-z0-9_-]{2,}-)?[A-Za-z0-9_-]{16,}")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google-key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{12,}")),
    ("url-credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@")),
    (
        "secret",
        re.compile(
            r"(?i)\b(password|passwd|passphrase|pwd|secret|api[_ -]?key|access[_ -]?key|auth[_ -]?token|token)"
            r"(\s*(?:is|=|:)\s*)(['\"]?)[^\s'\",;]{4,}\3"
        ),
    ),
)


def redact(text: str) -> str:
    """``text`` with every secret the patterns recognise replaced by ``[REDACTED:<kind>]``."""
    for name, pattern in PATTERNS:
        if name == "secret":
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED:secret]", text)
        elif name == "url-credentials":
            text = pattern.sub(lambda m: f"{m.group(1)}:[REDACTED:password]@", text)
        else:
            text = pattern.sub(f"[REDACTED:{name}]", text)
    return text


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string in it redacted (dict keys included)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def has_secret(text: str) -> bool:
    """True when :func:`redact` would change ``text``."""
    return redact(text) != text
