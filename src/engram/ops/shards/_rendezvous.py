"""Weighted rendezvous (highest-random-weight) hashing: which shard a tenant lives on, with no I/O.

Every (shard, tenant) pair gets a pseudo-random number ``u`` in (0, 1) from a hash of both names; the tenant
goes to the shard with the highest ``-weight / ln(u)`` (the weighted form of Schindelhauer and Schomaker,
"Weighted distributed hash tables"). A shard with twice the weight gets twice the tenants, and adding a shard
takes from every other shard only the tenants that now score highest on it: about ``w_new / sum(w)`` of them,
the least any placement can move. Removing a shard moves only its own tenants.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Shard statuses: ``active`` takes new tenants and writes; ``readonly`` serves reads of its tenants only;
#: ``draining`` serves its tenants (reads and writes) but takes no new ones (move them off, then remove it).
STATUSES = ("active", "readonly", "draining")


@dataclass(frozen=True, slots=True)
class Shard:
    """One PostgreSQL database of the shard map."""

    name: str
    url: str
    weight: float = 1.0
    status: str = "active"


def score(shard: str, tenant: str, weight: float) -> float:
    """The rendezvous score of ``tenant`` on ``shard`` (higher wins)."""
    digest = hashlib.blake2b(f"{shard}\x00{tenant}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 0.5) / 2.0**64  # in (0, 1), never 0 or 1
    return -weight / math.log(u)


def rendezvous(tenant: str, shards: Iterable[Shard]) -> Shard | None:
    """The active shard ``tenant`` hashes to (None when no shard is active). Ties (practically impossible)
    go to the smaller name, so every process agrees."""
    best: tuple[float, str] | None = None
    chosen: Shard | None = None
    for shard in shards:
        if shard.status != "active":
            continue
        key = (score(shard.name, tenant, shard.weight), shard.name)
        if best is None or key[0] > best[0] or (key[0] == best[0] and key[1] < best[1]):
            best, chosen = key, shard
    return chosen


def route(tenant: str, shards: Mapping[str, Shard], overrides: Mapping[str, str]) -> Shard | None:
    """Where ``tenant`` lives: its override (a moved or pinned tenant), else the shard it hashes to."""
    pinned = overrides.get(tenant)
    if pinned is not None and pinned in shards:
        return shards[pinned]
    return rendezvous(tenant, shards.values())


def changes(
    tenants: Iterable[str], shards: Mapping[str, Shard], overrides: Mapping[str, str], new: Mapping[str, Shard]
) -> dict[str, tuple[str, str]]:
    """Tenants (not pinned by an override) whose hashed shard differs under the map ``new``: ``{tenant: (old
    shard, new shard)}``. These are what a change of the map would move."""
    moved: dict[str, tuple[str, str]] = {}
    for tenant in tenants:
        if tenant in overrides:
            continue
        before, after = rendezvous(tenant, shards.values()), rendezvous(tenant, new.values())
        if before is not None and after is not None and before.name != after.name:
            moved[tenant] = (before.name, after.name)
    return moved


__all__ = ["STATUSES", "Shard", "changes", "rendezvous", "route", "score"]
