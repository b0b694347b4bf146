"""ALA: Adaptive Local Aggregation (FedALA, Zhang et al., AAAI 2023). For client i in round t, with its old
local model L = Θ_i^{t-1} and the received global model G:

    Θ̂ = L + (G − L) ⊙ [1 for the lower layers ; W for the p top blocks]           (Eq. 4)
    W ← clip_[0,1]( W − η · ∂ℓ/∂Θ̂_high ⊙ (G − L)_high )                           (Eq. 5, App. A)

W (one weight per parameter of the top p blocks, starting at ones) is carried from round to round; ℓ is
cross-entropy on a window of s % of the client's train split; local training starts from Θ̂. How it matches
the public reference (FedALA / PFLlib ``ALA.py``), its departures, and ALA on another method:
docs/design.md#ala.

Three layers, top to bottom: :class:`WithALA`, the ``+ala`` modifier (its state :class:`ALAState`);
:class:`ALA`, the drop-in for anyone's training loop (the reference's class); :class:`WeightLearner`, Eq. 5
for A clients at once, each on its own window.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from ..compute import batched
from ..compute.backends import BatchPlan, LoopBackend, nhwc
from ..compute.parallel import forward_threads, thread_map
from ..compute.plans import forward_chunk
from ..compute.rng import ALA_WINDOW, generator
from ..compute.steps import weighted_ce
from ..models import BlockNet, ala_param_names, layer_blocks
from ..params import Bool, Float, Int, Param
from .base import Algorithm, Round, Sent, Setup, Wrapper
from .registry import Look, Modifier

_STATEFUL = (nn.modules.batchnorm._BatchNorm, nn.Dropout)

# ALA's hyper-parameters (docs/design.md#ala); they enter the run key of every "+ala" algorithm.
PARAMS = (
    Param("eta", 1.0, Float(0, lo_open=True), "ALA: learning rate η of the weights W", short="η"),
    Param("s", 80.0, Float(0, 100, lo_open=True), "ALA: percent of the client's train split W learns on", short="s"),
    Param("p", 1, Int(1), "ALA: number of top blocks (layers) with learned weights; the reference's layer_idx "
          "counts parameter tensors instead (layer_idx=2 is p=1 on the 4-layer CNN)", short="p"),
    Param("threshold", 0.1, Float(0, lo_open=True), "ALA start phase: stop when the std of the last "
          "num_pre_loss pass losses is below it (code default 0.1; the paper used 0.01)"),
    Param("num_pre_loss", 10, Int(1), "ALA start phase: how many pass losses the convergence test looks at"),
    Param("max_start_epochs", 50, Int(1, 100_000), "ALA start phase: cap on passes (the reference has none and "
          "can hang); clients that hit it are reported"),
    Param("ala_all_clients", True, Bool(), "ALA for every client each round (the reference: all are evaluated); "
          "false: the selected ones only"),
    Param("ala_after", 0, Int(0, 100_000), "ALA is off (the method's own initialisation) while round <= ala_after "
          "(Fig. 4 protocol: K = 155)", short="ALA after round {}"),
)
# run.tables["ala"]: a row per weight-learning pass of a tracked client (record/run.py reads them from here)
ALA_COLUMNS = ["round", "client", "epoch", "loss", "loss_mean", "start_phase", "capped"]


# -- the math ---------------------------------------------------------------------------------------


def blend(local: torch.Tensor, glob: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Eq. 4 for one tensor: L + (G − L) ⊙ W."""
    return local + (glob - local) * weight


def make_ala_step(model: nn.Module, eta: float, head_start: int, loss=None):
    """One weight-learning step of Eq. 5 for one client, on one batch.

    carry: ``w`` (W), ``l`` (L's weighted params), ``k`` (L's params that are never received), ``buffers``,
    and, when each client received its own model, ``g`` and ``lower``; shared: ``g`` (G's weighted params)
    and ``lower`` (G's other received params; empty when features are cached). ``head_start`` > 0: ``x``
    holds the features of the blocks below it (a BlockNet runs from there). ``loss(out, y)``: the criterion
    (default: cross-entropy over the batch's real rows).
    """
    kwargs = {"start": head_start} if head_start else {}

    def loss_fn(theta_high, rest, buffers, x, y, mask):
        out = functional_call(model, ({**rest, **theta_high}, buffers), (x,), kwargs)
        return weighted_ce(out, y, mask) if loss is None else loss(out, y)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, mask):
        w, local = carry["w"], carry["l"]
        glob = carry["g"] if "g" in carry else shared["g"]
        lower = carry["lower"] if "lower" in carry else shared["lower"]
        theta = {n: blend(local[n], glob[n], w[n]) for n in w}
        grads, value = g_and_v(theta, {**lower, **carry.get("k", {})}, carry["buffers"], x, y, mask)
        new_w = {n: torch.clamp(w[n] - eta * grads[n] * (glob[n] - local[n]), 0, 1) for n in w}
        return {"w": new_w}, value.reshape(1)

    step.graphable = True  # no host sync, no data-dependent control flow (compute/backends.py, graphs)
    if loss is None and batched.batchable(model):
        step.batched = _batched_ala_step(model, eta, head_start)
    return step


def _batched_ala_step(model: nn.Module, eta: float, head_start: int):
    """:func:`make_ala_step` for A clients at once (compute/batched.py): autograd of the sum of their losses
    with respect to their Θ̂ (a Linear/ReLU head: its backward pass written out, batched.gradients), G's
    parameters broadcast to every client where all share one G."""
    layers = batched.chain(model, head_start)

    def step(carry, shared, x, y, mask):
        w, local = carry["w"], carry["l"]
        glob = carry["g"] if "g" in carry else shared["g"]
        lower = carry["lower"] if "lower" in carry else shared["lower"]
        a = x.shape[0]
        rest = lower if "lower" in carry else {n: v.expand(a, *v.shape) for n, v in lower.items()}
        theta = {n: blend(local[n], glob[n], w[n]) for n in w}
        if layers is not None:
            losses, grads = batched.gradients(layers, {**rest, **carry.get("k", {}), **theta}, list(theta), x, y,
                                              mask)
        else:
            with torch.enable_grad():
                theta = {n: v.requires_grad_(True) for n, v in theta.items()}
                out = batched.forward(model, {**rest, **carry.get("k", {}), **theta}, x, start=head_start)
                losses = batched.client_losses(out, y, mask)
                grads = dict(zip(theta, torch.autograd.grad(losses.sum(), list(theta.values()))))
        new_w = {n: torch.clamp(w[n] - eta * grads[n] * (glob[n] - local[n]), 0, 1) for n in w}
        return {"w": new_w}, losses.detach().unsqueeze(1)

    return step


def window_size(n: int, s: float) -> int:
    """The number of rows in ALA's window of a client's n train rows: ⌊s % · n⌋ (the reference's)."""
    return int(s / 100 * n)


def window(n: int, s: float, seed: int, t: int, client: int) -> np.ndarray:
    """The reference's s % sample of a client's n train rows in round t: :func:`window_size` contiguous rows
    at an offset drawn from the stream (seed, t, client, ALA_WINDOW)."""
    m = window_size(n, s)
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

    The model's parameters fall in three groups: the weighted ones (``names``: those of ``names`` if given,
    else of the top ``p`` blocks among the ``received`` parameters — for a :class:`~fedala_lab.models.BlockNet`
    its blocks, for any other module its top-level children that hold parameters, the last registered on top),
    the other received ones (``lower``: G's during learning) and those never received (``kept``: the client's
    own, L's).

    An ``nn.Sequential`` (a BlockNet is one) runs block after block, so when the blocks below the weighted and
    kept ones hold only lower parameters and no batch norm or dropout, their output is computed once
    (:meth:`features`) and every step runs the top blocks alone (``cached``). Any other module runs whole at
    every step.
    """

    def __init__(self, model: nn.Module, *, p: int | None = None, names=None, received=None, eta: float,
                 batch_size: int, threshold: float, num_pre_loss: int, max_start_epochs: int, loss=None,
                 channels_last: bool = False):
        self.eta, self.batch_size, self.threshold = eta, batch_size, threshold
        self.channels_last = channels_last  # the feature pass's images and conv weights in that format
        self.num_pre_loss, self.max_start_epochs = num_pre_loss, max_start_epochs
        params = dict(model.named_parameters())
        received = list(params) if received is None else [k for k in params if k in set(received)]
        if names is None:
            self.names = ala_param_names(model, p, among=received)
        else:
            self.names = [k for k in params if k in set(names)]
            if len(self.names) != len(set(names)):
                raise ValueError(f"not parameters of the model: {sorted(set(names) - set(params))}")
        self.lower = [k for k in received if k not in set(self.names)]
        self.kept = [k for k in params if k not in set(received)]
        blocks = list(model.named_children())
        start = _split_at(model, blocks, set(self.names) | set(self.kept))
        below = [m for _, b in blocks[:start] for m in b.modules()]
        self.cached = start > 0 and not any(isinstance(m, _STATEFUL) for m in below)
        self.start = start if self.cached else 0  # the first block a step runs
        # a BlockNet runs a range of its blocks (forward(x, start=, stop=)); an nn.Sequential gets such a view
        self.model = BlockNet(OrderedDict(blocks)) if self.cached and not isinstance(model, BlockNet) else model
        head = {n for n, _ in blocks[self.start:]}
        self.buffer_names = [k for k, _ in model.named_buffers()
                             if not self.cached or k.split(".", 1)[0] in head]
        # the parameters a step runs through: what decides how its steps are best run over clients
        self.step_params = sum(params[k].numel() for k in
                               ([*self.names, *self.kept] if self.cached else params))
        # Linear/ReLU blocks below the head: the feature pass makes their calls itself (batched.plain_forward)
        self.feature_layers = batched.chain(self.model, 0, self.start, logits=False) if self.cached else None
        self.step = make_ala_step(self.model, eta, self.start, loss)

    def learn(self, weights: dict, local: dict, glob: dict, x: torch.Tensor, y: torch.Tensor, lengths,
              start_phase: np.ndarray, *, buffers: dict, backend, per_client: bool = False) -> Learned:
        """Learn W for A clients: client i's window is the next ``lengths[i]`` rows of ``x``, ``y``.

        ``weights``: W, (A, *shape) per weighted parameter; ``local``: L's weighted and kept parameters (A, …);
        ``glob``: G's weighted and lower parameters, one G for all (``per_client=False``) or (A, …) each;
        ``start_phase``: (A,) bool, those clients pass until converged or capped, the others once;
        ``buffers``: the clients' buffers (A, …), of which steps use scratch copies; ``backend``: runs the
        steps (the loop or the vectorised one, compute/backends.py).
        """
        if self.cached:
            x = self.features(glob, x, lengths, per_client=per_client)
        plan = self.plan(lengths, x.device)
        carry = {"w": weights, "l": {n: local[n] for n in self.names}, "k": {n: local[n] for n in self.kept},
                 "buffers": {k: buffers[k] for k in self.buffer_names}}
        lower = {} if self.cached else {n: glob[n] for n in self.lower}
        g = {n: glob[n] for n in self.names}
        if per_client:
            carry.update(g=g, lower=lower)
            shared = {}
        else:
            shared = {"g": g, "lower": lower}
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
        return BatchPlan.from_batches([[np.arange(a + j, min(a + j + b, e)) for j in range(0, e - a, b)]
                                       for a, e in _windows(lengths)], device)

    def features(self, glob: dict, x: torch.Tensor, lengths=None, chunk: int | None = None, *,
                 per_client: bool = False) -> torch.Tensor:
        """Output of the blocks below the weighted ones with G's parameters (no grad), in chunks of rows: each
        client's window (the next ``lengths[i]`` rows; None: all rows, one window) in chunks of ``chunk`` from
        its own first row, so that a client's features do not depend on which clients are computed with it
        (a CPU kernel may sum in another order for another number of rows: seen as 6e-8 differences in W
        between the engine and a Flower client computing its window alone). With ``per_client`` each
        client's rows go through its own G (``glob`` (A, …)).

        ``chunk`` (None: :func:`~fedala_lab.compute.plans.forward_chunk`, 256 or 64 with channels-last
        convolutions): small enough that a conv's activations stay in cache (docs/design.md#performance). On a CPU
        the chunks are shared out among threads (compute/parallel.py), each computed exactly as in one
        thread."""
        buffers = dict(self.model.named_buffers())
        self.model.eval()
        cl = self.channels_last and x.dim() == 4
        chunk = chunk or forward_chunk(cl)
        fmt = nhwc if cl else (lambda v: v)
        windows = _windows([len(x)] if lengths is None else lengths)
        if per_client:  # G per client: (A, …) each, a client's conv weights put in that format once
            gs = [{n: fmt(v[c]) for n, v in glob.items()} if e > a else None for c, (a, e) in enumerate(windows)]
        else:
            gs = [{n: fmt(v) for n, v in glob.items()}] * len(windows)
        pieces = [(gs[c], i, min(i + chunk, e)) for c, (a, e) in enumerate(windows) for i in range(a, e, chunk)]

        layers = self.feature_layers

        def chunk_out(piece, model: nn.Module) -> torch.Tensor:
            g, a, e = piece
            xs = fmt(x[a:e])
            if layers is not None:  # Linear/ReLU blocks: their calls, without functional_call's cost
                return batched.plain_forward(layers, g, xs)
            return functional_call(model, (g, buffers), (xs,), {"stop": self.start})

        below = sum(p.numel() for _, b in list(self.model.named_children())[:self.start] for p in b.parameters())
        outs = thread_map(chunk_out, pieces, threads=forward_threads(x.device, work=len(x) * below), ctx=self.model,
                          per_thread=lambda: copy.deepcopy(self.model))
        return torch.cat(outs) if outs else x.new_zeros((0,))


def _windows(lengths) -> list[tuple[int, int]]:
    """(first, end) row of each client's window, the windows laid end to end in ``lengths``' order."""
    ends = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [(int(a), int(e)) for a, e in itertools.pairwise(ends)]


def _split_at(model: nn.Module, blocks, top: set[str]) -> int:
    """Index of the lowest child a step must run when the children from there up hold exactly the parameters
    ``top`` (weighted and kept); 0 when no such split exists, or the module does not run its children in order."""
    if not isinstance(model, nn.Sequential) or not top:
        return 0
    owner = [n for n, _ in blocks]
    first = min((owner.index(k.split(".", 1)[0]) for k in top if k.split(".", 1)[0] in owner), default=0)
    above = [k for k, _ in model.named_parameters() if k.split(".", 1)[0] in set(owner[first:])]
    return first if sorted(above) == sorted(top) else 0


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
    """ALA on any PyTorch model, for one client, inside your own training loop (the reference's ``ALA``).

        from fedala_lab.algorithms.ala import ALA

        ala = ALA(model, x_train, y_train, p=1, eta=1.0, s=80, batch_size=10)
        for t in range(rounds):
            global_model = receive_from_server()
            ala.adaptive_local_aggregation(global_model, local_model)  # the reference's call and order
            train(local_model)                                          # local_model ← L + (G − L) ⊙ [1; W]

    Porting from the reference: ``ALA.from_reference(cid, loss, train_data, batch_size, rand_percent,
    layer_idx, eta, device, threshold, num_pre_loss)`` takes its constructor's arguments, and
    ``adaptive_local_aggregation(global_model, local_model)`` its method's (global first, then local).
    Calling the object itself takes keywords only, ``ala(local=…, glob=…)``, so that a port writing
    ``ala(global_model, local_model)`` fails instead of overwriting the global model.

    ``model`` is a template of the architecture (its values are not used; ALA keeps a copy), or a list of
    the parameter names to weight, the template then being the first ``nn.Module`` a call receives.
    Weighted are the parameters named in ``params`` (or in that list), else the top ``p`` blocks: for a
    :class:`~fedala_lab.models.BlockNet` its blocks, as everywhere in fedala_lab; for any other module its
    top-level children that hold parameters, the last registered on top (an ``nn.Sequential``'s last
    layers). ``p`` counts blocks (layers), the reference's ``layer_idx`` counts parameter tensors: a Linear
    layer is one block and two tensors, so ``layer_idx=2`` is ``p=1`` (``layer_idx=layer_idx`` converts).
    Every other parameter is overwritten with G's.

    The data: ``x_train``, ``y_train`` as tensors or numpy arrays, or ``x_train`` a ``torch.utils.data.Dataset``
    of (x, y) pairs (the reference's ``train_data``; read once). ``loss``: the criterion, default
    cross-entropy (the reference passes ``nn.CrossEntropyLoss()``, which is the same); ``device``: where W
    and the data live.

    A call that finds every parameter of the local model equal to the global one's (round 1) changes
    nothing. Otherwise it learns W on a window of s % of the train data (contiguous, at a random offset):
    the first learning call (the start phase) passes until the std of the last ``num_pre_loss`` pass losses
    is below ``threshold`` (at most ``max_start_epochs`` passes), later calls pass once. W is kept from
    call to call. The local model (a module) is updated in place; Θ̂ is returned as a state dict (the local
    model's buffers kept).

    Call k draws its window as a simulation draws client ``client``'s in round k of a run with ``seed``:
    called once a round from round 1, the drop-in computes what the engine does for that client.

    After a call: ``weights`` ({name: W}), ``losses`` (each pass's loss, that of its last batch),
    ``start_phase`` (True until a call has learned), ``capped`` (the start phase hit the cap), ``round``.
    The steps run one batch at a time (the loop backend), so any module works, dropout included.
    """

    def __init__(self, model, x_train, y_train=None, *, p: int = 1, params=None, layer_idx: int | None = None,
                 eta: float = 1.0, s: float = 80.0, batch_size: int = 10, threshold: float = 0.1,
                 num_pre_loss: int = 10, max_start_epochs: int = 50, seed: int = 0, client: int = 0, loss=None,
                 device=None):
        if not isinstance(model, nn.Module):
            model, params = None, list(model)
        self.x, self.y = _as_tensors(x_train, y_train, device)
        self.s, self.seed, self.client = s, seed, client
        self.layer_idx = layer_idx
        if layer_idx is not None and (not isinstance(layer_idx, int) or layer_idx < 0):
            raise ValueError(f"layer_idx={layer_idx!r}: the reference's count of parameter tensors from the top "
                             "(0: the whole model)")
        self._settings = {"p": None if params is not None else p, "names": params, "eta": eta,
                          "batch_size": batch_size, "threshold": threshold, "num_pre_loss": num_pre_loss,
                          "max_start_epochs": max_start_epochs,
                          "loss": None if loss is None or isinstance(loss, nn.CrossEntropyLoss) else loss}
        self.learner = self._learner(model) if model is not None else None
        self.weights: dict[str, torch.Tensor] | None = None
        self.losses: list[float] = []
        self.start_phase, self.capped, self.round = True, False, 0

    @classmethod
    def from_reference(cls, cid: int, loss, train_data, batch_size: int, rand_percent: float, layer_idx: int = 0,
                       eta: float = 1.0, device="cpu", threshold: float = 0.1, num_pre_loss: int = 10, *,
                       seed: int = 0, max_start_epochs: int = 50) -> ALA:
        """The reference's constructor, argument for argument (``ALA(cid, loss, train_data, batch_size,
        rand_percent, layer_idx, eta, device, threshold, num_pre_loss)``): ``rand_percent`` is s, ``layer_idx``
        counts parameter tensors from the top (0: all of them). The model is taken from the first call."""
        return cls([], train_data, None, layer_idx=layer_idx, eta=eta, s=rand_percent, batch_size=batch_size,
                   threshold=threshold, num_pre_loss=num_pre_loss, max_start_epochs=max_start_epochs, seed=seed,
                   client=cid, loss=loss, device=device)

    def _learner(self, template: nn.Module) -> WeightLearner:
        model = copy.deepcopy(template).requires_grad_(False)
        settings = dict(self._settings)
        if self.layer_idx is not None:
            tensors = [k for k, _ in model.named_parameters()]
            settings.update(p=None, names=tensors[-self.layer_idx:] if self.layer_idx else tensors)
        elif settings["names"] is None:
            blocks = layer_blocks(model)
            if not 1 <= settings["p"] <= len(blocks):
                tensors = sum(1 for _ in model.parameters())
                shown = ", ".join(n or type(model).__name__ for n, _ in blocks)
                raise ValueError(
                    f"p={settings['p']!r}: p counts blocks (layers with parameters) from the top, 1 to {len(blocks)} "
                    f"for this model ({shown}); the reference's layer_idx counts its "
                    f"{tensors} parameter tensors instead: pass layer_idx= to use that count")
        elif not settings["names"]:
            settings["names"] = [k for k, _ in model.named_parameters()]
        return WeightLearner(model, **settings)

    def adaptive_local_aggregation(self, global_model, local_model) -> dict[str, torch.Tensor]:
        """The reference's call, in its order: blend ``global_model`` into ``local_model`` (updated in place when
        a module) and return Θ̂ as a state dict."""
        return self._aggregate(local_model, global_model)

    def __call__(self, *args, local=None, glob=None) -> dict[str, torch.Tensor]:
        if args or local is None or glob is None:
            raise TypeError("call ala.adaptive_local_aggregation(global_model, local_model) (the reference's order) "
                            "or ala(local=local_model, glob=global_model): positional models are refused, because "
                            "swapping them would silently overwrite the global model")
        return self._aggregate(local, glob)

    def _aggregate(self, local, glob) -> dict[str, torch.Tensor]:
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


def _as_tensors(x, y, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Train data as tensors: tensors or numpy arrays as given, or a Dataset of (x, y) pairs read once."""
    if y is None:
        if not isinstance(x, torch.utils.data.Dataset):
            raise TypeError("give x_train and y_train (tensors or numpy arrays), or a Dataset of (x, y) pairs")
        pairs = [x[i] for i in range(len(x))]
        x = torch.stack([torch.as_tensor(a) for a, _ in pairs])
        y = torch.as_tensor([int(b) for _, b in pairs], dtype=torch.int64)
    x, y = torch.as_tensor(x), torch.as_tensor(y).long()
    if x.dtype == torch.float64:
        x = x.float()
    return (x.to(device), y.to(device)) if device is not None else (x, y)


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
    """What ALA carries from round to round, for every client, around the wrapped method's own state."""

    weights: dict[str, torch.Tensor]  # name -> (N, *shape): W, one weight per weighted parameter
    started: torch.Tensor  # (N,) bool: the client's start phase is behind it
    capped: list[int]  # clients whose start phase hit max_start_epochs, in the order they did
    inner: Any = None  # the wrapped method's state


class WithALA(Wrapper):
    """ALA as the local initialisation of the wrapped method (the ``+ala`` modifier; FedALA = FedAvg + ALA).

    Which parameters get weights is fixed for the run: the top p blocks of what the method sends
    (:meth:`~fedala_lab.algorithms.base.Algorithm.downloads`); the round-to-round part is :class:`ALAState`.
    """

    has_own_state = True

    def __init__(self, inner: Algorithm, setup: Setup):
        super().__init__(inner, setup)
        cfg = setup.cfg
        self.learner = WeightLearner(setup.model, p=cfg.p, received=inner.downloads(), eta=cfg.eta,
                                     batch_size=cfg.batch_size, threshold=cfg.threshold,
                                     num_pre_loss=cfg.num_pre_loss, max_start_epochs=cfg.max_start_epochs,
                                     channels_last=setup.channels_last)
        self.names, self.lower = self.learner.names, self.learner.lower
        self.initialise_all = cfg.ala_all_clients

    def own_state(self, setup: Setup, inner_state) -> ALAState:
        """W = 1 for the weighted parameters of every client; no client has had its start phase yet."""
        n = setup.num_clients
        return ALAState(weights={k: torch.ones((n, *setup.shapes[k]), device=setup.device) for k in self.names},
                        started=torch.zeros(n, dtype=torch.bool, device=setup.device), capped=[], inner=inner_state)

    def meta(self, state: ALAState) -> dict:
        """run.meta's ALA entries: the weighted parameters (run.ala_weights reads them) and capped clients."""
        return {**self.inner.meta(state.inner), "ala_params": list(self.names), "capped_clients": list(state.capped)}

    def skips(self, t: int) -> bool:
        """Rounds that receive the method's model as it is: round 1 (every local model equals G) and the
        rounds ≤ ala_after."""
        return t == 1 or t <= self.cfg.ala_after

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """Local initialisation by ALA for ``clients`` (Algorithm 1, lines 3–10 of the paper), on what the
        method sends them."""
        sent = self.inner.initialise(self.inner_round(rnd), clients)
        if self.skips(rnd.t):
            return sent
        if not set(self.names) | set(self.lower) <= sent.received():
            return self.blend_received(rnd, clients, sent)
        state: ALAState = rnd.state
        received = (*self.names, *self.lower)
        per_client = bool(set(sent.rows) & set(received))
        if per_client:  # each client received its own model (FedAMP): G per client, (A, …) each
            glob = {n: sent.per_client(n, len(clients)) for n in received}
        else:
            glob = {n: sent.params[n] for n in received}
        ids = clients.cpu().numpy()
        x, y, lengths = self.windows(rnd, ids)  # s % of each client's train split
        local = {n: rnd.local_params[n][clients] for n in (*self.names, *self.learner.kept)}
        start_phase = ~state.started[clients].cpu().numpy()
        # W: the start phase passes until converged (or capped), later rounds pass once (Eq. 5)
        learned = self.learner.learn({n: w[clients] for n, w in state.weights.items()}, local, glob, x, y,
                                     lengths, start_phase,
                                     buffers={k: b[clients] for k, b in rnd.local_buffers.items()},
                                     backend=rnd.backend_for(self.learner.step_params), per_client=per_client)
        for n in self.names:  # W kept for the next round
            state.weights[n][clients] = learned.weights[n]
        state.started[clients] = True
        self.record(rnd, rnd.ids[ids], learned, start_phase, state)
        # Θ̂ = L + (G − L) ⊙ [1; W]: the lower parameters are G's (Eq. 4's "1"), the weighted ones blended
        return self.blended(sent, {n: blend(local[n], glob[n], learned.weights[n]) for n in self.names})

    def windows(self, rnd: Round, ids: np.ndarray):
        """The clients' windows one after another: rows x, y of the train data, and each window's length."""
        cfg, data = self.cfg, rnd.data
        rows = [int(data.train_offsets[c]) + window(int(data.train_sizes[c]), cfg.s, cfg.seed, rnd.t, who)
                for c, who in zip(ids, rnd.ids[ids].tolist())]
        idx = torch.as_tensor(np.concatenate(rows) if rows else np.zeros(0, np.int64), device=rnd.device)
        return data.train_x[idx], data.train_y[idx], [len(r) for r in rows]

    def record(self, rnd: Round, ids: np.ndarray, learned: Learned, start_phase: np.ndarray,
               state: ALAState) -> None:
        """Each pass of the tracked clients (run.ala, pass by pass across clients, as they ran), their W
        (run.arrays) and the clients newly capped (run.meta, with a warning); ``ids``: the clients' ids."""
        rows = {c: [] for c in ALA_COLUMNS}
        for e in range(max((len(p) for p in learned.passes), default=0)):
            for i, c in enumerate(ids.tolist()):
                if e < len(learned.passes[i]) and c in rnd.tracked:
                    last = e == len(learned.passes[i]) - 1
                    loss, mean = learned.passes[i][e]
                    for k, v in zip(ALA_COLUMNS, (rnd.t, c, e + 1, loss, mean, bool(start_phase[i]),
                                                  bool(learned.capped[i] and last))):
                        rows[k].append(v)
        if rows["round"]:
            rnd.record("ala", rows)
        rnd.record_series("ala_w", ids.tolist(), learned.weights)
        new = [c for c in ids[learned.capped].tolist() if c not in state.capped]
        state.capped.extend(new)
        if new:
            warnings.warn(f"round {rnd.t}: ALA start phase of client(s) {new} hit max_start_epochs="
                          f"{self.cfg.max_start_epochs} without converging (threshold={self.cfg.threshold}); "
                          "they continue with the weights learned so far", stacklevel=4)

    def blend_received(self, rnd: Round, clients: torch.Tensor, sent: Sent) -> Sent:
        """Part of the model received (FedLAMA mid-window): the received lower parameters overwrite, the
        received weighted ones are blended with the client's current W (Eq. 4, W not learned this round)."""
        top = set(self.names)
        w = rnd.state.weights
        return self.blended(sent, {n: blend(rnd.local_params[n][clients], sent.per_client(n, len(clients)),
                                            w[n][clients]) for n in sent.received() & top})

    def blended(self, sent: Sent, rows: dict[str, torch.Tensor]) -> Sent:
        """``sent`` with its weighted parameters (:attr:`names`) replaced by ``rows``, ALA's Θ̂ per client (a
        weighted parameter not in ``rows`` keeps the client's value); every other field of ``sent`` as it is."""
        top = set(self.names)
        return dataclasses.replace(sent, params={n: v for n, v in sent.params.items() if n not in top},
                                   rows={**{n: v for n, v in sent.rows.items() if n not in top}, **rows})


def base_through(cfg) -> int:
    """The last round through which a run with ALA equals the run of the method without it: ALA skips round
    1 and the rounds ≤ ``ala_after``. With ``ala_all_clients=False`` and ρ < 1 the clients not selected keep
    their model where the method would send them G, so such a run is its own from round 1 (0)."""
    if not cfg.ala_all_clients and cfg.join_ratio < 1:
        return 0
    return max(1, cfg.ala_after)


MODIFIER = Modifier("ala", "+ala", "+ALA", WithALA, PARAMS, look=lambda base: Look(base.label, base.colour, "--"),
                    base_through=base_through, tracks_clients=True)
