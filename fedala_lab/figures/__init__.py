"""Displays: draw recorded data, compute nothing (see base.py for the pattern).

    from fedala_lab.figures import TrajectoryDisplay, ALAWeightsDisplay, AccuracyTable

| Display                   | paper            | from                                                      |
|---------------------------|------------------|-----------------------------------------------------------|
| DataDistributionDisplay   | Figs. 6–9        | ``from_data(data, kind="bubble"|"heatmap")``              |
| AccuracyCurveDisplay      | —                | ``from_runs(runs, metric="acc")``                         |
| ALAWeightsDisplay         | Fig. 2           | ``from_run(run, client, round_=None)``                    |
| ALALossDisplay            | Fig. 3           | ``from_run(run, client)``                                 |
| TrajectoryDisplay         | Fig. 4           | ``from_runs(fedavg_run, fedala_run, client, grid=21)``    |
| ConvergenceDisplay        | Fig. 5           | ``from_runs(runs)``                                       |
| AccuracyTable             | Tables 2 and 7   | ``from_runs(runs, by=("algo",))``, ``from_applicability`` |
| AblationDisplay           | Tables 1 and 6   | ``from_runs(runs, param="p"|"s")``                        |
| FedLAMACurvesDisplay      | FedLAMA Fig. 1   | ``from_run(fedlama_run)``                                 |
| CommAccuracyDisplay       | FedLAMA Tab. 1–4 | ``from_runs({label: run})``                               |
| IntervalTimelineDisplay   | —                | ``from_run(fedlama_run)``                                 |

``fedala_lab.figures.paper`` maps every paper figure to its runs and regenerates them all
(``fedala-lab figures``). Names are imported on first use, so ``import fedala_lab.figures`` stays light.
"""

from .data import DataDistributionDisplay

_LAZY = {
    "AccuracyCurveDisplay": "curves",
    "ALAWeightsDisplay": "ala",
    "ALALossDisplay": "ala",
    "TrajectoryDisplay": "trajectory",
    "ConvergenceDisplay": "convergence",
    "AccuracyTable": "tables",
    "AblationDisplay": "ablation",
    "FedLAMACurvesDisplay": "fedlama",
    "CommAccuracyDisplay": "fedlama",
    "IntervalTimelineDisplay": "fedlama",
}

__all__ = ["ALALossDisplay", "ALAWeightsDisplay", "AblationDisplay", "AccuracyCurveDisplay", "AccuracyTable",
           "CommAccuracyDisplay", "ConvergenceDisplay", "DataDistributionDisplay", "FedLAMACurvesDisplay",
           "IntervalTimelineDisplay", "TrajectoryDisplay"]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
