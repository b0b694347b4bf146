"""The built-in algorithms, registered in this order (the order of lists in the CLI, the app and tables).

Each module registers its own spec (or modifier) at its end (algorithms/registry.py); importing them here,
modifiers first, is what makes them known. The FedALA paper's own name for FedAvg + ALA is an alias.
"""

from __future__ import annotations

from . import ala, fedavg, fedprox, finetune  # noqa: F401 - the modifiers +ala and -c  # noqa: F401
from .registry import Look, register_alias

register_alias("fedala", "fedavg+ala", Look("FedALA", "tab:blue"))

from . import fedlama, local  # noqa: F401
