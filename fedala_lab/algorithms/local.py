"""Local training only (no federation): each client keeps and trains its own model; nothing is sent."""

from __future__ import annotations


def keep_local(sim, t, clients) -> int:
    return 0


def no_aggregation(sim, t, selected) -> int:
    return 0
