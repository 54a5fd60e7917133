"""The debugging-assistant scenario of issue #13 (examples/debugging_assistant.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from conftest import CHANNEL_BACKENDS

from engram.store import tenant_url

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "debugging_assistant.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("debugging_assistant", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", CHANNEL_BACKENDS)
def test_debugging_assistant_scenario(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "postgres":
        store = tenant_url(request.getfixturevalue("pgvector_url"), "t" + uuid.uuid4().hex[:16])
    else:
        store = f"sqlite:///{tmp_path / 'team.db'}"
    facts = _load().run(store, "hashing", verbose=False)
    # similar *solved* errors only: the two solved ConnectionRefusedErrors and the pattern, not the open ones
    assert set(facts["similar"]) == {"shop:debugging#1", "shop:debugging#2", "shop:error-patterns#1"}
    assert facts["suggestions"][0] == "notes:fixer#1"  # the 0.9 note ranks first under "quality"
    assert "shop:debugging#5" in facts["suggestions"]
    before, after = facts["fix_confidence"]
    assert after > before
    before, after = facts["bad_fix_confidence"]
    assert after < before
    count, note, new = facts["pattern"]
    assert count >= 3 and note and new
    assert facts["general_before"] == [] and len(facts["general_now"]) == 1
    assert facts["patterns_before"] == [] and facts["rerun_new"] is False
