"""The round interface: what the one round loop (engine/simulate.py) asks of an algorithm, and what it
hands it.

    for t = 1..T:                                                   an algorithm's hooks (FedAvg's defaults)
        selected = select(rnd)                                      ⌊ρN⌋ clients, a seeded draw
        sent     = initialise(rnd, clients)                         every client starts from G
        evaluate personalise(rnd) or the local models               before local training (the paper's order)
        trained  = local_train(rnd, work)                           E epochs of SGD (+ objective's term)
        new G    = aggregate(rnd, senders)                          mean weighted by train samples

An algorithm is an :class:`Algorithm` subclass that overrides the hooks its paper changes: FedProx adds an
:meth:`~Algorithm.objective` term, FedALA replaces :meth:`~Algorithm.initialise`, FedRep trains in two
phases (:meth:`~Algorithm.local_train`) and sends the body only, FedAMP builds one model per client in
:meth:`~Algorithm.aggregate`. A hook sees a :class:`Round` — this round's number, the global model G, every
client's local model, the data, seeded generators, services to train and evaluate, a way to record — never
the engine, and *returns* what it changes (:class:`Sent`, :class:`Trained`, :class:`Aggregated`); the engine
writes those into its state. What an algorithm carries from round to round (ALA's weights, Ditto's personal
models, FedLAMA's intervals) is its *state*: a dataclass of tensors made by :meth:`~Algorithm.init_state`,
held by the engine and checkpointed without being looked into; a hook reads and updates it as ``rnd.state``.

A modifier wraps an algorithm (:class:`Wrapper`): ``+ala`` replaces the initialisation on any method, ``-c``
evaluates a fine-tuned copy. Wrapped states compose: the wrapper's state holds the inner one as ``inner``.
Algorithms are registered by name with their hyper-parameters in ``registry.py`` (docs/extending.md).

One rule a hook must keep: round t may depend on the rounds before it, never on those after — not on
``cfg.rounds`` (the run's total) either, since the run store continues a stored 50-round run to 100 rounds
and takes a shorter run as the start of a longer one (a schedule takes its own length as a hyper-parameter,
as FedPHP's ``fedphp_ramp``).

Shapes: ``global_params[name]`` is the parameter's shape; ``local_params[name]`` is (N, *shape) for the N
clients a round holds; a per-client result for A clients is (A, *shape), rows in the order of the clients asked
for. A client is named by its row; its id in the run is ``rnd.ids[row]`` (the row itself in the engine; a
client apart from the server, engine/sides.py, holds itself alone, as row 0): the streams of :meth:`Round.rng`
and :meth:`Round.plan` are drawn by id, and what a hook records or keeps about a client names its id.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..compute import plans
from ..compute import rng as streams
from ..compute.backends import BatchPlan, make_backend
from ..compute.steps import SGD, make_eval_step, make_sgd_step
from ..data.federated import FederatedData

SMALL_MODEL = 200_000  # parameters from which a client at a time beats the vectorised backend on a CPU


def resolve_backend(name: str, device: torch.device, num_params: int) -> str:
    """"auto" → "vectorised", except a model over SMALL_MODEL parameters on a CPU → "workers".

    On a CPU a step of a large model is real arithmetic, and vmap turns its convolutions into slow grouped
    ones (docs/design.md#performance); small models are bound by per-step overhead, which vmap amortises.
    "workers" trains a client at a time in worker processes (one per core, one thread each)."""
    if name != "auto":
        return name
    return "workers" if device.type == "cpu" and num_params >= SMALL_MODEL else "vectorised"


# -------------------------------------------------------------------------------------- what hooks return


@dataclass
class Sent:
    """What clients start local training from (``initialise``), and what that cost in bytes downloaded.

    ``params``: name → tensor of the parameter's shape, the same for every client (G's); ``rows``: name →
    (A, *shape), one row per client (a model of its own: ALA's Θ̂, FedAMP's u_i). A parameter in neither
    keeps the client's local value. ``client_bytes``: each client's share of ``bytes`` (in the order of the
    clients), for a method whose clients download different amounts; None: shared evenly."""

    params: dict[str, torch.Tensor]
    bytes: int
    rows: dict[str, torch.Tensor] = field(default_factory=dict)
    client_bytes: Sequence[int] | None = None

    def received(self) -> set[str]:
        return set(self.params) | set(self.rows)

    def per_client(self, name: str, count: int) -> torch.Tensor:
        """What the ``count`` clients got of ``name``, as (count, *shape) (a view of a shared tensor)."""
        if name in self.rows:
            return self.rows[name]
        v = self.params[name]
        return v.unsqueeze(0).expand(count, *v.shape)


@dataclass
class Trained:
    """What local training left: the clients' new parameters and buffers, (A, *shape) each (a parameter not
    named keeps its value), and the loss of each of their SGD steps (A, K) with ``done`` (A, K) saying which
    steps happened (None: those with a loss that is not NaN). A non-finite loss of a step that happened, or a
    non-finite model, is divergence: the engine stops the run. (Each client's seconds are measured by the
    Round's training services, :attr:`Round.timings`.)"""

    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    losses: np.ndarray
    done: np.ndarray | None = None


@dataclass
class Aggregated:
    """The server's new global parameters (only those that changed) and the bytes uploaded to it;
    ``client_bytes``: each sender's share (in the order of the senders), None: shared evenly."""

    params: dict[str, torch.Tensor]
    bytes: int
    client_bytes: Sequence[int] | None = None


@dataclass
class Work:
    """One round's local training as the engine planned it: the selected clients and their batches (a
    straggler's cut short, a dropped straggler's empty: ``plan.num_steps`` is 0 for it)."""

    clients: torch.Tensor
    plan: BatchPlan


# ------------------------------------------------------------------------------------------- the run


class Setup:
    """What a run's pieces are built from and use throughout the run: the config (``cfg``: hyper-parameters
    are its attributes, e.g. ``cfg.mu``), the model's architecture (``model``: its own parameters are never
    used), the clients' data on the device, and the services that do not depend on the round (batch plans,
    backends, the local SGD step). Built once per run by the engine."""

    def __init__(self, cfg, model: nn.Module, data: FederatedData, *, tracked: Sequence[int] = (),
                 backend=None, chunk_clients: int | None = None, channels_last: bool = False,
                 graphs: bool = False, ids: Sequence[int] | None = None):
        self.cfg, self.model, self.data = cfg, model, data
        # the run's id of the client of each row of ``data`` (None: the rows are the ids)
        self.ids = np.arange(data.num_clients) if ids is None else np.asarray(ids, dtype=np.int64)
        self.device = data.device
        self.param_names = [k for k, _ in model.named_parameters()]
        self.shapes = {k: tuple(v.shape) for k, v in model.named_parameters()}
        self._bytes = {k: v.numel() * v.element_size() for k, v in model.named_parameters()}
        self.num_params = sum(v.numel() for v in model.parameters())
        self.tracked = frozenset(tracked)
        self.chunk_clients = chunk_clients
        # forward passes of conv models in channels_last memory format (CPU; equal to float rounding only)
        self.channels_last = channels_last
        self.graphs = graphs  # vectorised steps from static buffers, CUDA graphs on a GPU (experimental)
        self._backends: dict[str, Any] = {}
        # the run's backend: local training and evaluation (worker processes train steps with a recipe)
        self.backend = backend
        if backend is None:
            self.backend = self.backend_for(self.num_params)
        self._steps: dict[SGD, Callable] = {}
        self._plans: dict = {}
        self.eval_step = make_eval_step(model)
        self.score_step = make_eval_step(model, scores=True)  # the round's test evaluation: each row's scores too

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def train_sizes(self) -> np.ndarray:
        return self.data.train_sizes

    def param_bytes(self, names=None) -> int:
        """Bytes of these parameters (all when None): what sending them costs once."""
        return sum(self._bytes[n] for n in (self.param_names if names is None else names))

    def sgd(self, **changes) -> SGD:
        """The run's local SGD (``lr``, no extra term, every parameter) with ``changes``."""
        return dataclasses.replace(SGD(self.cfg.lr), **changes)

    def step_for(self, sgd: SGD) -> Callable:
        """The per-client step of ``sgd`` (made once per recipe)."""
        if sgd not in self._steps:
            self._steps[sgd] = make_sgd_step(self.model, sgd)
        return self._steps[sgd]

    def backend_for(self, num_params: int):
        """The backend for steps through ``num_params`` parameters: ``cfg.backend`` when set, else the size rule
        of :func:`resolve_backend`. "workers" is the run's worker processes (:attr:`backend`), which train steps
        with a recipe (an SGD recipe, :func:`~fedala_lab.compute.steps.recipe_step`) and run any other step on
        the loop here; without them (a Setup made without its backend) the loop."""
        name = resolve_backend(self.cfg.backend, self.device, num_params)
        if name == "workers":
            if self.backend is not None and self.backend.name == "workers":
                return self.backend
            name = "loop"
        if name not in self._backends:
            self._backends[name] = make_backend(name, self.chunk_clients if name == "vectorised" else None,
                                                channels_last=self.channels_last, graphs=self.graphs)
        return self._backends[name]

    def batches_per_epoch(self, n):
        return plans.batches_per_epoch(n, self.cfg.batch_size, self.cfg.drop_last)

    def plan(self, t: int, clients: torch.Tensor | Sequence[int], *, epochs: int | None = None,
             steps: int | None = None, stream: int = streams.TRAIN_ORDER,
             limits: dict[int, int] | None = None, sizes: Sequence[int] | None = None,
             start: Sequence[int] | None = None) -> BatchPlan:
        """Local SGD batches of ``clients`` in round ``t``: ``epochs`` passes over each one's train split, or
        exactly ``steps`` batches; ``limits`` cuts some clients' work to their first so many batches; ``sizes``
        (one per client, in the order of ``clients``) trains on the first so many rows of each split only (FedFomo
        holds the rest out for validation); ``start`` (with ``steps``, one per client) continues each client's pass
        from the batch it reached, whatever the round (compute/plans.py ``stream_batches``: FedLAMA). Reference
        order unless ``cfg.shuffle`` (compute/plans.py). Plans that do not change from round to round are kept."""
        cfg = self.cfg
        ids = tuple(int(c) for c in (clients.cpu().tolist() if torch.is_tensor(clients) else clients))
        rows = tuple(int(self.data.train_sizes[c]) for c in ids) if sizes is None else tuple(int(n) for n in sizes)
        key = (ids, epochs, steps, stream, rows)
        cache = not cfg.shuffle and not limits and start is None
        if cache and key in self._plans:
            return self._plans[key]
        offs = self.data.train_offsets
        batches = []
        for i, (c, n) in enumerate(zip(ids, rows)):
            common = {"batch_size": cfg.batch_size, "drop_last": cfg.drop_last, "shuffle": cfg.shuffle,
                      "seed": cfg.seed, "client": int(self.ids[c]), "stream": stream}
            seq = plans.train_batches(n, int(offs[c]), t=t, epochs=epochs, steps=steps, **common) if start is None \
                else plans.stream_batches(n, int(offs[c]), start=int(start[i]), steps=steps, **common)
            batches.append(seq[:limits[c]] if limits and c in limits else seq)
        plan = BatchPlan.from_batches(batches, self.device, clients=ids)
        if cache:
            self._plans[key] = plan
        return plan

    def eval_plan(self, split: str) -> BatchPlan:
        key = ("eval", split)
        if key not in self._plans:
            d = self.data
            sizes, offs = (d.train_sizes, d.train_offsets) if split == "train" else (d.test_sizes, d.test_offsets)
            drop = self.cfg.batch_size if (self.cfg.eval_drop_last and split == "test") else None
            chunk = plans.forward_chunk(self.channels_last)
            self._plans[key] = BatchPlan.from_batches(plans.eval_batches(sizes, offs, drop_to=drop, chunk=chunk),
                                                      self.device)
        return self._plans[key]


class Round:
    """What a hook sees of round ``t`` — the only way it reaches the run.

    Read: ``t``, ``cfg``, ``model``, ``data``, ``global_params`` (G), ``local_params`` and ``local_buffers``
    (every client's, (N, *shape)), ``selected`` (this round's clients), ``state`` (the calling algorithm's own
    state, which it may update in place), ``ids`` (each row's client id in the run). Treat the parameter
    tensors as read-only: return changes instead.

    Services: :meth:`rng` (seeded generators), :meth:`models` (some clients' models), :meth:`weights` (FedAvg's
    n_i/Σn), :meth:`param_bytes`, :meth:`send_global`, :meth:`weighted_mean`, :meth:`plan` (batches),
    :meth:`train` (SGD through the run's backend), :meth:`run_steps` (any per-client step),
    :meth:`backend_for`, :meth:`evaluate` / :meth:`evaluate_batches`, :meth:`record` / :meth:`record_series`.
    """

    def __init__(self, setup: Setup, t: int, *, global_params: dict, local_params: dict, local_buffers: dict,
                 selected: torch.Tensor | None = None, state=None):
        self._setup, self.t = setup, t
        self.global_params, self.local_params, self.local_buffers = global_params, local_params, local_buffers
        self.selected = selected
        self.state = state
        self.records = []  # (kind, payload), flushed into the run's record
        # client -> seconds of its training calls (train, run_steps); a batched call (the vectorised backend)
        # shares its seconds among its clients by the rows each processed
        self.timings = {}

    def with_state(self, state) -> Round:
        """This round as a wrapped (inner) algorithm sees it: the same round (its subclass, records and timings
        shared), its own state."""
        r = copy.copy(self)
        r.state = state
        return r

    # -- facts -------------------------------------------------------------------------------------

    @property
    def cfg(self):
        return self._setup.cfg

    @property
    def model(self) -> nn.Module:
        return self._setup.model

    @property
    def data(self) -> FederatedData:
        return self._setup.data

    @property
    def device(self) -> torch.device:
        return self._setup.device

    @property
    def num_clients(self) -> int:
        return self._setup.num_clients

    @property
    def param_names(self) -> list[str]:
        return self._setup.param_names

    @property
    def everyone(self) -> torch.Tensor:
        """Every client this round holds: all N (on a Flower client, the client itself)."""
        return torch.arange(self.num_clients, device=self.device)

    @property
    def ids(self) -> np.ndarray:
        """The run's id of the client of each row (module docstring): what to record or keep about a client."""
        return self._setup.ids

    @property
    def tracked(self) -> frozenset[int]:
        """Clients (ids) whose per-client records (ALA's passes and weights…) the run keeps."""
        return self._setup.tracked

    def rng(self, client: int, purpose: int, *extra: int) -> np.random.Generator:
        """A generator of its own for (seed, this round, the id of the client of row ``client``, purpose, …): the
        same draw on any backend, after a resume and apart from the server. ``client`` = ``streams.SERVER`` for
        server-side draws; ``purpose`` a number of your own from 100 on (compute/rng.py lists those in use)."""
        who = client if client == streams.SERVER else int(self._setup.ids[client])
        return streams.generator(self.cfg.seed, self.t, who, purpose, *extra)

    def weights(self, clients: torch.Tensor) -> torch.Tensor:
        """FedAvg's weights n_i / Σ n of ``clients`` (n_i = train samples), float64 on the device."""
        n = torch.as_tensor(self._setup.train_sizes, dtype=torch.float64)[clients.cpu()]
        return (n / n.sum()).to(self.device)

    def param_bytes(self, names: Sequence[str] | None = None) -> int:
        """Bytes of these parameters (all when None): what sending them once costs."""
        return self._setup.param_bytes(names)

    def models(self, clients: torch.Tensor, params: dict | None = None, buffers: dict | None = None) -> dict:
        """A working copy of these clients' models: {"params": {…}, "buffers": {…}}, (A, *shape) tensors."""
        params = self.local_params if params is None else params
        buffers = self.local_buffers if buffers is None else buffers
        return {"params": {k: v[clients] for k, v in params.items()},
                "buffers": {k: v[clients] for k, v in buffers.items()}}

    # -- FedAvg's pieces, for any algorithm to call -----------------------------------------------

    def send_global(self, clients: torch.Tensor, names: Sequence[str] | None = None) -> Sent:
        """Every client in ``clients`` receives G (or only the parameters ``names``)."""
        names = self.param_names if names is None else list(names)
        return Sent({n: self.global_params[n] for n in names}, len(clients) * self.param_bytes(names))

    def weighted_mean(self, clients: torch.Tensor, names: Sequence[str] | None = None,
                      params: dict | None = None) -> Aggregated:
        """G = Σ_i (n_i / Σ n) θ_i over ``clients`` (their local models, or ``params`` (A, *shape) given in the
        order of ``clients``), for all parameters or ``names``; the upload of those parameters."""
        names = self.param_names if names is None else list(names)
        w = self.weights(clients).to(next(iter(self.global_params.values())).dtype)
        src = {n: self.local_params[n][clients] for n in names} if params is None else params
        return Aggregated({n: torch.tensordot(w, src[n], dims=1) for n in names},
                          len(clients) * self.param_bytes(names))

    # -- training and evaluation -------------------------------------------------------------------

    def plan(self, clients: torch.Tensor, *, epochs: int | None = None, steps: int | None = None,
             stream: int = streams.TRAIN_ORDER, limits: dict[int, int] | None = None,
             sizes: Sequence[int] | None = None, start: Sequence[int] | None = None) -> BatchPlan:
        """Local SGD batches of ``clients`` this round: ``epochs`` passes over each one's train split, or exactly
        ``steps`` batches; ``limits`` cuts some clients' work to their first so many batches; ``sizes`` trains
        on the first so many rows of each split only (FedFomo's validation rows); ``start`` continues each
        client's pass from the batch it reached (FedLAMA). A stream of your own (``stream=``) draws its own order
        when ``cfg.shuffle`` (:meth:`Setup.plan`)."""
        return self._setup.plan(self.t, clients, epochs=epochs, steps=steps, stream=stream, limits=limits,
                                sizes=sizes, start=start)

    def backend_for(self, num_params: int):
        """The backend that runs a per-client step through ``num_params`` parameters (:meth:`Setup.backend_for`:
        a small step may run vectorised where the model trains in worker processes)."""
        return self._setup.backend_for(num_params)

    def _add_times(self, clients, seconds: list | None) -> None:
        if seconds:
            ids = clients.cpu().tolist() if torch.is_tensor(clients) else list(clients)
            for c, s in zip(ids, seconds):
                self.timings[c] = self.timings.get(c, 0.0) + s

    def train(self, clients: torch.Tensor, plan: BatchPlan, *, start: dict | None = None, sgd: SGD | None = None,
              shared: dict | None = None, extra: dict | None = None) -> Trained:
        """SGD for ``clients`` along ``plan``: from their local models, or ``start`` ({"params", "buffers"},
        (A, *shape)); the run's SGD or ``sgd`` (another lr, an objective term, some parameters frozen).

        ``shared`` is what every client's step sees (default: {"global": G}, FedProx's anchor); ``extra`` adds
        per-client tensors (A, …) to each client's carry (a per-client anchor, read by an objective). It runs
        on the run's backend: worker processes on a CPU for large models, where the recipe pickles."""
        sgd = sgd or self._setup.sgd()
        carry = self.models(clients)
        if start is not None:
            carry = {"params": start["params"], "buffers": start.get("buffers") or carry["buffers"]}
        if extra:
            carry = {**carry, **extra}
        backend = self._setup.backend
        timings = []  # the backend's per-client seconds
        out, aux = backend.run(self._setup.step_for(sgd), carry,
                               {"global": self.global_params} if shared is None else shared, plan,
                               self.data.train_x, self.data.train_y, train=True, model=self.model, timings=timings)
        self._add_times(clients, timings)
        return Trained(out["params"], out.get("buffers", {}), aux[..., 0], plan.sizes > 0)

    def run_steps(self, step: Callable, carry: dict, plan: BatchPlan, shared: dict | None = None, *,
                  train: bool = True, split: str = "train", aux_size: int = 1, num_params: int | None = None):
        """Run any per-client ``step`` (compute/backends.py) over ``plan``'s batches of ``split``: on the loop or
        vectorised backend (by ``num_params`` the step runs through, default the whole model). Returns
        (carry, aux (A, K, aux_size)). Training steps count towards the plan's clients' :attr:`timings`."""
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.test_x, self.data.test_y)
        backend = self.backend_for(self._setup.num_params if num_params is None else num_params)
        timings = [] if train and plan.clients is not None else None  # per-client seconds, where clients are known
        out = backend.run(step, carry, shared or {}, plan, x, y, train=train, model=self.model, aux_size=aux_size,
                          timings=timings)
        self._add_times(plan.clients, timings)
        return out

    def evaluate(self, params: dict, buffers: dict, split: str = "test",
                 clients: torch.Tensor | None = None, *, auc: bool = False) -> dict[str, np.ndarray]:
        """Sum of losses, number correct and number of rows per client on its ``split``, of every client's model
        (``params``/``buffers``: (N, …)) or of ``clients``' only; with ``auc`` also each one's micro-averaged AUC
        (``"auc"``, a fraction: compute/metrics.py)."""
        plan = self._setup.eval_plan(split)
        if clients is not None:
            picked = self.models(clients, params, buffers)
            params, buffers = picked["params"], picked["buffers"]
            plan = plan.take(clients.cpu().numpy())
        return self.evaluate_batches(params, buffers, plan, split, auc=auc)

    def evaluate_batches(self, params: dict, buffers: dict, plan: BatchPlan, split: str = "train", *,
                         auc: bool = False) -> dict:
        """Sum of losses, number correct and number of rows of each model (one per row of ``params``/``buffers``)
        on the rows of ``split`` that its row of ``plan`` names (rows of your own: FedFomo's validation rows);
        ``auc`` as :meth:`evaluate` (the plan's chunks no wider than an evaluation chunk)."""
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.test_x, self.data.test_y)
        setup = self._setup
        if auc:
            return plans.evaluate(setup.backend, setup.score_step, self.model, params, buffers, x, y, plan,
                                  self.data.num_classes)
        return plans.evaluate(setup.backend, setup.eval_step, self.model, params, buffers, x, y, plan)

    # -- records -----------------------------------------------------------------------------------

    def record(self, table: str, rows: dict) -> None:
        """Append rows to the run's table ``table`` (``run.tables[table]``): column → one value or equal-length
        values. A per-client table should record the :attr:`tracked` clients only."""
        self.records.append(("table", table, rows))

    def record_series(self, name: str, clients: Sequence[int], tensors: dict[str, torch.Tensor]) -> None:
        """Keep, for each tracked client among ``clients`` (ids, :attr:`ids`), this round's ``tensors[k]`` row
        (A, *shape) as ``run.arrays[f"{name}/{client}/{k}"]`` (stacked over rounds, with ``f"{name}_rounds/{client}"``)."""
        self.records.append(("series", name, (list(clients), tensors)))


# --------------------------------------------------------------------------------------- algorithms


class Algorithm:
    """FedAvg (McMahan et al., AISTATS 2017), and the default of every hook: subclass it and override what
    your method changes. Built once per run from its :class:`Setup` (``self.setup``, ``self.cfg``)."""

    # Which clients initialise each round: every client (all are evaluated, as in the reference) or only
    # the selected ones.
    initialise_all: bool = True
    # SGD steps per round instead of cfg.local_epochs epochs (FedLAMA: τ0), None: the config decides.
    local_steps: int | None = None
    # Whether it runs with the clients and the server apart (Flower, engine/sides.py). None: decided from its
    # hooks (refused when a state of its own is read by both a server and a client hook); True: it runs
    # (its server hooks never read what its client hooks keep, pFedMe); a string: it cannot, for that reason.
    flower_split: bool | str | None = None

    def __init__(self, setup: Setup):
        self.setup = setup
        self.cfg = setup.cfg

    def init_state(self, setup: Setup):
        """What the algorithm carries from round to round (a dataclass of tensors, dicts, lists and numbers),
        made before round 1; None when it carries nothing."""
        return

    def downloads(self) -> list[str]:
        """The parameters a client receives when it receives everything it ever does (FedRep: the body)."""
        return list(self.setup.param_names)

    def select(self, rnd: Round) -> torch.Tensor:
        """This round's clients: ⌊ρ·N⌋ (at least one) without replacement, from the server's generator."""
        return draw_clients(self.cfg, rnd.t, rnd.num_clients, rnd.device)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """Local initialisation of ``clients``: overwrite the local model with G."""
        return rnd.send_global(clients)

    def personalise(self, rnd: Round) -> dict | None:
        """The models evaluated this round ({"params", "buffers"}, (N, …) each) instead of the local ones
        (None): a fine-tuned copy, a personal model…"""
        return None

    def objective(self):
        """An extra term of the local objective (compute/steps.py Objective), or None for plain cross-entropy."""
        return

    def local_train(self, rnd: Round, work: Work) -> Trained:
        """Local training of ``work.clients`` along ``work.plan``: SGD with :meth:`objective`'s term."""
        return rnd.train(work.clients, work.plan, sgd=self.setup.sgd(objective=self.objective()))

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """The server's update from the models of ``senders``: their mean weighted by train samples."""
        return rnd.weighted_mean(senders)

    def meta(self, state) -> dict:
        """Entries this algorithm adds to ``run.meta`` at the end of a run (e.g. ALA's capped clients)."""
        return {}


def draw_clients(cfg, t: int, n: int, device) -> torch.Tensor:
    """⌊ρ·N⌋ clients (at least one) of round ``t`` without replacement, sorted; all of them when ρ = 1."""
    k = max(1, int(cfg.join_ratio * n))
    ids = np.arange(n) if k == n else np.sort(
        streams.generator(cfg.seed, t, streams.SERVER, streams.SELECT).choice(n, size=k, replace=False))
    return torch.as_tensor(ids, device=device)


class Wrapper(Algorithm):
    """An algorithm around another (a modifier: ``+ala``, ``-c``): every hook is the inner one's, seen with
    the inner state, until a subclass overrides it. A wrapper with a state of its own keeps the inner state in
    its ``inner`` field (override :meth:`own_state`); one without passes the inner state through."""

    def __init__(self, inner: Algorithm, setup: Setup):
        super().__init__(setup)
        self.inner = inner
        self.initialise_all = inner.initialise_all
        self.local_steps = inner.local_steps

    # True for a wrapper with a state of its own, a dataclass whose ``inner`` field holds the inner state
    has_own_state = False

    def own_state(self, setup: Setup, inner_state):
        """This wrapper's state around ``inner_state`` (a wrapper without one passes the inner state on)."""
        return inner_state

    def inner_state(self, state):
        return state.inner if self.has_own_state else state

    def inner_round(self, rnd: Round) -> Round:
        return rnd.with_state(self.inner_state(rnd.state))

    def init_state(self, setup: Setup):
        return self.own_state(setup, self.inner.init_state(setup))

    def downloads(self) -> list[str]:
        return self.inner.downloads()

    def select(self, rnd):
        return self.inner.select(self.inner_round(rnd))

    def initialise(self, rnd, clients):
        return self.inner.initialise(self.inner_round(rnd), clients)

    def personalise(self, rnd):
        return self.inner.personalise(self.inner_round(rnd))

    def objective(self):
        return self.inner.objective()

    def local_train(self, rnd, work):
        return self.inner.local_train(self.inner_round(rnd), work)

    def aggregate(self, rnd, senders):
        return self.inner.aggregate(self.inner_round(rnd), senders)

    def meta(self, state) -> dict:
        return self.inner.meta(self.inner_state(state))


# ------------------------------------------------------------------------------------------ states


def state_to_dict(state):
    """A state (a dataclass or a dict of tensors, lists, numbers, nested) as plain dicts of tensors and
    primitives, which ``torch.load(weights_only=True)`` reads back (None stays None)."""
    return _to_plain(state)


def state_from_dict(template, d):
    """Fill a fresh state (``init_state``'s) with the values of :func:`state_to_dict`, on its devices.

    Raises ValueError when ``d`` does not have the template's fields (another algorithm's state).
    """
    if (template is None) != (d is None):
        raise ValueError("checkpoint holds another algorithm's state")
    return _from_plain(template, d)


def _to_plain(v):
    if dataclasses.is_dataclass(v):
        return {f.name: _to_plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, list):
        return [_to_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _to_plain(x) for k, x in v.items()}
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    return v


def _from_plain(template, v):
    if dataclasses.is_dataclass(template):
        names = [f.name for f in dataclasses.fields(template)]
        if not isinstance(v, dict) or sorted(names) != sorted(v):
            raise ValueError(f"checkpoint state has fields {sorted(v) if isinstance(v, dict) else v!r}, "
                             f"expected {sorted(names)}")
        return dataclasses.replace(template, **{n: _from_plain(getattr(template, n), v[n]) for n in names})
    if template is None:
        if v is not None:
            raise ValueError("checkpoint state holds a value where this algorithm keeps none")
        return None
    if isinstance(template, list) and template and isinstance(template[0], torch.Tensor):
        return [_from_plain(template[0], x) for x in v]
    if isinstance(template, dict):
        if not isinstance(v, dict) or sorted(template) != sorted(v):
            raise ValueError(f"checkpoint state has keys {sorted(v)}, expected {sorted(template)}")
        return {k: _from_plain(template[k], v[k]) for k in template}
    if isinstance(template, torch.Tensor):
        return v.to(template.device)
    return v


__all__ = ["Aggregated", "Algorithm", "Round", "Sent", "Setup", "Trained", "Work", "Wrapper", "draw_clients",
           "resolve_backend", "state_from_dict", "state_to_dict"]
