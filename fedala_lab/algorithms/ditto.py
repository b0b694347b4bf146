"""Ditto (Li, Hu, Beirami & Smith, ICML 2021): FedAvg for a global model, plus a personal model per client kept
close to it. Each selected client, from the received model w:

    w_i ← E epochs of SGD on F_i(w), sent for FedAvg's mean
    v_i ← ``ditto_epochs`` epochs of SGD on F_i(v) + (λ/2)‖v − w‖² from v_i

Evaluated: each client's personal model v_i, never sent. Defaults and departures from PFLlib:
docs/methods.md#ditto.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..params import Float, Int, Param
from .base import Algorithm, Round, Setup, Trained, Work
from .fedprox import Proximal
from .registry import make_spec


@dataclass
class DittoState:
    """Each client's personal model v_i, (N, *shape) per parameter and buffer."""

    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


def personal_models(setup: Setup) -> tuple[dict, dict]:
    """Every client's copy of the initial model: parameters and buffers, (N, *shape) each."""
    n = setup.num_clients

    def stack(named):
        return {k: v.detach().unsqueeze(0).repeat(n, *[1] * v.dim()).clone() for k, v in named}

    return stack(setup.model.named_parameters()), stack(setup.model.named_buffers())


class Ditto(Algorithm):
    """FedAvg for the global model; a personal model per client trained with a proximal pull towards it."""

    def init_state(self, setup: Setup) -> DittoState:
        return DittoState(*personal_models(setup))

    def personalise(self, rnd: Round) -> dict:
        return {"params": rnd.state.params, "buffers": rnd.state.buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        st, c = rnd.state, work.clients[torch.as_tensor(work.plan.num_steps > 0, device=work.clients.device)]
        if len(c):
            anchor = {n: rnd.local_params[n][c] for n in rnd.param_names}  # w as received, before its training
            personal = rnd.train(c, rnd.plan(c, epochs=self.cfg.ditto_epochs),
                                 start={"params": {n: v[c] for n, v in st.params.items()},
                                        "buffers": {n: v[c] for n, v in st.buffers.items()}},
                                 sgd=self.setup.sgd(objective=Proximal(self.cfg.ditto_lambda, "anchor", per_client=True)),
                                 extra={"anchor": anchor})
            for n, v in personal.params.items():
                st.params[n][c] = v
            for n, v in personal.buffers.items():
                st.buffers[n][c] = v
        return super().local_train(rnd, work)


def _hint(cfg) -> str:
    """Ditto's personal step alone scales v − w by 1 − lr·λ (FedProx's hint, with Ditto's λ for μ)."""
    lam = cfg.ditto_lambda
    if lam * cfg.lr < 1:
        return ""
    return (f"Ditto's ditto_lambda={lam:g} is most likely too large for lr={cfg.lr:g}: each personal step scales "
            f"v − w by 1 − lr·λ = {1 - cfg.lr * lam:.3g}, which must stay within (−1, 1), so try ditto_lambda < "
            f"{1 / cfg.lr:g}")


PARAMS = (
    Param("ditto_lambda", 0.1, Float(0, 1_000), "Ditto: λ, the pull of each personal model towards the global one "
          "(0: Local); lr·λ below 1 keeps the pull from overshooting", short="λ"),
    Param("ditto_epochs", 1, Int(1, 1_000), "Ditto: epochs of the personal model per round (PFLlib's plocal_epochs)"),
)

SPEC = make_spec("ditto", Ditto, label="Ditto", params=PARAMS, colour="tab:cyan", category="extra personal models",
                 divergence_hint=_hint, builtin=True, fedala_paper=True, doc="Li, Hu, Beirami & Smith, ICML 2021")
