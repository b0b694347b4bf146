"""Sweeps (local and Ray give the same tables), the pooled PFLlib source, and client chunking in the
vectorised backend (a forced or out-of-memory-driven chunk gives the unchunked result)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import assert_frames_exact, assert_same_run, make_ragged_data, small_cfg
from scipy import stats

from fedala_lab.analysis.stats import METRICS
from fedala_lab.analysis.tables import sweep_table, table_markdown
from fedala_lab.cli import main
from fedala_lab.config import DataConfig, parse_values
from fedala_lab.errors import ConfigError, FedalaError
from fedala_lab.experiments.plans import SweepSpec, sweep_preset
from fedala_lab.experiments.presets import mnist_pathological_dataset, preset
from fedala_lab.experiments.sweeps import run_sweep
from fedala_lab.figures import AblationDisplay, AccuracyTable
from fedala_lab.reproduce import save_sweep

# The "done when" grid: 2 algorithms × 2 values of p × 3 seeds, on the teach problem made tiny.
TINY = {"rounds": 3, "num_clients": 10, "eval_every": 1}


def grid_2x2x3() -> SweepSpec:
    return SweepSpec(preset("teach", **TINY), {"algo": ["fedavg", "fedala"], "p": [1, 2], "seed": [0, 1, 2]},
                     name="done-when")


# ------------------------------------------------------------------------------------------ the spec


def test_grid_expands_validates_and_dedupes():
    spec = grid_2x2x3()
    pairs = spec.expand()
    assert len(pairs) == 12
    assert pairs[0][0] == {"algo": "fedavg", "p": 1, "seed": 0} and pairs[-1][0] == {"algo": "fedala", "p": 2,
                                                                                     "seed": 2}
    assert all(cfg.rounds == 3 and cfg.data.num_clients == 10 for _, cfg in pairs)
    # p does not change a FedAvg run: 3 FedAvg + 6 FedALA distinct runs
    assert len({cfg.key() for _, cfg in pairs}) == 9
    assert spec.table_by() == ("algo", "p")
    # aliases and data fields; data_seed is the partition seed
    s2 = SweepSpec(preset("teach"), {"algos": ["fedavg"], "clients": [5, 10], "data-seed": [3]})
    assert s2.axes == ["algo", "num_clients", "data_seed"]
    assert [c.data.num_clients for _, c in s2.expand()] == [5, 10] and s2.expand()[0][1].data.seed == 3
    with pytest.raises(ConfigError, match="grid"):
        SweepSpec(preset("teach"), {"learning_rate": [0.1]})
    with pytest.raises(ConfigError, match="grid.p"):
        SweepSpec(preset("teach"), {"p": []})
    with pytest.raises(ConfigError, match="beta"):
        SweepSpec(preset("teach"), {"beta": [0.1, -1.0]}).expand()
    assert parse_values("0-4", "seeds") == [0, 1, 2, 3, 4]
    assert parse_values("0.1,0.5,fedala", "x") == [0.1, 0.5, "fedala"]


def test_spec_file_yaml_and_json(tmp_path):
    text = ("name: abl\npreset: teach\nconfig: {rounds: 4, num_clients: 10, data: {beta: 0.5}}\n"
            "grid: {algo: [fedala], s: [50, 80], seed: [0, 1]}\nby: [algo, s]\n")
    (tmp_path / "s.yaml").write_text(text)
    spec = SweepSpec.from_file(tmp_path / "s.yaml")
    assert spec.name == "abl" and spec.by == ("algo", "s") and spec.axes == ["algo", "s", "seed"]
    assert spec.base.rounds == 4 and spec.base.data.num_clients == 10 and spec.base.data.beta == 0.5
    (tmp_path / "t.json").write_text(json.dumps({"grid": {"seed": [0, 1]}, "config": {"data_seed": 7}}))
    spec = SweepSpec.from_file(tmp_path / "t.json")
    assert spec.name == "t" and spec.base.data.seed == 7 and len(spec.expand()) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"grid": {"seed": [0]}, "rounds": 3}))
    with pytest.raises(ConfigError, match="spec.rounds"):
        SweepSpec.from_file(tmp_path / "bad.json")


def test_reproduction_sweeps(tmp_path):
    t7 = sweep_preset("table7-mnist-dir0.1")
    assert t7.base.rounds == 2000 and t7.base.batch_size == 10 and t7.base.lr == 0.005
    assert t7.base.data.num_clients == 20 and t7.base.join_ratio == 1.0 and t7.base.data.is_pfllib
    assert dict(t7.grid)["seed"] == (0, 1, 2, 3, 4) and "fedala" in dict(t7.grid)["algo"]
    t2 = sweep_preset("table2-mnist-pat")
    assert t2.base.data.partition == "pathological" and t2.base.data.classes_per_client == 2
    # no torchvision MNIST under this root: the shared images, pooled, are re-partitioned
    ds = mnist_pathological_dataset(root=str(tmp_path))
    assert ds == "mnist" or ds.startswith("pfllib-pool:")
    with pytest.raises(ConfigError, match="sweep"):
        sweep_preset("table9")


def test_cli_flags_and_errors(tmp_path, capsys):
    argv = ["sweep", "--preset", "teach", "--algos", "fedavg,fedala", "--grid", "p=1,2", "--seeds", "0-2",
            "--rounds", "3", "--clients", "10", "--store", str(tmp_path), "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "12 grid points, 9 distinct runs" in out and out.count("[to run]") == 9
    assert out.count("[same run as above]") == 3
    assert main(argv[:-3] + ["--p", "2", "--dry-run"]) == 2  # p is an axis and a flag at once
    assert "also a grid axis" in capsys.readouterr().err
    assert main(["sweep", "--preset", "teach", "--grid", "bogus=1", "--dry-run"]) == 2
    assert main(["sweep", "--preset", "teach", "--workers", "many", "--store", str(tmp_path)]) == 2


def test_ray_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    spec = SweepSpec(preset("teach", **TINY), {"seed": [0]})
    with pytest.raises(FedalaError, match="pip install"):
        run_sweep(spec, store=tmp_path, ray=True, progress=False)


# --------------------------------------------------------------------------- local and Ray execution


@pytest.fixture(scope="module")
def local_result(tmp_path_factory):
    store = tmp_path_factory.mktemp("local-store")
    return run_sweep(grid_2x2x3(), store=store, workers=1, progress=False), store


def test_local_sweep_table_resume_and_displays(local_result, tmp_path):
    res, store = local_result
    assert res.computed == 9 and not res.failed and len(res.frame) == 12 and len(res.runs) == 12
    table = sweep_table(res)
    assert table[["algo", "p"]].values.tolist() == [["fedavg", 1], ["fedavg", 2], ["fedala", 1], ["fedala", 2]]
    assert (table["n_seeds"] == 3).all()
    # the table is the mean/std of the runs' own numbers (%)
    fedala1 = [r.best_acc for r in res.runs_where(algo="fedala", p=1)]
    assert len(fedala1) == 3
    row = table[(table.algo == "fedala") & (table.p == 1)].iloc[0]
    assert row["best_mean"] == pytest.approx(np.mean(fedala1)) and row["best_std"] == pytest.approx(
        np.std(fedala1, ddof=1))
    # FedAvg's runs are shared by p=1 and p=2
    fa = table[table.algo == "fedavg"]
    assert fa["best_mean"].nunique() == 1
    # a second call finds everything in the store: nothing recomputed, the same table
    again = run_sweep(grid_2x2x3(), store=store, workers=1, progress=False)
    assert again.computed == 0
    assert_frames_exact(sweep_table(again), table)
    md = table_markdown(sweep_table(res))
    assert md.splitlines()[0] == ("| algo | p | best pooled acc % | final pooled acc % | worst 10 % of clients, final "
                                  "acc % | best − fedavg | p (best) | final − fedavg | p (final) | seeds |")
    assert md.count("\n|") == 5 and "cannot reach 0.05 with 3 seed(s)" in md and "Holm-adjusted" in md
    # each FedALA row against FedAvg's of the same p, paired by seed: the interval and p of the runs' own numbers
    fedavg1 = [r.final_acc for r in res.runs_where(algo="fedavg", p=1)]
    d = np.array([r.final_acc for r in res.runs_where(algo="fedala", p=1)]) - fedavg1
    assert row["reference"] == "fedavg" and row["final_diff"] == pytest.approx(d.mean())
    assert row["final_diff_hi"] - row["final_diff"] == pytest.approx(
        stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3))
    assert row["final_p"] == pytest.approx(stats.ttest_rel(d, np.zeros(3)).pvalue)
    assert row["final_p_holm"] == pytest.approx(row["final_p"])  # one comparison per p: its own family
    paths = save_sweep(res, tmp_path / "out")
    assert [p.name for p in paths] == ["runs.csv", "table.csv", "table.md", "table.tex", "stats.csv", "clients.csv"]
    assert all(p.is_file() for p in paths) and not list((tmp_path / "out").glob(".*tmp"))
    assert len(pd.read_csv(paths[0])) == 12
    tex = paths[3].read_text()
    assert r"\begin{tabular}" in tex and r"$\pm$" in tex and "95 \\% interval" in tex and "Holm" in tex
    long = pd.read_csv(paths[4])
    assert set(long["metric"]) == set(METRICS) and len(long) == 4 * len(METRICS)
    gains = pd.read_csv(paths[5])
    assert list(gains["algo"]) == ["fedala", "fedala"] and (gains["pairs"] == 30).all()  # 3 seeds × 10 clients
    # feeding the displays
    t = AccuracyTable.from_runs(res.complete_runs(), plot=False)
    assert set(t.stats_["algo"]) == {"fedavg", "fedala"} and (t.stats_["n_seeds"] == 3).all()
    abl = AblationDisplay.from_runs([r for r in res.complete_runs() if r.config.algo == "fedala"], param="p")
    assert abl.frame_["p"].tolist() == [1, 2] and len(abl.errorbars_) == 2


def test_cli_sweep_writes_the_table(local_result, tmp_path, capsys):
    _, store = local_result  # everything is stored: the command only aggregates
    rc = main(["sweep", "--preset", "teach", "--algos", "fedavg,fedala", "--grid", "p=1,2", "--seeds", "0,1,2",
               "--rounds", "3", "--clients", "10", "--store", str(store), "--out", str(tmp_path / "o"),
               "--no-progress", "--workers", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "(0 computed, 9 from the store)" in out and "| fedala | 2 |" in out
    assert (tmp_path / "o" / "table.md").read_text().count("| fedala |") == 2
    assert (tmp_path / "o" / "table.tex").is_file() and "| final − fedavg |" in out
    # --against: another reference; one that is not among the rows is one line and exit code 2
    rc = main(["sweep", "--preset", "teach", "--algos", "fedavg,fedala", "--grid", "p=1,2", "--seeds", "0,1,2",
               "--rounds", "3", "--clients", "10", "--store", str(store), "--no-progress", "--workers", "1",
               "--against", "FedALA"])
    out = capsys.readouterr().out
    assert rc == 0 and "| final − fedala |" in out and out.count("| reference |") == 4  # 2 rows: best, final
    rc = main(["sweep", "--preset", "teach", "--algos", "fedavg,fedala", "--grid", "p=1,2", "--seeds", "0,1,2",
               "--rounds", "3", "--clients", "10", "--store", str(store), "--no-progress", "--workers", "1",
               "--against", "ditto"])
    err = capsys.readouterr().err
    assert rc == 2 and "against='ditto' is not allowed: one of the compared algo values: fedavg, fedala" in err


def test_process_pool_matches_sequential(local_result, tmp_path):
    res, _ = local_result
    spec = SweepSpec(preset("teach", **TINY), {"algo": ["fedala"], "p": [1], "seed": [0, 1]})
    pool = run_sweep(spec, store=tmp_path, workers=2, progress=False)
    assert pool.computed == 2 and not pool.failed
    ref = res.frame[(res.frame.algo == "fedala") & (res.frame.p == 1) & res.frame.seed.isin([0, 1])]
    assert pool.frame["best_acc"].tolist() == ref["best_acc"].tolist()
    assert pool.frame["final_acc"].tolist() == ref["final_acc"].tolist()


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the Ray path needs the optional dependency: pip install ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_tables_as_local(local_ray, local_result, tmp_path):
    res, _ = local_result
    on_ray = run_sweep(grid_2x2x3(), store=tmp_path / "ray-store", ray=True, progress=False)
    assert on_ray.computed == 9 and not on_ray.failed
    assert_frames_exact(sweep_table(on_ray), sweep_table(res))  # identical, not just close
    cols = ["algo", "p", "seed", "best_acc", "final_acc", "best_round", "key"]
    assert_frames_exact(on_ray.frame[cols], res.frame[cols])
    # a cluster whose workers cannot see the store: the runs come back through Ray and are saved here
    spec = SweepSpec(preset("teach", **TINY), {"algo": ["fedala"], "p": [2], "seed": [1]})
    shipped = run_sweep(spec, store=tmp_path / "shipped", ray=True, shared_store=False, progress=False)
    assert shipped.computed == 1 and (shipped.runs[0].path / "manifest.json").is_file()
    ref = res.frame[(res.frame.algo == "fedala") & (res.frame.p == 2) & (res.frame.seed == 1)]
    assert shipped.frame["best_acc"].tolist() == ref["best_acc"].tolist()


# ------------------------------------------------------------------------------ pooled PFLlib source


def _pfllib_dir(root, sizes, num_classes=4, seed=0):
    g = np.random.default_rng(seed)
    for i, (ntr, nte) in enumerate(sizes):
        for split, n in (("train", ntr), ("test", nte)):
            (root / split).mkdir(parents=True, exist_ok=True)
            x = g.uniform(-1, 1, (n, 1, 8, 8)).astype(np.float32)
            y = (np.arange(n) % num_classes).astype(np.int64)
            with open(root / split / f"{split}{i}_.npz", "wb") as f:
                np.savez_compressed(f, data={"x": x, "y": y})
    (root / "config.json").write_text(json.dumps({"num_clients": len(sizes), "num_classes": num_classes}))


def test_pfllib_pool_is_repartitioned(tmp_path):
    from fedala_lab.data.federated import FederatedData
    from fedala_lab.data.sources import load_pool

    d = tmp_path / "part"
    _pfllib_dir(d, [(40, 12), (24, 8), (60, 20)])
    pool = load_pool(f"pfllib-pool:{d}")
    assert len(pool) == 164 and pool.x.shape == (164, 1, 8, 8) and pool.num_classes == 4
    cfg = DataConfig(dataset=f"pfllib-pool:{d}", partition="pathological", classes_per_client=2, num_clients=4)
    data = FederatedData.from_config(cfg)
    assert data.num_clients == 4 and int(data.train_sizes.sum() + data.test_sizes.sum()) == 164
    assert (data.summary()["labels"] <= 2).all()
    run_cfg = preset("teach").replace(dataset=cfg.dataset, partition="pathological", num_clients=4)
    assert run_cfg.slug().startswith("fedala-pool-part-pat2-n4")
    with pytest.raises(ConfigError, match="dataset"):
        DataConfig(dataset="pfllib-pool:")


# --------------------------------------------------------------------- chunking in the vectorised backend


def _sim(cfg, data, chunk=None):
    from fedala_lab.engine.simulate import Simulation

    sim = Simulation(cfg, data, chunk_clients=chunk)
    return sim, sim.run(progress=False)


@pytest.mark.parametrize("model", ["mlp", "smallcnn"])
def test_forced_small_chunk_matches_unchunked(model):
    """The MLP bit for bit; the CNN to float rounding (its grouped convolutions depend on the chunk)."""
    data = make_ragged_data()
    cfg = small_cfg(algo="fedala", model=model, shuffle=True, drop_last=False, join_ratio=0.6, s=60)
    a, ra = _sim(cfg, data)
    b, rb = _sim(cfg, data, chunk=2)
    cols = ["test_acc", "test_loss", "train_loss", "init_loss", "trained_loss", "test_correct"]
    if model == "mlp":  # matrix products per client: the same floats whatever the chunk
        assert_same_run(a, ra, b, rb)
    else:  # vmapped convs become grouped convs, whose kernels depend on the group count: float rounding.
        # Measured over these 3 rounds: 1.9e-7 in a loss, 3e-8 in a parameter; the bounds are 5x and 3x that,
        # tight because one run's chunks differ only in the convolutions' group count
        np.testing.assert_allclose(ra.clients[cols], rb.clients[cols], rtol=0, atol=1e-6)
        for n in a.param_names:
            torch.testing.assert_close(a.local_params[n], b.local_params[n], rtol=0, atol=1e-7)


def _bn_setup(num_clients=6, steps=3, batch=5, seed=0):
    from fedala_lab.compute.backends import BatchPlan
    from fedala_lab.compute.steps import SGD, make_sgd_step

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    for p in model.parameters():
        p.requires_grad_(False)
    n_rows = num_clients * steps * batch
    x = torch.randn(n_rows, 4)
    y = torch.randint(0, 3, (n_rows,))
    batches = [[np.arange(batch) + (c * steps + k) * batch for k in range(steps - (c % 2))]
               for c in range(num_clients)]  # ragged: odd clients have one step less
    plan = BatchPlan.from_batches(batches, "cpu")
    carry = {"params": {k: v.unsqueeze(0).repeat(num_clients, *[1] * v.dim()) for k, v in model.named_parameters()},
             "buffers": {k: v.unsqueeze(0).repeat(num_clients, *[1] * v.dim()).clone()
                         for k, v in model.named_buffers()}}
    return model, make_sgd_step(model, SGD(0.1)), carry, plan, x, y


def test_out_of_memory_halves_the_chunk_and_retries(monkeypatch):
    from fedala_lab.compute import backends

    model, step, carry, plan, x, y = _bn_setup()
    ref, ref_aux = backends.VectorisedBackend().run(step, carry, {}, plan, x, y, train=True, model=model)

    real_vmap = backends.vmap
    calls = []

    def tight_vmap(fn, in_dims):
        vf = real_vmap(fn, in_dims=in_dims)

        def call(sub, shared, xs, ys, ws):
            out = vf(sub, shared, xs, ys, ws)  # runs first: BN statistics are already updated in place
            calls.append(len(xs))
            if len(xs) > 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return out

        return call

    monkeypatch.setattr(backends, "vmap", tight_vmap)
    backend = backends.VectorisedBackend()
    with pytest.warns(UserWarning, match="out of GPU memory"):
        got, got_aux = backend.run(step, carry, {}, plan, x, y, train=True, model=model)
    assert backend.chunk_clients <= 2 and backend.oom_retries >= 1 and max(calls) > 2
    np.testing.assert_array_equal(got_aux, ref_aux)
    for k in ref["buffers"]:  # the failed calls' BN statistics were rolled back, not applied twice
        assert torch.equal(got["buffers"][k], ref["buffers"][k]), k
    for k in ref["params"]:  # BN's batched backward sums in another order for another width: 5e-10
        # measured after these 3 steps; 1e-8 is 20x that
        torch.testing.assert_close(got["params"][k], ref["params"][k], rtol=0, atol=1e-8)
    monkeypatch.setattr(backends, "vmap", real_vmap)  # and exactly what that chunk gives from the start
    same, _ = backends.VectorisedBackend(backend.chunk_clients).run(step, carry, {}, plan, x, y, train=True,
                                                                    model=model)
    for part in ("params", "buffers"):
        for k in ref[part]:
            assert torch.equal(got[part][k], same[part][k]), (part, k)

    def no_memory(fn, in_dims):
        def call(*args):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return call

    monkeypatch.setattr(backends, "vmap", no_memory)
    with pytest.warns(UserWarning), pytest.raises(torch.cuda.OutOfMemoryError):  # one client does not fit
        backends.VectorisedBackend().run(step, carry, {}, plan, x, y, train=True, model=model)
    with pytest.raises(torch.cuda.OutOfMemoryError):  # auto_chunk off: the first error propagates
        backends.VectorisedBackend(auto_chunk=False).run(step, carry, {}, plan, x, y, train=True, model=model)
    with pytest.raises(ConfigError, match="chunk_clients"):
        backends.VectorisedBackend(0)
