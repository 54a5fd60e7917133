"""Prometheus alerting rules and an Alertmanager example, shipped with the package.

- :data:`RULES`: ``engram-rules.yml``, the rules file to list under ``rule_files:`` in ``prometheus.yml``
  (error ratio, p99 latency, down / not ready, degraded component, breaker open, backup too old, index lag,
  disk space).
- :data:`ALERTMANAGER_EXAMPLE`: ``alertmanager.example.yml``, routing with grouping, de-duplication and
  inhibition, to adapt (its receivers are local webhooks).

``docs/operations.md`` (section Alerts) says how to wire them in.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent

#: The Prometheus rules file.
RULES = _HERE / "engram-rules.yml"
#: The Alertmanager configuration example.
ALERTMANAGER_EXAMPLE = _HERE / "alertmanager.example.yml"

__all__ = ["ALERTMANAGER_EXAMPLE", "RULES"]
