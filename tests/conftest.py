"""Shared fixtures. Everything runs on CPU, offline, with tiny data made here or ../shared/data."""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from pathlib import Path

import numpy as np
import pytest
import torch

# next to the checkout (or $FEDALA_LAB_SHARED_DATA), else where these machines keep it for a clone elsewhere
SHARED_MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fedala-mnist-dir0.1"
if os.environ.get("FEDALA_LAB_SHARED_DATA"):
    SHARED_MNIST = Path(os.environ["FEDALA_LAB_SHARED_DATA"]) / "fedala-mnist-dir0.1"
elif not SHARED_MNIST.is_dir():
    SHARED_MNIST = Path("/work/shared/data/fedala-mnist-dir0.1")

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
    """A config for the ragged data: 5 clients, small CNN, a few rounds, on CPU."""
    from fedala_lab.config import DataConfig, RunConfig

    base = {"data": DataConfig(num_clients=5), "model": "smallcnn", "rounds": 3, "lr": 0.05, "batch_size": 4,
            "device": "cpu", "checkpoint_every": 0, "mu": 0.1}
    base.update(kw)
    return RunConfig(**base)
