"""Forward passes over threads (compute/parallel.py): evaluation and ALA's feature pass give the same
numbers, bit for bit, in one thread or several. And the allocator setting that keeps freed memory for the next
step (compute/device.py) changes where memory comes from, not the numbers."""

import json
import os
import platform
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from conftest import assert_same_run, make_ragged_data, run_sim, small_cfg

from fedala_lab.algorithms.ala import WeightLearner
from fedala_lab.compute import backends
from fedala_lab.compute.parallel import ENV_FORWARD_THREADS, ENV_WORKERS, forward_threads, thread_map
from fedala_lab.models import build_model


def test_thread_map_keeps_order_and_gives_each_thread_its_own_context():
    made = []

    def per_thread():
        made.append(threading.get_ident())
        return {"thread": threading.get_ident()}

    def fn(i, ctx):
        assert ctx["thread"] == threading.get_ident()  # never another thread's context
        assert not torch.is_grad_enabled()
        return i * i

    assert thread_map(fn, range(50), threads=3, per_thread=per_thread) == [i * i for i in range(50)]
    assert 1 <= len(made) <= 3 and len(set(made)) == len(made)
    # one thread: the caller's context as given, in the calling thread
    mine = {"thread": threading.get_ident()}
    assert thread_map(fn, range(5), threads=1, ctx=mine, per_thread=per_thread) == [0, 1, 4, 9, 16]


def test_forward_threads_follow_the_workers_setting_and_torch_threads(monkeypatch):
    monkeypatch.setenv(ENV_WORKERS, "3")
    assert forward_threads("cpu") == 3
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # torch's own threads already share the cores: no threads of ours on top
        assert forward_threads("cpu") == 1
    finally:
        torch.set_num_threads(old)
    assert forward_threads("meta") == 1
    monkeypatch.setenv(ENV_FORWARD_THREADS, "1")
    assert forward_threads("cpu") == 1


def test_ala_features_are_the_same_in_one_thread_or_three(monkeypatch):
    model = build_model("fedavgcnn", (1, 28, 28), 10, seed=0)
    learner = WeightLearner(model, p=1, eta=1.0, batch_size=10, threshold=0.1, num_pre_loss=10,
                            max_start_epochs=5)
    assert learner.cached
    glob = {k: v.detach() + 0.01 * torch.randn_like(v) for k, v in model.named_parameters()}
    x = torch.randn(700, 1, 28, 28)  # three chunks of 256 rows, the last partial
    monkeypatch.setenv(ENV_WORKERS, "1")
    one = learner.features(glob, x)
    monkeypatch.setenv(ENV_WORKERS, "3")
    assert torch.equal(learner.features(glob, x), one)


@pytest.mark.parametrize("algo", ["fedala", "fedavg-c"])
def test_a_run_evaluated_in_threads_equals_one_thread(monkeypatch, algo):
    """Test and train-split evaluation (also of some clients only) and ALA, loop backend: bit for bit."""
    data = make_ragged_data(sizes=(23, 3, 41, 12, 30))
    cfg = small_cfg(algo=algo, backend="loop", record_train_loss=True, track_clients="all", finetune_epochs=1)
    monkeypatch.setenv(ENV_WORKERS, "1")
    single = run_sim(cfg, data)
    monkeypatch.setenv(ENV_WORKERS, "3")
    spread = []
    real = backends.thread_map
    monkeypatch.setattr(backends, "thread_map", lambda *a, **kw: spread.append(kw["threads"]) or real(*a, **kw))
    threaded = run_sim(cfg, data)
    assert spread and set(spread) == {3}  # every evaluation went through the threads
    assert_same_run(*single, *threaded)
    assert np.isfinite(threaded[1].rounds["trained_loss"]).all()


def test_loss_surface_is_the_same_in_one_thread_or_three(monkeypatch):
    from fedala_lab.analysis.landscape import LossFunction

    model = build_model("smallcnn", (1, 8, 8), 4, seed=0)
    names = [k for k, _ in model.named_parameters()]
    shapes = {k: list(v.shape) for k, v in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(12, 1, 8, 8, generator=g), torch.randint(0, 4, (12,), generator=g)
    loss = LossFunction(model, names, shapes, x, y, memory=40_000)  # a few grid points per chunk
    assert loss.chunk < 12
    anchor = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    basis = np.random.default_rng(0).normal(size=(2, len(anchor))) / 100
    xs, ys = np.linspace(-1, 1, 5), np.linspace(-1, 1, 4)
    monkeypatch.setenv(ENV_WORKERS, "1")
    one = loss.surface(anchor, basis, xs, ys)
    monkeypatch.setenv(ENV_WORKERS, "3")
    np.testing.assert_array_equal(loss.surface(anchor, basis, xs, ys), one)
    assert one.shape == (4, 5) and np.isfinite(one).all()


_FAULTS = r"""
import json, resource, torch
torch.set_num_threads(1)
import fedala_lab as fl
from fedala_lab.compute.device import keep_freed_memory
cfg = fl.preset("teach", algo="fedala", rounds=3)
fl.simulate(cfg, progress=False)  # imports and first allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
run = fl.simulate(cfg.replace(rounds=6), progress=False)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": keep_freed_memory(), "faults": faults, "acc": run.final_acc}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_memory_is_kept_for_the_next_step_unless_glibc_is_told_otherwise():
    """A run keeps the memory its steps free (compute/device.py keep_freed_memory): a fresh process's teach run
    faults in far fewer new pages than with glibc's own thresholds, which a MALLOC_* variable in the
    environment chooses instead; the results are the same."""
    def child(**env):
        out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, check=True,
                             env={**os.environ, **env}, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])

    kept, glibc = child(), child(MALLOC_TRIM_THRESHOLD_=str(128 << 10))
    assert kept["kept"] and not glibc["kept"]
    assert kept["faults"] * 5 < glibc["faults"], (kept, glibc)
    assert kept["acc"] == glibc["acc"]
