"""The debugging assistant (issue #13): a team of agents shares errors, fixes and patterns through channels
stored in engram's versioned store, then looks at a channel as it was before a pattern existed.

Run it: ``python examples/debugging_assistant.py [--store URL] [--embedder hashing|minilm]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import engram
from engram.channels import Channels, Message

SOLVED = {"type": {"$in": ["debug_start", "error_pattern"]}, "resolution.status": "solved"}


def run(store: str = ":memory:", embedder: str = "hashing", *, verbose: bool = True) -> dict[str, Any]:
    """Play the scenario on ``store``; return what each step found (the test checks it)."""
    say = print if verbose else (lambda *args: None)
    memory = engram.open(store, embedder=embedder, author="debugging-assistant")
    hub = Channels(memory)
    facts: dict[str, Any] = {}
    try:
        # The team: a project, three agents, two project channels and a global default channel.
        hub.create_project("shop")
        for agent in ("debugger", "fixer", "reviewer"):
            hub.register_agent(agent, project="shop", description=f"the {agent} agent")
        debugger, fixer, reviewer = (hub.as_agent(a) for a in ("debugger", "fixer", "reviewer"))
        debugger.create_channel("debugging", description="errors as they happen, and their fixes")
        debugger.create_channel("error-patterns", description="proven, reusable fixes")
        debugger.create_channel("general", scope="global", default=True)
        for agent in (fixer, reviewer):
            agent.join("debugging")
            agent.join("error-patterns")

        # Earlier sessions: errors with nested metadata, some solved.
        history = [
            ("ConnectionRefusedError: [Errno 111] connect to db:5432 refused", "solved", "start postgres first"),
            ("ConnectionRefusedError: [Errno 111] connect to cache:6379 refused", "solved", "redis was not running"),
            ("TimeoutError: read from payments-api timed out after 30s", "open", None),
        ]
        for text, status, fix in history:
            resolution = {"status": status, **({"fix": fix} if fix else {})}
            debugger.send("debugging", text, metadata={"type": "debug_start", "error": {"class": text.split(":")[0]},
                                                       "resolution": resolution}, confidence=0.6)  # fmt: skip
        fixer.send("error-patterns", "Connection refused on a service port usually means the service is not up",
                   metadata={"type": "error_pattern", "resolution": {"status": "solved"}}, confidence=0.7)  # fmt: skip

        # 1. Log a new error session.
        session = debugger.send("debugging", "ConnectionRefusedError: [Errno 111] connect to db:5433 refused",
                                metadata={"type": "debug_start", "error": {"class": "ConnectionRefusedError",
                                          "port": 5433}, "resolution": {"status": "open"}})  # fmt: skip
        say("logged", session.id)

        # 2. Find similar solved errors: nested-metadata filter, quality profile.
        similar = debugger.search_messages("ConnectionRefusedError connect refused", filter=SOLVED, profile="quality")
        facts["similar"] = [m.id for m in similar]
        say("similar solved errors:", *(f"\n  {m.score:.3f} {m.content}" for m in similar))

        # 3. Document the fix, with a confidence, in the session's thread.
        fix = fixer.send("debugging", "Fix: the db container was down; `docker compose up db` fixed it",
                         reply_to=session.id, confidence=0.8, metadata={"type": "fix"})  # fmt: skip
        bad_fix = reviewer.send("debugging", "Fix: raise the connect timeout to 60s", reply_to=session.id,
                                confidence=0.5, metadata={"type": "fix"})  # fmt: skip

        # 4. A high-confidence pattern note with breadcrumbs and tags.
        note = fixer.write_note(
            "ConnectionRefusedError on a database port: check the container is up before anything else",
            confidence=0.9, tags=["postgres", "connection-refused"],
            breadcrumbs=[{"type": "file", "value": "docker-compose.yml"}, {"type": "commit", "value": "4f2a9c1"},
                         {"type": "decision", "value": "healthcheck before the api starts"}],
            session={"incident": session.id},
        )  # fmt: skip
        say("note", note.id, note.tags)

        # 5. A new ConnectionRefusedError: suggest fixes from notes and history, best first.
        query = "ConnectionRefusedError connect refused db"
        suggestions = _ranked(
            fixer.search_my_notes(query, profile="quality", limit=3),
            fixer.search_messages(query, filter={"type": {"$in": ["fix", "error_pattern"]}}, profile="quality"),
        )
        facts["suggestions"] = [m.id for m in suggestions]
        say("suggestions:", *(f"\n  {m.score:.3f} [{m.kind}] {m.content}" for m in suggestions))

        # 6. Feedback: one fix worked (confidence rises), the other did not (it falls).
        facts["fix_confidence"] = (fix.confidence, debugger.feedback(fix.id, True, note="db back up").confidence)
        facts["bad_fix_confidence"] = (bad_fix.confidence, debugger.feedback(bad_fix.id, False).confidence)
        say("confidence of the fix:", facts["fix_confidence"], "of the other:", facts["bad_fix_confidence"])

        # 7. Detect the recurring pattern (>= 3 similar errors), record it, broadcast it.
        before_pattern = memory.head.id
        patterns = debugger.detect_patterns("debugging", filter={"type": "debug_start"}, min_cluster=3,
                                            threshold=0.6, write=True)  # fmt: skip
        top = patterns[0]
        facts["pattern"] = (top.count, top.note, top.new)
        say(f"pattern of {top.count} errors:", top.representative)
        broadcast = debugger.send("general", f"Recurring: {top.representative} (x{top.count}); see {top.note}",
                                  metadata={"type": "pattern_broadcast", "note": top.note})  # fmt: skip
        facts["broadcast"] = broadcast.id

        # 8. The channel as it was before the pattern existed.
        facts["general_before"] = [m.content for m in reviewer.messages("general", at=before_pattern)]
        facts["general_now"] = [m.content for m in reviewer.messages("general")]
        facts["patterns_before"] = debugger.search_my_notes(tags=["pattern"], at=before_pattern)
        say("general before the pattern:", facts["general_before"], "now:", len(facts["general_now"]), "message(s)")
        facts["rerun_new"] = debugger.detect_patterns("debugging", filter={"type": "debug_start"}, min_cluster=3,
                                                      threshold=0.6, write=True)[0].new  # fmt: skip
    finally:
        memory.close()
    return facts


def _ranked(*lists: list[Message]) -> list[Message]:
    """Several result lists merged by score (scores are absolute, so they compare across searches)."""
    merged = {m.id: m for found in lists for m in found}
    return sorted(merged.values(), key=lambda m: -(m.score or 0.0))


def main() -> None:
    """Command line: run the scenario on a store."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=":memory:")
    parser.add_argument("--embedder", default="hashing")
    args = parser.parse_args()
    run(args.store, args.embedder)


if __name__ == "__main__":
    main()
