"""fedala_lab's methods with the clients and the server apart (fedala_lab/flower, docs/flower.md).

Same results: the split round (flower/split.py) calls the engine's pieces for each client in the engine's
order, so on the loop backend every recorded number, the global model, each client's model and the
algorithm's state equal the engine's bit for bit — in one process (run_split, fast, every method) and over
Flower's simulation engine (one Ray start for FedAvg and FedALA on teach, ≈ 1 minute on 2 cores). Within a
round an algorithm's table rows come client by client (the engine writes ALA's passes across clients), so
tables are compared as sets of rows.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import small_cfg

import fedala_lab as fl
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import ConfigError
from fedala_lab.flower import ClientSide, ServerSide, SplitError, run_split, split_refusal, split_simulation
from fedala_lab.flower.split import Order, from_bytes, poison, put_state_rows, state_rows, to_bytes

SECONDS = ["seconds", "init_seconds", "eval_seconds", "train_seconds", "aggregate_seconds"]


def engine(cfg, data=None, model=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # clients without a full batch: said once, here and there
        sim = Simulation(cfg, data, model=model)
        run = sim.run(progress=False)
    return sim, run


def split(cfg, data=None, model=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = split_simulation(cfg, data, model=model)
    return server, server.to_run()


def rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def assert_same(run_a, run_b, glob_a, glob_b):
    """Every recorded number but wall-clock seconds, the tables' rows, the arrays, and the global model."""
    pd.testing.assert_frame_equal(run_a.clients.drop(columns="seconds"), run_b.clients.drop(columns="seconds"),
                                  check_exact=True)
    pd.testing.assert_frame_equal(run_a.rounds.drop(columns=SECONDS), run_b.rounds.drop(columns=SECONDS),
                                  check_exact=True)
    assert run_a.tables.keys() == run_b.tables.keys()
    for name in run_a.tables:
        pd.testing.assert_frame_equal(rows(run_a.tables[name]), rows(run_b.tables[name]), check_exact=True)
    assert sorted(run_a.arrays) == sorted(run_b.arrays)
    for k in run_a.arrays:
        np.testing.assert_array_equal(run_a.arrays[k], run_b.arrays[k], err_msg=k)
    assert glob_a.keys() == glob_b.keys()
    for k in glob_a:
        assert torch.equal(glob_a[k], glob_b[k]), k
    assert run_a.meta.get("capped_clients") == run_b.meta.get("capped_clients")


# ------------------------------------------------------------------------------- the split round, exact

SPLIT_ALGOS = ["fedavg", "fedprox", "fedala", "fedprox+ala", "fedavg-c", "fedprox-c", "ditto", "ditto+ala",
               "fedrep", "fedrep+ala", "local"]


@pytest.mark.parametrize("algo", SPLIT_ALGOS)
def test_the_split_round_equals_the_engine_bit_for_bit(algo, ragged):
    # ragged clients, reshuffled epochs, partial selection, stragglers (FedProx keeps their work, the rest drop them)
    cfg = small_cfg(algo=algo, backend="loop", shuffle=True, join_ratio=0.6, stragglers=0.5, s=60)
    sim, run = engine(cfg, ragged)
    server, srun = split(cfg, ragged)
    assert_same(run, srun, sim.global_params, server.sim.global_params)
    assert srun.meta["engine"] == "split" and srun.config == run.config


def test_every_round_option_the_engine_records_is_recorded_alike(ragged):
    cfg = small_cfg(algo="fedala", backend="loop", rounds=4, join_ratio=0.4, ala_all_clients=False, eval_every=2,
                    record_train_loss=True, snapshot_clients="1,3", snapshot_from=2, max_start_epochs=2,
                    threshold=1e-6)
    sim, run = engine(cfg, ragged)
    server, srun = split(cfg, ragged)
    assert_same(run, srun, sim.global_params, server.sim.global_params)
    assert run.meta["capped_clients"] and "snap_start/1" in srun.arrays  # the cases happened
    assert srun.rounds["acc"].isna().sum() == 1


def test_each_client_keeps_its_own_model_and_state_between_rounds(ragged):
    cfg = small_cfg(algo="ditto+ala", backend="loop", rounds=3)
    sim, _ = engine(cfg, ragged)
    server = ServerSide(cfg, ragged)
    client = ClientSide(server.cfg, ragged)
    saved = {}
    for t in (1, 2, 3):
        glob = server.downloads()
        replies = []
        for order in reversed(server.orders(t)):  # any order of service
            reply, saved[order.client] = client.serve(order, glob, saved.get(order.client))
            replies.append(reply)
        server.finish(t, replies)
    for c, blob in saved.items():  # what a Flower client keeps in its Context.state
        kept = from_bytes(blob)
        for n, v in kept["params"].items():
            assert torch.equal(v, sim.local_params[n][c]), (c, n)
        for n, v in kept["state"]["weights"].items():  # ALA's W of this client, one row
            assert torch.equal(v[0], sim.state.weights[n][c])
        for n, v in kept["state"]["inner"]["params"].items():  # Ditto's personal model
            assert torch.equal(v[0], sim.state.inner.params[n][c])
    # the process's own rows are NaN outside a message: no client reads another's
    assert torch.isnan(client.sim.local_params["fc.weight"]).all()


def test_a_client_trains_alone_on_the_loop_backend_whatever_auto_would_pick(ragged):
    sim, run = engine(small_cfg(algo="fedala", backend="loop"), ragged)
    server, srun = split(small_cfg(algo="fedala", backend="auto"), ragged)  # vectorised in the engine
    assert_same(run, srun, sim.global_params, server.sim.global_params)
    assert srun.config.backend == "auto" and srun.meta["env"]["backend"] == "loop"


def test_on_the_vectorised_backend_only_float_rounding_differs():
    # Asked for explicitly, a client runs vectorised too: the engine runs the 20 clients' steps in one vmap
    # call, a Flower client its own alone, the same arithmetic batched otherwise, so evaluation sums and ALA's
    # weights differ in the last bits (and, as any float perturbation of SGD, more so over many rounds).
    cfg = fl.preset("teach", algo="fedala", rounds=3, backend="vectorised")
    sim, run = engine(cfg)
    server, srun = split(cfg)
    # measured after these 3 rounds: 7.5e-9 in G, 1.8e-8 (relative) in the pooled test loss; the bounds are
    # over 50x that, for other CPUs' summation orders
    for k, v in sim.global_params.items():
        torch.testing.assert_close(server.sim.global_params[k], v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(srun.rounds["test_loss"], run.rounds["test_loss"], rtol=1e-6)
    assert (srun.clients["test_correct"] == run.clients["test_correct"]).mean() > 0.99


# ------------------------------------------------------------- a method of your own, your data and model


class FedAvgM(fl.Algorithm):
    """docs/extending.md's example: a server-side state, the client side FedAvg's."""

    def init_state(self, setup):
        return {"velocity": {n: torch.zeros(s, device=setup.device) for n, s in setup.shapes.items()}}

    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        v, beta = rnd.state["velocity"], self.cfg.server_beta
        for n, g in rnd.global_params.items():
            v[n] = beta * v[n] + (g - mean.params[n])
        return fl.Aggregated({n: g - v[n] for n, g in rnd.global_params.items()}, mean.bytes)


@pytest.fixture(scope="module")
def fedavgm():
    fl.register_algorithm("fedavgm_flower", FedAvgM, label="FedAvgM", params=[
        fl.Param("server_beta", 0.9, fl.Float(0, 1, hi_open=True), "server momentum β")])


@pytest.mark.parametrize("algo", ["fedavgm_flower", "fedavgm_flower+ala"])
def test_a_registered_method_on_your_data_and_model_runs_split(algo, fedavgm):
    rng = np.random.default_rng(0)
    parts = [(rng.normal(size=(50, 8)).astype("float32"), rng.integers(0, 3, 50)) for _ in range(4)]
    data = fl.FederatedData.from_arrays(train=[(x[:38], y[:38]) for x, y in parts],
                                        test=[(x[38:], y[38:]) for x, y in parts], num_classes=3, name="mine")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    cfg = fl.RunConfig(algo=algo, rounds=3, lr=0.05, backend="loop", server_beta=0.5, device="cpu")
    sim, run = engine(cfg, data, model)
    server, srun = split(cfg, data, model)
    assert_same(run, srun, sim.global_params, server.sim.global_params)
    assert srun.config.data.is_custom and srun.config.model.startswith("custom:")


def test_a_pfllib_directory_is_served_to_each_client_by_its_id(tmp_path):
    import json

    from test_pfllib import _make_partition

    _make_partition(tmp_path / "part", [(30, 8), (12, 5), (44, 9)])
    cfg = fl.RunConfig(data=fl.DataConfig(dataset=f"pfllib:{tmp_path / 'part'}", num_clients=3), model="mlp",
                       algo="fedala", rounds=3, lr=0.05, batch_size=4, backend="loop", device="cpu")
    # what a Flower client is sent: the config as JSON, from which it builds the same data (by content hash)
    assert fl.RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict(), default=str))) == cfg
    sim, run = engine(cfg)
    server, srun = split(cfg)
    assert_same(run, srun, sim.global_params, server.sim.global_params)


# ---------------------------------------------------------------------------------- what is refused


def test_fedlama_is_refused_in_one_line_naming_it_and_why():
    with pytest.raises(fl.ConfigError) as err:
        run_split(fl.preset("teach-fedlama", rounds=2))
    msg = str(err.value)
    assert "\n" not in msg and "FedLAMA cannot run with clients and server apart" in msg
    assert "share its state" in msg and "initialise" in msg


class SharedState(fl.Algorithm):
    """A server that writes what its clients read (as FedAMP's per-client models)."""

    def init_state(self, setup):
        return {"sent": torch.zeros(setup.num_clients, device=setup.device)}

    def initialise(self, rnd, clients):
        return rnd.send_global(clients)

    def aggregate(self, rnd, senders):
        rnd.state["sent"][senders] += 1
        return rnd.weighted_mean(senders)


class Declared(SharedState):
    flower_split = True


class Explained(fl.Algorithm):
    flower_split = "its server sends each client several clients' models"


def test_a_state_shared_by_server_and_client_hooks_is_refused_unless_declared(ragged):
    setup_sim = Simulation(small_cfg(algo="fedavg"), ragged)
    setup = setup_sim.setup
    shared = SharedState(setup)
    assert "SharedState's server hooks (aggregate) and client hooks (initialise)" in split_refusal(
        shared, shared.init_state(setup), "Mine")
    declared = Declared(setup)
    assert split_refusal(declared, declared.init_state(setup), "Mine") == ""
    explained = Explained(setup)
    assert split_refusal(explained, None, "Mine") == ("Mine cannot run with clients and server apart: its server "
                                                      "sends each client several clients' models")
    for name in SPLIT_ALGOS:  # the built-ins that run split
        algo = small_cfg(algo=name).algorithm.build(setup)
        assert split_refusal(algo, algo.init_state(setup), name) == "", name


class ReadsOthers(fl.Algorithm):
    """Initialises each client with the mean of every client's model: not what a client holds."""

    def initialise(self, rnd, clients):
        mean = {n: v.mean(0) for n, v in rnd.local_params.items()}
        return fl.Sent({}, 0, rows={n: v.unsqueeze(0).expand(len(clients), *v.shape) for n, v in mean.items()})


class AggregatesEveryone(fl.Algorithm):
    def aggregate(self, rnd, senders):
        return rnd.weighted_mean(rnd.everyone)


@pytest.mark.parametrize("cls,where", [(ReadsOthers, "to initialise client"),
                                       (AggregatesEveryone, "read models of clients that sent none")])
def test_a_method_that_reads_models_its_side_does_not_hold_fails_loudly(cls, where, ragged):
    fl.register_algorithm(f"probe_{cls.__name__.lower()}", cls, modifiers=())
    cfg = small_cfg(algo=f"probe_{cls.__name__.lower()}", backend="loop", join_ratio=0.6)
    with pytest.raises(SplitError, match=where):
        split(cfg, ragged)


# ------------------------------------------------------------------------------------------ pieces


def test_a_clients_rows_of_a_state_round_trip_and_the_rest_stays(ragged):
    n = 5
    state = {"w": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3), "server": torch.ones(2),
             "seen": [1, 2], "flag": torch.zeros(n, dtype=torch.bool)}
    mine = state_rows(state, 2, n)
    assert mine["w"].shape == (1, 3) and mine["server"].shape == (2,) and mine["seen"] == [1, 2]
    blob = from_bytes(to_bytes(mine))
    poison(state, slice(None), n)
    assert torch.isnan(state["w"]).all() and not state["flag"].any()  # bools cannot be NaN: left as they are
    blob["flag"][0] = True
    put_state_rows(state, blob, 2, n)
    assert torch.equal(state["w"][2], torch.tensor([6.0, 7.0, 8.0])) and torch.isnan(state["w"][0]).all()
    assert state["flag"].tolist() == [False, False, True, False, False]
    order = Order(3, 2, [0, 2], init=True, evaluate=False, train=True, limit=None, dropped=False)
    assert Order.from_config(order.config()) == order


# --------------------------------------------------------------------------------------- over Flower

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # offline: before flwr is imported
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
flwr = pytest.importorskip("flwr", reason="fedala_lab[flower] not installed")


def test_the_flower_app_config_names_the_apps_and_a_run():
    from pathlib import Path

    from flwr.cli.config_utils import load_and_validate

    from fedala_lab.flower import config_from_run_config

    path = Path(fl.__file__).parent / "flower" / "app" / "pyproject.toml"
    config, _ = load_and_validate(path)
    app = config["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "fedala_lab.flower.apps:server_app",
                                 "clientapp": "fedala_lab.flower.apps:client_app"}
    cfg = config_from_run_config({**app["config"], "rounds": 3, "set": "lr=0.05 shuffle=true"})
    assert cfg == fl.preset("teach", algo="fedala", rounds=3, seed=0, lr=0.05, shuffle=True)
    with pytest.raises(fl.ConfigError, match="no_such"):
        config_from_run_config({**app["config"], "set": "no_such=1"})


def test_the_client_app_keeps_each_clients_rows_in_its_context_and_the_server_decodes_its_replies(monkeypatch):
    """The ClientApp's handlers and the server's messages without Ray: each node's Context carried from
    message to message as Flower carries it, the replies decoded by the server, the run the engine's."""
    from flwr.app import Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    for k in ("_run_id", "_node_id", "_task_id"):  # what Flower sets in the process of a ServerApp
        monkeypatch.setattr(TaskIdentity, k, 1)

    from fedala_lab.flower import FlowerServer, client_app
    from fedala_lab.flower.apps import EXTRA, GLOBAL, ORDER, STATE, _arrays, _reply

    cfg = fl.preset("teach-digits", algo="fedprox+ala", rounds=3, num_clients=4, backend="loop", join_ratio=0.5)
    sim, run = engine(cfg)
    server = FlowerServer(cfg, progress=False)
    nodes = {c: Context(run_id=1, node_id=100 + c, node_config={"partition-id": c}, state=RecordDict(),
                        run_config={}) for c in range(4)}
    dummy = Order(0, -1, [], init=False, evaluate=False, train=False)
    for c, ctx in nodes.items():  # the handshake
        hello = client_app(Message(RecordDict({ORDER: server._order(dummy)}), dst_node_id=100 + c,
                                   message_type="query"), ctx)
        assert int(hello.content[EXTRA]["client"]) == c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in (1, 2, 3):
            orders = server.side.orders(t)
            glob = _arrays(server.side.downloads())
            replies = []
            for o in orders:
                msg = Message(RecordDict({ORDER: server._order(o), GLOBAL: glob}), dst_node_id=100 + o.client,
                              message_type="train" if o.train else "evaluate")
                replies.append(_reply(client_app(msg, nodes[o.client]), o.client))
            server.side.finish(t, replies)
    assert all(f"{STATE}.{server.token}" in ctx.state for ctx in nodes.values())
    wrong = Message(RecordDict({ORDER: server._order(orders[1]), GLOBAL: glob}), dst_node_id=100,
                    message_type="train")
    with pytest.raises(fl.FedalaError, match=f"an order for client {orders[1].client} reached the node of partition 0"):
        client_app(wrong, nodes[0])
    assert_same(run, server.side.to_run(), sim.global_params, server.side.sim.global_params)


def test_a_client_loads_handed_over_data_only_when_run_flower_started_it(monkeypatch, tmp_path):
    import json

    from fedala_lab.flower import apps

    handed = tmp_path / "handed.pt"
    torch.save({"data": None, "model": None}, handed)  # a file a server could name: never unpickled unasked
    monkeypatch.delenv(apps.PAYLOAD_ENV, raising=False)
    with pytest.raises(fl.FedalaError, match="only in run_flower's local simulation"):
        apps._client_side(json.dumps(fl.RunConfig().to_dict(), default=str), str(handed))


def test_run_flower_saves_the_run_in_the_store_given(monkeypatch, tmp_path, ragged):
    from types import SimpleNamespace

    from fedala_lab.flower import apps, run_flower

    _, srun = split(small_cfg(algo="fedala", rounds=2), ragged)
    monkeypatch.setattr(apps, "simulate_flower", lambda cfgs, *a, **k: [SimpleNamespace(run=srun)])
    run = run_flower(srun.config, ragged, store=tmp_path / "flower")
    assert run is srun and run.path.parent == tmp_path / "flower" and (run.path / "manifest.json").is_file()


@pytest.mark.slow
def test_fedavg_and_fedala_over_flowers_simulation_engine_equal_the_engine(tmp_path):
    """The issue's test: FedAvg and FedALA on teach for 3 rounds as a Flower app (Flower's simulation
    engine: Ray, a simulated SuperNode per client, client state in Context.state) equal fedala_lab's engine
    on the same config and seed: the global model bit for bit, every recorded number."""
    from fedala_lab.figures import ConvergenceDisplay
    from fedala_lab.flower import simulate_flower
    from fedala_lab.record.store import RunStore

    cfgs = [fl.preset("teach", algo=a, rounds=3, backend="loop", record_train_loss=True) for a in ("fedavg", "fedala")]
    servers = simulate_flower(cfgs, progress=False)
    for cfg, server in zip(cfgs, servers):
        sim, run = engine(cfg)
        assert_same(run, server.run, sim.global_params, server.side.sim.global_params)
        assert server.run.meta["engine"] == "flower" and server.run.meta["env"]["backend"] == "loop"
    # a Flower run is a Run: the store keeps it, the figures draw it
    store = RunStore(tmp_path / "flower")
    path = store.save(servers[1].run)
    back = store.load(path.name)
    assert back.meta["engine"] == "flower" and len(back.ala) > 0
    ConvergenceDisplay.from_runs([back, servers[0].run])


@pytest.mark.parametrize("algo", ["perfedavg", "pfedme", "fedphp", "partialfed", "pfedme+ala"])
def test_the_pfl_baselines_that_split_equal_the_engine(algo):
    from fedala_lab.engine.simulate import simulate
    from fedala_lab.experiments.presets import preset

    cfg = preset("teach", algo=algo, rounds=2, num_clients=6, backend="loop")
    split, engine = run_split(cfg), simulate(cfg, progress=False)
    assert split.rounds["acc"].equals(engine.rounds["acc"]) and split.clients["test_loss"].equals(
        engine.clients["test_loss"])


@pytest.mark.parametrize("algo", ["fedamp", "fedfomo", "apple"])
def test_methods_whose_server_sends_client_models_are_refused(algo):
    from fedala_lab.experiments.presets import preset

    with pytest.raises(ConfigError, match="cannot run with clients and server apart"):
        run_split(preset("teach", algo=algo, rounds=1, num_clients=4))
