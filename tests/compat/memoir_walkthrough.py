"""Run memoir's production-debugging walkthrough (a seed document, read at test time) against engram.

The document is not in this repository: it is read from ``../shared/seeds/`` beside the clone. Its code lost its
fences and its indentation on the way, so this helper rebuilds a runnable script mechanically:

1. the code sections are picked by their headings (lines ending in ``¶``); headings and blank lines are dropped;
2. the indentation is restored from the tokens: a statement line ending in ``:`` (outside brackets) opens a block
   whose body is the next ``BODY_LENGTHS[n]`` statements (the n-th opener; comments and continuation lines of a
   bracketed statement do not count), nested blocks counting as one statement of their parent;
3. the elided memories (the comment ``# ... N total memories``) become generated ones (:func:`filler_memories`);
4. the one import of memoir's store is switched to ``engram.compat.memoir`` (the only change a user makes);
5. the script runs inside an async function (its top-level awaits), with ``run_color_recommendation_test``
   defined, and what it prints is captured.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
DOCUMENT = SEEDS / "000_8d7c29116736e407.txt"

#: The headings of the sections that hold code, in document order.
CODE_SECTIONS = (
    "Building Production History",
    "Simulating Problem Timeline",
    "User Complaint and Debugging Challenge",
    "Time-Travel Debugging",
    "Root Cause Analysis",
    "Historical Context Analysis",
    "Multi-User Timeline Analysis",
    "Performance Impact Analysis",
    "Production Fix Workflow",
)
#: Statements in the body of each block opener, by the opener's ordinal in the extracted code.
BODY_LENGTHS = (1, 1, 2, 5, 1, 1, 1, 1, 3, 1, 1, 2)

MEMOIR_IMPORT = "from memoir.store.prolly_adapter import ProllyTreeStore"
ENGRAM_IMPORT = "from engram.compat.memoir import ProllyTreeStore"
ELISION = re.compile(r"^#\s*\.\.\.\s*\d+ total memories\b")
FILLER_NAME = "_elided_memories"
ENTRY = "_walkthrough"

#: Paths at the first checkpoint: the three memories the document shows and the elided ones.
CHECKPOINT_PATHS = 145
SHOWN_MEMORIES = 3


def filler_memories() -> list[tuple[str, str]]:
    """The elided base memories, one per path (``CHECKPOINT_PATHS - SHOWN_MEMORIES`` of them): user activity over
    four weeks, search and analytics logs, and preferences, among them the dashboard colours that day 2 adds a
    memory to (so that day 2 adds no path)."""
    activities = [
        (f"User activity in week {week}: session {n} ({('research', 'drafting', 'review')[n % 3]})",
         f"activity.week_{week}.session_{n}")
        for week in range(1, 5) for n in range(1, 22)
    ]  # fmt: skip
    logs = [(f"Search log {n}: user searched the knowledge base", f"system.searches.query_{n}") for n in range(1, 21)]
    logs += [(f"Analytics {n}: daily usage summary recorded", f"system.analytics.day_{n}") for n in range(1, 21)]
    preferences = [("User likes muted dashboard colors", "preferences.ui.dashboard_colors")]
    preferences += [(f"User preference {n} saved", f"preferences.settings.option_{n}") for n in range(1, 18)]
    memories = activities + logs + preferences
    assert len(memories) == CHECKPOINT_PATHS - SHOWN_MEMORIES
    assert len({path for _, path in memories}) == len(memories)
    return memories


@dataclass
class TestResults:
    """What the walkthrough's ``run_color_recommendation_test()`` returns."""

    passed: bool


async def run_color_recommendation_test() -> TestResults:
    """The walkthrough leaves its test of the fix to the reader: it passes."""
    return TestResults(passed=True)


def sections(text: str) -> dict[str, list[str]]:
    """The document's lines by section heading (a line ending in ``¶``)."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.endswith("¶"):
            current = found.setdefault(line[:-1].strip(), [])
        else:
            current.append(line)
    return found


def code_lines(text: str) -> list[str]:
    """The code sections' lines, stripped, without blank lines, the elision replaced and the import switched."""
    by_heading = sections(text)
    missing = [name for name in CODE_SECTIONS if name not in by_heading]
    assert not missing, f"the walkthrough has no section(s) {missing}"
    lines: list[str] = []
    for name in CODE_SECTIONS:
        for raw in by_heading[name]:
            line = raw.strip()
            if not line:
                continue
            if ELISION.match(line):
                line = f"*{FILLER_NAME},"
            lines.append(line)
    imports = [n for n, line in enumerate(lines) if line == MEMOIR_IMPORT]
    assert len(imports) == 1, f"expected one import of memoir's store, found {len(imports)}"
    lines[imports[0]] = ENGRAM_IMPORT
    assert sum(line == f"*{FILLER_NAME}," for line in lines) == 1, "expected one elided list of memories"
    return lines


@dataclass
class LineKind:
    """One physical line: does it start a statement, is it a comment only, does it open a block."""

    starts: bool
    comment: bool
    opens: bool


def classify(lines: list[str]) -> list[LineKind]:
    """Tell statement starts, comments and block openers apart with Python's tokenizer (lines at column 0)."""
    kinds = [LineKind(starts=False, comment=False, opens=False) for _ in lines]
    depth = 0
    last: dict[int, tokenize.TokenInfo] = {}
    started: set[int] = set()
    source = "\n".join(lines) + "\n"
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row = token.start[0] - 1
        if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.COMMENT:
            if row not in last and depth == 0:
                kinds[row].comment = True
            continue
        if row not in last and depth == 0:
            started.add(row)
        last[row] = token
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        if depth == 0 and token.type == tokenize.OP and token.string == ":" and row in started:
            kinds[row].opens = True  # provisional: only if it is the line's last token
    for row, token in last.items():
        kinds[row].opens = kinds[row].opens and token.type == tokenize.OP and token.string == ":"
        kinds[row].starts = row in started
    return kinds


def indent(lines: list[str], bodies: tuple[int, ...] = BODY_LENGTHS) -> list[str]:
    """The lines with their indentation restored (four spaces a level), from the body length of each opener."""
    kinds = classify(lines)
    openers = sum(kind.opens for kind in kinds)
    assert openers == len(bodies), f"the walkthrough has {openers} block openers, BODY_LENGTHS gives {len(bodies)}"
    lengths: Iterator[int] = iter(bodies)
    open_blocks: list[int] = []  # statements still to come in each open block, innermost last
    out: list[str] = []
    for line, kind in zip(lines, kinds, strict=True):
        if kind.starts or kind.comment:  # a finished block takes nothing more, not even a comment
            while open_blocks and open_blocks[-1] == 0:
                open_blocks.pop()
        if kind.starts:
            out.append("    " * len(open_blocks) + line)
            if open_blocks:
                open_blocks[-1] -= 1
            if kind.opens:
                open_blocks.append(next(lengths))
        else:  # a comment, or a continuation line inside brackets (indented one more level)
            out.append("    " * (len(open_blocks) + (not kind.comment)) + line)
    assert all(left == 0 for left in open_blocks), f"blocks left unfinished: {open_blocks}"
    return out


def script(text: str) -> str:
    """The runnable script: the restored code as the body of ``async def _walkthrough()``, returning its locals."""
    body = indent(code_lines(text))
    return "\n".join([f"async def {ENTRY}():", *("    " + line for line in body), "    return locals()", ""])


def run(text: str) -> tuple[str, dict[str, Any]]:
    """Run the walkthrough; return what it printed and its variables (``prolly_store``, the snapshot names...)."""
    code = compile(script(text), str(DOCUMENT), "exec")
    scope: dict[str, Any] = {
        "__name__": "memoir_walkthrough_script",
        FILLER_NAME: filler_memories(),
        "run_color_recommendation_test": run_color_recommendation_test,
    }
    exec(code, scope)  # the seed document's code is what this test runs
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        variables: dict[str, Any] = asyncio.run(scope[ENTRY]())
    return printed.getvalue(), variables
