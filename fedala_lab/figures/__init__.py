"""Displays: draw recorded data, compute nothing (see base.py for the pattern)."""

from .data import DataDistributionDisplay

__all__ = ["DataDistributionDisplay"]
