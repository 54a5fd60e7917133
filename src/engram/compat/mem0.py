"""mem0's ``Memory`` and ``AsyncMemory`` over engram: ``from engram.compat.mem0 import Memory``.

The surface is mem0 OSS's (2.x): ``add``, ``search``, ``get``, ``get_all``, ``update``, ``delete``,
``delete_all``, ``history``, ``reset``, with mem0's argument checks, errors and result shapes. What engram adds:
every ``add`` / ``update`` / ``delete`` is a commit, so ``history`` is the memory's real version history (each
entry names its ``commit``), and the memories are ordinary engram items other doors see
(``engram log``, the web UI, :class:`~engram.integrations.langgraph.EngramStore`).

Mapping: a memory is one item, keyed by its id (a uuid4 string, as in mem0), in the namespace
``("mem0", "users", <user_id>)`` when it has a user, else ``("mem0", "agents", <agent_id>)``, else
``("mem0", "runs", <run_id>)``; every id it was added with is also a field of its value (see
:mod:`engram.compat._mem0_shapes`). An index item in ``("mem0-ids",)`` maps an id to its namespace, written in the
same commit. Search ranks by cosine similarity like mem0 (``threshold`` is the minimum), or by engram's
hybrid ranking (``{"engram": {"search": "hybrid"}}``). ``add(..., infer=True)`` runs engram's memory writer on the
messages (the offline extractor by default, an OpenAI-compatible model when configured).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import engram
from engram.compat._mem0_config import Settings, settings_from_config
from engram.compat._mem0_shapes import (
    INDEX_NAMESPACE,
    ROOT,
    ValidationError,
    check_query,
    check_search,
    engram_filter,
    entity_id,
    expiration,
    memory_value,
    messages_of,
    namespace_of,
    prefix_of,
    query_scope,
    result_of,
    scope_of,
    text_hash,
    text_of,
    unexpired,
)
from engram.embed import Embedder, embedder_from_spec
from engram.errors import WriterError
from engram.store import Item, PutOp
from engram.writer import Extractor, MemoryWriter, extractor_from_spec
from engram.writer.traces import store_dir

__all__ = ["AsyncMemory", "Mem0ValidationError", "Memory", "ValidationError"]

#: mem0's name for its validation error, as its own code imports it.
Mem0ValidationError = ValidationError
T = TypeVar("T")
#: Run outcomes of the writer that are not failures.
_DONE = ("merged", "no_new_memories", "recovered")
#: The message of the commit that gives the writer's memories their ids and metadata.
_SCOPING = "mem0 add: ids and metadata of"
#: "Not given" for ``update``'s ``expiration_date`` (None clears it).
_UNSET: Any = object()
#: What a mem0 Platform-only argument gets.
_PLATFORM = "{name} is a mem0 Platform feature, not in mem0 OSS nor engram: remove it from {call}()"
#: The most memories one ``get_all`` / ``delete_all`` page reads.
_PAGE = 500


class Memory:
    """mem0's ``Memory`` backed by an engram store (see the module docstring).

    Args:
        config: a mem0-style config dict (as :meth:`from_config` takes), or None.
        store: an open :class:`engram.Memory`, or a store URL / path for :func:`engram.open`; None: engram's
            default store (``./.engram``), or the config's ``engram.store``.
        embedder: engram embedder (or spec) used when the adapter opens the store itself.
        extractor: the writer's extractor for ``infer=True`` (an :class:`~engram.writer.Extractor` or a spec:
            ``offline``, ``openai:<model>@<base url>``, ``none``); overrides the config.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        store: engram.Memory | str | None = None,
        embedder: Embedder | str | None = None,
        extractor: Extractor | str | None = None,
    ) -> None:
        self.settings: Settings = settings_from_config(config or {})
        #: Where the writer's failed runs leave traces: the store's own folder when the adapter opened it, else the
        #: writer's default (a library writer's).
        self.trace_dir: Path | None = None
        if isinstance(store, engram.Memory):
            opened = store
        else:
            url = store if store is not None else self.settings.store
            self.trace_dir = store_dir(url)
            chosen = embedder if embedder is not None else self.settings.embedder
            opened = engram.open(url, embedder=_embedder(chosen, self.settings.api_key))
        #: The engram store behind this adapter (a handle writing as the configured author).
        self.memory: engram.Memory = opened.handle(author=self.settings.author)
        self._extractor_given = extractor
        self._writer: MemoryWriter | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> Self:
        """Build from a mem0-style config dict (``vector_store`` / ``history_db_path`` are replaced by engram;
        ``llm`` / ``embedder`` sections of OpenAI-compatible providers are used; an ``engram`` section says
        ``store``, ``embedder``, ``extractor``, ``search``, ``author`` directly)."""
        return cls(config_dict)

    # -- writes ------------------------------------------------------------------------------------------------

    def add(
        self,
        messages: Any,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = True,
        memory_type: str | None = None,
        prompt: str | None = None,
        expiration_date: Any = None,
        timestamp: Any = None,
    ) -> dict[str, Any]:
        """Store messages as memories: with ``infer=False`` each non-system message is one memory (as mem0 does);
        with ``infer=True`` engram's memory writer extracts memories from them. One commit per call (two for
        ``infer=True``: the writer's run, then the mem0 fields on what it wrote). Returns
        ``{"results": [{"id", "memory", "event", ...}]}``. ``expiration_date`` (``YYYY-MM-DD``) hides the memories
        from ``search`` and ``get_all`` after that day unless they pass ``show_expired=True``, as in mem0."""
        if timestamp is not None:
            raise ValueError(_PLATFORM.format(name="timestamp", call="add"))
        expires = expiration(expiration_date)
        scope = scope_of(user_id, agent_id, run_id)
        if memory_type is not None:
            raise ValidationError(
                "Invalid 'memory_type'. Procedural memories need mem0's own LLM prompt; engram does not make them.",
                "VALIDATION_002",
                {"provided_type": memory_type},
                "Leave memory_type unset.",
            )
        listed = messages_of(messages)
        meta = dict(metadata or {})
        namespace = namespace_of(scope)
        if expires is not None:
            scope = {**scope, "expiration_date": expires}  # a value field beside the ids (memory_value puts it)
        if not infer:
            return {"results": self._add_raw(listed, meta, scope, namespace)}
        return {"results": self._add_inferred(listed, meta, scope, namespace, prompt)}

    def _add_raw(
        self, listed: list[Any], meta: dict[str, Any], scope: dict[str, str], namespace: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        ops: list[PutOp] = []
        results: list[dict[str, Any]] = []
        for message in listed:
            if not isinstance(message, dict) or message.get("role") is None or message.get("content") is None:
                raise ValidationError(
                    f"Invalid message {message!r}: a dict with 'role' and 'content'",
                    "VALIDATION_003",
                    {"message": repr(message)},
                    "Pass messages as {'role': ..., 'content': ...}.",
                )
            if message["role"] == "system":
                continue
            text, name = str(message["content"]), message.get("name")
            memory_id = str(uuid.uuid4())
            value = memory_value(text, meta, scope, role=message["role"], actor_id=name)
            ops += [PutOp(namespace, memory_id, value, ["text"]), PutOp(INDEX_NAMESPACE, memory_id,
                    {"namespace": list(namespace)}, False)]  # fmt: skip
            results.append({"id": memory_id, "memory": text, "event": "ADD", "actor_id": name or None,
                            "role": message["role"]})  # fmt: skip
        if ops:
            self.memory.batch(ops, message=f"mem0 add: {len(results)} memories to {'/'.join(namespace)}")
        return results

    def _add_inferred(
        self,
        listed: list[Any],
        meta: dict[str, Any],
        scope: dict[str, str],
        namespace: tuple[str, ...],
        prompt: str | None,
    ) -> list[dict[str, Any]]:
        for message in listed:  # all checked before the first turn is stored
            if not isinstance(message, dict) or message.get("content") is None:
                raise ValidationError(f"Invalid message {message!r}: a dict with 'role' and 'content'",
                                      "VALIDATION_003", {"message": repr(message)})  # fmt: skip
        writer = self._writer_for(prompt)
        before = self.memory.head.id.hex()
        conversation = f"mem0-{uuid.uuid4()}"
        writer.start_conversation(conversation, namespace)
        runs = []
        for message in listed:
            appended = writer.append(conversation, str(message.get("role") or "user"), str(message["content"]),
                                     name=message.get("name"))  # fmt: skip
            runs.append(appended.decision)
        runs.append(writer.run_now(namespace))
        for decision in runs:
            record = decision.run
            if record is not None and record.get("outcome") not in _DONE:
                raise WriterError(f"the memory writer's run failed ({record.get('outcome')}): {record.get('error')}",
                                  str(record.get("outcome")))  # fmt: skip
            if decision.action == "skipped" and decision.reason != "nothing_new":
                raise WriterError(f"the memory writer skipped the run: {decision.reason}", str(decision.reason))
        results: list[dict[str, Any]] = []
        ops: list[PutOp] = []
        for change in self.memory.diff(before, "HEAD", namespace=namespace):
            if change.new is None:
                old = change.old
                results.append({"id": change.key, "memory": "" if old is None else text_of(old), "event": "DELETE"})
                continue
            text = text_of(change.new)
            kept = {} if change.old is None else dict(change.old.value.get("metadata") or {})
            value = dict(change.new.value) | memory_value(text, kept | meta, scope)
            ops += [PutOp(namespace, change.key, value, ["text"]),
                    PutOp(INDEX_NAMESPACE, change.key, {"namespace": list(namespace)}, False)]  # fmt: skip
            entry = {"id": change.key, "memory": text, "event": "ADD" if change.old is None else "UPDATE"}
            if change.old is not None:
                entry["previous_memory"] = text_of(change.old)
            results.append(entry)
        deleted = [PutOp(INDEX_NAMESPACE, r["id"], None) for r in results if r["event"] == "DELETE"]
        if ops or deleted:
            self.memory.batch(ops + deleted, message=f"{_SCOPING} {len(results)} memories")
        return results

    def _writer_for(self, prompt: str | None) -> MemoryWriter:
        with self._lock:
            if self._writer is None:
                given = self._extractor_given
                extractor = (
                    extractor_from_spec(given if given is not None else self.settings.extractor, self.settings.api_key)
                    if given is None or isinstance(given, str)
                    else given
                )
                if extractor is None:
                    raise WriterError("add(infer=True) needs an extractor: configure one or pass infer=False",
                                      "no_model")  # fmt: skip
                self._writer = MemoryWriter(
                    self.memory, extractor=extractor, interval=1, background=False,
                    instructions=self.settings.instructions, trace_dir=self.trace_dir,
                )  # fmt: skip
            writer = self._writer
        if prompt is not None:  # this call's instructions: a writer sharing everything else
            writer = MemoryWriter(self.memory, extractor=writer.extractor, metrics=writer.metrics,
                                  settings=replace(writer.settings, instructions=prompt))  # fmt: skip
        return writer

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        expiration_date: Any = _UNSET,
        data: str | None = None,
    ) -> dict[str, str]:
        """Change a memory's text (``text``, or mem0 1.x's ``data``), merge ``metadata`` into it and/or set its
        ``expiration_date`` (None clears it): one commit. Returns ``{"message": "Memory updated successfully!"}``;
        a missing id is mem0's ``ValueError``."""
        new_text = text if text is not None else data
        if new_text is None and metadata is None and expiration_date is _UNSET:
            raise ValueError("At least one of text, metadata, or expiration_date must be provided.")
        expires = None if expiration_date is _UNSET else expiration(expiration_date)
        found = self._find(memory_id)
        if found is None:
            raise ValueError(f"Memory with id {memory_id} not found. Please provide a valid 'memory_id'")
        value = dict(found.value)
        if new_text is not None:
            if not isinstance(new_text, str):
                raise ValueError(f"Memory with id {memory_id} does not have text content to update")
            value["text"], value["hash"] = new_text, text_hash(new_text)
        if metadata is not None:
            merged = dict(value.get("metadata") or {})
            merged.update({k: v for k, v in metadata.items() if k not in ("user_id", "agent_id", "run_id",
                                                                          "actor_id")})  # fmt: skip
            value["metadata"] = merged
        if expiration_date is not _UNSET:
            value["expiration_date"] = expires
        self.memory.put(found.namespace, memory_id, value, ["text"], message=f"mem0 update: {memory_id}")
        return {"message": "Memory updated successfully!"}

    def delete(self, memory_id: str) -> dict[str, str]:
        """Delete a memory (one commit; its history stays). A missing id is mem0's ``ValueError``."""
        found = self._find(memory_id)
        if found is None:
            raise ValueError(f"Memory with id {memory_id} not found")
        self.memory.batch([PutOp(found.namespace, memory_id, None), PutOp(INDEX_NAMESPACE, memory_id, None)],
                          message=f"mem0 delete: {memory_id}")  # fmt: skip
        return {"message": "Memory deleted successfully!"}

    def delete_all(
        self, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, str]:
        """Delete every memory of the given ids (one commit). No id at all is mem0's ``ValueError`` (use
        :meth:`reset` to delete everything)."""
        ids = {"user_id": entity_id(user_id, "user_id"), "agent_id": entity_id(agent_id, "agent_id"),
               "run_id": entity_id(run_id, "run_id")}  # fmt: skip
        scope = {k: v for k, v in ids.items() if v}
        if not scope:
            raise ValueError(
                "At least one filter is required to delete all memories. If you want to delete all memories, use "
                "the `reset()` method."
            )
        ops: list[PutOp] = []
        for item in self._list(scope, None):
            ops += [PutOp(item.namespace, item.key, None), PutOp(INDEX_NAMESPACE, item.key, None)]
        if ops:
            self.memory.batch(ops, message=f"mem0 delete_all: {len(ops) // 2} memories")
        return {"message": "Memories deleted successfully!"}

    def reset(self) -> None:
        """Delete every memory the adapter keeps (one commit; the history stays in the store's log)."""
        ops = [PutOp(i.namespace, i.key, None) for prefix in ((ROOT,), INDEX_NAMESPACE)
               for i in self.memory.at("HEAD").iter_items(prefix)]  # fmt: skip
        if ops:
            self.memory.batch(ops, message="mem0 reset")

    # -- reads -------------------------------------------------------------------------------------------------

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """A memory by id, in mem0's shape (``score`` None), or None."""
        found = self._find(memory_id)
        return None if found is None else result_of(found)

    def get_all(
        self,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 20,
        limit: int | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """The memories matching ``filters`` (which must hold a user, agent or run id; mem0 1.x's ``user_id=``
        keywords and ``limit=`` are accepted too), newest first, at most ``top_k``; expired ones only with
        ``show_expired``."""
        count = limit if limit is not None else top_k
        check_search(None, count)
        merged = query_scope(filters, {"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
        found = self._list(merged, count, show_expired=show_expired)
        return {"results": [result_of(item, with_score=False) for item in found]}

    def search(
        self,
        query: str,
        *,
        top_k: int = 20,
        filters: dict[str, Any] | None = None,
        threshold: float | None = 0.1,
        limit: int | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        rerank: bool = False,
        explain: bool = False,
        show_expired: bool = False,
        reference_date: Any = None,
    ) -> dict[str, Any]:
        """The memories most similar to ``query`` among those matching ``filters`` (which must hold a user, agent
        or run id; mem0 1.x's ``user_id=`` keywords and ``limit=`` are accepted too), best first, at most
        ``top_k``, none scoring below ``threshold`` (a cosine similarity, as in mem0; in ``hybrid`` search mode,
        engram's fused score); expired ones only with ``show_expired``. ``explain=True`` adds
        each result's ``score_details`` (engram's signals); ``rerank`` is accepted and does nothing, as in mem0
        without a reranker configured."""
        if reference_date is not None:
            raise ValueError(_PLATFORM.format(name="reference_date", call="search"))
        count = limit if limit is not None else top_k
        check_search(threshold, count)
        text = check_query(query)
        merged = query_scope(filters, {"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
        if count == 0:
            return {"results": []}
        condition = engram_filter(merged)
        found = self.memory.search(
            prefix_of(merged), text, filter=(condition if show_expired else unexpired(condition)) or None,
            limit=count, mode=self.settings.search,  # type: ignore[arg-type]  # checked by the config
            min_score=threshold if threshold is not None else 0.1, refresh_ttl=False, explain=explain,
        )  # fmt: skip
        results = [result_of(item, item.score) for item in found]
        if explain:
            for result, item in zip(results, found, strict=True):
                result["score_details"] = item.explain
        return {"results": results}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's versions, oldest first, in mem0's shape (``id``, ``memory_id``, ``old_memory``,
        ``new_memory``, ``event``, ``created_at``, ``updated_at``, ``is_deleted``, ``actor_id``, ``role``) plus
        ``commit`` (the engram commit that made the change) and ``author``. Empty for an unknown id."""
        namespace = self._namespace_of(memory_id, past=True)
        if namespace is None:
            return []
        versions = list(reversed(self.memory.history(namespace, memory_id)))
        out: list[dict[str, Any]] = []
        previous: Item | None = None
        created: str | None = None
        for version in versions:
            item, commit = version.item, version.commit
            if item is not None and previous is None:
                created = item.created_at.isoformat()
            if item is None and previous is None:
                continue
            if previous is not None and item is not None and commit.message.startswith(_SCOPING):
                previous = item  # the ids and metadata of what the writer just added: part of that add
                continue
            event = "DELETE" if item is None else "ADD" if previous is None else "UPDATE"
            source = item if item is not None else previous
            assert source is not None  # one of the two is set (checked above)
            out.append({
                "id": commit.id.hex(), "memory_id": memory_id,
                "old_memory": None if previous is None else text_of(previous),
                "new_memory": None if item is None else text_of(item), "event": event,
                "created_at": created,
                "updated_at": item.updated_at.isoformat() if item is not None else _iso(commit.time),
                "is_deleted": item is None, "actor_id": source.value.get("actor_id"),
                "role": source.value.get("role"), "commit": commit.id.hex(), "author": commit.author,
            })  # fmt: skip
            previous = item
        return out

    def close(self) -> None:
        """Close the engram store."""
        self.memory.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------------------------------------

    def _namespace_of(self, memory_id: str, *, past: bool = False) -> tuple[str, ...] | None:
        if not isinstance(memory_id, str) or not memory_id:
            return None
        entry = self.memory.get(INDEX_NAMESPACE, memory_id, refresh_ttl=False)
        if entry is None and past:  # a deleted memory: its index entry's last version says where it was
            older = [v.item for v in self.memory.history(INDEX_NAMESPACE, memory_id) if v.item is not None]
            entry = older[0] if older else None
        return None if entry is None else tuple(entry.value["namespace"])

    def _find(self, memory_id: str) -> Item | None:
        namespace = self._namespace_of(memory_id)
        return None if namespace is None else self.memory.get(namespace, memory_id, refresh_ttl=False)

    def _list(self, merged: Mapping[str, Any], count: int | None, *, show_expired: bool = True) -> list[Item]:
        found: list[Item] = []
        condition = (engram_filter(merged) if show_expired else unexpired(engram_filter(merged))) or None
        while count is None or len(found) < count:
            page = self.memory.search(prefix_of(merged), None, filter=condition, limit=_PAGE, offset=len(found),
                                      refresh_ttl=False)  # fmt: skip
            found += list(page)
            if len(page) < _PAGE:
                break
        return found if count is None else found[:count]


class AsyncMemory:
    """mem0's ``AsyncMemory``: :class:`Memory`'s methods as coroutines, each run in a worker thread (the same
    arguments, results and errors)."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        store: engram.Memory | str | None = None,
        embedder: Embedder | str | None = None,
        extractor: Extractor | str | None = None,
    ) -> None:
        #: The sync adapter every call runs on.
        self.sync = Memory(config, store=store, embedder=embedder, extractor=extractor)
        self.memory = self.sync.memory

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> Self:
        """As :meth:`Memory.from_config`."""
        return cls(config_dict)

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        """See :meth:`Memory.add`."""
        return await self._run(self.sync.add, messages, **kwargs)

    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        """See :meth:`Memory.search`."""
        return await self._run(self.sync.search, query, **kwargs)

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        """See :meth:`Memory.get`."""
        return await self._run(self.sync.get, memory_id)

    async def get_all(self, **kwargs: Any) -> dict[str, Any]:
        """See :meth:`Memory.get_all`."""
        return await self._run(self.sync.get_all, **kwargs)

    async def update(self, memory_id: str, text: str | None = None, **kwargs: Any) -> dict[str, str]:
        """See :meth:`Memory.update`."""
        return await self._run(self.sync.update, memory_id, text, **kwargs)

    async def delete(self, memory_id: str) -> dict[str, str]:
        """See :meth:`Memory.delete`."""
        return await self._run(self.sync.delete, memory_id)

    async def delete_all(self, **kwargs: Any) -> dict[str, str]:
        """See :meth:`Memory.delete_all`."""
        return await self._run(self.sync.delete_all, **kwargs)

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.history`."""
        return await self._run(self.sync.history, memory_id)

    async def reset(self) -> None:
        """See :meth:`Memory.reset`."""
        await self._run(self.sync.reset)

    def close(self) -> None:
        """Close the engram store."""
        self.sync.close()


def _embedder(spec: Embedder | str | None, api_key: str | None) -> Embedder | str | None:
    if isinstance(spec, str) and spec.startswith("openai:"):
        return embedder_from_spec(spec, api_key=api_key)
    return spec


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()
