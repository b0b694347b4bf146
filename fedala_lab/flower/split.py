"""The engine's round with the clients and the server apart: what each side of a Flower run computes.

The engine's loop (engine/simulate.py, ``Simulation.run_round``) holds every client's model in one place.
Here the same round is cut where a federation cuts it, and each half calls the same algorithm object the
engine builds (``cfg.algorithm.build(setup)``) through the same round interface (algorithms/base.py):

    server  (ServerSide)                               client c  (ClientSide)
    selected = algo.select(rnd)            ── G, an Order ──▶   algo.initialise(rnd, [c])   (ALA: Θ̂)
    stragglers drawn (engine/stragglers.py)                    evaluate its model on its test split
                                                               algo.local_train(rnd, Work([c], plan))
    algo.aggregate(rnd, senders)           ◀── a Reply ─────   its upload (algo.downloads()), metrics,
    records: the run's tables (Recorder)                       what its hooks recorded (ALA's passes)

Each side is a :class:`~fedala_lab.engine.simulate.Simulation` of the run's config, so a hook sees a
:class:`~fedala_lab.algorithms.base.Round` with the engine's shapes (``local_params[n]`` is (N, …)) — but a
side holds only what it would hold in a federation. A client holds its own row: its local model, buffers and
its rows of the algorithm's state (ALA's W, Ditto's personal model), saved after each message (:meth:`ClientSide.serve`
returns them as bytes; on Flower they live in the client's ``Context.state``) and loaded before the next; its
Round's "every client" is itself (:class:`ClientRound`). The server holds G, the algorithm's server-side
state (FedAvgM's velocity) and, while it aggregates, the senders' uploads in their rows. Every other row on
either side is NaN, so a method that reads a model it would not have in a federation fails loudly instead
of computing with a stale copy.

Which methods run so (:func:`split_refusal`): those whose client hooks (``initialise``, ``personalise``,
``local_train``) need only G, the client's own model, state and data, and whose ``aggregate`` needs only the
senders' uploads and the server's own state — FedAvg, FedProx, FedALA and every ``+ala``, the ``-c``
variants, Ditto, FedRep, Local, and registered methods built like them (docs/extending.md's FedAvgM). A
method whose server hooks (``select``, ``aggregate``) and client hooks share a state (FedLAMA: the server's
layer intervals decide what a client receives; FedAMP's per-client models built by the server) is refused
with one line saying so; an algorithm class may declare otherwise with ``flower_split = True`` (it runs) or
``flower_split = "why not"`` (it is refused with that reason).

Same results: a round here calls the engine's pieces in the engine's order for each client (the same seeded
draws: selection, straggler work, batch orders, ALA windows). A client trains alone, on the loop backend
(unless the config says "vectorised"), so the global model after each round equals the engine's on the loop
backend bit for bit (tests/test_flower.py). :func:`run_split` runs both halves in one process without
Flower (the fast test of every method); fedala_lab.flower.apps carries them over Flower.
"""

from __future__ import annotations

import dataclasses
import io
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..algorithms.base import Aggregated, Algorithm, Round, Sent, Work, Wrapper, state_to_dict
from ..compute import plans
from ..compute.device import cpu_threads
from ..config import RunConfig
from ..data.federated import FederatedData
from ..engine.simulate import Simulation, divergence_message
from ..errors import ConfigError, FedalaError, TrainingDiverged
from ..record.run import Run

SERVER_HOOKS = ("select", "aggregate")
CLIENT_HOOKS = ("initialise", "personalise", "local_train")
SPLIT_METHODS = ("FedAvg, FedProx, FedALA, any +ala, the -c variants, Per-FedAvg, FedRep, pFedMe, Ditto, FedPHP, "
                 "PartialFed, Local")


class SplitError(FedalaError, RuntimeError):
    """A method did something a federation cannot do: read a model its side does not hold."""


# ------------------------------------------------------------------------------------ which methods


def split_refusal(algo: Algorithm, state, label: str) -> str:
    """Why the built algorithm ``algo`` (state ``state``, named ``label``) cannot run with clients and server
    apart, or "" when it can. Walks its wrappers (``+ala``, ``-c``) and the method inside: a piece that keeps
    a state of its own and overrides both a server hook and a client hook is refused, unless its class says
    ``flower_split = True``; a class with ``flower_split = "<reason>"`` is refused with that reason."""
    a, st = algo, state
    while a is not None:
        declared = getattr(type(a), "flower_split", None)
        name = type(a).__name__
        if isinstance(declared, str):
            return f"{label} cannot run with clients and server apart: {declared}"
        base = Wrapper if isinstance(a, Wrapper) else Algorithm
        over = [h for h in (*SERVER_HOOKS, *CLIENT_HOOKS) if getattr(type(a), h) is not getattr(base, h)]
        server, client = [h for h in over if h in SERVER_HOOKS], [h for h in over if h in CLIENT_HOOKS]
        own_state = a.has_own_state if isinstance(a, Wrapper) else st is not None
        if declared is not True and own_state and server and client:
            return (f"{label} cannot run with clients and server apart: {name}'s server hooks ({', '.join(server)}) "
                    f"and client hooks ({', '.join(client)}) share its state, and on Flower the server and each "
                    "client hold their own copy")
        if isinstance(a, Wrapper):
            a, st = a.inner, a.inner_state(st)
        else:
            a = None
    return ""


def check_split(cfg: RunConfig, algo: Algorithm, state) -> None:
    """Raise a :class:`ConfigError` naming the method and why, if it cannot run with clients and server apart."""
    why = split_refusal(algo, state, cfg.algorithm.label)
    if why:
        raise ConfigError("algo", cfg.algo, f"a method whose clients and server can run apart ({SPLIT_METHODS}, "
                          "and methods built like them)", why)


# ---------------------------------------------------------------------------- what travels, as values


@dataclass
class Order:
    """What the server asks of client ``client`` in round ``t``: initialise from G, evaluate before local
    training, train (``limit``: a straggler's steps, None: its full work; ``dropped``: a straggler the
    server drops, which trains nothing and sends nothing), send its model for the Fig. 4 snapshots.
    ``selected`` is the round's selection (a hook may read ``rnd.selected``)."""

    t: int
    client: int
    selected: list[int]
    init: bool
    evaluate: bool
    train: bool
    limit: int | None = None
    dropped: bool = False
    snapshot: bool = False

    def config(self) -> dict:
        """As flat scalars (a Flower ConfigRecord): ``limit`` None is −1."""
        d = dataclasses.asdict(self)
        d["limit"] = -1 if self.limit is None else self.limit
        return d

    @classmethod
    def from_config(cls, d) -> Order:
        limit = int(d["limit"])
        return cls(t=int(d["t"]), client=int(d["client"]), selected=[int(c) for c in d["selected"]],
                   init=bool(d["init"]), evaluate=bool(d["evaluate"]), train=bool(d["train"]),
                   limit=None if limit < 0 else limit, dropped=bool(d["dropped"]), snapshot=bool(d["snapshot"]))


# the per-client numbers a reply carries (NaN / 0 where the order did not ask for them)
METRICS = ("test_loss_sum", "test_correct", "test_num", "init_loss", "trained_loss", "train_loss", "local_steps",
           "diverged", "seconds", "bytes_down", "init_seconds", "eval_seconds", "train_seconds")


@dataclass
class Reply:
    """What client ``client`` sends back: ``metrics`` (:data:`METRICS`), its ``upload`` (the parameters the
    method aggregates, None when it sends nothing), ``snapshots`` ({"start"/"end": its parameters}),
    ``records`` (what its hooks recorded through its Round, as plain values) and ``meta`` (the list entries
    of the algorithm's ``meta`` on its state, e.g. ALA's capped clients)."""

    client: int
    metrics: dict[str, float]
    upload: dict[str, torch.Tensor] | None = None
    snapshots: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    records: list = field(default_factory=list)
    meta: dict[str, list] = field(default_factory=dict)


def to_bytes(obj) -> bytes:
    """Plain values (dicts, lists, tensors, numbers, strings) as bytes that :func:`from_bytes` reads back."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def from_bytes(blob: bytes):
    """:func:`to_bytes`'s value, read with ``weights_only=True`` (tensors and plain values, no code)."""
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)


# ------------------------------------------------------------------- one client's rows of the state


def _per_client(v, n: int) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n


def state_rows(plain, c: int, n: int):
    """Client ``c``'s part of a state made plain (``state_to_dict``): each tensor with one row per client
    (leading dimension N) cut to its row c, (1, …); everything else whole (the client's own copy)."""
    if isinstance(plain, dict):
        return {k: state_rows(v, c, n) for k, v in plain.items()}
    if isinstance(plain, list):
        return [state_rows(v, c, n) for v in plain]
    if isinstance(plain, torch.Tensor):
        return (plain[c:c + 1] if _per_client(plain, n) else plain).detach().cpu().clone()
    return plain


def put_state_rows(live, rows, c: int, n: int):
    """Write :func:`state_rows`'s ``rows`` into the live state ``live`` (per-client tensors in place, row c;
    other values replaced), returning the state."""
    if dataclasses.is_dataclass(live) and not isinstance(live, type):
        for f in dataclasses.fields(live):
            setattr(live, f.name, put_state_rows(getattr(live, f.name), rows[f.name], c, n))
        return live
    if isinstance(live, dict) and isinstance(rows, dict) and set(live) == set(rows):
        for k in live:
            live[k] = put_state_rows(live[k], rows[k], c, n)
        return live
    if isinstance(live, list) and isinstance(rows, list) and len(live) == len(rows) \
            and all(isinstance(v, torch.Tensor) for v in live):
        return [put_state_rows(a, b, c, n) for a, b in zip(live, rows)]
    if _per_client(live, n):
        live[c] = rows[0].to(live.device, live.dtype)
        return live
    if isinstance(live, torch.Tensor):
        return rows.to(live.device, live.dtype)
    return rows


def poison(tree, rows, n: int) -> None:
    """Fill rows ``rows`` (a client id, or a slice/mask) of every floating per-client tensor in ``tree`` (a
    state, a dict of tensors) with NaN: a row its side does not hold."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for f in dataclasses.fields(tree):
            poison(getattr(tree, f.name), rows, n)
    elif isinstance(tree, dict):
        for v in tree.values():
            poison(v, rows, n)
    elif isinstance(tree, list):
        for v in tree:
            poison(v, rows, n)
    elif _per_client(tree, n) and tree.is_floating_point():
        tree[rows] = math.nan


def _finite(tree: dict) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in tree.values() if v.is_floating_point())


# ------------------------------------------------------------------------------------- the client half


class ClientRound(Round):
    """Round ``t`` as a hook sees it on a client: the engine's shapes, but only the client's own rows are real
    (the others are NaN), and "every client" (:attr:`everyone`) is the client itself, so a hook that works on
    every client (``-c``'s fine-tuning) works on this one."""

    def __init__(self, setup, t: int, *, me: torch.Tensor, **kwargs):
        super().__init__(setup, t, **kwargs)
        self.me = me

    @property
    def everyone(self) -> torch.Tensor:
        return self.me

    def with_state(self, state) -> ClientRound:
        return ClientRound(self.setup, self.t, me=self.me, global_params=self.global_params,
                           local_params=self.local_params, local_buffers=self.local_buffers, selected=self.selected,
                           state=state, records=self.records)

    def own(self, models: dict) -> dict:
        """This client's row of ``models`` ({"params", "buffers"}): rows for every client (N, …) or already
        for this client alone (1, …, what a hook gives for :attr:`everyone`)."""
        def pick(v):
            return v if v.shape[0] == 1 else v[self.me]
        return {part: {k: pick(v) for k, v in models[part].items()} for part in ("params", "buffers")}

    def evaluate_own(self, models: dict, split: str) -> dict[str, np.ndarray]:
        """Sum of losses, number correct and rows of this client's ``models`` on its ``split`` (as
        ``Round.evaluate`` with ``clients=[c]``)."""
        mine = self.own(models)
        plan = self.setup.eval_plan(split).take(self.me.cpu().numpy())
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.test_x, self.data.test_y)
        return plans.evaluate(self.setup.backend, self.setup.eval_step, self.model, mine["params"], mine["buffers"],
                              x, y, plan)


class ClientSide:
    """The client half of the round, for any client of one run, in one process (a Flower SuperNode's
    ClientApp, a Ray actor serving several simulated clients one after another). It trains one client at a
    time, so the config's backend "auto" (vectorised: many clients batched in one call) and "workers" run on
    the loop backend here; only an explicit "vectorised" is kept.

    It holds a :class:`Simulation` of the run's config on the run's data; before each order the client's saved
    rows are loaded into it (:meth:`serve`), after it they are saved and the rows poisoned again. ``saved`` is
    None for a client's first message: it starts from the initial model and the algorithm's initial state, as
    in the engine."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model: nn.Module | None = None):
        if cfg.backend in ("auto", "workers"):
            # one client per call: nothing to vectorise over, and no worker processes inside a client process
            cfg = cfg.replace(backend="loop")
        self.sim = sim = Simulation(cfg, data, model=model)
        self.n = sim.num_clients
        self.uploads = list(sim.algo.downloads())
        self.initial = {"params": {k: v.detach().clone() for k, v in sim.model.named_parameters()},
                        "buffers": {k: v.detach().clone() for k, v in sim.model.named_buffers()},
                        "state": state_to_dict(sim.algo.init_state(sim.setup))}
        for tree in (sim.local_params, sim.local_buffers, sim.state):
            poison(tree, slice(None), self.n)

    # -- a client's rows -----------------------------------------------------------------------------

    def load(self, c: int, saved: bytes | None) -> None:
        """Client ``c``'s model, buffers and state rows from ``saved`` (None: the initial ones)."""
        sim = self.sim
        if saved is None:
            rows = {"params": self.initial["params"], "buffers": self.initial["buffers"],
                    "state": state_rows(self.initial["state"], c, self.n)}
        else:
            rows = from_bytes(saved)
        for part, tree in (("params", sim.local_params), ("buffers", sim.local_buffers)):
            for k, v in rows[part].items():
                tree[k][c] = v.to(tree[k].device, tree[k].dtype)
        sim.state = put_state_rows(sim.state, rows["state"], c, self.n)

    def save(self, c: int) -> bytes:
        sim = self.sim
        return to_bytes({"params": {k: v[c].detach().cpu().clone() for k, v in sim.local_params.items()},
                         "buffers": {k: v[c].detach().cpu().clone() for k, v in sim.local_buffers.items()},
                         "state": state_rows(state_to_dict(sim.state), c, self.n)})

    # -- an order --------------------------------------------------------------------------------------

    def serve(self, order: Order, glob: dict[str, torch.Tensor], saved: bytes | None) -> tuple[Reply, bytes]:
        """Carry out ``order`` for its client with the global parameters ``glob`` (what the method downloads),
        from the client's ``saved`` rows; returns the reply and the client's rows to keep."""
        c = order.client
        if not 0 <= c < self.n:
            raise FedalaError(f"client {c} does not exist: the run's data has {self.n} clients (0 … {self.n - 1})")
        self.load(c, saved)
        try:
            with cpu_threads(self.sim.threads):
                reply = self._serve(order, glob)
            return reply, self.save(c)
        finally:
            for tree in (self.sim.local_params, self.sim.local_buffers, self.sim.state):
                poison(tree, c, self.n)

    def _serve(self, order: Order, glob: dict) -> Reply:
        sim, cfg, algo = self.sim, self.sim.cfg, self.sim.algo
        c, t = order.client, order.t
        label = cfg.algorithm.label
        me = torch.tensor([c], device=sim.device)
        for k, v in glob.items():
            sim.global_params[k] = v.to(sim.device, sim.global_params[k].dtype)
        rnd = ClientRound(sim.setup, t, me=me, global_params=sim.global_params, local_params=sim.local_params,
                          local_buffers=sim.local_buffers, selected=torch.as_tensor(order.selected, device=sim.device),
                          state=sim.state)
        m = dict.fromkeys(METRICS, math.nan)
        m.update(local_steps=0, diverged=0, bytes_down=0)
        reply = Reply(c, m)
        own = {"params": sim.local_params, "buffers": sim.local_buffers}

        # 2. local initialisation (the engine's step numbers)
        tic = time.perf_counter()
        if order.init:
            sent = algo.initialise(rnd, me)
            if not (_finite(sent.params) and _finite(sent.rows)):
                raise SplitError(f"{label} read other clients' models to initialise client {c} in round {t}: it "
                                 "cannot run with clients and server apart")
            self._receive(me, sent)
            m["bytes_down"] = sent.bytes
        if order.snapshot:
            reply.snapshots["start"] = {k: v[c].detach().cpu().clone() for k, v in sim.local_params.items()}
        m["init_seconds"] = time.perf_counter() - tic

        # 3. evaluation before local training
        tic = time.perf_counter()
        if order.evaluate:
            models = algo.personalise(rnd) or own
            if not _finite(rnd.own(models)["params"]):
                raise SplitError(f"{label} read other clients' models to personalise client {c} in round {t}: it "
                                 "cannot run with clients and server apart")
            test = rnd.evaluate_own(models, "test")
            m.update(test_loss_sum=float(test["loss_sum"][0]), test_correct=float(test["correct"][0]),
                     test_num=float(test["num"][0]))
            if cfg.record_train_loss:
                tr = rnd.evaluate_own(own, "train")
                m["init_loss"] = float(tr["loss_sum"][0] / max(tr["num"][0], 1))
        m["eval_seconds"] = time.perf_counter() - tic

        # 4. local training, the straggler's work as the server drew it
        tic = time.perf_counter()
        if order.train:
            steps = algo.local_steps or cfg.local_steps
            plan = sim.setup.plan(t, me, epochs=None if steps else cfg.local_epochs, steps=steps,
                                  limits=None if order.limit is None else {c: order.limit})
            trained = algo.local_train(rnd, Work(me, plan))
            for k, v in trained.params.items():
                sim.local_params[k][me] = v
            for k, v in trained.buffers.items():
                sim.local_buffers[k][me] = v
            losses_all = np.asarray(trained.losses, dtype=np.float64)
            valid = trained.done if trained.done is not None else ~np.isnan(losses_all)
            losses = np.where(valid, losses_all, 0.0)
            n_steps = int(valid.sum(1)[0])
            m["local_steps"] = n_steps
            m["train_loss"] = float(losses.sum(1)[0] / n_steps) if n_steps > 0 else math.nan
            m["diverged"] = int(not np.isfinite(losses).all())
            if trained.seconds is not None:
                m["seconds"] = float(trained.seconds[0])
            if not order.dropped:
                if order.evaluate and cfg.record_train_loss:
                    tr = rnd.evaluate_own(own, "train")
                    m["trained_loss"] = float(tr["loss_sum"][0] / max(tr["num"][0], 1))
                reply.upload = {k: sim.local_params[k][c].detach().cpu().clone() for k in self.uploads}
        if order.snapshot:
            reply.snapshots["end"] = {k: v[c].detach().cpu().clone() for k, v in sim.local_params.items()}
        m["train_seconds"] = time.perf_counter() - tic

        reply.records = plain_records(rnd.records)
        reply.meta = {k: list(v) for k, v in algo.meta(sim.state).items() if isinstance(v, list)}
        return reply

    def _receive(self, clients: torch.Tensor, sent: Sent) -> None:
        """Write what the client received into its local model, as the engine does (``Simulation._receive``)."""
        for name, v in {**sent.params, **sent.rows}.items():
            self.sim.local_params[name][clients] = v


def plain_records(records: list) -> list:
    """A Round's records (``Round.record``/``record_series``) as plain values: table columns as lists,
    series tensors on the CPU."""
    out = []
    for kind, name, payload in records:
        if kind == "table":
            out.append([kind, name, {col: np.atleast_1d(np.asarray(v)).tolist() for col, v in payload.items()}])
        else:
            clients, tensors = payload
            out.append([kind, name, [[int(x) for x in clients],
                                     {k: v.detach().cpu().clone() for k, v in tensors.items()}]])
    return out


# ------------------------------------------------------------------------------------- the server half


class ServerSide:
    """The server half of the round: G, the algorithm's server-side state, selection, the stragglers'
    draw, aggregation of the senders' uploads, and the run's records (the engine's Recorder).

    Use: ``orders = server.orders(t)`` → send each client its order with :meth:`downloads` → collect the
    replies → ``server.finish(t, replies)``; after the last round :meth:`to_run`. Raises a
    :class:`ConfigError` at construction for a method that cannot run split (:func:`split_refusal`)."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model: nn.Module | None = None, *,
                 engine: str = "split"):
        self.sim = sim = Simulation(cfg, data, model=model)
        sim.close()  # the server trains nothing: no worker processes
        check_split(sim.cfg, sim.algo, sim.state)
        self.n = sim.num_clients
        self.uploads = list(sim.algo.downloads())
        self.engine = engine
        self.meta_lists: dict[str, list] = {}
        self.client_backend: str | None = None
        self._pending: dict | None = None
        for tree in (sim.local_params, sim.local_buffers):
            poison(tree, slice(None), self.n)

    @property
    def cfg(self) -> RunConfig:
        """The run's config (bound to custom data or model, as the engine's)."""
        return self.sim.cfg

    def downloads(self) -> dict[str, torch.Tensor]:
        """G's parameters a client receives (the method's ``downloads()``: FedRep's body), on the CPU."""
        return {k: self.sim.global_params[k].detach().cpu() for k in self.uploads}

    def orders(self, t: int) -> list[Order]:
        """Round ``t``'s orders, in client order: every client the engine's round touches (initialised,
        evaluated or trained), and the snapshot clients."""
        sim, cfg, algo = self.sim, self.sim.cfg, self.sim.algo
        t_start = time.perf_counter()
        rnd = sim.round_view(t)
        selected = rnd.selected = algo.select(rnd)
        sel_mask = np.zeros(self.n, dtype=bool)
        sel_mask[selected.cpu().numpy()] = True
        steps = algo.local_steps or cfg.local_steps
        _, work = sim.local_work(t, selected, epochs=None if steps else cfg.local_epochs, steps=steps)
        evaluated = (t - 1) % cfg.eval_every == 0 or t == cfg.rounds
        snap = set(sim.recorder.snapshot) if t >= sim.recorder.snapshot_from else set()
        sel = [int(c) for c in selected.cpu().tolist()]
        out = []
        for c in range(self.n):
            init = bool(algo.initialise_all or sel_mask[c])
            if init or evaluated or sel_mask[c] or c in snap:
                out.append(Order(t, c, sel, init=init, evaluate=evaluated, train=bool(sel_mask[c]),
                                 limit=work.limits.get(c), dropped=bool(work.dropped[c]), snapshot=c in snap))
        self._pending = {"t": t, "rnd": rnd, "selected": selected, "sel_mask": sel_mask, "work": work,
                         "evaluated": evaluated, "orders": {o.client: o for o in out}, "t_start": t_start}
        return out

    def finish(self, t: int, replies: list[Reply]) -> dict:
        """Aggregate round ``t`` from its clients' ``replies`` (any order) and record it as the engine does;
        returns the round's summary row. Raises TrainingDiverged as the engine does."""
        p, sim, cfg, algo, rec = self._pending, self.sim, self.sim.cfg, self.sim.algo, self.sim.recorder
        if p is None or p["t"] != t:
            raise RuntimeError(f"finish({t}) without orders({t})")
        by = {r.client: r for r in replies}
        missing = sorted(set(p["orders"]) - set(by))
        if missing:
            raise FedalaError(f"round {t}: no reply from client(s) {missing[:10]}")
        n, rnd, selected, sel_mask, work = self.n, p["rnd"], p["selected"], p["sel_mask"], p["work"]
        evaluated = p["evaluated"]

        def column(name, default=math.nan):
            v = np.full(n, default, dtype=np.float64)
            for c, r in by.items():
                v[c] = r.metrics[name]
            return v

        # the clients' models at the start and end of their round, for the Fig. 4 snapshots
        for which in ("start", "end"):
            rows = {c: r.snapshots[which] for c, r in by.items() if which in r.snapshots}
            if rows:
                for c, params in rows.items():
                    for k, v in params.items():
                        sim.local_params[k][c] = v.to(sim.device)
                rec.snapshot_models(t, which, sim.local_params)

        nan = np.full(n, np.nan)
        test = None
        if evaluated:
            test = {"loss_sum": column("test_loss_sum"), "correct": column("test_correct"),
                    "num": column("test_num").astype(np.int64)}
        init_loss = column("init_loss") if evaluated and cfg.record_train_loss else nan
        local_steps = column("local_steps", 0).astype(np.int64)
        train_loss, seconds, trained_loss = column("train_loss"), column("seconds"), column("trained_loss")
        sel_train_loss = train_loss[sel_mask]
        diverged = column("diverged", 0)[sel_mask] > 0
        bytes_down = int(column("bytes_down", 0).sum())
        senders = work.senders(selected)
        sent_mask = sel_mask & ~work.dropped

        for c in sorted(by):  # what the clients' hooks recorded, in client order
            rec.take(t, by[c].records)
            for k, v in by[c].meta.items():
                have = self.meta_lists.setdefault(k, [])
                have.extend(x for x in v if x not in have)
        if diverged.any():
            sim.round = t - 1
            run = self.to_run(status="diverged")
            run.message = msg = divergence_message(cfg, t, selected.cpu().numpy()[diverged].tolist())
            raise TrainingDiverged(msg, run)

        # 5. server aggregation over the senders' uploads, in client order
        tic = time.perf_counter()
        for c in senders.cpu().tolist():
            upload = by[c].upload
            if upload is None:
                raise FedalaError(f"round {t}: client {c} sent no model")
            for k, v in upload.items():
                sim.local_params[k][c] = v.to(sim.device, sim.local_params[k].dtype)
        agg = algo.aggregate(rnd, senders) if len(senders) else Aggregated({}, 0)
        if not _finite(agg.params):
            raise SplitError(f"{cfg.algorithm.label}'s aggregation in round {t} read models of clients that sent "
                             "none: it cannot run with clients and server apart")
        sim.global_params.update(agg.params)
        t_agg = time.perf_counter() - tic
        rec.take(t, rnd.records)
        for tree in (sim.local_params, sim.local_buffers):
            poison(tree, slice(None), n)

        if test is not None:
            with np.errstate(invalid="ignore"):
                acc_c = np.where(test["num"] > 0, test["correct"] / np.maximum(test["num"], 1), np.nan)
            rec.client_rows({
                "round": np.full(n, t), "client": np.arange(n), "selected": sel_mask,
                "test_acc": acc_c, "test_loss": test["loss_sum"] / np.maximum(test["num"], 1),
                "test_correct": test["correct"].astype(np.int64), "test_num": test["num"].astype(np.int64),
                "train_loss": train_loss, "init_loss": init_loss, "trained_loss": trained_loss, "seconds": seconds,
                "straggler": work.straggler, "local_steps": local_steps,
            })
            acc = float(test["correct"].sum() / max(test["num"].sum(), 1))
            acc_std = float(np.nanstd(acc_c)) if np.isfinite(acc_c).any() else float("nan")
            test_loss = float(test["loss_sum"].sum() / max(test["num"].sum(), 1))
        else:
            acc = acc_std = test_loss = float("nan")
        # the engine's summary row (Simulation.run_round), from the clients' numbers
        prev_best = [b for b in rec.rounds["best_acc"] if not math.isnan(b)]
        best = max([acc, *prev_best]) if not math.isnan(acc) else (prev_best[-1] if prev_best else math.nan)
        w_all, w_sel = sim.train_sizes, sim.train_sizes[sel_mask] * sent_mask[sel_mask]
        seconds_round = time.perf_counter() - p["t_start"]
        row = {
            "round": t, "acc": acc, "acc_std": acc_std, "test_loss": test_loss,
            "train_loss": float(np.nansum(sel_train_loss * w_sel) / max(w_sel.sum(), 1)),
            "init_loss": float(np.sum(init_loss * w_all) / w_all.sum()) if evaluated and cfg.record_train_loss
            else float("nan"),
            "trained_loss": float(np.nansum(trained_loss[sel_mask] * w_sel) / max(w_sel.sum(), 1))
            if evaluated and cfg.record_train_loss else float("nan"),
            "best_acc": best, "num_selected": int(sel_mask.sum()),
            "stragglers": int(work.straggler.sum()), "dropped": int(work.dropped.sum()),
            "bytes_up": int(agg.bytes), "bytes_down": bytes_down, "seconds": seconds_round,
            # the clients' phases, summed over them (they run in parallel on Flower)
            "init_seconds": float(np.nansum(column("init_seconds"))),
            "eval_seconds": float(np.nansum(column("eval_seconds"))),
            "train_seconds": float(np.nansum(column("train_seconds"))), "aggregate_seconds": t_agg,
        }
        rec.round_row(row)
        sim.round, sim.seconds = t, sim.seconds + seconds_round
        self._pending = None
        return row

    def to_run(self, status: str = "complete") -> Run:
        """The recorded :class:`Run`, as the engine's, with ``meta["engine"]`` naming where it ran and
        ``meta["flower"]`` how (the clients' list entries of the algorithm's meta gathered)."""
        run = self.sim.to_run(status=status)
        for k, v in self.meta_lists.items():
            if isinstance(run.meta.get(k), list):
                run.meta[k] = [*run.meta[k], *(x for x in v if x not in run.meta[k])]
        env = run.meta.setdefault("env", {})
        env["backend"] = self.client_backend or env.get("backend")
        run.meta["engine"] = self.engine
        run.meta["split"] = {"clients": self.n, "phase_seconds": "summed over clients",
                             "seconds": "server wall clock per round, communication included"}
        return run


def run_split(cfg: RunConfig, data: FederatedData | None = None, *, model: nn.Module | None = None) -> Run:
    """Both halves in this process, without Flower: each order carried out by a :class:`ClientSide`, each
    client's rows kept as the bytes a Flower client keeps in its ``Context.state``. The same Run as the
    engine's on the loop backend (tests/test_flower.py), for checking a method before taking it to Flower."""
    return split_simulation(cfg, data, model=model).to_run()


def split_simulation(cfg: RunConfig, data: FederatedData | None = None, *,
                     model: nn.Module | None = None) -> ServerSide:
    """:func:`run_split`'s rounds, returning the :class:`ServerSide` (its Run: ``to_run()``; its final global
    model: ``sim.global_params``)."""
    server = ServerSide(cfg, data, model, engine="split")
    client = ClientSide(server.cfg, data, model)
    server.client_backend = client.sim.backend.name
    saved: dict[int, bytes] = {}
    for t in range(1, server.cfg.rounds + 1):
        glob = server.downloads()
        replies = []
        for order in server.orders(t):
            reply, saved[order.client] = client.serve(order, glob, saved.get(order.client))
            replies.append(reply)
        server.finish(t, replies)
    return server


__all__ = ["ClientRound", "ClientSide", "Order", "Reply", "ServerSide", "SplitError", "check_split", "run_split",
           "split_refusal", "split_simulation"]
