"""The one round loop (simulate.py), what it records (recorder.py) and stragglers (stragglers.py)."""

from ..compute.device import resolve_device
from .simulate import Simulation, bind, simulate

__all__ = ["Simulation", "bind", "resolve_device", "simulate"]
