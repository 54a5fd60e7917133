"""Named remotes of a store: ``origin -> s3://bucket/prefix``.

A SQLite store keeps them in a JSON file beside its database (``engram.db.remotes.json``, like the
``engram.db.HEAD`` checkout file); a store without a local file (PostgreSQL, memory) keeps them in the ref
``config/remotes``, a small tree of name -> URL changed by compare-and-swap (it never travels with a push).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from engram.errors import ConflictError, InvalidInputError, NotFoundError
from engram.repo import Repository
from engram.store.connect import local_file
from engram.tree import build_tree, iter_entries

REMOTES_REF = "config/remotes"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def config_file(store_url: str | None) -> Path | None:
    """The JSON file of a SQLite store's remotes (None for stores without a local file)."""
    path = local_file(store_url)
    return None if path is None else path.with_name(path.name + ".remotes.json")


class RemoteConfig:
    """The named remotes of one store."""

    def __init__(self, repo: Repository, path: Path | None) -> None:
        self.repo = repo
        self.path = path

    def list(self) -> dict[str, str]:
        """Name -> URL, sorted by name."""
        if self.path is not None:
            try:
                found = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return {}
            except (OSError, ValueError) as exc:
                raise InvalidInputError(f"cannot read {self.path}: {exc}") from None
            return dict(sorted(found.get("remotes", {}).items()))
        root = self.repo.refs.get(REMOTES_REF)
        if root is None:
            return {}
        return {key.decode(): value.decode() for key, value in iter_entries(self.repo.nodes, root)}

    def url(self, name: str) -> str:
        """The URL of remote ``name``."""
        found = self.list().get(name)
        if found is None:
            known = ", ".join(self.list()) or "none"
            raise NotFoundError(f"no remote {name!r} (remotes: {known}); add one with `engram remote add NAME URL`")
        return found

    def add(self, name: str, url: str) -> None:
        """Name a remote (the URL is not contacted)."""
        if not NAME.match(name):
            raise InvalidInputError(f"invalid remote name {name!r}: letters, digits, '.', '_' and '-'")
        if "://" not in url:
            raise InvalidInputError(f"remote URL {url!r} needs a scheme: dir:///path or s3://bucket/prefix")
        current = self.list()
        if name in current:
            raise ConflictError(f"remote {name!r} exists ({current[name]}); remove it first")
        self._write({**current, name: url})

    def remove(self, name: str) -> None:
        """Forget a remote (nothing on it is touched)."""
        current = self.list()
        if name not in current:
            self.url(name)
        del current[name]
        self._write(current)

    def _write(self, remotes: dict[str, str]) -> None:
        if self.path is not None:
            temp = self.path.with_name(self.path.name + ".tmp")
            temp.write_text(json.dumps({"remotes": dict(sorted(remotes.items()))}, indent=2) + "\n", encoding="utf-8")
            temp.replace(self.path)
            return
        old = self.repo.refs.get(REMOTES_REF)
        root = build_tree(self.repo.nodes, [(k.encode(), v.encode()) for k, v in sorted(remotes.items())])
        if not self.repo.refs.set(REMOTES_REF, root, old, reason="remotes"):
            raise ConflictError("the remotes changed meanwhile; run the command again")


def remote_config(repo: Repository, store_url: str | None) -> RemoteConfig:
    """The remotes of the store opened from ``store_url`` (its repository is ``repo``)."""
    return RemoteConfig(repo, config_file(store_url))
