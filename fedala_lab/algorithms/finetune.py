"""FedAvg-C / FedProx-C: fine-tune the received model locally before using it (FedALA's Table 2).

Each client evaluates a copy of its initialised model fine-tuned for ``finetune_epochs`` on its train split
(with the method's own local objective, so FedProx-C keeps the proximal term). The copy is used for
evaluation only: local training and aggregation are those of the method, so the global model of FedAvg-C
follows FedAvg's exactly. The ``-c`` modifier, on the methods that take it.
"""

from __future__ import annotations

from ..compute.rng import FINETUNE
from ..params import Int, Param
from . import notes
from .base import Round, Wrapper
from .registry import Modifier

PARAMS = (Param("finetune_epochs", 1, Int(1, 1_000), "-C methods: epochs of local fine-tuning of the received "
                "model before evaluation"),)


class FineTuned(Wrapper):
    """The wrapped method, evaluating each client's model fine-tuned for ``finetune_epochs`` first."""

    def personalise(self, rnd: Round) -> dict:
        everyone = rnd.everyone
        plan = rnd.plan(everyone, epochs=self.cfg.finetune_epochs, stream=FINETUNE)
        out = rnd.train(everyone, plan, sgd=self.setup.sgd(objective=self.objective()))
        return {"params": out.params, "buffers": out.buffers}


MODIFIER = Modifier("finetune", "-c", "-C", FineTuned, PARAMS, curve_note=notes.adapted)
