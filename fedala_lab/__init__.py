"""fedala_lab: personalised federated learning for teaching and research.

FedAvg, FedProx, FedALA (adaptive local aggregation, AAAI 2023), ALA on any method, FedLAMA, the pFL
baselines and the fine-tune baselines, simulated with all clients' data in memory and clients vectorised;
every run records the trajectories the papers' figures need. Your own algorithm is an ``Algorithm`` subclass
registered with ``register_algorithm`` (docs/extending.md); your own model and data go to ``simulate(cfg,
model=…, data=FederatedData.from_arrays(…))``.

    >>> from fedala_lab import RunConfig, simulate
    >>> run = simulate(RunConfig(algo="fedala", rounds=20))
    >>> run.summary()
"""

from . import numerics as _numerics
from .errors import ConfigError as _ConfigError

try:  # before anything of torch computes: $FEDALA_LAB_NUMERICS picks the CPU kernels (docs/design.md)
    _numerics.apply()
except _ConfigError:
    pass  # refused in one line where it matters: the CLI and the app check it first, a run's key asks again
from ._version import __version__
from .algorithms import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work, Wrapper, register_algorithm
from .config import DataConfig, RunConfig
from .data.federated import FederatedData
from .errors import ConfigError, DataError, FedalaError, TrainingDiverged
from .params import Bool, Choice, Float, Int, Param

__all__ = [
    "Aggregated",
    "Algorithm",
    "Bool",
    "Choice",
    "ConfigError",
    "DataConfig",
    "DataError",
    "FedalaError",
    "FederatedData",
    "Float",
    "Int",
    "Param",
    "Round",
    "RunConfig",
    "Sent",
    "Setup",
    "Trained",
    "TrainingDiverged",
    "Work",
    "Wrapper",
    "__version__",
    "get_or_run",
    "get_or_run_many",
    "load_run",
    "preset",
    "register_algorithm",
    "simulate",
]


def __getattr__(name):  # heavy pieces (torch engine, store) load on first use
    if name == "simulate":
        from .engine.simulate import simulate

        return simulate
    if name == "get_or_run":
        from .experiments.runs import get_or_run

        return get_or_run
    if name == "get_or_run_many":
        from .experiments.execute import get_or_run_many

        return get_or_run_many
    if name == "load_run":
        from .record.run import load_run

        return load_run
    if name == "preset":
        from .experiments.presets import preset

        return preset
    raise AttributeError(name)
