"""Local SGD in worker processes: the CPU training backend ``"workers"``.

Why (docs/design.md#performance): on a CPU a step of the MNIST CNN is real arithmetic, torch's own
threads make each small step wait for the slowest core (a busy neighbour slows a round many times over),
and one thread per process degrades only in proportion; so parallelism comes from processes. This backend
trains a round's clients in N spawned processes (default: the cores this process may use, or
``$FEDALA_LAB_WORKERS``: compute/parallel.py), one torch thread each, every client start to finish in one
process:

- A :class:`WorkerPool` starts lazily at the first training call (from a fork server that imported
  torch once, or spawned; never a fork of this process). The engine closes it
  at the end of ``Simulation.run`` (returned, cancelled, diverged, interrupted or failed alike);
  ``weakref.finalize`` closes a forgotten one at garbage collection or exit. Workers are daemons, ignore
  Ctrl-C (the parent decides) and leave when their pipe closes, so none outlives its parent.
- Shared memory, set up once per run (a *session*): the train data (x, y), slots for the stacked
  parameters and buffers of the clients of a call, and what every client sees (``shared``: the global
  model G). A call copies the clients' carries into the slots and hands out one client at a time
  (its slot and its batch-plan rows: a small message), longest first, to whichever worker is free, so
  a slow core only slows its share; losses and seconds come back per client, parameters in the slots.
- A worker receives the model's architecture once per session (the module, pickled) and, with each
  client, the call's recipe: an SGD recipe (:class:`~fedala_lab.compute.steps.SGD`: lr, an objective term,
  which parameters train) or any step's :class:`~fedala_lab.compute.steps.Recipe` (its factory and
  arguments: pFedMe's, Per-FedAvg's, APPLE's, FedPHP's steps). Both pickle, so any algorithm's local
  training can run here: compute/ knows no algorithm. A step's recipe is rebuilt on the worker's copy of
  the model and run for the client batch after batch, as the loop backend runs it (the same code and
  arithmetic). An SGD recipe runs on an ``nn.Module`` in place with the math of
  :func:`~fedala_lab.compute.steps.make_sgd_step`: weighted cross-entropy over the batch's rows
  (:func:`~fedala_lab.compute.steps.weighted_ce`, so a partial last batch is exact), then
  θ ← θ − lr·(∇ℓ + objective's gradient) on the trainable parameters; no momentum, no weight decay.
  Batch-norm buffers are each client's own (they live in the slots). A step made without a recipe, or a
  recipe or model whose class lives in ``__main__`` (a script's own, which a worker cannot import), runs in
  this process on the loop backend instead (``info()`` says so).
- Workers keep the last few sessions (:data:`SESSIONS`): an algorithm whose calls alternate between two
  layouts of carry and shared tensors (Per-FedAvg: an SGD step to evaluate, its own step to train) sets
  each up once per run, not once per call.
- With one core (or inside a daemonic process, which may not have children) the same trainer runs in
  this process.

Exactness (docs/design.md#determinism). The worker performs the loop backend's arithmetic in the same
order (autograd on the module instead of ``torch.func`` on ``functional_call``; ``p.sub_(lr·g)`` instead
of ``p − lr·g``), so at one thread it equals the loop backend bit for bit (tested, FedAvg, FedProx,
FedAvg-C, FedLAMA, batch norm). Each client is trained by exactly one process in its own order, so the
number of workers and the order they pick clients in never change a result. ``channels_last=True`` (for
conv models) runs other convolution kernels, and ``fused_linear=True`` applies the update of each linear
layer inside the backward pass as one ``addmm_`` (W ← W − lr·δᵀx: the gradient is never written, scaled
and subtracted, which matters for a large weight such as the MNIST CNN's fc1; docs/design.md#performance),
an objective's proximal pull μ(θ − a) as one ``lerp_`` beside it (``objective.pull``: FedProx, Ditto):
both faster on a CPU and equal to float rounding only, like changing torch's threads. ``backend="auto"`` turns both on (engine/simulate.py).
With either on, a step whose recipe names a module form (``Recipe.trainer``: pFedMe's, APPLE's, FedPHP's) runs
as that form, the same math on an :class:`InPlaceModel` with those kernels, instead of the ``torch.func``
step (NCHW convolutions, every gradient written): also equal to float rounding only.

Only training goes to the workers; forward-only calls (evaluation, ALA's feature pass) and steps without a
recipe (ALA's weight learning) run in this process on the loop backend, whose forward-only calls use a
thread per worker (compute/parallel.py) while the workers wait.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import signal
import time
import traceback
import weakref
from collections import Counter, deque
from itertools import count

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import ConfigError
from .backends import BatchPlan, LoopBackend, client_steps, layout, write_back
from .device import keep_freed_memory
from .parallel import default_workers, main_not_rerun
from .steps import SGD, Recipe, weighted_ce

SESSIONS = 4  # sessions a worker keeps (their shared memory stays mapped while kept)


class WorkerError(RuntimeError):
    """A training worker process died or could not start; the message says which and why."""


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, shown as the cause of the re-raised one."""

    def __init__(self, tb: str):
        super().__init__(tb)

    def __str__(self):
        return "\n\n" + self.args[0]


# -- the trainer (runs in a worker, or in this process) ---------------------------------------------


class _FusedLinear(torch.autograd.Function):
    """``F.linear(x, W, b)`` whose backward applies the step's SGD update to W (and b) in place:
    W ← W − lr·(δᵀx) as one ``addmm_`` instead of writing ∇W (2 MB for the MNIST CNN's fc1), scaling it and
    subtracting it in three passes over memory. The input's gradient δW is taken first, from W as it was
    in the forward pass; W is not read again in the step. ``pull`` (fraction f, anchors of W and b, or None):
    a proximal term's step μ(θ − a) taken in the same place, as θ ← θ + f·(a − θ) (``lerp_``) before the
    update (f = lr·μ: FedProx's and Ditto's pull, pFedMe's θ towards w). Float rounding differs from
    ``p − lr·(g + μ(p − a))`` (the product is not rounded before the subtraction), so this runs only where
    the caller asked for it."""

    @staticmethod
    def forward(ctx, x, weight, bias, lr, pull):
        ctx.save_for_backward(x, weight)
        ctx.bias, ctx.lr, ctx.pull = bias, lr, pull
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        go = grad_out.reshape(-1, weight.shape[0])
        grad_in = go.mm(weight).reshape(x.shape) if ctx.needs_input_grad[0] else None
        with torch.no_grad():
            if ctx.pull is not None:
                frac, w_anchor, b_anchor = ctx.pull
                if w_anchor is not None:
                    weight.lerp_(w_anchor, frac)
                if ctx.bias is not None and b_anchor is not None:
                    ctx.bias.lerp_(b_anchor, frac)
            weight.addmm_(go.t(), x.reshape(-1, weight.shape[1]), alpha=-ctx.lr)
            if ctx.bias is not None:
                ctx.bias.add_(go.sum(0), alpha=-ctx.lr)
        return grad_in, None, None, None, None


class InPlaceModel:
    """A worker's copy of ``model`` trained in place, one client at a time: what :class:`_Trainer` (SGD recipes)
    and the module forms of algorithms' steps (:attr:`~fedala_lab.compute.steps.Recipe.trainer`) run on.

    ``channels_last``: a conv model's weights and inputs (:meth:`batch`) in that memory format. ``fused_linear``:
    each ``nn.Linear`` whose weight and bias all train (and are its own) takes its update θ ← θ − lr·δᵀx inside
    the backward pass (:class:`_FusedLinear`), first moving the fraction ``pull[0]`` of the way to its anchors
    ``pull[1]`` where :attr:`pull` is set; :attr:`params` are the trainable parameters the caller updates
    after the backward pass. A model that calls such a layer twice in one forward pass (its weight would change
    between the two backward uses) is found by :meth:`loss` and trained without. ``trainable``: the names that
    train (None: all); the others are frozen. Both switches agree with the loop to float rounding only."""

    def __init__(self, model: torch.nn.Module, *, lr: float, channels_last: bool = False, fused_linear: bool = False,
                 trainable=None):
        model = copy.deepcopy(model)
        self.channels_last = channels_last and any(p.dim() == 4 for p in model.parameters())
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        trainable = None if trainable is None else set(trainable)
        for n, p in model.named_parameters():
            p.requires_grad_(trainable is None or n in trainable)
        self.model, self.lr = model, lr
        self.all = dict(model.named_parameters())
        self.buffers = dict(model.named_buffers())
        self.pull: tuple[float, dict] | None = None  # (fraction, name → anchor) for the fused layers
        self.calls: dict[str, int] = {}  # fused layer → calls in this step's forward pass
        fused = _fusable(model) if fused_linear else {}
        for name, module in fused.items():
            module.forward = self._fused_forward(name, module)
        self.patched = list(fused.values())
        self.fused = {f"{name}.{k}" for name, m in fused.items() for k, _ in m.named_parameters(recurse=False)}
        self.trainable = {n: p for n, p in self.all.items() if p.requires_grad}
        self.params = {n: p for n, p in self.trainable.items() if n not in self.fused}  # updated after backward

    def _fused_forward(self, name: str, module: torch.nn.Linear):
        def forward(x):
            self.calls[name] = self.calls.get(name, 0) + 1
            pull = None
            if self.pull is not None:
                frac, anchors = self.pull
                w, b = anchors.get(f"{name}.weight"), anchors.get(f"{name}.bias")
                pull = None if w is None and b is None else (frac, w, b)
            return _FusedLinear.apply(x, module.weight, module.bias, self.lr, pull)
        return forward

    def _unfuse(self) -> None:
        """Train this model without fused layers from now on (one was called twice in a forward pass)."""
        for module in self.patched:
            del module.forward  # back to the class's forward
        self.params, self.fused, self.patched, self.calls = self.trainable, set(), [], {}

    def batch(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Rows ``idx`` of ``x`` as the model takes them."""
        xb = x[idx]
        if self.channels_last:
            # not compute.backends.nhwc: at batch 10 a training step runs as fast either way
            # (docs/design.md#performance), and keeping this keeps the trained floats of earlier runs
            xb = xb.contiguous(memory_format=torch.channels_last)
        return xb

    def loss(self, forward, *args):
        """``forward(*args)`` (the step's loss, from the model's forward pass); where it called a fused layer
        twice, again without fused layers (nothing has changed yet: updates happen in the backward pass)."""
        self.calls.clear()
        loss = forward(*args)
        if any(c > 1 for c in self.calls.values()):
            self._unfuse()
            loss = forward(*args)
        return loss

    def cross_entropy(self, xb: torch.Tensor, yb: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The model's weighted cross-entropy on a batch (:func:`~fedala_lab.compute.steps.weighted_ce`)."""
        return weighted_ce(self.model(xb), yb, w)

    def step(self, anchors: dict | None = None, frac: float = 0.0) -> None:
        """After the backward pass, the SGD step of :attr:`params` (those it did not update in place): θ moved
        the fraction ``frac`` towards ``anchors[n]`` where one is given (a proximal pull, its gradient never
        written), then θ − lr·∇θ; gradients cleared."""
        with torch.no_grad():
            for n, p in self.params.items():
                if anchors is not None and n in anchors:
                    p.lerp_(anchors[n], frac)
                if p.grad is not None:
                    p.sub_(self.lr * p.grad)
                p.grad = None

    def load(self, params: dict | None, buffers: dict | None = None) -> None:
        """Copy a client's parameters (all, or none: None) and buffers into the model."""
        with torch.no_grad():
            for n, p in (self.all.items() if params is not None else ()):
                p.copy_(params[n])
            for n, b in (self.buffers.items() if buffers is not None else ()):
                b.copy_(buffers[n])

    def store(self, params: dict | None, buffers: dict | None = None) -> None:
        """Copy the model's parameters (unless None) and buffers back into a client's tensors, in place."""
        with torch.no_grad():
            for n, p in (self.all.items() if params is not None else ()):
                params[n].copy_(p)
            for n, b in (self.buffers.items() if buffers is not None else ()):
                buffers[n].copy_(b)


class _Trainer(InPlaceModel):
    """One nn.Module trained in place by an SGD recipe, one client at a time (the math of steps.make_sgd_step).

    ``fused_linear``: the ``nn.Linear`` layers whose weight and bias all train (and are theirs alone) take
    their update inside the backward pass (:class:`_FusedLinear`); a model that calls such a layer twice in
    one forward pass is trained without. With it, an objective that says its gradient is a pull μ(θ − a)
    (``objective.pull``: FedProx's, Ditto's) is applied as θ ← θ + lr·μ·(a − θ) in place (inside the backward
    pass for fused layers), not as a gradient written and added: float rounding only, like the fusing."""

    def __init__(self, model: torch.nn.Module, sgd: SGD, channels_last: bool, fused_linear: bool = False):
        super().__init__(model, lr=sgd.lr, channels_last=channels_last, fused_linear=fused_linear,
                         trainable=sgd.trainable)
        self.sgd = sgd
        self.pulls = fused_linear and callable(getattr(sgd.objective, "pull", None))

    def train_client(self, carry: dict, shared: dict, x: torch.Tensor, y: torch.Tensor, rows: np.ndarray,
                     sizes: np.ndarray) -> np.ndarray:
        """SGD on one client from ``carry`` (its params and buffers, written back in place); the losses."""
        lr, objective = self.sgd.lr, self.sgd.objective
        self.load(carry["params"], carry["buffers"])
        anchors = {}
        if self.pulls:
            mu, anchors = objective.pull(carry, shared)
            anchors = {n: a for n, a in anchors.items() if n in self.trainable}
            self.pull, frac = (lr * mu, anchors), lr * mu
        losses = np.empty(len(sizes), dtype=np.float64)
        try:
            for k, s in enumerate(sizes):
                idx = torch.from_numpy(rows[k, :s])
                xb, yb = self.batch(x, idx), y[idx]
                loss = self.loss(self.cross_entropy, xb, yb, xb.new_ones(int(s)))
                with torch.no_grad():  # before the backward pass, which updates the fused layers
                    extra = objective.grad(self.trainable, carry, shared) if objective is not None and not \
                        self.pulls else {}
                loss.backward()
                if self.pulls:  # θ + lr·μ·(a − θ) − lr·∇ℓ: the pull's gradient is never written
                    self.step(anchors, frac)
                else:
                    with torch.no_grad():
                        for n, p in self.params.items():
                            g = p.grad if p.grad is not None else torch.zeros_like(p)
                            if n in extra:
                                g = g + extra[n]
                            p.sub_(lr * g)  # the loop's p − lr·(∇ℓ + extra), in place
                            p.grad = None
                        for n in self.fused & extra.keys():
                            self.all[n].sub_(lr * extra[n])
                losses[k] = loss.item()
        finally:
            self.pull = None
        self.store(carry["params"], carry["buffers"])
        return losses


def _fusable(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """The model's ``nn.Linear`` layers whose parameters all train and belong to that layer alone."""
    owners = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    return {name: m for name, m in model.named_modules()
            if type(m) is torch.nn.Linear
            and all(p.requires_grad and owners[id(p)] == 1 for p in m.parameters(recurse=False))}


class _StepRunner:
    """A step rebuilt from its :class:`Recipe` on a copy of the model, run for one client batch after batch
    exactly as :class:`~fedala_lab.compute.backends.LoopBackend` runs it (the same calls, in the same order)."""

    def __init__(self, model: torch.nn.Module, recipe: Recipe):
        model = copy.deepcopy(model)
        model.train()
        self.step = recipe.build(model)

    def train_client(self, carry: dict, shared: dict, x: torch.Tensor, y: torch.Tensor, rows: np.ndarray,
                     sizes: np.ndarray) -> np.ndarray:
        """The client's steps from ``carry`` (its slot: written back in place); each step's aux, (K, m)."""
        batches = (torch.from_numpy(rows[k, :s]) for k, s in enumerate(sizes))
        with torch.enable_grad():
            ci, values = client_steps(self.step, carry, shared, x, y, batches)
        with torch.no_grad():
            write_back(carry, ci, slice(None))
        return np.stack([a.to(torch.float64).reshape(-1).numpy() for a in values])


def _runner(model, kernels: tuple[bool, bool], recipe: SGD | Recipe):
    """The runner of ``recipe``; ``kernels``: (channels_last, fused_linear). An SGD recipe trains an
    :class:`InPlaceModel` (:class:`_Trainer`); a step's recipe runs the step itself (the loop's arithmetic), or,
    where the kernels are asked for and the recipe names one, its module form (``recipe.trainer``: the same
    math on an :class:`InPlaceModel`, to float rounding)."""
    if isinstance(recipe, SGD):
        return _Trainer(model, recipe, *kernels)
    if getattr(recipe, "trainer", None) is not None and any(kernels):
        return recipe.trainer(model, kernels, **dict(recipe.kwargs))
    return _StepRunner(model, recipe)


class _Session:
    """A worker's view of one run: the model, the data and slots in shared memory, a runner per recipe."""

    def __init__(self, model, kernels, x, y, slots, shared):
        self.model, self.kernels = model, kernels
        self.x, self.y, self.slots, self.shared = x, y, slots, shared
        self.runners: dict = {}

    def runner(self, recipe: SGD | Recipe):
        if recipe not in self.runners:
            self.runners[recipe] = _runner(self.model, self.kernels, recipe)
        return self.runners[recipe]


def _slot(tree, i: int):
    return tree_map(lambda t: t[i], tree)


def _worker_main(conn) -> None:
    """A worker: set up sessions, train the clients it is sent, until None or its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it closes the pool
    torch.set_num_threads(1)  # docs/design.md#performance: one thread per process
    keep_freed_memory()  # compute/device.py: a step's tensors reuse the last step's pages
    sessions: dict = {}  # token → _Session, oldest first
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg is None:
            return
        try:
            if msg[0] == "setup":
                _, token, model, kernels, x, y, slots, shared = msg
                while len(sessions) >= SESSIONS:  # drop the oldest's shared memory before mapping more
                    sessions.pop(next(iter(sessions)))
                sessions[token] = _Session(model, kernels, x, y, slots, shared)
                conn.send(("ready", token, os.getpid()))
            else:
                _, token, i, rows, sizes, recipe = msg
                session = sessions[token]
                t0, c0 = time.perf_counter(), time.process_time()
                losses = session.runner(recipe).train_client(_slot(session.slots, i), session.shared, session.x,
                                                             session.y, rows, sizes)
                conn.send(("done", i, losses, time.perf_counter() - t0, time.process_time() - c0))
        except BaseException as err:  # noqa: BLE001 - every failure goes to the parent, which raises it
            _send_error(conn, err)
            return


def _send_error(conn, err: BaseException) -> None:
    tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    try:
        conn.send(("error", err, tb))
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its text
        with contextlib.suppress(Exception):  # else the parent sees the worker die
            conn.send(("error", RuntimeError(f"{type(err).__name__}: {err}"), tb))


# -- the pool of processes --------------------------------------------------------------------------


def worker_count(workers) -> int:
    """The number of worker processes ``workers`` asks for: None → :func:`default_workers`, else a whole number
    >= 1 (0 or -2 is a ConfigError naming workers, never read as "the default" or 1)."""
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ConfigError("workers", workers, "a whole number >= 1 (worker processes), a WorkerPool, or None "
                          "(one per core)")
    return int(workers)


class WorkerPool:
    """N training processes, one torch thread each; reusable across runs (one session at a time).

    A pool made by a :class:`WorkerBackend` belongs to it and closes with it; a pool made by the caller
    (``Simulation(cfg, data, workers=pool)``: tests, benchmarks, a driver running many runs in a row)
    is shared and closed by the caller (``close()`` or ``with WorkerPool(2) as pool``). A pool that
    saw a worker fail closes itself and raises; using it again raises :class:`WorkerError`.
    """

    def __init__(self, workers: int | None = None):
        self.size = worker_count(workers)
        self._procs: list = []
        self._conns: list = []
        self._sessions: list = []  # tokens of the sessions the workers hold, oldest first (as they keep them)
        self._closed = False
        self._finalizer = None

    # lifecycle

    def start(self) -> None:
        if self._closed:
            raise WorkerError("this worker pool was closed (after a worker failed, or by its owner)")
        if self._procs:
            return
        ctx = _context()
        with main_not_rerun():  # never re-run the caller's script in the workers
            for r in range(self.size):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, args=(child,), daemon=True, name=f"fedala-train-{r}")
                p.start()
                child.close()
                self._procs.append(p)
                self._conns.append(parent)
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, kill: bool = False) -> None:
        """Stop the workers (at once with ``kill``, e.g. after an error mid-call) and wait for them."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer.detach()
            _shutdown(self._procs, self._conns, kill=kill)
            self._finalizer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(kill=exc[0] is not None)
        return False

    # work

    def setup(self, token, model: torch.nn.Module, kernels: tuple[bool, bool], x, y, slots, shared) -> None:
        """Hand every worker a session (the model, its kernels: (channels_last, fused_linear), the data, slots)
        unless they hold this one already."""
        self.start()
        if token in self._sessions:
            return
        msg = ("setup", token, model, kernels, x, y, slots, shared)
        del self._sessions[:max(0, len(self._sessions) + 1 - SESSIONS)]  # the workers drop the same oldest ones
        self._exchange([(conn, msg) for conn in self._conns], expect="ready")
        self._sessions.append(token)

    def train(self, token, jobs: list[tuple[int, np.ndarray, np.ndarray]], recipe: SGD | Recipe) -> dict[int, tuple]:
        """Train these (slot, rows, sizes) jobs of session ``token`` by ``recipe`` (an SGD recipe or a step's),
        in the given order, on whichever worker is free. Returns {slot: (aux, wall seconds, CPU seconds,
        worker pid)}; aux: the losses (K,) of an SGD recipe, a step's aux values (K, m)."""
        queue = deque(jobs)
        results: dict[int, tuple] = {}

        def feed(conn):
            if queue:
                i, rows, sizes = queue.popleft()
                return conn, ("train", token, i, rows, sizes, recipe)
            return None

        self._exchange([m for m in (feed(c) for c in self._conns) if m], expect="done", refill=feed,
                       results=results)
        return results

    def _exchange(self, first: list, *, expect: str, refill=None, results=None) -> None:
        """Send ``first``; wait for the answers, refilling each worker that answers; a worker that dies or
        fails ends the call (and the pool) with one error here."""
        from multiprocessing.connection import wait

        procs = dict(zip(self._conns, self._procs))
        sentinels = {p.sentinel: c for c, p in procs.items()}
        busy = {}

        def died(conn, msg):
            p = procs[conn]
            p.join(1)
            return WorkerError(f"training worker process {p.pid} died (exit code {p.exitcode})" + _while(msg))

        def send(conn, msg):
            try:
                conn.send(msg)
            except OSError:  # its end of the pipe is closed: the process is gone
                raise died(conn, msg) from None
            busy[conn] = msg

        try:
            for conn, msg in first:
                send(conn, msg)
            while busy:
                for ready in wait([*busy, *sentinels]):
                    conn = sentinels.get(ready, ready)
                    try:  # a process that ended may have left its last answer (an error) in the pipe
                        answer = conn.recv()
                    except (EOFError, OSError):
                        answer = None
                    if answer is None:  # its pipe closed or its process ended
                        raise died(conn, busy.get(conn))
                    if answer[0] == "error":
                        _, err, tb = answer
                        err.add_note(f"(raised in training worker process {procs[conn].pid}"
                                     + _while(busy.get(conn)) + ")")
                        raise err from _RemoteTraceback(tb)
                    if answer[0] != expect:
                        raise WorkerError(f"unexpected answer {answer[0]!r} from a training worker")
                    del busy[conn]
                    if results is not None:
                        _, i, losses, seconds, cpu = answer
                        results[i] = (losses, seconds, cpu, procs[conn].pid)
                    nxt = refill(conn) if refill is not None else None
                    if nxt:
                        send(conn, nxt[1])
        except BaseException:
            self.close(kill=True)  # mid-call the others are busy: never leave them running
            raise


def _context():
    """How workers start: from a fork server where the platform has one, else spawned.

    Never a plain fork of this process, which may already run torch's threads (a forked copy can
    deadlock). The fork server is a fresh single-threaded process that imports this module (and so
    torch) once and forks each worker from itself: the first pool of a process pays the import (seconds),
    later pools start in milliseconds. It leaves when this process does.
    """
    import torch.multiprocessing as mp  # registers torch's shared-memory pickling of tensors

    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])  # takes effect when the server starts (once per process)
        return ctx
    return mp.get_context("spawn")


def _while(msg) -> str:
    if msg is None:
        return ""
    return " while setting up" if msg[0] == "setup" else f" while training the client in slot {msg[2]}"


def _shutdown(procs: list, conns: list, kill: bool = False) -> None:
    """Ask the workers to leave (or terminate them), wait, and make sure none is left."""
    if not kill:
        for conn in conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
    for p in procs:
        if kill:
            p.terminate()
        p.join(timeout=1 if kill else 10)
        if p.is_alive():
            p.terminate()
            p.join(timeout=2)
        if p.is_alive():
            p.kill()
            p.join()
    for conn in conns:
        conn.close()
    procs.clear()
    conns.clear()


# -- the backend ------------------------------------------------------------------------------------

_TOKENS = count()


def portable(obj) -> bool:
    """Whether a worker process can rebuild ``obj`` from its pickle: it pickles, and names nothing defined in
    ``__main__`` (a script's or notebook's own class, which a worker cannot import)."""
    try:
        return b"__main__" not in pickle.dumps(obj)
    except Exception:  # noqa: BLE001 - whatever does not pickle stays in this process
        return False


class WorkerBackend:
    """Runs training steps that carry a recipe in worker processes: SGD recipes (a step made by
    :func:`~fedala_lab.compute.steps.make_sgd_step`) and steps made by
    :func:`~fedala_lab.compute.steps.recipe_step`; anything else on the loop, here.

    ``model``: the architecture the workers train (pickled to them once per session); ``workers``: a number
    (None: :func:`default_workers`) or a shared :class:`WorkerPool`; ``capacity``: the most clients one call
    trains (slots are allocated for that many, grown when a call brings more).
    """

    name = "workers"

    def __init__(self, model: torch.nn.Module, *, workers: int | WorkerPool | None = None,
                 channels_last: bool = False, fused_linear: bool = False, capacity: int = 1):
        self.model, self.channels_last, self.fused_linear = model, bool(channels_last), bool(fused_linear)
        self._own_pool = not isinstance(workers, WorkerPool)
        self._pool = workers if isinstance(workers, WorkerPool) else None
        size = workers.size if isinstance(workers, WorkerPool) else worker_count(workers)
        import multiprocessing

        self.in_process = size == 1 or multiprocessing.current_process().daemon  # daemons have no children
        # a model whose class a worker cannot import trains here, a client at a time
        self.model_portable = portable(model)
        if not self.model_portable:
            self.in_process = True
        self.workers = 1 if self.in_process else size
        self.capacity = max(1, capacity)
        self._loop = LoopBackend(self.channels_last)  # evaluation and other forward passes here, in the same format
        self._portable: dict = {}  # recipe → whether a worker can rebuild it
        # per training call: wall seconds and each worker's CPU seconds (the busiest one is the critical
        # path on an otherwise idle machine; benchmarks/round_time.py reports it)
        self.calls: list[dict] = []
        self._sessions: dict = {}  # layout → this run's data, slots and shared tensors in shared memory (``_ready``)
        self._runners: dict = {}  # in-process runners, one per recipe

    def info(self) -> dict:
        """What run.meta["env"] records about this backend."""
        out = {"workers": self.workers, "worker_processes": not self.in_process, "channels_last": self.channels_last,
               "fused_linear": self.fused_linear}
        if not self.model_portable:
            out["workers_note"] = "the model's class lives in __main__: trained in this process"
        return out

    @property
    def kernels(self) -> tuple[bool, bool]:
        return self.channels_last, self.fused_linear

    @property
    def pids(self) -> list[int]:
        return self._pool.pids if self._pool is not None else []

    def close(self) -> None:
        """Stop the workers of an own pool (a shared pool stays); the next training call starts anew."""
        if self._pool is not None and self._own_pool:
            self._pool.close()
            self._pool = None
        self._sessions = {}

    def _sends(self, recipe) -> bool:
        if recipe is None:
            return False
        if recipe not in self._portable:
            self._portable[recipe] = portable(recipe)
        return self._portable[recipe]

    def run(self, step, carry: dict, shared: dict, plan: BatchPlan, x: torch.Tensor, y: torch.Tensor, *,
            train: bool, model: torch.nn.Module, aux_size: int = 1, timings: list | None = None):
        recipe = getattr(step, "sgd", None) or getattr(step, "recipe", None)
        if not (train and self._sends(recipe) and x.device.type == "cpu"):
            return self._loop.run(step, carry, shared, plan, x, y, train=train, model=model, aux_size=aux_size,
                                  timings=timings)
        a, k_max = plan.sizes.shape
        n_steps = plan.num_steps
        rows = plan.rows.cpu().numpy()
        aux = np.full((a, k_max, aux_size), np.nan)
        seconds = np.zeros(a)
        wall0 = time.perf_counter()
        cpu: dict[int, float] = {}
        if self.in_process:
            out = tree_map(torch.Tensor.clone, carry)
            if recipe not in self._runners:
                self._runners[recipe] = _runner(self.model, self.kernels, recipe)
            runner = self._runners[recipe]
            for i in range(a):
                t0, c0 = time.perf_counter(), time.process_time()
                n = int(n_steps[i])
                if n:
                    got = runner.train_client(_slot(out, i), shared, x, y, rows[i, :n], plan.sizes[i, :n])
                    aux[i, :n] = got.reshape(n, -1)
                seconds[i] = time.perf_counter() - t0
                cpu[os.getpid()] = cpu.get(os.getpid(), 0.0) + time.process_time() - c0
        else:
            token, slots, glob = self._ready(carry, shared, x, y, a)
            for t, s in zip(tree_flatten(slots)[0], tree_flatten(carry)[0]):
                t[:a].copy_(s)
            for t, s in zip(tree_flatten(glob)[0], tree_flatten(shared)[0]):
                t.copy_(s)
            # longest first (then by position): a slow core only slows its share
            order = sorted((i for i in range(a) if n_steps[i]), key=lambda i: (-int(n_steps[i]), i))
            done = self._pool.train(token, [(i, rows[i, :n_steps[i]], plan.sizes[i, :n_steps[i]]) for i in order],
                                    recipe)
            for i, (losses, sec, c, pid) in done.items():
                aux[i, :len(losses)] = losses.reshape(len(losses), -1)
                seconds[i] = sec
                cpu[pid] = cpu.get(pid, 0.0) + c
            out = tree_map(lambda t: t[:a].clone(), slots)
        self.calls.append({"wall": time.perf_counter() - wall0, "cpu": sorted(cpu.values(), reverse=True),
                           "steps": int(n_steps.sum())})
        if timings is not None:
            timings.extend(seconds.tolist())
        return out, aux

    def _ready(self, carry, shared, x, y, a: int):
        """The session in shared memory for this layout of carry and shared tensors (made once per layout;
        again only for other data or more clients), handed to the pool (started here when it is ours).
        Returns (its token, its slots, its shared tensors)."""
        key = (str(layout(shared)), str(layout(carry, rows=True)))
        s = self._sessions.get(key)
        if s is None or s["x"] is not x or s["y"] is not y or a > s["capacity"]:
            self.capacity = max(self.capacity, a)
            x.share_memory_()  # in place: the data are read-only during a run, and shared once
            y.share_memory_()
            self._sessions.pop(key, None)
            while len(self._sessions) >= SESSIONS:  # as many as the workers keep
                self._sessions.pop(next(iter(self._sessions)))
            s = self._sessions[key] = {
                "token": (os.getpid(), next(_TOKENS)), "x": x, "y": y, "capacity": self.capacity,
                "slots": tree_map(lambda t: t.new_empty((self.capacity, *t.shape[1:])).share_memory_(), carry),
                "shared": tree_map(lambda t: t.detach().clone().share_memory_(), shared),
            }
        if self._pool is None or (self._own_pool and self._pool.closed):  # ours failed: start anew
            self._pool = WorkerPool(self.workers)
        self._pool.setup(s["token"], self.model, self.kernels, x, y, s["slots"], s["shared"])
        return s["token"], s["slots"], s["shared"]


__all__ = ["InPlaceModel", "WorkerBackend", "WorkerError", "WorkerPool", "portable"]
