"""The one place that builds an algorithm from its name: each name is a composition of pieces.

    fedavg        receive G,  weighted mean
    fedprox       receive G,  weighted mean,  + μ(θ − G) in every local step
    fedavg-c      FedAvg, evaluating a fine-tuned copy of each client's model
    local         keep the local model, no aggregation
    fedlama       receive the layers synchronised last round, average each layer at its own interval
    <any>+ala     ALA instead of "receive G" (fedala = fedavg+ala)
"""

from __future__ import annotations

from torch import nn

from ..config import RunConfig
from ..models import build_model
from . import ala, fedavg, fedlama, fedprox, finetune, local
from .base import Algorithm


def build_algorithm(cfg: RunConfig, model: nn.Module) -> Algorithm:
    """Compose the configured algorithm for a run of ``model`` (ALA and FedLAMA read its parameters)."""
    name = cfg.algo
    base = "fedavg" if name == "fedala" else name.split("+")[0]
    pieces = ala.ALAPieces(cfg, model) if cfg.uses_ala else None
    if base == "local":
        return Algorithm(name, local.keep_local, local.no_aggregation)
    if base == "fedlama":
        return fedlama.build(cfg, model, ala=pieces)
    algo = Algorithm(
        name,
        initialise=fedavg.receive_global,
        aggregate=fedavg.weighted_mean,
        grad_term=fedprox.proximal_gradient(cfg.mu) if base.startswith("fedprox") else None,
        personalise=finetune.finetuned_models if base.endswith("-c") else None,
    )
    return pieces.on(algo) if pieces else algo


def training_parts(cfg: RunConfig, input_shape: tuple, num_classes: int):
    """(model, lr, grad_term) of a run, as a training worker process rebuilds them from the config
    (compute/workers.py, docs/design.md#performance): the model's architecture and the algorithm's extra
    gradient (FedProx's μ(θ − G)); the parameters themselves arrive through shared memory."""
    model = build_model(cfg.model, input_shape, num_classes, seed=0)
    return model, cfg.lr, build_algorithm(cfg, model).grad_term
