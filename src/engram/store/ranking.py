"""Ranking profiles: how similarity, confidence and recency combine into one score."""

from __future__ import annotations

from dataclasses import dataclass

from engram.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Profile:
    """Weights of the three signals, and the half-life of recency in hours.

    ``score = similarity * s + confidence * c + recency * r`` where recency is
    ``0.5 ** (age_hours / half_life_hours)`` and confidence is the item's ``confidence`` (0.5 if absent).
    """

    similarity: float
    confidence: float = 0.0
    recency: float = 0.0
    half_life_hours: float = 168.0
    name: str = "custom"

    def __post_init__(self) -> None:
        weights = (self.similarity, self.confidence, self.recency)
        if any(w < 0 for w in weights) or not any(weights):
            raise InvalidInputError(f"profile weights must be >= 0 and not all zero, got {weights}")
        if self.half_life_hours <= 0:
            raise InvalidInputError(f"half_life_hours must be > 0, got {self.half_life_hours}")


PROFILES: dict[str, Profile] = {
    "similarity": Profile(1.0, 0.0, 0.0, 168.0, "similarity"),
    "balanced": Profile(0.34, 0.33, 0.33, 168.0, "balanced"),
    "recent": Profile(0.3, 0.1, 0.6, 24.0, "recent"),
    "quality": Profile(0.4, 0.5, 0.1, 720.0, "quality"),
}


def get_profile(profile: str | Profile) -> Profile:
    """A named profile, or a custom :class:`Profile` as is."""
    if isinstance(profile, Profile):
        return profile
    found = PROFILES.get(profile)
    if found is None:
        raise InvalidInputError(f"unknown ranking profile {profile!r}: use {', '.join(PROFILES)} or a Profile(...)")
    return found
