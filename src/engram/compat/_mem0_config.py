"""mem0's configuration dict, read for the engram adapter: what to open, embed with and extract with.

mem0's ``vector_store`` and ``history_db_path`` have no meaning here (engram is the store and its history), its
``llm`` section names the writer's extractor when it is an OpenAI-compatible server, and its ``embedder``
section the embedder when it is one. An ``engram`` section says everything directly::

    {"engram": {"store": "sqlite:///mem.db", "embedder": "hashing", "extractor": "offline",
                "search": "semantic", "author": "mem0"}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram.errors import ConfigError

#: mem0's top-level config keys the adapter accepts (those engram replaces are read and left aside).
KNOWN_KEYS = frozenset({"engram", "vector_store", "embedder", "llm", "history_db_path", "graph_store", "reranker",
                        "version", "custom_instructions", "custom_fact_extraction_prompt",
                        "custom_update_memory_prompt"})  # fmt: skip
#: mem0 providers that speak OpenAI's API: provider -> (base URL key in its config, default base URL).
_OPENAI_LIKE = {
    "openai": ("openai_base_url", "https://api.openai.com/v1"),
    "ollama": ("ollama_base_url", "http://localhost:11434"),
    "lmstudio": ("lmstudio_base_url", "http://localhost:1234/v1"),
    "vllm": ("vllm_base_url", "http://localhost:8000/v1"),
}
SEARCH_MODES = ("semantic", "hybrid")


@dataclass(frozen=True, slots=True)
class Settings:
    """What the adapter is built from (see the module docstring)."""

    store: str | None = None
    embedder: str = "auto"
    extractor: str | None = "offline"
    api_key: str | None = None
    search: str = "semantic"
    author: str = "mem0"
    instructions: str | None = None


def _openai_spec(section: Mapping[str, Any], what: str) -> tuple[str, str | None]:
    provider = section.get("provider", "openai")
    config = dict(section.get("config") or {})
    if provider not in _OPENAI_LIKE:
        raise ConfigError(
            f"mem0 {what} provider {provider!r} is not OpenAI-compatible: use one of {', '.join(_OPENAI_LIKE)} or "
            f"name engram's {what} in the config's 'engram' section"
        )
    url_key, default = _OPENAI_LIKE[provider]
    base = str(config.get(url_key) or default).rstrip("/")
    if provider == "ollama" and not base.endswith("/v1"):
        base += "/v1"  # ollama's OpenAI-compatible API
    model = config.get("model")
    if not model:
        raise ConfigError(f"mem0 {what} config needs a 'model'")
    key = config.get("api_key") or (os.environ.get("OPENAI_API_KEY") if provider == "openai" else None)
    return f"openai:{model}@{base}", key


def settings_from_config(config: Mapping[str, Any]) -> Settings:
    """Read a mem0-style config dict (see the module docstring); an unknown key or provider is a
    :class:`~engram.errors.ConfigError`."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"a mem0 config is a dict, got {type(config).__name__}")
    unknown = sorted(set(config) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"unknown mem0 config key(s) {', '.join(map(repr, unknown))}")
    own = dict(config.get("engram") or {})
    extra = sorted(set(own) - set(Settings.__dataclass_fields__))
    if extra:
        raise ConfigError(f"unknown key(s) in the config's 'engram' section: {', '.join(map(repr, extra))}")
    values: dict[str, Any] = {}
    if config.get("llm") and "extractor" not in own:
        values["extractor"], values["api_key"] = _openai_spec(config["llm"], "llm")
    if config.get("embedder") and "embedder" not in own:
        values["embedder"], key = _openai_spec(config["embedder"], "embedder")
        values.setdefault("api_key", key)
    instructions = config.get("custom_instructions") or config.get("custom_fact_extraction_prompt")
    if instructions:
        values["instructions"] = str(instructions)
    values.update(own)
    settings = Settings(**values)
    if settings.search not in SEARCH_MODES:
        raise ConfigError(f"search is one of {', '.join(SEARCH_MODES)}, got {settings.search!r}")
    return settings
