"""The memory writer's settings as command-line options, the same at every door that runs a writer.

``engram writer`` takes them bare (``--interval 2``), ``engram serve`` and ``engram mcp`` with a ``writer-``
prefix (``--writer-interval 2``); each builds one :class:`~engram.writer.WriterConfig` from them, which refuses a
value out of range before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from engram.writer import WriterConfig
from engram.writer.settings import INTERVALS

F = TypeVar("F", bound=Callable[..., Any])

#: (name, click option keyword arguments): the writer's settings, in ``--help`` order.
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("extractor", {"default": "offline", "show_default": True, "metavar": "SPEC",
                   "help": "offline (no model server), openai:<model>@<base url> (any OpenAI-compatible server; the "
                           "key from OPENAI_API_KEY), or none (runs gated)."}),
    ("interval", {"default": 2, "show_default": True, "type": click.IntRange(INTERVALS.start, INTERVALS.stop - 1),
                  "help": "Completed assistant turns between runs."}),
    ("policy", {"type": click.Choice(["auto", "review"]), "default": "auto", "show_default": True,
                "help": "auto: merge each run at once; review: leave it on a branch for approve/reject."}),
    ("timeout", {"default": 30.0, "show_default": True, "type": click.FloatRange(0, min_open=True),
                 "metavar": "SECONDS", "help": "How long one model call may take."}),
    ("retries", {"default": 2, "show_default": True, "type": click.IntRange(0, 10),
                 "help": "Model calls retried after a timeout or a 5xx."}),
    ("instructions", {"metavar": "TEXT", "help": "Extra instructions for the model (what to remember, how)."}),
    ("max-failures", {"default": 3, "show_default": True, "type": click.IntRange(1),
                      "help": "Failed runs in a row before a target is dead-lettered (then: retry)."}),
    ("max-model-calls", {"default": 40, "show_default": True, "type": click.IntRange(1),
                         "help": "Model calls one run may make; the turns it could not take stay pending."}),
    ("max-input-chars", {"default": 100_000, "show_default": True, "type": click.IntRange(1),
                         "help": "Characters of new turns one run reads; the rest stays pending."}),
    ("redact-turns", {"is_flag": True, "help": "Store turns with secrets redacted (default: as sent; prompts, "
                                               "traces and memories are redacted either way)."}),
)  # fmt: skip


def writer_options(prefix: str = "") -> Callable[[F], F]:
    """Add the writer's settings to a command as ``--<prefix><name>`` options (see the module docstring)."""

    def decorate(fn: F) -> F:
        for name, kwargs in reversed(OPTIONS):
            flag = f"--{prefix}{name}"
            if prefix and name == "extractor":  # `engram serve --writer offline`, as before
                flag = f"--{prefix.rstrip('-')}"
            fn = click.option(flag, f"{prefix}{name}".replace("-", "_"), **kwargs)(fn)
        return fn

    return decorate


def writer_config(params: dict[str, Any], prefix: str = "", *, traces: Path | None = None,
                  background: bool = True) -> WriterConfig:  # fmt: skip
    """The :class:`~engram.writer.WriterConfig` of a command's parsed ``params`` (options from
    :func:`writer_options` with the same ``prefix``)."""
    key = prefix.replace("-", "_")
    return WriterConfig(
        extractor=params[f"{key}extractor"], interval=params[f"{key}interval"], policy=params[f"{key}policy"],
        timeout=params[f"{key}timeout"], retries=params[f"{key}retries"], instructions=params[f"{key}instructions"],
        max_failures=params[f"{key}max_failures"], max_model_calls=params[f"{key}max_model_calls"],
        max_input_chars=params[f"{key}max_input_chars"], redact_turns=params[f"{key}redact_turns"],
        trace_dir=traces, background=background,
    )  # fmt: skip
