"""The Flower app: a ServerApp and a ClientApp (Flower's Message API) that carry fedala_lab's split round
(flower/split.py) between the server and the clients.

    ServerApp (FlowerServer.main)                       ClientApp (client_app), one per SuperNode
    wait for the run's N SuperNodes
    "query" → each node: which partition do you serve?  → its partition-id (node_config); builds its ClientSide
    per round t:
      orders = ServerSide.orders(t)
      "train" (selected) / "evaluate" (the others)       → ClientSide.serve(order, G, rows from Context.state)
        content: fedala.order (ConfigRecord: the run's     ← fedala.metrics (MetricRecord), fedala.upload
        config, t, what to do), fedala.global (G)            (ArrayRecord: what the method aggregates),
                                                             fedala.extra (records, meta, snapshots)
      ServerSide.finish(t, replies)                         the client's rows saved in Context.state
    the Run (ServerSide.to_run), saved in a RunStore under ``flwr run``

A client's state between messages lives in its ``Context.state`` (``fedala.client``: its model, buffers and
rows of the algorithm's state as bytes), which Flower keeps per node and run — in the simulation engine
across Ray actors, in a deployment in the SuperNode — so any process may serve any message. Each process
keeps one :class:`~fedala_lab.flower.split.ClientSide` per run (the data and model built once).

Entry points: :func:`run_flower` (Python, Flower's simulation engine in this process), ``flwr run`` on the
app in ``fedala_lab/flower/app`` (``server_app`` and ``client_app`` below; docs/flower.md), and the same
app on a deployment (SuperLink + one SuperNode per client with ``--node-config "partition-id=<c>"``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from logging import INFO, WARNING
from pathlib import Path

import torch

# Before Flower and Ray read them: nothing leaves the machine (Flower's telemetry, Ray's usage statistics)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from ..config import RunConfig, parse_value, setting_names, with_settings_file
from ..data.federated import FederatedData
from ..engine.rounds import METRICS
from ..engine.sides import ClientSide, Order, Reply, ServerSide, from_bytes, to_bytes
from ..errors import ConfigError, FedalaError
from ..experiments.presets import preset
from ..models import CUSTOM_PREFIX
from ..record.run import Run
from ..record.store import RunStore

ORDER, GLOBAL = "fedala.order", "fedala.global"  # server → client
OUT_METRICS, UPLOAD, EXTRA = "fedala.metrics", "fedala.upload", "fedala.extra"  # client → server
STATE = "fedala.client"  # the client's rows, in its Context.state (one record per run: STATE.<token>)
PARTITION_ID = "partition-id"
PAYLOAD_ENV = "FEDALA_FLOWER_PAYLOAD"  # the one file of custom data/model this machine's clients may load
JOIN_SECONDS = 120.0  # how long the server waits for the federation's SuperNodes, unless a timeout is set


# ------------------------------------------------------------------------------------------- records


def _arrays(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Tensors as an ArrayRecord (NumPy's format: every bit kept)."""
    return ArrayRecord.from_torch_state_dict({k: v.detach().cpu().contiguous() for k, v in tensors.items()})


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(a.numpy().copy()) for k, a in record.items()}


def _reply_content(reply: Reply) -> RecordDict:
    content = {OUT_METRICS: MetricRecord({k: float(reply.metrics[k]) for k in METRICS}),
               EXTRA: ConfigRecord({"client": reply.client, "records": to_bytes(reply.records),
                                    "meta": to_bytes(reply.meta), "snapshots": to_bytes(reply.snapshots)})}
    if reply.upload is not None:
        content[UPLOAD] = _arrays(reply.upload)
    return RecordDict(content)


def _reply(msg: Message, partition: int) -> Reply:
    """A client's reply message as a :class:`Reply`; a client's error as a FedalaError naming the client."""
    if msg.has_error():
        raise FedalaError(f"client {partition} failed: {msg.error.reason}")
    c = msg.content
    extra = c[EXTRA]
    return Reply(client=int(extra["client"]), metrics=dict(c[OUT_METRICS]),
                 upload=_tensors(c[UPLOAD]) if UPLOAD in c else None, snapshots=from_bytes(extra["snapshots"]),
                 records=from_bytes(extra["records"]), meta=from_bytes(extra["meta"]))


# ------------------------------------------------------------------------------------------- the client

client_app = ClientApp()
_SIDES: OrderedDict[tuple[str, str], ClientSide] = OrderedDict()  # this process's runs (a Ray actor's, a node's)


def _client_side(run_json: str, payload: str) -> ClientSide:
    """This process's :class:`ClientSide` of the run (built on the first message, kept for the next)."""
    key = (run_json, payload)
    side = _SIDES.get(key)
    if side is None:
        data = model = None
        if payload:  # data or a model of the caller's own, handed over by run_flower in a private file
            if os.environ.get(PAYLOAD_ENV) != payload:  # never a file a server names: it would run its pickle
                raise FedalaError("custom data and models reach clients only in run_flower's local simulation: "
                                  "this client was not started by it")
            handed = torch.load(payload, map_location="cpu", weights_only=False)
            data, model = handed["data"], handed["model"]
        side = _SIDES[key] = ClientSide(RunConfig.from_dict(json.loads(run_json)), data, model)
        while len(_SIDES) > 2:
            _SIDES.popitem(last=False)
    return side


def _partition(context: Context) -> int:
    if PARTITION_ID not in context.node_config:
        raise FedalaError("this SuperNode serves no partition: start it with --node-config \"partition-id=<client>\"")
    return int(context.node_config[PARTITION_ID])


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    """The handshake: which client this node serves, and its train-split size (the server checks it)."""
    order = msg.content[ORDER]
    side = _client_side(order["run"], order["payload"])
    c = _partition(context)
    n = side.num_clients
    if not 0 <= c < n:
        raise FedalaError(f"partition-id {c} does not exist: the run's data has {n} clients (0 … {n - 1})")
    return Message(RecordDict({EXTRA: ConfigRecord({"client": c, "train_size": side.train_size(c),
                                                    "backend": side.backend_name})}), reply_to=msg)


@client_app.train()
def _train(msg: Message, context: Context) -> Message:
    return _serve(msg, context)


@client_app.evaluate()
def _evaluate(msg: Message, context: Context) -> Message:
    return _serve(msg, context)


def _serve(msg: Message, context: Context) -> Message:
    """One order: initialise, evaluate and (selected clients) train, from the rows in the Context."""
    cfg = msg.content[ORDER]
    side = _client_side(cfg["run"], cfg["payload"])
    order = Order.from_config(cfg)
    if order.client != _partition(context):
        raise FedalaError(f"an order for client {order.client} reached the node of partition {_partition(context)}")
    name = f"{STATE}.{cfg['token']}"  # this run's rows
    kept = context.state.get(name)
    reply, rows = side.serve(order, _tensors(msg.content[GLOBAL]), kept["rows"] if kept is not None else None)
    context.state[name] = ConfigRecord({"rows": rows})
    return Message(_reply_content(reply), reply_to=msg)


# ------------------------------------------------------------------------------------------- the server


class FlowerServer:
    """The server side of one run over a Flower Grid: ``main(grid, context)`` is a ServerApp's main.

    ``cfg``, ``data``, ``model`` as for ``simulate``; ``payload``: the file that hands custom data or a custom
    model to the clients (run_flower writes it). ``timeout``: seconds to wait for the SuperNodes and for each
    round's replies (None: wait). After ``main``: :attr:`run` (the Run) or :attr:`error` (what stopped it:
    a TrainingDiverged carries the rounds so far)."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model=None, *, payload: str = "",
                 timeout: float | None = None, progress: bool = True):
        self.side = ServerSide(cfg, data, model, engine="flower")
        self.run_json = json.dumps(self.side.cfg.to_dict(), default=str)
        self.payload, self.timeout, self.progress = payload, timeout, progress
        self.token = uuid.uuid4().hex[:16]  # names this run's rows in the clients' Context.state
        self.run: Run | None = None
        self.error: BaseException | None = None

    def main(self, grid: Grid, context: Context) -> None:
        try:
            self._main(grid)
        except BaseException as err:  # noqa: BLE001 - handed to the caller, who re-raises it
            self.error = err

    def _order(self, order: Order) -> ConfigRecord:
        return ConfigRecord({**order.config(), "run": self.run_json, "payload": self.payload, "token": self.token})

    def _main(self, grid: Grid) -> None:
        side, cfg = self.side, self.side.cfg
        nodes = self._nodes(grid)
        for t in range(1, cfg.rounds + 1):
            orders = side.orders(t)
            glob = _arrays(side.downloads())
            messages = [Message(RecordDict({ORDER: self._order(o), GLOBAL: glob}), dst_node_id=nodes[o.client],
                                message_type="train" if o.train else "evaluate", group_id=str(t)) for o in orders]
            partition = {nodes[o.client]: o.client for o in orders}
            replies = [_reply(r, partition.get(r.metadata.src_node_id, -1))
                       for r in grid.send_and_receive(messages, timeout=self.timeout)]
            row = side.finish(t, replies)
            if self.progress:
                log(INFO, "fedala_lab %s round %d/%d: acc %.2f %%, %.2f s", cfg.algo, t, cfg.rounds,
                    100 * row["acc"], row["seconds"])
        self.run = side.to_run()

    def _nodes(self, grid: Grid) -> dict[int, int]:
        """partition (client id) → node id, from a handshake with every SuperNode; the federation must have
        one SuperNode per client of the run's data. Waits for them up to ``timeout`` (default 120 s)."""
        n = self.side.num_clients
        deadline = time.monotonic() + (self.timeout or JOIN_SECONDS)
        ids, said = list(grid.get_node_ids()), -1
        while len(ids) < n and time.monotonic() < deadline:
            if len(ids) != said and self.progress:
                log(INFO, "fedala_lab: waiting for SuperNodes, %d of %d connected", len(ids), n)
                said = len(ids)
            time.sleep(0.2)
            ids = list(grid.get_node_ids())
        if len(ids) < n:
            raise ConfigError("num_clients", n, f"the number of SuperNodes, one per client: {len(ids)} connected",
                              "a simulation needs --federation-config \"num-supernodes=N\" (flwr run) or "
                              "run_flower; a deployment one SuperNode per client, partition-id 0 … N−1")
        dummy = Order(0, -1, [], init=False, evaluate=False, train=False)
        messages = [Message(RecordDict({ORDER: self._order(dummy)}), dst_node_id=i, message_type="query", group_id="0")
                    for i in ids]
        found: dict[int, int] = {}
        for r in grid.send_and_receive(messages, timeout=self.timeout):
            if r.has_error():
                raise FedalaError(f"SuperNode {r.metadata.src_node_id} failed to join: {r.error.reason}")
            extra = r.content[EXTRA]
            c = int(extra["client"])
            if c in found:
                raise FedalaError(f"two SuperNodes serve partition {c}: each client needs its own")
            if int(extra["train_size"]) != self.side.train_size(c):
                raise FedalaError(f"the SuperNode of client {c} holds {extra['train_size']} train samples, the "
                                  f"server's data {self.side.train_size(c)}: they load other data")
            found[c] = r.metadata.src_node_id
            self.side.client_backend = str(extra["backend"])
        if sorted(found) != list(range(n)):
            raise ConfigError("num_clients", n, f"the number of SuperNodes, one per client: the federation has "
                              f"{len(ids)} serving partitions {sorted(found)[:20]}",
                              "one SuperNode per client, partition-id 0 … N−1")
        return found


# ---------------------------------------------------------------------------- the Python entry point


def run_flower(cfg: RunConfig, data: FederatedData | None = None, *, model=None, backend_config: dict | None = None,
               store: RunStore | str | Path | None = None, progress: bool = True, verbose: bool = False) -> Run:
    """Run ``cfg`` as a Flower app in Flower's simulation engine (Ray, on this machine): one simulated
    SuperNode per client; returns the same :class:`Run` as ``simulate(cfg, data, model=model)`` (on the loop
    backend the same global models, bit for bit; docs/flower.md).

    ``backend_config``: Flower's (default ``{"client_resources": {"num_cpus": 1}}`` and Ray given
    min(cores, clients) CPUs: a client process per core, at most one per client); ``store``: also save the run there (a RunStore or its folder; keep Flower runs apart
    from the engine's, e.g. ``runs/flower``: they share the config's key). Raises ConfigError for a method that
    cannot run with clients and server apart, TrainingDiverged as the engine does.
    """
    run = simulate_flower([cfg], data, model=model, backend_config=backend_config, progress=progress,
                          verbose=verbose)[0].run
    if store is not None:
        (store if isinstance(store, RunStore) else RunStore(store)).save(run)
    return run


def simulate_flower(cfgs: Sequence[RunConfig], data: FederatedData | None = None, *, model=None,
                    backend_config: dict | None = None, progress: bool = True,
                    verbose: bool = False) -> list[FlowerServer]:
    """Run the configs one after another on one simulated federation (one Ray start; they must have the same
    number of clients), returning their :class:`FlowerServer` objects: each one's Run (``.run``) and server
    state (``.side.global_params``: the final global model). The first run that fails raises."""
    from flwr.simulation import run_simulation

    server_app = ServerApp()
    with tempfile.TemporaryDirectory(prefix="fedala-flower-") as tmp:
        payload = ""
        custom_data = data if data is not None and data.source is None else None
        if custom_data is not None or model is not None:
            # data or a model of the caller's own: handed to this machine's client processes in a private file
            payload = str(Path(tmp) / "handed.pt")
            torch.save({"data": custom_data, "model": model}, payload)
        servers = [FlowerServer(cfg, data, model, payload=payload, progress=progress) for cfg in cfgs]
        if len({s.side.num_clients for s in servers}) > 1:
            raise ConfigError("num_clients", [s.side.num_clients for s in servers], "the same number of clients "
                              "in every run of one simulated federation")

        def main(grid: Grid, context: Context) -> None:
            for s in servers:
                s.main(grid, context)
                if s.error is not None:
                    return

        server_app.main()(main)
        n = servers[0].side.num_clients
        # default: a client process per core, but no more than there are clients (each holds the run's data)
        config = backend_config if backend_config is not None else {
            "client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": min(os.cpu_count() or 1, n)}}
        before = os.environ.get(PAYLOAD_ENV)
        os.environ[PAYLOAD_ENV] = payload  # the client processes (Ray's, started from here) inherit it
        try:
            run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n,
                           backend_config=config, verbose_logging=verbose)
        finally:
            if before is None:
                os.environ.pop(PAYLOAD_ENV, None)
            else:
                os.environ[PAYLOAD_ENV] = before
    for s in servers:
        if s.error is not None:
            raise s.error
        if s.run is None:
            raise FedalaError("the Flower simulation ended before the run finished (see Flower's log above)")
    return servers


# ------------------------------------------------------------------------------- the flwr run entry point

# [tool.flwr.app.config] keys of fedala_lab/flower/app/pyproject.toml besides the settings themselves
APP_KEYS = ("preset", "config", "set", "store", "timeout")


def config_from_run_config(run_config) -> RunConfig:
    """The RunConfig a ``flwr run`` names: ``preset`` (a fedala_lab preset, "" for the defaults), ``config`` (a
    JSON/YAML settings file, "" none), every other key that is a setting (``algo``, ``rounds``, ``seed`` …),
    and ``set`` ("key=value key=value", any setting, as the CLI's ``--set``)."""
    rc = dict(run_config)
    cfg = preset(str(rc["preset"])) if rc.get("preset") else RunConfig()
    if rc.get("config"):
        cfg = with_settings_file(cfg, str(rc["config"]))
    changes = {k.replace("-", "_"): v for k, v in rc.items() if k not in APP_KEYS}
    for item in str(rc.get("set") or "").split():
        k, sep, v = item.partition("=")
        if not sep:
            raise ConfigError("set", item, "key=value pairs separated by spaces, e.g. \"shuffle=true lr=0.05\"")
        changes[k.strip().replace("-", "_")] = parse_value(v.strip())
    unknown = sorted(set(changes) - set(setting_names()))
    if unknown:
        raise ConfigError(unknown[0], changes[unknown[0]], "a fedala_lab setting (fedala-lab run --help lists them)")
    return (cfg.replace(**changes) if changes else cfg).check()


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    """``flwr run``'s ServerApp: the run the app's config names, saved in its ``store`` (default ./runs/flower)."""
    rc = dict(context.run_config)
    cfg = config_from_run_config(rc)
    if cfg.data.is_custom or cfg.model.startswith(CUSTOM_PREFIX):
        raise ConfigError("data", cfg.data.dataset, "data and a model fedala_lab builds from the config under flwr "
                          "run (custom data or models: run_flower in Python)")
    timeout = float(rc["timeout"]) if rc.get("timeout") else None
    server = FlowerServer(cfg, timeout=timeout)
    server.main(grid, context)
    if server.error is not None:
        log(WARNING, "fedala_lab: %s", server.error)
        raise server.error
    path = RunStore(str(rc.get("store") or "runs/flower")).save(server.run)
    s = server.run.summary()
    log(INFO, "fedala_lab: %s best %.2f %%, final %.2f %% → %s", cfg.algo, s["best_acc"], s["final_acc"], path)


__all__ = ["FlowerServer", "client_app", "config_from_run_config", "run_flower", "server_app", "simulate_flower"]
