"""PartialFed (Sun, Huo, Yang & Bai, NeurIPS 2021), its PartialFed-Fix form: FedAvg in which each client
initialises only part of its model from the global one and the rest from its own model of the round before.

    θ_i ← G for the layers loaded, L_i for the top ``partialfed_local_blocks`` blocks (and batch norm with
          ``partialfed_local_bn``);  E epochs of SGD;  G ← Σ_i (n_i / Σn) θ_i over the loaded layers

The defaults, why PartialFed-Adaptive is not here, and what travels: docs/methods.md#partialfed.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models import ala_param_names, num_blocks
from ..params import Bool, Int, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup
from .registry import make_spec


def kept_local(model: nn.Module, top_blocks: int, batch_norm: bool) -> set[str]:
    """Parameters a client initialises from its own model: those of the top ``top_blocks`` blocks (all of them
    when it is at least the model's number of blocks) and, with ``batch_norm``, of every batch-norm layer."""
    top = min(top_blocks, num_blocks(model))
    names = set(ala_param_names(model, top)) if top else set()
    if batch_norm:
        names |= {f"{m}.{p}" for m, mod in model.named_modules()
                  if isinstance(mod, nn.modules.batchnorm._BatchNorm) for p, _ in mod.named_parameters()}
    return names


class PartialFed(Algorithm):
    """FedAvg whose clients load G into some layers only (a fixed strategy) and keep their own in the others."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        local = kept_local(setup.model, self.cfg.partialfed_local_blocks, self.cfg.partialfed_local_bn)
        self.loaded = [n for n in setup.param_names if n not in local]

    def downloads(self) -> list[str]:
        return list(self.loaded)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        return rnd.send_global(clients, self.loaded)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        return rnd.weighted_mean(senders, self.loaded)


PARAMS = (
    Param("partialfed_local_blocks", 1, Int(0, 1_000), "PartialFed: top blocks each client initialises from its "
          "own model, the others load G (0: FedAvg; the model's number of blocks or more: Local)", short="local top"),
    Param("partialfed_local_bn", True, Bool(), "PartialFed: batch-norm layers stay local too (their weight and "
          "bias; running statistics are never sent)"),
)

SPEC = make_spec("partialfed", PartialFed, label="PartialFed", params=PARAMS, colour="midnightblue", line_style=":",
                 category="personalised aggregation", builtin=True, fedala_paper=True,
                 doc="Sun, Huo, Yang & Bai, NeurIPS 2021 (PartialFed-Fix)")
