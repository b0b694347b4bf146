"""The Flower app: a ServerApp and a ClientApp (Flower's Message API) that carry fedala_lab's split round
(engine/sides.py) between the server and the clients.

    ServerApp (FlowerServer.main)                       ClientApp (client_app), one per SuperNode
    continue from the run's checkpoint, if any
    wait for the run's N SuperNodes
    "query" → each node: which partition do you serve?  → its partition-id (node_config); builds its ClientSide
    per round t:
      orders = ServerSide.orders(t)
      "train" (selected) / "evaluate" (the others)       → ClientSide.serve(order, G, its rows: from its
        content: fedala.order (ConfigRecord: the run's       Context.state, or handed by the server)
        config, t, what to do, rows to start from),      ← fedala.metrics (MetricRecord), fedala.upload
        fedala.global (G)                                    (ArrayRecord: what the method aggregates),
                                                             fedala.extra (records, meta, snapshots, its rows)
      ServerSide.finish(t, replies); the checkpoint         the client's rows saved in Context.state
    the Run (ServerSide.to_run), saved in a RunStore under ``flwr run``

A client's state between messages lives in its ``Context.state`` (``fedala.client.<token>``: its model,
buffers and rows of the algorithm's state as bytes), which Flower keeps per node and run, and goes back to
the server with each reply: the server checkpoints every client's rows with its own state after every round
(the engine's checkpoint format, in the run store), and hands a client its rows when its node lacks them (a
run continued from the checkpoint, a SuperNode that replaces a lost one). So a lost SuperNode costs a round,
not the run: the round's order is sent again to a node that serves the same partition within ``rejoin``
seconds, else the run stops naming the client and the round, and ``flwr run`` continues it from the last
finished round — equal to an uninterrupted run.

Waits are bounded: the federation must join within ``join`` seconds, each round's replies come within
``timeout`` (0: no limit), and a lost client's partition is served again within ``rejoin``; Flower's
simulation engine (:func:`run_flower`) must answer the handshake within ``start_timeout``.

Entry points: :func:`run_flower` (Python, Flower's simulation engine in this process), ``flwr run`` on the
app in ``fedala_lab/flower/app`` (``server_app`` and ``client_app`` below; docs/flower.md), and the same
app on a deployment (SuperLink + one SuperNode per client with ``--node-config "partition-id=<c>"``).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from logging import ERROR, INFO, WARNING
from pathlib import Path

import torch

# Before Flower and Ray read them: nothing leaves the machine (Flower's telemetry, Ray's usage statistics)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from ..config import RunConfig, parse_value, setting_names, with_settings_file
from ..data.federated import FederatedData
from ..engine.rounds import METRICS
from ..engine.sides import ClientSide, Order, Reply, ServerSide, from_bytes, to_bytes
from ..errors import ConfigError, FedalaError, TrainingDiverged
from ..experiments.presets import preset
from ..experiments.runs import clean_checkpoints
from ..models import CUSTOM_PREFIX
from ..record.run import Run
from ..record.store import RunStore

ORDER, GLOBAL = "fedala.order", "fedala.global"  # server → client
OUT_METRICS, UPLOAD, EXTRA = "fedala.metrics", "fedala.upload", "fedala.extra"  # client → server
STATE = "fedala.client"  # the client's rows, in its Context.state (one record per run: STATE.<token>)
PARTITION_ID = "partition-id"
PAYLOAD_ENV = "FEDALA_FLOWER_PAYLOAD"  # the one file of custom data/model this machine's clients may load
JOIN_SECONDS = 120.0  # how long the server waits for the federation's SuperNodes to join and answer
START_SECONDS = 600.0  # run_flower: Ray's start and its client processes' first answer (slow on a loaded host)
REJOIN_SECONDS = 60.0  # how long a round waits for a lost client's partition to be served again
STOP_SECONDS = 60.0  # run_flower: how long Flower may take to stop after the run (Ray's actors)
# A reply that says the message never reached a client or its node went away (the order may be sent again);
# any other error is the client's own (its ClientApp raised, could not load or crashed): the run stops.
LOST = (ErrorCode.NODE_UNAVAILABLE, ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE)


# ------------------------------------------------------------------------------------------- records


def _arrays(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Tensors as an ArrayRecord (NumPy's format: every bit kept)."""
    return ArrayRecord.from_torch_state_dict({k: v.detach().cpu().contiguous() for k, v in tensors.items()})


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(a.numpy().copy()) for k, a in record.items()}


def _reply_content(reply: Reply) -> RecordDict:
    content = {OUT_METRICS: MetricRecord({k: float(reply.metrics[k]) for k in METRICS}),
               EXTRA: ConfigRecord({"client": reply.client, "records": to_bytes(reply.records),
                                    "meta": to_bytes(reply.meta), "snapshots": to_bytes(reply.snapshots),
                                    "rows": reply.rows or b""})}
    if reply.upload is not None:
        content[UPLOAD] = _arrays(reply.upload)
    return RecordDict(content)


def _reason(text: str) -> str:
    """A Flower error reason in one line: a ClientApp's exception as "Type: message" (fedala_lab's own errors
    as their message alone), Flower's own reasons without their "Error: " prefix."""
    m = re.fullmatch(r"<class '([\w.]+)'>:<'(.*)'>", text.strip(), flags=re.DOTALL)
    if m:
        kind, msg = m.group(1), m.group(2)
        text = msg if kind.startswith("fedala_lab.") else f"{kind.rsplit('.', 1)[-1]}: {msg}"
    text = text.removeprefix("Error: ")
    return " ".join(text.split())[:400]


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def _unreadable(err: BaseException) -> str:
    """Why bytes could not be read back, in one line: torch's weights-only refusal as its reason alone (not its
    advice to unpickle with weights_only=False, which would run whatever the bytes name)."""
    text = str(err)
    if not text.startswith("Weights only load failed"):
        return _first_line(err)
    paras = [p.strip() for p in text.split("\n\n") if p.strip()][1:]  # the first is the advice
    reason = " ".join(p for p in paras if not p.startswith("Check the documentation"))
    return f"{type(err).__name__}: {' '.join(reason.split())[:160]}"


def _who(client: int, node: int | None) -> str:
    return f"client {client}" + (f" (SuperNode {node})" if node is not None else "")


def _reply(msg: Message, client: int, t: int | None = None, node: int | None = None) -> Reply:
    """Client ``client``'s reply message as a :class:`Reply`. Its error, or a reply that cannot be read as
    plain values (tensors, numbers, strings: nothing else is unpickled), is a FedalaError naming the client,
    its node and the round."""
    where = f"round {t}: " if t is not None else ""
    if msg.has_error():
        raise FedalaError(f"{where}{_who(client, node)} failed: {_reason(msg.error.reason)}")
    part = "content"
    try:
        c = msg.content
        extra = c[EXTRA]
        claimed = int(extra["client"])
        metrics = {k: float(c[OUT_METRICS][k]) for k in METRICS}
        upload = _tensors(c[UPLOAD]) if UPLOAD in c else None
        decoded = {}
        with warnings.catch_warnings():  # torch's notes on a foreign pickle protocol: the refusal says it all
            warnings.simplefilter("ignore")
            for part in ("snapshots", "records", "meta"):
                decoded[part] = from_bytes(extra[part])
        part = "rows"
        rows = bytes(extra["rows"]) or None
    except Exception as err:  # noqa: BLE001 - whatever a node sent: refused unread, naming the client
        raise FedalaError(f"{where}the reply of {_who(client, node)} cannot be read ({part}: {_unreadable(err)}): "
                          "a reply holds only tensors, numbers and strings, so it was refused unread") from None
    if claimed != client:
        raise FedalaError(f"{where}the SuperNode of client {client} ({node}) replied as client {claimed}")
    return Reply(client=client, metrics=metrics, upload=upload, snapshots=decoded["snapshots"],
                 records=decoded["records"], meta=decoded["meta"], rows=rows)


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
    """The client this SuperNode serves: its ``partition-id`` (an integer; digits in quotes too)."""
    if PARTITION_ID not in context.node_config:
        raise FedalaError("this SuperNode serves no partition: start it with --node-config \"partition-id=<client>\"")
    value = context.node_config[PARTITION_ID]
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(PARTITION_ID, value, "a client id: an integer 0 … N−1, one SuperNode per client "
                          "(flower-supernode --node-config \"partition-id=<c>\")")
    return value


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    """The handshake: which client this node serves, and its train-split size (the server checks it)."""
    c = _partition(context)
    order = msg.content[ORDER]
    side = _client_side(order["run"], order["payload"])
    n = side.num_clients
    if not 0 <= c < n:
        raise ConfigError(PARTITION_ID, c, f"a client of the run's data: 0 … {n - 1} ({n} clients)")
    return Message(RecordDict({EXTRA: ConfigRecord({"client": c, "train_size": side.train_size(c),
                                                    "backend": side.backend_name})}), reply_to=msg)


@client_app.train()
@client_app.evaluate()
def _serve(msg: Message, context: Context) -> Message:
    """One order ("train" for the selected clients, "evaluate" for the others): initialise, evaluate and
    (selected clients) train, from the client's rows: those it keeps in its Context, those the server hands
    it, or the run's initial ones (``rows_from``)."""
    cfg = msg.content[ORDER]
    mine = _partition(context)
    side = _client_side(cfg["run"], cfg["payload"])
    order = Order.from_config(cfg)
    if order.client != mine:
        raise FedalaError(f"an order for client {order.client} reached the node of partition {mine}")
    name = f"{STATE}.{cfg['token']}"  # this run's rows
    if cfg["rows_from"] == "server":
        saved = bytes(cfg["rows"])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from_bytes(saved)
        except Exception as err:  # noqa: BLE001 - whatever a server sent: refused unread
            raise FedalaError(f"the rows handed to client {mine} cannot be read ({_unreadable(err)}): rows hold only "
                              "tensors, numbers and strings, so they were refused unread") from None
    elif cfg["rows_from"] == "initial":
        saved = None
    else:
        kept = context.state.get(name)
        if kept is None:
            raise FedalaError(f"the SuperNode of client {mine} holds no rows of this run (it was restarted?): the "
                              "server hands them to a node it knows lacks them")
        saved = kept["rows"]
    reply, rows = side.serve(order, _tensors(msg.content[GLOBAL]), saved)
    context.state[name] = ConfigRecord({"rows": rows})
    return Message(_reply_content(reply), reply_to=msg)


# ------------------------------------------------------------------------------------------- the server


def _seconds(name: str, value, allowed: str) -> float:
    """A wait in seconds: a finite number ≥ 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(name, value, allowed)
    return float(value)


class FlowerServer:
    """The server side of one run over a Flower Grid: ``main(grid, context)`` is a ServerApp's main.

    ``cfg``, ``data``, ``model`` as for ``simulate``; ``payload``: the file that hands custom data or a custom
    model to the clients (run_flower writes it). Waits, in seconds: ``join``, for the SuperNodes to join and
    answer the handshake; ``timeout``, for each round's replies (None or 0: no limit); ``rejoin``, for a
    lost client's partition to be served again before the run stops (0: stop at once). ``checkpoint``: a
    file to continue from (if it holds this run's) and to save the run in after every round. ``stopped``:
    says when the transport is gone (run_flower's simulation engine), so no wait outlives it. After
    ``main``: :attr:`run` (the Run) or :attr:`error` (what stopped it: a TrainingDiverged carries the
    rounds so far)."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model=None, *, payload: str = "",
                 timeout: float | None = None, join: float = JOIN_SECONDS, rejoin: float = REJOIN_SECONDS,
                 checkpoint: str | Path | None = None, progress: bool = True,
                 stopped: Callable[[], str] | None = None, start_hint: str = ""):
        self.timeout = _seconds("timeout", timeout or 0, "seconds ≥ 0 to wait for a round's replies (0: no limit)")
        self.join = _seconds("join", join, "seconds ≥ 0 to wait for the SuperNodes to join")
        self.rejoin = _seconds("rejoin", rejoin, "seconds ≥ 0 to wait for a lost client's SuperNode (0: stop the "
                               "run at once)")
        self.side = ServerSide(cfg, data, model, engine="flower")
        self.run_json = json.dumps(self.side.cfg.to_dict(), default=str)
        self.payload, self.progress = payload, progress
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.stopped, self.start_hint = stopped, start_hint
        self.token = uuid.uuid4().hex[:16]  # names this run's rows in the clients' Context.state
        self.nodes: dict[int, int] = {}  # client → the node that serves it
        self.holds: set[int] = set()  # clients whose node keeps their current rows in its Context.state
        self.strangers: set[int] = set()  # nodes asked that serve no client we wait for, and lost nodes
        self.run: Run | None = None
        self.error: BaseException | None = None

    def main(self, grid: Grid, context: Context) -> None:
        try:
            self._main(grid)
        except BaseException as err:  # noqa: BLE001 - handed to the caller, who re-raises it
            self.error = err

    def _say(self, level, text: str, *args) -> None:
        if self.progress or level >= WARNING:
            log(level, "fedala_lab: " + text, *args)

    def _main(self, grid: Grid) -> None:
        side, cfg = self.side, self.side.cfg
        if self.checkpoint is not None and side.load_checkpoint(self.checkpoint):
            self._say(WARNING, "continuing %s from its checkpoint after round %d of %d (%s)", cfg.algo, side.round,
                      cfg.rounds, self.checkpoint)
        if side.round < cfg.rounds:  # a checkpoint of the last round (the run not yet saved) needs no federation
            self.nodes = self._join(grid)
        for t in range(side.round + 1, cfg.rounds + 1):
            orders = {o.client: o for o in side.orders(t)}
            replies = self._exchange(grid, t, orders, _arrays(side.downloads()))
            row = side.finish(t, [replies[c] for c in sorted(orders)])
            if self.checkpoint is not None:
                side.save_checkpoint(self.checkpoint)
            self._say(INFO, "%s round %d/%d: acc %.2f %%, %.2f s", cfg.algo, t, cfg.rounds, row["acc"],
                      row["seconds"])
        self.run = side.to_run()

    # -- messages ------------------------------------------------------------------------------------

    def _order(self, order: Order, rows_from: str = "context", rows: bytes = b"") -> ConfigRecord:
        return ConfigRecord({**order.config(), "run": self.run_json, "payload": self.payload, "token": self.token,
                             "rows_from": rows_from, "rows": rows})

    def _push(self, grid: Grid, messages: list[Message], what: list) -> dict[str, object]:
        """Send ``messages``; {message id: what each was for}."""
        ids = list(grid.push_messages(messages)) if messages else []
        if len(ids) != len(messages) or any(not i for i in ids):
            raise FedalaError(f"Flower did not take every message to send ({len(ids)} of {len(messages)}): see "
                              "its log above")
        return dict(zip(ids, what))

    def _send(self, grid: Grid, t: int, orders: list[Order], glob: ArrayRecord) -> dict[str, int]:
        """Round ``t``'s ``orders`` to their clients' nodes, each client's rows handed along where its node
        does not keep them; {message id: client}."""
        messages = []
        for o in orders:
            c = o.client
            rows = self.side.rows(c)
            how = "context" if c in self.holds else ("server" if rows is not None else "initial")
            messages.append(Message(RecordDict({ORDER: self._order(o, how, rows if how == "server" else b""),
                                                GLOBAL: glob}), dst_node_id=self.nodes[c],
                                    message_type="train" if o.train else "evaluate", group_id=str(t)))
        return self._push(grid, messages, [o.client for o in orders])

    def _ask(self, grid: Grid, nodes) -> dict[str, int]:
        """The handshake ("query": which client do you serve?) to ``nodes``; {message id: node}."""
        nodes = sorted(nodes)
        dummy = Order(0, -1, init=False, evaluate=False, train=False)
        return self._push(grid, [Message(RecordDict({ORDER: self._order(dummy)}), dst_node_id=i,
                                         message_type="query", group_id="0") for i in nodes], nodes)

    def _hello(self, msg: Message, node: int) -> int:
        """The client a node's handshake reply says it serves (checked against the server's data)."""
        if msg.has_error():
            raise FedalaError(f"SuperNode {node} cannot join: {_reason(msg.error.reason)}")
        try:
            extra = msg.content[EXTRA]
            c, size, backend = int(extra["client"]), int(extra["train_size"]), str(extra["backend"])
        except Exception as err:  # noqa: BLE001 - whatever a node sent
            raise FedalaError(f"SuperNode {node}'s handshake cannot be read: {_first_line(err)}") from None
        if not 0 <= c < self.side.num_clients:
            raise FedalaError(f"SuperNode {node} says it serves client {c}, not a client of the run")
        if size != self.side.train_size(c):
            raise FedalaError(f"the SuperNode of client {c} ({node}) holds {size} train samples, the server's "
                              f"data {self.side.train_size(c)}: they load other data")
        self.side.client_backend = backend
        return c

    def _check_stopped(self) -> None:
        why = self.stopped() if self.stopped is not None else ""
        if why:
            raise FedalaError(why)

    def _pull(self, grid: Grid, ids) -> list[Message]:
        return list(grid.pull_messages(list(ids))) if ids else []

    # -- waits ----------------------------------------------------------------------------------------

    def _join(self, grid: Grid) -> dict[int, int]:
        """client id → node id, from a handshake with every SuperNode; the federation must have one SuperNode per
        client of the run's data, joined and answering within ``join`` seconds."""
        n = self.side.num_clients
        deadline, pause, said = time.monotonic() + self.join, _Pause(), -1
        found: dict[int, int] = {}
        asked: dict[str, int] = {}
        connected: set[int] = set()
        while len(found) < n:
            self._check_stopped()
            connected = set(grid.get_node_ids())
            new = connected - set(found.values()) - set(asked.values()) - self.strangers
            asked.update(self._ask(grid, new))
            got = self._pull(grid, asked)
            for msg in got:
                node = asked.pop(msg.metadata.reply_to_message_id, None)
                if node is None:
                    continue
                c = self._hello(msg, node)
                if c in found:
                    raise FedalaError(f"two SuperNodes ({found[c]}, {node}) serve partition-id={c}: each client "
                                      "needs its own")
                found[c] = node
            if len(connected) != said and len(found) < n:
                self._say(INFO, "waiting for SuperNodes, %d of %d connected", len(connected), n)
                said = len(connected)
            if len(found) < n and time.monotonic() > deadline:
                if self.start_hint:
                    raise FedalaError(f"{self.start_hint} ({len(found)} of {n} clients answered)")
                if len(connected) < n:
                    raise ConfigError("num_clients", n, f"the number of SuperNodes, one per client: {len(connected)} "
                                      f"connected within join={self.join:g} s", "a simulation needs "
                                      "--federation-config \"num-supernodes=N\" (flwr run) or run_flower; a deployment "
                                      "one SuperNode per client, partition-id 0 … N−1")
                missing = sorted(set(range(n)) - set(found))
                raise FedalaError(f"no answer from the SuperNodes of client(s) {missing[:20]} within join="
                                  f"{self.join:g} s ({len(found)} of {n} answered): see their logs")
            pause.wait(bool(got))
        self._say(INFO, "%d SuperNodes joined, one per client", n)
        return found

    def _exchange(self, grid: Grid, t: int, orders: dict[int, Order], glob: ArrayRecord) -> dict[int, Reply]:
        """Round ``t``'s orders sent, their replies collected. A client whose node is lost is sent its order
        again on a node that serves its partition within ``rejoin`` seconds, with its rows; else the run
        stops naming the client and the round."""
        replies: dict[int, Reply] = {}
        pending = self._send(grid, t, [orders[c] for c in sorted(orders)], glob)
        lost: dict[int, tuple[float, str]] = {}  # client → (since, why)
        asked: dict[str, int] = {}
        deadline = time.monotonic() + self.timeout if self.timeout else math.inf
        pause = _Pause()
        while pending or lost:
            self._check_stopped()
            got = self._pull(grid, [*pending, *asked])
            for msg in got:
                mid = msg.metadata.reply_to_message_id
                if mid in asked:  # a node that joined since: does it serve a lost client?
                    node = asked.pop(mid)
                    try:
                        c = self._hello(msg, node)
                    except FedalaError as err:
                        self._say(WARNING, "round %d: %s", t, err)
                        c = -1
                    if c not in lost:
                        self.strangers.add(node)
                        continue
                    del lost[c]
                    self.nodes[c] = node
                    self._say(WARNING, "round %d: client %d is served again, by SuperNode %d: its order sent again",
                              t, c, node)
                    pending.update(self._send(grid, t, [orders[c]], glob))
                    continue
                c = pending.pop(mid, None)
                if c is None:
                    continue
                node = self.nodes.get(c)
                if msg.has_error() and msg.error.code in LOST:
                    self.holds.discard(c)
                    self.strangers.add(self.nodes.pop(c))
                    why = f"its SuperNode {node} was lost ({_reason(msg.error.reason)})"
                    if not self.rejoin:
                        raise FedalaError(self._lost(t, c, why))
                    self._say(WARNING, "round %d: client %d: %s; waiting up to rejoin=%g s for a SuperNode with "
                              "partition-id=%d", t, c, why, self.rejoin, c)
                    lost[c] = (time.monotonic(), why)
                    continue
                replies[c] = _reply(msg, c, t, node)
                self.holds.add(c)
            now = time.monotonic()
            for c, (since, why) in lost.items():
                if now - since > self.rejoin:
                    raise FedalaError(self._lost(t, c, f"{why}, and no SuperNode served partition-id={c} within "
                                                       f"rejoin={self.rejoin:g} s"))
            if lost:
                busy = set(self.nodes.values()) | set(asked.values()) | self.strangers
                asked.update(self._ask(grid, set(grid.get_node_ids()) - busy))
            if pending and now > deadline:
                late = sorted(pending.values())
                raise FedalaError(self._lost(t, late[0], f"no reply from client(s) {late[:20]} within timeout="
                                                         f"{self.timeout:g} s"))
            pause.wait(bool(got))
        return replies

    def _lost(self, t: int, c: int, why: str) -> str:
        """Why round ``t`` stopped for client ``c``, and how to continue."""
        msg = f"round {t}: client {c} (partition-id={c}): {why}"
        if self.checkpoint is None or self.side.round == 0:
            return msg + ". No round was kept: run it again"
        return (msg + f". Rounds 1–{self.side.round} are kept ({self.checkpoint}): with a SuperNode for "
                f"partition-id={c} running, run flwr run again to continue from round {t}")


class _Pause:
    """The poll's sleep: short after a reply came, growing to 0.5 s while none does (Flower's own loop
    sleeps 3 s, a round's floor on a deployment)."""

    def __init__(self):
        self.s = 0.02

    def wait(self, got: bool) -> None:
        self.s = 0.02 if got else min(0.5, self.s * 1.5)
        time.sleep(self.s)


# ---------------------------------------------------------------------------- the Python entry point


def run_flower(cfg: RunConfig, data: FederatedData | None = None, *, model=None, backend_config: dict | None = None,
               store: RunStore | str | Path | None = None, progress: bool = True, verbose: bool = False,
               start_timeout: float = START_SECONDS, timeout: float | None = None) -> Run:
    """Run ``cfg`` as a Flower app in Flower's simulation engine (Ray, on this machine): one simulated
    SuperNode per client; returns the same :class:`Run` as ``simulate(cfg, data, model=model)`` (on the loop
    backend the same global models, bit for bit; docs/flower.md).

    ``backend_config``: Flower's (default ``{"client_resources": {"num_cpus": 1}}`` and Ray given
    min(cores, clients) CPUs: a client process per core, at most one per client); ``store``: also save the run
    there (a RunStore or its folder; keep Flower runs apart from the engine's, e.g. ``runs/flower``: they share
    the config's key). ``start_timeout``: seconds for Ray and its client processes to start and answer
    (a FedalaError saying so after that); ``timeout``: seconds for each round's replies (None: no limit).
    Raises ConfigError for a method that cannot run with clients and server apart, TrainingDiverged as the
    engine does.
    """
    run = simulate_flower([cfg], data, model=model, backend_config=backend_config, progress=progress,
                          verbose=verbose, start_timeout=start_timeout, timeout=timeout)[0].run
    if store is not None:
        (store if isinstance(store, RunStore) else RunStore(store)).save(run)
    return run


def simulate_flower(cfgs: Sequence[RunConfig], data: FederatedData | None = None, *, model=None,
                    backend_config: dict | None = None, progress: bool = True, verbose: bool = False,
                    start_timeout: float = START_SECONDS, timeout: float | None = None) -> list[FlowerServer]:
    """Run the configs one after another on one simulated federation (one Ray start; they must have the same
    number of clients), returning their :class:`FlowerServer` objects: each one's Run (``.run``) and server
    state (``.side.global_params``: the final global model). The first run that fails raises.

    Flower's simulation engine runs in a thread of its own, so every wait is bounded: Ray must start and its
    clients answer within ``start_timeout`` seconds, and an engine that stops or hangs ends the wait with a
    FedalaError saying so (Flower's log above says why)."""
    from flwr.simulation import run_simulation

    if not _seconds("start_timeout", start_timeout, "seconds > 0 for Ray and its client processes to start"):
        raise ConfigError("start_timeout", start_timeout, "seconds > 0 for Ray and its client processes to start")
    server_app = ServerApp()
    ended, gone = threading.Event(), {}  # Flower's engine returned or raised (and why); the ServerApp returned
    app_done = threading.Event()

    def stopped() -> str:
        if "interrupted" in gone:
            return "the run was interrupted"
        if ended.is_set():
            cause = gone.get("error")
            return ("Flower's simulation engine stopped before the run finished"
                    + (f": {_root(cause)}" if cause is not None else " (see Flower's log above)"))
        return ""

    with tempfile.TemporaryDirectory(prefix="fedala-flower-") as tmp:
        payload = ""
        custom_data = data if data is not None and data.source is None else None
        if custom_data is not None or model is not None:
            # data or a model of the caller's own: handed to this machine's client processes in a private file
            payload = str(Path(tmp) / "handed.pt")
            torch.save({"data": custom_data, "model": model}, payload)
        hint = (f"Flower's simulation engine (Ray and its client processes) did not start within "
                f"start_timeout={start_timeout:g} s; a loaded machine takes longer: run_flower(..., start_timeout=…)")
        servers = [FlowerServer(cfg, data, model, payload=payload, progress=progress, timeout=timeout,
                                join=start_timeout, rejoin=0, stopped=stopped, start_hint=hint) for cfg in cfgs]
        if len({s.side.num_clients for s in servers}) > 1:
            raise ConfigError("num_clients", [s.side.num_clients for s in servers], "the same number of clients "
                              "in every run of one simulated federation")

        def main(grid: Grid, context: Context) -> None:
            try:
                for s in servers:
                    s.main(grid, context)
                    if s.error is not None:
                        return
            finally:
                app_done.set()

        server_app.main()(main)
        n = servers[0].side.num_clients
        # default: a client process per core, but no more than there are clients (each holds the run's data)
        config = backend_config if backend_config is not None else {
            "client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": min(os.cpu_count() or 1, n)}}

        def engine() -> None:
            try:
                run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n,
                               backend_config=config, verbose_logging=verbose)
            except BaseException as err:  # noqa: BLE001 - reported by the thread that waits
                gone["error"] = err
            finally:
                ended.set()

        before = os.environ.get(PAYLOAD_ENV)
        os.environ[PAYLOAD_ENV] = payload  # the client processes (Ray's, started from here) inherit it
        try:
            thread = threading.Thread(target=engine, name="fedala-flower-simulation", daemon=True)
            thread.start()
            try:
                while not ended.wait(0.2):
                    # the ServerApp returned (finished or failed): Flower stops its engine, in bounded time
                    if app_done.is_set() and not ended.wait(STOP_SECONDS):
                        log(WARNING, "fedala_lab: Flower's simulation engine did not stop within %g s after the "
                            "run; left to stop in the background", STOP_SECONDS)
                        break
            except BaseException:
                gone["interrupted"] = True  # the ServerApp's waits end; Flower's engine is a daemon thread
                raise
        finally:
            if before is None:
                os.environ.pop(PAYLOAD_ENV, None)
            else:
                os.environ[PAYLOAD_ENV] = before
    for s in servers:
        if s.error is not None:
            raise s.error
        if s.run is None:
            raise FedalaError(stopped() or "the Flower simulation ended before the run finished (see Flower's log "
                              "above)")
    return servers


def _root(err: BaseException) -> str:
    """The first cause of a chain of exceptions, in one line (Flower wraps Ray's errors in its own)."""
    while err.__cause__ is not None or err.__context__ is not None:
        err = err.__cause__ or err.__context__
    return _first_line(err)


# ------------------------------------------------------------------------------- the flwr run entry point

# [tool.flwr.app.config] keys of fedala_lab/flower/app/pyproject.toml besides the settings themselves
APP_KEYS = ("preset", "config", "set", "store", "timeout", "join", "rejoin", "resume")


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


def server_options(run_config) -> dict:
    """The ServerApp's own keys of a ``flwr run`` (``timeout``, ``join``, ``rejoin``: seconds; ``resume``;
    ``store``), checked: each refused value names its key."""
    rc = dict(run_config)
    resume = rc.get("resume", True)
    if not isinstance(resume, bool):
        raise ConfigError("resume", resume, "true (continue from the run's checkpoint in the store) or false "
                          "(start from round 1)")
    store = rc.get("store") or "runs/flower"
    if not isinstance(store, str):
        raise ConfigError("store", store, "a folder path (the run store)")
    return {"timeout": _seconds("timeout", rc.get("timeout", 0), "seconds ≥ 0 to wait for a round's replies "
                                "(0: no limit)"),
            "join": _seconds("join", rc.get("join", JOIN_SECONDS), "seconds ≥ 0 to wait for the SuperNodes to join"),
            "rejoin": _seconds("rejoin", rc.get("rejoin", REJOIN_SECONDS), "seconds ≥ 0 to wait for a lost "
                               "client's SuperNode (0: stop the run at once)"),
            "resume": resume, "store": store}


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    """``flwr run``'s ServerApp: the run the app's config names, served from its ``store`` (default
    ./runs/flower) when finished there and ``resume`` is on (as get_or_run serves it), else computed,
    checkpointed after every round and saved there. A failure (a stored diverged run's too) is logged as
    "fedala_lab: the run FAILED: …" and raised, so Flower marks the run failed (``flwr ls``: finished:failed)."""
    try:
        rc = dict(context.run_config)
        opts = server_options(rc)
        cfg = config_from_run_config(rc)
        if cfg.data.is_custom or cfg.model.startswith(CUSTOM_PREFIX):
            raise ConfigError("data", cfg.data.dataset, "data and a model fedala_lab builds from the config under "
                              "flwr run (custom data or models: run_flower in Python)")
        store = RunStore(opts["store"])
        with store.lock(cfg):  # as get_or_run: one writer of the config's checkpoint and run at a time
            # checked under the lock: another flwr run of the config may have finished it while this one waited;
            # a stored diverged run raises its TrainingDiverged (the same config diverges the same way)
            run = store.outcome(cfg)[0] if opts["resume"] else None
            served = run is not None
            if not served:
                run = _federate(grid, context, cfg, opts, store)
    except Exception as err:
        log(ERROR, "fedala_lab: the run FAILED: %s", err)
        if isinstance(err, FedalaError):
            raise err.with_traceback(None) from None  # the message says it all: no traceback through our code
        raise
    s = run.summary()
    log(INFO, "fedala_lab: %s best %.2f %%, final %.2f %% → %s%s", cfg.algo, s["best_acc"], s["final_acc"], run.path,
        " (the stored run, not recomputed: resume=false recomputes it)" if served else "")


def _federate(grid: Grid, context: Context, cfg: RunConfig, opts: dict, store: RunStore) -> Run:
    """Compute ``cfg``'s run over ``grid`` and save it in ``store`` (the caller holds its lock)."""
    # every round, whatever checkpoint_every says (the engine's trade of disk writes against recomputing
    # seconds): a federation's round costs seconds, and any round may lose a node
    ckpt = store.checkpoint_for(cfg)
    if not opts["resume"]:
        clean_checkpoints(store, cfg, ckpt)
    server = FlowerServer(cfg, timeout=opts["timeout"], join=opts["join"], rejoin=opts["rejoin"], checkpoint=ckpt)
    server.main(grid, context)
    if isinstance(server.error, TrainingDiverged) and server.error.run is not None:
        store.save(server.error.run, replace=True)  # as the engine keeps a diverged run, not its checkpoint
        clean_checkpoints(store, cfg, ckpt)
    if server.error is not None:
        raise server.error
    # the last round's engine state kept with the run, as get_or_run keeps it (keep_states="last"); resume=false
    # computed the run from round 1, so it replaces a stored one (get_or_run's force)
    states = {cfg.rounds: server.side.engine_state()} if cfg.rounds in cfg.kept_rounds() else None
    store.save(server.run, replace=not opts["resume"], states=states)
    clean_checkpoints(store, cfg, ckpt)
    return server.run


__all__ = ["FlowerServer", "client_app", "config_from_run_config", "run_flower", "server_app", "server_options",
           "simulate_flower"]
