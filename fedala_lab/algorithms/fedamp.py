"""FedAMP (Huang, Chu, Zhou, Wang, Liu, Pei & Zhang, "Personalized Cross-Silo Federated Learning on Non-IID
Data", AAAI 2021): no global model; the server builds for each client a personalised cloud model from the
clients' models, weighting most the models closest to the client's own (attentive message passing).

With w_j the last model client j uploaded, the server sends client i

    u_i = ξ_ii·w_i + Σ_{j≠i} ξ_ij·w_j,   ξ_ij = α_K·A'(‖w_i − w_j‖²) = (α_K/σ)·exp(−‖w_i − w_j‖²/σ),
                                         ξ_ii = 1 − Σ_{j≠i} ξ_ij

(the paper's message-passing step, a gradient step on its attention-inducing function A(x) = 1 − e^{−x/σ}
written as a weighted sum of the models), and client i, starting from u_i, trains E epochs of SGD on

    F_i(w) + (λ/(2α_K))·‖w − u_i‖²                                        (the paper's proximal step)

i.e. θ ← θ − lr·(∇F_i + (λ/α_K)(θ − u_i)), and uploads the result: the server's new w_i. The peers j are the
clients that uploaded in the previous round; w_i is the server's copy of client i's last upload (the initial
model before its first). Round 1, with nothing uploaded yet, sends the initial model as FedAvg does. The
paper's equation numbers are not given: we could not check them against its text.

Evaluated: each client's local model as received, before local training: u_i, or ALA's blend with ``+ala``
(the engine's order, and the reference's: ``send_models``, then ``evaluate``).

Hyper-parameters: ``fedamp_sigma`` σ = 1 (PFLlib's ``sigma``); ``fedamp_alpha`` α_K = 0.05 and
``fedamp_lambda`` λ = 0.05 where PFLlib has α_K = λ = 1 (``alphaK``, ``lamda``; no values of the FedALA paper
found). u_i is a convex combination of the models only while ξ_ii ≥ 0, i.e. for α_K small enough; as
ξ_ij ≤ α_K/σ, α_K/σ ≤ 1/(N − 1) guarantees it whatever the distances, and 0.05 does for up to 21 clients.
With PFLlib's α_K = 1 the teach preset's first cloud models had ξ_ii from −11 to −6: extrapolations far from
every model (0.1 % accuracy in round 2), after which the models lie far apart, every ξ_ij → 0 and FedAMP is
Local with a proximal term. λ = 0.05 keeps PFLlib's proximal weight λ/α_K = 1. Neither PFLlib nor this code
checks ξ_ii ≥ 0; the weights of the tracked clients are recorded, a row of N per round
(``run.arrays["fedamp_xi/<client>/xi"]``). α_K is constant over rounds, as in PFLlib (whose help cites the
paper for α_K = λ/√k).

As the public reference (PFLlib ``serveramp.py``, ``clientamp.py``): the attention above (not the paper's
cosine-similarity heuristic for deep networks), over the previous round's uploads, with the client's own
last model as w_i; the proximal term with its gradient as PFLlib had it until March 2023, around the FedALA
paper (its later client adds ‖w − u_i‖ of detached tensors, which moves no parameter). Departures:

- the client starts local training from u_i, the model it receives; PFLlib's client keeps training (and is
  evaluated on) its own previous model, u_i being only its proximal anchor. Starting from what is received
  is what lets ``+ala`` blend u_i into the client's model (ALA replaces the local initialisation);
- every client, selected or not, receives its u_i each round, so that every client is evaluated on a model
  built for it (the engine's ``initialise_all``); PFLlib sends to the selected clients only. Bytes: one
  model per client downloaded (each its own u_i), one per sender uploaded.

With α_K → 0 every weight falls on the client itself (ξ_ii = 1, u_i = w_i), and with λ = 0 nothing pulls:
FedAMP is then Local, bit for bit (tested; a λ > 0 would pull with λ/α_K → ∞).
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
