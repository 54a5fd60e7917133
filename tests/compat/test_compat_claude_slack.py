"""claude-slack's ``ClaudeSlackAPI`` on engram: the debugging-assistant tutorial (a seed document read at test time)
runs unchanged but for its construction line, and each method keeps claude-slack's shapes and errors."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from services import unavailable

from compat import slack_tutorial as tutorial
from engram.channels import Channels
from engram.compat.claude_slack import ClaudeSlackAPI
from engram.errors import (
    AgentNotFoundError,
    ChannelExistsError,
    ChannelNotFoundError,
    DirectMessageBlockedError,
    InvalidChannelNameError,
    InvalidFilterError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
)

T = TypeVar("T")
MESSAGE_KEYS = {"id", "channel_id", "sender_id", "content", "metadata", "confidence", "timestamp", "score"}
NOTE_KEYS = MESSAGE_KEYS | {"tags", "breadcrumbs", "session_context", "search_score"}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def api(tmp_path: Path) -> ClaudeSlackAPI:
    return ClaudeSlackAPI(db_path=str(tmp_path / "slack.db"), embedder="hashing")


@pytest.fixture
def seed() -> str:
    if not tutorial.SEED.is_file():
        unavailable("the claude-slack tutorial seed", f"{tutorial.SEED} is absent")
    return tutorial.SEED.read_text(encoding="utf-8")


def test_the_tutorial_runs_unchanged(seed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len(tutorial.blocks(seed)) == 9  # sections 1-6, the usage example, pattern detection, the broadcast

    async def scenario() -> dict[str, Any]:
        found, record, api = await tutorial.run(seed, str(tmp_path / "tutorial.db"))
        printed = capsys.readouterr().out.splitlines()
        notes = await api.search_my_notes(agent_name="debug-assistant", tags=["error-pattern"])
        again = await found["debug_assistant"].analyze_error(found["error"])
        similar = await found["search_similar_errors"]("ConnectionRefusedError: [Errno 111] Connection refused")
        solved = await api.search_messages(metadata_filters={"resolution.status": "solved"})
        general = await api.get_messages(channel_ids=["general"])
        feedback = await api.search_messages(metadata_filters={"type": "solution_feedback"})
        patterns = await api.get_messages(channel_ids=["proj:error-patterns"])
        return {"found": found, "record": record, "printed": printed, "notes": notes, "again": again,
                "similar": similar, "solved": solved, "general": general, "feedback": feedback,
                "patterns": patterns}  # fmt: skip

    r = run(scenario())
    # the usage example printed the suggestion the earlier (solved) session left as a pattern
    assert r["printed"] == ["Debugging suggestions based on past experience:",
                            f"1. {tutorial.PAST_SOLUTION} (confidence: 90%)"]  # fmt: skip
    assert r["found"]["suggestions"] == [{"type": "known_pattern", "solution": tutorial.PAST_SOLUTION,
                                          "confidence": 0.9, "source": "pattern_library"}]  # fmt: skip
    # document_solution wrote the pattern note: found by tag, confidence 0.9, breadcrumbs as written
    fix = "Started Redis service with 'sudo systemctl start redis'"
    newest = r["notes"][0]
    assert [n["content"] for n in r["notes"]] == ["Error Pattern: Redis service not running",
                                                  "Error Pattern: Redis container stopped"]  # fmt: skip
    assert set(newest) >= NOTE_KEYS and newest["confidence"] == 0.9
    assert newest["tags"] == ["error-pattern", "debugged", "proven-fix"]
    assert newest["breadcrumbs"] == {
        "error_type": "ConnectionRefusedError", "root_cause": "Redis service not running", "fix_pattern": fix,
        "symptoms": ["Connection refused", "Errno 111"], "files": ["app.py"],
        "prevention": ["Add Redis health check on startup"],
    }  # fmt: skip
    # a second, similar error now gets the solution just documented, from the pattern library
    assert [s["solution"] for s in r["again"]] == [fix, tutorial.PAST_SOLUTION]
    assert all(s["type"] == "known_pattern" and s["confidence"] == 0.9 for s in r["again"])
    # search_similar_errors asks for messages whose type is debug_start or error_pattern AND that are solved: the
    # tutorial writes the resolution on debug_resolved messages, so claude-slack finds none, and neither does engram
    assert r["similar"] == []
    assert {m["metadata"]["type"] for m in r["solved"]} == {"debug_resolved"}
    assert sorted(m["metadata"]["resolution"]["fix"] for m in r["solved"]) == sorted([fix, tutorial.PAST_SOLUTION])
    # mark_solution_used recorded the positive feedback
    assert [m["metadata"]["feedback"] for m in r["feedback"]] == ["positive"]
    # detect_patterns listed the debug_start messages of the last 7 days (the history's two and the example's one)
    listed = r["record"].clustered
    assert len(listed) == 1 and len(listed[0]) == 3
    assert {m["metadata"]["type"] for m in listed[0]} == {"debug_start"}
    assert all(datetime.fromisoformat(m["timestamp"]) > datetime.now(UTC) - timedelta(days=7) for m in listed[0])
    assert [len(c) for c in r["record"].patterns] == [3]
    assert [m["metadata"]["type"] for m in r["patterns"]] == ["error_pattern", "error_pattern", "error_pattern"]
    assert r["patterns"][0]["metadata"]["occurrences"] == 3  # newest first: the detected cluster
    # the team broadcast landed in the global general channel
    assert [(m["channel_id"], m["sender_id"], m["metadata"]["type"]) for m in r["general"]] == [
        ("global:general", "debug-assistant", "pattern_announcement")]  # fmt: skip
    assert r["general"][0]["metadata"]["occurrence_count"] == 5


def test_the_tutorial_blocks_are_read_not_copied(seed: str) -> None:
    here = Path(__file__).resolve().parent
    lines = [line.strip() for block in tutorial.blocks(seed) for line in block.splitlines()]
    code = [line for line in lines if len(line) > 30 and line.startswith(("def ", "async def ", "class "))]
    assert len(code) >= 8
    for name in ("slack_tutorial.py", Path(__file__).name):
        text = (here / name).read_text(encoding="utf-8")
        assert [line for line in code if line in text] == []


def test_send_message_shape_confidence_and_auto_registration(api: ClaudeSlackAPI) -> None:
    async def scenario() -> tuple[Any, ...]:
        cid = await api.create_channel(name="debugging", scope="project", description="bugs")
        first = await api.send_message(channel_id="proj:debugging", sender_id="alice", content="db down",
                                       metadata={"type": "debug_start", "confidence": 0.8})  # fmt: skip
        second = await api.send_message(channel_id="proj:debugging", sender_id="alice", content="still down")
        return cid, first, second, await api.get_message(first), await api.get_message(second)

    cid, first, second, one, two = run(scenario())
    assert (cid, first, second) == ("proj:debugging", "proj:debugging#1", "proj:debugging#2")
    assert set(one) >= MESSAGE_KEYS
    assert (one["channel_id"], one["sender_id"], one["content"]) == ("proj:debugging", "alice", "db down")
    assert one["confidence"] == 0.8 and one["metadata"] == {"type": "debug_start", "confidence": 0.8}
    assert two["confidence"] == 0.5  # engram's neutral value when none is given
    assert datetime.fromisoformat(one["timestamp"]).tzinfo is not None
    hub = api.channels
    assert hub.agent("alice").project == "proj"  # registered on first use, in the default project
    assert hub.as_agent("alice").member(hub.channel("global:general")) is not None  # and joined the default channel


def test_channel_id_formats(api: ClaudeSlackAPI) -> None:
    async def scenario() -> list[str]:
        await api.create_channel(name="ops", scope="project")
        await api.create_channel(name="ops", scope="global")
        return [
            await api.send_channel_message(channel_id="ops", sender_id="bob", content="a"),  # the project's first
            await api.send_channel_message(channel_id="global:ops", sender_id="bob", content="b"),
            await api.send_message(channel_id="proj_proj:ops", sender_id="bob", content="c"),
            await api.send_channel_message(channel_id="general", sender_id="bob", content="d"),
        ]

    assert run(scenario()) == ["proj:ops#1", "global:ops#1", "proj:ops#2", "global:general#1"]


def test_unknown_channel_and_not_a_member(api: ClaudeSlackAPI) -> None:
    async def scenario() -> None:
        await api.create_channel(name="core", scope="project", access_type="members", created_by="owner")
        await api.create_channel(name="secret", scope="project", access_type="private", created_by="owner")
        with pytest.raises(ChannelNotFoundError):
            await api.send_message(channel_id="proj:nope", sender_id="bob", content="x")
        with pytest.raises(NotAMemberError):  # a members-only channel: join first
            await api.send_message(channel_id="proj:core", sender_id="bob", content="x")
        with pytest.raises(ChannelNotFoundError):  # a private channel is invisible to non-members
            await api.send_message(channel_id="proj:secret", sender_id="bob", content="x")
        with pytest.raises(ChannelExistsError):
            await api.create_channel(name="core", scope="project")
        with pytest.raises(InvalidChannelNameError):
            await api.create_channel(name="Bad Name")
        with pytest.raises(InvalidInputError):
            await api.create_channel(name="x", scope="galaxy")
        with pytest.raises(InvalidInputError):
            await api.send_message(channel_id="proj:core", sender_id="owner", content="  ")

    run(scenario())


def test_join_leave_invite(api: ClaudeSlackAPI) -> None:
    async def scenario() -> list[Any]:
        await api.create_channel(name="core", scope="project", access_type="members", created_by="owner")
        await api.create_channel(name="secret", scope="project", access_type="private", created_by="owner")
        out: list[Any] = [await api.join_channel("bob", None, "proj:core")]
        out.append(await api.send_message(channel_id="proj:core", sender_id="bob", content="hi"))
        out.append(await api.join_channel("bob", None, "proj:secret"))  # invitation only
        out.append(await api.invite_to_channel("proj:secret", "bob", None, "owner", None))
        out.append(await api.send_message(channel_id="proj:secret", sender_id="bob", content="in"))
        out.append(await api.leave_channel("bob", None, "proj:core"))
        out.append(await api.leave_channel("bob", None, "proj:core"))  # not a member any more
        with pytest.raises(NotAMemberError):
            await api.invite_to_channel("proj:core", "carol", None, "mallory", None)
        listed = await api.list_channels(agent_name="bob", project_id="proj")
        out.append({c["id"]: (c["is_member"], c["can_join"]) for c in listed})
        out.append(sorted(c["id"] for c in await api.list_channels(scope_filter="global")))
        return out

    joined, sent, private, invited, inside, left, again, mine, global_ids = run(scenario())
    assert (joined, sent, private, invited, inside, left, again) == (
        True, "proj:core#1", False, True, "proj:secret#1", True, False)  # fmt: skip
    assert mine["proj:core"] == (False, True) and mine["proj:secret"] == (True, False)
    assert mine["global:general"] == (True, False)
    assert global_ids == ["global:general"]


def test_direct_messages(api: ClaudeSlackAPI) -> None:
    async def scenario() -> list[Any]:
        await api.register_agent("bob", project_id="proj")
        await api.register_agent("hermit", project_id="proj", dm_policy="closed")
        dm = await api.send_direct_message(sender_name="alice", recipient_name="bob", content="psst",
                                           metadata={"type": "dm"})  # fmt: skip
        with pytest.raises(AgentNotFoundError):
            await api.send_direct_message(sender_name="alice", recipient_name="ghost", content="x")
        with pytest.raises(DirectMessageBlockedError):
            await api.send_direct_message(sender_name="alice", recipient_name="hermit", content="x")
        seen_by_bob = await api.search_agent_messages(agent_name="bob", query="psst")
        seen_by_eve = await api.search_agent_messages(agent_name="eve", query="psst")
        return [dm, [m["id"] for m in seen_by_bob], seen_by_eve]

    dm, bob, eve = run(scenario())
    assert dm == "dm:alice+bob#1" and bob == [dm] and eve == []


def _sessions(api: ClaudeSlackAPI) -> None:
    async def scenario() -> None:
        await api.create_channel(name="debugging", scope="project")
        await api.create_channel(name="other", scope="project", project_id="shop")
        for n, (kind, status, conf) in enumerate(
            [
                ("debug_start", None, 0.5),
                ("debug_resolved", "solved", 0.9),
                ("error_pattern", "solved", 0.7),
                ("debug_start", "open", 0.3),
            ]
        ):
            meta: dict[str, Any] = {"type": kind, "confidence": conf, "n": n}
            if status:
                meta["resolution"] = {"status": status, "fix": f"fix {n}"}
            await api.send_message(channel_id="proj:debugging", sender_id="alice" if n % 2 else "bob",
                                   content=f"redis connection refused session {n}", metadata=meta)  # fmt: skip
        await api.send_message(
            channel_id="proj_shop:other",
            sender_id="shopper",
            sender_project_id="shop",
            content="redis connection refused in the shop",
            metadata={"type": "debug_start"},
        )

    run(scenario())


def _ids(found: list[dict[str, Any]]) -> list[str]:
    return sorted(m["id"] for m in found)


def test_search_metadata_filters(api: ClaudeSlackAPI) -> None:
    _sessions(api)
    solved = {"type": {"$in": ["debug_start", "error_pattern"]}, "resolution.status": "solved"}
    s = api.search_messages
    assert _ids(run(s(query="redis refused", metadata_filters=solved, ranking_profile="quality"))) == [
        "proj:debugging#3"]  # fmt: skip
    assert _ids(run(s(metadata_filters={"n": {"$gte": 2}, "resolution.fix": {"$contains": "fix"}}))) == [
        "proj:debugging#3", "proj:debugging#4"]  # fmt: skip
    assert _ids(run(s(metadata_filters={"$or": [{"n": 0}, {"n": 1}]}))) == ["proj:debugging#1", "proj:debugging#2"]
    assert _ids(run(s(metadata_filters={"$not": {"type": "debug_start"}}, project_ids=["proj"]))) == [
        "proj:debugging#2", "proj:debugging#3"]  # fmt: skip
    assert _ids(run(s(message_type="debug_start", channel_ids=["proj:debugging"]))) == [
        "proj:debugging#1", "proj:debugging#4"]  # fmt: skip
    resolved = {"resolution.fix": {"$not_contains": "fix 1"}, "resolution": {"$null": False}}
    assert _ids(run(s(metadata_filters=resolved))) == ["proj:debugging#3", "proj:debugging#4"]
    assert _ids(run(s(metadata_filters={"resolution": {"$empty": True}, "n": {"$exists": True}}))) == [
        "proj:debugging#1"]  # fmt: skip
    with pytest.raises(InvalidFilterError):
        run(s(metadata_filters={"n": {"$bogus": 1}}))
    with pytest.raises(InvalidFilterError):
        run(s(metadata_filters={"n": {"$null": "yes"}}))
    with pytest.raises(InvalidFilterError):
        run(s(metadata_filters=["type"]))  # type: ignore[arg-type]


def test_search_options(api: ClaudeSlackAPI) -> None:
    _sessions(api)
    s = api.search_messages
    assert _ids(run(s(min_confidence=0.7))) == ["proj:debugging#2", "proj:debugging#3"]
    assert _ids(run(s(sender_ids=["alice"]))) == ["proj:debugging#2", "proj:debugging#4"]
    assert _ids(run(s(project_ids=["shop"]))) == ["shop:other#1"]
    assert run(s(project_ids=["global"])) == []
    assert len(run(s(query="redis"))) == 5
    future = datetime.now(UTC) + timedelta(hours=1)
    assert run(s(since=future)) == [] and len(run(s(until=future.isoformat()))) == 5
    assert run(s(until="2001-01-01T00:00:00")) == []
    ranked = run(s(query="redis connection refused", ranking_profile="similarity", semantic_search=False))
    assert ranked and all(isinstance(m["score"], float) for m in ranked)
    assert all(m["search_scores"]["final_score"] == m["score"] for m in ranked)
    listed = run(s())
    assert [m["score"] for m in listed] == [None] * 5
    assert listed[0]["id"] == "shop:other#1"  # no query: newest first
    with pytest.raises(InvalidInputError):
        run(s(channel_ids="proj:debugging"))  # type: ignore[arg-type]
    with pytest.raises(ChannelNotFoundError):
        run(s(channel_ids=["proj:nope"]))


def test_search_limit_defaults_to_twenty(api: ClaudeSlackAPI) -> None:
    async def scenario() -> tuple[int, int]:
        for n in range(23):
            await api.send_channel_message(channel_id="general", sender_id="bot", content=f"tick {n}")
        return len(await api.search_messages()), len(await api.get_messages(limit=5))

    assert run(scenario()) == (20, 5)


def test_search_agent_messages_is_scoped(api: ClaudeSlackAPI) -> None:
    _sessions(api)
    mine = run(api.search_agent_messages(agent_name="alice", query="redis"))
    assert {m["channel_id"] for m in mine} == {"proj:debugging"}  # not the shop project's channel
    assert _ids(run(api.search_agent_messages(agent_name="shopper", agent_project_id="shop"))) == ["shop:other#1"]


def test_notes(api: ClaudeSlackAPI) -> None:
    async def scenario() -> dict[str, Any]:
        a = await api.write_note(agent_name="alice", content="redis needs a health check", tags=["redis"],
                                 confidence=0.9, breadcrumbs={"files": ["app.py"], "fix": "healthcheck"},
                                 session_context="s1")  # fmt: skip
        b = await api.write_note(agent_name="alice", content="postgres pool too small", tags=["postgres"],
                                 metadata={"confidence": 0.7})  # fmt: skip
        await api.write_note(agent_name="alice", content="lunch at noon", tags=["misc"])
        return {
            "ids": (a, b),
            "any": await api.search_my_notes(agent_name="alice", tags=["redis", "postgres"]),
            "query": await api.search_my_notes(agent_name="alice", query="healthcheck", ranking_profile="similarity"),
            "agent": await api.search_agent_notes(agent_name="alice", tags=["misc"]),
            "recent": await api.get_recent_notes(agent_name="alice", limit=2),
            "session": await api.get_recent_notes(agent_name="alice", session_id="s1"),
            "min": await api.search_my_notes(agent_name="alice", min_confidence=0.8),
            "bob": await api.search_my_notes(agent_name="bob", query="redis"),
            "peek": await api.peek_agent_notes(target_agent_name="alice", requester_agent_name="bob", query="redis"),
        }

    r = run(scenario())
    assert r["ids"] == ("notes:alice#1", "notes:alice#2")
    assert _ids(r["any"]) == ["notes:alice#1", "notes:alice#2"]  # several tags match any of them
    top = r["query"][0]
    assert set(top) >= NOTE_KEYS and top["id"] == "notes:alice#1"
    assert top["breadcrumbs"] == {"files": ["app.py"], "fix": "healthcheck"} and top["confidence"] == 0.9
    assert top["metadata"]["type"] == "note" and top["session_context"] == "s1" and top["tags"] == ["redis"]
    assert [n["content"] for n in r["agent"]] == ["lunch at noon"]
    assert [n["id"] for n in r["recent"]] == ["notes:alice#3", "notes:alice#2"]
    assert [n["id"] for n in r["session"]] == ["notes:alice#1"]
    assert [n["id"] for n in r["min"]] == ["notes:alice#1"]  # 0.9; metadata's 0.7 and the default 0.5 are below
    assert r["bob"] == []  # notes are private
    assert [n["id"] for n in r["peek"]][:1] == ["notes:alice#1"]
    peeks = [e for e in api.channels.read_events(0, limit=500) if e.topic == "note.peeked"]
    assert [e.actor for e in peeks] == ["bob"]


def test_update_and_delete_message(api: ClaudeSlackAPI) -> None:
    async def scenario() -> list[Any]:
        mid = await api.send_channel_message(channel_id="general", sender_id="alice", content="first draft")
        await api.register_agent("bob", project_id="proj")
        out: list[Any] = [await api.update_message(mid, content="final text", metadata={"type": "x"})]
        out.append(await api.get_message(mid))
        with pytest.raises(NotAMemberError):
            await api.update_message(mid, content="hijack", agent_name="bob")
        out.append(await api.delete_message(mid))
        out.append(await api.get_messages(channel_ids=["general"]))
        out.append(await api.search_messages(query="final text"))
        with pytest.raises(MessageNotFoundError):
            await api.get_message("global:general#99")
        with pytest.raises(MessageNotFoundError):
            await api.get_message(7)  # type: ignore[arg-type]
        return out

    updated, message, deleted, listed, found = run(scenario())
    assert updated is True and message["content"] == "final text" and message["metadata"] == {"type": "x"}
    assert deleted is True and listed == [] and found == []
    history = Channels(api.channels.memory).as_agent("alice").message_history("global:general#1")
    assert [m.content if m else None for m in history] == ["", "final text", "first draft"]


def test_register_agent(api: ClaudeSlackAPI) -> None:
    async def scenario() -> None:
        await api.register_agent("solo", description="a global agent")
        await api.register_agent("solo", description="updated", dm_policy="restricted")
        await api.register_agent("worker", project_id="factory")
        with pytest.raises(InvalidInputError):
            await api.register_agent("odd", dm_policy="sometimes")
        with pytest.raises(InvalidInputError):
            await api.register_agent("odd", discoverable="everyone")
        with pytest.raises(InvalidChannelNameError):
            await api.send_message(channel_id="general", sender_id="Not An Id", content="x")

    run(scenario())
    solo, worker = api.channels.agent("solo"), api.channels.agent("worker")
    assert (solo.project, solo.description, solo.dm_policy) == (None, "updated", "restricted")
    assert worker.project == "factory" and "factory" in api.channels.projects()


def test_one_store_two_apis(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    first = ClaudeSlackAPI(db_path=path, embedder="hashing")
    run(first.send_channel_message(channel_id="general", sender_id="alice", content="persisted"))
    again = ClaudeSlackAPI(channels=Channels(first.channels.memory))
    assert [m["content"] for m in run(again.get_messages())] == ["persisted"]
