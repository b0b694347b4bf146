"""Test AUC, recorded every evaluated round beside accuracy: the rank statistic equals scikit-learn's
``roc_auc_score(one-hot, softmax, average="micro")`` (the FedALA reference code's call) to float64 rounding
(1e-12; the largest gap measured here 1.1e-16), per client and pooled the reference's way (weighted by test samples), on both
backends, and it reaches the run's tables and rows in percent."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import run_sim, small_cfg
from pfl_oracles import module
from sklearn.metrics import roc_auc_score

from fedala_lab.analysis.tables import accuracy_table, layout_table
from fedala_lab.compute.metrics import micro_auc

AUC_TOL = 1e-12  # two float64 computations of one rational number (ranks against the ROC curve's trapezoids)


def _sklearn(probs, labels, num_classes):
    return roc_auc_score(np.eye(num_classes)[labels], probs, average="micro")


def test_rank_statistic_is_sklearns_micro_auc():
    g = np.random.default_rng(0)
    for trial in range(60):
        groups, classes = int(g.integers(1, 6)), int(g.integers(2, 6))
        sizes = g.integers(0, 15, groups)
        n = int(sizes.sum())
        probs = g.random((n, classes)).astype(np.float32)
        if trial % 2:  # coarse scores: many ties, within and across classes
            probs = np.round(probs, 1) + np.float32(0.05)
        probs /= probs.sum(1, keepdims=True)
        labels = g.integers(0, classes, n)
        owner = np.repeat(np.arange(groups), sizes)
        ours = micro_auc(probs, labels, owner, groups)
        for a in range(groups):
            rows = owner == a
            if not rows.any():
                assert np.isnan(ours[a])  # a client without test rows has no AUC
            else:
                assert abs(ours[a] - _sklearn(probs[rows], labels[rows], classes)) <= AUC_TOL
    assert np.isnan(micro_auc(np.ones((3, 1)), np.zeros(3), np.zeros(3), 1)).all()  # one class: undefined


@pytest.mark.parametrize("backend", ["loop", "vectorised"])
def test_each_round_records_the_reference_auc(backend, ragged):
    # FedAvg evaluates G before local training: round 2's models are all the G that round 1 left
    cfg = small_cfg(algo="fedavg", rounds=2, model="mlp", lr=0.1, batch_size=4, backend=backend)
    sim1, _ = run_sim(cfg.replace(rounds=1), ragged)
    g1 = {k: v.clone() for k, v in sim1.global_params.items()}
    _, run = run_sim(cfg, ragged)
    rows = run.clients[run.clients["round"] == 2].set_index("client")
    m = module(sim1.model, g1)
    want, nums = [], []
    for c in range(ragged.num_clients):
        x, y = sim1.data.client_test(c)
        with torch.no_grad():
            probs = torch.softmax(m(x), dim=1).numpy()
        want.append(100 * _sklearn(probs, y.numpy(), ragged.num_classes))
        nums.append(len(y))
    # the same float32 forward pass and softmax: the AUCs agree to float64 rounding (measured 1.4e-14 in percent)
    np.testing.assert_allclose(rows["test_auc"].to_numpy(), want, atol=1e-9, rtol=0)
    pooled = run.rounds.set_index("round").loc[2, "auc"]
    assert pooled == pytest.approx(np.dot(want, nums) / np.sum(nums), abs=1e-9)
    assert 0 <= run.rounds["auc"].min() and run.rounds["auc"].max() <= 100  # percent


def test_auc_reaches_the_tables(ragged):
    cfg = small_cfg(algo="fedavg", rounds=3, model="mlp", lr=0.1, batch_size=4)
    runs = [run_sim(cfg.replace(seed=s), ragged)[1] for s in (0, 1)]
    table = accuracy_table(runs)
    finals = [r.rounds["auc"].dropna().iloc[-1] for r in runs]
    assert table.loc[0, "final_auc_mean"] == pytest.approx(np.mean(finals))
    assert table.loc[0, "best_auc_mean"] == pytest.approx(np.mean([r.rounds["auc"].max() for r in runs]))
    table["setting"] = "tiny"
    shown = layout_table(table, which="auc")
    assert list(shown.columns) == ["tiny (best AUC)", "tiny (final AUC)"]
