"""ALA: Adaptive Local Aggregation (FedALA, Zhang et al., AAAI 2023), as docs/design.md#ala describes it.

For client i in round t, with its old local model L = Θ_i^{t-1} and the received global model G:

    Θ̂ = L + (G − L) ⊙ [1 for the lower layers ; W for the p top blocks]           (Eq. 4)
    W ← clip_[0,1]( W − η · ∂ℓ/∂Θ̂_high ⊙ (G − L)_high )                           (Eq. 5, App. A)

W holds one weight per parameter of the top p blocks, starts at all ones and is carried from round to
round. Only W learns; ℓ is cross-entropy on a window of s % of the client's train split. Local training
then starts from Θ̂.

Three layers, top to bottom:

- :class:`ALAPieces`: ALA as the local initialisation of a simulated run (FedALA, "+ala" on any method);
  ``ala_initialise`` is Algorithm 1, lines 3–10 of the paper; its state is :class:`ALAState`;
- :class:`ALA`: the drop-in — ALA on any PyTorch model and one client's data, in anyone's training loop
  (the reference's ``ALA`` class);
- :class:`WeightLearner`: the math both use — Eq. 5 for A clients at once, each on its own window.

Matching the public reference code (FedALA / PFLlib ``ALA.py``):

- round 1 is skipped (every local model equals the global one); the reference detects it by comparing the
  first parameter tensors, the engine by the round number, the drop-in by comparing the models;
- the s % sample is one contiguous window of the client's train split at a random offset
  (``randint(0, n − ⌊s·n⌋)``), walked in order in batches of the local batch size, last partial batch kept;
- W is updated after every batch and Θ̂ rebuilt from L, G, W;
- start phase (the client's first ALA, normally round 2): passes repeat until more than ``num_pre_loss``
  pass losses exist and the std of the last ``num_pre_loss`` is below ``threshold``, where a pass's loss
  is the loss of its LAST batch; later rounds make exactly one pass;
- ALA runs for every client every round (all clients are evaluated), not only the selected ones.

Departures, each an option with the reference available:

- ``max_start_epochs`` caps the start phase (the reference loops forever when the threshold is never met);
  clients that hit the cap are recorded in ``run.meta["capped_clients"]`` and reported;
- ``ala_all_clients=False`` runs ALA for the selected clients only; ``ala_after=K`` keeps plain FedAvg
  initialisation for rounds ≤ K (the paper's Fig. 4 protocol);
- a client whose window is empty (s % of a tiny split rounds to 0 samples; the reference crashes) skips
  weight learning and blends with its current W;
- when the blocks below the top p hold no batch norm or dropout, their output on the window is the same
  for every batch and pass (they are G's, frozen): we compute those features once per round and learn W on
  the head alone. This is exact, not an approximation (docs/design.md#performance: weights agree to 3e-7).
  Those head-only steps are small, so they run vectorised over clients whenever the run's backend is
  "auto", even where a large model trains a client at a time.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from ..compute.backends import BatchPlan, LoopBackend
from ..compute.parallel import forward_threads, thread_map
from ..compute.rng import ALA_WINDOW, generator
from ..compute.steps import weighted_ce
from ..config import RunConfig
from ..models import BlockNet, ala_param_names, top_block_start
from .base import Algorithm
from .fedavg import receive_global

_STATEFUL = (nn.modules.batchnorm._BatchNorm, nn.Dropout)


# -- the math ---------------------------------------------------------------------------------------


def blend(local: torch.Tensor, glob: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Eq. 4 for one tensor: L + (G − L) ⊙ W."""
    return local + (glob - local) * weight


def make_ala_step(model: nn.Module, eta: float, head_start: int):
    """One weight-learning step of Eq. 5 for one client, on one batch.

    carry: ``w`` (W), ``l`` (L's top-block params), ``buffers`` (scratch buffers);
    shared: ``g`` (G's top-block params), ``lower`` (G's lower params; empty when features are cached).
    ``head_start`` > 0: ``x`` holds the features of the blocks below it (a BlockNet runs from there).
    """
    kwargs = {"start": head_start} if head_start else {}

    def loss_fn(theta_high, lower, buffers, x, y, mask):
        out = functional_call(model, ({**lower, **theta_high}, buffers), (x,), kwargs)
        return weighted_ce(out, y, mask)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, mask):
        w, local, glob = carry["w"], carry["l"], shared["g"]
        theta = {n: blend(local[n], glob[n], w[n]) for n in w}
        grads, loss = g_and_v(theta, shared["lower"], carry["buffers"], x, y, mask)
        new_w = {n: torch.clamp(w[n] - eta * grads[n] * (glob[n] - local[n]), 0, 1) for n in w}
        return {"w": new_w}, loss.reshape(1)

    return step


def window(n: int, s: float, seed: int, t: int, client: int) -> np.ndarray:
    """The reference's s % sample of a client's n train rows in round t: ⌊s·n⌋ contiguous rows at an
    offset drawn from the stream (seed, t, client, ALA_WINDOW)."""
    m = int(s / 100 * n)
    offset = int(generator(seed, t, client, ALA_WINDOW).integers(0, n - m + 1))
    return offset + np.arange(m)


@dataclass
class Learned:
    """What learning W gave for A clients."""

    weights: dict[str, torch.Tensor]  # name -> (A, *shape): W after learning
    passes: list[list[tuple[float, float]]]  # per client, per pass: (loss of its last batch, mean loss)
    capped: np.ndarray  # (A,) bool: the start phase hit max_start_epochs without converging


class WeightLearner:
    """Eq. 5 for A clients at once, each on its own window of rows: the core of both ALA's uses.

    Which parameters get weights: ``names`` if given, else those of the top ``p`` blocks (for a
    :class:`~fedala_lab.models.BlockNet` its blocks; for any other module its top-level children that
    hold parameters, the last registered on top). Every other parameter is G's during learning.

    An ``nn.Sequential`` (a BlockNet is one) runs block after block, so when its blocks below the
    weighted ones hold no batch norm or dropout, their output is computed once (:meth:`features`) and
    every step runs the top blocks alone (``cached``). Any other module runs whole at every step.
    """

    def __init__(self, model: nn.Module, *, p: int | None = None, names=None, eta: float, batch_size: int,
                 threshold: float, num_pre_loss: int, max_start_epochs: int):
        self.eta, self.batch_size, self.threshold = eta, batch_size, threshold
        self.num_pre_loss, self.max_start_epochs = num_pre_loss, max_start_epochs
        params = dict(model.named_parameters())
        self.names = ala_param_names(model, p) if names is None else [k for k in params if k in set(names)]
        if names is not None and len(self.names) != len(set(names)):
            raise ValueError(f"not parameters of the model: {sorted(set(names) - set(params))}")
        self.lower = [k for k in params if k not in set(self.names)]
        blocks = list(model.named_children())
        start = _split_at(model, blocks, p, self.names)
        below = [m for _, b in blocks[:start] for m in b.modules()]
        self.cached = start > 0 and not any(isinstance(m, _STATEFUL) for m in below)
        self.start = start if self.cached else 0  # the first block a step runs
        # a BlockNet runs a range of its blocks (forward(x, start=, stop=)); an nn.Sequential gets such a view
        self.model = BlockNet(OrderedDict(blocks)) if self.cached and not isinstance(model, BlockNet) else model
        head = {n for n, _ in blocks[self.start:]}
        self.buffer_names = [k for k, _ in model.named_buffers()
                             if not self.cached or k.split(".", 1)[0] in head]
        # the parameters a step runs through: what decides how its steps are best run over clients
        self.step_params = sum(params[k].numel() for k in (self.names if self.cached else params))
        self.step = make_ala_step(self.model, eta, self.start)

    def learn(self, weights: dict, local: dict, glob: dict, x: torch.Tensor, y: torch.Tensor, lengths,
              start_phase: np.ndarray, *, buffers: dict, backend) -> Learned:
        """Learn W for A clients: client i's window is the next ``lengths[i]`` rows of ``x``, ``y``.

        ``weights``, ``local``: W and L of the weighted parameters, (A, *shape) each; ``glob``: G's
        parameters (all); ``start_phase``: (A,) bool, those clients pass until converged or capped, the
        others once; ``buffers``: the clients' buffers (A, …), of which steps use scratch copies;
        ``backend``: runs the steps (the loop or the vectorised one, compute/backends.py).
        """
        if self.cached:
            x = self.features(glob, x)
        plan = self.plan(lengths, x.device)
        carry = {"w": weights, "l": local, "buffers": {k: buffers[k] for k in self.buffer_names}}
        shared = {"g": {n: glob[n] for n in self.names},
                  "lower": {} if self.cached else {n: glob[n] for n in self.lower}}
        passes: list[list[tuple[float, float]]] = [[] for _ in lengths]
        active = np.asarray(lengths) > 0
        capped = np.zeros(len(lengths), dtype=bool)
        epoch = 0
        while active.any():
            act = np.flatnonzero(active)
            idx = torch.as_tensor(act, device=x.device)
            sub, aux = backend.run(self.step, _take(carry, idx), shared, plan.take(act), x, y, train=True,
                                   model=self.model)
            _put(carry, idx, sub)
            epoch += 1
            for j, i in enumerate(act):
                k = int(plan.num_steps[i])
                passes[i].append((float(aux[j, k - 1, 0]), float(np.nanmean(aux[j, :k, 0]))))
                last = [loss for loss, _ in passes[i]]
                if not start_phase[i]:
                    active[i] = False  # after the start phase: exactly one pass
                elif len(last) > self.num_pre_loss and np.std(last[-self.num_pre_loss:]) < self.threshold:
                    active[i] = False  # converged
                elif epoch >= self.max_start_epochs:
                    active[i], capped[i] = False, True
        return Learned(carry["w"], passes, capped)

    def plan(self, lengths, device) -> BatchPlan:
        """Each window walked in order in batches of ``batch_size`` rows, the last partial batch kept."""
        b = self.batch_size
        ends = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return BatchPlan.from_batches([[np.arange(a + j, min(a + j + b, e)) for j in range(0, e - a, b)]
                                       for a, e in itertools.pairwise(ends)], device)

    def features(self, glob: dict, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """Output of the blocks below the weighted ones with G's parameters (no grad), in chunks of rows.

        The chunk changes only the speed, not a float (a conv's output per row does not depend on the
        rows beside it): 256 rows keep a conv's activations in cache, 22 % faster than 1,024 on the MNIST
        CNN on one CPU thread. On a CPU the chunks are shared out among threads (compute/parallel.py), each
        computed exactly as in one thread."""
        buffers = dict(self.model.named_buffers())
        self.model.eval()

        def chunk_out(i: int, model: nn.Module) -> torch.Tensor:
            return functional_call(model, (glob, buffers), (x[i:i + chunk],), {"stop": self.start})

        outs = thread_map(chunk_out, range(0, len(x), chunk), threads=forward_threads(x.device), ctx=self.model,
                          per_thread=lambda: copy.deepcopy(self.model))
        return torch.cat(outs) if outs else x.new_zeros((0,))


def _split_at(model: nn.Module, blocks, p: int | None, names: list[str]) -> int:
    """Index of the lowest child a step must run when the children above it hold exactly ``names`` (0 when
    no such split exists, or the module does not run its children in order)."""
    if not isinstance(model, nn.Sequential) or not names:
        return 0
    if p is not None:
        return top_block_start(model, p)
    owner = [n for n, _ in blocks]
    first = min((owner.index(k.split(".", 1)[0]) for k in names if k.split(".", 1)[0] in owner), default=0)
    above = [k for k, _ in model.named_parameters() if k.split(".", 1)[0] in set(owner[first:])]
    return first if sorted(above) == sorted(names) else 0


def _take(tree: dict, idx: torch.Tensor) -> dict:
    return {k: _take(v, idx) if isinstance(v, dict) else v.index_select(0, idx) for k, v in tree.items()}


def _put(tree: dict, idx: torch.Tensor, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict):
            _put(tree[k], idx, v)
        else:
            tree[k].index_copy_(0, idx, v)


# -- the drop-in ------------------------------------------------------------------------------------


class ALA:
    """ALA on any PyTorch model, for one client, inside your own training loop.

        from fedala_lab.algorithms.ala import ALA

        ala = ALA(model, x_train, y_train, p=1, eta=1.0, s=80, batch_size=10)
        for t in range(rounds):
            global_model = receive_from_server()
            ala(local_model, global_model)    # local_model ← Θ̂ = L + (G − L) ⊙ [1; W], in place
            train(local_model)

    ``model`` is a template of the architecture (its values are not used; ALA keeps a copy), or a list of
    the parameter names to weight, the template then being the first ``nn.Module`` a call receives.
    Weighted are the parameters named in ``params`` (or in that list), else the top ``p`` blocks: for a
    :class:`~fedala_lab.models.BlockNet` its blocks, as everywhere in fedala_lab; for any other module its
    top-level children that hold parameters, the last registered on top (an ``nn.Sequential``'s last
    layers). Every other parameter is overwritten with G's.

    ``ala(local, glob)`` takes ``nn.Module``\\ s or state dicts, returns Θ̂ as a state dict (``local``'s
    buffers kept) and writes it into ``local`` when that is a module. A call that finds every parameter of
    ``local`` equal to ``glob``'s (round 1) changes nothing. Otherwise it learns W on a window of s % of
    ``(x_train, y_train)`` (contiguous, at a random offset): the first learning call (the start phase)
    passes until the std of the last ``num_pre_loss`` pass losses is below ``threshold`` (at most
    ``max_start_epochs`` passes), later calls pass once. W is kept from call to call.

    Call k draws its window as a simulation draws client ``client``'s in round k of a run with ``seed``:
    called once a round from round 1, the drop-in computes what the engine does for that client.

    After a call: ``weights`` ({name: W}), ``losses`` (each pass's loss, that of its last batch),
    ``start_phase`` (True until a call has learned), ``capped`` (the start phase hit the cap), ``round``.
    The steps run one batch at a time (the loop backend), so any module works, dropout included.
    """

    def __init__(self, model, x_train: torch.Tensor, y_train: torch.Tensor, *, p: int = 1, params=None,
                 eta: float = 1.0, s: float = 80.0, batch_size: int = 10, threshold: float = 0.1,
                 num_pre_loss: int = 10, max_start_epochs: int = 50, seed: int = 0, client: int = 0):
        if not isinstance(model, nn.Module):
            model, params = None, list(model)
        self.x, self.y = x_train, y_train
        self.s, self.seed, self.client = s, seed, client
        self._settings = {"p": None if params is not None else p, "names": params, "eta": eta,
                          "batch_size": batch_size, "threshold": threshold, "num_pre_loss": num_pre_loss,
                          "max_start_epochs": max_start_epochs}
        self.learner = self._learner(model) if model is not None else None
        self.weights: dict[str, torch.Tensor] | None = None
        self.losses: list[float] = []
        self.start_phase, self.capped, self.round = True, False, 0

    def _learner(self, template: nn.Module) -> WeightLearner:
        model = copy.deepcopy(template).requires_grad_(False)
        return WeightLearner(model, **self._settings)

    def __call__(self, local, glob) -> dict[str, torch.Tensor]:
        self.round += 1
        if self.learner is None:
            template = next((m for m in (local, glob) if isinstance(m, nn.Module)), None)
            if template is None:
                raise TypeError("ALA was given parameter names, not a model: pass an nn.Module at least once")
            self.learner = self._learner(template)
        lr = self.learner
        loc, g = _tensors(local), _tensors(glob)
        self.losses = []
        if all(torch.equal(loc[k], g[k]) for k in (*lr.names, *lr.lower)):
            return dict(loc)  # nothing to blend: Θ̂ = L = G
        if self.weights is None:
            self.weights = {n: torch.ones_like(g[n]) for n in lr.names}
        rows = torch.as_tensor(window(len(self.x), self.s, self.seed, self.round, self.client))
        device = g[lr.names[0]].device
        learned = lr.learn(_one(self.weights, lr.names), _one(loc, lr.names), g, self.x[rows].to(device),
                           self.y[rows].to(device), [len(rows)], np.array([self.start_phase]),
                           buffers=_one(loc, lr.buffer_names), backend=LoopBackend())
        self.weights = {n: w[0] for n, w in learned.weights.items()}
        self.losses = [loss for loss, _ in learned.passes[0]]
        self.capped, self.start_phase = bool(learned.capped[0]), False
        new = {**loc, **{k: g[k].clone() for k in lr.lower},
               **{n: blend(loc[n], g[n], self.weights[n]) for n in lr.names}}
        if isinstance(local, nn.Module):
            with torch.no_grad():
                for k, prm in local.named_parameters():
                    prm.copy_(new[k])
        return new


def _one(tensors: dict, keys) -> dict[str, torch.Tensor]:
    """Copies of these tensors as a batch of one client (1, *shape)."""
    return {k: tensors[k][None].clone() for k in keys}


def _tensors(m) -> dict[str, torch.Tensor]:
    """A module's parameters and buffers, or a state dict's tensors, detached (no copies)."""
    items = m.state_dict(keep_vars=True).items() if isinstance(m, nn.Module) else m.items()
    return {k: v.detach() for k, v in items}


# -- on the engine's round loop ---------------------------------------------------------------------


@dataclass
class ALAState:
    """What ALA carries from round to round, for every client."""

    weights: dict[str, torch.Tensor]  # name -> (N, *shape): W, one weight per parameter of the top p blocks
    started: torch.Tensor  # (N,) bool: the client's start phase is behind it
    capped: list[int]  # clients whose start phase hit max_start_epochs, in the order they did


class ALAPieces:
    """ALA as the local initialisation of one simulated run (FedALA, or "+ala" on any method).

    Built for the run's model: which parameters get weights and how their steps run are fixed here; what
    changes from round to round is the :class:`ALAState` the engine holds for the algorithm.
    """

    def __init__(self, cfg: RunConfig, model: nn.Module):
        self.cfg = cfg
        self.learner = WeightLearner(model, p=cfg.p, eta=cfg.eta, batch_size=cfg.batch_size,
                                     threshold=cfg.threshold, num_pre_loss=cfg.num_pre_loss,
                                     max_start_epochs=cfg.max_start_epochs)
        self.names, self.lower = self.learner.names, self.learner.lower

    def on(self, algo: Algorithm) -> Algorithm:
        """``algo`` with ALA as its local initialisation; the run's state is then ALA's."""
        def initialise(sim, t: int, clients: torch.Tensor) -> int:
            return self.ala_initialise(sim, t, clients, sim.state)

        return dataclasses.replace(algo, initialise=initialise, init_state=self.init_state,
                                   initialise_all=self.cfg.ala_all_clients, meta=self.meta)

    def init_state(self, sim) -> ALAState:
        """W = 1 for the top-p parameters of every client; no client has had its start phase yet."""
        return ALAState(weights={n: torch.ones_like(sim.local_params[n]) for n in self.names},
                        started=torch.zeros(sim.num_clients, dtype=torch.bool, device=sim.device), capped=[])

    def meta(self, state: ALAState) -> dict:
        """run.meta's ALA entries: the weighted parameters (run.ala_weights reads them) and capped clients."""
        return {"ala_params": list(self.names), "capped_clients": list(state.capped)}

    def skips(self, t: int) -> bool:
        """Rounds that receive G as it is: round 1 (every local model equals G) and rounds ≤ ala_after."""
        return t == 1 or t <= self.cfg.ala_after

    def ala_initialise(self, sim, t: int, clients: torch.Tensor, state: ALAState) -> int:
        """Local initialisation by ALA for ``clients`` (Algorithm 1, lines 3–10 of the paper)."""
        if self.skips(t):
            return receive_global(sim, t, clients)
        receive_global(sim, t, clients, names=self.lower)  # Eq. 4's "1": the lower layers are G's
        ids = clients.cpu().numpy()
        x, y, lengths = self.windows(sim, t, ids)  # s % of each client's train split
        local = {n: sim.local_params[n][clients] for n in self.names}  # L of the top blocks
        start_phase = ~state.started[clients].cpu().numpy()
        # W: the start phase passes until converged (or capped), later rounds pass once (Eq. 5)
        learned = self.learner.learn({n: w[clients] for n, w in state.weights.items()}, local,
                                     sim.global_params, x, y, lengths, start_phase,
                                     buffers={k: b[clients] for k, b in sim.local_buffers.items()},
                                     backend=sim.backend_for(self.learner.step_params))
        for n in self.names:  # Θ̂ = L + (G − L) ⊙ W on the top blocks (Eq. 4), and W kept for next round
            sim.local_params[n][clients] = blend(local[n], sim.global_params[n], learned.weights[n])
            state.weights[n][clients] = learned.weights[n]
        state.started[clients] = True
        self.record(sim, t, ids, learned, start_phase, state)
        return len(clients) * sim.param_bytes(sim.param_names)

    def windows(self, sim, t: int, ids: np.ndarray):
        """The clients' windows one after another: rows x, y of the train data, and each window's length."""
        cfg = self.cfg
        rows = [int(sim.train_offsets[c]) + window(int(sim.train_sizes[c]), cfg.s, cfg.seed, t, int(c))
                for c in ids]
        idx = torch.as_tensor(np.concatenate(rows) if rows else np.zeros(0, np.int64), device=sim.device)
        return sim.data.train_x[idx], sim.data.train_y[idx], [len(r) for r in rows]

    def record(self, sim, t: int, ids: np.ndarray, learned: Learned, start_phase: np.ndarray,
               state: ALAState) -> None:
        """Each pass (run.ala, pass by pass across clients, as they ran), W (run.arrays) and the clients
        newly capped (run.meta, with a warning)."""
        for e in range(max((len(p) for p in learned.passes), default=0)):
            for i, c in enumerate(ids.tolist()):
                if e < len(learned.passes[i]):
                    last = e == len(learned.passes[i]) - 1
                    sim.recorder.ala_pass(t, c, e + 1, *learned.passes[i][e], start_phase=start_phase[i],
                                          capped=learned.capped[i] and last)
        sim.recorder.ala_weights(t, ids, learned.weights)
        new = [c for c in ids[learned.capped].tolist() if c not in state.capped]
        state.capped.extend(new)
        if new:
            warnings.warn(f"round {t}: ALA start phase of client(s) {new} hit max_start_epochs="
                          f"{self.cfg.max_start_epochs} without converging (threshold={self.cfg.threshold}); "
                          "they continue with the weights learned so far", stacklevel=4)

    def blend_received(self, sim, t: int, clients: torch.Tensor, names: list[str], state: ALAState) -> int:
        """Receive only the layers ``names`` (FedLAMA mid-window): the lower ones overwrite, those in the top
        blocks are blended with the client's current W (Eq. 4, W not learned this round)."""
        if self.skips(t):
            return receive_global(sim, t, clients, names=names)
        top = set(self.names)
        receive_global(sim, t, clients, names=[n for n in names if n not in top])
        for n in names:
            if n in top:
                sim.local_params[n][clients] = blend(sim.local_params[n][clients], sim.global_params[n],
                                                     state.weights[n][clients])
        return len(clients) * sim.param_bytes(names)
