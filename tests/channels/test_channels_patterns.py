"""Pattern detection: the index's stored vectors, clustering on a metadata field or the first line, the default
threshold calibrated on realistic error reports, and a pattern note's confidence following its cluster."""

from __future__ import annotations

import pytest

from engram.channels import Actor


def _refused(actor: Actor, port: int) -> None:
    actor.send("debugging", f"ConnectionRefusedError: connect to 127.0.0.1 port {port} refused")


def test_pattern_note_confidence_follows_its_cluster(alice: Actor) -> None:
    alice.create_channel("debugging")
    for port in (5432, 5433, 5434):
        _refused(alice, port)
    first = alice.detect_patterns("debugging", threshold=0.6, write=True)[0]
    note = alice.message(first.note or "")
    assert note.confidence == pytest.approx(0.6)  # 3 members
    _refused(alice, 5435)
    grown = alice.detect_patterns("debugging", threshold=0.6, write=True)[0]
    assert grown.note == first.note and alice.message(grown.note or "").confidence == pytest.approx(0.65)
    _refused(alice, 5436)
    alice.detect_patterns("debugging", threshold=0.6, write=True)
    history = [m.confidence for m in alice.message_history(first.note or "") if m]
    assert history == pytest.approx([0.7, 0.65, 0.6])  # newest first: 5, 4 and 3 members
