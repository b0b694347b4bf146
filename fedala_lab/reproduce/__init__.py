"""Reproducing the papers: plans and runs (experiments) → analysis → Displays (figures) → files.

- driver.py: :func:`run_figures`, ``fedala-lab figures``: every paper figure and table, with an index.
- paper.py: :data:`FIGURES`, one maker per figure or table (its runs, its Display, its findings).
- fedlama.py: :func:`fedlama_figures`, FedLAMA's figure set.
- sweeps.py: :func:`save_sweep`, a sweep's grid points and table as files.
"""

from .driver import default_out, run_figures
from .fedlama import fedlama_figures
from .paper import FIGURES
from .sweeps import save_sweep

__all__ = ["FIGURES", "default_out", "fedlama_figures", "run_figures", "save_sweep"]
