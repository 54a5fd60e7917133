"""A writer killed with SIGKILL mid-stream loses nothing it acknowledged and leaves a sound store.

The writer prints ``<commit id hex> <key> <i>`` after each ``put`` returns, so every printed line is
an acknowledged commit. The test kills it at different moments, reopens the same SQLite file, and
checks fsck, ancestry, values, and that the store keeps accepting writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import engram
from engram.repo import HEADS

pytestmark = pytest.mark.slow

NS = ("crash",)
AUTHOR = "crash-writer"
KEYS = 40  # keys are rewritten, so later commits overwrite earlier values
KILL_AFTER = (30, 60, 90)  # acknowledgements before the kill, one round each
WATCHDOG = 30.0  # seconds before a hung writer is killed and the round fails

WRITER = """
import sys
import engram

url, rnd, author, label, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
mem = engram.open(url, author=author)
for i in range(1_000_000):
    key = f"r{rnd}-k{i % keys}"
    commit = mem.put((label,), key, {"round": rnd, "i": i})
    print(commit.id.hex(), key, i, flush=True)
"""


def _value(rnd: int, i: int) -> dict[str, int]:
    return {"round": rnd, "i": i}


def _run_and_kill(url: str, rnd: int, kill_after: int, stderr_path: Path) -> list[tuple[str, str, int]]:
    """Start a writer, SIGKILL it after ``kill_after`` acks; return every ack it printed (in order)."""
    env = dict(os.environ)
    src = str(Path(engram.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    with (
        stderr_path.open("w") as err,
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(rnd), AUTHOR, NS[0], str(KEYS)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        ) as proc,
    ):
        watchdog = threading.Timer(WATCHDOG, proc.kill)
        watchdog.start()
        try:
            assert proc.stdout is not None
            lines: list[str] = []
            while len(lines) < kill_after:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            alive = proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            lines.extend(proc.stdout.read().splitlines(keepends=True))  # acks printed before the kill landed
            proc.wait()
        finally:
            watchdog.cancel()
    assert alive and len(lines) >= kill_after, (
        f"writer stopped after {len(lines)} acks (exit {proc.returncode}):\n{stderr_path.read_text()}"
    )
    assert proc.returncode == -signal.SIGKILL
    acks = []
    for line in lines:
        if not line.endswith("\n"):
            continue  # cut off by the kill: not acknowledged
        cid, key, i = line.split()
        acks.append((cid, key, int(i)))
    return acks


def _check_after_crash(url: str, rnd: int, acks: list[tuple[str, str, int]], start: str, earlier: list[str]) -> str:
    """Reopen the store and check what the killed writer acknowledged; return the new head (hex)."""
    mem = engram.open(url)
    try:
        report = mem.fsck()
        assert report.ok, f"fsck after crash {rnd}: missing={report.missing} corrupt={report.corrupt}"
        head = mem.repo.head("main")

        for cid in earlier + [cid for cid, _, _ in acks]:
            assert mem.repo.is_ancestor(bytes.fromhex(cid), head), f"acknowledged commit {cid} is not on main"

        # Each ack holds the value it wrote and is the one-parent child of the previous ack (or the start).
        previous = start
        for cid, key, i in acks:
            commit = mem.resolve(cid)
            assert commit.parents == (bytes.fromhex(previous),)
            item = mem.at(cid).get(NS, key)
            assert item is not None and item.value == _value(rnd, i), f"{key} at {cid}"
            previous = cid

        # The head is the last ack, or a descendant: at most the one commit made before its line was printed.
        last = bytes.fromhex(acks[-1][0])
        extra = []
        for commit in mem.repo.iter_first_parents(head):
            if commit.id == last:
                break
            extra.append(commit)
        assert len(extra) <= 1, f"{len(extra)} unacknowledged commits after the last ack"
        for commit in extra:
            assert len(commit.parents) == 1
            assert commit.author == AUTHOR
            assert commit.message.startswith(f"put {NS[0]}/r{rnd}-k")
            assert len(list(mem.repo.changes(commit))) == 1

        # The live values: each key holds its last acknowledged value, or a later write of this round.
        last_i = {key: i for _, key, i in acks}
        for key, i in last_i.items():
            item = mem.get(NS, key)
            assert item is not None and item.value["round"] == rnd and item.value["i"] >= i

        reflog = mem.repo.refs.reflog(HEADS + "main", limit=1)
        assert reflog[0].new == head

        # The store still takes writes after the crash.
        after = mem.put(("after",), f"round{rnd}", {"round": rnd})
        assert after.parents == (head,)
        assert mem.head.id == after.id
        got = mem.get(("after",), f"round{rnd}")
        assert got is not None and got.value == {"round": rnd}
        assert mem.fsck().ok
        return after.id.hex()
    finally:
        mem.close()


def test_sqlite_writer_killed_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    """SIGKILL a writer three times at different moments: acked commits survive, the store stays sound."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    with engram.open(url) as mem:
        start = mem.head.id.hex()  # the init commit
    acknowledged: list[str] = []
    for rnd, kill_after in enumerate(KILL_AFTER):
        acks = _run_and_kill(url, rnd, kill_after, tmp_path / f"writer{rnd}.err")
        after = _check_after_crash(url, rnd, acks, start, acknowledged)
        start = after
        acknowledged += [cid for cid, _, _ in acks] + [after]

    mem = engram.open(url)
    try:
        assert mem.fsck().ok
        head = mem.repo.head("main")
        assert all(mem.repo.is_ancestor(bytes.fromhex(cid), head) for cid in acknowledged)
        assert all(len(c.parents) <= 1 for c in mem.log())
        for rnd in range(len(KILL_AFTER)):
            got = mem.get(("after",), f"round{rnd}")
            assert got is not None and got.value == {"round": rnd}
    finally:
        mem.close()
