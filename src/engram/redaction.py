"""What engram shows of a URL or an error to someone who does not own the machine: no credentials, no paths.

Every URL engram prints (``engram remote list``, ``/readyz``, ``/metrics`` labels, error messages, logs) goes
through :func:`redact_url`, which hides a URL's password (``s3://AKIA...:***@bucket``) and the value of every
query parameter that names a secret (``?token=***``); the user name and the host stay, so the operator can
still tell which URL it is. What the server shows over HTTP also goes through :func:`hide_paths`, which
replaces absolute file system paths (a SQLite file, a socket, a ``dir://`` remote) with ``<path>``::

    >>> redact_url("s3://AKIAEXAMPLE:TOPSECRETKEY@bucket/p?endpoint=http://minio:9000&token=abc")
    's3://AKIAEXAMPLE:***@bucket/p?endpoint=http://minio:9000&token=***'
    >>> hide_paths('connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed')
    'connection to server on socket "<path>" failed'
"""

from __future__ import annotations

import re
from typing import Any

#: What a hidden secret is replaced with.
MASK = "***"
#: What a hidden path is replaced with.
PATH = "<path>"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/?#@\"']*):[^\s/?#@\"']*@")
_SECRET_PARAMETER = re.compile(
    r"(?i)([?&;][^=&#\s\"']*(?:secret|token|signature|sig|password|passwd|pwd|credential|key|auth)"
    r"[^=&#\s\"']*=)[^&#\s\"']+"
)
# A path-only URL (dir:///srv, file:///x, sqlite:////x): scheme, "://", then the path at once.
_PATH_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)/[^\s\"'<>,;:)]*")
# An absolute path: at the start, after a space, quote, bracket or '=', or after a ':' that starts no URL.
_PATH = re.compile(r"(?:(?<=^)|(?<=[\s\"'(\[=,])|(?<=[A-Za-z]:)(?!//))/(?!/)[^\s\"'<>,;:)\]]*")


def redact_url(text: str) -> str:
    """``text`` (a URL, or a message naming URLs) with every URL's password and secret query values masked."""
    return _SECRET_PARAMETER.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1:{MASK}@", text))


def has_secret(url: str) -> bool:
    """True when ``url`` carries a password or a secret query parameter (what :func:`redact_url` masks)."""
    return redact_url(url) != url


def hide_paths(text: str) -> str:
    """``text`` with every absolute file system path (a file, a folder, a socket) replaced by ``<path>``."""
    return _PATH.sub(PATH, _PATH_URL.sub(rf"\1{PATH}", text))


def scrub(text: str) -> str:
    """``text`` as the server shows it: no credentials (:func:`redact_url`), no paths (:func:`hide_paths`)."""
    return hide_paths(redact_url(text))


def scrub_value(value: Any) -> Any:
    """A JSON-like value with every string in it scrubbed (:func:`scrub`), dict keys too; a new copy. Keys that
    scrub to the same text (two sockets of one name) stay apart: the later ones get ``#2``, ``#3`` ..."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, item in value.items():
            name = base = scrub(str(key))
            n = 2
            while name in found:
                name, n = f"{base}#{n}", n + 1
            found[name] = scrub_value(item)
        return found
    if isinstance(value, list | tuple):
        return [scrub_value(item) for item in value]
    return value


__all__ = ["MASK", "PATH", "has_secret", "hide_paths", "redact_url", "scrub", "scrub_value"]
