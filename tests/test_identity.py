"""A run's identity is everything that computes it (docs/design.md#run-identity): the config, the code (fedala_lab's
computing modules, a registered algorithm's class, a custom model's class), the data content at the moment of
the call and a custom model's weights. Edit any of them and the store neither serves nor continues the old run."""

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import fedala_lab as fl
from fedala_lab.errors import ConfigError
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.fingerprint import _source_digest, code_fingerprint, package_fingerprint
from fedala_lab.record.store import RunStore

ROOT = Path(fl.__file__).resolve().parent


def _tiny(**kw):
    return fl.preset("teach-digits", num_clients=4, rounds=2, **kw)


def _get(cfg, store, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_or_run(cfg, store, progress=False, **kw)


def _mixing(factor: float):
    class Mixing(fl.Algorithm):
        """The server moves the global model ``factor`` of the way to the clients' mean."""

        def aggregate(self, rnd, senders):
            mean = rnd.weighted_mean(senders)
            return fl.Aggregated({n: g + factor * (mean.params[n] - g) for n, g in rnd.global_params.items()},
                                 mean.bytes)

    return Mixing


def test_an_edited_algorithm_is_another_run_and_never_continues_the_old_one(tmp_path):
    store = RunStore(tmp_path)
    fl.register_algorithm("mixing", _mixing(1.0))
    cfg = _tiny(algo="mixing")
    old = _get(cfg, store)
    fl.register_algorithm("mixing", _mixing(0.3))  # the same name, edited code (a notebook cell run again)
    new = _get(cfg, store)
    assert new.path != old.path  # stored apart: the key, taken when each was asked for, holds the code
    assert new.summary()["final_acc"] != old.summary()["final_acc"]
    longer = _get(cfg.replace(rounds=4), store)
    assert longer.meta["branched_from"]["run"] == new.path.name  # the new code's run, never the old one's
    assert longer.meta["code"]["algorithm"] == code_fingerprint(_mixing(0.3))
    fresh = _get(cfg.replace(rounds=4), None, cache="off")
    assert longer.rounds["acc"].tolist() == fresh.rounds["acc"].tolist()


def test_a_method_replaced_on_the_class_changes_the_fingerprint():
    cls = _mixing(1.0)
    before = code_fingerprint(cls)
    cls.aggregate = lambda self, rnd, senders: None
    assert code_fingerprint(cls) != before


def test_the_fingerprint_covers_module_level_constants_and_helpers(tmp_path):
    mod = tmp_path / "mine_fp.py"
    src = textwrap.dedent("""
        import fedala_lab as fl
        STEP = {step}
        def helper(x):
            return x * {k}
        class Mine(fl.Algorithm):
            def aggregate(self, rnd, senders):
                return helper(STEP)
    """)
    prints = []
    for step, k in ((0.5, 2), (0.5, 2), (0.7, 2), (0.5, 3)):
        mod.write_text(src.format(step=step, k=k))
        out = subprocess.run([sys.executable, "-c", ("import mine_fp; from fedala_lab.fingerprint import "
                              "code_fingerprint as f; print(f(mine_fp.Mine))")], cwd=tmp_path, capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONHASHSEED": str(len(prints))})
        prints.append(out.stdout.strip())
    assert prints[0] == prints[1]  # the same code in two processes with other hash seeds
    assert len(set(prints)) == 3  # a constant it reads, or a helper it calls, edited: another fingerprint


def test_an_edited_custom_model_is_another_model(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 10)

        def forward(self, x):
            return self.lin(x.flatten(1))

    torch.manual_seed(0)
    net, cfg = Net(), _tiny(algo="fedavg")
    first = _get(cfg, RunStore(tmp_path), model=net)
    Net.forward = lambda self, x: self.lin(x.flatten(1) * 0.5)  # the same weights and repr, another forward
    second = _get(cfg, RunStore(tmp_path), model=net)
    assert first.config.model != second.config.model
    assert first.summary()["final_acc"] != second.summary()["final_acc"]


def test_data_edited_in_place_is_keyed_by_its_content_at_the_call(tmp_path):
    store = RunStore(tmp_path)
    cfg = _tiny(algo="fedavg")
    data = fl.FederatedData.from_config(cfg.data)
    built = _get(cfg, store, data=data)
    assert built.config.data == cfg.data  # unedited: the built-in data's own key
    data.train_x[0, 0, 0, 0] += 0.5
    edited = _get(cfg, store, data=data)
    assert edited.config.data.dataset == "custom:digits-edited" and edited.config.key() != built.config.key()
    again = fl.FederatedData.from_config(cfg.data)  # the memo never hands out the edited object
    assert again is not data and again.config() == cfg.data

    arrays = fl.FederatedData.from_arrays(
        train=[(torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 0, 1])) for _ in range(2)],
        test=[(torch.randn(2, 3), torch.tensor([0, 1])) for _ in range(2)], num_classes=2, name="mine")
    before = arrays.config()
    arrays.train_x[0, 0] += 1.0
    assert arrays.config().content != before.content


def test_a_folder_whose_manifest_names_other_code_is_not_served(tmp_path):
    import json

    store = RunStore(tmp_path)
    cfg = _tiny(algo="fedavg")
    run = _get(cfg, store)
    man = run.path / "manifest.json"
    m = json.loads(man.read_text())
    m["key"] = "0" * 12  # as written by other code
    man.write_text(json.dumps(m))
    assert store.status(cfg).state == "damaged"
    with pytest.warns(UserWarning, match="another configuration or code"):
        assert store.find(cfg) is None


def test_cache_modes(tmp_path):
    store = RunStore(tmp_path)
    cfg = _tiny(algo="fedavg")
    off = _get(cfg, store, cache="off")
    assert not store.root.exists() or not any(store.root.iterdir())  # neither read nor written
    stored = _get(cfg, store)
    assert stored.path is not None and stored.rounds["acc"].tolist() == off.rounds["acc"].tolist()
    stamp = (stored.path / "manifest.json").stat().st_mtime_ns
    assert _get(cfg, store).path == stored.path and (stored.path / "manifest.json").stat().st_mtime_ns == stamp
    refreshed = _get(cfg, store, cache="refresh")
    assert (refreshed.path / "manifest.json").stat().st_mtime_ns != stamp
    with pytest.raises(ConfigError, match="cache='sometimes' is not allowed: use .*refresh.*off"):
        _get(cfg, store, cache="sometimes")


def test_docstrings_and_comments_do_not_change_the_package_fingerprint_code_does(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text('"""Module."""\nX = 1  # one\n\ndef f():\n    """Doc."""\n    return X\n')
    b.write_text('"""Another text."""\n# a comment\nX = 1\n\n\ndef f():\n    return X\n')
    c.write_text('"""Module."""\nX = 2\n\ndef f():\n    """Doc."""\n    return X\n')
    assert _source_digest(a) == _source_digest(b) != _source_digest(c)


def test_an_edited_install_has_another_package_fingerprint(tmp_path):
    copy = tmp_path / "fedala_lab"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    code = "from fedala_lab.fingerprint import package_fingerprint as f; print(f())"

    def fingerprint():
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert fingerprint() == package_fingerprint()  # the same files, another folder: the same code
    plans = copy / "compute" / "plans.py"
    plans.write_text(plans.read_text() + "\nEDITED = 1\n")
    assert fingerprint() != package_fingerprint()


def test_a_sweep_worker_with_other_code_computes_nothing_and_says_so(tmp_path):
    """A worker process keys the run with its own code; when that is not the caller's (fedala_lab edited while
    a sweep runs), it refuses instead of storing the run under a key the caller never asks for."""
    from fedala_lab.experiments.pool import run_in_worker

    cfg = _tiny(algo="fedavg")
    out = run_in_worker(cfg.to_dict(), str(tmp_path), False, 1, expect="0" * 12)
    assert out["status"] == "failed" and out["key"] == "0" * 12
    assert out["message"].startswith("this worker's code is not the caller's") and "run the sweep again" in out["message"]
    assert not any(p for p in tmp_path.iterdir() if not p.name.startswith("."))  # nothing stored
    assert run_in_worker(cfg.to_dict(), str(tmp_path), False, 1, expect=cfg.key())["status"] == "complete"


def test_one_call_hashes_its_data_and_model_once_and_the_next_call_again(tmp_path, monkeypatch):
    """Every layer that binds a call's data and model (the run cache, get_or_run, the simulation) shares one
    content hash of each; the next call hashes again, so an edit between calls still counts."""
    from fedala_lab import models
    from fedala_lab.data import federated
    from fedala_lab.experiments.runs import RunCache

    counts = {"data": 0, "model": 0}
    data_hash, model_hash = federated.FederatedData._hash, models._model_hash

    def count_data(self):
        counts["data"] += 1
        return data_hash(self)

    def count_model(model):
        counts["model"] += 1
        return model_hash(model)

    monkeypatch.setattr(federated.FederatedData, "_hash", count_data)
    monkeypatch.setattr(models, "_model_hash", count_model)
    data = fl.FederatedData.from_arrays(
        train=[(torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 0, 1])) for _ in range(2)],
        test=[(torch.randn(2, 3), torch.tensor([0, 1])) for _ in range(2)], num_classes=2)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2))
    cfg = fl.RunConfig(algo="fedavg", rounds=2, lr=0.1, batch_size=2)
    RunCache(tmp_path).get_or_run(cfg, data=data, model=net, progress=False)  # computed: cache, store, engine
    assert counts == {"data": 1, "model": 1}
    _get(cfg, RunStore(tmp_path), data=data, model=net)  # served by the next call: hashed again
    assert counts == {"data": 2, "model": 2}


def test_every_partition_setting_the_split_uses_is_in_the_key():
    """The pathological split sizes its random shares by least_samples too: two such configs that differ only
    there make other clients' data, so they are two runs (it counted for Dirichlet only)."""
    a = fl.preset("teach", partition="pathological", num_clients=10)
    b = a.replace(least_samples=1000)  # large enough to raise the shares' lower bound
    da, db = fl.FederatedData.from_config(a.data), fl.FederatedData.from_config(b.data)
    assert da.train_sizes.tolist() != db.train_sizes.tolist()
    assert a.key() != b.key()
    assert a.replace(partition="iid").key() == b.replace(partition="iid").key()  # IID never reads it


def test_identical_custom_data_under_two_names_is_stored_once(tmp_path):
    store = RunStore(tmp_path)
    cfg = _tiny(algo="fedavg")
    base = fl.FederatedData.from_config(cfg.data)

    def named(name):
        return fl.FederatedData.from_arrays(
            train=[(base.train_x[a:b].numpy(), base.train_y[a:b].numpy())
                   for a, b in zip(base.train_offsets[:-1], base.train_offsets[1:])],
            test=[(base.test_x[a:b].numpy(), base.test_y[a:b].numpy())
                  for a, b in zip(base.test_offsets[:-1], base.test_offsets[1:])],
            num_classes=base.num_classes, name=name)

    first, second = _get(cfg, store, data=named("mine")), _get(cfg, store, data=named("yours"))
    assert not first.served and second.served and second.path == first.path  # one computation, stored once
    assert second.config.data.dataset == "custom:yours" and second.config.key() == first.config.key()
    assert second.rounds["acc"].tolist() == first.rounds["acc"].tolist()
    assert len([d for d in store.root.iterdir() if not d.name.startswith(".")]) == 1


def test_fig5_on_a_run_without_train_losses_says_what_to_set(tmp_path):
    from fedala_lab.analysis.curves import convergence_frame
    from fedala_lab.errors import DataError

    run = _get(_tiny(algo="fedavg", record_train_loss=False), RunStore(tmp_path))
    with pytest.raises(DataError, match=r"record_train_loss=True: get_or_run\(cfg.replace\(record_train_loss=True\)\)"):
        convergence_frame([run])
