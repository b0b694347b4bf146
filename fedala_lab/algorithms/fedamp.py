"""FedAMP (Huang, Chu, Zhou, Wang, Liu, Pei & Zhang, AAAI 2021): no global model; the server sends each client
a cloud model built from the clients' last uploads w_j, weighted towards the models closest to its own.

    u_i = ξ_ii·w_i + Σ_{j≠i} ξ_ij·w_j,   ξ_ij = (α_K/σ)·exp(−‖w_i − w_j‖²/σ),   ξ_ii = 1 − Σ_{j≠i} ξ_ij
    client i, from u_i: E epochs of SGD on F_i(w) + (λ/(2α_K))·‖w − u_i‖², then uploads w_i

Evaluated: each client's model as received (u_i). Hyper-parameters (why α_K = λ = 0.05, not PFLlib's 1), the
recorded weights ξ, and the departures from the paper and PFLlib: docs/methods.md#fedamp.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..params import Float, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from .ditto import personal_models
from .fedprox import Proximal
from .registry import make_spec


@dataclass
class FedAMPState:
    """The server's copy of each client's last uploaded model w_i (N, *shape), which clients uploaded in the
    last round (N,), and the cloud model u_i each client last received (N, *shape): its proximal anchor."""

    models: dict[str, torch.Tensor]
    fresh: torch.Tensor
    cloud: dict[str, torch.Tensor]


def attention(models: dict[str, torch.Tensor], clients: torch.Tensor, peers: torch.Tensor, alpha: float,
              sigma: float) -> torch.Tensor:
    """FedAMP's weights ξ as an (A, N) float64 matrix: row a gives u of ``clients[a]`` as Σ_j ξ_aj·w_j.

    ξ_ij = (α/σ)·exp(−‖w_i − w_j‖²/σ) for the ``peers`` j ≠ i (a (N,) bool mask), 0 for the others, and
    ξ_ii = 1 − Σ_{j≠i} ξ_ij. Distances are over all parameters, in float64."""
    rows = torch.arange(len(clients), device=clients.device)
    d2 = sum(torch.cdist(w[clients].flatten(1).double(), w.flatten(1).double(),
                         compute_mode="donot_use_mm_for_euclid_dist").square() for w in models.values())
    others = peers.unsqueeze(0).repeat(len(clients), 1)
    others[rows, clients] = False
    xi = torch.where(others, alpha / sigma * torch.exp(-d2 / sigma), torch.zeros_like(d2))
    xi[rows, clients] = 1 - xi.sum(1)
    return xi


class FedAMP(Algorithm):
    """A cloud model per client, weighted by model similarity; local training pulled towards it."""

    def init_state(self, setup: Setup) -> FedAMPState:
        """Every w_i and u_i the initial model; nothing uploaded yet."""
        fresh = torch.zeros(setup.num_clients, dtype=torch.bool, device=setup.device)
        return FedAMPState(personal_models(setup)[0], fresh, personal_models(setup)[0])

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """Each client receives its own cloud model u_i (kept as its proximal anchor)."""
        st: FedAMPState = rnd.state
        if not st.fresh.any():  # round 1: nothing uploaded yet, everyone holds the initial model
            return rnd.send_global(clients)
        xi = attention(st.models, clients, st.fresh, self.cfg.fedamp_alpha, self.cfg.fedamp_sigma)
        rnd.record_series("fedamp_xi", clients.tolist(), {"xi": xi.float()})
        rows = {}
        for n, w in st.models.items():
            rows[n] = (xi @ w.flatten(1).double()).to(w.dtype).view(len(clients), *w.shape[1:])
            st.cloud[n][clients] = rows[n]
        return Sent({}, len(clients) * self.setup.param_bytes(), rows=rows)

    def local_train(self, rnd: Round, work: Work) -> Trained:
        """SGD from the model received, pulled towards u_i (not towards ALA's blend, under ``+ala``)."""
        c, cfg = work.clients, self.cfg
        prox = Proximal(cfg.fedamp_lambda / cfg.fedamp_alpha, "anchor", per_client=True)
        return rnd.train(c, work.plan, sgd=self.setup.sgd(objective=prox),
                         extra={"anchor": {n: u[c] for n, u in rnd.state.cloud.items()}})

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """No global model: the server keeps the senders' models for the next round's attention."""
        st: FedAMPState = rnd.state
        for n, w in st.models.items():
            w[senders] = rnd.local_params[n][senders]
        st.fresh.zero_()
        st.fresh[senders] = True
        return Aggregated({}, len(senders) * self.setup.param_bytes())


def _hint(cfg) -> str:
    """The setting most likely behind a diverged FedAMP run: the proximal step alone scales θ − u_i by
    1 − lr·λ/α_K per step (FedProx's hint, with λ/α_K for μ); else attention weights α_K/σ so large that a
    client's own weight 1 − Σ_j ξ_ij goes negative and the cloud models extrapolate."""
    pull = cfg.fedamp_lambda / cfg.fedamp_alpha
    if pull * cfg.lr >= 1:
        return (f"FedAMP's proximal weight λ/α_K = {pull:g} is most likely too large for lr={cfg.lr:g}: each step "
                f"scales θ − u_i by 1 − lr·λ/α_K = {1 - cfg.lr * pull:.3g}, which must stay within (−1, 1), so keep "
                f"fedamp_lambda/fedamp_alpha < {1 / cfg.lr:g}")
    others = cfg.data.num_clients - 1
    if cfg.fedamp_alpha / cfg.fedamp_sigma * others > 1:
        return (f"FedAMP's fedamp_alpha={cfg.fedamp_alpha:g} is most likely too large for fedamp_sigma="
                f"{cfg.fedamp_sigma:g}: the {others} other clients' attention weights α_K/σ·exp(−‖w_i − w_j‖²/σ) "
                f"can sum to {cfg.fedamp_alpha / cfg.fedamp_sigma * others:.3g}, so a client's own weight goes "
                f"negative and its cloud model extrapolates; keep fedamp_alpha <= σ/(N − 1) = "
                f"{cfg.fedamp_sigma / others:.3g}")
    return ""


PARAMS = (
    Param("fedamp_alpha", 0.05, Float(0, 10, lo_open=True), "FedAMP: α_K, the step of the attentive message "
          "passing: ξ_ij = α_K·exp(−‖w_i − w_j‖²/σ)/σ, the proximal weight is λ/α_K; α_K/σ ≤ 1/(N − 1) keeps "
          "every cloud model a convex combination (PFLlib's alphaK = 1)", short="α_K"),
    Param("fedamp_sigma", 1.0, Float(0, 1_000_000, lo_open=True), "FedAMP: σ, the scale of squared model distances in the "
          "attention (PFLlib's sigma)", short="σ"),
    Param("fedamp_lambda", 0.05, Float(0, 1_000), "FedAMP: λ, the pull (λ/(2α_K))‖w − u_i‖² of local training towards "
          "the cloud model u_i (PFLlib's lamda = 1; 0: no pull)", short="λ"),
)

SPEC = make_spec("fedamp", FedAMP, label="FedAMP", params=PARAMS, colour="darkgoldenrod",
                 category="personalised aggregation", tracks_clients=True, divergence_hint=_hint, builtin=True,
                 fedala_paper=True, doc="Huang, Chu, Zhou, Wang, Liu, Pei & Zhang, AAAI 2021")
