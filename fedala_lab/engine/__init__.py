"""The one round (rounds.py), the loop over a run (simulate.py), the round cut between a server and its clients
for any transport (sides.py), what a run records (recorder.py) and stragglers (stragglers.py)."""

from ..compute.device import resolve_device
from .simulate import Simulation, bind, simulate

__all__ = ["Simulation", "bind", "resolve_device", "simulate"]
