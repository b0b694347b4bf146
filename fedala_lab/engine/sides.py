"""The round cut where a federation cuts it: a server side and a client side, for any transport (Flower:
fedala_lab/flower; both in one process: ``flower.run_split``). docs/design.md#one-round-two-transports.

    server  (ServerSide)                                   client c  (ClientSide)
    orders(t): rounds.begin — select, stragglers ── G, an Order ──▶ serve: rounds.serve on client c alone
    finish(t, replies): rounds.finish — aggregate, ◀── a Reply ─────  its numbers, its upload (the method's
      divergence, the run's records and rows                            downloads()), what its hooks recorded

Each side holds the round's state (:class:`~fedala_lab.engine.rounds.RoundState`), only what it would hold in a
federation. For each order a client holds itself alone (:meth:`ClientSide.side`): its data, a state of one row
(its model, buffers and row of the algorithm's state, loaded from the bytes it kept and saved after the order)
and the algorithm built on that one client, whose hooks see it as row 0 and draw its streams by its id
(``Setup.ids``), so it computes what the engine computes for it. The server holds G, the algorithm's server-side
state, the run's records and, while it aggregates, the senders' uploads alone (:class:`Uploads`), which
``aggregate`` reads by client id as it reads the engine's (N, …) stacks (``local_params[n][senders]``); a hook
that reads a model no sender uploaded fails loudly (:class:`~fedala_lab.errors.SplitError`).

A transport uses only this (docs/design.md#one-round-two-transports): ``ServerSide`` — ``cfg``,
``num_clients``, ``train_size(c)``, ``global_params``, ``downloads()``, ``orders(t)``, ``finish(t, replies)``,
``to_run()``, ``client_backend``, and to survive a lost node or server ``round``, ``rows(c)``,
``save_checkpoint(path)``, ``load_checkpoint(path)``; ``ClientSide`` — ``num_clients``, ``train_size(c)``,
``backend_name``, ``serve(order, glob, saved)``; the values :class:`Order` and :class:`Reply`; :func:`to_bytes` /
:func:`from_bytes`. (``sim``, each side's RoundState (a client's: its last order's), is for tests.)

Which methods run so (:func:`split_refusal`): those whose client hooks need only G and the client's own model,
state and data, and whose ``aggregate`` needs only the senders' uploads and the server's own state; a method
whose server and client hooks share a state is refused, unless its class declares ``flower_split``.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..algorithms.base import Algorithm, Setup, Wrapper, state_from_dict, state_to_dict
from ..compute.backends import make_backend
from ..compute.device import cpu_threads
from ..config import RunConfig
from ..data.federated import FederatedData
from ..errors import ConfigError, FedalaError, SplitError
from ..record.run import Run
from . import rounds
from .rounds import RoundState
from .simulate import Simulation, load_checkpoint, prepared, run_threads, write_checkpoint
from .stragglers import LocalWork

SERVER_HOOKS = ("select", "aggregate")
CLIENT_HOOKS = ("initialise", "personalise", "local_train")


# ------------------------------------------------------------------------------------ which methods


def split_refusal(algo: Algorithm, state, label: str) -> str:
    """Why the built algorithm ``algo`` (state ``state``, named ``label``) cannot run with clients and server
    apart, or "" when it can. Walks its wrappers (``+ala``, ``-c``) and the method inside: a piece that keeps
    a state of its own and overrides both a server hook and a client hook is refused, unless its class
    declares ``flower_split`` (True: it runs; a string: it is refused with that reason)."""
    a, st = algo, state
    while a is not None:
        declared, name = type(a).flower_split, type(a).__name__
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


def split_methods(setup) -> list[str]:
    """The registered methods (bases, as built on ``setup``) that run with clients and server apart."""
    from ..algorithms import registry

    out = []
    with warnings.catch_warnings():  # built only to be asked: their advice on the config is not wanted here
        warnings.simplefilter("ignore")
        for spec in registry.specs():
            try:
                algo = spec.build(setup)
                if not split_refusal(algo, algo.init_state(setup), spec.label):
                    out.append(spec.label)
            except (FedalaError, ValueError, TypeError):  # a method this model or data cannot run at all
                continue
    return out


def check_split(cfg: RunConfig, algo: Algorithm, state) -> None:
    """Raise a :class:`ConfigError` naming the method and why, if it cannot run with clients and server apart."""
    why = split_refusal(algo, state, cfg.algorithm.label)
    if why:
        able = ", ".join(split_methods(algo.setup))
        raise ConfigError("algo", cfg.algo, f"a method whose clients and server can run apart ({able}, with the "
                          "modifiers they take, and methods built like them)", why)


def client_backend(cfg: RunConfig) -> str:
    """The backend a client trains on: one client per call leaves nothing to vectorise over and no room for
    worker processes, so "auto" and "workers" run the loop; only an explicit "vectorised" is kept."""
    return "vectorised" if cfg.backend == "vectorised" else "loop"


# ---------------------------------------------------------------------------- what travels, as values


@dataclass
class Order:
    """What the server asks of client ``client`` in round ``t``: initialise from G, evaluate before local
    training, train (``limit``: a straggler's steps, None: its full work; ``dropped``: a straggler the
    server drops, which trains nothing and sends nothing), send its model for the Fig. 4 snapshots."""

    t: int
    client: int
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
        return cls(t=int(d["t"]), client=int(d["client"]), init=bool(d["init"]), evaluate=bool(d["evaluate"]),
                   train=bool(d["train"]), limit=None if limit < 0 else limit, dropped=bool(d["dropped"]),
                   snapshot=bool(d["snapshot"]))


@dataclass
class Reply:
    """What client ``client`` sends back: ``metrics`` (:data:`~fedala_lab.engine.rounds.METRICS`), its
    ``upload`` (the parameters the method aggregates, None when it sends nothing), ``snapshots`` ({"start"/
    "end": its flattened model}), ``records`` (what its hooks recorded, as plain values) and ``meta`` (the list
    entries of the algorithm's ``meta`` on its state, e.g. ALA's capped clients) and ``rows``: the rows it keeps
    after this order (:meth:`ClientSide.serve`'s bytes), which the server keeps for its checkpoints and to hand
    back to a node that lacks them (a resumed run, a replacement SuperNode)."""

    client: int
    metrics: dict[str, float]
    upload: dict[str, torch.Tensor] | None = None
    snapshots: dict[str, torch.Tensor] = field(default_factory=dict)
    records: list = field(default_factory=list)
    meta: dict[str, list] = field(default_factory=dict)
    rows: bytes | None = None


def to_bytes(obj) -> bytes:
    """Plain values (dicts, lists, tensors, numbers, strings) as bytes that :func:`from_bytes` reads back."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def from_bytes(blob: bytes):
    """:func:`to_bytes`'s value, read with ``weights_only=True`` (tensors and plain values, no code)."""
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)


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


# ------------------------------------------------------------------- one client's rows of the state


def _per_client(v, n: int) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n


def _tensors_mapped(plain, f):
    """A plain state (``state_to_dict``'s: dicts, lists, tensors, values) with ``f`` of each tensor."""
    if isinstance(plain, dict):
        return {k: _tensors_mapped(v, f) for k, v in plain.items()}
    if isinstance(plain, list):
        return [_tensors_mapped(v, f) for v in plain]
    return f(plain) if isinstance(plain, torch.Tensor) else plain


def state_rows(plain, c: int, n: int):
    """Client ``c``'s part of a state made plain (``state_to_dict``): each tensor with one row per client
    (leading dimension N) cut to its row c, (1, …); everything else whole (the client's own copy)."""
    return _tensors_mapped(plain, lambda v: (v[c:c + 1] if _per_client(v, n) else v).detach().cpu().clone())


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


def put_client_rows(plain, rows, c: int, n: int) -> None:
    """Write the per-client tensors of client ``c``'s :func:`state_rows` ``rows`` into row c of the plain state
    ``plain`` (``state_to_dict``'s, in place); every other value stays ``plain``'s (the server's own)."""
    if isinstance(plain, dict) and isinstance(rows, dict):
        for k, v in plain.items():
            if k in rows:
                put_client_rows(v, rows[k], c, n)
    elif isinstance(plain, list) and isinstance(rows, list) and len(plain) == len(rows):
        for a, b in zip(plain, rows):
            put_client_rows(a, b, c, n)
    elif _per_client(plain, n) and isinstance(rows, torch.Tensor) and rows.shape[1:] == plain.shape[1:]:
        plain[c] = rows[0].to(plain.dtype)


# ------------------------------------------------------------------------------------- the client side


class ClientSide:
    """The client side of the round, for any client of one run, one client at a time (a Flower SuperNode's
    ClientApp, a Ray actor serving several simulated clients one after another), on the backend of
    :func:`client_backend`: for each order the client alone (:meth:`side`), from the rows it kept (``saved``:
    None for its first message: the initial model and the algorithm's initial state, as in the engine)."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model: nn.Module | None = None):
        self.cfg, device, self.data, self.model = prepared(cfg.replace(backend=client_backend(cfg)), data, model)
        self.num_clients, self.threads = self.data.num_clients, run_threads(self.cfg, device)
        self.backend = make_backend(self.cfg.backend)
        self.backend_name = self.backend.name
        self.tracked = self.cfg.clients_to("track_clients", self.num_clients)
        self.sim: RoundState | None = None
        self.built: dict[int, tuple] = {}  # client id -> its Setup and the algorithm built on it, kept between orders

    def train_size(self, c: int) -> int:
        return int(self.data.train_sizes[c])

    def side(self, c: int, saved: bytes | None) -> RoundState:
        """Client ``c`` alone: its data, its rows (``saved``, or the initial ones) as a state of one row, and the
        algorithm built on it (row 0 is client ``c``: ``Setup.ids``)."""
        if c not in self.built:  # as the engine's, built once and kept across rounds (its plans, its steps)
            setup = Setup(self.cfg, self.model, self.data.client(c), tracked=self.tracked, backend=self.backend, ids=[c])
            self.built[c] = setup, self.cfg.algorithm.build(setup)
        setup, algo = self.built[c]
        state = algo.init_state(setup)
        rows = {"params": dict(self.model.named_parameters()), "buffers": dict(self.model.named_buffers())}
        if saved is not None:
            rows = from_bytes(saved)
            state = put_state_rows(state, rows["state"], 0, 1)
        local, buffers = ({k: v.detach().unsqueeze(0).to(setup.device).clone() for k, v in rows[part].items()}
                          for part in ("params", "buffers"))
        glob = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        return RoundState(self.cfg, setup, algo, glob, local, buffers, state, recorder=None)

    def serve(self, order: Order, glob: dict[str, torch.Tensor], saved: bytes | None) -> tuple[Reply, bytes]:
        """Carry out ``order`` for its client with the global parameters ``glob`` (what the method downloads),
        from the client's ``saved`` rows; returns the reply and the client's rows to keep."""
        c, n = order.client, self.num_clients
        if not 0 <= c < n:
            raise FedalaError(f"client {c} does not exist: the run's data has {n} clients (0 … {n - 1})")
        self.sim = rs = self.side(c, saved)
        with cpu_threads(self.threads):
            reply = self._serve(rs, order, glob)
        reply.rows = to_bytes({"params": {k: v[0].detach().cpu().clone() for k, v in rs.local_params.items()},
                               "buffers": {k: v[0].detach().cpu().clone() for k, v in rs.local_buffers.items()},
                               "state": state_rows(state_to_dict(rs.state), 0, 1)})
        return reply, reply.rows

    @staticmethod
    def _serve(rs: RoundState, order: Order, glob: dict) -> Reply:
        device = rs.setup.device
        for k, v in glob.items():
            rs.global_params[k] = v.to(device, rs.global_params[k].dtype)
        me = torch.zeros(int(order.train), dtype=torch.int64, device=device)  # row 0 when selected
        work = LocalWork(np.array([order.limit is not None]), np.array([order.dropped]),
                         {} if order.limit is None else {0: order.limit})
        start = rounds.RoundStart(order.t, rs.round_view(order.t, me), me, work, order.evaluate,
                                  frozenset({0}) if order.snapshot else frozenset())
        report = rounds.serve(rs, start)
        reply = Reply(order.client, report.row(0), records=plain_records(start.rnd.records),
                      snapshots={which: flats[0] for which, flats in report.snapshots.items() if 0 in flats},
                      meta={k: list(v) for k, v in rs.algo.meta(rs.state).items() if isinstance(v, list)})
        if order.train and not order.dropped:
            reply.upload = {k: rs.local_params[k][0].detach().cpu().clone() for k in rs.algo.downloads()}
        return reply


# ------------------------------------------------------------------------------------- the server side


class Uploads:
    """One parameter or buffer of the clients' models as the server holds it: the rows its senders uploaded
    this round, by client id (none between rounds). Indexed by clients that sent (a tensor or list of ids, a mask,
    one id) it gives their rows as the engine's (N, …) stack would; any other row, or the stack whole (a method
    or torch function on it), is a :class:`SplitError` naming ``who`` read it."""

    def __init__(self, who: str, n: int, like: torch.Tensor, rows: dict[int, torch.Tensor] | None = None):
        self.who, self.rows, self.like = who, rows or {}, like
        self.shape, self.dtype, self.device = torch.Size((n, *like.shape)), like.dtype, like.device

    def __getitem__(self, idx):
        i = torch.as_tensor(range(self.shape[0])[idx] if isinstance(idx, slice) else idx)
        ids = (i.nonzero() if i.dtype == torch.bool else i).reshape(-1).tolist()
        missing = sorted(set(ids) - set(self.rows))
        if missing:
            raise self.refused(f"models of clients that sent none ({', '.join(map(str, missing[:10]))})")
        rows = torch.stack([self.rows[c] for c in ids]) if ids else self.like.new_empty((0, *self.like.shape))
        return rows[0] if i.dim() == 0 else rows

    def refused(self, what: str) -> SplitError:
        return SplitError(f"{self.who} read {what}: it cannot run with clients and server apart, where the "
                          "server holds only the models its senders upload")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise self.refused(f"every client's model (.{name})")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        held = next(a for a in (*args, *(kwargs or {}).values()) if isinstance(a, Uploads))
        raise held.refused(f"every client's model ({getattr(func, '__name__', func)})")


class ServerSide:
    """The server side of the round: G, the algorithm's server-side state, selection, the stragglers' draw,
    aggregation of the senders' uploads, and the run's records (engine/rounds.py).

    Use: ``orders = server.orders(t)`` → send each client its order with :meth:`downloads` → collect the
    replies → ``server.finish(t, replies)``; after the last round :meth:`to_run`. Raises a
    :class:`ConfigError` at construction for a method that cannot run split (:func:`split_refusal`).
    ``engine`` names the transport in the Run's meta ("split", "flower"). Its round state (``sim``) is an
    engine ``Simulation`` that never trains: the run's records, its Run and checkpoints are the engine's."""

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, model: nn.Module | None = None, *,
                 engine: str = "split"):
        self.sim = rs = Simulation(cfg, data, model=model)
        rs.close()  # the server trains nothing: no worker processes
        check_split(rs.cfg, rs.algo, rs.state)
        self.num_clients, self.uploads = rs.num_clients, list(rs.algo.downloads())
        self.engine, self.client_backend = engine, None  # client_backend: as the clients said (the Run's env.backend)
        self.meta_lists: dict[str, list] = {}  # the clients' list entries of the algorithm's meta
        self.client_rows: dict[int, bytes] = {}  # each client's rows as it last sent them (Reply.rows)
        # every client's rows before any round (all alike): what a client the run never served still holds
        self.initial = {"params": {k: v[0].detach().cpu().clone() for k, v in rs.local_params.items()},
                        "buffers": {k: v[0].detach().cpu().clone() for k, v in rs.local_buffers.items()}}
        self._like = {part: {k: v.to(rs.setup.device) for k, v in rows.items()} for part, rows in self.initial.items()}
        self._start: rounds.RoundStart | None = None
        self._orders: dict[int, Order] = {}
        self._hold({})

    @property
    def cfg(self) -> RunConfig:
        """The run's config (bound to custom data or model, as the engine's)."""
        return self.sim.cfg

    @property
    def global_params(self) -> dict[str, torch.Tensor]:
        """G, the server's global model."""
        return self.sim.global_params

    def train_size(self, c: int) -> int:
        return int(self.sim.setup.train_sizes[c])

    @property
    def round(self) -> int:
        """The last finished round (0 before the first; a resumed run's checkpoint round)."""
        return self.sim.round

    def rows(self, c: int) -> bytes | None:
        """Client ``c``'s rows as it last sent them (:attr:`Reply.rows`), None before it sent any: what a node
        that lacks them (a resumed run's, a replacement SuperNode) is handed with its next order."""
        return self.client_rows.get(c)

    def save_checkpoint(self, path) -> None:
        """Write the run after its last finished round to ``path`` (atomically), in the engine's checkpoint
        format with every client's rows filled in (the engine can continue it) and what continuing it apart
        needs exactly (:meth:`load_checkpoint`)."""
        write_checkpoint(self._state_dict(), path)

    def engine_state(self) -> dict:
        """The engine state after the last finished round as the run store keeps it with a finished run
        (record/store.py): every client's rows filled in, without the records and without what continuing
        apart needs (``Simulation.state_dict(recorder=False)``, as get_or_run keeps it)."""
        d = self._state_dict(recorder=False)
        del d["split"]
        return d

    def load_checkpoint(self, path) -> bool:
        """Continue from :meth:`save_checkpoint`'s file at ``path``: the server's state, its records and each
        client's rows (:meth:`rows`). False, changing nothing, when ``path`` holds no checkpoint of this run
        (absent, torn, another config or an engine checkpoint without the clients' rows as they kept them)."""
        return load_checkpoint(path, self._load_state_dict)

    def _state_dict(self, *, recorder: bool = True) -> dict:
        """The engine's ``state_dict``, every client's rows filled in from the rows it sent back; ``"split"``:
        those rows as it kept them, the server's own algorithm state, the clients' meta lists and backend."""
        d = self.sim.state_dict(recorder=recorder)
        n, server_state = self.num_clients, d["state"]
        local, buffers = ({k: v.unsqueeze(0).repeat(n, *[1] * v.dim()) for k, v in self.initial[part].items()}
                          for part in ("params", "buffers"))
        state = _tensors_mapped(server_state, torch.Tensor.clone)
        for c, blob in sorted(self.client_rows.items()):
            rows = from_bytes(blob)
            for tree, part in ((local, "params"), (buffers, "buffers")):
                for k, v in rows[part].items():
                    tree[k][c] = v
            put_client_rows(state, rows["state"], c, n)
        d.update(local=local, buffers=buffers, state=state,
                 split={"clients": dict(self.client_rows), "server_state": server_state,
                        "meta_lists": self.meta_lists, "client_backend": self.client_backend, "engine": self.engine})
        return d

    def _load_state_dict(self, d: dict) -> None:
        split = d.get("split")
        if not isinstance(split, dict) or not isinstance(split.get("clients"), dict):
            raise ValueError("not a checkpoint of a run with clients and server apart")  # noqa: TRY004 - as the engine's
        self.sim.load_state_dict(d)
        self.sim.state = state_from_dict(self.sim.state, split["server_state"])
        self.client_rows = {int(c): bytes(b) for c, b in split["clients"].items()}
        self.meta_lists = {k: list(v) for k, v in split["meta_lists"].items()}
        self.client_backend = split["client_backend"]
        self._hold({})

    def _hold(self, uploads: dict[int, dict], who: str = "") -> None:
        """The clients' models as the server holds them (:class:`Uploads`): ``uploads`` (client id → its upload,
        on the run's device) while it aggregates, none between rounds. In place: the round's view holds the dicts."""
        sim, n = self.sim, self.num_clients
        who = who or f"{self.cfg.algorithm.label}'s server hooks"
        for held, part in ((sim.local_params, "params"), (sim.local_buffers, "buffers")):
            held.clear()  # templates on the run's device, made once: no copy per round
            held.update({k: Uploads(who, n, like, {c: u[k] for c, u in uploads.items() if k in u})
                         for k, like in self._like[part].items()})

    def downloads(self) -> dict[str, torch.Tensor]:
        """G's parameters a client receives (the method's ``downloads()``: FedRep's body), on the CPU."""
        return {k: self.sim.global_params[k].detach().cpu() for k in self.uploads}

    def orders(self, t: int) -> list[Order]:
        """Round ``t``'s orders, in client order: every client the engine's round touches (initialised,
        evaluated or trained), and the snapshot clients."""
        start = self._start = rounds.begin(self.sim, t)
        sel, work, init_all = start.sel_mask, start.work, self.sim.algo.initialise_all
        out = []
        for c in range(self.num_clients):
            init = bool(init_all or sel[c])
            if init or start.evaluated or sel[c] or c in start.snapshot:
                out.append(Order(t, c, init=init, evaluate=start.evaluated, train=bool(sel[c]),
                                 limit=work.limits.get(c), dropped=bool(work.dropped[c]), snapshot=c in start.snapshot))
        self._orders = {o.client: o for o in out}
        return out

    def finish(self, t: int, replies: list[Reply]) -> dict:
        """Aggregate round ``t`` from its clients' ``replies`` (any order) and record it as the engine does;
        returns the round's row. Raises TrainingDiverged as the engine does."""
        start, sim, n = self._start, self.sim, self.num_clients
        if start is None or start.t != t:
            raise RuntimeError(f"finish({t}) without orders({t})")
        by = {r.client: r for r in replies}
        missing = sorted(set(self._orders) - set(by))
        if missing:
            raise FedalaError(f"round {t}: no reply from client(s) {missing[:10]}")
        report = rounds.Report.blank(n)
        for c in sorted(by):  # in client order: what they measured, recorded and hold in their meta lists
            r = by[c]
            report.put(c, r.metrics)
            for which, flat in r.snapshots.items():
                report.snapshots.setdefault(which, {})[c] = flat
            report.records.extend(r.records)
            for k, v in r.meta.items():
                have = self.meta_lists.setdefault(k, [])
                have.extend(x for x in v if x not in have)
        uploads = {}
        for c in start.work.senders(start.selected).cpu().tolist():
            if by[c].upload is None:
                raise FedalaError(f"round {t}: client {c} sent no model")
            uploads[c] = {k: v.to(sim.setup.device, self.initial["params"][k].dtype) for k, v in by[c].upload.items()}
        self._hold(uploads, f"{self.cfg.algorithm.label}'s aggregation in round {t}")
        try:
            row = rounds.finish(sim, start, report, self.to_run)
        finally:
            self._start = None
            self._hold({})
        self.client_rows.update({c: r.rows for c, r in by.items() if r.rows is not None})  # once the round counts
        return row

    def to_run(self, status: str = "complete") -> Run:
        """The recorded :class:`Run`, as the engine's, with ``meta["engine"]`` naming where it ran and
        ``meta["split"]`` how (the clients' list entries of the algorithm's meta gathered)."""
        run = self.sim.to_run(status=status)
        for k, v in self.meta_lists.items():
            if isinstance(run.meta.get(k), list):
                run.meta[k] = [*run.meta[k], *(x for x in v if x not in run.meta[k])]
        run.meta["env"]["backend"] = self.client_backend or client_backend(self.cfg)
        run.meta["engine"] = self.engine
        run.meta["split"] = {"clients": self.num_clients, "phase_seconds": "summed over clients",
                             "seconds": "server wall clock per round, communication included"}
        return run


__all__ = ["ClientSide", "Order", "Reply", "ServerSide", "Uploads", "check_split", "client_backend", "from_bytes", "put_state_rows",
           "split_methods", "split_refusal", "state_rows", "to_bytes"]
