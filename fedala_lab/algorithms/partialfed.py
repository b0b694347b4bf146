"""PartialFed (Sun, Huo, Yang & Bai, "PartialFed: Cross-Domain Personalized Federated Learning via Partial
Initialization", NeurIPS 2021), its PartialFed-Fix form: FedAvg in which each client initialises only part of
its model from the global one and the rest from its own model of the round before.

Each client i, in round t, with its old local model L_i and the global model G:

    θ_i ← G for the layers the strategy loads, L_i for the others           (partial initialisation)
    θ_i ← E epochs of SGD from there (every layer trains)
    G   ← Σ_i (n_i / Σn) θ_i over the loaded layers                          (FedAvg's mean)

The strategy is fixed and the same for every client (PartialFed-Fix): the top ``partialfed_local_blocks``
blocks of the model start from the client's own model, the blocks below load G; with
``partialfed_local_bn`` batch-norm layers (their weight and bias; running statistics are never sent) stay
local too. Default: the top block — the classifier — and batch norm stay local: "solely by initializing a
small fraction of layers locally" improves on FedAvg (the paper's abstract), and in its Fix experiments, as
summarised secondhand, loading the lower layers beat loading the upper ones, and keeping the classifier and
batch norm local helped. Evaluated: each client's model as initialised (the FedALA paper evaluates local
models).

Departures: PartialFed-Adaptive (a loading strategy learned per client) is not implemented: the sources
available to us describe it only in outline, not as a rule to transcribe. The server averages, and clients
upload, only the parameters the clients load: the paper's server averages whole models (FedAvg), but under
a fixed strategy nobody ever reads the average of a layer kept local, so the clients' models are the same
either way and the bytes counted are what must travel (downloads likewise: the loaded parameters only). Not
in PFLlib.

With ``+ala``, ALA blends what PartialFed loads (its top p blocks of the loaded ones get learned weights); the
blocks kept local stay the client's own, as for FedRep's head. Oracles (tested): keeping no block local is
FedAvg bit for bit, keeping every block local is Local.
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
