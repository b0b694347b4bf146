"""fedala_lab's methods as a Flower app (``pip install "fedala_lab[flower]"``; docs/flower.md).

    from fedala_lab import preset
    from fedala_lab.flower import run_flower
    run = run_flower(preset("teach", algo="fedala", rounds=20))   # Flower's simulation engine, one SuperNode a client
    run.summary()                                                  # the same Run as simulate(...) gives

or, as a Flower app, ``flwr run fedala_lab/flower/app`` (its pyproject.toml names ``server_app`` and
``client_app`` of :mod:`fedala_lab.flower.apps`); the same app runs on a deployment (a SuperLink and one
SuperNode per client, ``--node-config "partition-id=<c>"``; :mod:`fedala_lab.flower.local` starts one on this
machine, with TLS and SuperNode authentication or without; :mod:`fedala_lab.flower.secure` makes the certificates
and keys), checkpointing every round so that a lost SuperNode costs a round, not the run.

The round is the engine's, cut between the server and the clients (fedala_lab/engine/sides.py): the client
side runs the algorithm's ``initialise`` (ALA), evaluation and ``local_train`` on its own partition of the
run's FederatedData, the server side ``select`` and ``aggregate`` — the same round code and algorithm objects
as the engine's. This package only carries them: :func:`run_split` in one process, the apps over Flower.

Flower is imported only for :func:`run_flower`, ``client_app``, ``server_app`` and ``FlowerServer``.
"""

from __future__ import annotations

from .split import ClientSide, ServerSide, SplitError, check_split, run_split, split_refusal, split_simulation

_APPS = ("FlowerServer", "client_app", "config_from_run_config", "run_flower", "server_app", "server_options",
         "simulate_flower")


def __getattr__(name):
    if name in _APPS:
        try:
            from . import apps
        except ImportError as err:  # flwr is an optional extra
            raise ImportError(f"fedala_lab.flower.{name} needs Flower: pip install \"fedala_lab[flower]\" "
                              f"({err})") from err
        return getattr(apps, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ClientSide", "FlowerServer", "ServerSide", "SplitError", "check_split", "client_app",
           "config_from_run_config", "run_flower", "run_split", "server_app", "server_options", "simulate_flower",
           "split_refusal", "split_simulation"]
