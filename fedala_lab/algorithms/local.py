"""Local training only (no federation): each client keeps and trains its own model; nothing is sent."""

from __future__ import annotations

import torch

from .base import Aggregated, Algorithm, Round, Sent
from .registry import make_spec


class Local(Algorithm):
    """Every client trains its own model from the same initial one; the server does nothing."""

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        return Sent({}, 0)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        return Aggregated({}, 0)


SPEC = make_spec("local", Local, label="Local", colour="tab:gray", line_style=":", category="baseline",
                 modifiers=(), communication="0", builtin=True, fedala_paper=True, role="no-federation",
                 doc="no federation: each client alone")
