"""Experiments: which runs, and how to get them.

- presets.py: named configs (``preset("teach", algo="fedprox")``).
- plans.py: which runs an experiment needs: sweeps (a base × a grid), the paper's figure plans, the Fig. 4
  protocol, FedLAMA's comparison; the named reproduction sweeps.
- runs.py: :func:`get_or_run` (the run store, else simulate and save), :class:`RunCache`, and the runs of
  the Fig. 4 protocol and of FedLAMA's comparison.
- execute.py: the one way runs a store lacks are computed (:func:`~.execute.compute`: in this process, side by
  side in processes, on Ray), and :func:`get_or_run_many` on top of it.
- pool.py: the processes behind it (:class:`RunPool`, kept by the app between clicks) and one run there.
- sweeps.py: :func:`run_sweep`: a grid expanded, its runs computed, their table.
- trackers.py: the runs asked for, logged to TensorBoard or MLflow (``trackers=`` of the above).

Analysis and figures never reach in here: they get runs, and this layer gets them the runs.
"""

from .execute import get_or_run_many
from .plans import Plan, SweepSpec, build_plan, comparison_configs, fig4_configs, sweep_preset
from .presets import preset
from .runs import RunCache, comparison_runs, fig4_runs, get_or_run, has_train_loss
from .sweeps import SweepResult, run_sweep

__all__ = [
    "Plan", "RunCache", "SweepResult", "SweepSpec", "build_plan", "comparison_configs", "comparison_runs",
    "fig4_configs", "fig4_runs", "get_or_run", "get_or_run_many", "has_train_loss", "preset", "run_sweep", "sweep_preset",
]
