"""The rules for names: branch and tag names, namespace labels and item keys (no I/O).

One module decides what a name may hold, so every door (library, CLI, HTTP, MCP) refuses the same
things with the same messages:

- **Branch and tag names** are ASCII: letters, digits and ``. _ / -``, starting with a letter, digit
  or ``_``; no ``..``, ``//``, trailing ``.``, ``/`` or ``.lock``; not ``HEAD``; at most 255
  characters. The whole name must match (a trailing newline is refused, not ignored). A *new* name
  also cannot be 7 to 40 lowercase hex digits: that is how a ref expression spells a commit id, and a
  branch or tag of that name would hide the commit whose id starts with it.
- **Namespace labels and item keys** are any Unicode text except invisible characters, refused
  when something is written: controls (category Cc: carriage return, DEL, C1 controls, ...) other
  than tab and line feed, format characters (Cf: right-to-left overrides, zero-width spaces and
  joiners, U+2060, U+FEFF), line and paragraph separators (Zl, Zp), spaces other than U+0020 (Zs:
  no-break, ideographic, thin spaces) and lone surrogates (Cs). That is what Python's
  ``str.isprintable`` refuses, less unassigned (Cn) and private-use (Co) code points, whose standing
  changes with the Unicode version or the font, and less tab and line feed: they are the whitespace
  of plain text, and LangGraph's own store tests write a namespace label ending in a newline, which
  engram, a drop-in LangGraph store, accepts. Neither ever reaches an HTTP header.
- **Keys and labels are NFC-normalised** on the way in, reads and writes alike, so the NFD and NFC
  spellings of ``café`` address one item. Items written before this rule under a key or label that
  is not NFC stay listed and searchable; a get, delete or history by key now asks for the NFC form.
  Reads do not refuse invisible characters, so data written before these rules can still be read.
"""

from __future__ import annotations

import re
import unicodedata

from engram.errors import InvalidInputError, InvalidRefError

#: The shortest commit id prefix a ref expression reads (``a1b2c3d``); fewer hex digits are never an id.
MIN_ID_PREFIX = 7
#: A ref expression's commit id: 7 to 40 lowercase hex digits (also the names a new branch or tag cannot take).
COMMIT_ID = re.compile(rf"[0-9a-f]{{{MIN_ID_PREFIX},40}}")
#: The longest branch or tag name (ASCII only, so also bytes): refs are keys of a database index on every backend.
MAX_REF_NAME = 255
_REF_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]*")
#: Unicode categories refused in keys and labels (plus every space but U+0020, category Zs).
INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: The controls a key or label may hold all the same: tab and line feed (see the module docstring).
WHITESPACE_CONTROLS = frozenset("\t\n")


def ref_name(name: object, kind: str) -> str:
    """Return ``name`` if it is a well-formed branch or tag name, else raise :class:`InvalidRefError`."""
    if isinstance(name, str):
        refuse_nul(name, f"{kind} name")
        if len(name) > MAX_REF_NAME:
            raise InvalidRefError(f"a {kind} name has at most {MAX_REF_NAME} characters, not {len(name):,}")
    if (
        not isinstance(name, str)
        or not _REF_NAME.fullmatch(name)
        or ".." in name
        or name.endswith((".", "/", ".lock"))
        or "//" in name
        or name == "HEAD"
    ):
        raise InvalidRefError(
            f"invalid {kind} name {name!r}: use letters, digits and . _ / -, starting with a letter, "
            "digit or _, without '..' (and not 'HEAD')"
        )
    return name


def new_ref_name(name: object, kind: str) -> str:
    """:func:`ref_name`, and not a name that reads as a commit id (checked when a branch or tag is made)."""
    checked = ref_name(name, kind)
    if COMMIT_ID.fullmatch(checked):
        raise InvalidRefError(
            f"invalid {kind} name {checked!r}: {MIN_ID_PREFIX} to 40 lowercase hex digits is how a ref names "
            f"a commit id, so a {kind} of that name would hide the commits whose ids start with it; "
            f"add a letter outside a-f or a prefix (e.g. 'v{checked}' or '{kind}-{checked}')"
        )
    return checked


def refuse_nul(text: str, what: str) -> None:
    """Raise :class:`InvalidRefError` when ``text`` holds U+0000, which no ref name can (nor PostgreSQL text)."""
    if isinstance(text, str) and "\x00" in text:
        raise InvalidRefError(f"U+0000 (NUL) cannot be stored, so no ref has it: found in the {what} {text!r}")


def invisible(text: str) -> str | None:
    """The first character of ``text`` that a key or label cannot hold (see the module docstring), else None."""
    if text.isprintable():  # the common case, at C speed: nothing refused can be in it
        return None
    for char in text:
        if char in WHITESPACE_CONTROLS:
            continue
        category = unicodedata.category(char)
        if category in INVISIBLE or (category == "Zs" and char != " "):
            return char
    return None


def refuse_invisible(text: str, what: str, error: type[InvalidInputError]) -> None:
    """Raise ``error`` naming the code point when ``text`` holds an invisible character."""
    char = invisible(text)
    if char is not None:
        name = unicodedata.name(char, "") or f"category {unicodedata.category(char)}"
        raise error(
            f"the {what} {text!r} holds U+{ord(char):04X} ({name}), an invisible or control character; "
            "keys and namespace labels cannot hold controls other than tab and line feed, format characters "
            "(bidirectional overrides, zero-width characters), line separators or spaces other than U+0020"
        )


def nfc(text: str) -> str:
    """``text`` in Unicode normalisation form C (the form keys and labels are stored in)."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


__all__ = [
    "COMMIT_ID",
    "INVISIBLE",
    "MAX_REF_NAME",
    "MIN_ID_PREFIX",
    "WHITESPACE_CONTROLS",
    "invisible",
    "new_ref_name",
    "nfc",
    "ref_name",
    "refuse_invisible",
    "refuse_nul",
]
