"""The MCP server: every tool in-process through the SDK's client, strict schemas, tool errors, time travel,
and ``engram mcp`` as a subprocess over stdio and over streamable HTTP."""

from __future__ import annotations

import inspect
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters, stdio_client

from engram.cli import cli
from engram.cli.mcp import command
from engram.mcp import TOOLS, build_server, http_url
from engram.store import Memory

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
ENGRAM = Path(sys.executable).with_name("engram")
DOC = ROOT / "docs" / "mcp.md"
ALICE = ["users", "alice"]
EXPECTED_TOOLS = [
    "memory_search",
    "memory_context",
    "memory_get",
    "memory_write",
    "memory_delete",
    "memory_list_namespaces",
    "memory_log",
    "memory_diff",
    "memory_history",
    "memory_list_branches",
    "memory_create_branch",
    "memory_delete_branch",
    "memory_merge",
    "memory_revert",
    "channel_create",
    "channel_list",
    "channel_join",
    "channel_leave",
    "channel_invite",
    "message_send",
    "message_direct",
    "message_list",
    "message_search",
    "message_feedback",
    "note_write",
    "note_search",
    "note_recent",
    "note_peek",
    "pattern_detect",
    "agent_list",
    "event_list",
    "message_get",
    "message_edit",
    "message_delete",
    "message_history",
    "message_send_many",
    "channel_mark_read",
    "channel_unread",
    "channel_members",
    "channel_mute",
    "channel_archive",
    "channel_set_capabilities",
    "agent_update_profile",
    "memory_append_turn",
    "memory_writer_status",
    "memory_writer_runs",
    "memory_writer_approve",
    "memory_writer_reject",
    "memory_writer_retry",
]  # the channel tools: issue #13; then the memory writer's: issue #14


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["legacy", "auto"])
async def client(request: pytest.FixtureRequest, smem: Memory) -> AsyncIterator[Client]:
    """A client connected in-process: over JSON-RPC streams (the initialize handshake) or the modern direct path."""
    async with Client(build_server(smem), mode=request.param) as connected:
        yield connected


async def call(client: Client, name: str, /, **arguments: Any) -> Any:
    """Call a tool that must succeed; its text content is the JSON of its structured content."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def fail(client: Client, name: str, /, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """Call a tool that must fail with a tool error; return its one-line text and structured error."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "\n" not in text
    error: dict[str, Any] = result.structured_content["error"]
    assert text == f"{error['type']}: {error['message']}"
    return text, error


async def write(client: Client, key: str, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    commit: dict[str, Any] = (await call(client, "memory_write", namespace=ALICE, key=key, value=value, **extra))[
        "commit"
    ]
    return commit


# ------------------------------------------------------------------ schemas


async def test_mcp_lists_every_tool_with_a_strict_documented_schema(client: Client) -> None:
    tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == EXPECTED_TOOLS
    for tool in tools:
        schema = tool.input_schema
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert tool.description and len(tool.description) > 40
        for name, prop in schema["properties"].items():
            assert prop.get("description"), (tool.name, name)
            assert "type" in prop or "anyOf" in prop, (tool.name, name)
    search = next(t for t in tools if t.name == "memory_search").input_schema["properties"]
    assert {"query", "namespace", "filter", "limit", "mode", "profile", "at"} <= set(search)
    assert search["limit"]["default"] == 10 and search["profile"]["enum"][0] == "similarity"


#: Every tool's (readOnlyHint, destructiveHint, scope): clients ask for confirmation before destructive tools and
#: need none for read-only ones, so a tool that lists must never be marked as one that deletes (issue #12).
HINTS = {
    "memory_search": (True, False, "read"),
    "memory_context": (True, False, "read"),
    "memory_get": (True, False, "read"),
    "memory_write": (False, False, "write"),
    "memory_delete": (False, True, "write"),
    "memory_list_namespaces": (True, False, "read"),
    "memory_log": (True, False, "read"),
    "memory_diff": (True, False, "read"),
    "memory_history": (True, False, "read"),
    "memory_list_branches": (True, False, "read"),
    "memory_create_branch": (False, False, "write"),
    "memory_delete_branch": (False, True, "admin"),
    "memory_merge": (False, False, "write"),
    "memory_revert": (False, False, "write"),
    "channel_create": (False, False, "write"),
    "channel_list": (True, False, "read"),
    "channel_join": (False, False, "write"),
    "channel_leave": (False, False, "write"),
    "channel_invite": (False, False, "write"),
    "message_send": (False, False, "write"),
    "message_direct": (False, False, "write"),
    "message_list": (True, False, "read"),
    "message_search": (True, False, "read"),
    "message_feedback": (False, False, "write"),
    "note_write": (False, False, "write"),
    "note_search": (True, False, "read"),
    "note_recent": (True, False, "read"),
    "note_peek": (False, False, "write"),
    "pattern_detect": (False, False, "write"),
    "agent_list": (True, False, "read"),
    "event_list": (True, False, "read"),
    "message_get": (True, False, "read"),
    "message_edit": (False, False, "write"),
    "message_delete": (False, True, "write"),
    "message_history": (True, False, "read"),
    "message_send_many": (False, False, "write"),
    "channel_mark_read": (False, False, "write"),
    "channel_unread": (True, False, "read"),
    "channel_members": (True, False, "read"),
    "channel_mute": (False, False, "write"),
    "channel_archive": (False, False, "write"),
    "channel_set_capabilities": (False, False, "write"),
    "agent_update_profile": (False, False, "write"),
    "memory_append_turn": (False, False, "write"),
    "memory_writer_status": (True, False, "read"),
    "memory_writer_runs": (True, False, "read"),
    "memory_writer_approve": (False, False, "write"),
    "memory_writer_reject": (False, True, "write"),
    "memory_writer_retry": (False, False, "write"),
}


async def test_mcp_tool_annotations_are_honest_for_every_tool(client: Client) -> None:
    tools = (await client.list_tools()).tools
    assert list(HINTS) == EXPECTED_TOOLS == [t.name for t in tools]
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        read_only, destructive, scope = HINTS[tool.name]
        assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (read_only, destructive, False)
        assert TOOLS[tool.name].scope == scope, tool.name
        assert (scope == "read") is read_only, tool.name  # a read-only tool needs only the read scope
    assert not any(t.annotations and t.annotations.read_only_hint and t.annotations.destructive_hint for t in tools)


def test_mcp_tool_functions_take_exactly_their_schema_properties() -> None:
    for tool in TOOLS.values():
        params = dict(inspect.signature(tool.run).parameters)
        assert next(iter(params)) == "memory"
        del params["memory"]
        assert list(params) == list(tool.properties), tool.name
        for name, param in params.items():
            prop = tool.properties[name]
            if name in tool.required or "default" in prop:  # always passed: no second default in Python
                assert param.default is inspect.Parameter.empty, (tool.name, name)
            else:
                assert param.default is not inspect.Parameter.empty, (tool.name, name)


async def test_mcp_unknown_arguments_are_errors_for_every_tool(client: Client, smem: Memory) -> None:
    head = smem.head.id
    for name in EXPECTED_TOOLS:
        text, error = await fail(client, name, bogus=1, namespace=ALICE, key="k", value={"a": 1})
        assert error["type"] == "InvalidArguments"
        assert "'bogus'" in text and name in text
    assert smem.head.id == head  # nothing ran


async def test_mcp_arguments_are_checked_against_the_schema(client: Client, smem: Memory) -> None:
    text, _ = await fail(client, "memory_write", namespace=ALICE, key="k")
    assert "'value' is a required property" in text
    text, _ = await fail(client, "memory_write", namespace="users/alice", key="k", value={})
    assert "'namespace'" in text and "not of type 'array'" in text
    text, _ = await fail(client, "memory_write", namespace=ALICE, key="k", value=[1, 2])
    assert "'value'" in text
    text, _ = await fail(client, "memory_search", limit="ten")
    assert "'limit'" in text
    text, _ = await fail(client, "memory_search", mode="fuzzy")
    assert "'mode'" in text and "hybrid" in text
    text, _ = await fail(client, "memory_write", namespace=ALICE, key="k", value={}, index=True)
    assert "'index'" in text
    _, error = await fail(client, "memory_nope")
    assert error["type"] == "UnknownTool" and "memory_search" in error["message"]
    assert len(smem.log()) == 1  # only the initial commit: nothing ran


# ------------------------------------------------------------- items: write, get, search, delete


async def test_mcp_write_get_and_search_with_provenance(client: Client) -> None:
    commit = await write(
        client, "prefs", {"text": "prefers dark mode", "kind": "preference", "confidence": 0.9},
        author="chat-agent", sources=["msg-1", "msg-2"], message="learned alice's theme",
    )  # fmt: skip
    assert commit["message"] == "learned alice's theme" and commit["author"] == "chat-agent"
    assert len(commit["id"]) == 40 and commit["short_id"] == commit["id"][:10] and len(commit["parents"]) == 1
    assert datetime.fromisoformat(commit["time"]).tzinfo is not None
    await write(client, "food", {"text": "vegetarian, loves spicy curry", "kind": "diet", "confidence": 0.4})

    item = (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]
    assert item["namespace"] == ALICE and item["key"] == "prefs" and item["value"]["kind"] == "preference"
    assert item["author"] == "chat-agent" and item["sources"] == ["msg-1", "msg-2"] and item["expires_at"] is None
    assert (await call(client, "memory_get", namespace=ALICE, key="missing"))["item"] is None

    found = await call(client, "memory_search", namespace=["users"], query="dark mode theme", limit=5)
    assert found["mode"] == "hybrid" and found["degraded"] is None
    assert found["items"][0]["key"] == "prefs" and found["items"][0]["score"] > 0
    filtered = await call(client, "memory_search", query="curry", filter={"confidence": {"$lt": 0.5}}, explain=True)
    assert [i["key"] for i in filtered["items"]] == ["food"]
    assert "bm25" in filtered["items"][0]["explain"]
    keyword = await call(client, "memory_search", query="spicy", mode="keyword", profile="quality")
    assert keyword["mode"] == "keyword" and [i["key"] for i in keyword["items"]] == ["food"]
    listing = await call(client, "memory_search", namespace=ALICE)
    assert listing["mode"] == "list" and [i["key"] for i in listing["items"]] == ["food", "prefs"]
    page = await call(client, "memory_search", namespace=ALICE, limit=1, offset=1)
    assert [i["key"] for i in page["items"]] == ["prefs"]
    assert (await call(client, "memory_search", namespace=["nobody"], query="dark"))["items"] == []


async def test_mcp_write_index_false_ttl_and_delete(client: Client) -> None:
    await write(client, "secret", {"text": "door code 1234"}, index=False)
    await write(client, "tagged", {"text": "ignored words", "tags": ["zebra"]}, index=["tags[*]"])
    await write(client, "brief", {"text": "short lived"}, ttl=60)
    assert (await call(client, "memory_search", query="door code", mode="keyword"))["items"] == []
    assert [i["key"] for i in (await call(client, "memory_search", query="zebra", mode="keyword"))["items"]] == [
        "tagged"
    ]
    assert (await call(client, "memory_search", query="ignored", mode="keyword"))["items"] == []
    brief = (await call(client, "memory_get", namespace=ALICE, key="brief"))["item"]
    assert brief["expires_at"] is not None

    deleted = (await call(client, "memory_delete", namespace=ALICE, key="secret", message="forget it"))["commit"]
    assert deleted["message"] == "forget it"
    assert (await call(client, "memory_get", namespace=ALICE, key="secret"))["item"] is None
    again = (await call(client, "memory_delete", namespace=ALICE, key="secret"))["commit"]
    assert again["id"] == deleted["id"]  # nothing to delete: no new commit


async def test_mcp_list_namespaces(client: Client) -> None:
    for ns in (["users", "alice"], ["users", "bob"], ["teams", "core", "notes"]):
        await call(client, "memory_write", namespace=ns, key="k", value={"v": 1})
    everything = (await call(client, "memory_list_namespaces"))["namespaces"]
    assert everything == [["teams", "core", "notes"], ["users", "alice"], ["users", "bob"]]
    assert (await call(client, "memory_list_namespaces", prefix=["users"]))["namespaces"] == [
        ["users", "alice"],
        ["users", "bob"],
    ]
    assert (await call(client, "memory_list_namespaces", suffix=["*", "bob"]))["namespaces"] == [["users", "bob"]]
    assert (await call(client, "memory_list_namespaces", max_depth=1))["namespaces"] == [["teams"], ["users"]]
    assert (await call(client, "memory_list_namespaces", limit=1, offset=1))["namespaces"] == [["users", "alice"]]
    assert (await call(client, "memory_list_namespaces", at="HEAD~2"))["namespaces"] == [["users", "alice"]]


# ------------------------------------------------------------- versioning: log, diff, history, time travel


async def test_mcp_log_diff_and_history(client: Client) -> None:
    first = await write(client, "prefs", {"theme": "dark"}, author="a1")
    await call(client, "memory_write", namespace=["users", "bob"], key="prefs", value={"theme": "light"})
    second = await write(client, "prefs", {"theme": "neon"}, author="a2", message="alice changed her mind")
    await call(client, "memory_delete", namespace=ALICE, key="prefs", author="a3")

    log = (await call(client, "memory_log"))["commits"]
    assert len(log) == 5 and log[1]["message"] == "alice changed her mind" and log[-1]["parents"] == []
    alice_log = (await call(client, "memory_log", namespace=ALICE, limit=2))["commits"]
    assert [c["author"] for c in alice_log] == ["a3", "a2"]
    keyed = (await call(client, "memory_log", namespace=["users", "bob"], key="prefs"))["commits"]
    assert len(keyed) == 1
    assert (await call(client, "memory_log", ref=first["id"]))["commits"][0]["id"] == first["id"]

    diff = await call(client, "memory_diff", old=first["id"])
    rows = {(tuple(c["namespace"]), c["key"]): c for c in diff["changes"]}
    assert rows[("users", "alice"), "prefs"]["kind"] == "removed"
    assert rows[("users", "alice"), "prefs"]["old"]["value"] == {"theme": "dark"}
    assert rows[("users", "bob"), "prefs"]["kind"] == "added" and rows[("users", "bob"), "prefs"]["old"] is None
    assert diff["truncated"] is False
    only_alice = await call(client, "memory_diff", old=first["id"], new=second["id"], namespace=ALICE)
    assert [(c["kind"], c["new"]["value"]) for c in only_alice["changes"]] == [("modified", {"theme": "neon"})]
    truncated = await call(client, "memory_diff", old="HEAD~4", new="HEAD~1", limit=1)
    assert len(truncated["changes"]) == 1 and truncated["truncated"] is True

    versions = (await call(client, "memory_history", namespace=ALICE, key="prefs"))["versions"]
    assert [v["commit"]["author"] for v in versions] == ["a3", "a2", "a1"]
    assert versions[0]["item"] is None and versions[1]["item"]["value"] == {"theme": "neon"}
    assert len((await call(client, "memory_history", namespace=ALICE, key="prefs", limit=1))["versions"]) == 1
    older = (await call(client, "memory_history", namespace=ALICE, key="prefs", ref=second["id"]))["versions"]
    assert [v["commit"]["author"] for v in older] == ["a2", "a1"]


async def test_mcp_reads_travel_in_time(client: Client) -> None:
    first = await write(client, "prefs", {"text": "likes dark mode"})
    await anyio.sleep(0.02)
    moment = datetime.now(UTC).isoformat()
    await anyio.sleep(0.02)
    await write(client, "prefs", {"text": "likes neon colours"})
    await write(client, "other", {"text": "unrelated"})

    for at in (first["id"], first["short_id"][:7], "HEAD~2", f"main@{{{moment}}}"):
        item = (await call(client, "memory_get", namespace=ALICE, key="prefs", at=at))["item"]
        assert item["value"] == {"text": "likes dark mode"}, at
        found = await call(client, "memory_search", query="dark mode", at=at)
        assert [i["key"] for i in found["items"]] == ["prefs"], at
        assert (await call(client, "memory_get", namespace=ALICE, key="other", at=at))["item"] is None
    now = await call(client, "memory_search", query="neon colours")
    assert now["items"][0]["value"] == {"text": "likes neon colours"}
    _, error = await fail(client, "memory_get", namespace=ALICE, key="prefs", at="main@{not a time}")
    assert error["type"] == "InvalidRefError"


# ------------------------------------------------------------- branches, merge, revert


async def test_mcp_branches_writes_on_a_branch_and_merge(client: Client, smem: Memory) -> None:
    await write(client, "prefs", {"theme": "dark"})
    smem.tag("v1")
    listed = await call(client, "memory_list_branches")
    assert listed == {"current": "main", "branches": smem.branches(), "tags": {"v1": smem.head.id.hex()}}
    created = await call(client, "memory_create_branch", name="fix")
    assert set(created["branches"]) == {"main", "fix"} and created["branches"]["fix"] == created["branches"]["main"]

    on_fix = await write(client, "prefs", {"theme": "light"}, branch="fix", message="try light")
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]["value"] == {"theme": "dark"}
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs", at="fix"))["item"]["value"] == {
        "theme": "light"
    }
    assert (await call(client, "memory_log", ref="fix", limit=1))["commits"][0]["id"] == on_fix["id"]

    merged = (await call(client, "memory_merge", source="fix", author="reviewer"))["commit"]
    assert len(merged["parents"]) == 2 and merged["author"] == "reviewer" and "fix" in merged["message"]
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]["value"] == {"theme": "light"}
    assert smem.branch == "main"  # the server's handle never moved

    await write(client, "extra", {"v": 1})
    into_fix = (await call(client, "memory_merge", source="main", into="fix", message="sync fix"))["commit"]
    assert into_fix["message"] == "sync fix"
    assert (await call(client, "memory_get", namespace=ALICE, key="extra", at="fix"))["item"] is not None

    deleted = await call(client, "memory_delete_branch", name="fix")
    assert set(deleted["branches"]) == {"main"} and set(smem.branches()) == {"main"}
    _, error = await fail(client, "memory_delete_branch", name="main")
    assert error["type"] == "ConflictError"
    _, error = await fail(client, "memory_create_branch", name="main")
    assert error["type"] == "RefExistsError"
    _, error = await fail(client, "memory_create_branch", name="bad..name")
    assert error["type"] == "InvalidRefError"
    for name in ("memory_create_branch", "memory_delete_branch"):
        text, error = await fail(client, name)
        assert error["type"] == "InvalidArguments" and "'name' is a required property" in text
    text, error = await fail(client, "memory_list_branches", action="create", name="x")  # listing never writes
    assert error["type"] == "InvalidArguments" and "'action'" in text and set(smem.branches()) == {"main"}
    _, error = await fail(client, "memory_write", namespace=ALICE, key="k", value={}, branch="nope")
    assert error["type"] == "RefNotFoundError"


async def test_mcp_merge_conflict_lists_the_items_and_writes_nothing(client: Client, smem: Memory) -> None:
    await write(client, "prefs", {"theme": "dark"})
    await call(client, "memory_create_branch", name="fix")
    await write(client, "prefs", {"theme": "light"}, branch="fix")
    await write(client, "prefs", {"theme": "neon"})
    head = smem.head.id

    text, error = await fail(client, "memory_merge", source="fix")
    assert error["type"] == "MergeConflictError" and "1 conflict" in text
    assert error["conflict_count"] == 1
    (conflict,) = error["conflicts"]
    assert conflict["namespace"] == ALICE and conflict["key"] == "prefs"
    assert conflict["base"]["value"] == {"theme": "dark"}
    assert conflict["ours"]["value"] == {"theme": "neon"} and conflict["theirs"]["value"] == {"theme": "light"}
    assert smem.head.id == head

    await call(client, "memory_merge", source="fix", strategy="theirs")
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]["value"] == {"theme": "light"}


async def test_mcp_revert(client: Client) -> None:
    await write(client, "prefs", {"theme": "dark"})
    bad = await write(client, "prefs", {"theme": "garbage"}, message="bad write")
    reverted = (await call(client, "memory_revert", ref=bad["id"], author="fixer"))["commit"]
    assert reverted["author"] == "fixer" and reverted["metadata"] == {"reverts": bad["id"]}
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]["value"] == {"theme": "dark"}

    again = await write(client, "prefs", {"theme": "blue"})
    await write(client, "prefs", {"theme": "green"})
    _, error = await fail(client, "memory_revert", ref=again["id"])
    assert error["type"] == "MergeConflictError" and error["conflicts"][0]["key"] == "prefs"
    await call(client, "memory_revert", ref=again["id"], strategy="ours")
    assert (await call(client, "memory_get", namespace=ALICE, key="prefs"))["item"]["value"] == {"theme": "green"}

    await call(client, "memory_create_branch", name="side")
    side = await write(client, "side", {"v": 1}, branch="side")
    await call(client, "memory_revert", ref=side["id"], branch="side")
    assert (await call(client, "memory_get", namespace=ALICE, key="side", at="side"))["item"] is None
    _, error = await fail(client, "memory_revert", ref="HEAD~100")
    assert error["type"] == "RefNotFoundError"


# ------------------------------------------------------------- errors and concurrency


async def test_mcp_engram_errors_are_one_line_tool_errors_and_the_server_keeps_serving(client: Client) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("memory_search", {"filter": {"$where": "1"}}, "InvalidFilterError"),
        ("memory_search", {"filter": {"n": {"$regex": "("}}}, "InvalidFilterError"),
        ("memory_get", {"namespace": ALICE, "key": "k", "at": "no-such-branch"}, "RefNotFoundError"),
        ("memory_write", {"namespace": ["a.b"], "key": "k", "value": {}}, "InvalidNamespaceError"),
        ("memory_write", {"namespace": ALICE, "key": "k", "value": {}, "index": ["[bad"]}, "InvalidInputError"),
        ("memory_log", {"key": "k"}, "InvalidNamespaceError"),
        ("memory_diff", {"old": "HEAD~9"}, "RefNotFoundError"),
        ("memory_merge", {"source": "nope"}, "RefNotFoundError"),
    ]
    for name, arguments, kind in cases:
        _, error = await fail(client, name, **arguments)
        assert error["type"] == kind, (name, arguments, error)
    assert (await write(client, "still", {"ok": True}))["message"] == "put users/alice/still"


async def test_mcp_concurrent_calls_all_land(client: Client) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(write, client, f"k{i}", {"i": i})
    listing = await call(client, "memory_search", namespace=ALICE, limit=100)
    assert sorted(i["key"] for i in listing["items"]) == sorted(f"k{i}" for i in range(12))
    assert len((await call(client, "memory_log", limit=100))["commits"]) == 13


# ------------------------------------------------------------- the command: CLI, stdio, HTTP, docs


def test_mcp_command_is_the_cli_subcommand(tmp_path: Path) -> None:
    assert cli.get_command(click.Context(cli), "mcp") is command  # loaded lazily as engram.mcp:command
    runner = CliRunner()
    shown = runner.invoke(cli, ["mcp", "--help"], obj={})
    assert shown.exit_code == 0 and "--transport" in shown.output and "streamable HTTP" in shown.output
    bad = runner.invoke(cli, ["--store", "ftp://nowhere", "mcp"], obj={})
    assert bad.exit_code == 1 and "unsupported store URL" in bad.output


def _doc_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_mcp_docs_client_configs_launch_engram_mcp() -> None:
    configs = [json.loads(block) for block in _doc_blocks("json")]
    stdio = [c["mcpServers"]["engram"] for c in configs if "command" in c["mcpServers"]["engram"]]
    http = [c["mcpServers"]["engram"] for c in configs if "url" in c["mcpServers"]["engram"]]
    assert stdio and http
    for server in stdio:
        assert server["command"] == "engram" and server["args"][-1] == "mcp" and "--store" in server["args"]
    for server in http:
        assert server["url"] == http_url("127.0.0.1", 8765)
    shell = "\n".join(_doc_blocks("sh"))
    assert "engram mcp --transport http --port 8765" in shell


@pytest.mark.slow
async def test_mcp_over_stdio_in_a_subprocess(tmp_path: Path) -> None:
    errlog = (tmp_path / "stderr.txt").open("w")
    params = StdioServerParameters(
        command=str(ENGRAM), args=["--store", str(tmp_path / "store"), "--embedder", "hashing", "mcp"], cwd=tmp_path
    )
    with errlog, anyio.fail_after(30):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == EXPECTED_TOOLS
            await write(client, "prefs", {"text": "prefers dark mode"}, sources=["msg-1"])
            found = await call(client, "memory_search", query="dark mode")
            assert found["items"][0]["key"] == "prefs" and found["items"][0]["sources"] == ["msg-1"]
            _, error = await fail(client, "memory_search", bogus=True)
            assert error["type"] == "InvalidArguments"
    assert "engram MCP server on stdio" in (tmp_path / "stderr.txt").read_text()
    assert (tmp_path / "store" / "engram.db").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
async def test_mcp_over_streamable_http_in_a_subprocess(tmp_path: Path) -> None:
    port = _free_port()
    args = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "mcp", "--transport", "http", "--port"]
    process = subprocess.Popen([str(ENGRAM), *args, str(port)], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
                await anyio.sleep(0.05)
        url = http_url("127.0.0.1", port)
        with anyio.fail_after(30):
            async with Client(url) as client:
                await write(client, "prefs", {"text": "prefers dark mode"})
                _, error = await fail(client, "memory_get", namespace=ALICE, key="prefs", color="red")
                assert "'color'" in error["message"]
            recall = _docs_namespace()["recall"]  # the docs' HTTP client example, against the live server
            assert [item["key"] for item in await recall(url)] == ["prefs"]
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=15)
    assert f"engram MCP server at {url}" in stderr


def _docs_namespace() -> dict[str, Any]:
    """Run the docs page's HTTP client block (tests/test_docs.py runs them all) and return what it defines."""
    (block,) = [b for b in _doc_blocks("python") if "async def recall" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, str(DOC), "exec"), namespace)
    return namespace
