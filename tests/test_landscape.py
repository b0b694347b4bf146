"""Fig. 4 analysis: the shared PCA plane, the loss surface and the paper's ALA-after-K protocol.

Oracles: the PCA plane against scikit-learn's PCA; the loss surface and the points' true losses against
a model loaded with ``vector_to_parameters`` and run directly (not through vmap/functional_call).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import STEP_TOL

from fedala_lab.analysis.landscape import compute_landscape, pca_directions, project
from fedala_lab.errors import ConfigError, DataError
from fedala_lab.experiments.plans import fig4_configs, fig4_window
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import fig4_runs, get_or_run
from fedala_lab.record.store import RunStore

K, WINDOW, CLIENT = 3, (2, 6), 4


def tiny_pat(**kw):
    """The quick preset's Fig. 4 setting (digits, 20 clients × 2 labels, MLP), a few rounds."""
    return preset("teach", partition="pathological", classes_per_client=2, device="cpu", **kw)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return RunStore(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def runs(store):
    return fig4_runs(tiny_pat(), K=K, window=WINDOW, client=CLIENT, store=store)


@pytest.fixture(scope="module")
def landscape(runs):
    fa, fl = runs
    return compute_landscape({"FedAvg": fa, "FedALA": fl}, CLIENT, rounds=WINDOW, grid=(7, 5), num_samples=20)


def direct_loss(run, flat: np.ndarray, x, y) -> float:
    """Cross-entropy of the run's model with these flat parameters, computed without the vmap path."""
    from fedala_lab.data.federated import FederatedData
    from fedala_lab.models import build_model

    data = FederatedData.from_config(run.config.data)
    model = build_model(run.config.model, data.input_shape, data.num_classes).eval()
    torch.nn.utils.vector_to_parameters(torch.as_tensor(flat, dtype=torch.float32), model.parameters())
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x), y))


# ---------------------------------------------------------------------------------------------- PCA


def test_pca_directions_match_sklearn_and_are_orthonormal():
    from sklearn.decomposition import PCA

    g = np.random.default_rng(0)
    pts = g.normal(size=(30, 50)) * np.linspace(3, 0.1, 50)  # decreasing variance per coordinate
    anchor = pts[-1]
    basis, ratio = pca_directions(pts, anchor)
    ref = PCA(n_components=2).fit(pts - anchor)
    # float64 throughout, SVD here against sklearn's: rounding near 1e-15 (measured ≤ 5e-16 relative, 7e-16
    # absolute); the bounds below are 1e-9 to 1e-12, far above that and far below any real difference
    np.testing.assert_allclose(ratio, ref.explained_variance_ratio_, rtol=1e-9)
    np.testing.assert_allclose(np.abs(basis @ ref.components_.T), np.eye(2), atol=1e-9)  # same axes up to sign
    np.testing.assert_allclose(basis @ basis.T, np.eye(2), atol=1e-12)
    xy, res = project(pts, anchor, basis)
    np.testing.assert_allclose(xy[-1], 0, atol=1e-12)  # the anchor is the origin
    d = pts - anchor
    np.testing.assert_allclose(res ** 2 + (xy ** 2).sum(1), (d ** 2).sum(1), rtol=1e-9)  # Pythagoras


def test_pca_refuses_degenerate_points():
    with pytest.raises(DataError, match="at least 3"):
        pca_directions(np.zeros((2, 5)), np.zeros(5))
    line = np.outer(np.arange(5.0), np.ones(4))  # all points on one line: no second direction
    with pytest.raises(DataError, match="fewer than 2 dimensions"):
        pca_directions(line, line[0])


# ------------------------------------------------------------------------------------------ protocol


def test_fig4_protocol_shares_the_first_k_rounds(runs):
    fa, fl = runs
    assert fa.config.algo == "fedavg" and fl.config.algo == "fedala" and fl.config.ala_after == K
    assert fa.config.rounds == fl.config.rounds == WINDOW[1]
    r_a, s_a, e_a = fa.snapshots(CLIENT)
    r_l, s_l, e_l = fl.snapshots(CLIENT)
    np.testing.assert_array_equal(r_a, np.arange(WINDOW[0], WINDOW[1] + 1))
    np.testing.assert_array_equal(r_a, r_l)
    before = r_a <= K  # ALA off: FedALA is FedAvg, bit for bit on CPU
    np.testing.assert_array_equal(s_a[before], s_l[before])
    np.testing.assert_array_equal(e_a[before], e_l[before])
    assert not np.allclose(s_a[~before], s_l[~before], atol=1e-4)  # ALA on: the initialisations differ
    assert set(fl.ala["round"]) == set(range(K + 1, WINDOW[1] + 1))


def test_fig4_runs_reuses_the_store_and_adds_missing_snapshots(store, runs):
    again = fig4_runs(tiny_pat(), K=K, window=WINDOW, client=CLIENT, store=store)
    assert [r.path for r in again] == [r.path for r in runs]
    # the same result recorded without snapshots (they are not part of the key) is recomputed with them
    cfg = tiny_pat(rounds=4, algo="fedavg")
    plain = get_or_run(cfg, store, progress=False)
    assert "snap_rounds/1" not in plain.arrays
    fa, _ = fig4_runs(tiny_pat(), K=2, window=(3, 4), client=1, store=store)
    assert fa.config.key() == cfg.key()
    assert list(fa.snapshots(1)[0]) == [3, 4]


def test_fig4_configs_validate():
    with pytest.raises(ConfigError, match="K="):
        fig4_configs(tiny_pat(), K=6, window=(2, 6), client=0)
    with pytest.raises(ConfigError, match="window"):
        fig4_configs(tiny_pat(), K=1, window=(5, 2), client=0)
    with pytest.raises(ConfigError, match="client"):
        fig4_runs(tiny_pat(), K=1, window=(2, 3), client=-1)
    with pytest.raises(ConfigError, match="client=99 is not allowed: a client id from 0 to"):
        fig4_configs(tiny_pat(), K=1, window=(2, 3), client=99)


def test_fig4_window_shows_rounds_before_k():
    assert fig4_window(30, 2, 40) == (28, 40)
    assert fig4_window(1, 5, 40) == (1, 40)  # never before round 1
    with pytest.raises(ConfigError, match="K=40 is not allowed: an integer with 0 <= K < 40"):
        fig4_window(40, 2, 40)
    with pytest.raises(ConfigError, match="rounds before K=-1"):
        fig4_window(3, -1, 40)


# ------------------------------------------------------------------------------------------- surface


def test_shared_basis_projects_both_runs(runs, landscape):
    fa, fl = runs
    assert [t.label for t in landscape.trajectories] == ["FedAvg", "FedALA"]
    b = landscape.basis
    np.testing.assert_allclose(b @ b.T, np.eye(2), atol=1e-10)
    for run, t in zip((fa, fl), landscape.trajectories):
        r, s, e = run.snapshots(CLIENT)
        np.testing.assert_array_equal(t.rounds, r)
        xy = (e.astype(np.float64) - landscape.anchor) @ b.T
        np.testing.assert_allclose(t.end_xy, xy, atol=1e-8)
        np.testing.assert_allclose(t.start_xy, (s.astype(np.float64) - landscape.anchor) @ b.T, atol=1e-8)
    # FedALA's last trained model is the anchor: the origin, on the plane
    np.testing.assert_allclose(landscape["FedALA"].end_xy[-1], 0, atol=1e-10)
    assert landscape["FedALA"].end_residual[-1] == pytest.approx(0, abs=1e-8)
    # every projected point lies inside the surface's grid
    pts = landscape.points()
    assert len(pts) == 2 * 2 * (WINDOW[1] - WINDOW[0] + 1)
    assert pts["x"].between(landscape.xs[0], landscape.xs[-1]).all()
    assert pts["y"].between(landscape.ys[0], landscape.ys[-1]).all()
    assert 0 < landscape.explained_variance.sum() <= 1 + 1e-12


def test_surface_values_match_direct_evaluation(runs, landscape):
    # the surface's vmapped float32 forward pass against one module call: measured ≤ 2.4e-7 apart; STEP_TOL
    from fedala_lab.analysis.landscape import client_subset
    from fedala_lab.data.federated import FederatedData

    fa, fl = runs
    assert landscape.loss.shape == (5, 7)
    x, y = client_subset(FederatedData.from_config(fl.config.data), CLIENT, 20, "train", 0)
    assert len(y) == landscape.num_samples == 20
    for i, j in [(0, 0), (2, 3), (4, 6), (1, 5)]:
        flat = landscape.anchor + landscape.xs[j] * landscape.basis[0] + landscape.ys[i] * landscape.basis[1]
        assert landscape.loss[i, j] == pytest.approx(direct_loss(fl, flat, x, y), rel=0, abs=STEP_TOL)
    # the markers' true losses are the models' own (not their projections')
    _, s, e = fa.snapshots(CLIENT)
    t = landscape["FedAvg"]
    assert t.end_loss[-1] == pytest.approx(direct_loss(fa, e[-1], x, y), rel=0, abs=STEP_TOL)
    assert t.start_loss[0] == pytest.approx(direct_loss(fa, s[0], x, y), rel=0, abs=STEP_TOL)


def test_landscape_arguments_are_checked(runs):
    fa = runs[0]
    with pytest.raises(DataError, match="no snapshots"):
        compute_landscape({"a": fa}, CLIENT, rounds=(50, 60))
    with pytest.raises(KeyError, match="snapshot"):
        compute_landscape({"a": fa}, client=0)
    with pytest.raises(ConfigError, match="grid"):
        compute_landscape({"a": fa}, CLIENT, grid=1)


def test_surface_of_a_cnn_matches_direct_evaluation(store):
    """Convolutions under vmap (the paper's CNN path), on the small CNN for 8×8 digits: to float rounding."""
    from fedala_lab.analysis.landscape import client_subset
    from fedala_lab.data.federated import FederatedData

    base = preset("teach", model="smallcnn", num_clients=5, device="cpu")
    fa, fl = fig4_runs(base, K=1, window=(1, 3), client=0, store=store)
    ls = compute_landscape({"FedAvg": fa, "FedALA": fl}, 0, grid=(3, 2), num_samples=16)
    x, y = client_subset(FederatedData.from_config(fl.config.data), 0, 16, "train", 0)
    for i, j in [(0, 0), (1, 2)]:
        flat = ls.anchor + ls.xs[j] * ls.basis[0] + ls.ys[i] * ls.basis[1]
        assert ls.loss[i, j] == pytest.approx(direct_loss(fl, flat, x, y), rel=0, abs=STEP_TOL)
