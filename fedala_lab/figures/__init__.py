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
| ClientAccuracyDisplay     | —                | ``from_runs(runs)``: each client's final accuracy         |
| ClientSpreadDisplay       | —                | ``from_runs(runs)``: box + points over clients (seaborn)  |
| HeterogeneityDisplay      | —                | ``from_runs({split: runs})``: FedAvg over splits, seeds   |
| RankedAccuracyDisplay     | —                | ``from_runs(runs)``: methods ranked, every seed a dot     |
| CurvePanelsDisplay        | —                | ``from_runs({panel: [(run, label)]}, references)``        |
| AccuracyTable             | Tables 2 and 7   | ``from_runs(runs, by=("algo",))``, ``from_applicability`` |
| AblationDisplay           | Tables 1 and 6   | ``from_runs(runs, param="p"|"s")``                        |
| FedLAMACurvesDisplay      | FedLAMA Fig. 1   | ``from_run(fedlama_run)``                                 |
| CommAccuracyDisplay       | FedLAMA Tab. 1–4 | ``from_runs({label: run})``                               |
| IntervalTimelineDisplay   | —                | ``from_run(fedlama_run)``                                 |

Every Display colours a method the same way (``figures.style.colour_for``) and draws under one theme
(``figures.style.theme``).

``fedala_lab.figures.index`` renders the figures' README; ``fedala_lab.reproduce`` maps every paper figure to
its runs and regenerates them all (``fedala-lab figures``). The Fig. 4 and FedLAMA Displays load on first use
(they pull in torch), so ``import fedala_lab.figures`` stays light.
"""

from .ablation import AblationDisplay
from .ala import ALALossDisplay, ALAWeightsDisplay
from .clients import ClientAccuracyDisplay, ClientSpreadDisplay
from .convergence import ConvergenceDisplay
from .curves import AccuracyCurveDisplay
from .data import DataDistributionDisplay
from .heterogeneity import HeterogeneityDisplay
from .many import CurvePanelsDisplay, RankedAccuracyDisplay
from .tables import AccuracyTable

__all__ = ["ALALossDisplay", "ALAWeightsDisplay", "AblationDisplay", "AccuracyCurveDisplay", "AccuracyTable",
           "ClientAccuracyDisplay", "ClientSpreadDisplay", "CommAccuracyDisplay", "ConvergenceDisplay",
           "CurvePanelsDisplay", "DataDistributionDisplay", "FedLAMACurvesDisplay", "HeterogeneityDisplay",
           "IntervalTimelineDisplay", "RankedAccuracyDisplay", "TrajectoryDisplay"]


def __getattr__(name):
    # loaded on first use: the loss surface and FedLAMA's table names (from the algorithm) load torch
    if name == "TrajectoryDisplay":
        from .trajectory import TrajectoryDisplay

        return TrajectoryDisplay
    if name in ("FedLAMACurvesDisplay", "CommAccuracyDisplay", "IntervalTimelineDisplay"):
        from . import fedlama

        return getattr(fedlama, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
