"""FedProx (Li et al., MLSys 2020): the local objective gains (μ/2)‖θ − G‖², so each SGD step is
θ ← θ − lr·(∇ℓ(θ) + μ(θ − G)). With μ = 0 it is FedAvg exactly (an oracle test)."""

from __future__ import annotations


def proximal_gradient(mu: float):
    """The extra gradient μ(θ − G) of the proximal term; G comes in ``shared["global"]``."""

    def term(params, shared):
        g = shared["global"]
        return {n: mu * (p - g[n]) for n, p in params.items()}

    return term
