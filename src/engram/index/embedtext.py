"""Which text of an item is embedded: by default only the memory's text, never its dates, ids or other metadata.

The keyword index reads every string leaf at the index fields (:func:`engram.index.paths.document_text`): a date or
an id is worth matching word for word. The embedder gets less. When an item is indexed with the store's default
fields (``$``, the whole value) and its value has a memory text (a non-empty string in its ``text``, ``content`` or
``memory`` field, the first one found in that order), only that string is embedded: dates, session names, ids
and scores beside it are mostly noise to a sentence embedder, and the keyword index matches them better
(measured in docs/search.md, "What is embedded"). Everything else is embedded as it is indexed:

- an item put with its own ``index=[...]`` fields: the text at those fields (the caller chose);
- a store opened with other ``index_fields`` than ``$``: the text at those fields;
- a value with no memory text (``{"theme": "dark"}``): all of its text, as the keyword index reads it.

Vectors are cached by the hash of the text they embed (:mod:`engram.index.cache`), so an item whose embedded text
changed is embedded again the next time its index is built, and one whose text did not is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The value fields a memory's text is read from, in order (the same as ``Memory.context`` reads).
TEXT_FIELDS = ("text", "content", "memory")
#: The default index fields: the whole value.
WHOLE = ("$",)
#: Names what is embedded, for anything keyed by it (an index snapshot's file name): a snapshot made while whole
#: values were embedded is not restored, so its vectors are rebuilt (through the vector cache) for the new texts.
EMBED_TEXT_VERSION = "memory-text-1"


def memory_text(value: Mapping[str, Any]) -> str | None:
    """The value's memory text: its first non-empty string among :data:`TEXT_FIELDS`, else None."""
    for name in TEXT_FIELDS:
        found = value.get(name)
        if isinstance(found, str) and found.strip():
            return found
    return None


def embedded_text(value: Mapping[str, Any], chosen: object, fields: Sequence[str], indexed: str) -> str:
    """The text of an item that is embedded.

    ``chosen`` is the item's own index fields (its record's ``extra["index"]``: a list, or None), ``fields`` the
    store's index fields and ``indexed`` the text the keyword index reads (``document_text`` at those fields).
    """
    if isinstance(chosen, list) or tuple(fields) != WHOLE:
        return indexed
    found = memory_text(value)
    return indexed if found is None else found


__all__ = ["EMBED_TEXT_VERSION", "TEXT_FIELDS", "WHOLE", "embedded_text", "memory_text"]
