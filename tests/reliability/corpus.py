"""A corpus of malformed and hostile HTTP requests, and the probe that sends it.

Every entry must be answered with a 4xx in the one error shape (a few entries that are valid but hostile may
also succeed), quickly, never with a 5xx, and without writing anything. :data:`STALLING` holds the requests
that can stall a server that evaluates ``$regex`` with a backtracking engine: they run against a server in
its own process, so that a stall costs a timeout instead of the test run.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .harness import ProbeResult, is_error_shape, request
from .probes_http import check_answer

JSON = {"Content-Type": "application/json"}
NS = "bad"
LONG_A = "a" * 5000 + "!"  # the value catastrophic patterns backtrack on
BIG = "1" + "0" * 399  # an integer with 400 digits
HUGE = "1" + "0" * 4999  # more digits than Python converts by default (4300)
#: 3000 characters that do not compress: longer than a PostgreSQL btree index entry may be (2704 bytes)
LONG_NAME = "".join(random.Random(3000).choices(string.ascii_lowercase + string.digits, k=3000))


@dataclass(frozen=True)
class BadInput:
    """One request of the corpus; ``succeed`` when a 2xx is a right answer too, ``writes`` when that 2xx
    may create a commit."""

    name: str
    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    succeed: bool = False
    writes: bool = False

    def send(self, client: httpx.Client, timeout: float | None = None) -> Any:
        kwargs: dict[str, Any] = {"params": self.params} if self.params else {}
        if self.content is not None:
            kwargs |= {"content": self.content, "headers": JSON}
        elif self.json is not None:
            kwargs["json"] = self.json
        if timeout is not None:
            kwargs["timeout"] = timeout
        return request(client, self.method, self.path, **kwargs)


def _put(value: Any = None, *, key: Any = "k", namespace: Any = (NS,), **extra: Any) -> Any:
    return {
        "namespace": list(namespace) if isinstance(namespace, tuple) else namespace,
        "key": key,
        "value": {"text": "ok"} if value is None else value,
        **extra,
    }


def _search(filter_: Any = None, **extra: Any) -> dict[str, Any]:
    return {"namespace_prefix": [NS], **({"filter": filter_} if filter_ is not None else {}), **extra}


def _raw(text: str) -> bytes:
    return text.encode()


def _nested(depth: int, leaf: str = "1", key: str = "a") -> str:
    return f'{{"{key}":' * depth + leaf + "}" * depth


def _nul() -> list[BadInput]:
    z = "\u0000"
    items = {"namespace": NS, "key": "k"}
    return [
        BadInput("NUL in value", "PUT", "/store/items", _put({"text": f"a{z}b"})),
        BadInput("NUL in a value's field name", "PUT", "/store/items", _put({f"a{z}b": 1})),
        BadInput("NUL in key", "PUT", "/store/items", _put(key=f"k{z}")),
        BadInput("NUL in namespace label", "PUT", "/store/items", _put(namespace=[f"bad{z}"])),
        BadInput("NUL in author", "PUT", "/v1/items", _put(author=f"me{z}")),
        BadInput("NUL in message", "PUT", "/v1/items", _put(message=f"m{z}")),
        BadInput("NUL in sources", "PUT", "/v1/items", _put(sources=[f"s{z}"])),
        BadInput("NUL in write branch", "PUT", "/v1/items", _put(branch=f"b{z}")),
        BadInput("NUL in index field", "PUT", "/store/items", _put(index=[f"te{z}xt"])),
        BadInput("NUL in new branch name", "POST", "/v1/branches", {"name": f"b{z}"}),
        BadInput("NUL in new tag name", "POST", "/v1/tags", {"name": f"t{z}"}),
        BadInput("NUL in ref (log)", "GET", "/v1/log", params={"ref": f"HEAD{z}"}),
        BadInput("NUL in ref (show)", "GET", "/v1/commits/HEAD%00"),
        BadInput("NUL in ref (diff)", "GET", "/v1/diff", params={"old": f"HEAD{z}"}),
        BadInput("NUL in ref (merge)", "POST", "/v1/merge", {"source": f"main{z}"}),
        BadInput("NUL in at (get)", "GET", "/v1/items", params={**items, "at": f"HEAD{z}"}),
        BadInput("NUL in at (search)", "POST", "/store/items/search", _search(at=f"HEAD{z}")),
        BadInput("NUL in read branch", "GET", "/v1/items", params={**items, "branch": f"main{z}"}),
        BadInput("NUL in get key", "GET", "/store/items", params={"namespace": NS, "key": f"k{z}"}),
        BadInput("NUL in get namespace", "GET", "/store/items", params={"namespace": f"bad{z}", "key": "k"}),
        BadInput("NUL in history key", "GET", "/v1/history", params={"namespace": NS, "key": f"k{z}"}),
        BadInput("NUL in delete message", "DELETE", "/v1/items", params={**items, "message": f"m{z}"}),
        BadInput("NUL in namespace prefix", "GET", "/v1/namespaces", params={"prefix": f"bad{z}"}),
        BadInput("NUL in namespaces prefix body", "POST", "/store/namespaces", {"prefix": [f"bad{z}"]}),
        BadInput("NUL in filter field name", "POST", "/store/items/search", _search({f"te{z}xt": "a"})),
        BadInput("NUL in filter value", "POST", "/store/items/search", _search({"text": f"a{z}"})),
        BadInput("NUL in filter $in", "POST", "/v1/search", _search({"text": {"$in": [f"a{z}"]}})),
        BadInput("NUL in filter $regex", "POST", "/store/items/search", _search({"text": {"$regex": f"a{z}"}})),
        # a query is never stored: U+0000 in it is just not part of a word (decided in #9)
        BadInput("NUL in query", "POST", "/store/items/search", _search(query=f"coffee{z}"), succeed=True),
    ]


def _numbers() -> list[BadInput]:
    search = "/store/items/search"
    return [
        # numbers in filters compare exactly however large, on every backend (decided in #9): a 2xx is right
        BadInput(
            "400-digit integer in filter", "POST", search, content=_raw(f'{{"filter": {{"n": {BIG}}}}}'), succeed=True
        ),
        BadInput(
            "400-digit integer in $gt",
            "POST",
            search,
            content=_raw(f'{{"filter": {{"n": {{"$gt": {BIG}}}}}}}'),
            succeed=True,
        ),
        BadInput(
            "400-digit integer in $in",
            "POST",
            "/v1/search",
            content=_raw(f'{{"filter": {{"n": {{"$in": [{BIG}]}}}}}}'),
            succeed=True,
        ),
        BadInput(
            "400-digit integer in $size",
            "POST",
            search,
            content=_raw(f'{{"filter": {{"tags": {{"$size": {BIG}}}}}}}'),
            succeed=True,
        ),
        BadInput("5000-digit integer in filter", "POST", search, content=_raw(f'{{"filter": {{"n": {HUGE}}}}}')),
        BadInput(
            "5000-digit integer in value",
            "PUT",
            "/store/items",
            content=_raw(f'{{"namespace": ["{NS}"], "key": "k", "value": {{"n": {HUGE}}}}}'),
        ),
        BadInput(
            "1e309 (infinite) in value",
            "PUT",
            "/store/items",
            content=_raw(f'{{"namespace": ["{NS}"], "key": "k", "value": {{"n": 1e309}}}}'),
        ),
        BadInput(
            "1e309 (infinite) in filter",
            "POST",
            search,
            content=_raw('{"filter": {"n": {"$lt": 1e309}}}'),
            succeed=True,
        ),
        BadInput(
            "-1e309 in $between",
            "POST",
            search,
            content=_raw('{"filter": {"n": {"$between": [-1e309, 1]}}}'),
            succeed=True,
        ),
        BadInput("400-digit limit", "POST", search, content=_raw(f'{{"limit": {BIG}}}')),
        BadInput("400-digit limit (query)", "GET", "/v1/log", params={"limit": BIG}),
        BadInput("400-digit HEAD~n", "GET", "/v1/log", params={"ref": f"HEAD~{BIG}"}),
        BadInput(
            "400-digit ttl",
            "PUT",
            "/store/items",
            content=_raw(f'{{"namespace": ["{NS}"], "key": "k", "value": {{}}, "ttl": {BIG}}}'),
        ),
        BadInput("huge limit", "POST", search, _search(limit=10**12)),
        BadInput("huge offset", "POST", "/v1/search", _search(offset=10**18)),
        BadInput("huge offset (query)", "GET", "/v1/namespaces", params={"offset": 10**30}),
        BadInput("negative limit", "POST", "/store/namespaces", {"limit": -1}),
        BadInput("zero log limit", "GET", "/v1/log", params={"limit": 0}),
        BadInput("huge max_depth", "POST", "/store/namespaces", content=_raw(f'{{"max_depth": {BIG}}}'), succeed=True),
    ]


def _nan_and_unicode() -> list[BadInput]:
    put = f'{{"namespace": ["{NS}"], "key": "k", "value": '
    return [
        BadInput("NaN in value", "PUT", "/store/items", content=_raw(put + '{"x": NaN}}')),
        BadInput("Infinity in value", "PUT", "/v1/items", content=_raw(put + '{"x": Infinity}}')),
        BadInput("NaN in filter", "POST", "/store/items/search", content=_raw('{"filter": {"x": NaN}}')),
        BadInput("NaN min_score", "POST", "/v1/search", content=_raw('{"min_score": NaN}')),
        BadInput(
            "-Infinity profile weight",
            "POST",
            "/store/items/search",
            content=_raw('{"query": "a", "profile": {"similarity": -Infinity}}'),
        ),
        BadInput("Infinity ttl", "PUT", "/store/items", content=_raw(put + '{}, "ttl": Infinity}')),
        BadInput("lone surrogate in value", "PUT", "/store/items", content=_raw(put + '{"t": "\\ud800"}}')),
        BadInput(
            "lone surrogate in key",
            "PUT",
            "/store/items",
            content=_raw(f'{{"namespace": ["{NS}"], "key": "\\udfff", "value": {{}}}}'),
        ),
        BadInput(
            "lone surrogate in namespace",
            "PUT",
            "/v1/items",
            content=_raw('{"namespace": ["\\ud800x"], "key": "k", "value": {}}'),
        ),
        BadInput("lone surrogate in query", "POST", "/store/items/search", content=_raw('{"query": "\\ud83d"}')),
        BadInput("lone surrogate in filter", "POST", "/v1/search", content=_raw('{"filter": {"t": "\\udc00"}}')),
        BadInput("lone surrogate in branch name", "POST", "/v1/branches", content=_raw('{"name": "\\ud800"}')),
        BadInput(
            "invalid UTF-8 body", "PUT", "/store/items", content=b'{"namespace": ["\xff\xfe"], "key": "k", "value": {}}'
        ),
    ]


def _nesting() -> list[BadInput]:
    put = f'{{"namespace": ["{NS}"], "key": "k", "value": '
    return [
        BadInput("value nested 5000 deep", "PUT", "/store/items", content=_raw(put + _nested(5000) + "}")),
        BadInput(
            "list nested 5000 deep", "PUT", "/v1/items", content=_raw(put + '{"a": ' + "[" * 5000 + "]" * 5000 + "}}")
        ),
        BadInput(
            "filter nested 5000 deep",
            "POST",
            "/store/items/search",
            content=_raw('{"filter": ' + _nested(5000, "1", "$and") + "}"),
        ),
        BadInput(
            "value nested 900 deep",
            "PUT",
            "/store/items",
            content=_raw(put + _nested(900) + "}"),
            succeed=True,
            writes=True,
        ),
        BadInput(
            "filter $not nested 400 deep",
            "POST",
            "/v1/search",
            content=_raw('{"filter": {"text": ' + _nested(400, '"x"', "$not") + "}}"),
            succeed=True,
        ),
        BadInput(
            "filter $and nested 400 deep",
            "POST",
            "/store/items/search",
            content=_raw('{"filter": ' + '{"$and": [' * 400 + '{"a": 1}' + "]}" * 400 + "}"),
            succeed=True,
        ),
    ]


def _operators_and_types() -> list[BadInput]:
    search = "/store/items/search"
    return [
        BadInput("unknown operator", "POST", search, _search({"text": {"$foo": 1}})),
        BadInput("$where", "POST", search, _search({"$where": "sleep(1000)"})),
        BadInput("$and not a list", "POST", "/v1/search", _search({"$and": {"a": 1}})),
        BadInput("$or empty", "POST", search, _search({"$or": []})),
        BadInput("$in not a list", "POST", search, _search({"text": {"$in": 5}})),
        BadInput("$between one bound", "POST", search, _search({"n": {"$between": [1]}})),
        BadInput("$size not an integer", "POST", search, _search({"tags": {"$size": "two"}})),
        BadInput("$regex not a string", "POST", search, _search({"text": {"$regex": 5}})),
        BadInput("$regex unbalanced", "POST", "/v1/search", _search({"text": {"$regex": "(a"}})),
        BadInput("$options unknown", "POST", search, _search({"text": {"$regex": "a", "$options": "zq"}})),
        BadInput("$regex repetition count too large", "POST", search, _search({"text": {"$regex": "a{99999999999}"}})),
        BadInput("$options without $regex", "POST", search, _search({"text": {"$options": "i"}})),
        BadInput("operator as field", "POST", search, _search({"$text": "a"})),
        BadInput("empty field name", "POST", search, _search({"": "a"})),
        BadInput("filter is a list", "POST", search, _search([{"a": 1}])),
        BadInput("bad JSON", "PUT", "/store/items", content=b"{"),
        BadInput("empty body", "PUT", "/v1/items", content=b""),
        BadInput("trailing garbage", "POST", search, content=b'{"limit": 1} xyz'),
        BadInput("body is a list", "PUT", "/store/items", content=b"[]"),
        BadInput("body is null", "POST", "/v1/search", content=b"null"),
        BadInput("namespace is a string", "PUT", "/store/items", _put(namespace="users")),
        BadInput("namespace is empty", "PUT", "/store/items", _put(namespace=[])),
        BadInput("label with a dot", "PUT", "/v1/items", _put(namespace=["a.b"])),
        BadInput("label is a number", "PUT", "/store/items", _put(namespace=[5])),
        BadInput("key is a number", "PUT", "/store/items", _put(key=5)),
        BadInput("key is empty", "PUT", "/v1/items", _put(key=""), succeed=True, writes=True),  # LangGraph allows it
        BadInput("value is a list", "PUT", "/store/items", _put([1, 2])),
        BadInput("value is a string", "PUT", "/store/items", _put("text")),
        BadInput("ttl is a string", "PUT", "/store/items", _put(ttl="1h")),
        BadInput("ttl is negative", "PUT", "/store/items", _put(ttl=-1)),
        BadInput("index is a string", "PUT", "/store/items", _put(index="yes")),
        BadInput("unknown field", "PUT", "/store/items", _put(colour="red")),
        BadInput("limit is a string", "POST", search, _search(limit="10")),
        BadInput("query is a number", "POST", search, _search(query=5)),
        BadInput("unknown mode", "POST", search, _search(query="a", mode="fast")),
        BadInput("unknown profile", "POST", search, _search(query="a", profile="nope")),
        BadInput("at is a number", "POST", search, _search(at=5)),
        BadInput("unknown merge strategy", "POST", "/v1/merge", {"source": "main", "strategy": "mine"}),
        BadInput("branch name ../x", "POST", "/v1/branches", {"name": "../x"}),
        BadInput("branch name a..b", "POST", "/v1/branches", {"name": "a..b"}),
        BadInput("branch name -x", "POST", "/v1/branches", {"name": "-x"}),
        BadInput("branch name HEAD", "POST", "/v1/branches", {"name": "HEAD"}),
        BadInput("branch name main~1", "POST", "/v1/branches", {"name": "main~1"}),
        BadInput("branch name with a space", "POST", "/v1/branches", {"name": "a b"}),
        BadInput("tag name with a newline", "POST", "/v1/tags", {"name": "a\nb"}),
        BadInput("branch name of 3000 characters", "POST", "/v1/branches", {"name": LONG_NAME}, succeed=True),
        BadInput("tag name of 3000 characters", "POST", "/v1/tags", {"name": LONG_NAME}, succeed=True),
        BadInput("key of 3000 characters", "PUT", "/v1/items", _put(key=LONG_NAME), succeed=True, writes=True),
        BadInput(
            "label of 3000 characters", "PUT", "/store/items", _put(namespace=[LONG_NAME]), succeed=True, writes=True
        ),
        BadInput("write to a branch that is not there", "PUT", "/v1/items", _put(branch="nope")),
        BadInput("time travel to garbage", "GET", "/v1/log", params={"ref": "main@{not a date}"}),
        BadInput("time travel to year 99999", "GET", "/v1/log", params={"ref": "main@{99999-01-01T00:00:00Z}"}),
        BadInput(
            "time travel before the store",
            "GET",
            "/v1/items",
            params={"namespace": NS, "key": "k", "at": "main@{1970-01-01T00:00:00Z}"},
        ),
        BadInput("unknown commit id", "GET", "/v1/commits/" + "0" * 64),
        BadInput("three-char commit prefix", "GET", "/v1/log", params={"ref": "abc"}),
        BadInput("revert an unknown ref", "POST", "/v1/revert", {"ref": "f" * 40}),
        BadInput("get without namespace", "GET", "/v1/items", params={"key": "k"}),
        BadInput("body over the size limit", "PUT", "/store/items", _put({"text": "x" * (2 << 20)})),
        BadInput("unknown route", "GET", "/v1/nothing"),
        BadInput("wrong method", "PATCH", "/store/items", _put()),
    ]


def corpus() -> list[BadInput]:
    """Every entry, in a fixed order."""
    return _nul() + _numbers() + _nan_and_unicode() + _nesting() + _operators_and_types()


#: Catastrophic patterns (exponential on a backtracking engine) and patterns some engines refuse.
STALLING = [
    BadInput(
        "catastrophic $regex (a+)+$",
        "POST",
        "/store/items/search",
        _search({"text": {"$regex": "(a+)+$"}}),
        succeed=True,
    ),
    BadInput(
        "catastrophic $regex (a|aa)+$", "POST", "/v1/search", _search({"text": {"$regex": "(a|aa)+$"}}), succeed=True
    ),
    BadInput(
        "catastrophic $regex (.*a){25}",
        "POST",
        "/store/items/search",
        _search({"text": {"$regex": "(.*a){25}!x"}}),
        succeed=True,
    ),
    BadInput(
        "catastrophic $not $regex",
        "POST",
        "/store/items/search",
        _search({"text": {"$not": {"$regex": "^(a|a?)+$"}}}),
        succeed=True,
    ),
    BadInput(
        "backreference $regex", "POST", "/store/items/search", _search({"text": {"$regex": "(a*)*\\1b"}}), succeed=True
    ),
]


def seed(client: httpx.Client) -> None:
    """Items the corpus's filters run over, one with a long run of ``a`` for the catastrophic patterns."""
    for key, value in (
        ("long", {"text": LONG_A}),
        ("n", {"n": 5, "tags": ["x", "y"], "text": "coffee"}),
        ("k", {"text": "ok"}),
    ):
        response = client.put("/store/items", json={"namespace": [NS], "key": key, "value": value})
        assert response.status_code == 204, response.text


def run_corpus(
    client: httpx.Client,
    entries: list[BadInput],
    *,
    bound: float,
    label: str,
    timeout: float | None = None,
    commits: Callable[[], int] | None = None,
) -> ProbeResult:
    """Send every entry; each answer must be a 4xx in the error shape (or a 2xx where allowed) within ``bound``
    seconds, and no refused request may create a commit (``commits()`` counts them, when given)."""
    result = ProbeResult(f"bad input ({label})")
    allowed_writes = 0
    before = commits() if commits else 0
    for n, entry in enumerate(entries):
        outcome = entry.send(client, timeout)
        if outcome.status is None and timeout is not None:
            result.server_errors += 1
            skipped = ", ".join(e.name for e in entries[n + 1 :])
            result.problem(
                f"{entry.name}: no answer within {timeout} s ({outcome.error}); the server is stalled, "
                f"so these were not sent: {skipped or 'none'}"
            )
            result.requests += 1
            result.latency(outcome.seconds)
            break
        check_answer(result, outcome, bound=bound, label=entry.name)
        status = outcome.status or 0
        code = outcome.body["error"]["code"] if is_error_shape(outcome.body) else ""
        if 200 <= status < 300 and not entry.succeed:
            result.problem(f"{entry.name}: accepted: {outcome.describe()}")
        elif 400 <= status < 500 and "unavailable" in code:
            result.problem(f"{entry.name}: answered as unavailable: {outcome.describe()}")
        elif 300 <= status < 400 or (100 <= status < 200):
            result.problem(f"{entry.name}: unexpected status: {outcome.describe()}")
        allowed_writes += entry.writes and 200 <= status < 300
    result.runs = len(entries)
    if commits:
        made = commits() - before
        if made > allowed_writes:
            result.problem(f"refused requests created {made - allowed_writes} commit(s)")
    return result
