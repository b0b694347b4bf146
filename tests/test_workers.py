"""The "workers" backend (compute/workers.py): local training in worker processes equals the loop backend
bit for bit, whatever the number of workers; resume, determinism; no worker outlives its run.

Spawning a worker costs seconds (it imports torch), so the exactness tests share one module-scoped pool of
two workers (``Simulation(..., workers=pool)``); the lifecycle tests start their own.
"""

import os
import signal

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, STEP_TOL, assert_same_run, make_ragged_data, run_sim, small_cfg

from fedala_lab.algorithms.base import SMALL_MODEL, resolve_backend
from fedala_lab.compute.backends import BatchPlan
from fedala_lab.compute.workers import WorkerError, WorkerPool
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import ConfigError, RunCancelled

# ragged clients; client 1 holds 3 train samples: one partial batch (drop_last=False) or none (True)
SIZES = (23, 3, 41, 12, 30)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2) as p:
        yield p


@pytest.fixture(scope="module")
def data():
    return make_ragged_data(sizes=SIZES)


ALGOS = {
    "fedavg": {},
    "fedprox": {"mu": 0.5},
    "fedavg-c": {"finetune_epochs": 2},
    "fedlama": {"tau0": 3, "phi": 2},
    "fedala": {"s": 60},  # ALA's own steps run here (loop); local training in the workers
    # the pFL methods' own steps (compute.steps.recipe_step) and SGD with per-client anchors, in the workers
    "pfedme": {"pfedme_k": 2},
    "perfedavg": {},
    "apple": {},
    "fedphp": {},
    "ditto": {},
}


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("algo", list(ALGOS))
def test_workers_equal_loop_bit_for_bit(algo, drop_last, data, pool):
    # ragged sizes, partial last batches (or a client without a batch), reshuffled epochs, 3 of 5 clients
    cfg = small_cfg(algo=algo, shuffle=True, drop_last=drop_last, join_ratio=0.6, rounds=3, **ALGOS[algo])
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), data)
    sim_w, run_w = run_sim(cfg.replace(backend="workers"), data, workers=pool)
    assert run_w.meta["env"]["backend"] == "workers" and run_w.meta["env"]["workers"] == 2
    assert len(sim_w.backend.calls) >= cfg.rounds  # every round trained in the worker processes
    assert_same_run(sim_l, run_l, sim_w, run_w)
    # every client's training seconds (Round.train and Round.run_steps time them alike); 0: it did not train
    assert (run_w.clients.loc[run_w.clients["selected"], "seconds"] >= 0).all()
    assert (run_w.clients.loc[~run_w.clients["selected"], "seconds"] == 0).all()


def test_alternating_layouts_are_set_up_once_per_run(data, pool, monkeypatch):
    # Per-FedAvg adapts each client by an SGD step before evaluation (shared: G) and trains with its own step
    # (shared: nothing): two layouts of shared memory, each handed to the workers once, not once per call
    setups = []
    real = pool._exchange

    def counting(first, *, expect, **kw):
        setups.append(expect)
        return real(first, expect=expect, **kw)

    monkeypatch.setattr(pool, "_exchange", counting)
    run_sim(small_cfg(algo="perfedavg", rounds=3, backend="workers"), data, workers=pool)
    assert setups.count("ready") == 2 and setups.count("done") == 6  # 3 rounds × (adapt, train)


def tiny_bn_model():
    """A conv net with batch norm (what a worker trains: the model, plain SGD)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 4))


def test_batch_norm_buffers_stay_per_client_and_equal_the_loop(data, pool):
    from fedala_lab.compute.backends import LoopBackend
    from fedala_lab.compute.steps import SGD, make_sgd_step
    from fedala_lab.compute.workers import WorkerBackend

    model = tiny_bn_model()
    step = make_sgd_step(model, SGD(0.1))
    carry = {"params": {k: v.detach().unsqueeze(0).repeat(4, *[1] * v.dim()) for k, v in model.named_parameters()},
             "buffers": {k: v.unsqueeze(0).repeat(4, *[1] * v.dim()) for k, v in model.named_buffers()}}
    g = np.random.default_rng(0)  # four clients: 3, 0, 2 and 1 batches, the last ones partial
    batches = [[g.choice(100, n) for n in sizes] for sizes in ([4, 4, 3], [], [4, 1], [2])]
    plan = BatchPlan.from_batches(batches, "cpu")
    x, y = data.train_x, data.train_y
    ref, ref_aux = LoopBackend().run(step, carry, {}, plan, x, y, train=True, model=model)
    times = []
    backend = WorkerBackend(model, workers=pool, capacity=4)
    got, got_aux = backend.run(step, carry, {}, plan, x, y, train=True, model=model, timings=times)
    for part in ("params", "buffers"):
        for k in ref[part]:
            assert torch.equal(ref[part][k], got[part][k]), k
    np.testing.assert_array_equal(ref_aux, got_aux)  # NaN where a client had no k-th batch
    assert got["buffers"]["1.num_batches_tracked"].tolist() == [3, 0, 2, 1]
    assert not torch.equal(got["buffers"]["1.running_mean"][0], got["buffers"]["1.running_mean"][2])
    assert torch.equal(got["params"]["0.weight"][1], carry["params"]["0.weight"][1])  # no batch: unchanged
    assert len(times) == 4 and times[1] == 0.0


def test_worker_count_does_not_change_the_result_and_runs_repeat(data, pool):
    cfg = small_cfg(algo="fedprox", shuffle=True, join_ratio=0.6, rounds=2, backend="workers")
    two = run_sim(cfg, data, workers=pool)
    again = run_sim(cfg, data, workers=pool)
    one = run_sim(cfg, data, workers=1)  # in this process
    assert one[1].meta["env"]["worker_processes"] is False and two[1].meta["env"]["worker_processes"] is True
    assert_same_run(*two, *again)
    assert_same_run(*two, *one)
    other = run_sim(cfg.replace(seed=1), data, workers=pool)
    assert not two[1].clients["test_loss"].equals(other[1].clients["test_loss"])


def test_resume_with_workers_equals_uninterrupted(data, pool, tmp_path):
    cfg = small_cfg(algo="fedala", rounds=4, checkpoint_every=2, shuffle=True, join_ratio=0.6, backend="workers")
    full = run_sim(cfg, data, workers=pool)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(RunCancelled):
        Simulation(cfg, data, workers=pool).run(progress=False, callback=lambda sim, row: row["round"] < 2,
                                                checkpoint=ckpt)
    resumed = Simulation(cfg, data, workers=pool)
    assert resumed.load_checkpoint(ckpt) and resumed.round == 2
    assert_same_run(*full, resumed, resumed.run(progress=False, checkpoint=ckpt))


@pytest.mark.parametrize("algo", ["fedavg", "fedala", "fedamp+ala"])
def test_channels_last_agrees_to_float_rounding(algo, data, pool):
    # training, evaluation and ALA's feature pass in that format (FedAMP+ALA: a G per client, whose conv
    # weights come stacked); the data's images have one channel, the case torch's strides make ambiguous
    assert data.train_x.shape[1] == 1
    cfg = small_cfg(algo=algo, rounds=3, drop_last=False)
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), data)
    sim_c, run_c = run_sim(cfg.replace(backend="workers"), data, workers=pool, channels_last=True)
    assert run_c.meta["env"]["channels_last"] is True
    # other convolution kernels: RUN_TOL (conftest), measured 6e-8 in a parameter, 1.2e-7 in a loss
    for n in sim_l.param_names:
        torch.testing.assert_close(sim_c.local_params[n], sim_l.local_params[n], atol=RUN_TOL, rtol=0)
    for col in ("train_loss", "test_loss", "test_acc"):
        np.testing.assert_allclose(run_c.clients[col], run_l.clients[col], atol=RUN_TOL, rtol=0)


@pytest.mark.parametrize("algo", ["fedavg", "fedprox", "fedrep", "fedala"])
def test_fused_linear_agrees_to_float_rounding(algo, data, pool):
    # the linear layers' updates inside the backward pass; FedProx adds its objective's gradient after it,
    # FedRep trains the head and the body in turns (a frozen layer is not fused)
    cfg = small_cfg(algo=algo, rounds=3, drop_last=False)
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), data)
    sim_f, run_f = run_sim(cfg.replace(backend="workers"), data, workers=pool, fused_linear=True)
    assert run_f.meta["env"]["fused_linear"] is True
    diff = max((sim_f.local_params[n] - sim_l.local_params[n]).abs().max().item() for n in sim_l.param_names)
    # other arithmetic (one addmm_, not bit for bit), the same training: RUN_TOL (conftest), measured 2.4e-7 in a loss
    assert 0 < diff < RUN_TOL
    for col in ("train_loss", "test_loss", "test_acc"):
        np.testing.assert_allclose(run_f.clients[col], run_l.clients[col], atol=RUN_TOL, rtol=0)


# the pFL methods with module forms of their steps (compute.steps.Recipe.trainer), and Ditto's/FedProx's pull
MODULE_FORMS = {"pfedme": {"pfedme_k": 2}, "apple": {}, "fedphp": {"fedphp_lambda": 0.3}, "ditto": {},
                "fedprox": {}}


@pytest.mark.parametrize("algo", list(MODULE_FORMS))
def test_module_forms_agree_to_float_rounding(algo, data, pool):
    # backend="auto"'s kernels (channels-last, fused updates): pFedMe's, APPLE's and FedPHP's steps run as
    # module forms on an InPlaceModel, Ditto's and FedProx's proximal term as a pull inside the fused update
    cfg = small_cfg(algo=algo, rounds=3, drop_last=False, shuffle=True, join_ratio=0.6, **MODULE_FORMS[algo])
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), data)
    sim_f, run_f = run_sim(cfg.replace(backend="workers"), data, workers=pool, channels_last=True, fused_linear=True)
    diff = max((sim_f.local_params[n] - sim_l.local_params[n]).abs().max().item() for n in sim_l.param_names)
    # other arithmetic (not bit for bit), the same training: RUN_TOL (conftest)
    assert 0 < diff < RUN_TOL
    for col in ("train_loss", "test_loss", "test_acc"):
        np.testing.assert_allclose(run_f.clients[col], run_l.clients[col], atol=RUN_TOL, rtol=0)
    state_l, state_f = sim_l.state, sim_f.state  # personal models, relationship vectors, private models
    for field in ("params", "p"):
        if hasattr(state_l, field):
            got, want = getattr(state_f, field), getattr(state_l, field)
            for k in (want if isinstance(want, dict) else {"": want}):
                a, b = (got[k], want[k]) if k else (got, want)
                torch.testing.assert_close(a, b, atol=RUN_TOL, rtol=0)


@pytest.mark.parametrize("algo", ["pfedme", "apple", "fedphp"])
def test_module_forms_run_only_with_the_faster_kernels(algo, data):
    from fedala_lab.compute.workers import _runner, _StepRunner

    sim = Simulation(small_cfg(algo=algo, backend="workers", drop_last=False), data, workers=1)
    recipe = sim.algo.step.recipe
    assert recipe.trainer is not None
    assert type(_runner(sim.model, (False, False), recipe)) is _StepRunner  # the loop's arithmetic, bit for bit
    for kernels in [(True, False), (False, True), (True, True)]:
        assert type(_runner(sim.model, kernels, recipe)) is recipe.trainer


class _Twice(torch.nn.Module):
    """Calls one linear layer twice in a forward pass: its weight must not change between the backward uses."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(64, 8)
        self.mid = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.inp(x.flatten(1)))
        return self.out(torch.relu(self.mid(torch.relu(self.mid(h)))))


class _Tied(torch.nn.Module):
    """Two linear layers sharing one weight (a weight's gradient is the sum of both uses)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 4)
        self.c = torch.nn.Linear(64, 64)
        self.c.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.relu(self.c(torch.relu(self.a(x.flatten(1))))))


@pytest.mark.parametrize("make", [_Twice, _Tied])
def test_fused_trainer_leaves_shared_layers_to_the_plain_update(make):
    from fedala_lab.compute.steps import SGD
    from fedala_lab.compute.workers import _Trainer

    torch.manual_seed(0)
    model = make()
    x, y = torch.randn(12, 1, 8, 8), torch.randint(0, 4, (12,))
    rows, sizes = np.arange(12).reshape(3, 4), np.array([4, 4, 4])
    out = {}
    for fused in (False, True):
        trainer = _Trainer(model, SGD(lr=0.1), channels_last=False, fused_linear=fused)
        carry = {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "buffers": {}}
        out[fused] = (trainer.train_client(carry, {}, x, y, rows, sizes), carry["params"], trainer.fused)
    losses, params, fused_names = out[True]
    # three steps, fused against plain where a layer is fusable: STEP_TOL (conftest), measured 1.5e-8
    np.testing.assert_allclose(losses, out[False][0], rtol=0, atol=STEP_TOL)
    for n in params:
        torch.testing.assert_close(params[n], out[False][1][n], atol=STEP_TOL, rtol=0)
    if make is _Twice:  # mid is called twice: the first step found it and the trainer went back to plain
        assert fused_names == set()
    else:  # the tied weight is never fused; the untied output layer is
        assert fused_names == {"b.weight", "b.bias"}


def test_auto_picks_workers_for_large_models_on_a_cpu_only():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert resolve_backend("auto", cpu, SMALL_MODEL) == "workers"
    assert resolve_backend("auto", cpu, SMALL_MODEL - 1) == "vectorised"
    assert resolve_backend("auto", gpu, SMALL_MODEL) == "vectorised"
    with pytest.raises(ConfigError, match="chunk_clients"):
        Simulation(small_cfg(backend="workers"), make_ragged_data(), chunk_clients=2)


# ------------------------------------------------------------------ no worker outlives its run


def gone(pids) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_no_worker_left_after_a_run_a_cancel_or_an_interrupt(data):
    cfg = small_cfg(algo="fedavg", rounds=3, backend="workers")
    seen = []

    def note(sim, row):
        seen.append(list(sim.backend.pids))

    sim = Simulation(cfg, data, workers=2)
    sim.run(progress=False, callback=note)
    assert len(seen[0]) == 2 and all(p == seen[0] for p in seen)  # started once, kept for every round
    assert gone(seen[0]) and sim.backend.pids == []

    def cancel():
        return False

    def interrupt():
        raise KeyboardInterrupt

    for stop, error in ((cancel, RunCancelled), (interrupt, KeyboardInterrupt)):

        def callback(sim, row, stop=stop):
            note(sim, row)
            return stop()

        with pytest.raises(error):
            Simulation(cfg, data, workers=2).run(progress=False, callback=callback)
        assert gone(seen[-1])


def test_a_failing_or_dying_worker_is_one_clear_error_and_leaves_no_process(data):
    cfg = small_cfg(algo="fedavg", rounds=3, backend="workers")
    sim = Simulation(cfg, data, workers=2)
    clients = torch.arange(2)

    def train(plan):
        return sim.round_view(1).train(clients, plan)

    train(sim.setup.plan(1, clients, epochs=1))
    pids = sim.backend.pids
    bad = BatchPlan(torch.full((2, 1, 4), 10**6), np.full((2, 1), 4))  # rows past the data: IndexError there
    with pytest.raises(IndexError) as info:
        train(bad)
    assert "raised in training worker process" in "".join(info.value.__notes__)
    assert "Traceback" in str(info.value.__cause__)  # the worker's own traceback
    assert len(pids) == 2 and gone(pids) and sim.backend.pids == []
    train(sim.setup.plan(1, clients, epochs=1))  # the next call starts afresh
    sim.close()

    def kill_one(sim, row):
        os.kill(sim.backend.pids[0], signal.SIGKILL)

    sim = Simulation(cfg, data, workers=2)
    with pytest.raises(WorkerError, match=r"died \(exit code -9\)"):
        sim.run(progress=False, callback=kill_one)
    assert sim.backend.pids == []
