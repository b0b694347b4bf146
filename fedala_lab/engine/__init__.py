"""The shared round loop (simulate.py) and what it records (recorder.py).

The steps and backends it runs on, and the derived random streams, are in ``compute/``; the algorithms'
pieces it plugs in are in ``algorithms/``.
"""

from .simulate import Simulation, resolve_device, simulate

__all__ = ["Simulation", "resolve_device", "simulate"]
