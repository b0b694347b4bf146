"""The built-in algorithms, registered in this order (the order of lists in the CLI, the app and tables).

Each module declares its spec (``SPEC``) or modifier (``MODIFIER``) next to its code; registering them here,
modifiers first, is what makes them known. The FedALA paper's own name for FedAvg + ALA is an alias.
"""

from __future__ import annotations

from . import (
    ala,
    apple,
    ditto,
    fedamp,
    fedavg,
    fedfomo,
    fedlama,
    fedphp,
    fedprox,
    fedrep,
    finetune,
    local,
    partialfed,
    perfedavg,
    pfedme,
)
from .registry import Look, register_alias, register_modifier, register_spec

for _modifier in (ala.MODIFIER, finetune.MODIFIER):
    register_modifier(_modifier)
# the FedALA paper's order: traditional FL, then its pFL baselines by category (its related work)
for _spec in (fedavg.SPEC, fedprox.SPEC, local.SPEC, fedlama.SPEC, perfedavg.SPEC, fedrep.SPEC, pfedme.SPEC,
              ditto.SPEC, fedamp.SPEC, fedphp.SPEC, fedfomo.SPEC, apple.SPEC, partialfed.SPEC,
              partialfed.ADAPTIVE_SPEC):
    register_spec(_spec)
register_alias("fedala", "fedavg+ala", Look("FedALA", "tab:blue"))
