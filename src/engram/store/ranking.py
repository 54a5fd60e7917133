"""Ranking profiles: how similarity, confidence and recency combine into one score.

They live in the index layer with the one ranking function (:mod:`engram.index.ranking`); the memory
API names them here too.
"""

from __future__ import annotations

from engram.index.ranking import PROFILES, Profile, get_profile, recency_score

__all__ = ["PROFILES", "Profile", "get_profile", "recency_score"]
