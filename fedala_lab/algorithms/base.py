"""An algorithm is a few small pieces on the one shared round loop (engine/simulate.py).

    for t = 1..T:
        select ⌊ρN⌋ clients
        initialise(sim, t, clients)     every client builds its local model from G   (FedAvg: copy G;
                                                                                      FedALA: ALA)
        evaluate every client's model   (personalise(sim, t) gives that model, default: the local one)
        selected clients train E epochs of SGD on ℓ + their extra objective term    (FedProx: grad_term)
        aggregate(sim, t, selected)     the server builds the new G                  (FedAvg: weighted mean)

FedAvg, FedProx, FedALA, FedAvg-C, Local and FedLAMA differ only in which pieces they plug in; registry.py
composes them from a config's name ("+ala" swaps the initialisation for ALA on any method).

State. An algorithm that carries something from round to round (ALA's weights W, FedLAMA's intervals)
declares it as a dataclass of tensors and primitives, made by ``init_state(sim)``. The engine holds it as
``sim.state`` without looking inside, and checkpoints it with :func:`state_to_dict` /
:func:`state_from_dict` (plain dicts, so ``torch.load(weights_only=True)`` reads them). Facts fixed for a
run (which parameters ALA weighs, FedLAMA's layer sizes) live in the pieces themselves (closures or a
small object built for the run), not in the state and not on the simulation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch


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
    # init_state(sim) -> the algorithm's state (a dataclass, see the module docstring), made before round 1.
    init_state: Callable | None = None
    # select(sim, t) -> clients of round t, or None for the shared draw (FedLAMA keeps one per window).
    select: Callable | None = None
    # SGD steps per round, overriding cfg.local_steps and epochs (FedLAMA: a round is τ0 steps), or None.
    local_steps: int | None = None
    # Which clients initialise each round: all of them (they are all evaluated, as in the reference), or
    # only the selected ones (ALA with ala_all_clients=False).
    initialise_all: bool = True
    # meta(state) -> entries the algorithm adds to run.meta (ALA: its parameters and capped clients).
    meta: Callable | None = None


def state_to_dict(state) -> dict | None:
    """A state dataclass as nested plain dicts of tensors and primitives (None stays None)."""
    if state is None:
        return None
    return {f.name: _to_plain(getattr(state, f.name)) for f in dataclasses.fields(state)}


def state_from_dict(template, d: dict | None):
    """Fill a fresh state (``init_state``'s) with the values of :func:`state_to_dict`, on its devices.

    Raises ValueError when ``d`` does not have the template's fields (another algorithm's state).
    """
    if template is None and d is None:
        return None
    if template is None or d is None:
        raise ValueError("checkpoint holds another algorithm's state")
    names = [f.name for f in dataclasses.fields(template)]
    if sorted(names) != sorted(d):
        raise ValueError(f"checkpoint state has fields {sorted(d)}, expected {sorted(names)}")
    return dataclasses.replace(template, **{n: _from_plain(getattr(template, n), d[n]) for n in names})


def _to_plain(v):
    if dataclasses.is_dataclass(v):
        return state_to_dict(v)
    if isinstance(v, dict):
        return {k: _to_plain(x) for k, x in v.items()}
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    return v


def _from_plain(template, v):
    if dataclasses.is_dataclass(template):
        return state_from_dict(template, v)
    if isinstance(template, dict):
        if sorted(template) != sorted(v):
            raise ValueError(f"checkpoint state has keys {sorted(v)}, expected {sorted(template)}")
        return {k: _from_plain(template[k], v[k]) for k in template}
    if isinstance(template, torch.Tensor):
        return v.to(template.device)
    return v
