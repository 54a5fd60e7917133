"""The world the access matrix runs in: one tenant with private channel state, writer state, two users' memories
and keys of every kind; another tenant; a revoked key. Markers in every private value show a leak in any response.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from engram.ops.access import KeyRing, Principal, principal
from engram.server import ServerConfig, create_app

#: Every kind of caller the matrix tries.
KINDS = (
    "admin",
    "rw",
    "ro",
    "prefix_ro",
    "prefix_rw",
    "agent_a",
    "agent_b",
    "system",
    "other_tenant",
    "none",
    "revoked",
)
#: A unique string inside each target's data: seen in a response, that target leaked to the caller.
MARKERS = {
    "own": "MARKOWNALICE",
    "other_prefix": "MARKOTHERBOB",
    "private_note": "MARKNOTEOFB",
    "dm_not_in": "MARKDMBTOC",
    "private_channel": "MARKPRIVCHAN",
    "writer_state": "MARKCONVBOB",
}
#: Where each item target lives (namespace, key); channel targets are found after they are written.
OWN = (("users", "alice"), "m1")
OTHER = (("users", "bob"), "m1")
#: The names private state must never show under, in any response to a caller who may not read it.
PRIVATE_NAMES = ("dm:b+c", "shop:bpriv", "notes:b", "bind key")
SYSTEM_TARGETS = ("private_note", "dm_not_in", "private_channel", "writer_state", "key_bindings")


@dataclass
class World:
    """A running app and everything the matrix needs to call it as each kind of caller."""

    client: TestClient
    keyring: KeyRing
    tenant: str
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    principals: dict[str, Principal] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)
    #: target -> (namespace, key) of the item holding its marker
    items: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    #: commit ids of the private writes (a DM's commit: reverting it must be refused)
    commits: dict[str, str] = field(default_factory=dict)

    def call(self, kind: str, method: str, url: str, **options: Any) -> Any:
        """One request as ``kind``."""
        headers = {**self.headers.get(kind, {}), **options.pop("headers", {})}
        return self.client.request(method, url, headers=headers, **options)

    def sees(self, kind: str, target: str) -> bool:
        """Whether ``kind`` may read ``target`` through the generic doors."""
        if kind in ("none", "revoked", "other_tenant"):
            return False
        if kind == "system":
            return True
        if target in SYSTEM_TARGETS:
            return False
        if kind.startswith("prefix"):
            return target == "own"
        return target in ("own", "other_prefix")

    def writes(self, kind: str, target: str) -> bool:
        """Whether ``kind`` may change ``target`` through the generic doors."""
        return kind not in ("ro", "prefix_ro") and self.sees(kind, target)


def make_world(tmp_path: Path, store: str | None = None, tenant: str = "acme") -> Iterator[World]:
    """Build the world on a SQLite base store (or ``store``); yield it; close the app."""
    ring = KeyRing(tmp_path / "keys.json")
    world_keys: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
        "admin": (tenant, ("admin",), ()),
        "rw": (tenant, ("read", "write"), ()),
        "ro": (tenant, ("read",), ()),
        "prefix_ro": (tenant, ("read",), ("users", "alice")),
        "prefix_rw": (tenant, ("read", "write"), ("users", "alice")),
        "agent_a": (tenant, ("read", "write"), ()),
        "agent_b": (tenant, ("read", "write"), ()),
        "system": (tenant, ("admin", "system"), ()),
        "other_tenant": (tenant + "-other", ("admin",), ()),
        "revoked": (tenant, ("admin",), ()),
    }
    world = World(None, ring, tenant)  # type: ignore[arg-type]
    for kind, (ten, scopes, prefix) in world_keys.items():
        key, secret = ring.create(ten, scopes, prefix)
        world.headers[kind] = {"Authorization": f"Bearer {secret}"}
        world.principals[kind] = principal(key)
        world.key_ids[kind] = key.id
    world.headers["none"] = {}
    settings: dict[str, Any] = {"store": store or str(tmp_path / "base"), "embedder": "hashing",
                                "keys_file": ring.path, "require_keys": True}  # fmt: skip
    with TestClient(create_app(ServerConfig(**settings))) as client:
        world.client = client
        _populate(world)
        ring.revoke(world.key_ids["revoked"])
        yield world


def _ok(response: Any) -> Any:
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def _populate(world: World) -> None:
    admin = "admin"
    for ns, key, marker in ((OWN[0], OWN[1], MARKERS["own"]), (OTHER[0], OTHER[1], MARKERS["other_prefix"])):
        _ok(world.call(admin, "PUT", "/v1/items", json={"namespace": list(ns), "key": key, "value": {"text": marker}}))
    world.items["own"], world.items["other_prefix"] = OWN, OTHER
    _ok(world.call(admin, "POST", "/v1/projects", json={"id": "shop"}))
    for agent in ("a", "b", "c"):
        _ok(world.call(admin, "POST", "/v1/agents", json={"id": agent, "project": "shop"}))
    for kind, agent in (("agent_a", "a"), ("agent_b", "b")):
        _ok(world.call(admin, "POST", "/v1/agents/keys", json={"key_id": world.key_ids[kind], "agents": [agent]}))
    note = _ok(world.call("agent_b", "POST", "/v1/notes", json={"content": f"b's secret {MARKERS['private_note']}"}))
    dm = _ok(world.call("agent_b", "POST", "/v1/messages/direct", json={"to": "c", "content": MARKERS["dm_not_in"]}))
    _ok(world.call("agent_b", "POST", "/v1/channels", json={"name": "bpriv", "access": "private"}))
    _ok(world.call("agent_a", "POST", "/v1/channels", json={"name": "open"}))
    _ok(world.call("agent_a", "POST", "/v1/channels/shop:open/messages", json={"content": "open to all"}))
    sent = _ok(world.call("agent_b", "POST", "/v1/channels/shop:bpriv/messages",
                          json={"content": MARKERS["private_channel"]}))  # fmt: skip
    scratch = _ok(world.call("agent_b", "POST", "/v1/channels/shop:bpriv/messages", json={"content": "scratch"}))
    for target, message in (("private_note", note), ("dm_not_in", dm), ("private_channel", sent), ("scratch", scratch)):
        channel, number = message["id"].split("#")
        world.items[target] = (("_channels", "messages", channel), f"{int(number):012d}")
    world.items["key_bindings"] = (("_channels", "keys"), world.key_ids["agent_a"])
    _ok(world.call(admin, "POST", "/v1/conversations", json={"conversation_id": "cbob", "target": ["users", "bob"]}))
    _ok(world.call(admin, "POST", "/v1/conversations/cbob/turns",
                   json={"role": "user", "text": f"I am bob {MARKERS['writer_state']}"}))  # fmt: skip
    world.items["writer_state"] = (("_conversations", "cbob"), "t000000001")
    ns, key = world.items["dm_not_in"]
    versions = _ok(world.call("system", "GET", "/v1/history", params={"namespace": ".".join(ns), "key": key}))
    world.commits["dm"] = versions["versions"][-1]["commit"]["id"]


def leaked(world: World, kind: str, text: str) -> list[str]:
    """The markers (and private names) in ``text`` that ``kind`` may not see through the generic doors."""
    found = [t for t, marker in MARKERS.items() if marker in text and not world.sees(kind, t)]
    if world.sees(kind, "other_prefix") and "writer_state" in found:  # the writer made bob's memories from it
        found.remove("writer_state")
    if kind != "system":
        found += [name for name in PRIVATE_NAMES if name in text]
    return found


__all__ = ["KINDS", "MARKERS", "SYSTEM_TARGETS", "World", "leaked", "make_world"]
