"""One rule for the empty key at every door (issue #12): ``""`` is a valid item key, as in LangGraph's stores.

An item written through any door (library, LangGraph adapter, HTTP, MCP, CLI) is read, found in history and
deleted through every other, on one SQLite store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from langgraph.store.memory import InMemoryStore
from mcp import Client

import engram
from engram.cli import cli
from engram.integrations.langgraph import EngramStore
from engram.mcp import build_server
from engram.server import ServerConfig, create_app

ALICE = ("users", "alice")


class Door(Protocol):
    """One way into a store: write, read, list the history of, and delete the item ``(ALICE, key)``."""

    def put(self, key: str, value: dict[str, Any]) -> None: ...
    def get(self, key: str) -> dict[str, Any] | None: ...
    def history(self, key: str) -> list[dict[str, Any] | None]: ...
    def delete(self, key: str) -> None: ...


class Library:
    def __init__(self, store: Path) -> None:
        self.store = str(store)

    def _run(self, action: Callable[[engram.Memory], Any]) -> Any:
        mem = engram.open(self.store, embedder="hashing", vector_cache=None)
        try:
            return action(mem)
        finally:
            mem.close()

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._run(lambda mem: mem.put(ALICE, key, value))

    def get(self, key: str) -> dict[str, Any] | None:
        item = self._run(lambda mem: mem.get(ALICE, key))
        return None if item is None else dict(item.value)

    def history(self, key: str) -> list[dict[str, Any] | None]:
        versions = self._run(lambda mem: mem.history(ALICE, key))
        return [None if v.item is None else dict(v.item.value) for v in versions]

    def delete(self, key: str) -> None:
        self._run(lambda mem: mem.delete(ALICE, key))


class Http:
    def __init__(self, store: Path) -> None:
        self.config = ServerConfig(store=str(store), embedder="hashing")

    def _run(self, method: str, url: str, **kwargs: Any) -> Any:
        with TestClient(create_app(self.config)) as client:
            response = client.request(method, url, **kwargs)
        assert response.status_code in (200, 204, 404), response.text
        return response.json() if response.status_code == 200 else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._run("PUT", "/store/items", json={"namespace": list(ALICE), "key": key, "value": value})

    def get(self, key: str) -> dict[str, Any] | None:
        found = self._run("GET", "/store/items", params={"namespace": ".".join(ALICE), "key": key})
        return None if found is None else dict(found["value"])

    def history(self, key: str) -> list[dict[str, Any] | None]:
        found = self._run("GET", "/v1/history", params={"namespace": ".".join(ALICE), "key": key})
        return [None if v["item"] is None else v["item"]["value"] for v in found["versions"]]

    def delete(self, key: str) -> None:
        self._run("DELETE", "/store/items", json={"namespace": list(ALICE), "key": key})


class Mcp:
    def __init__(self, store: Path) -> None:
        self.store = str(store)

    def _call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            mem = engram.open(self.store, embedder="hashing", vector_cache=None)
            try:
                async with Client(build_server(mem)) as client:
                    result = await client.call_tool(tool, arguments)
            finally:
                mem.close()
            assert not result.is_error, result.content
            data: dict[str, Any] = result.structured_content
            return data

        return anyio.run(call)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._call("memory_write", namespace=list(ALICE), key=key, value=value)

    def get(self, key: str) -> dict[str, Any] | None:
        item = self._call("memory_get", namespace=list(ALICE), key=key)["item"]
        return None if item is None else dict(item["value"])

    def history(self, key: str) -> list[dict[str, Any] | None]:
        versions = self._call("memory_history", namespace=list(ALICE), key=key)["versions"]
        return [None if v["item"] is None else v["item"]["value"] for v in versions]

    def delete(self, key: str) -> None:
        self._call("memory_delete", namespace=list(ALICE), key=key)


class Cli:
    def __init__(self, store: Path) -> None:
        self.root = ["--store", str(store), "--embedder", "hashing", "--vector-cache", "none"]

    def _run(self, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
        result = CliRunner().invoke(cli, [*self.root, *args], obj={})
        assert result.exit_code in ok, result.output
        return result.exit_code, result.output

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._run("put", "/".join(ALICE), key, json.dumps(value))

    def get(self, key: str) -> dict[str, Any] | None:
        code, out = self._run("get", "/".join(ALICE), key, "--json", ok=(0, 1))
        return None if code == 1 else dict(json.loads(out)["value"])

    def history(self, key: str) -> list[dict[str, Any] | None]:
        versions = json.loads(self._run("history", "/".join(ALICE), key, "--json")[1])
        return [None if v["item"] is None else v["item"]["value"] for v in versions]

    def delete(self, key: str) -> None:
        self._run("rm", "/".join(ALICE), key)


DOORS: dict[str, Callable[[Path], Door]] = {"library": Library, "http": Http, "mcp": Mcp, "cli": Cli}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store"
    engram.open(str(path), embedder="hashing", vector_cache=None).close()
    yield path


@pytest.mark.parametrize("writer", list(DOORS))
def test_empty_key_written_at_one_door_is_read_at_every_door(store: Path, writer: str) -> None:
    doors = {name: make(store) for name, make in DOORS.items()}
    doors[writer].put("", {"a": 1})
    doors[writer].put("", {"a": 2})
    for name, door in doors.items():
        assert door.get("") == {"a": 2}, name
        assert door.history("") == [{"a": 2}, {"a": 1}], name
        assert door.get("x") is None, name  # "" is its own key, not a wildcard
    doors[writer].delete("")
    for name, door in doors.items():
        assert door.get("") is None, name
        assert door.history("") == [None, {"a": 2}, {"a": 1}], name


def test_empty_key_in_search_and_log_at_the_library_http_and_mcp(store: Path) -> None:
    mem = engram.open(str(store), embedder="hashing", vector_cache=None)
    try:
        mem.put(ALICE, "", {"text": "the empty key"})
        mem.put(ALICE, "other", {"text": "another key"})
        assert [r.key for r in mem.search(ALICE, "empty")][:1] == [""]
        assert len(mem.log(namespace=ALICE, key="")) == 1
    finally:
        mem.close()
    with TestClient(create_app(ServerConfig(store=str(store), embedder="hashing"))) as client:
        found = client.post("/store/items/search", json={"namespace_prefix": list(ALICE), "query": "empty"}).json()
        assert found["items"][0]["key"] == ""
        logged = client.get("/v1/log", params={"namespace": ".".join(ALICE), "key": ""}).json()["commits"]
        assert len(logged) == 1
    assert len(Mcp(store)._call("memory_log", namespace=list(ALICE), key="")["commits"]) == 1


def test_empty_key_behaves_in_engram_store_as_in_langgraph_in_memory_store(store: Path) -> None:
    mem = engram.open(str(store), embedder="hashing", vector_cache=None)
    try:
        results = []
        for lg in (InMemoryStore(), EngramStore(mem)):
            lg.put(ALICE, "", {"a": 1})
            got = lg.get(ALICE, "")
            listed = [item.key for item in lg.search(("users",))]
            lg.delete(ALICE, "")
            results.append((got and (got.key, got.value), listed, lg.get(ALICE, "")))
        assert results[0] == results[1] == (("", {"a": 1}), [""], None)
    finally:
        mem.close()
