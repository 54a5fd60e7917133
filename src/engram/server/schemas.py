"""Request and response bodies of the HTTP API (their JSON is written by :mod:`engram.store.serialize`).

The ``/store`` bodies are LangGraph Agent Server's, field for field (plus optional extensions);
the ``/v1`` bodies expose engram's versioning verbs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engram.server.errors import ErrorBody
from engram.store import Profile

#: Largest page a search or a listing returns.
MAX_LIMIT = 10_000
MAX_OFFSET = 1_000_000
#: Longest TTL, in minutes (about 1900 years).
MAX_TTL = 1e9
Mode = Literal["hybrid", "semantic", "keyword"]
Strategy = Literal["fail", "ours", "theirs", "newest"]
Label = Annotated[str, Field(min_length=1, pattern=r"^[^.]+$", description="a namespace label: no '.'")]
Namespace = Annotated[list[Label], Field(min_length=1, description='namespace labels, e.g. ["users", "alice"]')]
Prefix = Annotated[list[Label], Field(description="namespace prefix labels; [] is the root")]
RefText = Annotated[str, Field(min_length=1, description="a ref: branch, tag, commit id, HEAD~n, main@{ISO time}")]
Weight = Annotated[float, Field(ge=0, le=1000)]
IsoTime = Annotated[str, Field(min_length=1, max_length=100, description="an ISO datetime, e.g. 2023-05-01T00:00:00Z")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class ProfileBody(_Body):
    """A custom ranking profile: weights of similarity, confidence and recency."""

    similarity: Weight
    confidence: Weight = 0.0
    recency: Weight = 0.0
    half_life_hours: float = Field(168.0, gt=0, le=MAX_TTL)

    def profile(self) -> Profile:
        """The library's profile."""
        return Profile(self.similarity, self.confidence, self.recency, self.half_life_hours)


class PutItem(_Body):
    """``PUT /store/items``: store (or replace) an item. Leaving ``ttl`` out uses the store's default."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = Field(None, gt=0, le=MAX_TTL, description="minutes until the item expires; null: never")

    @field_validator("index", mode="before")
    @classmethod
    def _exactly_false(cls, value: Any) -> Any:
        if value is not None and value is not False and not isinstance(value, list):
            raise ValueError("index is false (not searchable), null (the store's fields) or a list of field paths")
        return value


class DeleteItem(_Body):
    """``DELETE /store/items``: delete an item."""

    namespace: Namespace
    key: str


class SearchItems(_Body):
    """``POST /store/items/search``; ``mode`` to ``at`` are engram's extensions."""

    namespace_prefix: Prefix = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(10, ge=0, le=MAX_LIMIT)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    query: str | None = None
    refresh_ttl: bool | None = None
    mode: Mode | None = None
    profile: str | ProfileBody = "similarity"
    explain: bool = False
    min_score: float | None = Field(None, ge=-1e6, le=1e6)
    at: RefText | None = Field(None, description="search as of a ref: branch, tag, commit, HEAD~n, main@{time}")

    def ranking(self) -> str | Profile:
        """The profile the library takes."""
        return self.profile.profile() if isinstance(self.profile, ProfileBody) else self.profile


class TimeRange(_Body):
    """``when`` as a range: keep only items whose time is at or after ``start`` and before ``end`` (either null)."""

    start: IsoTime | None = None
    end: IsoTime | None = None


#: ``when`` of a search or a context (see docs/search.md, "Questions about time").
When = Annotated[
    Annotated[str, Field(min_length=1, max_length=500)] | TimeRange | None,
    Field(
        description='"auto": favour items whose time matches the query\'s time expressions ("in May 2023", "last '
        'Tuesday"; a stated range such as "since March 2023" filters; the default); "off": no time; any other '
        'string: a time expression used instead of the query\'s; {"start": ISO, "end": ISO}: a range that filters',
    ),
]
#: ``reference_time`` of a search or a context.
ReferenceTime = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=100,
        description="the question's own date, that relative expressions count from (an ISO datetime, or a date "
        'such as "1:56 pm on 8 May, 2023"); default: now',
    ),
]


class ListNamespaces(_Body):
    """``POST /store/namespaces``; ``*`` in ``prefix``/``suffix`` matches any one label."""

    prefix: list[Label] | None = None
    suffix: list[Label] | None = None
    max_depth: int | None = Field(None, ge=1)
    limit: int = Field(100, ge=0, le=MAX_LIMIT)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    at: RefText | None = None


class ItemOut(BaseModel):
    """An item, LangGraph's shape."""

    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: str
    updated_at: str


class SearchItemOut(ItemOut):
    """An item found by a search, with its score (null in a listing without a query)."""

    score: float | None
    explain: dict[str, Any] | None = None


class SearchOut(BaseModel):
    """``POST /store/items/search`` response."""

    items: list[SearchItemOut]


class NamespacesOut(BaseModel):
    """``POST /store/namespaces`` response; ``GET /v1/namespaces?counts=true`` adds each namespace's item count
    (its sub-namespaces' included) and the prefix's ``total``."""

    namespaces: list[list[str]]
    counts: list[int] | None = None
    total: int | None = None


class WriteItem(PutItem):
    """``PUT /v1/items``: a LangGraph put plus the branch, the commit's author and message, and sources."""

    branch: str | None = None
    author: str | None = None
    message: str | None = None
    sources: list[str] = Field(default_factory=list)


class SearchV1(SearchItems):
    """``POST /v1/search``: a LangGraph search on a branch, optionally reranked and ranked by time."""

    branch: str | None = None
    rerank: bool = Field(
        False,
        description="rerank the first stage's top candidates with the server's cross-encoder (422 when its "
        "operator configured none: engram serve --rerank)",
    )
    when: When = None
    reference_time: ReferenceTime = None


class ContextV1(_Body):
    """``POST /v1/context``: the memories relevant to ``query`` as prompt text within ``budget_tokens``."""

    namespace_prefix: Prefix = Field(default_factory=list)
    query: Annotated[str, Field(min_length=1, description="what the prompt is about")]
    budget_tokens: int = Field(1000, ge=1, le=1_000_000, description="tokens the block may take at most")
    filter: dict[str, Any] | None = None
    candidates: int = Field(50, ge=1, le=1000, description="search hits the block is chosen from")
    mode: Mode | None = None
    at: RefText | None = Field(None, description="what was known as of a ref: branch, tag, commit, main@{time}")
    branch: str | None = None
    when: When = None
    reference_time: ReferenceTime = None


class ContextItemOut(BaseModel):
    """One memory in a context block."""

    namespace: list[str]
    key: str
    score: float | None
    tokens: int
    line: str


class ContextOut(BaseModel):
    """A context block (``text``), what it holds (``items``), and how it was counted and chosen."""

    text: str
    items: list[ContextItemOut]
    tokens: int
    budget_tokens: int
    tokenizer: str
    mode: str
    degraded: str | None
    left_out: int
    duplicates: int
    superseded: int


class CreateRef(_Body):
    """``POST /v1/branches`` and ``POST /v1/tags``: name the version ``at`` (``HEAD`` is ``branch``'s head)."""

    name: Annotated[str, Field(min_length=1)]
    at: RefText = "HEAD"
    branch: str | None = None


class Merge(_Body):
    """``POST /v1/merge``: merge ``source`` into branch ``into``, by ``author`` (default: the caller)."""

    source: RefText
    into: str | None = None
    strategy: Strategy = "fail"
    message: str | None = None
    author: str | None = None


class Revert(_Body):
    """``POST /v1/revert``: undo commit ``ref`` with a new commit on ``branch``, by ``author`` (default: the
    caller), with ``message`` (default: ``revert <id>: <its message>``)."""

    ref: RefText
    branch: str | None = None
    strategy: Strategy = "fail"
    message: str | None = None
    author: str | None = None


class Reset(_Body):
    """``POST /v1/reset``: move ``branch`` to version ``ref``."""

    ref: RefText
    branch: str | None = None


class Gc(_Body):
    """``POST /v1/gc``: delete unreachable chunks, first pruning reflog entries older than this."""

    keep_reflog_days: float | None = Field(None, ge=0, le=100_000)


class FullItemOut(ItemOut):
    """An item with its expiry and provenance."""

    expires_at: str | None
    author: str | None
    sources: list[str]


class CommitOut(BaseModel):
    """A commit."""

    id: str
    short_id: str
    parents: list[str]
    time: str
    author: str
    message: str
    metadata: dict[str, Any]


class CommitResult(BaseModel):
    """The commit a write made (or the unchanged head when it changed nothing)."""

    commit: CommitOut
    token: str = Field(description="consistency token <branch>@<commit id>: send it back in Engram-Commit on reads")


class MergeOut(CommitResult):
    """The merge commit, or the unchanged head with ``up_to_date`` when there was nothing to merge."""

    up_to_date: bool = Field(description="true: the branch already had everything in source; nothing was written")


class RevertOut(CommitResult):
    """The revert commit, or the unchanged head with ``nothing_to_revert`` when there was nothing to undo."""

    nothing_to_revert: bool = Field(
        description="true: the branch already lacked what ref changed (never had it, or it was reverted); "
        "nothing was written"
    )


class ChangeOut(BaseModel):
    """One item that differs between two versions."""

    namespace: list[str]
    key: str
    kind: Literal["added", "removed", "modified"]
    old: FullItemOut | None
    new: FullItemOut | None


class ShowOut(CommitOut):
    """A commit and the item changes it made."""

    changes: list[ChangeOut]


class LogOut(BaseModel):
    """Commits, newest first."""

    commits: list[CommitOut]


class DiffOut(BaseModel):
    """Item changes between two versions, and the commits compared (``old_commit``: null for the empty memory)."""

    changes: list[ChangeOut]
    old_commit: str | None
    new_commit: str


class VersionOut(BaseModel):
    """One version of an item and the commit that made it (``item`` null: deleted)."""

    commit: CommitOut
    item: FullItemOut | None


class HistoryOut(BaseModel):
    """Every version of one item, newest first."""

    versions: list[VersionOut]


class SearchV1Out(BaseModel):
    """Search results and how the search ran (``degraded`` says why it ran in a weaker mode)."""

    items: list[SearchItemOut]
    mode: str
    requested_mode: str
    degraded: str | None


class RefsOut(BaseModel):
    """Branch or tag name -> commit id."""

    refs: dict[str, str]


class RefOut(BaseModel):
    """A branch or tag and the commit it names."""

    name: str
    commit: str


class ResetOut(BaseModel):
    """Where a branch points after a reset."""

    branch: str
    commit: CommitOut


class GcOut(BaseModel):
    """What garbage collection kept and removed."""

    kept: int
    removed: int
    reflog_pruned: int


class FsckOut(BaseModel):
    """What fsck checked and found."""

    ok: bool
    commits: int
    nodes: int
    missing: list[str]
    corrupt: list[str]


class Health(BaseModel):
    """``/healthz`` and ``/readyz``."""

    status: str
    checks: dict[str, Any] = Field(default_factory=dict)


ERROR_DESCRIPTIONS = {
    400: "Malformed request",
    401: "Missing or invalid API key",
    403: "Missing scope, or a namespace outside the key's prefix",
    404: "No such item, ref, branch or tag",
    409: "Conflict (a merge's conflicts are in details; the ref exists)",
    413: "Request body over the limit",
    422: "Invalid input",
    500: "Internal error",
    503: "Store or embedder unavailable",
}


def responses(model: type[Any] | None = None, status: int = 200) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of a route: its success body and every error, in the one error shape."""
    out: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody, "description": text} for code, text in
                                            ERROR_DESCRIPTIONS.items()}  # fmt: skip
    if model is not None:
        out[status] = {"model": model}
    return out
