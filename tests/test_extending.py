"""Open to research: your own algorithm (registered spec on the round interface), model and data, under a run
key that cannot lie (docs/extending.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, assert_same_run, make_ragged_data, run_sim, small_cfg
from test_pfllib import _make_partition

import fedala_lab as fl
from fedala_lab.algorithms import registry
from fedala_lab.algorithms.ala import ALA
from fedala_lab.algorithms.local import Local
from fedala_lab.config import DataConfig, RunConfig
from fedala_lab.errors import ConfigError
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_the_extension_guides_first_example_runs_as_written(tmp_path):
    first = _blocks()[0]
    assert len(first.strip().splitlines()) <= 40
    out = subprocess.run([sys.executable, "-c", first], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["FedAvg", "FedAvgM", "FedAvgM+ALA"]
    best = [float(ln.split()[2]) for ln in lines]
    assert all(b > 20 for b in best)  # above chance (10 %) on the embedded MNIST subset
    assert len([d for d in (tmp_path / "runs").iterdir() if not d.name.startswith(".")]) == 3


def test_the_guides_custom_model_and_data_example_runs(tmp_path):
    out = subprocess.run([sys.executable, "-c", _blocks()[1]], check=False, cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    dataset, model, _ = out.stdout.split()
    assert dataset == "custom:mine" and model.startswith("custom:")


# -- a registered algorithm: FedAvg with server momentum ---------------------------------------------


class FedAvgM(fl.Algorithm):
    def init_state(self, setup):
        return {"velocity": {n: torch.zeros(s, device=setup.device) for n, s in setup.shapes.items()}}

    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        v, beta = rnd.state["velocity"], self.cfg.server_beta
        for n, g in rnd.global_params.items():
            v[n] = beta * v[n] + (g - mean.params[n])
        return fl.Aggregated({n: g - v[n] for n, g in rnd.global_params.items()}, mean.bytes)


@pytest.fixture(scope="module", autouse=True)
def fedavgm():
    fl.register_algorithm("fedavgm", FedAvgM, label="FedAvgM", params=[
        fl.Param("server_beta", 0.9, fl.Float(0, 1, hi_open=True), "server momentum β")])


def test_its_hyper_parameter_is_a_setting_checked_and_in_the_key():
    a = RunConfig(algo="fedavgm", server_beta=0.5)
    assert a.server_beta == 0.5 and RunConfig(algo="fedavgm").server_beta == 0.9
    assert a.key() != a.replace(server_beta=0.9).key()
    assert RunConfig(algo="fedavg", server_beta=0.5).key() == RunConfig(algo="fedavg").key()  # not FedAvg's
    assert "server_beta" in a.to_dict() and RunConfig.from_dict(a.to_dict()) == a
    with pytest.raises(ConfigError, match=r"server_beta=1.5 is not allowed: a finite number >= 0 and < 1"):
        RunConfig(algo="fedavgm", server_beta=1.5)
    assert "server_beta" in fl.config.describe_settings()


def test_a_changed_hyper_parameter_is_another_run_in_the_store(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavgm", rounds=3, server_beta=0.5)
    first = get_or_run(cfg, store, data=ragged, progress=False)
    other = get_or_run(cfg.replace(server_beta=0.0), store, data=ragged, progress=False)
    assert first.path != other.path and not first.rounds["acc"].equals(other.rounds["acc"])
    assert get_or_run(cfg, store, data=ragged, progress=False).path == first.path


def test_momentum_zero_is_fedavg_to_float_rounding(ragged):
    # β = 0: G − (G − mean) is the mean up to one rounding, which SGD carries on: RUN_TOL (conftest), measured
    # 8.7e-8 over these 3 rounds
    _, avg = run_sim(small_cfg(algo="fedavg", rounds=3, shuffle=True), ragged)
    _, m0 = run_sim(small_cfg(algo="fedavgm", rounds=3, shuffle=True, server_beta=0.0), ragged)
    np.testing.assert_allclose(avg.clients["test_loss"], m0.clients["test_loss"], atol=RUN_TOL, rtol=0)


def test_ala_on_it_composes_the_states(ragged):
    sim, run = run_sim(small_cfg(algo="fedavgm+ala", rounds=3, server_beta=0.5, s=60), ragged)
    assert run.config.algorithm.label == "FedAvgM+ALA" and len(run.ala) > 0
    assert set(sim.state.inner) == {"velocity"} and sim.state.weights  # ALA's state around FedAvgM's
    assert float(sim.state.inner["velocity"]["fc.bias"].abs().sum()) > 0


def test_loop_and_workers_bit_for_bit_and_vectorised_to_float_rounding(ragged):
    cfg = small_cfg(algo="fedavgm", rounds=3, shuffle=True, join_ratio=0.6, server_beta=0.5)
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), ragged)
    sim_w, run_w = run_sim(cfg.replace(backend="workers"), ragged, workers=2)
    assert run_w.meta["env"]["worker_processes"] is True
    assert_same_run(sim_l, run_l, sim_w, run_w)  # bit for bit
    sim_v, _ = run_sim(cfg.replace(backend="vectorised"), ragged)  # one vmap call: float rounding, RUN_TOL
    for n in sim_l.param_names:
        torch.testing.assert_close(sim_v.global_params[n], sim_l.global_params[n], atol=RUN_TOL, rtol=0)


def test_registration_refuses_clashes():
    with pytest.raises(ValueError, match="built-in"):
        fl.register_algorithm("fedavg", FedAvgM)
    with pytest.raises(ValueError, match="declared by fedavgm"):
        fl.register_algorithm("other", FedAvgM, params=[fl.Param("server_beta", 0.1, fl.Float(0, 1))])
    with pytest.raises(ValueError, match="config field"):
        fl.register_algorithm("other", FedAvgM, params=[fl.Param("lr", 0.1, fl.Float(0, 1))])
    with pytest.raises(ValueError, match="end in a modifier's suffix"):
        fl.register_algorithm("mine-c", FedAvgM)
    assert "other" not in registry.names()


class Alone(fl.Algorithm):
    """Each client keeps its own model: Local's rounds, as a plugin of its own."""

    def initialise(self, rnd, clients):
        return Local.initialise(self, rnd, clients)

    def aggregate(self, rnd, senders):
        return Local.aggregate(self, rnd, senders)


def _alone_note(run, label):
    return f"*{label}* spoke in round {int(run.acc.index[-1])} at {run.acc.iloc[-1]:.1f} %"


def test_a_plugins_role_and_note_are_read_by_the_faces_as_the_built_ins_are(ragged, monkeypatch):
    """No face names a method: the app's verdict finds a plugin's "no-federation" role, the curve notes its
    words, and the role is checked."""
    from fedala_lab.analysis.notes import curve_notes
    from fedala_lab.webapp.tabs.train import verdict

    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))  # registered for this test only
    fl.register_algorithm("alone", Alone, label="Alone", modifiers=(), role="no-federation", curve_note=_alone_note)
    assert registry.with_role("no-federation") == ["local", "alone"] and registry.with_role("reference") == ["fedavg"]
    _, run = run_sim(small_cfg(algo="alone", rounds=2), ragged)
    assert curve_notes([run]) == [f"*Alone* spoke in round 2 at {run.acc.iloc[-1]:.1f} %"]
    _, avg = run_sim(small_cfg(algo="fedavg", rounds=2), ragged)
    said, _ = verdict([avg, run], ["FedAvg", "Alone"])  # Alone stands where Local would: federating is asked
    assert "**Does federating pay? One seed cannot say:**" in said and "Alone" in said and "Tick *Local*" not in said
    _, prox = run_sim(small_cfg(algo="fedprox", rounds=2), ragged)
    assert "Tick *Local*" in verdict([avg, prox], ["FedAvg", "FedProx"])[0]  # a method without the role: none alone
    with pytest.raises(ConfigError, match=r"role='alone' is not allowed: one of reference, no-federation"):
        fl.register_algorithm("other", Alone, role="alone")


# -- your own data and model: keyed by content, never by path -----------------------------------------


def test_a_run_on_other_data_is_never_served_for_the_built_in_data(tmp_path):
    store = RunStore(tmp_path)
    cfg = fl.preset("teach", algo="fedavg", rounds=2, num_clients=5)
    mine = make_ragged_data()
    custom = get_or_run(cfg, store, data=mine, progress=False)
    assert custom.config.data.dataset == "custom:ragged" and custom.config.data.content == mine.fingerprint()
    builtin = get_or_run(cfg, store, progress=False)
    assert builtin.path != custom.path and builtin.config.data.dataset == "mnist_mini"
    other = get_or_run(cfg, store, data=make_ragged_data(seed=1), progress=False)
    assert other.path not in (custom.path, builtin.path)
    again = get_or_run(cfg, store, data=make_ragged_data(), progress=False)  # equal tensors: the same run
    assert again.path == custom.path
    with pytest.raises(ConfigError, match="num_clients=7 is not allowed: 5, the number of clients"):
        get_or_run(cfg.replace(num_clients=7), store, data=mine, progress=False)


def test_pfllib_files_are_keyed_by_content_not_path(tmp_path):
    a, b = tmp_path / "a" / "part", tmp_path / "b" / "elsewhere"
    _make_partition(a, [(12, 4), (9, 3)])
    shutil.copytree(a, b)
    ca, cb = (RunConfig(algo="fedavg", data=DataConfig(dataset=f"pfllib:{d}", num_clients=2)) for d in (a, b))
    assert ca.key() == cb.key() and ca.data.content == cb.data.content
    assert str(a) not in str(ca.canonical()) and "pfllib:" not in ca.canonical()["data"]["dataset"]
    _make_partition(b, [(12, 4), (9, 3)], seed=1)  # the same names, other values
    changed = RunConfig(algo="fedavg", data=DataConfig(dataset=f"pfllib:{b}", num_clients=2))
    assert changed.key() != ca.key()
    with pytest.raises(fl.DataError, match="changed since this config was made"):  # the old config, new files
        fl.FederatedData.from_config(cb.data)
    moved = RunConfig.from_dict(ca.to_dict())  # a stored config keeps its content hash
    assert moved.key() == ca.key()


def test_a_custom_model_is_keyed_by_architecture_and_weights(ragged, tmp_path):
    def net(seed, width=16):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, width), torch.nn.ReLU(),
                                   torch.nn.Linear(width, 4))

    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedala", rounds=2, model="mlp")
    r0 = get_or_run(cfg, store, data=ragged, model=net(0), progress=False)
    assert r0.config.model.startswith("custom:") and r0.meta["ala_params"] == ["3.weight", "3.bias"]
    assert get_or_run(cfg, store, data=ragged, model=net(0), progress=False).path == r0.path
    assert get_or_run(cfg, store, data=ragged, model=net(1), progress=False).path != r0.path
    assert get_or_run(cfg, store, data=ragged, model=net(0, width=8), progress=False).path != r0.path
    with pytest.raises(ConfigError, match="pass the module"):
        fl.simulate(r0.config, ragged, progress=False)
    with pytest.raises(ConfigError, match="output has 4 scores"):
        fl.simulate(cfg, ragged, model=torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)))


def test_a_text_model_runs_on_token_data():
    from fedala_lab.models import FastText

    g = np.random.default_rng(0)

    def client(n):
        y = g.integers(0, 2, n)
        x = np.where(y[:, None] == 1, g.integers(1, 10, (n, 6)), g.integers(10, 20, (n, 6)))  # tokens tell
        return x.astype(np.int64), y

    data = fl.FederatedData.from_arrays([client(30) for _ in range(3)], [client(10) for _ in range(3)], 2,
                                        name="tokens")
    assert data.train_x.dtype == torch.int64
    torch.manual_seed(0)
    run = fl.simulate(RunConfig(algo="fedala", rounds=4, lr=0.5, batch_size=5, device="cpu"), data,
                      model=FastText(vocab_size=20, num_classes=2), progress=False)
    assert run.summary()["best_acc"] > 80


def test_a_model_defined_in_a_script_trains_in_this_process(tmp_path):
    script = textwrap.dedent("""
        import torch, fedala_lab as fl
        from fedala_lab.data.federated import FederatedData
        import numpy as np

        class Mine(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(4, 300), torch.nn.Linear(300, 2)
            def forward(self, x):
                return self.b(torch.relu(self.a(x)))

        g = np.random.default_rng(0)
        parts = [(g.normal(size=(20, 4)).astype("float32"), g.integers(0, 2, 20)) for _ in range(2)]
        data = FederatedData.from_arrays(parts, parts, 2)
        run = fl.simulate(fl.RunConfig(algo="fedavg", rounds=2, backend="workers"), data, model=Mine(),
                          progress=False, workers=2)
        print(run.meta["env"]["worker_processes"], run.meta["env"].get("workers_note", ""))
    """)
    out = subprocess.run([sys.executable, "-c", script], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("False") and "__main__" in out.stdout


# -- the drop-in ALA, ported from the reference ---------------------------------------------------------


def _two_models():
    torch.manual_seed(0)
    glob = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    local = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return glob, local


def test_the_reference_call_order_and_a_swap_refused():
    glob, local = _two_models()
    x, y = np.random.default_rng(0).normal(size=(40, 6)).astype("float32"), np.arange(40) % 3
    ala = ALA(local, x, y, p=1, s=50, batch_size=5, max_start_epochs=3)
    before = {k: v.clone() for k, v in glob.state_dict().items()}
    with pytest.raises(TypeError, match="adaptive_local_aggregation"):
        ala(glob, local)
    ala.adaptive_local_aggregation(glob, local)
    for k, v in glob.state_dict().items():
        assert torch.equal(v, before[k])  # the global model is never written
    assert torch.equal(local[0].weight, glob[0].weight)  # lower layer: G's
    assert set(ala.weights) == {"2.weight", "2.bias"}


def test_from_reference_takes_its_arguments_and_a_dataset():
    glob, local = _two_models()
    g = np.random.default_rng(0)
    data = torch.utils.data.TensorDataset(torch.as_tensor(g.normal(size=(40, 6)), dtype=torch.float32),
                                          torch.as_tensor(np.arange(40) % 3))
    ref = ALA.from_reference(0, torch.nn.CrossEntropyLoss(), data, 5, 50, layer_idx=2, eta=1.0, device="cpu",
                             threshold=0.1, num_pre_loss=10, max_start_epochs=3)
    ours = ALA(glob, data.tensors[0].numpy(), data.tensors[1].numpy(), p=1, s=50, batch_size=5,
               max_start_epochs=3)
    a, b = ref.adaptive_local_aggregation(glob, local), ours.adaptive_local_aggregation(glob, _two_models()[1])
    for k in a:
        assert torch.equal(a[k], b[k]), k  # layer_idx=2 (tensors) is p=1 (blocks): one computation


def test_a_wrong_p_names_layer_idx():
    _, local = _two_models()
    with pytest.raises(ValueError, match=r"p=4: p counts blocks .* 1 to 2 .* layer_idx counts its 4 parameter tensors"):
        ALA(local, torch.zeros(10, 6), torch.zeros(10, dtype=torch.long), p=4)
