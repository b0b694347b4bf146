"""An algorithm is four small pieces on the one shared round loop (engine/simulate.py).

    for t = 1..T:
        select ⌊ρN⌋ clients
        initialise(sim, t, clients)     every client builds its local model from G   (FedAvg: copy G;
                                                                                      FedALA: ALA)
        evaluate every client's model   (personalise(sim, t) gives that model, default: the local one)
        selected clients train E epochs of SGD on ℓ + their extra objective term    (FedProx: grad_term)
        aggregate(sim, t, selected)     the server builds the new G                  (FedAvg: weighted mean)

FedAvg, FedProx, FedALA, FedAvg-C and Local differ only in which pieces they plug in; see
:func:`build_algorithm` for the compositions ("+ala" swaps the initialisation for ALA on any method).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import RunConfig


@dataclass(frozen=True)
class Algorithm:
    name: str
    # initialise(sim, t, clients) -> bytes sent down: local initialisation of those clients.
    initialise: Callable
    # aggregate(sim, t, selected) -> bytes sent up: the server update.
    aggregate: Callable
    # grad_term(params, shared) -> extra gradient of the local objective, or None (plain CE).
    grad_term: Callable | None = None
    # personalise(sim, t) -> (params, buffers) evaluated instead of the local models, or None.
    personalise: Callable | None = None
    # setup(sim): create algorithm state (ALA weights…) once before round 1.
    setup: Callable | None = None
    # select(sim, t) -> clients of round t, or None for the shared draw (FedLAMA keeps one per window).
    select: Callable | None = None
    # SGD steps per round, overriding cfg.local_steps and epochs (FedLAMA: a round is τ0 steps), or None.
    local_steps: int | None = None


def build_algorithm(cfg: RunConfig) -> Algorithm:
    """Compose the configured algorithm from its pieces."""
    from . import ala, fedavg, fedprox, finetune, local

    name = cfg.algo
    base = "fedavg" if name == "fedala" else name.split("+")[0]
    if base == "local":
        return Algorithm(name, local.keep_local, local.no_aggregation)
    if base == "fedlama":
        from . import fedlama

        return fedlama.build(cfg, with_ala=cfg.uses_ala)
    grad_term = fedprox.proximal_gradient(cfg.mu) if base.startswith("fedprox") else None
    return Algorithm(
        name,
        initialise=ala.ala_initialise if cfg.uses_ala else fedavg.receive_global,
        aggregate=fedavg.weighted_mean,
        grad_term=grad_term,
        personalise=finetune.finetuned_models if base.endswith("-c") else None,
        setup=ala.setup if cfg.uses_ala else None,
    )
