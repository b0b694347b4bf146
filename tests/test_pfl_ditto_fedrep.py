"""Ditto and FedRep (the FedALA paper's pFL baselines): each one round ≡ a plain-torch transcription of its
paper, their oracles (Ditto λ = 0 ≡ Local; FedRep without head epochs ≡ FedAvg with a frozen head), the
vectorised backend against the loop, and +ALA on both.

A transcription (nn.Modules, one client at a time) and the engine compute the same arithmetic in other orders:
they agree to float rounding, STEP_TOL for one or two rounds' models, RUN_TOL for losses and for runs of
several rounds (conftest says how large the measured differences are and why these sizes); so do the
vectorised and loop backends. Where one method is another (an oracle with the same arithmetic) and a resumed
run, the comparison is bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, STEP_TOL, run_sim, small_cfg, tol
from pfl_oracles import batches, mean, module, sgd, state

import fedala_lab as fl

COMMON = {"rounds": 2, "model": "mlp", "lr": 0.1, "batch_size": 4}


def _params(sim):
    return {k: v.clone() for k, v in sim.global_params.items()}


# -- Ditto ---------------------------------------------------------------------------------------------


def test_one_ditto_round_is_its_paper(ragged, device):
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 1}, algo="ditto", ditto_lambda=0.5, ditto_epochs=2, backend="loop")
    sim, _ = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g0 = state(sim.model)
    lr, lam = cfg.lr, cfg.ditto_lambda
    trained, personal = {}, {}
    for c in range(5):
        data = batches(fed, c, cfg.batch_size)
        if not data:
            continue
        # v_i ← SGD on F_i(v) + λ/2 ‖v − w‖² from v_i (= the initial model), w = G as received
        v = sgd(module(sim.model, g0), batches(fed, c, cfg.batch_size, epochs=2), lr,
                extra=lambda k, p: lam * (p - g0[k]))
        personal[c] = state(v)
        trained[c] = state(sgd(module(sim.model, g0), data, lr))  # w_i: FedAvg's local training
    want = mean(trained, fed.train_sizes)
    for k, v in want.items():
        torch.testing.assert_close(sim.global_params[k], v, atol=tol(device, STEP_TOL), rtol=0)
    for c, p in personal.items():
        for k, v in p.items():
            torch.testing.assert_close(sim.state.params[k][c], v, atol=tol(device, STEP_TOL), rtol=0)


def test_ditto_with_lambda_zero_has_locals_models(ragged, device):
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True)
    sim_d, d = run_sim(cfg.replace(algo="ditto", ditto_lambda=0.0), ragged)
    sim_l, loc = run_sim(cfg.replace(algo="local"), ragged)
    for k in sim_l.param_names:
        assert torch.equal(sim_d.state.params[k], sim_l.local_params[k]), k
    # evaluated: the personal models, so Ditto(λ = 0) scores what Local scores
    assert d.clients["test_acc"].equals(loc.clients["test_acc"])


@pytest.mark.parametrize("algo", ["ditto", "fedrep"])
def test_vectorised_matches_loop_to_float_rounding(algo, ragged, device):
    cfg = small_cfg(device=device, algo=algo, **COMMON, shuffle=True, join_ratio=0.6, drop_last=False)
    sim_v, v = run_sim(cfg, ragged)
    sim_l, lo = run_sim(cfg.replace(backend="loop"), ragged)
    np.testing.assert_allclose(v.clients["test_loss"], lo.clients["test_loss"], atol=tol(device, RUN_TOL))
    for k in sim_l.param_names:
        torch.testing.assert_close(sim_v.local_params[k], sim_l.local_params[k], atol=tol(device, RUN_TOL), rtol=0)


# -- FedRep --------------------------------------------------------------------------------------------


def test_one_fedrep_round_is_its_paper(ragged, device):
    cfg = small_cfg(device=device, algo="fedrep", fedrep_head_epochs=2, backend="loop", **{**COMMON, "rounds": 1})
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g0 = state(sim.model)
    head = {"fc.weight", "fc.bias"}
    body = [k for k in g0 if k not in head]
    trained = {}
    for c in range(5):
        data = batches(fed, c, cfg.batch_size)
        if not data:
            continue
        m = sgd(module(sim.model, g0), batches(fed, c, cfg.batch_size, epochs=2), cfg.lr, trainable=head)
        trained[c] = state(sgd(m, data, cfg.lr, trainable=set(body)))
        for k in head:  # each client keeps its own head
            torch.testing.assert_close(sim.local_params[k][c], trained[c][k], atol=tol(device, STEP_TOL), rtol=0)
    want = mean({c: {k: p[k] for k in body} for c, p in trained.items()}, fed.train_sizes)
    for k in body:
        torch.testing.assert_close(sim.global_params[k], want[k], atol=tol(device, STEP_TOL), rtol=0)
    for k in head:  # the server's head never moves: only the body is averaged and sent
        torch.testing.assert_close(sim.global_params[k], g0[k], atol=0, rtol=0)
    body_bytes = sim.setup.param_bytes(body)
    assert run.rounds["bytes_up"].iloc[0] == 5 * body_bytes  # every selected client sends (as in FedAvg)
    assert run.rounds["bytes_down"].iloc[0] == 5 * body_bytes


class FrozenHead(fl.Algorithm):
    """FedAvg that never trains nor averages the head (a test's own algorithm, through the public API)."""

    def local_train(self, rnd, work):
        body = tuple(n for n in rnd.param_names if not n.startswith("fc."))
        return rnd.train(work.clients, work.plan, sgd=self.setup.sgd(trainable=body))

    def aggregate(self, rnd, senders):
        return rnd.weighted_mean(senders, [n for n in rnd.param_names if not n.startswith("fc.")])

    def initialise(self, rnd, clients):
        return rnd.send_global(clients, [n for n in rnd.param_names if not n.startswith("fc.")])


def test_fedrep_without_head_epochs_is_fedavg_with_a_frozen_head(ragged, device):
    fl.register_algorithm("frozen-head", FrozenHead, modifiers=())
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True, join_ratio=0.6)
    sim_r, r = run_sim(cfg.replace(algo="fedrep", fedrep_head_epochs=0), ragged)
    sim_f, f = run_sim(cfg.replace(algo="frozen-head"), ragged)
    for part in ("global_params", "local_params"):
        for k, v in getattr(sim_r, part).items():
            assert torch.equal(v, getattr(sim_f, part)[k]), (part, k)
    assert r.clients["test_loss"].equals(f.clients["test_loss"])


# -- ALA on both ---------------------------------------------------------------------------------------


def test_ala_on_ditto_and_fedrep(ragged):
    cfg = small_cfg(**{**COMMON, "rounds": 3}, s=60)
    _, run = run_sim(cfg.replace(algo="fedrep+ala"), ragged)
    assert run.meta["ala_params"] == ["fc2.0.weight", "fc2.0.bias"]  # the body's top block: the head stays own
    assert run.config.algorithm.label == "FedRep+ALA" and len(run.ala) > 0
    sim_d, run_d = run_sim(cfg.replace(algo="ditto+ala"), ragged)
    assert run_d.meta["ala_params"] == ["fc.weight", "fc.bias"] and hasattr(sim_d.state.inner, "params")
    assert all(run_d.summary()[k] > 0 for k in ("best_acc", "bytes_up"))
