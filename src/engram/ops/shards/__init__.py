"""Scale-out by tenant (DESIGN.md §9): a shard map of PostgreSQL databases, rendezvous hashing
from tenant to shard, tenant moves that lose no write, and routing rules that split one tenant's memories
over several repositories.

- :class:`ShardCatalog`: the map (shards with weight and status, per-tenant overrides, a version) in a small
  PostgreSQL database; :class:`ShardRouter`: a cached copy of it that answers "where is this tenant?" and
  opens tenant stores whose writes are gated against moves.
- :func:`add_shard`, :func:`set_status`, :func:`set_weight`: change the map (tenants it would move are pinned
  and listed; ``dry_run`` only lists them); :func:`move_tenant`, :func:`rebalance`: move them;
  :func:`collect`: drop the copies moves left behind.
- :class:`RoutedMemory`: one tenant's memories split by a :class:`RoutingRule` (memory type, month, or a hash
  of the item's identity) into repositories on the shards they hash to; search fans out and merges.
"""

from engram.ops.shards._rendezvous import STATUSES, Shard, rendezvous
from engram.ops.shards.catalog import ShardCatalog, ShardMap, TenantMovedError
from engram.ops.shards.moves import (
    MoveReport,
    add_shard,
    all_tenants,
    collect,
    leftovers,
    misplaced,
    move_tenant,
    rebalance,
    set_replicas,
    set_status,
    set_weight,
)
from engram.ops.shards.router import GatedRefStore, ShardRouter, sharded_opener
from engram.ops.shards.routing import RoutedMemory, RoutedView, RoutingRule, by_hash, by_month, by_time, by_type

__all__ = [
    "STATUSES",
    "GatedRefStore",
    "MoveReport",
    "RoutedMemory",
    "RoutedView",
    "RoutingRule",
    "Shard",
    "ShardCatalog",
    "ShardMap",
    "ShardRouter",
    "TenantMovedError",
    "add_shard",
    "all_tenants",
    "by_hash",
    "by_month",
    "by_time",
    "by_type",
    "collect",
    "leftovers",
    "misplaced",
    "move_tenant",
    "rebalance",
    "rendezvous",
    "set_replicas",
    "set_status",
    "set_weight",
    "sharded_opener",
]
