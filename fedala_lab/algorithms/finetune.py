"""FedAvg-C / FedProx-C: fine-tune the received global model locally before using it (FedALA Table 2).

Each client evaluates a copy of its initialised model fine-tuned for ``finetune_epochs`` on its train
split (with the method's own local objective, so FedProx-C keeps the proximal term). The copy is used
for evaluation only: local training and aggregation are those of FedAvg/FedProx, so the global model of
FedAvg-C follows FedAvg's exactly.
"""

from __future__ import annotations

import torch

from ..compute.rng import FINETUNE


def finetuned_models(sim, t: int):
    clients = torch.arange(sim.num_clients, device=sim.device)
    plan = sim.train_plan(t, clients, epochs=sim.cfg.finetune_epochs, stream=FINETUNE)
    carry = sim.gather(clients)
    out, _ = sim.run_steps(sim.sgd_step, carry, {"global": sim.global_params}, plan,
                           sim.data.train_x, sim.data.train_y, train=True)
    return out["params"], out["buffers"]
