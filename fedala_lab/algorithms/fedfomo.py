"""FedFomo (Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021): each selected client moves its model towards the
clients' models that lower its own validation loss, weighted by how much they lower it per unit of distance.

    w_ij = (L_i(θ_i) − L_i(θ_j)) / ‖θ_j − θ_i‖              for the M downloaded models j (highest affinity)
    θ_i ← θ_i + Σ_j w̄_ij (θ_j − θ_i),   w̄_ij = max(w_ij, 0) / Σ_k max(w_ik, 0)
    P_ij ← P_ij + w_ij                                       the server's affinities, for the next choice

then E epochs of SGD on the rest of its train split; the update is the first part of local training, so the
round evaluates each client's model as its last training left it (PFLlib's order). Hyper-parameters (PFLlib's),
communication and the departures from the paper and PFLlib: docs/methods.md#fedfomo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..compute import plans
from ..compute.backends import BatchPlan
from ..compute.rng import FOMO_PICK
from ..params import Float, Int, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from .ditto import personal_models
from .registry import make_spec

EPS = 1e-5  # added to ‖θ_j − θ_i‖ (PFLlib): a model equal to the client's own gets weight 0, not 0/0


@dataclass
class FomoState:
    """The server's side: every client's last upload, whose it holds, and the affinities P."""

    models: dict[str, torch.Tensor]  # (N, *shape) per parameter
    uploaded: torch.Tensor  # (N,) bool
    affinity: torch.Tensor  # (N, N) float64: row i, client i's affinity to each client's model


def fomo_weights(gain: torch.Tensor, distance: torch.Tensor, owner: torch.Tensor, clients: int):
    """The paper's weights for pairs (client, downloaded model): ``gain`` = L_i(θ_i) − L_i(θ_j), ``distance`` =
    ‖θ_j − θ_i‖, ``owner`` the pair's client (0 … ``clients`` − 1). Returns (w, w̄): w = gain / (distance + ε),
    w̄ = its positive part normalised over each client's pairs (all 0 for a client with none positive)."""
    w = gain / (distance + EPS)
    pos = w.clamp_min(0)
    total = torch.zeros(clients, dtype=pos.dtype, device=pos.device).index_add_(0, owner, pos)
    return w, torch.where(total[owner] > 0, pos / total[owner].clamp_min(torch.finfo(pos.dtype).tiny), 0)


def fomo_combine(own: dict, theirs: dict, mix: torch.Tensor, owner: torch.Tensor) -> dict:
    """θ_i + Σ_j w̄_ij (θ_j − θ_i) for each client: ``own`` (A, …), ``theirs`` (P, …) the downloaded models, pair
    p belonging to client ``owner[p]`` with weight ``mix[p]``. Weights summing to 1 make it Σ_j w̄_ij θ_j."""
    out = {}
    for n, v in own.items():
        step = (theirs[n] - v[owner]) * mix.to(v.dtype).reshape(-1, *[1] * (v.dim() - 1))
        out[n] = v.index_add(0, owner, step)
    return out


def held_out(n: np.ndarray, val: float) -> np.ndarray:
    """Validation rows of clients with ``n`` train rows: the last ⌊val·n⌋ (PFLlib's ``-int(val_ratio·n)``)."""
    return (np.asarray(n) * val).astype(np.int64)


class FedFomo(Algorithm):
    """Each selected client combines M downloaded models by their first-order benefit on its validation rows."""

    initialise_all = False  # only the clients of the round download and combine

    def init_state(self, setup: Setup) -> FomoState:
        n = setup.num_clients
        return FomoState(personal_models(setup)[0], torch.zeros(n, dtype=torch.bool, device=setup.device),
                         torch.zeros((n, n), dtype=torch.float64, device=setup.device))

    def pick(self, rnd: Round, client: int) -> list[int]:
        """The clients whose models ``client`` downloads: M among those the server holds (not its own), by
        affinity, ties at random; with ``fomo_epsilon`` each pick is a random remaining candidate instead."""
        st = rnd.state
        cand = [j for j in torch.nonzero(st.uploaded).flatten().tolist() if j != client]
        g = rnd.rng(client, FOMO_PICK)
        score = st.affinity[client, cand].cpu().numpy()
        order = list(np.lexsort((g.random(len(cand)), -score)))  # highest affinity first, ties in random order
        out = []
        for _ in range(min(self.cfg.fomo_m, len(cand))):
            explore = g.random() < self.cfg.fomo_epsilon
            out.append(cand[order.pop(int(g.integers(len(order))) if explore else 0)])
        return out

    def val_rows(self, rnd: Round, client: int) -> np.ndarray:
        """Row indices (into the train data) of a client's validation part; its whole split when that is empty."""
        n, off = int(rnd.data.train_sizes[client]), int(rnd.data.train_offsets[client])
        v = int(held_out(n, self.cfg.fomo_val))
        return off + np.arange(n - v if v else 0, n)

    def val_losses(self, rnd: Round, clients: torch.Tensor, models: dict, whose: list[int]) -> torch.Tensor:
        """Mean loss of each model in ``models`` ((K, …) parameters) on the validation rows of the client at
        position ``whose[k]`` of ``clients``, with that client's buffers."""
        chunks = [np.array_split(r, range(plans.EVAL_CHUNK, len(r), plans.EVAL_CHUNK))
                  for r in (self.val_rows(rnd, int(c)) for c in clients)]
        plan = BatchPlan.from_batches([chunks[a] for a in whose], rnd.device)
        idx = clients[torch.as_tensor(whose, device=clients.device)]
        buffers = {k: b[idx] for k, b in rnd.local_buffers.items()}
        out = rnd.evaluate_batches(models, buffers, plan, "train")
        return torch.as_tensor(out["loss_sum"] / np.maximum(out["num"], 1), dtype=torch.float64, device=rnd.device)

    def weights(self, rnd: Round, clients: torch.Tensor, owner: torch.Tensor, picked: torch.Tensor,
                own: dict, theirs: dict):
        """(w, w̄) for each pair (client ``clients[owner[p]]``, downloaded model of client ``picked[p]``): the
        paper's first-order weights on the validation rows (:func:`fomo_weights`)."""
        a = len(clients)
        losses = self.val_losses(rnd, clients, {n: torch.cat([own[n], theirs[n]]) for n in own},
                                 list(range(a)) + owner.tolist())
        distance = torch.sqrt(sum(((theirs[n] - own[n][owner]) ** 2).flatten(1).sum(1) for n in own).double())
        return fomo_weights(losses[owner] - losses[a:], distance, owner, a)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """The downloads: M models per client (counted here; the combination is part of local training, so that
        the round evaluates each client's model as its last training left it, as PFLlib does)."""
        size = rnd.param_bytes()
        counts = [len(self.pick(rnd, int(c))) * size for c in clients]
        return Sent({}, sum(counts), client_bytes=counts)

    def combine(self, rnd: Round, clients: torch.Tensor) -> dict:
        """Each client's model after the federated update: θ_i + Σ_j w̄_ij (θ_j − θ_i) over its downloads (its
        own model where it downloaded nothing: round 1); the server's affinities P_ij gain w_ij."""
        st = rnd.state
        own = {n: rnd.local_params[n][clients] for n in rnd.param_names}
        chosen = [self.pick(rnd, int(c)) for c in clients]
        if not any(chosen):  # nothing uploaded yet (round 1): every client keeps its model
            return own
        owner = torch.as_tensor([a for a, js in enumerate(chosen) for _ in js], device=rnd.device)
        picked = torch.as_tensor([j for js in chosen for j in js], device=rnd.device)
        theirs = {n: st.models[n][picked] for n in rnd.param_names}
        w, mix = self.weights(rnd, clients, owner, picked, own, theirs)
        st.affinity.index_put_((clients[owner], picked), w.to(st.affinity.dtype), accumulate=True)
        return fomo_combine(own, theirs, mix, owner)

    def local_train(self, rnd: Round, work: Work) -> Trained:
        """The federated update (:meth:`combine`), then E epochs of SGD from it on the train part of each split
        (the validation rows held out); a straggler does at most the steps the engine gave it."""
        ids = work.clients.cpu().numpy()
        n = rnd.data.train_sizes[ids]
        steps = self.local_steps or self.cfg.local_steps
        plan = rnd.plan(work.clients, epochs=None if steps else self.cfg.local_epochs, steps=steps,
                        limits=dict(zip(ids.tolist(), work.plan.num_steps.tolist())),
                        sizes=n - held_out(n, self.cfg.fomo_val))
        return rnd.train(work.clients, plan, start={"params": self.combine(rnd, work.clients)})

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """The server keeps each sender's model for the clients that will download it."""
        st = rnd.state
        for n in rnd.param_names:
            st.models[n][senders] = rnd.local_params[n][senders]
        st.uploaded[senders] = True
        return Aggregated({}, len(senders) * rnd.param_bytes())


PARAMS = (
    Param("fomo_m", 5, Int(1, 100_000), "FedFomo: M, the other clients' models each selected client downloads "
          "(PFLlib's M)", short="M"),
    Param("fomo_val", 0.2, Float(0, 1, hi_open=True), "FedFomo: share of each client's train split held out to "
          "weigh the downloaded models (PFLlib's val_ratio; 0: weigh on the train split itself)"),
    Param("fomo_epsilon", 0.0, Float(0, 1), "FedFomo: chance that a download is a random candidate instead of the "
          "next by affinity (PFLlib: 0; the paper's ε-greedy starts at 0.3)"),
)

SPEC = make_spec("fedfomo", FedFomo, label="FedFomo", params=PARAMS, colour="darkslategray", line_style="-.",
                 category="personalised aggregation", modifiers=(), builtin=True, fedala_paper=True,
                 communication="(1+M)·Σ", doc="Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021")
