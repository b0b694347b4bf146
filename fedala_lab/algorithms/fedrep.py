"""FedRep (Collins, Hassani, Mokhtari & Shakkottai, ICML 2021): a shared body φ, a personal head h_i per
client (the model's top block). Each selected client, from the received body:

    h_i ← ``fedrep_head_epochs`` epochs of SGD on the head, φ frozen;  φ_i ← E epochs on the body, h_i frozen

and the server averages the bodies; only the body travels. Defaults, departures and ``+ala``:
docs/methods.md#fedrep.
"""

from __future__ import annotations

import numpy as np
import torch

from ..compute.rng import HEAD_ORDER
from ..errors import ConfigError
from ..models import ala_param_names
from ..params import Int, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from .registry import make_spec


class FedRep(Algorithm):
    """A global body averaged by the server; each client's head trained first, then the body."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.head = tuple(ala_param_names(setup.model, 1))  # the top block
        self.body = tuple(n for n in setup.param_names if n not in self.head)
        if not self.body:  # one block: nothing to share, and the body's steps would have nothing to train
            raise ConfigError("model", type(setup.model).__name__, "a model of two blocks or more for FedRep: its "
                              "top block is each client's head, the blocks below it the shared body")

    def downloads(self) -> list[str]:
        return list(self.body)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        return rnd.send_global(clients, self.body)

    def local_train(self, rnd: Round, work: Work) -> Trained:
        c = work.clients[torch.as_tensor(work.plan.num_steps > 0, device=work.clients.device)]
        head = rnd.train(c, rnd.plan(c, epochs=self.cfg.fedrep_head_epochs, stream=HEAD_ORDER),
                         sgd=self.setup.sgd(trainable=self.head))
        start = rnd.models(work.clients)  # the head's result where it trained, the model as received elsewhere
        if len(c):
            pos = torch.as_tensor(np.flatnonzero(work.plan.num_steps > 0), device=work.clients.device)
            for n, v in head.params.items():
                start["params"][n][pos] = v
            for n, v in head.buffers.items():
                start["buffers"][n][pos] = v
        body = rnd.train(work.clients, work.plan, start=start, sgd=self.setup.sgd(trainable=self.body))
        losses = np.full((len(work.clients), head.losses.shape[1] + body.losses.shape[1]), np.nan)
        done = np.zeros(losses.shape, dtype=bool)
        if len(c):
            rows = np.flatnonzero(work.plan.num_steps > 0)
            losses[rows, :head.losses.shape[1]] = head.losses
            done[rows, :head.losses.shape[1]] = head.done
        losses[:, head.losses.shape[1]:] = body.losses
        done[:, head.losses.shape[1]:] = body.done
        return Trained(body.params, body.buffers, losses, done)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        return rnd.weighted_mean(senders, self.body)


PARAMS = (Param("fedrep_head_epochs", 1, Int(0, 1_000), "FedRep: epochs of the personal head per round, before the "
                "body's (PFLlib's plocal_epochs; the FedRep paper uses 10)"),)

SPEC = make_spec("fedrep", FedRep, label="FedRep", params=PARAMS, colour="tab:olive", line_style="-.",
                 category="fine-tune a global model", communication="2·α_f·Σ", builtin=True, fedala_paper=True,
                 doc="Collins et al., ICML 2021")
