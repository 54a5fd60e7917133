"""Over HTTP, a name the rules refuse (engram._names) is a 422 in the one error shape, and NFD and NFC keys are
one item."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from .conftest import error_of


@pytest.mark.parametrize("route", ["/v1/branches", "/v1/tags"])
@pytest.mark.parametrize("name", ["x\n", "x\r\nSet-Cookie: a=b", "main\u202e", "abcdef0"])
def test_a_bad_ref_name_is_a_422(client: TestClient, route: str, name: str) -> None:
    error_of(client.post(route, json={"name": name}), 422, "invalid_ref")
    assert name not in client.get(route).json()["refs"]


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u200d", "\u2060", "\ufeff", "\r", "\u2028"])
def test_invisible_characters_in_a_key_or_label_are_a_422(client: TestClient, char: str) -> None:
    item = {"namespace": ["users"], "key": f"a{char}b", "value": {"v": 1}}
    error_of(client.put("/store/items", json=item), 422, "invalid_key")
    item = {"namespace": ["users", f"a{char}b"], "key": "k", "value": {"v": 1}}
    error_of(client.put("/store/items", json=item), 422, "invalid_namespace")


def test_nfd_and_nfc_keys_are_one_item_over_http(client: TestClient) -> None:
    nfd, nfc = "cafe\u0301", "caf\u00e9"
    assert client.put("/store/items", json={"namespace": ["m"], "key": nfd, "value": {"v": 1}}).status_code == 204
    got = client.get("/store/items", params={"namespace": "m", "key": nfc})
    assert got.status_code == 200 and got.json()["key"] == nfc
