"""The runtime (issue #27): one owner for process-wide state, with ``close_all`` and ``reset``.

The tests that run the process's own ``close_all`` or look at a fresh import do so in a child process: closing
every shared pool in the test process would pull the floor from under other tests' stores."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from services import require_redis

import engram
from engram import runtime
from engram.store import indexing, querycache, tenant_url

SRC = Path(__file__).resolve().parents[1] / "src"


def run_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter with engram on its path; returns its output (it must exit 0)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_runtime_hooks_run_newest_first_and_a_failing_hook_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner, calls = runtime.Runtime(), []

    def fail() -> None:
        calls.append("b")
        raise RuntimeError("b broke")

    owner.register("a", close=lambda: calls.append("a"), reset=lambda: calls.append("a-reset"))
    owner.register("b", close=fail)
    owner.register("c", close=lambda: calls.append("c"), reset=lambda: calls.append("c-reset"))
    with caplog.at_level(logging.ERROR, logger="engram.runtime"):
        failed = owner.close_all()
    assert calls == ["c", "b", "a"]
    assert [(name, str(exc)) for name, exc in failed] == [("b", "b broke")]
    assert "b" in caplog.text and "b broke" in caplog.text
    calls.clear()
    assert owner.reset() == [] and calls == ["c-reset", "a-reset"]  # b has no reset hook
    owner.register("a", close=lambda: calls.append("a2"))  # registered again: new hooks, same place
    calls.clear()
    owner.close_all()
    assert owner.names() == ["a", "b", "c"] and calls == ["c", "b", "a2"]
    owner.unregister("b")
    assert owner.names() == ["a", "c"]
    with pytest.raises(ValueError):
        owner.register("nothing")


def test_runtime_once_makes_an_object_once_and_keeps_it_through_close_all_and_reset() -> None:
    owner, made = runtime.Runtime(), []
    first = owner.once("x", lambda: made.append(1) or object())
    owner.close_all()
    owner.reset()
    assert owner.once("x", object) is first and made == [1]


def test_runtime_threads_start_on_use_stop_on_close_all_and_start_again() -> None:
    owner = runtime.Runtime()
    threads = runtime.Threads("engram-test-threads", 2, runtime=owner)
    assert not threads.running
    pool = threads.get()
    assert pool.submit(lambda: 41 + 1).result(timeout=10) == 42
    owner.close_all()
    assert not threads.running
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)  # the old pool is shut down
    assert threads.get() is not pool and threads.get().submit(lambda: 1).result(timeout=10) == 1
    threads.shutdown()


def test_runtime_is_exported_from_engram() -> None:
    assert engram.close_all is runtime.close_all and engram.reset is runtime.reset
    assert {"close_all", "reset"} <= set(engram.__all__)
    registered = set(runtime.default.names())
    assert {"engram.store.indexing.embedders", "engram.store.querycache", "engram.store.connect",
            "engram.breakers", "engram.index.vector.searchers"} <= registered  # fmt: skip


def test_runtime_reset_clears_shared_embedders_and_caches(tmp_path: Path) -> None:
    mem = engram.open(str(tmp_path / "store"), embedder="hashing", background_index=False)
    try:
        mem.put(("docs",), "a", {"text": "hello runtime"})
        assert len(mem.search(("docs",), query="hello")) == 1
        assert querycache.SHARED.size()[0] >= 1
        auto = engram.open(str(tmp_path / "store"), embedder="auto", background_index=False)
        shared = auto.pool.embedder
        auto.close()
        assert shared is not None and shared in indexing._AUTO.values()
        engram.reset()
        assert indexing._AUTO == {} and querycache.SHARED.size() == (0, 0)
        again = engram.open(str(tmp_path / "store"), embedder="auto", background_index=False)
        assert again.pool.embedder is not shared  # made afresh after the reset
        again.close()
        assert [i.key for i in mem.search(("docs",), query="hello")] == ["a"]  # the store still works
    finally:
        mem.close()


def test_runtime_close_all_closes_a_shared_postgres_pool_a_redis_client_and_thread_pools(postgres_url: str) -> None:
    redis_url = require_redis()
    name = "engram-rt-" + uuid.uuid4().hex[:8]
    url = tenant_url(postgres_url, "t" + uuid.uuid4().hex[:16])
    out = run_child(f"""
import redis, engram
from engram.backends import postgres
from engram.store import connect
from engram.ops.remotes import stores
from engram.index import vector

redis_url = {redis_url!r} + "?client_name={name}"
mem = engram.open({url!r}, redis=redis_url, embedder=None)
mem.put(("a",), "k", {{"v": 1}})
assert mem.get(("a",), "k") is not None
pool = next(iter(postgres._SHARED.values()))[0].pool
health = connect._REDIS[redis_url]
readers = stores._readers()
readers.submit(lambda: None).result()
probe = redis.Redis.from_url({redis_url!r})
named = lambda: [c for c in probe.client_list() if c.get("name") == {name!r}]
assert named(), "the cache's client is connected"
assert not pool.closed
engram.close_all()
assert pool.closed and postgres._SHARED == {{}}
assert connect._REDIS == {{}} and named() == []
assert not stores._READERS.running and readers._shutdown
assert vector._SEARCHERS == {{}}
probe.close()
print("closed")
""")
    assert out.strip() == "closed"


def test_runtime_a_fresh_import_registers_no_prometheus_collector_until_a_metric_is_used() -> None:
    out = run_child("""
from prometheus_client import REGISTRY
import engram, engram.ops.metrics, engram.writer, engram.server
from engram.ops import metrics

def ours():
    return sorted(n for n in REGISTRY._names_to_collectors if n.startswith("engram_"))

assert ours() == [], ours()
mem = engram.open(":memory:", embedder=None)
mem.put(("a",), "k", {"v": 1})
assert "engram_commits_total" in ours() and "engram_breaker_state" not in ours()
assert "engram_breaker_state" in metrics.exposition().decode()  # what is computed at scrape: on first scrape
print("lazy")
""")
    assert out.strip() == "lazy"


def test_runtime_metric_names_stay_importable_from_observe() -> None:
    from engram import observe

    assert observe.COMMITS is observe.metrics().commits
    with pytest.raises(AttributeError):
        _ = observe.NOT_A_METRIC
