"""Spawned processes that start together on a barrier and report back: the harness of the multi-process tests."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any


def race(target: Callable[..., None], args: Sequence[tuple[Any, ...]], timeout: float) -> list[Any]:
    """Run ``target(*args[i], start, results)`` in one spawned process per args tuple, all released by one
    barrier (``start``); each puts its report on ``results``. Returns the reports sorted; every process
    has exited (or was killed after ``timeout``) when this returns."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(len(args), timeout=timeout)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, results)) for a in args]
    for p in procs:
        p.start()
    try:
        reports = sorted(results.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout)
            if p.is_alive():
                p.kill()
                p.join()
    results.close()
    results.join_thread()
    return reports
