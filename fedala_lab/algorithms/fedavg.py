"""FedAvg (McMahan et al., AISTATS 2017): clients start from the global model; the server takes the mean of
the selected clients' models weighted by their train-sample counts.

Its pieces are the defaults of every hook of :class:`~fedala_lab.algorithms.base.Algorithm` (the round's
``send_global`` and ``weighted_mean``), so FedAvg is that class itself; every other method overrides the
hooks its paper changes.
"""

from __future__ import annotations

from .base import Algorithm
from .registry import Look, make_spec


class FedAvg(Algorithm):
    """FedAvg: receive G, train E epochs of SGD, average weighted by train samples (the defaults)."""


SPEC = make_spec("fedavg", FedAvg, label="FedAvg", colour="black", category="traditional",
                   modifiers=("ala", "finetune"), builtin=True, fedala_paper=True, role="reference",
                   variants={"+ala": Look("FedAvg+ALA", "tab:blue"), "-c": Look("FedAvg-C", "tab:green", "-.")},
                   doc="McMahan et al., AISTATS 2017")
