"""Shared fixtures. Everything runs on CPU, offline, with tiny data made here or, where present, the FedALA
repository's MNIST Dir(0.1) partition (tests that need it skip without it)."""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# cuBLAS picks a deterministic reduction only with a fixed workspace, set before CUDA starts (the gpu tests)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from pathlib import Path

import numpy as np
import pytest
import torch


def _shared_mnist() -> Path:
    """The real MNIST Dir(0.1) partition some tests read, where the presets look for it
    (experiments/presets.py: mnist_partition_dir); tests that need it skip without it."""
    from fedala_lab.experiments.presets import mnist_partition_dir

    return Path(mnist_partition_dir())


SHARED_MNIST = _shared_mnist()

# the lecture app's settings in its tests (test_app.py, test_app_e2e.py): 10 clients, seconds per run
APP_SMALL = {
    "dataset": "digits",
    "partition": "dirichlet",
    "num_clients": 10,
    "beta": 0.1,
    "classes_per_client": 2,
    "model": "mlp",
    "rounds": 5,
    "join_ratio": 1.0,
    "lr": 0.1,
    "batch_size": 10,
    "local_epochs": 1,
    "mu": 0.001,
    "stragglers": 0.0,
    "eta": 1.0,
    "s": 80.0,
    "p": 1,
    "seed": 0,
}

# -- devices: the oracle tests run on the CPU and, where there is one, again on a CUDA GPU (`-m gpu`) ------

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu,
                                              pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")])]


@pytest.fixture(params=DEVICES)
def device(request):
    """"cpu", then "cuda" (marked gpu, skipped without a GPU). On CUDA the test runs in float32 proper
    (no TF32 in convolutions, which torch allows by default) with deterministic kernels, so that what is
    exact on the CPU (μ = 0, a resumed run) is exact there too; comparisons across kernels (a vmapped,
    grouped convolution against one client's) get :func:`tol`."""
    if request.param == "cpu":
        yield "cpu"
        return
    flags = (torch.backends.cudnn, "allow_tf32", False), (torch.backends.cuda.matmul, "allow_tf32", False), \
            (torch.backends.cudnn, "deterministic", True), (torch.backends.cudnn, "benchmark", False)
    saved = [getattr(o, k) for o, k, _ in flags]
    for o, k, v in flags:
        setattr(o, k, v)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield "cuda"
    finally:
        torch.use_deterministic_algorithms(False)
        for (o, k, _), v in zip(flags, saved):
            setattr(o, k, v)


CUDA_TOL_FACTOR = 10  # CUDA's kernels sum in other orders than the CPU's and than each other's

# -- tolerances: one float32 result computed two correct ways ------------------------------------------------
# Where a test claims exactness it compares exactly (assert_same_run below: check_exact=True, torch.equal). A
# tolerance is for two computations of the same arithmetic in another order: the vectorised backend (all
# clients in one vmap call: batched matrix products, grouped convolutions) against the loop backend (a client
# at a time), the engine against a transcription written with nn.Modules, a fused SGD update against the
# plain one. Each sums in its own order, so the results differ by float rounding, and SGD carries such
# differences on from step to step. Measured on the CPU over this suite (torch 2.14, 3–5 rounds on the ragged
# data), the largest differences were:
#   one round or a few steps: 2.4e-7 (a loss, 2 ulp at 1.0), 1.2e-7 in a parameter or in ALA's W;
#   a run of 3–5 rounds:      2.5e-7 in a loss, 6e-8 in a parameter, 4.8e-7 in ALA's W.
# STEP_TOL and RUN_TOL are 4× and 20× those: room for another CPU, whose vector width sums in yet another
# order, the run's figure larger because rounding compounds over rounds. What they cannot see is a change of
# that size: FedProx with μ = 1e-4 instead of 0 moves 3 rounds by 2e-6 in the parameters and 4.5e-6 in the
# losses, which is why μ = 0 against FedAvg (and every other exactness claim) is compared bit for bit.
STEP_TOL = 1e-6
RUN_TOL = 1e-5


def tol(device: str, cpu: float) -> float:
    """An oracle's tolerance on ``device``: ``cpu`` on the CPU; on CUDA 10× that (at least 1e-5). Exact
    comparisons (tolerance 0) stay exact on both."""
    return cpu if device == "cpu" or cpu == 0 else max(cpu * CUDA_TOL_FACTOR, 1e-5)


torch.set_num_threads(1)  # tiny models: one thread is fastest and robust on a shared 2-core machine


def make_ragged_data(sizes=(23, 7, 41, 12, 30), test_sizes=(9, 5, 11, 4, 8), num_classes=4, shape=(1, 8, 8),
                     seed=0, skew=True):
    """Tiny federated data with unequal clients and label skew (each client favours two labels)."""
    from fedala_lab.data.federated import FederatedData

    g = np.random.default_rng(seed)
    protos = g.normal(size=(num_classes, *shape)).astype(np.float32)

    def client(n, c):
        fav = [c % num_classes, (c + 1) % num_classes]
        y = np.where(g.random(n) < 0.8, g.choice(fav, n), g.integers(0, num_classes, n)) if skew else \
            g.integers(0, num_classes, n)
        x = protos[y] + 0.8 * g.normal(size=(n, *shape)).astype(np.float32)
        return np.clip(x, -1, 1).astype(np.float32), y.astype(np.int64)

    train = [client(n, c) for c, n in enumerate(sizes)]
    test = [client(n, c) for c, n in enumerate(test_sizes)]
    return FederatedData.from_arrays(train, test, num_classes, name="ragged")


@pytest.fixture
def ragged():
    return make_ragged_data()


def small_cfg(**kw):
    """A config for the ragged data (its DataConfig: custom:ragged, by content): 5 clients, small CNN, a few
    rounds, on CPU."""
    from fedala_lab.config import RunConfig

    base = {"data": make_ragged_data().config(), "model": "smallcnn", "rounds": 3, "lr": 0.05, "batch_size": 4,
            "device": "cpu", "checkpoint_every": 0, "mu": 0.1}
    base.update(kw)
    return RunConfig(**base)


def run_sim(cfg, data, **kw):
    """A Simulation of ``cfg`` on ``data`` and its Run (warnings about clients without a batch hushed)."""
    from fedala_lab.engine.simulate import Simulation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the client without a batch is announced; not the point here
        sim = Simulation(cfg, data, **kw)
        return sim, sim.run(progress=False)


def assert_frames_exact(a, b, **kw):
    """Two frames equal value for value: ``check_exact=True`` (without it pandas compares floats at rtol
    1e-5), NaN only where the other has NaN, the same dtypes unless ``check_dtype=False`` is passed."""
    import pandas as pd

    pd.testing.assert_frame_equal(a, b, check_exact=True, **kw)


def assert_same_models(sim_a, sim_b):
    """Every client's model and buffers and the global model, bit for bit (``torch.equal``)."""
    for part in ("local_params", "global_params", "local_buffers"):
        a, b = getattr(sim_a, part), getattr(sim_b, part)
        assert a.keys() == b.keys(), part
        for n in a:
            assert torch.equal(a[n], b[n]), (part, n)


def assert_same_state(sim_a, sim_b):
    """The algorithm's round-to-round state (ALA's W, Ditto's personal models, ...), bit for bit."""
    from fedala_lab.algorithms.base import state_to_dict

    torch.testing.assert_close(state_to_dict(sim_a.state), state_to_dict(sim_b.state), atol=0, rtol=0)


def assert_same_records(a, b):
    """Two runs' records bit for bit: every table but wall-clock seconds, and every recorded array."""
    assert_frames_exact(a.clients.drop(columns="seconds"), b.clients.drop(columns="seconds"))
    seconds = [c for c in a.rounds if c.endswith("seconds")]
    assert_frames_exact(a.rounds.drop(columns=seconds), b.rounds.drop(columns=seconds))
    assert_frames_exact(a.ala, b.ala)
    assert a.tables.keys() == b.tables.keys()
    for name, frame in a.tables.items():
        assert_frames_exact(frame, b.tables[name])
    assert sorted(a.arrays) == sorted(b.arrays)
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k], err_msg=k)


def assert_same_run(sim_a, run_a, sim_b, run_b):
    """Bit for bit: every recorded number but wall-clock seconds, every model, buffer and state."""
    assert_same_records(run_a, run_b)
    assert_same_models(sim_a, sim_b)
    assert_same_state(sim_a, sim_b)


def assert_same_stored_run(a, b, store_a, store_b):
    """Two stored runs bit for bit: their records but wall-clock seconds, their arrays and the engine state the
    store keeps with each at its last round (every model, buffer and the algorithm's state)."""
    assert_same_records(a, b)
    sa, sb = store_a.load_state(a.path, a.config.rounds), store_b.load_state(b.path, b.config.rounds)
    for part in ("global", "local", "buffers"):
        assert sa[part].keys() == sb[part].keys()
        for k in sa[part]:
            assert torch.equal(sa[part][k], sb[part][k]), (part, k)
    if sa["state"] is None:
        assert sb["state"] is None
    else:
        torch.testing.assert_close(sa["state"], sb["state"], atol=0, rtol=0)
    assert a.meta.get("capped_clients") == b.meta.get("capped_clients")
