"""Probes over HTTP: two ``engram serve`` processes on one store, and tenant isolation through every read route.

The isolation probe writes data whose every value, namespace label and commit id is a token that belongs to
exactly one tenant (and, for tenant ``a``, to one namespace prefix), then sends every read route, as each
caller, with every kind of ref (branch, tag, ``HEAD~n``, time travel, its own and other tenants' commit ids),
and scans each answer for tokens the caller may not see.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

from .harness import Outcome, ProbeResult, is_error_shape, request


def check_answer(result: ProbeResult, outcome: Outcome, *, bound: float | None = None, label: str = "") -> None:
    """Count one answer: a 5xx or no answer is a server error; a 4xx must be in the error shape (thread-safe)."""
    with _COUNTING:
        _count(result, outcome, bound, label)


_COUNTING = threading.Lock()


def _count(result: ProbeResult, outcome: Outcome, bound: float | None, label: str) -> None:
    result.requests += 1
    result.latency(outcome.seconds)
    said = f"{label}: " if label else ""
    if outcome.status is None or outcome.status >= 500:
        result.server_errors += 1
        result.problem(f"{said}server error: {outcome.describe()}")
    elif outcome.status >= 400 and not is_error_shape(outcome.body):
        result.problem(f"{said}error not in the error shape: {outcome.describe()}")
    if bound is not None and outcome.seconds > bound:
        result.problem(f"{said}slower than {bound} s: {outcome.describe()}")


# --------------------------------------------------------------------------- two servers, one store


def run_two_servers(store: Path, *, threads: int, puts: int, timeout: float = 30.0) -> ProbeResult:
    """Two ``engram serve`` processes on one SQLite store take concurrent PUTs (``threads`` threads alternating
    between them); every write answered 2xx must be readable afterwards through either server."""
    from server.test_serve_subprocess import Server

    result = ProbeResult("two servers, one SQLite store", runs=2)
    servers: list[Server] = []
    try:
        for _ in range(2):
            servers.append(Server(store, "--log-level", "warning"))
        clients = [httpx.Client(base_url=s.url, timeout=timeout) for s in servers]
        start = threading.Barrier(threads, timeout=timeout)

        def writer(t: int) -> list[tuple[str, dict[str, Any], str]]:
            acks = []
            start.wait()
            for i in range(puts):
                key, value = f"t{t}-{i}", {"text": f"thread {t} put {i}", "t": t, "i": i}
                body = {"namespace": ["two"], "key": key, "value": value}
                outcome = request(clients[(t + i) % 2], "PUT", "/v1/items", json=body)
                check_answer(result, outcome)
                if outcome.ok:
                    acks.append((key, value, outcome.body["commit"]["id"]))
                elif outcome.status is not None and outcome.status < 500:
                    with _COUNTING:
                        result.problem(f"write refused: {outcome.describe()}")
            return acks

        with ThreadPoolExecutor(threads) as pool:
            acks = [ack for got in pool.map(writer, range(threads)) for ack in got]
        result.acknowledged = len(acks)
        for (key, value, cid), (n, client) in itertools.product(acks, enumerate(clients)):
            outcome = request(client, "GET", "/v1/items", params={"namespace": "two", "key": key})
            check_answer(result, outcome)
            if not outcome.ok or outcome.body.get("value") != value:
                result.lose(
                    key, f"write {key} (commit {cid[:12]}) not readable through server {n}: {outcome.describe()}"
                )
        fsck = request(clients[0], "GET", "/v1/fsck")
        if not (fsck.ok and fsck.body["ok"]):
            result.problem(f"fsck after the race: {fsck.describe()}")
        for client in clients:
            client.close()
    finally:
        for n, server in enumerate(servers):
            code, _, err = server.stop()
            if code != 0:
                result.problem(f"server {n} exited with {code}: {err[-2000:]}")
    return result


# --------------------------------------------------------------------------------- tenant isolation


class Caller:
    """One API key as the probe uses it: its headers and the tokens it may see."""

    def __init__(self, name: str, tenant: Tenant, headers: dict[str, str], visible: set[str]) -> None:
        self.name = name
        self.tenant = tenant
        self.headers = headers
        self.visible = visible


class Tenant:
    """One tenant's data: items whose values and namespace labels are tokens of this tenant only."""

    def __init__(self, name: str, n: int) -> None:
        self.name = name
        self.tag = f"q{n}{uuid.uuid4().hex[:6]}"
        self.namespaces = [("users", f"alice{self.tag}"), ("users", f"bob{self.tag}"), (f"shared{self.tag}",)]
        self.commits: list[str] = []
        self.mid = ""  # an ISO time between the two rounds of writes

    def marker(self, ns: tuple[str, ...], key: str) -> str:
        return f"mk{self.tag}{ns[-1]}{key}"

    def items(self) -> Iterator[tuple[tuple[str, ...], str]]:
        for ns in self.namespaces:
            for key in ("k0", "k1"):
                yield ns, key

    def tokens(self, under: tuple[str, ...] = ()) -> set[str]:
        """The tokens of this tenant's data under namespace prefix ``under``."""
        found = set()
        for ns, key in self.items():
            if ns[: len(under)] == under:
                found |= {self.marker(ns, key), *ns[1:]}
        return found


@contextmanager
def keyed_client(store: str, keys: Path) -> Iterator[tuple[TestClient, KeyRing]]:
    """An in-process client of a server that requires keys, over base store ``store``; and its key ring."""
    ring = KeyRing(keys)
    config = ServerConfig(store=store, embedder="hashing", keys_file=keys, require_keys=True, sweep_ttl=False)
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        yield client, ring


def _headers(ring: KeyRing, tenant: str, *scopes: str, prefix: tuple[str, ...] = ()) -> dict[str, str]:
    _, secret = ring.create(tenant, scopes, prefix)
    return {"Authorization": f"Bearer {secret}"}


def _seed(client: TestClient, tenant: Tenant, headers: dict[str, str], result: ProbeResult) -> None:
    """Two rounds of writes (a tag between them, a delete, a branch with its own write), neutral messages."""

    def write(method: str, path: str, **kwargs: Any) -> Any:
        response = client.request(method, path, headers=headers, **kwargs)
        if response.status_code >= 300:
            result.problem(f"seeding {tenant.name}: {method} {path} -> {response.status_code} {response.text}")
            return {}
        return response.json() if response.content else {}

    for round_ in (1, 2):
        for ns, key in tenant.items():
            value = {"text": f"{tenant.marker(ns, key)} round {round_}", "round": round_}
            made = write(
                "PUT", "/v1/items", json={"namespace": list(ns), "key": key, "value": value, "message": "note"}
            )
            tenant.commits.append(made.get("commit", {}).get("id", ""))
        if round_ == 1:
            write("POST", "/v1/tags", json={"name": "v1"})
            time.sleep(0.01)
            tenant.mid = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            time.sleep(0.01)
    bob = tenant.namespaces[1]
    made = write("DELETE", "/v1/items", params={"namespace": ".".join(bob), "key": "k1", "message": "note"})
    tenant.commits.append(made.get("commit", {}).get("id", ""))
    write("POST", "/v1/branches", json={"name": "dev"})
    made = write(
        "PUT",
        "/v1/items",
        json={
            "namespace": list(tenant.namespaces[0]),
            "key": "kdev",
            "branch": "dev",
            "value": {"text": f"{tenant.marker(tenant.namespaces[0], 'kdev')}"},
            "message": "note",
        },
    )
    tenant.commits.append(made.get("commit", {}).get("id", ""))


def _routes(tenants: list[Tenant], own: Tenant) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every read route, with every kind of ref, for a caller of tenant ``own``."""
    foreign = [cid for t in tenants if t is not own for cid in t.commits[-2:] if cid]
    refs = [
        "HEAD",
        "HEAD~1",
        "HEAD~4",
        "HEAD~8",
        "v1",
        "dev",
        f"main@{{{own.mid}}}",
        *own.commits[:2],
        *foreign,
        *(cid[:10] for cid in foreign),
    ]
    for t in tenants:
        for ns, key in t.items():
            params = {"namespace": ".".join(ns), "key": key}
            yield "GET", "/store/items", {"params": params}
            yield "GET", "/v1/items", {"params": params}
            yield "GET", "/v1/history", {"params": params}
            for ref in ("HEAD~4", "v1", f"main@{{{own.mid}}}"):
                yield "GET", "/store/items", {"params": {**params, "at": ref}}
                yield "GET", "/v1/items", {"params": {**params, "at": ref}}
                yield "GET", "/v1/history", {"params": {**params, "ref": ref}}
        query = " ".join(t.marker(ns, key) for ns, key in t.items())
        for at in (None, "v1", "dev", f"main@{{{own.mid}}}"):
            body = {"query": query, "limit": 100} | ({"at": at} if at else {})
            yield "POST", "/store/items/search", {"json": body}
            yield "POST", "/v1/search", {"json": body}
            yield "POST", "/v1/search", {"json": {"limit": 100, "at": at} if at else {"limit": 100}}
    for ref in refs:
        yield "POST", "/store/namespaces", {"json": {"at": ref}}
        yield "GET", "/v1/namespaces", {"params": {"at": ref, "prefix": "users"}}
        yield "GET", "/v1/log", {"params": {"ref": ref, "limit": 100}}
        yield "GET", "/v1/log", {"params": {"ref": ref, "namespace": "users"}}
        yield "GET", f"/v1/commits/{ref}", {}
        yield "GET", "/v1/diff", {"params": {"old": ref}}
        yield "GET", "/v1/diff", {"params": {"old": "HEAD~8", "new": ref}}
        yield "POST", "/v1/search", {"json": {"branch": "dev", "at": ref, "limit": 100}}
    yield "POST", "/store/namespaces", {"json": {}}
    yield "GET", "/v1/branches", {}
    yield "GET", "/v1/tags", {}


def run_tenant_isolation(store: str, keys: Path) -> ProbeResult:
    """Three tenants and three kinds of key (admin, read-only, namespace-prefix-restricted): no answer of any
    read route shows a caller another tenant's data or data outside its prefix, and no read creates a commit."""
    result = ProbeResult("tenant isolation over HTTP")
    suffix = uuid.uuid4().hex[:8]
    tenants = [Tenant(f"{name}{suffix}", n) for n, name in enumerate("abc")]
    with keyed_client(store, keys) as (client, ring):
        admins = {t.name: _headers(ring, t.name, "admin") for t in tenants}
        for tenant in tenants:
            _seed(client, tenant, admins[tenant.name], result)
        a = tenants[0]
        alice = a.namespaces[0]
        everything = {cid for t in tenants for cid in t.commits if cid} | {tok for t in tenants for tok in t.tokens()}
        callers = [Caller(f"admin of {t.name}", t, admins[t.name], t.tokens() | set(t.commits)) for t in tenants]
        callers.append(Caller(f"reader of {a.name}", a, _headers(ring, a.name, "read"), a.tokens() | set(a.commits)))
        callers.append(
            Caller(
                f"{a.name} restricted to {'.'.join(alice)}",
                a,
                _headers(ring, a.name, "read", "write", prefix=alice),
                a.tokens(alice) | set(a.commits),
            )
        )
        for caller in callers:
            seen_own = False
            for method, path, kwargs in _routes(tenants, caller.tenant):
                response = _timed(client, method, path, caller.headers, kwargs)
                check_answer(result, response)
                asked = f"{path} {kwargs}"  # a token the caller sent may come back in an error message
                hidden = everything - caller.visible
                leaked = sorted(tok for tok in hidden if tok in response.text and tok not in asked)
                if leaked:
                    result.problem(
                        f"{caller.name} sees {leaked[:4]} through {method} {path} {kwargs}: {response.text[:300]}"
                    )
                seen_own = seen_own or any(tok in response.text for tok in caller.visible if tok.startswith("mk"))
            if not seen_own:
                result.problem(f"{caller.name} never saw its own data: the probe checks nothing")
        _read_only_refresh(client, a, admins[a.name], callers[3].headers, result)
    result.runs = len(callers)
    return result


def _timed(client: TestClient, method: str, path: str, headers: dict[str, str], kwargs: dict[str, Any]) -> Outcome:
    return request(client, method, path, headers=headers, **kwargs)  # TestClient is an httpx.Client


def _read_only_refresh(
    client: TestClient, tenant: Tenant, admin: dict[str, str], reader: dict[str, str], result: ProbeResult
) -> None:
    """Reads with ``refresh_ttl`` by a read-only key must not create commits."""
    ns = tenant.namespaces[2]
    client.put("/store/items", json={"namespace": list(ns), "key": "ttl", "value": {"v": 1}, "ttl": 0.1}, headers=admin)
    before = len(client.get("/v1/log", params={"limit": 1000}, headers=admin).json()["commits"])
    time.sleep(1.0)  # past the share of the TTL after which a read refreshes it
    reads: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/store/items", {"params": {"namespace": ".".join(ns), "key": "ttl", "refresh_ttl": "true"}}),
        ("POST", "/store/items/search", {"json": {"namespace_prefix": list(ns), "refresh_ttl": True}}),
        ("POST", "/v1/search", {"json": {"namespace_prefix": list(ns), "refresh_ttl": True}}),
    ]
    for method, path, kwargs in reads:
        check_answer(result, _timed(client, method, path, reader, kwargs))
    after = client.get("/v1/log", params={"limit": 1000}, headers=admin).json()["commits"]
    if len(after) != before:
        result.problem(
            f"reads by a read-only key with refresh_ttl made {len(after) - before} commit(s): "
            f"{[c['message'] for c in after[: len(after) - before]]}"
        )
