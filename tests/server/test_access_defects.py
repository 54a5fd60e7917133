"""The access defects one by one, each as the attacker tried it: a tenant's keys against its private channel
state, the writer's state and the event stream."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import engram
from engram.errors import PermissionDeniedError

from .access_world import MARKERS, World, make_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make_world(tmp_path)


def test_a_read_only_key_cannot_read_a_dm_it_names(world: World) -> None:
    ns, key = world.items["dm_not_in"]
    got = world.call("ro", "GET", "/v1/items", params={"namespace": ".".join(ns), "key": key})
    assert got.status_code == 403 and got.json()["error"]["code"] == "system_namespace"
    assert MARKERS["dm_not_in"] not in got.text


@pytest.fixture(params=["sqlite", "postgres"])
def any_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    if request.param == "sqlite":
        yield from make_world(tmp_path)
    else:
        yield from make_world(tmp_path, request.getfixturevalue("pgvector_url"), "t" + uuid.uuid4().hex[:12])


def test_root_searches_hide_system_state_that_a_system_key_sees(any_world: World) -> None:
    """The positive control: the same search shows the private messages to a key with the system scope; ranked
    searches (keyword, semantic, hybrid) fill their page with visible items."""
    world = any_world
    dm = MARKERS["dm_not_in"]
    for i in range(5):
        item = {"namespace": ["users", "carol"], "key": f"n{i}", "value": {"text": f"note {i} about {dm[:4]}"}}
        assert world.call("rw", "PUT", "/v1/items", json=item).status_code == 200
    for mode in ("keyword", "semantic", "hybrid"):
        body = {"query": f"{dm} {MARKERS['own']}", "mode": mode, "limit": 3}
        shown = world.call("system", "POST", "/v1/search", json=body).json()["items"]
        hidden = world.call("rw", "POST", "/v1/search", json=body).json()["items"]
        assert dm in json.dumps(shown), (mode, shown)
        assert dm not in json.dumps(hidden), (mode, hidden)
        assert len(hidden) == (1 if mode == "keyword" else 3), (mode, hidden)  # keywords: only alice's matches
        assert not [i for i in hidden if i["namespace"][0].startswith("_")]


def test_root_listings_hide_system_state_that_a_system_key_sees(world: World) -> None:
    """The positive control: the same listing shows the private messages to a key with the system scope."""
    for route, body in (
        ("/store/items/search", {"namespace_prefix": [], "limit": 1000}),
        ("/v1/search", {"limit": 1000}),
    ):
        hidden = world.call("rw", "POST", route, json=body)
        shown = world.call("system", "POST", route, json=body)
        assert hidden.status_code == shown.status_code == 200
        assert MARKERS["dm_not_in"] in shown.text and MARKERS["own"] in shown.text
        assert MARKERS["dm_not_in"] not in hidden.text and MARKERS["own"] in hidden.text
    names = world.call("ro", "GET", "/v1/namespaces").json()["namespaces"]
    assert names and not [ns for ns in names if ns[0].startswith("_")]
    assert any(ns[0] == "_channels" for ns in world.call("system", "GET", "/v1/namespaces").json()["namespaces"])


def test_log_and_timeline_hide_the_services_commits(world: World) -> None:
    for route in ("/v1/log", "/v1/timeline"):
        seen = world.call("ro", "GET", route, params={"limit": 500}).json()["commits"]
        assert seen and not [c for c in seen if c["message"].startswith("channels")]
        everything = world.call("system", "GET", route, params={"limit": 500}).json()["commits"]
        channel_commits = [c["message"] for c in everything if c["message"].startswith("channels")]
        assert channel_commits and not [m for m in channel_commits if "dm:" in m or "bpriv" in m or "notes:" in m]


def test_a_write_key_cannot_bind_itself_to_agents(world: World) -> None:
    own_id = world.key_ids["rw"]
    forged = {
        "namespace": ["_channels", "keys"],
        "key": own_id,
        "value": {"agents": ["a", "b"], "read_all_notes": True},
    }
    for route in ("/store/items", "/v1/items"):
        assert world.call("rw", "PUT", route, json=forged).status_code == 403
    assert world.call("rw", "GET", "/v1/notes/peek/b").status_code == 403  # still bound to no agent


def test_a_write_key_cannot_rewrite_a_message_or_join_a_private_channel(world: World) -> None:
    ns, key = world.items["private_channel"]
    rewrite = {"namespace": list(ns), "key": key, "value": {"content": "forged", "author": "b"}}
    assert world.call("agent_a", "PUT", "/v1/items", json=rewrite).status_code == 403
    join = {"namespace": ["_channels", "members", "shop:bpriv"], "key": "a", "value": {"capabilities": ["send"]}}
    assert world.call("agent_a", "PUT", "/store/items", json=join).status_code == 403
    assert world.call("agent_a", "GET", "/v1/channels/shop:bpriv/messages").status_code in (403, 404)


def test_revert_of_a_channel_commit_is_refused_and_the_event_log_does_not_rewind(world: World) -> None:
    before = world.call("agent_b", "GET", "/v1/events", params={"limit": 1000}).json()
    refused = world.call("admin", "POST", "/v1/revert", json={"ref": world.commits["dm"], "strategy": "theirs"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "system_namespace"
    after = world.call("agent_b", "GET", "/v1/events", params={"limit": 1000}).json()
    assert after == before


def test_reset_over_channel_state_needs_the_system_scope(world: World) -> None:
    first = world.call("system", "GET", "/v1/log", params={"limit": 500}).json()["commits"][-1]["id"]
    assert world.call("admin", "POST", "/v1/reset", json={"ref": first}).status_code == 403


def test_writer_routes_hold_the_key_prefix(world: World) -> None:
    """A key restricted to users/alice neither reads nor drives bob's writer, nor reads channels through it."""
    for route in ("/v1/writer/users.bob/status", "/v1/writer/users.bob/runs", "/v1/writer/users.bob/memories",
                  "/v1/writer/_channels.messages.dm:b+c/memories"):  # fmt: skip
        got = world.call("prefix_ro", "GET", route)
        assert got.status_code == 403, (route, got.text)
        assert MARKERS["dm_not_in"] not in got.text and MARKERS["other_prefix"] not in got.text
    turn = {"role": "user", "text": "I live in Mordor."}
    assert world.call("prefix_rw", "POST", "/v1/conversations/cbob/turns", json=turn).status_code == 403
    assert world.call("prefix_rw", "POST", "/v1/writer/users.bob/run-now").status_code == 403
    assert world.call("prefix_rw", "POST", "/v1/writer/users.alice/run-now").status_code == 200


def test_prefix_keys_do_not_see_other_targets_review_branches(world: World) -> None:
    memory = world.client.app.state.engram.tenants.pool.acquire(world.tenant)  # type: ignore[attr-defined]
    try:
        memory.create_branch("writer/users.bob/run1")
        memory.create_branch("writer/users.alice/run2")
    finally:
        world.client.app.state.engram.tenants.pool.release(world.tenant, memory)  # type: ignore[attr-defined]
    refs = world.call("prefix_ro", "GET", "/v1/branches").json()["refs"]
    assert "writer/users.alice/run2" in refs and "writer/users.bob/run1" not in refs
    assert "writer/users.bob/run1" in world.call("ro", "GET", "/v1/branches").json()["refs"]
    state = world.call("ro", "GET", "/v1/commits/writer%2Fstate%2Fusers.bob")
    assert state.status_code == 403 and "cbob" not in state.text


def test_a_prefix_key_cannot_open_the_event_stream(world: World) -> None:
    got = world.call("prefix_rw", "GET", "/v1/events/stream", params={"timeout": 0.2})
    assert got.status_code == 403


def test_a_revoked_keys_open_stream_ends(world: World) -> None:
    """The stream re-checks its key: revoked mid-stream, it sends a last ``revoked`` event and closes."""
    key, secret = world.keyring.create(world.tenant, ("read", "write"))
    world.call("admin", "POST", "/v1/agents/keys", json={"key_id": key.id, "agents": ["c"]})
    revoker = threading.Timer(0.5, world.keyring.revoke, [key.id])
    started = time.monotonic()
    revoker.start()
    with world.client.stream("GET", "/v1/events/stream", params={"timeout": 60, "after": 0},
                             headers={"Authorization": f"Bearer {secret}"}) as stream:  # fmt: skip
        text = "".join(stream.iter_text())
    revoker.join()
    assert "event: revoked" in text
    assert time.monotonic() - started < 30  # ended by the revocation, not by its 60 s timeout


def test_library_handles_without_the_system_scope() -> None:
    """The policy lives in the library: a handle made with system=False hides and refuses, whatever the door."""
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(("_svc", "state"), "k", {"text": "hidden"})
    mem.put(("users", "a"), "k", {"text": "shown"})
    guarded = mem.handle(system=False)
    assert [i.value["text"] for i in guarded.search((), "hidden shown")] == ["shown"]
    assert guarded.list_namespaces() == [("users", "a")]
    assert guarded.count() == 1 and mem.count() == 2
    first = mem.log()[-1].id  # the commit that wrote the system item
    assert [c.namespace for c in guarded.diff(first)] == [("users", "a")]
    assert [c.message for c in guarded.log()] == ["put users/a/k", "init"]  # not the system write
    with pytest.raises(PermissionDeniedError):
        guarded.get(("_svc", "state"), "k")
    with pytest.raises(PermissionDeniedError):
        guarded.put(("_svc", "state"), "k", {"text": "forged"})
    with pytest.raises(PermissionDeniedError):
        guarded.search(("_svc",), "hidden")
    assert mem.get(("_svc", "state"), "k") is not None
