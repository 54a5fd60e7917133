"""Named remotes of a store: ``origin -> s3://bucket/prefix``.

A SQLite store keeps them in a JSON file beside its database (``engram.db.remotes.json``, like the
``engram.db.HEAD`` checkout file); a store without a local file (PostgreSQL, memory) keeps them in the ref
``config/remotes``, a small tree of name -> URL changed by compare-and-swap (it never travels with a push).

A remote URL never holds a credential: :meth:`RemoteConfig.add` refuses one with a password or a secret query
parameter (S3 credentials come from boto3's chain: environment, profile or role), since a stored URL is shown by
``engram remote list`` and kept in the store's history. Remotes named before that rule are still listed, with
the secret masked (:meth:`RemoteConfig.shown`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from engram.errors import ConflictError, InvalidInputError, NotFoundError
from engram.redaction import has_secret, redact_url
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

    def shown(self) -> dict[str, str]:
        """Name -> URL as it may be shown: every password and secret query value masked, sorted by name."""
        return {name: redact_url(url) for name, url in self.list().items()}

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
            raise InvalidInputError(f"remote URL {redact_url(url)!r} needs a scheme: dir:///path or s3://bucket/prefix")
        if has_secret(url):
            raise InvalidInputError(
                f"remote URL {redact_url(url)!r} carries a credential, which would be stored and shown: give S3 "
                "credentials through AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile or a role instead"
            )
        current = self.list()
        if name in current:
            raise ConflictError(f"remote {name!r} exists ({redact_url(current[name])}); remove it first")
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
