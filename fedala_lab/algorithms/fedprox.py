"""FedProx (Li et al., MLSys 2020): the local objective gains (μ/2)‖θ − G‖², so each SGD step is
θ ← θ − lr·(∇ℓ(θ) + μ(θ − G)). With μ = 0 it is FedAvg exactly (an oracle test).

In its paper's systems-heterogeneity setting the server keeps the partial work of stragglers, which FedAvg
drops (docs/design.md#fedprox); the spec says so (``keeps_stragglers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Float, Param
from . import notes
from .base import Algorithm
from .registry import Look, make_spec


@dataclass(frozen=True)
class Proximal:
    """The gradient μ(θ − anchor) of (μ/2)‖θ − anchor‖²: the anchor is ``shared[key]`` (G: FedProx, Ditto)
    or, with ``per_client``, the client's own ``carry[key]`` (FedAMP's u_i)."""

    mu: float
    key: str = "global"
    per_client: bool = False
    batched = True  # elementwise: runs on all clients' stacked parameters at once (compute/steps.py)

    def grad(self, params: dict, carry: dict, shared: dict) -> dict:
        anchor = carry[self.key] if self.per_client else shared[self.key]
        return {n: self.mu * (p - anchor[n]) for n, p in params.items()}

    def pull(self, carry: dict, shared: dict) -> tuple[float, dict]:
        """(μ, the anchors): the same term as a pull, which the workers' fused update applies in place."""
        return self.mu, carry[self.key] if self.per_client else shared[self.key]


class FedProx(Algorithm):
    """FedAvg whose local objective adds the proximal term (μ/2)‖θ − G‖²."""

    def objective(self):
        return Proximal(self.cfg.mu)


def _hint(cfg) -> str:
    """FedProx's proximal step alone multiplies θ − G by (1 − lr·μ) per step: for lr·μ ≥ 2 that grows
    without bound whatever the data, and from lr·μ ≥ 1 on it overshoots G every step."""
    if cfg.mu * cfg.lr < 1:
        return ""
    return (f"FedProx's mu={cfg.mu:g} is most likely too large for lr={cfg.lr:g}: each step scales θ − G by "
            f"1 − lr·mu = {1 - cfg.lr * cfg.mu:.3g}, which must stay within (−1, 1), so try mu < {1 / cfg.lr:g} "
            "(1/lr; the FedProx paper's grid is 0.001 to 1)")


MU = Param("mu", 0.001, Float(0), "FedProx: proximal coefficient μ (the FedALA paper's grid choice 0.001; 0 is "
           "FedAvg)", short="μ")

SPEC = make_spec("fedprox", FedProx, label="FedProx", params=[MU], colour="tab:orange", line_style="--",
                   category="traditional", modifiers=("ala", "finetune"), keeps_stragglers=True, builtin=True,
                   fedala_paper=True, divergence_hint=_hint, straggler_note=notes.proximal,
                   variants={"+ala": Look("FedProx+ALA", "tab:red", "--"), "-c": Look("FedProx-C", "yellowgreen", ":")},
                   doc="Li et al., MLSys 2020")
