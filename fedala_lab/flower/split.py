"""The split round carried in one process, without Flower: the fast check of a method before taking it to
Flower (tests/test_flower.py runs every method so).

The round's two sides are the engine's (engine/sides.py: ``ServerSide`` selects and aggregates,
``ClientSide`` initialises, evaluates and trains one client at a time; engine/rounds.py keeps the books for
both, and for ``Simulation``). What this module adds is the carrying: each order goes to the client side,
each client's rows are kept as the bytes a Flower client keeps in its ``Context.state``, the replies go
back to the server. fedala_lab.flower.apps carries the same values over Flower's messages.

A client trains alone, on the loop backend (unless the config says "vectorised"), so the run equals the
engine's on the loop backend bit for bit.
"""

from __future__ import annotations

from torch import nn

from ..config import RunConfig
from ..data.federated import FederatedData
from ..engine.sides import (
    ClientSide,
    Order,
    Reply,
    ServerSide,
    check_split,
    from_bytes,
    put_state_rows,
    split_refusal,
    state_rows,
    to_bytes,
)
from ..errors import SplitError
from ..record.run import Run


def run_split(cfg: RunConfig, data: FederatedData | None = None, *, model: nn.Module | None = None) -> Run:
    """Both sides in this process, without Flower: the same Run as the engine's on the loop backend, for
    checking a method before taking it to Flower."""
    return split_simulation(cfg, data, model=model).to_run()


def split_simulation(cfg: RunConfig, data: FederatedData | None = None, *,
                     model: nn.Module | None = None) -> ServerSide:
    """:func:`run_split`'s rounds, returning the :class:`ServerSide` (its Run: ``to_run()``; its final global
    model: ``global_params``)."""
    server = ServerSide(cfg, data, model, engine="split")
    client = ClientSide(server.cfg, data, model)
    server.client_backend = client.backend_name
    saved: dict[int, bytes] = {}
    for t in range(1, server.cfg.rounds + 1):
        glob = server.downloads()
        replies = []
        for order in server.orders(t):
            reply, saved[order.client] = client.serve(order, glob, saved.get(order.client))
            replies.append(reply)
        server.finish(t, replies)
    return server


__all__ = ["ClientSide", "Order", "Reply", "ServerSide", "SplitError", "check_split", "from_bytes", "put_state_rows",
           "run_split", "split_refusal", "split_simulation", "state_rows", "to_bytes"]
