"""Algorithms as small pieces on the shared round loop (see base.py)."""

from .base import Algorithm, build_algorithm

__all__ = ["Algorithm", "build_algorithm"]
