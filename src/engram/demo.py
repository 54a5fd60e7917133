"""A two-minute tour of the versioning verbs: ``python -m engram.demo`` (what ``make run`` runs for now).

It writes to a throwaway store unless ``--store URL`` is given, and prints each step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from engram.errors import MergeConflictError
from engram.store import Memory, open

PREFS = ("users", "alice", "preferences")


def _say(step: str, detail: str = "") -> None:
    print(f"  {step:<34} {detail}")


def _value(mem: Memory, key: str) -> object:
    item = mem.get(PREFS, key)
    return None if item is None else item.value


def run(mem: Memory) -> None:
    """Walk through writes, tags, time travel, diff, history, branches, merge and revert."""
    print(f"engram demo on branch {mem.branch!r}\n")
    with mem.transaction("seed preferences", author="onboarding-agent") as tx:
        tx.put(PREFS, "ui.theme", {"value": "light"})
        tx.put(PREFS, "ui.font_size", {"value": 14})
        tx.put(("users", "alice", "profile"), "work_hours", {"value": "9-17"})
    _say("transaction (one commit)", f"{mem.head.short_id} wrote {mem.count()} memories")
    mem.tag("checkpoint")
    _say("tag", "checkpoint")

    mem.put(PREFS, "ui.theme", {"value": "dark"}, author="chat-agent", sources=["msg-41"])
    bad = mem.put(PREFS, "ui.font_size", {"value": 4}, author="chat-agent", sources=["msg-42"])
    _say("two more puts (a commit each)", f"head {mem.head.short_id}")

    then = mem.at("checkpoint").get(PREFS, "ui.theme")
    now = mem.get(PREFS, "ui.theme")
    assert then is not None and now is not None
    _say("at('checkpoint') vs now", f"theme {then.value['value']!r} -> {now.value['value']!r}")
    for change in mem.diff("checkpoint"):
        old = change.old.value if change.old else None
        new = change.new.value if change.new else None
        _say(f"diff checkpoint..HEAD {change.kind}", f"{'/'.join(change.namespace)}/{change.key}: {old} -> {new}")
    for version in mem.history(PREFS, "ui.theme"):
        item = version.item
        who = f"{version.commit.author} from {list(item.sources) if item else []}"
        _say(f"history {version.commit.short_id}", f"{item.value if item else None} by {who}")

    hit = mem.search(("users",), "dark", explain=True)[0]
    assert hit.explain is not None
    _say("search (hybrid, explained)", f"{hit.key} score {hit.score:.2f} (bm25 {hit.explain.get('bm25', 0):.2f}, "
         f"cosine {hit.explain.get('cosine', 0):.2f})")  # fmt: skip
    then_hit = mem.search(("users",), "theme", at="checkpoint", filter={"value": {"$exists": True}})[0]
    _say("search as of 'checkpoint'", f"{then_hit.key} = {then_hit.value}")

    mem.create_branch("fix-font", at="HEAD")
    fixer = Memory(mem.repo, branch="fix-font", author="debugger")
    fixer.put(PREFS, "ui.font_size", {"value": 16}, message="fix: readable font size")
    _say("branch fix-font, fix committed", f"main still sees {_value(mem, 'ui.font_size')}")
    merged = mem.merge("fix-font")
    _say("merge fix-font into main", f"two-parent commit {merged.short_id}, font {_value(mem, 'ui.font_size')}")

    mem.put(PREFS, "ui.theme", {"value": "neon"}, author="chat-agent")
    try:
        mem.revert(bad.id.hex())
    except MergeConflictError as exc:
        _say("revert the bad write", f"conflict reported ({len(exc.conflicts)}), nothing lost")
    undo = mem.revert("HEAD")
    _say("revert HEAD", f"{undo.short_id}: theme back to {_value(mem, 'ui.theme')}")

    print()
    for commit in mem.log(limit=12):
        stamp = time.strftime("%H:%M:%S", time.gmtime(commit.time / 1000))
        print(f"  {commit.short_id}  {stamp}  {commit.author:<17} {commit.message}")
    report = mem.fsck()
    print(f"\nfsck: {report.commits} commits, {report.nodes} tree nodes, {'ok' if report.ok else 'PROBLEMS'}")


def main(argv: list[str] | None = None) -> None:
    """Run the demo on a throwaway store (or ``--store URL``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    args = parser.parse_args(argv)
    if args.store:
        with open(args.store) as mem:
            run(mem)
        return
    with tempfile.TemporaryDirectory() as tmp, open(str(Path(tmp) / "demo.db")) as mem:
        run(mem)


if __name__ == "__main__":
    main()
