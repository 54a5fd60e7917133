"""The name rules (engram._names): whole-name matches, no commit-id look-alikes for new refs, no invisible
characters written into keys or namespace labels, NFC keys and labels; names written before the rules stay
readable."""

from __future__ import annotations

import asyncio
import unicodedata

import pytest

from engram import codec
from engram._names import COMMIT_ID, invisible, new_ref_name, nfc, ref_name
from engram.errors import InvalidKeyError, InvalidNamespaceError, InvalidRefError
from engram.objects import Record, encode_record
from engram.repo import HEADS
from engram.store import AsyncMemory, GetOp, Memory, PutOp

#: Invisible characters a key or label cannot be written with (code point: why it is dangerous).
INVISIBLE = {
    "\r": "rewrites a terminal line", "\x1b": "starts a terminal escape", "\x7f": "DEL", "\x85": "C1 NEL",
    "\x0b": "vertical tab",
    "\u202e": "right-to-left override", "\u202d": "left-to-right override", "\u2066": "left-to-right isolate",
    "\u200b": "zero-width space", "\u200c": "zero-width non-joiner", "\u200d": "zero-width joiner",
    "\u2060": "word joiner", "\ufeff": "zero-width no-break space (BOM)", "\u00ad": "soft hyphen",
    "\u2028": "line separator", "\u2029": "paragraph separator", "\u00a0": "no-break space",
    "\u3000": "ideographic space",
}  # fmt: skip
CAFE_NFC, CAFE_NFD = "caf\u00e9", "cafe\u0301"


@pytest.mark.parametrize("name", ["x\n", "main\n", "x\r", "x\r\nSet-Cookie: a", "x y", "x\u202e", "ma\u200bin", ""])
def test_ref_name_is_matched_whole(name: str) -> None:
    with pytest.raises(InvalidRefError, match="invalid branch name"):
        ref_name(name, "branch")


@pytest.mark.parametrize("name", ["abcdef0", "0123456", "deadbeefcafe", "a" * 40, "20261120"])
def test_new_ref_name_cannot_read_as_a_commit_id(name: str) -> None:
    assert ref_name(name, "tag") == name  # well formed: an existing ref of that name stays readable
    with pytest.raises(InvalidRefError, match=r"hex digits is how a ref names a commit id.*'v[0-9a-f]+'"):
        new_ref_name(name, "tag")


@pytest.mark.parametrize(
    "name", ["cafe", "beef12", "abcdefg", "ABCDEF0", "v20261120", "a" * 41, "feature/x-1", "release-1.2",
             "writer/users.bob/20260101T120000123-9f2c1a", "writer/state/users.bob"],
)  # fmt: skip
def test_new_ref_names_that_are_no_commit_id_are_fine(name: str) -> None:
    assert COMMIT_ID.fullmatch(name) is None or len(name) > 40
    assert new_ref_name(name, "branch") == name


def test_invisible_finds_every_refused_character_and_spares_visible_text() -> None:
    for char in INVISIBLE:
        assert invisible(f"a{char}b") == char, repr(char)
    for text in ("plain key", "café", "日本語のキー", "emoji 😀", "\ue000 private use", "Ωmega"):
        assert invisible(text) is None, text
    assert invisible("\U0010fffd") is None  # unassigned or private: not refused (depends on the Unicode version)
    assert invisible("line\nbreak\tand tab") is None  # the whitespace of plain text (LangGraph's labels hold it)


def test_nfc_is_idempotent_and_joins_the_two_spellings() -> None:
    assert CAFE_NFC != CAFE_NFD and nfc(CAFE_NFD) == nfc(CAFE_NFC) == CAFE_NFC
    assert nfc("ascii") == "ascii" and nfc(nfc(CAFE_NFD)) == CAFE_NFC
    assert unicodedata.is_normalized("NFC", nfc("\u1100\u1161\u11a8"))  # Hangul jamo compose


def test_memory_refuses_a_branch_or_tag_name_with_a_trailing_newline(mem: Memory) -> None:
    for make in (mem.create_branch, mem.tag):
        with pytest.raises(InvalidRefError, match=r"invalid (branch|tag) name 'x\\n'"):
            make("x\n")
    assert set(mem.branches()) == {"main"} and mem.tags() == {}


def test_a_branch_named_like_a_commits_short_id_is_refused(mem: Memory) -> None:
    made = mem.put(("a",), "k", {"v": 1})
    short = made.id.hex()[:8]
    for make in (mem.create_branch, mem.tag):
        with pytest.raises(InvalidRefError, match="would hide the commits"):
            make(short)
    assert mem.resolve(short).id == made.id  # the short id still names the commit
    mem.create_branch(f"v{short}")
    assert mem.resolve(f"v{short}").id == made.id


@pytest.mark.parametrize("char", list(INVISIBLE))
def test_invisible_characters_are_refused_in_keys_and_labels_on_every_write(mem: Memory, char: str) -> None:
    bad_key, bad_ns = f"key{char}x", ("users", f"al{char}ice")
    for write in (
        lambda: mem.put(("users",), bad_key, {"v": 1}),
        lambda: mem.batch([PutOp(("users",), bad_key, {"v": 1})]),
        lambda: _in_transaction(mem, ("users",), bad_key),
        lambda: asyncio.run(AsyncMemory(mem).aput(("users",), bad_key, {"v": 1})),
    ):
        with pytest.raises(InvalidKeyError, match=f"U\\+{ord(char):04X}"):
            write()
    for write in (
        lambda: mem.put(bad_ns, "k", {"v": 1}),
        lambda: mem.batch([PutOp(bad_ns, "k", {"v": 1})]),
        lambda: _in_transaction(mem, bad_ns, "k"),
    ):
        with pytest.raises(InvalidNamespaceError, match=f"U\\+{ord(char):04X}"):
            write()
    assert len(mem.log()) == 1  # nothing was written
    assert mem.get(("users",), bad_key) is None and mem.get(bad_ns, "k") is None  # reading is no error


def _in_transaction(mem: Memory, ns: tuple[str, ...], key: str) -> None:
    with mem.transaction() as tx:
        tx.put(ns, key, {"v": 1})


def test_nfd_and_nfc_spellings_address_one_item(mem: Memory) -> None:
    mem.put(("people", CAFE_NFD), CAFE_NFD, {"v": 1})
    got = mem.get(("people", CAFE_NFC), CAFE_NFC)
    assert got is not None and got.key == CAFE_NFC and got.namespace == ("people", CAFE_NFC)
    mem.put(("people", CAFE_NFC), CAFE_NFC, {"v": 2})  # the same item, replaced
    assert [(i.namespace, i.key, i.value) for i in mem.search(("people",))] == [
        (("people", CAFE_NFC), CAFE_NFC, {"v": 2})
    ]
    assert mem.batch([GetOp(("people", CAFE_NFD), CAFE_NFD)])[0].value == {"v": 2}
    assert mem.list_namespaces(prefix=("people", CAFE_NFD)) == [("people", CAFE_NFC)]
    assert len(mem.history(("people", CAFE_NFD), CAFE_NFD)) == 2
    mem.delete(("people", CAFE_NFD), CAFE_NFD)
    assert mem.get(("people", CAFE_NFC), CAFE_NFC) is None


def test_names_written_before_the_rules_stay_readable(mem: Memory) -> None:
    """A key with a carriage return and a branch named like a commit id, as an older engram could write them."""
    raw = codec.encode_key(("legacy",), "carriage\rreturn")
    record = encode_record(Record({"v": 1}, 1, 1, None, "old", (), {}))
    made = mem.repo.commit_edits("main", {raw: record}, author="old", message="legacy write")
    assert mem.repo.refs.set(HEADS + "abcdef12", made.id, None, actor="old", reason="legacy branch")
    got = mem.get(("legacy",), "carriage\rreturn")
    assert got is not None and got.value == {"v": 1}
    assert [i.key for i in mem.search(("legacy",))] == ["carriage\rreturn"]
    assert mem.resolve("abcdef12").id == made.id and "abcdef12" in mem.branches()
    mem.delete(("legacy",), "carriage\rreturn")  # and can be cleaned up
    assert mem.get(("legacy",), "carriage\rreturn") is None
    mem.delete_branch("abcdef12")
    assert "abcdef12" not in mem.branches()
