import json
import math

import pytest
from conftest import SHARED_MNIST

from fedala_lab.config import DataConfig, RunConfig
from fedala_lab.errors import ConfigError
from fedala_lab.experiments.presets import preset


@pytest.mark.parametrize("field,value,pattern", [
    ("rounds", 0, r"rounds=0 is not allowed: an integer >= 1"),
    ("join_ratio", 0.0, r"join_ratio=0.0 .* > 0 and <= 1"),
    ("join_ratio", 1.5, r"join_ratio=1.5"),
    ("lr", -0.1, r"lr=-0.1 .* > 0"),
    ("lr", math.nan, r"lr=nan"),
    ("eta", 0, r"eta=0 .* > 0"),
    ("s", 0, r"s=0 .* > 0 and <= 100"),
    ("s", 101, r"s=101"),
    ("p", 0, r"p=0 .* >= 1"),
    ("mu", -1, r"mu=-1 .* >= 0"),
    ("batch_size", 0, r"batch_size=0"),
    ("algo", "fedsgd", r"algo='fedsgd' .* one of fedavg, fedala, fedprox"),
    ("backend", "gpu", r"backend='gpu'"),
    ("device", "tpu", r"device='tpu'"),
    ("track_clients", "a,b", r"track_clients='a,b'"),
    ("rounds", True, r"rounds=True"),
])
def test_bad_run_values_name_the_field_and_range(field, value, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        RunConfig(**{field: value})
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("field,value,pattern", [
    ("dataset", "imagenet", r"dataset='imagenet' .* digits, mnist"),
    ("partition", "random", r"partition='random'"),
    ("beta", 0, r"beta=0 .* > 0"),
    ("beta", -0.5, r"beta=-0.5"),
    ("num_clients", 0, r"num_clients=0"),
    ("train_ratio", 1.0, r"train_ratio=1.0 .* > 0 and < 1"),
    ("train_ratio", 0, r"train_ratio=0"),
])
def test_bad_data_values(field, value, pattern):
    with pytest.raises(ConfigError, match=pattern):
        DataConfig(**{field: value})


def test_key_ignores_unused_and_machine_fields():
    a = RunConfig(algo="fedavg")
    assert a.key() == RunConfig(algo="fedavg", mu=0.5, eta=3.0, device="cpu", checkpoint_every=3).key()
    assert a.key() != RunConfig(algo="fedprox").key()
    assert RunConfig(algo="fedprox", mu=0.1).key() != RunConfig(algo="fedprox", mu=0.2).key()
    assert RunConfig(algo="fedala", p=1).key() != RunConfig(algo="fedala", p=2).key()
    assert a.replace(root="/elsewhere").key() == a.key()
    assert a.key() != a.replace(seed=1).key()
    assert a.key() != a.replace(data_seed=2).key()
    # recording only: what is recorded or kept besides the result never names another run
    for change in ({"record_train_loss": False}, {"keep_states": "1,5"}, {"keep_states": "none"},
                   {"snapshot_clients": "0"}, {"track_clients": "none"}, {"threads": 1}):
        assert a.replace(**change).key() == a.key(), change


def test_keep_states_names_rounds():
    cfg = RunConfig(rounds=10)
    assert cfg.kept_rounds() == [10]
    assert cfg.replace(keep_states="none").kept_rounds() == []
    assert cfg.replace(keep_states="12,3,1,3").kept_rounds() == [1, 3, 10]
    for bad in ("0", "x", "1,-2", 5):
        with pytest.raises(ConfigError, match="keep_states"):
            cfg.replace(keep_states=bad)


def test_roundtrip_and_routing():
    cfg = RunConfig(algo="fedprox", mu=0.01).replace(num_clients=7, beta=0.5, seed=3)
    assert cfg.data.num_clients == 7 and cfg.data.beta == 0.5 and cfg.seed == 3 and cfg.data.seed == 1
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.key() == cfg.key()
    flat = RunConfig.from_dict({"algo": "fedavg", "num_clients": 4, "partition": "iid"})
    assert flat.data.num_clients == 4 and flat.data.partition == "iid"
    with pytest.raises(ConfigError, match="bogus"):
        RunConfig.from_dict({"bogus": 1})


def test_slug_is_readable():
    assert RunConfig(algo="fedprox+ala", rounds=5).slug() == "fedprox_ala-digits-dir0.1-n20-r5-s0"


def test_clients_to_resolves_tracking():
    cfg = RunConfig(track_clients="0,3")
    assert cfg.clients_to("track_clients", 5) == [0, 3]
    assert RunConfig().clients_to("track_clients", 20) == list(range(20))
    assert RunConfig().clients_to("track_clients", 100) == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="below num_clients=3"):
        cfg.clients_to("track_clients", 3)


def test_presets():
    t = preset("teach")
    assert (t.data.dataset, t.data.partition, t.data.beta, t.data.num_clients, t.model) == \
        ("mnist_mini", "dirichlet", 0.1, 20, "mlp")
    assert (t.lr, t.batch_size, t.local_epochs, t.rounds, t.record_train_loss) == (0.1, 10, 1, 50, False)
    # the teach preset before the embedded MNIST subset, kept by name
    assert preset("teach-digits") == RunConfig(data=DataConfig(dataset="digits", partition="dirichlet", beta=0.1,
                                                               num_clients=20),
                                               model="mlp", rounds=50, lr=0.1, checkpoint_every=0)
    f = preset("teach-fedprox")
    assert f.replace(algo="fedavg").drops_stragglers and not f.drops_stragglers and f.stragglers > 0
    assert f.data.dataset == "mnist_mini" and preset("teach-fedlama").data.dataset == "mnist_mini"
    if SHARED_MNIST.is_dir():  # the MNIST partition is read (hashed) when its config is made
        m = preset("mnist-dir0.1", rounds=3)
        assert m.rounds == 3 and m.lr == 0.005 and m.batch_size == 10 and m.data.dataset.startswith("pfllib:")
    with pytest.raises(ConfigError, match="preset='nope'"):
        preset("nope")


def test_integral_floats_make_the_same_config():
    a, b = RunConfig(s=80, lr=1).replace(beta=1), RunConfig(s=80.0, lr=1.0).replace(beta=1.0)
    assert a == b and a.key() == b.key() and isinstance(a.s, float) and isinstance(a.data.beta, float)


def test_help_lists_every_setting_and_every_column():
    from fedala_lab.record.run import Run

    doc = RunConfig.__doc__
    for text in ("rounds (default 50; an integer >= 1 and <= 100000)", "lr (default 0.005; a finite number > 0)",
                 "mu (default 0.001; a finite number >= 0)", "p (default 1; an integer >= 1)",
                 "num_clients (default 20; an integer >= 1)", "tau0 (default 10"):
        assert text in doc, text
    for column in ("acc_std", "bytes_up", "init_seconds", "test_correct", "local_steps", "loss_mean", "lama_layers"):
        assert f"``{column}``" in Run.__doc__, column
