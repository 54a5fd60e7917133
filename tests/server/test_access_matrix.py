"""The access matrix: every HTTP route and every MCP tool, called by every kind of caller against every kind of
target, on SQLite and PostgreSQL. A route or tool without an entry here fails the test.

Each entry names its family, which decides the expected outcome:

* ``item``: reads or writes one target's namespace: allowed exactly when the caller may read (write) the target;
* ``scan``: reads across the tenant (search, listings, log, diff): allowed with ``read``, and it never shows a
  target the caller may not read;
* ``admin``: needs ``admin`` and a key without a prefix;
* ``channels`` / ``writer``: the services' own routes: agent-bound (channels) or target-bound (writer) rules;
* ``open``: no key needed, nothing private shown.

Whatever the family, no response to a caller ever shows a private marker it may not see, a caller without a key
(or with a revoked one) gets 401 on every route that needs a key, and the private state is intact afterwards.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from engram.mcp.server import TOOLS, call_tool

from .access_world import KINDS, MARKERS, SYSTEM_TARGETS, World, leaked, make_world

TARGETS = ("own", "other_prefix", *SYSTEM_TARGETS)


@dataclass(frozen=True)
class Entry:
    """How to call one route for one target, and the family that decides the expected outcome."""

    family: str
    scope: str
    build: Callable[[World, str, str], tuple[str, dict[str, Any]]]  # (world, kind, target) -> (url, options)
    #: For item routes: whether the call reads (True) or writes (False) the target.
    reads: bool = True
    #: Whether some caller must succeed (False: the request is refused or not found for everyone, by design).
    succeeds: bool = True


def _ns(world: World, target: str) -> tuple[list[str], str, str | None]:
    ns, key = world.items[target]
    return list(ns), key, "conversations" if target == "writer_state" else None


def _q(world: World, target: str, v1: bool = True) -> dict[str, Any]:
    ns, key, branch = _ns(world, target)
    params = {"namespace": ".".join(ns), "key": key}
    if branch and v1:
        params["branch"] = branch
    return {"params": params}


def _put(world: World, target: str, v1: bool = True) -> dict[str, Any]:
    ns, _, branch = _ns(world, target)
    body: dict[str, Any] = {"namespace": ns, "key": "probe", "value": {"x": 1}}
    if branch and v1:
        body["branch"] = branch
    return {"json": body}


def _lookup(world: World, target: str) -> dict[str, Any]:
    ns, key, branch = _ns(world, target)
    body: dict[str, Any] = {"items": [{"namespace": ns, "key": key}]}
    if branch:
        body["branch"] = branch
    return {"json": body}


#: A query whose words are every target's marker: a read-back that can leak one would find it.
_EVERY_MARKER = " ".join(MARKERS.values())


def _name(kind: str) -> str:
    return f"m-{kind.replace('_', '-')}-{uuid.uuid4().hex[:6]}"


ROUTES: dict[tuple[str, str], Entry] = {
    ("PUT", "/store/items"): Entry("item", "write", lambda w, k, t: ("/store/items", _put(w, t, False)), reads=False),
    ("GET", "/store/items"): Entry("item", "read", lambda w, k, t: ("/store/items", _q(w, t, False))),
    ("DELETE", "/store/items"): Entry(
        "item",
        "write",
        lambda w, k, t: (
            "/store/items",
            {"json": {k: v for k, v in _put(w, t, False)["json"].items() if k != "value"}},
        ),
        False,
    ),
    ("POST", "/store/items/search"): Entry(
        "scan", "read", lambda w, k, t: ("/store/items/search", {"json": {"namespace_prefix": [], "limit": 1000}})
    ),
    ("POST", "/store/namespaces"): Entry("scan", "read", lambda w, k, t: ("/store/namespaces", {"json": {}})),
    ("GET", "/v1/items"): Entry("item", "read", lambda w, k, t: ("/v1/items", _q(w, t))),
    ("PUT", "/v1/items"): Entry("item", "write", lambda w, k, t: ("/v1/items", _put(w, t)), reads=False),
    ("DELETE", "/v1/items"): Entry(
        "item", "write", lambda w, k, t: ("/v1/items", {"params": {**_q(w, t)["params"], "key": "probe"}}), False
    ),
    ("POST", "/v1/search"): Entry("scan", "read", lambda w, k, t: ("/v1/search", {"json": {"limit": 1000}})),
    ("POST", "/v1/context"): Entry(
        "scan", "read", lambda w, k, t: ("/v1/context", {"json": {"query": _EVERY_MARKER, "budget_tokens": 5000}})
    ),
    ("POST", "/v1/items/lookup"): Entry("item", "read", lambda w, k, t: ("/v1/items/lookup", _lookup(w, t))),
    ("GET", "/v1/sources/items"): Entry(
        "scan", "read", lambda w, k, t: ("/v1/sources/items", {"params": {"source": "m1", "limit": 1000}})
    ),
    ("GET", "/v1/namespaces"): Entry("scan", "read", lambda w, k, t: ("/v1/namespaces", {})),
    ("GET", "/v1/log"): Entry("scan", "read", lambda w, k, t: ("/v1/log", {"params": {"limit": 200}})),
    ("GET", "/v1/commits/{ref:path}"): Entry(
        "private_commit", "read", lambda w, k, t: (f"/v1/commits/{w.commits['dm']}", {})
    ),
    ("GET", "/v1/diff"): Entry(
        "scan", "read", lambda w, k, t: ("/v1/diff", {"params": {"old": w.commits["first"], "new": "HEAD"}})
    ),
    ("GET", "/v1/history"): Entry("item", "read", lambda w, k, t: ("/v1/history", _q(w, t))),
    ("GET", "/v1/branches"): Entry("scan", "read", lambda w, k, t: ("/v1/branches", {})),
    ("POST", "/v1/branches"): Entry("scan", "write", lambda w, k, t: ("/v1/branches", {"json": {"name": _name(k)}})),
    ("DELETE", "/v1/branches/{name:path}"): Entry(
        "admin", "admin", lambda w, k, t: (f"/v1/branches/{_made(w, 'branches')}", {})
    ),
    ("GET", "/v1/tags"): Entry("scan", "read", lambda w, k, t: ("/v1/tags", {})),
    ("POST", "/v1/tags"): Entry("scan", "write", lambda w, k, t: ("/v1/tags", {"json": {"name": _name(k)}})),
    ("DELETE", "/v1/tags/{name:path}"): Entry("admin", "admin", lambda w, k, t: (f"/v1/tags/{_made(w, 'tags')}", {})),
    ("POST", "/v1/merge"): Entry("merge", "write", lambda w, k, t: ("/v1/merge", {"json": {"source": "feature"}})),
    ("POST", "/v1/revert"): Entry(
        "revert", "write", lambda w, k, t: ("/v1/revert", {"json": {"ref": w.commits["dm"]}}), succeeds=False
    ),
    ("POST", "/v1/reset"): Entry(
        "reset",
        "admin",
        lambda w, k, t: ("/v1/reset", {"json": {"ref": "HEAD" if k == "system" else w.commits["first"]}}),
    ),
    ("POST", "/v1/gc"): Entry("admin", "admin", lambda w, k, t: ("/v1/gc", {"json": {}})),
    ("GET", "/v1/fsck"): Entry("admin", "admin", lambda w, k, t: ("/v1/fsck", {})),
    ("GET", "/v1/timeline"): Entry("scan", "read", lambda w, k, t: ("/v1/timeline", {"params": {"limit": 200}})),
    ("GET", "/v1/whoami"): Entry("scan", "read", lambda w, k, t: ("/v1/whoami", {})),
    # channels: the agent a key is bound to acts; generic keys are bound to no agent
    ("POST", "/v1/projects"): Entry("admin", "admin", lambda w, k, t: ("/v1/projects", {"json": {"id": _name(k)}})),
    ("POST", "/v1/agents"): Entry("admin", "admin", lambda w, k, t: ("/v1/agents", {"json": {"id": _name(k)}})),
    ("POST", "/v1/agents/keys"): Entry(
        "admin",
        "admin",
        lambda w, k, t: ("/v1/agents/keys", {"json": {"key_id": w.key_ids["revoked"], "agents": ["c"]}}),
    ),
    ("POST", "/v1/channels"): Entry(
        "channels", "write", lambda w, k, t: ("/v1/channels", {"json": {"name": _name(k)}})
    ),
    ("GET", "/v1/channels"): Entry("channels", "read", lambda w, k, t: ("/v1/channels", {})),
    ("POST", "/v1/channels/{channel}/join"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/join", {})
    ),
    ("POST", "/v1/channels/{channel}/leave"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/leave", {})
    ),
    ("POST", "/v1/channels/{channel}/invite"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/invite", {"json": {"agent": "a"}})
    ),
    ("POST", "/v1/channels/{channel}/archive"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_fresh_channel(w, t, k)}/archive", {})
    ),
    ("GET", "/v1/channels/{channel}/members"): Entry(
        "channels", "read", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/members", {})
    ),
    ("GET", "/v1/channels/{channel}/messages"): Entry(
        "channels", "read", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/messages", {})
    ),
    ("POST", "/v1/channels/{channel}/messages"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/messages", {"json": {"content": "hi"}})
    ),
    ("POST", "/v1/channels/{channel}/read"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/channels/{_ch(w, t)}/read", {})
    ),
    ("POST", "/v1/messages/direct"): Entry(
        "channels", "write", lambda w, k, t: ("/v1/messages/direct", {"json": {"to": "c", "content": "hello"}})
    ),
    ("POST", "/v1/messages/search"): Entry(
        "channels", "read", lambda w, k, t: ("/v1/messages/search", {"json": {"query": "MARK"}})
    ),
    ("GET", "/v1/messages/{message_id}"): Entry("channels", "read", lambda w, k, t: (f"/v1/messages/{_mid(w, t)}", {})),
    ("GET", "/v1/messages/{message_id}/history"): Entry(
        "channels", "read", lambda w, k, t: (f"/v1/messages/{_mid(w, t)}/history", {})
    ),
    ("PATCH", "/v1/messages/{message_id}"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/messages/{_fresh(w, t, k)}", {"json": {"content": "changed"}})
    ),
    ("DELETE", "/v1/messages/{message_id}"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/messages/{_fresh(w, t, k)}", {})
    ),
    ("POST", "/v1/messages/{message_id}/feedback"): Entry(
        "channels", "write", lambda w, k, t: (f"/v1/messages/{_voted(w, t, k)}/feedback", {"json": {"worked": True}})
    ),
    ("POST", "/v1/notes"): Entry("channels", "write", lambda w, k, t: ("/v1/notes", {"json": {"content": "note"}})),
    ("GET", "/v1/notes/recent"): Entry("channels", "read", lambda w, k, t: ("/v1/notes/recent", {})),
    ("POST", "/v1/notes/search"): Entry(
        "channels", "read", lambda w, k, t: ("/v1/notes/search", {"json": {"query": "MARK"}})
    ),
    ("GET", "/v1/notes/peek/{other}"): Entry(
        "channels", "write", lambda w, k, t: ("/v1/notes/peek/b", {}), succeeds=False
    ),
    ("POST", "/v1/patterns"): Entry("channels", "write", lambda w, k, t: ("/v1/patterns", {"json": {}})),
    ("GET", "/v1/agents"): Entry("channels", "read", lambda w, k, t: ("/v1/agents", {})),
    ("GET", "/v1/events"): Entry("channels", "read", lambda w, k, t: ("/v1/events", {})),
    ("GET", "/v1/events/stream"): Entry(
        "channels", "read", lambda w, k, t: ("/v1/events/stream", {"params": {"timeout": 0.2}})
    ),
    # the writer: target-bound
    ("POST", "/v1/conversations"): Entry(
        "writer",
        "write",
        lambda w, k, t: ("/v1/conversations", {"json": {"conversation_id": _name(k), "target": list(_target(t))}}),
    ),
    ("POST", "/v1/conversations/{conversation_id}/turns"): Entry(
        "writer",
        "write",
        lambda w, k, t: (f"/v1/conversations/{_conv(t)}/turns", {"json": {"role": "user", "text": "hi"}}),
    ),
    ("GET", "/v1/writer/{target}/status"): Entry(
        "writer", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/status", {})
    ),
    ("GET", "/v1/writer/{target}/runs"): Entry("writer", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/runs", {})),
    ("GET", "/v1/writer/{target}/runs/{run_id}"): Entry(
        "writer_missing", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/runs/norun", {}), succeeds=False
    ),
    ("GET", "/v1/writer/{target}/runs/{run_id}/trace"): Entry(
        "writer_missing", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/runs/norun/trace", {}), succeeds=False
    ),
    ("POST", "/v1/writer/{target}/runs/{run_id}/approve"): Entry(
        "writer_missing", "write", lambda w, k, t: (f"/v1/writer/{_dot(t)}/runs/norun/approve", {}), succeeds=False
    ),
    ("POST", "/v1/writer/{target}/runs/{run_id}/reject"): Entry(
        "writer_missing", "write", lambda w, k, t: (f"/v1/writer/{_dot(t)}/runs/norun/reject", {}), succeeds=False
    ),
    ("POST", "/v1/writer/{target}/run-now"): Entry(
        "writer", "write", lambda w, k, t: (f"/v1/writer/{_dot(t)}/run-now", {})
    ),
    ("GET", "/v1/writer/{target}/events"): Entry(
        "writer", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/events", {"params": {"timeout": 0.3}})
    ),
    ("POST", "/v1/writer/{target}/retry"): Entry(
        "writer", "write", lambda w, k, t: (f"/v1/writer/{_dot(t)}/retry", {})
    ),
    ("GET", "/v1/writer/{target}/memories"): Entry(
        "writer", "read", lambda w, k, t: (f"/v1/writer/{_dot(t)}/memories", {"params": {"query": "MARK"}})
    ),
    # open: no key
    ("GET", "/healthz"): Entry("open", "", lambda w, k, t: ("/healthz", {})),
    ("GET", "/readyz"): Entry("open", "", lambda w, k, t: ("/readyz", {})),
    ("GET", "/metrics"): Entry("admin", "admin", lambda w, k, t: ("/metrics", {})),
    ("GET", "/openapi.json"): Entry("open", "", lambda w, k, t: ("/openapi.json", {})),
    ("GET", "/"): Entry("open", "", lambda w, k, t: ("/", {})),
    ("GET", "/api"): Entry("open", "", lambda w, k, t: ("/api", {})),
    ("GET", "/ui/{name:path}"): Entry("open", "", lambda w, k, t: ("/ui/js/app.js", {})),
    ("GET", "/docs"): Entry("open", "", lambda w, k, t: ("/docs", {})),
    ("GET", "/docs/assets/{name:path}"): Entry("open", "", lambda w, k, t: ("/docs/assets/swagger-ui.css", {})),
}


def _ch(world: World, target: str) -> str:
    """The channel a channels route is pointed at: the private target's, or the project's open channel."""
    if target in ("private_note", "dm_not_in", "private_channel"):
        return world.items[target][0][2]
    return "shop:open"


def _mid(world: World, target: str, kind: str = "") -> str:
    """A message id (``#`` escaped); ``agent_b`` changing a message changes its scratch one, not the private ones."""
    chosen = "scratch" if kind == "agent_b" else target
    if chosen not in ("private_note", "dm_not_in", "private_channel", "scratch"):
        return "shop:open%231"
    ns, key = world.items[chosen]
    return f"{ns[2]}%23{int(key)}"


def _fresh(world: World, target: str, kind: str) -> str:
    """A new message of an agent to change (its own, in a channel it is in); the target's message for others."""
    if kind not in ("agent_a", "agent_b"):
        return _mid(world, target)
    sent = world.call(kind, "POST", "/v1/messages/direct", json={"to": "c", "content": "to change"})
    assert sent.status_code == 201, sent.text
    return str(sent.json()["id"]).replace("#", "%23")


def _voted(world: World, target: str, kind: str) -> str:
    """A new message to an agent from the other one (nobody votes on its own); the target's message for others."""
    if kind not in ("agent_a", "agent_b"):
        return _mid(world, target)
    other, me = ("agent_b", "a") if kind == "agent_a" else ("agent_a", "b")
    sent = world.call(other, "POST", "/v1/messages/direct", json={"to": me, "content": "to vote on"})
    assert sent.status_code == 201, sent.text
    return str(sent.json()["id"]).replace("#", "%23")


def _fresh_channel(world: World, target: str, kind: str) -> str:
    """A new channel of an agent to archive; the target's channel for others."""
    if kind not in ("agent_a", "agent_b"):
        return _ch(world, target)
    made = world.call(kind, "POST", "/v1/channels", json={"name": _name("arch")})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _made(world: World, kind: str) -> str:
    """A branch or tag made for a delete to remove."""
    name = _name("d")
    made = world.call("system", "POST", f"/v1/{kind}", json={"name": name})
    assert made.status_code == 201, made.text
    return name


def _target(target: str) -> tuple[str, ...]:
    return ("users", "alice") if target == "own" else ("_channels", "messages") if target in SYSTEM_TARGETS else (
        "users", "bob")  # fmt: skip


def _dot(target: str) -> str:
    return ".".join(_target(target))


def _conv(target: str) -> str:
    return {"own": "calice", "other_prefix": "cbob"}.get(target, "cnone")


def _unasked(text: str, asked: str) -> str:
    """A response without the private names the caller itself sent (an error may name what was asked for)."""
    for name in ("dm:b+c", "shop:bpriv", "notes:b"):
        if name in asked or name.replace("+", "%2B") in asked:
            text = text.replace(name, "")
    return text


def _routes(world: World) -> dict[tuple[str, str], Any]:
    found = {}
    for route in world.client.app.routes:  # type: ignore[attr-defined]
        inner = getattr(route, "original_router", None)
        for r in inner.routes if inner is not None else [route]:
            for method in sorted(r.methods - {"HEAD"}):
                found[(method, r.path)] = r
    return found


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("matrix")
    store = None
    if request.param == "postgres":
        store = request.getfixturevalue("pgvector_url")
    tenant = "acme" if store is None else "t" + uuid.uuid4().hex[:12]
    for built in make_world(tmp, store, tenant):
        built.client.post("/v1/conversations", headers=built.headers["admin"],
                          json={"conversation_id": "calice", "target": ["users", "alice"]})  # fmt: skip
        built.client.post("/v1/branches", headers=built.headers["admin"], json={"name": "feature"})
        first = built.call("system", "GET", "/v1/log", params={"limit": 500}).json()["commits"][-1]
        built.commits["first"] = first["id"]
        yield built


def test_every_route_has_an_entry(world: World) -> None:
    missing = sorted(set(_routes(world)) - set(ROUTES))
    assert not missing, f"routes without an access-matrix entry: {missing}"
    stale = sorted(set(ROUTES) - set(_routes(world)))
    assert not stale, f"matrix entries for routes that no longer exist: {stale}"


def _expected(world: World, entry: Entry, kind: str, target: str) -> bool | None:
    """True: must succeed; False: must be refused; None: either (the outcome depends on the service's rules)."""
    who = world.principals.get(kind)
    if entry.family == "open":
        return True
    if who is None or kind in ("none", "revoked"):
        return False
    if kind == "other_tenant":
        return None  # its own (empty) tenant: refused or empty, never the markers
    if not who.holds(entry.scope):
        return False
    prefixed = kind.startswith("prefix")
    if entry.family == "item":
        if target == "writer_state" and kind == "system":
            return None  # the conversation is on its own branch, which /store routes do not reach
        return world.sees(kind, target) if entry.reads else world.writes(kind, target)
    if entry.family == "scan":
        return True
    if entry.family == "admin":
        return not prefixed
    if entry.family == "merge":
        return not prefixed
    if entry.family == "private_commit":
        return who.system
    if entry.family == "revert":
        return False  # the DM's commit: a service's state, never reverted through the generic door
    if entry.family == "reset":
        return False if not who.system else None
    if entry.family == "channels":
        if prefixed or kind not in ("agent_a", "agent_b"):
            return False
        return None
    if entry.family in ("writer", "writer_missing"):
        if kind == "system" and target in SYSTEM_TARGETS:
            return None
        inside = target == "own" or (not prefixed and target == "other_prefix")
        if not inside:
            return False
        return None if entry.family == "writer_missing" else True
    raise AssertionError(entry.family)


@pytest.mark.parametrize("route", sorted(ROUTES, key=str), ids=lambda r: f"{r[0]} {r[1]}")
def test_route(world: World, route: tuple[str, str]) -> None:
    entry = ROUTES[route]
    targets = TARGETS if entry.family in ("item", "writer", "writer_missing", "channels") else ("own",)
    succeeded = []
    for kind in KINDS:
        for target in targets:
            url, options = entry.build(world, kind, target)
            response = world.call(kind, route[0], url, **options)
            expect = _expected(world, entry, kind, target)
            where = f"{route[0]} {url} as {kind} on {target}: {response.status_code} {response.text[:300]}"
            assert response.status_code < 500, where
            if kind in ("none", "revoked") and entry.family != "open":
                assert response.status_code == 401, where
            if expect is True:
                assert response.status_code < 300, where
            elif expect is False:
                assert response.status_code in (401, 403, 404), where
            if response.status_code < 300:
                succeeded.append(kind)
            body = _unasked(response.text, url + json.dumps(options, default=str))
            if entry.family == "channels":
                if kind != "agent_b":  # only b is in b's note, DM and private channel
                    assert not [m for t, m in MARKERS.items() if t in SYSTEM_TARGETS and m in body], where
            elif kind != "system":
                assert not leaked(world, kind, body), where
    if entry.succeeds:
        assert succeeded, f"{route}: no caller succeeded: the matrix entry's request is wrong"


def test_private_state_is_intact_after_the_matrix(world: World) -> None:
    """Run after the routes (file order): every private value is still there, exactly."""
    for target in ("private_note", "dm_not_in", "private_channel"):
        ns, key = world.items[target]
        got = world.call("system", "GET", "/v1/items", params={"namespace": ".".join(ns), "key": key})
        assert got.status_code == 200 and MARKERS[target] in got.text, got.text
    binding = world.call(
        "system", "GET", "/v1/items", params={"namespace": "_channels.keys", "key": world.key_ids["rw"]}
    )
    assert binding.status_code == 404, "a generic key bound itself to agents"


def _tool_args(world: World, name: str, target: str, kind: str = "") -> dict[str, Any]:
    ns, key, branch = _ns(world, target)
    tool = TOOLS[name]
    args: dict[str, Any] = {}
    for prop in tool.properties:
        if prop == "namespace":
            args[prop] = ns
        elif prop == "key":
            args[prop] = key if tool.read_only else "probe"
        elif prop == "value":
            args[prop] = {"x": 1}
        elif prop == "target":
            args[prop] = (
                list(_target(target)) if name.startswith("memory_") else _mid(world, target).replace("%23", "#")
            )
    if name == "memory_diff":
        args = {"old": world.commits["first"], "namespace": [] if target != "own" else ns}
    if name == "memory_revert":
        args = {"ref": world.commits["dm"]}
    if name == "memory_merge":
        args = {"source": "main"}
    if name in ("memory_create_branch", "memory_delete_branch"):
        args = {"name": _name("mcp")}
    if name in ("memory_writer_approve", "memory_writer_reject"):
        args["run_id"] = "norun"
    if name == "memory_append_turn":
        args.update(conversation_id=_conv(target), role="user", text="hi")
    # a change goes to agent_b's scratch message, never to the private ones later tools look for
    changing = name in ("message_edit", "message_delete")
    message = _mid(world, target, kind if changing else "").replace("%23", "#")
    for required in tool.required:
        args.setdefault(required, {"channel": _ch(world, target), "content": "hi", "to": "c", "invitee": "a",
                                   "owner": "b", "worked": True, "name": _name("c"), "message_id": message,
                                   "messages": [{"content": "hi"}], "member": "a",
                                   "capabilities": ["send"], "query": _EVERY_MARKER}.get(required))  # fmt: skip
    if branch and name in ("memory_get", "memory_history"):
        args["namespace"] = ns  # the conversations branch is not reachable by these tools: the namespace is refused
    return args


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_mcp_tool(world: World, name: str) -> None:
    app_state = world.client.app.state.engram  # type: ignore[attr-defined]
    pool = app_state.tenants.pool
    memory = pool.acquire(world.tenant)
    try:
        for kind in ("admin", "rw", "ro", "prefix_ro", "prefix_rw", "agent_a", "agent_b", "system"):
            who = world.principals[kind]
            for target in TARGETS:
                args = _tool_args(world, name, target, kind)
                result = asyncio.run(call_tool(memory, name, args, who))
                text = _unasked(json.dumps(result.structured_content, default=str) + str(result.content), str(args))
                where = f"{name} as {kind} on {target}: {text[:300]}"
                if name.startswith(("channel_", "message_", "note_", "pattern_", "agent_", "event_")):
                    if kind != "agent_b":
                        assert not [m for t, m in MARKERS.items() if t in SYSTEM_TARGETS and m in text], where
                    continue
                if kind != "system":
                    assert not leaked(world, kind, text), where
                if name == "memory_revert":
                    assert result.is_error, where
                item_tool = name in ("memory_get", "memory_write", "memory_delete", "memory_history")
                hidden = not world.sees(kind, target) or (target == "writer_state" and kind != "system")
                if item_tool and target != "own" and hidden:
                    assert result.is_error, where
    finally:
        pool.release(world.tenant, memory)


def test_every_mcp_tool_is_in_the_matrix() -> None:
    """The tool test is parametrised over the tool list itself; this pins that the list holds every door's tools."""
    assert {"memory_get", "channel_list", "memory_writer_status"} <= set(TOOLS)
