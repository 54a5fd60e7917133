"""The vocabulary of the MCP tools: :class:`Tool`, the :class:`Registry` a module of tools fills with
:meth:`Registry.tool`, and the argument schemas the modules share.

Each module of tools (:mod:`engram.mcp.tools`, :mod:`~engram.mcp.channel_tools`, :mod:`~engram.mcp.writer_tools`)
holds its own registry; :mod:`engram.mcp.server` joins them (:func:`join`) in the order clients list them.
Namespaces are JSON arrays of labels (``["users", "alice"]``); versions are ref expressions (``main``, a tag, a
commit id, ``HEAD~2``, ``main@{2026-11-20T11:15:00Z}``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
from mcp import types

from engram.ops.access import Principal

F = TypeVar("F", bound=Callable[..., dict[str, Any]])
#: Narrows a call's arguments to what the caller may touch (a namespace prefix), or refuses it.
Guard = Callable[[Principal, dict[str, Any]], dict[str, Any]]
Strategy = Literal["fail", "ours", "theirs", "newest"]


@dataclass(frozen=True, slots=True)
class Tool:
    """One MCP tool: its name, description, JSON schema of arguments, and the library call it makes."""

    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    run: Callable[..., dict[str, Any]]
    read_only: bool
    destructive: bool
    scope: str = "read"
    guard: Guard | None = None
    #: A service's tool (channels, the writer) as doors call it: ``service(services, memory, **arguments)`` with the
    #: tenant's :class:`~engram.ops.services.TenantServices`; ``run`` builds them for the one call.
    service: Callable[..., dict[str, Any]] | None = None
    validator: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.input_schema))

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments: an object with exactly these properties."""
        return {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
            "additionalProperties": False,
        }

    @property
    def defaults(self) -> dict[str, Any]:
        """Argument defaults, from the schema (the one place they are written)."""
        return {name: prop["default"] for name, prop in self.properties.items() if "default" in prop}

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the schema (one line), or None when they do."""
        unknown = sorted(set(arguments) - set(self.properties))
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            return f"unknown argument(s) {names} for {self.name}; it takes: {', '.join(self.properties)}"
        error = best_match(self.validator.iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(part) for part in error.absolute_path)
        return f"invalid argument {where!r}: {error.message}" if where else f"invalid arguments: {error.message}"

    def describe(self) -> types.Tool:
        """The tool as the protocol lists it."""
        hints = types.ToolAnnotations(
            read_only_hint=self.read_only, destructive_hint=self.destructive, open_world_hint=False
        )
        return types.Tool(
            name=self.name, description=self.description, input_schema=self.input_schema, annotations=hints
        )


class Registry(dict[str, Tool]):
    """Tools by name, in the order they were added (the order clients list them)."""

    def add(self, tool: Tool) -> Tool:
        """Add ``tool``; a second tool of the same name is an error."""
        if tool.name in self:
            raise ValueError(f"two MCP tools are named {tool.name!r}")
        self[tool.name] = tool
        return tool

    def tool(
        self,
        *,
        required: Sequence[str] = (),
        read_only: bool = False,
        destructive: bool = False,
        guard: Guard | None = None,
        scope: str | None = None,
        service: Callable[..., dict[str, Any]] | None = None,
        **properties: dict[str, Any],
    ) -> Callable[[F], F]:
        """Add a function ``<name>(memory, **arguments)`` as the tool of its name, its docstring the description
        and ``properties`` the JSON schemas of its arguments.

        A read-only tool needs the caller's ``read`` scope, any other ``write`` (unless ``scope`` says);
        ``guard`` applies the caller's namespace prefix to the arguments (the HTTP API's access policy); ``service``
        is the tool's call with the tenant's services (see :attr:`Tool.service`)."""

        def add(fn: F) -> F:
            needs = scope or ("read" if read_only else "write")
            self.add(Tool(fn.__name__, inspect.cleandoc(fn.__doc__ or ""), properties, tuple(required), fn,
                          read_only, destructive, needs, guard, service))  # fmt: skip
            return fn

        return add


def join(*registries: Registry) -> Registry:
    """Every tool of ``registries``, in their order (a name in two of them is an error)."""
    joined = Registry()
    for registry in registries:
        for found in registry.values():
            joined.add(found)
    return joined


_LABELS: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}
#: The forms of a version, for descriptions.
REF_HELP = (
    "a branch, tag, commit id (7+ hex characters), HEAD~n, or <branch>@{ISO time} e.g. main@{2026-11-20T11:15:00Z}"
)


def labels(description: str, **extra: Any) -> dict[str, Any]:
    """The schema of a namespace (or prefix): an array of non-empty labels."""
    return {**_LABELS, "description": description, **extra}


def string(description: str, **extra: Any) -> dict[str, Any]:
    """The schema of a non-empty string."""
    return {"type": "string", "minLength": 1, "description": description, **extra}


def integer(description: str, default: int, minimum: int = 1, maximum: int = 1000) -> dict[str, Any]:
    """The schema of a bounded integer with a default."""
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "default": default, "description": description}


def choice(values: Sequence[str], description: str, **extra: Any) -> dict[str, Any]:
    """The schema of one string of ``values``."""
    return {"type": "string", "enum": list(values), "description": description, **extra}


NAMESPACE = labels('The item\'s namespace: an array of labels, e.g. ["users", "alice"].', minItems=1)
#: An item key is any string, the empty string included (LangGraph's rule, the same at every door).
KEY: dict[str, Any] = {"type": "string", "description": "The item's key, unique within its namespace (any string)."}
AT = string(f"Read the memory as it was at this version: {REF_HELP}. Omit for the current head.")
AUTHOR = string("Who makes this change (an agent or user id), recorded on the commit. Default: the server's.")
MESSAGE = string("Commit message: why this change was made. Default: a generated one.")
BRANCH = string("The branch to write to (it must exist). Default: the server's branch.")
_ISO_BOUND: dict[str, Any] = {"type": ["string", "null"], "minLength": 1, "maxLength": 100}
#: Questions about time: how a search (or a context) ranks by the memories' dates.
WHEN: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "minLength": 1, "maxLength": 500},
        {
            "type": "object",
            "properties": {"start": _ISO_BOUND, "end": _ISO_BOUND},
            "additionalProperties": False,
        },
    ],
    "description": '"auto": favour memories whose date matches the query\'s time expressions ("in May 2023", '
    '"last Tuesday", "two weeks before 16 November 2023"); a range the query states ("between June 1 and July 31 '
    '2023", "since March 2023") keeps only memories inside it. Any other string: a time expression to use instead '
    'of the query\'s. {"start": ISO datetime, "end": ISO datetime} (either null; end exclusive): keep only '
    'memories in that range. "off": no time. Default "auto".',
}
REFERENCE_TIME = string(
    'The question\'s own date, that relative expressions ("last Tuesday", "two weeks ago") count from: an ISO '
    'datetime such as 2023-10-20T09:00:00Z, or a date such as "1:56 pm on 8 May, 2023". Default: now.',
    maxLength=100,
)
STRATEGY = choice(
    ["fail", "ours", "theirs", "newest"],
    "How to decide items both sides changed differently: fail (write nothing and list the conflicts), ours, "
    "theirs, or newest (the later write; a change beats a deletion).",
    default="fail",
)

__all__ = [
    "AT",
    "AUTHOR",
    "BRANCH",
    "KEY",
    "MESSAGE",
    "NAMESPACE",
    "REFERENCE_TIME",
    "REF_HELP",
    "STRATEGY",
    "WHEN",
    "Guard",
    "Registry",
    "Strategy",
    "Tool",
    "choice",
    "integer",
    "join",
    "labels",
    "string",
]
