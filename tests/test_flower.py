"""fedala_lab's methods with the clients and the server apart (fedala_lab/flower, docs/flower.md).

Same results: the split round (flower/split.py) calls the engine's pieces for each client in the engine's
order, so on the loop backend every recorded number, the global model, each client's model and the
algorithm's state equal the engine's bit for bit — in one process (run_split, fast, every method) and over
Flower's simulation engine (one Ray start for FedAvg and FedALA on teach, ≈ 1 minute on 2 cores). Within a
round an algorithm's table rows come client by client (the engine writes ALA's passes across clients), so
tables are compared as sets of rows.

The ServerApp and ClientApp also run here over a Grid whose SuperNodes live in this process (FakeGrid: a node
can be lost, replaced, or its reply tampered with): a lost node's round sent again, a run stopped and
continued from its checkpoint, bad partition-ids, bad waits and a hung or failed Ray start, each with its one
line. The real deployment (a SuperLink and SuperNodes, ``flwr run``, kill -9): tests/test_flower_deploy.py.
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
from fedala_lab.flower.split import Order, from_bytes, put_state_rows, state_rows, to_bytes

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
    # a client side holds its client alone: one row of models and of the algorithm's per-client state
    assert client.sim.setup.num_clients == 1 and client.sim.setup.ids.tolist() == [order.client]
    assert client.sim.local_params["fc.weight"].shape[0] == 1 and client.sim.state.started.shape == (1,)


def _split_rounds(server, client, rounds, saved=None):
    """Rounds ``rounds`` carried in one process; ``saved`` None: each client handed the rows the server holds
    (a resumed run's nodes hold none of their own)."""
    for t in rounds:
        glob = server.downloads()
        replies = []
        for order in server.orders(t):
            rows = server.rows(order.client) if saved is None else saved.get(order.client)
            reply, kept = client.serve(order, glob, rows)
            if saved is not None:
                saved[order.client] = kept
            replies.append(reply)
        server.finish(t, replies)


def _split_checkpoint(cfg, data, path):
    """The server's checkpoint of a split run of ``cfg`` after its rounds 1 and 2, at ``path``."""
    server = ServerSide(cfg, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _split_rounds(server, ClientSide(server.cfg, data), (1, 2), saved={})
    server.save_checkpoint(path)
    return path


@pytest.mark.parametrize("algo,extra", [
    ("fedala", {"max_start_epochs": 2, "threshold": 1e-6}),  # capped clients: the clients' meta lists kept
    ("ditto+ala", {}), ("fedrep", {})])
def test_a_split_run_continues_exactly_from_the_servers_checkpoint(algo, extra, ragged, tmp_path):
    """The server's checkpoint after round 2 (the engine's format, the clients' rows filled in) continued by a
    new server whose clients hold nothing but what it hands them: the run equals the uninterrupted engine's."""
    cfg = small_cfg(algo=algo, backend="loop", rounds=4, join_ratio=0.6, stragglers=0.5, **extra)
    sim, run = engine(cfg, ragged)
    ckpt = _split_checkpoint(cfg, ragged, tmp_path / "ckpt.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = ServerSide(cfg, ragged)
        assert server.round == 0 and server.load_checkpoint(ckpt) and server.round == 2
        _split_rounds(server, ClientSide(server.cfg, ragged), (3, 4))
    assert_same(run, server.to_run(), sim.global_params, server.sim.global_params)
    if extra:
        assert run.meta["capped_clients"]  # the case happened


def test_the_engine_continues_a_split_checkpoint_and_refuses_what_is_not_one(ragged, tmp_path):
    cfg = small_cfg(algo="fedala", backend="loop", rounds=4, join_ratio=0.6)
    sim, run = engine(cfg, ragged)
    ckpt = _split_checkpoint(cfg, ragged, tmp_path / "ckpt.pt")
    resumed = Simulation(cfg, ragged)
    assert resumed.load_checkpoint(ckpt) and resumed.round == 2
    assert_same(run, resumed.run(progress=False), sim.global_params, resumed.global_params)
    # an engine checkpoint lacks the clients' rows as they kept them; another config's is not this run's
    resumed.save_checkpoint(tmp_path / "engine.pt")
    assert not ServerSide(cfg, ragged).load_checkpoint(tmp_path / "engine.pt")
    assert not ServerSide(cfg.replace(seed=1), ragged).load_checkpoint(ckpt)
    assert not ServerSide(cfg, ragged).load_checkpoint(tmp_path / "absent.pt")


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


class AggregatesEveryone(fl.Algorithm):
    def aggregate(self, rnd, senders):
        return rnd.weighted_mean(rnd.everyone)


def test_an_aggregation_that_reads_models_no_sender_uploaded_fails_loudly(ragged):
    # (a client side holds its client alone: a client hook has no other client's model to read)
    fl.register_algorithm("probe_aggregateseveryone", AggregatesEveryone, modifiers=())
    cfg = small_cfg(algo="probe_aggregateseveryone", backend="loop", join_ratio=0.6)
    with pytest.raises(SplitError, match="read models of clients that sent none"):
        split(cfg, ragged)


class MeansEveryone(fl.Algorithm):
    def aggregate(self, rnd, senders):
        return fl.Aggregated({n: rnd.local_params[n].mean(0) for n in rnd.param_names}, 0)


class SelectsByModel(fl.Algorithm):
    def select(self, rnd):
        return torch.argsort(rnd.local_params[rnd.param_names[0]][rnd.everyone].flatten(1).norm(dim=1))[:2]


def test_the_server_holds_the_senders_uploads_alone(ragged):
    # between rounds it holds no client's model; an aggregation indexes the senders' rows by id (FedAvg's code,
    # unchanged) and nothing else: another client's row, the stack whole or a selection by models is refused
    server, run = split(small_cfg(algo="fedavg", backend="loop", join_ratio=0.6, rounds=2), ragged)
    assert run.status == "complete"
    held = server.sim.local_params[server.sim.setup.param_names[0]]
    assert held.rows == {} and held.shape[0] == ragged.num_clients
    with pytest.raises(SplitError, match=r"read models of clients that sent none \(0, 1\)"):
        held[torch.tensor([0, 1])]
    for name, method in (("probe_meanseveryone", MeansEveryone), ("probe_selectsbymodel", SelectsByModel)):
        fl.register_algorithm(name, method, modifiers=())
        with pytest.raises(SplitError, match="every client's model|sent none"):
            split(small_cfg(algo=name, backend="loop"), ragged)


# ------------------------------------------------------------------------------------------ pieces


def test_a_clients_rows_of_a_state_round_trip_and_the_rest_stays(ragged):
    n = 5
    state = {"w": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3), "server": torch.ones(2),
             "seen": [1, 2], "flag": torch.zeros(n, dtype=torch.bool)}
    mine = state_rows(state, 2, n)
    assert mine["w"].shape == (1, 3) and mine["server"].shape == (2,) and mine["seen"] == [1, 2]
    blob = from_bytes(to_bytes(mine))
    state["w"][:] = float("nan")  # rows a holder of every client's state lacks
    blob["flag"][0] = True
    put_state_rows(state, blob, 2, n)
    assert torch.equal(state["w"][2], torch.tensor([6.0, 7.0, 8.0])) and torch.isnan(state["w"][0]).all()
    assert state["flag"].tolist() == [False, False, True, False, False]
    order = Order(3, 2, init=True, evaluate=False, train=True, limit=None, dropped=False)
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


class FakeGrid:
    """Flower's Grid as a ServerApp sees it, with its SuperNodes in this process: each message is served when it
    is pushed, by the ClientApp with its node's Context (kept from message to message, as Flower keeps it), and
    its reply (or Flower's error reply) is there at the next pull. ``lose(node)`` takes a node away (its
    messages get Flower's "Node Unavailable"), ``add(node, partition)`` brings one; ``tamper(reply)`` may
    change each reply."""

    def __init__(self, partitions: dict[int, object], *, silent: bool = False):
        from flwr.app import Context, RecordDict

        self._context = lambda node, p: Context(run_id=1, node_id=node, node_config={"partition-id": p},
                                                state=RecordDict(), run_config={})
        self.contexts = {node: self._context(node, p) for node, p in partitions.items()}
        self.replies, self.pushed, self.silent = {}, [], silent
        self.on_push = self.tamper = None

    def add(self, node, partition):
        self.contexts[node] = self._context(node, partition)

    def lose(self, node):
        del self.contexts[node]

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        import uuid

        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            self.pushed.append(m)
            if self.on_push is not None:
                self.on_push(self, m)
            if not self.silent:
                self.replies[mid] = self._serve(m)
        return ids

    def _serve(self, m):
        from flwr.app import Error, Message
        from flwr.common.constant import ErrorCode

        from fedala_lab.flower import client_app

        ctx = self.contexts.get(m.metadata.dst_node_id)
        if ctx is None:
            return Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Error: Node Unavailable — The destination "
                                 "node failed to report a heartbeat within 2 × its expected interval."), reply_to=m)
        try:
            reply = client_app(m, ctx)
        except Exception as ex:  # noqa: BLE001 - as Flower reports a ClientApp's exception
            return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=str(type(ex)) + ":<'" + str(ex)
                                 + "'>"), reply_to=m)
        return self.tamper(m, reply) if self.tamper is not None else reply

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]


@pytest.fixture
def task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for k in ("_run_id", "_node_id", "_task_id"):  # what Flower sets in the process of a ServerApp
        monkeypatch.setattr(TaskIdentity, k, 1)


def flower_server(cfg, **kw):
    from fedala_lab.flower import FlowerServer

    return FlowerServer(cfg, progress=False, join=kw.pop("join", 5), **kw)


def serve(server, grid):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.main(grid, None)
    return server


DIGITS4 = {"algo": "fedprox+ala", "rounds": 3, "num_clients": 4, "backend": "loop", "join_ratio": 0.5}


def test_the_apps_over_a_grid_equal_the_engine_and_each_node_keeps_its_clients_rows(task_identity):
    """The ServerApp and the ClientApp without Ray: the orders, the handshake, the replies decoded and each
    node's Context carried as Flower carries it; the run is the engine's."""
    from flwr.app import Message, RecordDict

    from fedala_lab.flower import client_app
    from fedala_lab.flower.apps import GLOBAL, ORDER, STATE

    cfg = fl.preset("teach-digits", **DIGITS4)
    sim, run = engine(cfg)
    grid = FakeGrid({100 + c: c for c in range(4)})
    server = serve(flower_server(cfg), grid)
    assert server.error is None
    assert_same(run, server.run, sim.global_params, server.side.sim.global_params)
    assert all(f"{STATE}.{server.token}" in ctx.state for ctx in grid.contexts.values())
    # the rows travel down only when a node lacks them: the first order of a client starts from the initial ones
    sent = [m.content[ORDER]["rows_from"] for m in grid.pushed if m.metadata.message_type != "query"]
    assert set(sent) == {"initial", "context"} and sent.count("initial") == 4
    order = next(m for m in grid.pushed if m.metadata.message_type == "train").content[ORDER]
    wrong = Message(RecordDict({ORDER: order, GLOBAL: grid.pushed[-1].content[GLOBAL]}), dst_node_id=100,
                    message_type="train")
    if order["client"] != 0:
        with pytest.raises(fl.FedalaError, match=f"an order for client {order['client']} reached the node of "
                                                 "partition 0"):
            client_app(wrong, grid.contexts[100])


def lose_in_round(t, node, then=None):
    """An on_push hook: the node is lost when round t's first order is pushed (``then(grid)`` after)."""
    def hook(grid, m):
        if m.metadata.group_id == str(t) and node in grid.contexts:
            grid.lose(node)
            if then is not None:
                then(grid)
    return hook


def test_a_lost_node_costs_a_round_its_order_goes_to_the_node_that_replaces_it(task_identity):
    cfg = fl.preset("teach-digits", **DIGITS4)
    sim, run = engine(cfg)
    grid = FakeGrid({100 + c: c for c in range(4)})
    grid.on_push = lose_in_round(2, 101, then=lambda g: g.add(201, 1))  # a new SuperNode, partition-id=1
    server = serve(flower_server(cfg, rejoin=5), grid)
    assert server.error is None, server.error
    assert_same(run, server.run, sim.global_params, server.side.sim.global_params)
    again = [m for m in grid.pushed if m.metadata.dst_node_id == 201 and m.metadata.message_type != "query"]
    assert again[0].content["fedala.order"]["rows_from"] == "server"  # its rows of round 1, from the server


def test_a_lost_node_stops_the_run_naming_the_client_and_round_and_flower_run_continues_it(task_identity, tmp_path):
    cfg = fl.preset("teach-digits", **DIGITS4)
    sim, run = engine(cfg)
    ckpt = tmp_path / "ckpt.pt"
    grid = FakeGrid({100 + c: c for c in range(4)})
    grid.on_push = lose_in_round(2, 101)
    server = serve(flower_server(cfg, rejoin=0, checkpoint=ckpt), grid)
    msg = str(server.error)
    assert msg.startswith("round 2: client 1 (partition-id=1): its SuperNode 101 was lost (Node Unavailable — ")
    assert f"Rounds 1–1 are kept ({ckpt})" in msg and "client -1" not in msg and server.run is None
    # a new ServerApp (flwr run again), on a new federation: every node's Context is empty
    again = serve(flower_server(cfg, rejoin=0, checkpoint=ckpt), FakeGrid({300 + c: c for c in range(4)}))
    assert again.error is None and again.side.round == 3
    assert_same(run, again.run, sim.global_params, again.side.sim.global_params)
    # the checkpoint of the last round (a ServerApp stopped before it saved the run): no federation needed
    last = serve(flower_server(cfg, checkpoint=ckpt, join=0.1), FakeGrid({}))
    assert last.error is None
    assert_same(run, last.run, sim.global_params, last.side.sim.global_params)


def test_a_round_waits_for_a_lost_node_no_longer_than_rejoin(task_identity):
    cfg = fl.preset("teach-digits", **{**DIGITS4, "rounds": 2})
    grid = FakeGrid({100 + c: c for c in range(4)})
    grid.on_push = lose_in_round(2, 102)
    server = serve(flower_server(cfg, rejoin=0.5), grid)
    assert "round 2: client 2 (partition-id=2): its SuperNode 102 was lost" in str(server.error)
    assert "and no SuperNode served partition-id=2 within rejoin=0.5 s. No round was kept" in str(server.error)


class _Evil:
    def __reduce__(self):
        import os
        return os.system, ("touch EVIL_RAN",)


def test_a_malicious_pickle_in_a_reply_is_refused_unread_naming_the_client(task_identity, tmp_path, monkeypatch):
    import pickle

    from flwr.app import ConfigRecord

    monkeypatch.chdir(tmp_path)
    cfg = fl.preset("teach-digits", **{**DIGITS4, "rounds": 2})

    def tamper(m, reply):
        if m.metadata.dst_node_id == 102 and m.metadata.group_id == "2":
            extra = dict(reply.content["fedala.extra"])
            extra["records"] = pickle.dumps(_Evil(), protocol=2)  # the protocol torch.save writes
            reply.content["fedala.extra"] = ConfigRecord(extra)
        return reply

    grid = FakeGrid({100 + c: c for c in range(4)})
    grid.tamper = tamper
    server = serve(flower_server(cfg), grid)
    msg = str(server.error)
    assert msg.startswith("round 2: the reply of client 2 (SuperNode 102) cannot be read (records: UnpicklingError: "
                          "Trying to load unsupported GLOBAL posix.system whose module posix is blocked.)")
    assert msg.endswith("refused unread") and "\n" not in msg and "weights_only" not in msg
    assert not (tmp_path / "EVIL_RAN").exists()


@pytest.mark.parametrize("value,shown", [
    ("abc", "partition-id='abc' is not allowed: a client id: an integer 0 … N−1"),
    (1.5, "partition-id=1.5 is not allowed: a client id: an integer"),  # refused, not truncated to 1
    (True, "partition-id=True is not allowed"),
    (-1, "partition-id=-1 is not allowed: a client of the run's data: 0 … 3 (4 clients)"),
    (7, "partition-id=7 is not allowed: a client of the run's data: 0 … 3 (4 clients)")])
def test_a_supernode_with_a_bad_partition_id_is_refused_naming_it(value, shown, task_identity):
    cfg = fl.preset("teach-digits", **{**DIGITS4, "rounds": 1})
    server = serve(flower_server(cfg), FakeGrid({100: 0, 101: 1, 102: value, 103: 3}))
    assert str(server.error) == f"SuperNode 102 cannot join: {shown}" or str(server.error).startswith(
        f"SuperNode 102 cannot join: {shown}")
    assert "invalid literal" not in str(server.error)


def test_a_partition_id_given_as_digits_in_quotes_is_that_client(task_identity):
    cfg = fl.preset("teach-digits", **{**DIGITS4, "rounds": 1})
    server = serve(flower_server(cfg), FakeGrid({100: "0", 101: 1, 102: " 2", 103: 3}))
    assert server.error is None and server.nodes == {0: 100, 1: 101, 2: 102, 3: 103}


def test_a_federation_that_does_not_join_in_time_is_refused_in_bounded_time(task_identity):
    cfg = fl.preset("teach-digits", **{**DIGITS4, "rounds": 1})
    with pytest.raises(fl.ConfigError, match=r"num_clients=4 is not allowed: the number of SuperNodes, one per "
                                             r"client: 3 connected within join=0.5 s"):
        raise serve(flower_server(cfg, join=0.5), FakeGrid({100: 0, 101: 1, 102: 2})).error
    with pytest.raises(fl.FedalaError, match=r"no answer from the SuperNodes of client\(s\) \[0, 1, 2, 3\] within "
                                             r"join=0.5 s \(0 of 4 answered\)"):
        raise serve(flower_server(cfg, join=0.5), FakeGrid({100 + c: c for c in range(4)}, silent=True)).error
    with pytest.raises(fl.FedalaError, match=r"two SuperNodes \(100, 104\) serve partition-id=0"):
        raise serve(flower_server(cfg), FakeGrid({100: 0, 101: 1, 102: 2, 103: 3, 104: 0})).error


@pytest.mark.parametrize("key,value,allowed", [
    ("timeout", "abc", "seconds ≥ 0 to wait for a round's replies"), ("timeout", -5, "seconds ≥ 0"),
    ("timeout", float("inf"), "seconds ≥ 0"), ("join", "x", "seconds ≥ 0 to wait for the SuperNodes"),
    ("rejoin", -1, "seconds ≥ 0 to wait for a lost client's SuperNode"), ("resume", "no", "true"),
    ("store", 3, "a folder path")])
def test_the_server_apps_own_keys_are_checked_naming_each(key, value, allowed):
    from fedala_lab.flower.apps import server_options

    with pytest.raises(fl.ConfigError) as err:
        server_options({"timeout": 0, key: value})
    assert str(err.value).startswith(f"{key}={value!r} is not allowed: {allowed}")
    assert server_options({"timeout": 30, "rejoin": 0}) == {"timeout": 30.0, "join": 120.0, "rejoin": 0.0,
                                                            "resume": True, "store": "runs/flower"}
    with pytest.raises(fl.ConfigError, match="timeout=-5 is not allowed"):
        flower_server(fl.preset("teach-digits", num_clients=2), timeout=-5)


def _engine_that(behaviour):
    """A stand-in for flwr.simulation.run_simulation: runs the ServerApp in a thread, as Flower does, on a grid
    whose clients never answer, then ``behaviour()`` (raise as a failed Ray start, or block as a hung one)."""
    def run_simulation(server_app, client_app, num_supernodes, backend_config, verbose_logging):
        import threading

        grid = FakeGrid({100 + c: c for c in range(num_supernodes)}, silent=True)
        threading.Thread(target=server_app, args=(grid, None), daemon=False).start()
        behaviour()
    return run_simulation


def test_run_flower_ends_with_a_message_when_rays_start_fails_or_hangs(monkeypatch, task_identity):
    import threading
    import time

    import flwr.simulation

    from fedala_lab.flower import apps, run_flower

    cfg = fl.preset("teach-digits", algo="fedavg", rounds=1, num_clients=2, backend="loop")

    def fails():
        time.sleep(0.3)
        try:
            raise TimeoutError("The current node timed out during startup")
        except TimeoutError as err:
            raise RuntimeError("An error was encountered. Ending simulation.") from err

    before = threading.active_count()
    monkeypatch.setattr(flwr.simulation, "run_simulation", _engine_that(fails))
    tic = time.monotonic()
    with pytest.raises(fl.FedalaError, match="Flower's simulation engine stopped before the run finished: "
                                             "TimeoutError: The current node timed out during startup"):
        run_flower(cfg, progress=False)
    assert time.monotonic() - tic < 30
    time.sleep(1)
    assert threading.active_count() <= before  # the ServerApp's thread ended too: nothing left to hang on exit

    monkeypatch.setattr(flwr.simulation, "run_simulation", _engine_that(threading.Event().wait))  # hangs forever
    monkeypatch.setattr(apps, "STOP_SECONDS", 0.5)
    tic = time.monotonic()
    with pytest.raises(fl.FedalaError, match=r"Flower's simulation engine \(Ray and its client processes\) did not "
                                             r"start within start_timeout=1 s.* \(0 of 2 clients answered\)"):
        run_flower(cfg, progress=False, start_timeout=1)
    assert time.monotonic() - tic < 30
    with pytest.raises(fl.ConfigError, match="start_timeout=0 is not allowed"):
        run_flower(cfg, start_timeout=0)


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


@pytest.mark.parametrize("algo", ["perfedavg", "pfedme", "fedphp", "partialfed", "partialfed-adaptive", "pfedme+ala"])
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
