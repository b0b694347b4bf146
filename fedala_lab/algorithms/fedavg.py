"""FedAvg (McMahan et al., AISTATS 2017): clients start from the global model; the server takes the
mean of the selected clients' models weighted by their train-sample counts."""

from __future__ import annotations

import torch


def receive_global(sim, t: int, clients: torch.Tensor, names=None) -> int:
    """Local initialisation: overwrite each client's model (or only ``names``) with the global one."""
    names = sim.param_names if names is None else names
    for n in names:
        sim.local_params[n][clients] = sim.global_params[n]
    return len(clients) * sim.param_bytes(names)


def client_weights(sim, selected: torch.Tensor) -> torch.Tensor:
    """FedAvg's weights n_i / Σ n of the selected clients (n_i = train samples), float64 on the device."""
    n = torch.as_tensor(sim.train_sizes, dtype=torch.float64)[selected.cpu()]
    return (n / n.sum()).to(sim.device)


def weighted_mean(sim, t: int, selected: torch.Tensor, names=None) -> int:
    """Server: G = Σ_i (n_i / Σ n) θ_i over the selected clients (n_i = train samples)."""
    names = sim.param_names if names is None else names
    w = client_weights(sim, selected).to(sim.dtype)
    for name in names:
        sim.global_params[name] = torch.tensordot(w, sim.local_params[name][selected], dims=1)
    return len(selected) * sim.param_bytes(names)
