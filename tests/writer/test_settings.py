"""Writer settings (issue #27): one frozen value built once, the merge policy as a function, the API key an argument."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from engram.errors import InvalidInputError
from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor, OpenAIExtractor, WriterMetrics, WriterSettings
from engram.writer.settings import decide, merge_every_run, review_every_run
from engram.writer.spec import extractor_from_spec

ALICE = ("users", "alice")


def test_settings_are_frozen_and_normalised() -> None:
    settings = WriterSettings(context_turns=-3, merge_attempts=0, exclude=["a", "a"], lease_seconds=0.0001)
    assert settings.context_turns == 0 and settings.merge_attempts == 1 and settings.exclude == frozenset({"a"})
    assert settings.lease_ms == 1 and settings.policy_name == "auto" and settings.direct
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.interval = 5  # type: ignore[misc]
    with pytest.raises(InvalidInputError):
        WriterSettings(policy="sometimes")  # type: ignore[arg-type]


def test_settings_given_or_as_keywords_build_the_same_writer(wmem: Memory, tmp_path: Path, metrics: WriterMetrics):
    settings = WriterSettings(interval=1, policy="review", background=False, trace_dir=tmp_path / "traces")
    given = MemoryWriter(wmem, extractor=OfflineExtractor(), metrics=metrics, settings=settings)
    keywords = MemoryWriter(wmem, extractor=OfflineExtractor(), metrics=metrics, interval=1, policy="review",
                            background=False, trace_dir=tmp_path / "traces")  # fmt: skip
    assert given.settings == keywords.settings and given.interval == 1 and given.policy_name == "review"
    overridden = MemoryWriter(wmem, metrics=metrics, settings=settings, interval=3)
    assert overridden.settings == dataclasses.replace(settings, interval=3) and settings.interval == 1
    given.start_conversation("c1", ALICE)
    given.append("c1", "user", "I live in Lyon.")
    assert given.append("c1", "assistant", "Noted.").run["outcome"] == "review"  # type: ignore[index]


def test_merge_policy_is_a_function() -> None:
    record: dict[str, Any] = {"id": "r"}
    assert WriterSettings().merge_policy is merge_every_run
    assert WriterSettings(policy="review").merge_policy is review_every_run
    assert decide(review_every_run, record, []) == "review"
    assert decide(lambda r, a: True, record, []) == "merge" and decide(lambda r, a: False, record, []) == "reject"
    with pytest.raises(InvalidInputError):
        decide(lambda r, a: "maybe", record, [])


def test_extractor_from_spec_takes_the_key_as_an_argument() -> None:
    for key in ("sk-given", None):
        made = extractor_from_spec("openai:m@http://127.0.0.1:9", api_key=key)
        assert isinstance(made, OpenAIExtractor) and made.model == "m"
    assert isinstance(extractor_from_spec("offline", api_key="unused"), OfflineExtractor)
    assert extractor_from_spec(None, api_key="unused") is None
