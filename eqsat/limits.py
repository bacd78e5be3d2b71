"""Saturation's limits, apart from the saturator so that the command line's help can show
their defaults without importing egglog."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds that are always in force. Defaults suit models up to ~100k nodes."""

    iter_limit: int = 30  # rounds
    node_limit: int = 2_000_000  # e-nodes (constructor rows) after a round
    time_limit: float = 120.0  # seconds of saturation, checked between rounds
