"""Recorded runs (run.py) and the run store (store.py)."""

from .run import Run, load_run

__all__ = ["Run", "load_run"]
