"""Algorithms as small pieces on the shared round loop: the round interface (base.py), one module per
paper, and the registry of names (registry.py). Importing the package registers the built-ins."""

from . import catalog  # noqa: F401 - registers the built-in algorithms
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work, Wrapper
from .registry import AlgorithmSpec, Look, Modifier, register_algorithm, resolve

__all__ = ["Aggregated", "Algorithm", "AlgorithmSpec", "Look", "Modifier", "Round", "Sent", "Setup", "Trained",
           "Work", "Wrapper", "register_algorithm", "resolve"]
