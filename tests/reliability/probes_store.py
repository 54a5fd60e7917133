"""Probes on the store itself: writer processes racing on one branch, and a writer SIGKILLed again and again.

Both record every write the store acknowledged (a put or a transaction that returned a commit) and then check,
on a freshly opened store, that each one is there with its value, on the branch, and that ``fsck`` is clean.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import engram

from .harness import ProbeResult, read_acks

NS = ("reliability",)
TX_EVERY = 5  # every 5th write of a racing process is a transaction of TX_KEYS puts
TX_KEYS = 3

Ack = tuple[str, dict[str, Any], str]  # (key, value, commit id hex)


def _racer(url: str, writer: int, writes: int, embedder: str | None, start: Any, results: Any) -> None:
    """Child process body: wait for the others, then write ``writes`` times; report every acknowledged write."""
    acks: list[Ack] = []
    slowest = 0.0
    try:
        mem = engram.open(url, author=f"proc{writer}", embedder=embedder)
        try:
            start.wait()
            for i in range(writes):
                began = time.monotonic()
                if i % TX_EVERY == TX_EVERY - 1:
                    keys = [(f"w{writer}-{i}-t{j}", {"writer": writer, "i": i, "j": j}) for j in range(TX_KEYS)]
                    with mem.transaction(f"tx w{writer} {i}") as tx:
                        for key, value in keys:
                            tx.put(NS, key, value)
                    assert tx.commit is not None
                    acks += [(key, value, tx.commit.id.hex()) for key, value in keys]
                else:
                    key, value = f"w{writer}-{i}", {"writer": writer, "i": i, "text": f"note {i} of writer {writer}"}
                    acks.append((key, value, mem.put(NS, key, value).id.hex()))
                slowest = max(slowest, time.monotonic() - began)
        finally:
            mem.close()
        results.put((writer, acks, "", slowest))
    except BaseException:
        results.put((writer, acks, traceback.format_exc(), slowest))


def race_reports(target: Any, args: Sequence[tuple[Any, ...]], timeout: float) -> tuple[list[Any], list[int]]:
    """Like ``tests/processes.race`` (spawned processes released by one barrier, each putting one report), but
    bounded as a whole by ``timeout`` and keeping the reports that did arrive: returns (reports, exit codes),
    a process still running at the deadline is killed (its exit code is then -9)."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(len(args), timeout=timeout)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, results)) for a in args]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    reports = []
    try:
        while len(reports) < len(procs) and time.monotonic() < deadline:
            try:
                reports.append(results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
    finally:
        for proc in procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
    results.close()
    results.join_thread()
    return sorted(reports), [proc.exitcode or 0 for proc in procs]


def check_acks(mem: engram.Memory, acks: Sequence[Ack], result: ProbeResult, *, label: str = "") -> None:
    """Count as lost every acknowledged write whose value is not in ``mem`` or whose commit is not on its branch."""
    head = mem.repo.head(mem.branch)
    assert head is not None
    on_branch: dict[str, bool] = {}
    for key, value, cid in acks:
        item = mem.get(NS, key)
        if cid not in on_branch:
            on_branch[cid] = mem.repo.is_ancestor(bytes.fromhex(cid), head)
        if item is None or item.value != value or not on_branch[cid]:
            found = None if item is None else item.value
            result.lose(
                key,
                f"{label}lost write {key}: expected {value} (commit {cid[:12]}, on branch: "
                f"{on_branch[cid]}), found {found}",
            )


def run_process_race(
    url: str,
    *,
    processes: int,
    writes: int,
    embedder: str | None = None,
    check_search: bool = False,
    timeout: float = 90.0,
) -> ProbeResult:
    """``processes`` spawned processes write one branch of ``url`` at once (puts and transactions of their own
    keys); every acknowledged write must be found afterwards, fsck clean, and no process may get an error."""
    result = ProbeResult("processes on one branch", runs=processes)
    engram.open(url, embedder=embedder).close()  # create and migrate once, as a deployed store would be
    reports, codes = race_reports(_racer, [(url, w, writes, embedder) for w in range(processes)], timeout)
    acks: list[Ack] = []
    for writer, got, error, slowest in reports:
        acks += got
        result.latency(slowest)
        if error:
            result.server_errors += 1
            result.problem(f"process {writer} failed after {len(got)} acknowledged writes:\n{error}")
    if len(reports) < processes:
        result.server_errors += processes - len(reports)
        silent = sorted(set(range(processes)) - {writer for writer, *_ in reports})
        result.problem(
            f"only {len(reports)} of {processes} processes reported within {timeout} s; silent: "
            f"{silent}, exit codes {codes}"
        )
    result.acknowledged = len(acks)
    result.requests = len({cid for _, _, cid in acks})
    with engram.open(url, embedder=embedder) as mem:
        check_acks(mem, acks, result)
        report = mem.fsck()
        if not report.ok:
            result.problem(f"fsck: missing={report.missing[:5]} corrupt={report.corrupt[:5]}")
        if check_search:
            listed = {item.key for item in mem.search(NS, limit=10_000)}
            missing = sorted({key for key, _, _ in acks} - listed)
            if missing:
                result.problem(f"search (listing) misses {len(missing)} acknowledged items, e.g. {missing[:5]}")
    return result


# ------------------------------------------------------------------------------ SIGKILL loop

#: The killed writer: puts, transactions of three puts and a gc, forever; after each commit returns it appends
#: ``key<TAB>value json<TAB>commit`` per written key to the acknowledgement file and fsyncs it.
KILLED_WRITER = r"""
import json, os, random, sys
import engram

url, acks, rnd, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
NS = ("reliability",)
rng = random.Random(seed)


def ack(lines):
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(line + "\n" for line in lines).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


mem = engram.open(url, author="killed-writer", embedder=None)
for i in range(1_000_000):
    step = i % 12
    if step == 11:
        mem.gc()
        continue
    writes = [(f"r{rnd}-{i}-{j}", {"round": rnd, "i": i, "j": j, "pad": "x" * rng.randint(0, 3000)})
              for j in range(3 if step in (3, 7) else 1)]
    if len(writes) == 1:
        commit = mem.put(NS, *writes[0])
    else:
        with mem.transaction(f"round {rnd} step {i}") as tx:
            for key, value in writes:
                tx.put(NS, key, value)
        commit = tx.commit
    ack([f"{key}\t{json.dumps(value)}\t{commit.id.hex()}" for key, value in writes])
"""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(engram.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


def _kill_one(url: str, workdir: Path, rnd: int, rng: random.Random, watchdog: float) -> tuple[Path, str]:
    """Start the writer, SIGKILL it at a random moment; return its ack file and a problem ('' when none)."""
    acks, err = workdir / f"acks{rnd}.tsv", workdir / f"writer{rnd}.err"
    early = rng.random() < 0.2  # sometimes kill while it imports, opens or migrates: a moment like any other
    with (
        err.open("w") as stderr,
        subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, url, str(acks), str(rnd), str(rng.randrange(1 << 30))],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_child_env(),
        ) as proc,
    ):
        try:
            if early:
                time.sleep(rng.uniform(0.05, 0.5))
            else:
                deadline = time.monotonic() + watchdog
                while not read_acks(acks) and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 0.6))
            exited = proc.poll()
            proc.send_signal(signal.SIGKILL)
            proc.wait(watchdog)
        finally:
            if proc.poll() is None:
                proc.kill()
    if exited is not None:
        return acks, f"round {rnd}: the writer exited by itself (code {exited}) before the kill:\n{err.read_text()}"
    if not early and not read_acks(acks):
        return acks, f"round {rnd}: the writer acknowledged nothing within {watchdog} s:\n{err.read_text()}"
    return acks, ""


def run_sigkill_loop(
    url: str, workdir: Path, *, kills: int, seed: int = 9, watchdog: float = 30.0, check_search: bool = False
) -> ProbeResult:
    """SIGKILL a writer (puts, transactions, gc) ``kills`` times at random moments; after each kill the store
    must open, fsck clean, hold every write acknowledged so far (``check_search``: and list it in a search),
    and take a new write."""
    result = ProbeResult("SIGKILL loop", runs=kills)
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    engram.open(url, embedder=None).close()
    acked: list[Ack] = []
    for rnd in range(kills):
        ack_file, problem = _kill_one(url, workdir, rnd, rng, watchdog)
        if problem:
            result.problem(problem)
        acked += [(key, json.loads(value), cid) for key, value, cid in read_acks(ack_file)]
        began = time.monotonic()
        try:
            mem = engram.open(url, embedder=None)
        except Exception as exc:
            result.server_errors += 1
            result.problem(f"round {rnd}: the store does not open after the kill: {exc!r}")
            continue
        try:
            report = mem.fsck()
            if not report.ok:
                result.problem(
                    f"round {rnd}: fsck after the kill: missing={report.missing[:5]} corrupt={report.corrupt[:5]}"
                )
            check_acks(mem, acked, result, label=f"round {rnd}: ")
            if check_search:
                listed = {item.key for item in mem.search(NS, limit=10_000)}
                missing = sorted({key for key, _, _ in acked} - listed)
                if missing:
                    result.problem(f"round {rnd}: search misses {len(missing)} acknowledged items, e.g. {missing[:3]}")
            value = {"after": rnd}
            acked.append((f"after-{rnd}", value, mem.put(NS, f"after-{rnd}", value).id.hex()))
        except Exception:
            result.server_errors += 1
            result.problem(f"round {rnd}: checking the store after the kill failed:\n{traceback.format_exc()}")
        finally:
            mem.close()
        result.latency(time.monotonic() - began)
    result.acknowledged = len(acked)
    result.requests = len({cid for _, _, cid in acked})
    return result
