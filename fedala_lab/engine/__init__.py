"""The shared round loop (simulate.py), the two backends (backends.py) and derived generators (rng.py)."""

from .simulate import Simulation, resolve_device, simulate

__all__ = ["Simulation", "resolve_device", "simulate"]
