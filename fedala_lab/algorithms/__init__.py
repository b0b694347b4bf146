"""Algorithms as small pieces on the shared round loop (base.py), composed by name in registry.py."""

from .base import Algorithm
from .registry import build_algorithm

__all__ = ["Algorithm", "build_algorithm"]
