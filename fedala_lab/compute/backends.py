"""Two ways to run one per-client step function over many clients' batches.

A *step* is a pure per-client function ``step(carry, shared, x, y, w) -> (new_carry, aux)``:

- ``carry``: this client's state (a dict pytree of tensors: its parameters, BN buffers, ALA weights…);
- ``shared``: what every client sees (the global model, hyper-parameters as tensors);
- ``x``, ``y``: one batch of this client's rows; ``w``: 0/1 sample weights (1 for real rows), so a loss
  is ``Σ w·ℓ / Σ w``; ``aux``: a 1-D tensor of per-step numbers (a loss…), at most the call's ``aux_size`` of
  them (a step may return fewer, e.g. one number per row of its batch: the rest stay NaN).

The engine and the algorithms write steps once; a backend decides how to run them:

- :class:`LoopBackend` runs a client at a time, batch after batch — the readable reference that mirrors
  Algorithm 1 of the paper.
- :class:`VectorisedBackend` stacks all clients' carries on a leading dimension and runs
  ``torch.func.vmap(step)`` over the clients that still have a batch at each step. Clients are ordered by
  their number of batches (longest first) so those are a contiguous prefix: slices, never copies
  (docs/design.md#performance: padding everyone to the largest client doubles the work). A shorter
  batch (a client's partial last batch) is padded and masked by ``w`` — exact, since the loss is a
  weighted mean — except when training a model with batch norm, whose batch statistics padded rows
  would change: then clients whose batch has another size run in their own slice with their real
  batch size.

Both return the carries in the caller's client order and the ``aux`` values as an (A, K, m) array
(NaN where a client had no batch at step k). They agree to float rounding (tested to 1e-5).

GPU memory: ``vmap`` over A clients holds A copies of the parameters, their gradients and A batches of
activations at once (20 ResNet-18 clients: ≈ 0.9 GB of parameters before any activation).
:class:`VectorisedBackend` therefore runs the clients of a step in chunks of at most ``chunk_clients``;
when a chunk hits CUDA out-of-memory it halves the chunk, restores whatever the failed call changed in
place (batch-norm statistics) and retries the same step, keeping the smaller chunk for the rest of the
run. Chunking changes only how many clients share one call, never a client's batch or update, so a
chunked run computes the unchunked one: bit for bit where a client's arithmetic does not depend on the
call's width (matrix products on CPU), to float rounding otherwise (docs/design.md: a vmapped conv is a
grouped conv, and batch norm's batched backward sums, in an order set by the number of clients). A retry
after out-of-memory equals running with the reduced chunk from the start, bit for bit (tested on CPU
with forced chunks and with a simulated out-of-memory error).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import vmap
from torch.utils._pytree import tree_flatten, tree_map

from .parallel import forward_threads, thread_map

Step = Callable[[dict, dict, torch.Tensor, torch.Tensor, torch.Tensor], tuple[dict, torch.Tensor]]


@dataclass
class BatchPlan:
    """Which data rows each of A clients uses at each of its steps.

    ``rows[i, k, :sizes[i, k]]`` are the row indices (into the data tensor the step reads) of client i's
    k-th batch; ``sizes[i, k] == 0`` means client i has no k-th batch. ``clients``: whose batches row i
    holds (client ids), where the plan was made for known clients (a round's training).
    """

    rows: torch.Tensor  # (A, K, B) int64 on the data's device
    sizes: np.ndarray  # (A, K) int64
    clients: tuple[int, ...] | None = None

    @classmethod
    def from_batches(cls, batches: list[list[np.ndarray]], device, *, clients=None) -> BatchPlan:
        a = len(batches)
        k = max((len(b) for b in batches), default=0)
        bmax = max((len(r) for b in batches for r in b), default=1)
        rows = np.zeros((a, k, max(bmax, 1)), dtype=np.int64)
        sizes = np.zeros((a, k), dtype=np.int64)
        for i, bs in enumerate(batches):
            for j, r in enumerate(bs):
                rows[i, j, :len(r)] = r
                sizes[i, j] = len(r)
        return cls(torch.as_tensor(rows, device=device), sizes, None if clients is None else tuple(clients))

    def take(self, clients) -> BatchPlan:
        """The plan of some of its clients (positions in this plan), in that order."""
        idx = np.asarray(clients, dtype=np.int64)
        rows = self.rows.index_select(0, torch.as_tensor(idx, device=self.rows.device))
        return BatchPlan(rows, self.sizes[idx], None if self.clients is None else tuple(self.clients[i] for i in idx))

    @property
    def num_clients(self) -> int:
        return self.sizes.shape[0]

    @property
    def num_steps(self) -> np.ndarray:
        """Batches per client."""
        return (self.sizes > 0).sum(1)

    def vector_order(self) -> np.ndarray:
        """Clients by number of batches (desc), then by size of their last batch (desc). Clients without
        a batch (fewer samples than a batch, with drop_last) come last."""
        nb = self.num_steps
        if not len(nb):
            return np.zeros(0, dtype=np.int64)
        if self.sizes.shape[1] == 0:  # nobody has a batch: any order will do
            return np.arange(len(nb))
        last = self.sizes[np.arange(len(nb)), np.maximum(nb - 1, 0)]
        return np.lexsort((-last, -nb))


def _aux_buffer(a, k, m, device):
    return torch.full((a, k, m), float("nan"), dtype=torch.float64, device=device)


def nhwc(t: torch.Tensor) -> torch.Tensor:
    """``t`` in channels-last memory format when it is a batch of images or a conv weight (4-D), else ``t``.

    Not ``t.contiguous(memory_format=torch.channels_last)``: with one channel (MNIST's images, the first
    conv's weights) that returns ``t`` itself, whose strides torch counts as both formats, and a CPU
    convolution given such a tensor takes a slower path than given true channels-last strides
    (docs/design.md#performance). ``Tensor.to`` writes those strides.
    """
    return t.to(memory_format=torch.channels_last) if t.dim() == 4 else t


class LoopBackend:
    """One client at a time, one batch at a time: the reference.

    A forward-only call (``train=False``: evaluation) of a step that can be rebuilt on a copy of its model
    (``step.rebind``, as :func:`~fedala_lab.compute.steps.make_eval_step` makes them) shares its clients out
    among :func:`~fedala_lab.compute.parallel.forward_threads` threads on a CPU, each client still run
    start to finish by one thread as here: the same numbers, bit for bit (compute/parallel.py).
    ``channels_last``: such forward passes take images and conv weights in that memory format (faster for
    convolutions on a CPU; equal to float rounding only).
    """

    name = "loop"

    def __init__(self, channels_last: bool = False):
        self.channels_last = channels_last

    def run(self, step: Step, carry: dict, shared: dict, plan: BatchPlan, x: torch.Tensor, y: torch.Tensor,
            *, train: bool, model: torch.nn.Module, aux_size: int = 1, timings: list | None = None):
        import time

        model.train(train)
        out = tree_map(torch.Tensor.clone, carry)
        aux = _aux_buffer(plan.num_clients, plan.sizes.shape[1], aux_size, x.device)

        cl = self.channels_last and not train and x.dim() == 4

        def client(i: int, step) -> float:
            t0 = time.perf_counter()
            ci = tree_map(lambda t: t[i], out)  # views: in-place buffer updates land in `out`
            if cl:  # a forward pass only: a copy of the conv weights in that format, `out` untouched
                ci = tree_map(nhwc, ci)
            batches = (plan.rows[i, k, : plan.sizes[i, k]] for k in range(int(plan.num_steps[i])))
            ci, values = client_steps(step, ci, shared, x, y, batches, nhwc if cl else None)
            for k, a in enumerate(values):
                aux[i, k, :a.shape[-1]] = a.to(aux.dtype)
            write_back(out, ci, slice(i, i + 1), unsqueeze=True)
            if timings is not None and x.device.type == "cuda":
                torch.cuda.synchronize(x.device)
            return time.perf_counter() - t0

        rebind = getattr(step, "rebind", None)
        if not train and rebind is not None:  # longest first: the last client to finish is a short one
            order = sorted(range(plan.num_clients), key=lambda i: (-int(plan.num_steps[i]), i))
            done = dict(zip(order, thread_map(client, order, threads=forward_threads(x.device), ctx=step,
                                              per_thread=lambda: rebind(copy.deepcopy(model)))))
            seconds = [done[i] for i in range(plan.num_clients)]
        else:
            with torch.enable_grad() if train else torch.no_grad():
                seconds = [client(i, step) for i in range(plan.num_clients)]
        if timings is not None:
            timings.extend(seconds)
        return out, aux.cpu().numpy()


def client_steps(step: Step, carry: dict, shared: dict, x: torch.Tensor, y: torch.Tensor, batches,
                 fmt=None) -> tuple[dict, list[torch.Tensor]]:
    """One client's steps, batch after batch: ``batches`` yields the row indices of each; ``fmt`` formats a
    batch of inputs (channels-last). Returns the client's carry after them and each step's aux values.
    The loop backend and the worker processes (workers.py) both run a client through this."""
    values = []
    for idx in batches:
        xb = x[idx] if fmt is None else fmt(x[idx])
        new, a = step(carry, shared, xb, y[idx], x.new_ones(len(idx)))
        if new:
            carry = {**carry, **new}  # a step returns only what it changed
        values.append(a.detach())
    return carry, values


class VectorisedBackend:
    """All clients at once: ``vmap`` over the clients that still have a batch at each step.

    ``chunk_clients`` caps the clients per ``vmap`` call (None = all at once). With ``auto_chunk`` (the
    default) a CUDA out-of-memory error halves the chunk and retries the step; ``chunk_clients`` then
    keeps the reduced size, ``oom_retries`` counts the halvings. A chunk of one client that still does
    not fit re-raises the error.

    ``graphs`` (experimental, off by default): steps that say they can (``step.graphable``: local SGD,
    evaluation, ALA's weight learning) of models without batch norm run from static buffers, one per call
    shape (clients of the call, batch width), that persist across calls: on CUDA each shape is captured
    once as a CUDA graph and replayed, a launch per step instead of hundreds; on a CPU the same buffers
    are called eagerly, which is how the bookkeeping is tested (it equals the plain path bit for bit).
    No out-of-memory retry there. See :class:`_StaticSteps`.
    """

    name = "vectorised"

    def __init__(self, chunk_clients: int | None = None, *, auto_chunk: bool = True, graphs: bool = False):
        if chunk_clients is not None and (not isinstance(chunk_clients, int) or chunk_clients < 1):
            from ..errors import ConfigError

            raise ConfigError("chunk_clients", chunk_clients, "a positive integer or None (all clients)")
        self.chunk_clients = chunk_clients
        self.auto_chunk = auto_chunk
        self.oom_retries = 0
        self.graphs = graphs
        self._static: dict = {}  # (step, layouts, clients) → _StaticSteps

    def run(self, step: Step, carry: dict, shared: dict, plan: BatchPlan, x: torch.Tensor, y: torch.Tensor,
            *, train: bool, model: torch.nn.Module, aux_size: int = 1, timings: list | None = None):
        """The clients' steps in batched calls. ``timings`` gets each client's share of the call's seconds, in
        proportion to the rows it processed (a batched call has no per-client clock)."""
        import time

        t0 = time.perf_counter()
        out, aux = self._run(step, carry, shared, plan, x, y, train=train, model=model, aux_size=aux_size)
        if timings is not None:  # aux is on the CPU: the device has finished the call
            rows = plan.sizes.sum(1).astype(np.float64)
            timings.extend(((time.perf_counter() - t0) * rows / max(rows.sum(), 1.0)).tolist())
        return out, aux

    def _run(self, step: Step, carry: dict, shared: dict, plan: BatchPlan, x: torch.Tensor, y: torch.Tensor,
             *, train: bool, model: torch.nn.Module, aux_size: int = 1):
        model.train(train)
        if (self.graphs and getattr(step, "graphable", False) and not _batch_dependent(model)
                and all(torch.is_tensor(t) for t in tree_flatten((carry, shared))[0])):
            return self._run_static(step, carry, shared, plan, x, y, train=train, aux_size=aux_size)
        a, k_max = plan.sizes.shape
        perm, rows, sizes, mask = _vector_order(plan, x)
        c = tree_map(lambda t: t.index_select(0, perm), carry)  # a working copy in vector order
        aux = _aux_buffer(a, k_max, aux_size, x.device)
        # a step with a batched form (batched.py) runs all the clients of a call in one pass, without vmap
        vstep = getattr(step, "batched", None) or vmap(step, in_dims=(0, None, 0, 0, 0))
        batch_dependent = _batch_dependent(model)
        exact_sizes = train and batch_dependent
        # batch norm updates its running statistics in place during the forward pass: a call that
        # fails half-way must be undone before it is retried (only auto_chunk retries, and never one client)
        restore_buffers = (train and batch_dependent and self.auto_chunk and isinstance(c.get("buffers"), dict)
                           and bool(c["buffers"]))
        grad_ctx = torch.enable_grad() if train else torch.no_grad()
        # clients in vector order: those with a batch at step k come first; the widest batch pads the others
        actives, widths = (sizes > 0).sum(0).tolist(), sizes.max(0, initial=0).tolist()
        with grad_ctx:
            for k in range(k_max):
                if exact_sizes:
                    segments = _segments(sizes[:, k], self.chunk_clients)
                else:  # every client with a batch at step k, padded to the widest batch
                    active = actives[k]
                    segments = _split([(0, active, widths[k])] if active else [], self.chunk_clients)
                queue = deque(segments)
                while queue:
                    s, e, bs = queue.popleft()
                    saved = (tree_map(lambda t, s=s, e=e: t[s:e].clone(), c["buffers"])
                             if restore_buffers and e - s > 1 else None)
                    try:
                        sub = rows_of(c, s, e)
                        idx = rows[s:e, k, :bs]
                        new, out = vstep(sub, shared, x[idx], y[idx], mask[s:e, k, :bs])
                    except torch.cuda.OutOfMemoryError:
                        sub = new = out = None  # drop references to the failed call's tensors
                        if not self.auto_chunk or e - s <= 1:
                            raise
                        if saved is not None:
                            write_back(c["buffers"], saved, slice(s, e))
                        self._shrink(e - s, x.device)
                        queue = deque(_split([(s, e, bs), *queue], self.chunk_clients))
                        continue
                    if new:
                        write_back(c, new, slice(s, e))
                    aux[s:e, k, :out.shape[-1]] = out.detach().to(aux.dtype)
        inv = _inverse(perm)
        aux_np = aux.index_select(0, inv).cpu().numpy()
        return tree_map(lambda t: t.index_select(0, inv), c), aux_np

    def _run_static(self, step, carry, shared, plan, x, y, *, train: bool, aux_size: int):
        """:meth:`run` through persistent static buffers (``graphs``): the same steps in the same order."""
        a, k_max = plan.sizes.shape
        perm, rows, sizes, mask = _vector_order(plan, x)
        key = (step, str(layout(carry)), str(layout(shared)), a)
        st = self._static.get(key)
        if st is None:
            st = self._static[key] = _StaticSteps(step, carry, shared, x.device)
        st.load(carry, perm, shared, x, y)
        aux = _aux_buffer(a, k_max, aux_size, x.device)
        with torch.enable_grad() if train else torch.no_grad():
            for k in range(k_max):
                active = int((sizes[:, k] > 0).sum())
                if not active:
                    continue
                bs = int(sizes[:active, k].max())
                for s, e, b in _split([(0, active, bs)], self.chunk_clients):
                    got = st.step(s, e, b, rows[s:e, k, :b], mask[s:e, k, :b])
                    aux[s:e, k, :got.shape[-1]] = got.to(aux.dtype)
        inv = _inverse(perm)
        return tree_map(lambda t: t.index_select(0, inv), st.carry), aux.index_select(0, inv).cpu().numpy()

    def _shrink(self, failed: int, device: torch.device) -> None:
        """After an out-of-memory error on ``failed`` clients: half as many per call from now on."""
        import warnings

        self.chunk_clients = max(1, (failed + 1) // 2)
        self.oom_retries += 1
        if device.type == "cuda":
            torch.cuda.empty_cache()  # hand the failed call's cached blocks back before retrying
        warnings.warn(f"out of GPU memory with {failed} clients per vmap call; retrying with "
                      f"{self.chunk_clients} (set chunk_clients to start there)", stacklevel=3)


class _StaticSteps:
    """One step function's persistent buffers for the graphs mode of :class:`VectorisedBackend`.

    The clients' carry (in vector order), what they share and the data live in buffers that keep their
    addresses from call to call; a call copies its inputs in (:meth:`load`). Each call shape (clients
    [s, e), batch width b) gets its own row-index and mask buffers and a function of them alone: on CUDA it
    is warmed up twice on a scratch copy of the carry (so the clients' models do not move), captured as a
    CUDA graph (capture records kernels without running them) and replayed from then on; elsewhere it is
    called as it is. Replaying runs the kernels the eager step runs, on the same addresses: the same floats.
    """

    def __init__(self, step, carry, shared, device: torch.device):
        self.vstep = getattr(step, "batched", None) or vmap(step, in_dims=(0, None, 0, 0, 0))
        self.cuda = device.type == "cuda"
        self.carry = tree_map(torch.empty_like, carry)
        self.shared = tree_map(torch.empty_like, shared)
        self.x = self.y = None
        self._src = None  # (x, y, their versions) last copied in
        self.shapes: dict[tuple[int, int, int], tuple] = {}

    def load(self, carry, perm: torch.Tensor, shared, x, y) -> None:
        """Copy a call's inputs in: ``carry`` permuted by ``perm`` (vector order), ``shared``, and the data
        when they are other tensors than last time or were changed since."""
        for d, s_ in zip(tree_flatten(self.carry)[0], tree_flatten(carry)[0]):
            torch.index_select(s_, 0, perm, out=d)
        for d, s_ in zip(tree_flatten(self.shared)[0], tree_flatten(shared)[0]):
            d.copy_(s_)
        if self._src is None or self._src[0] is not x or self._src[1] is not y \
                or self._src[2] != (x._version, y._version):
            if self.x is None or self.x.shape != x.shape or self.y.shape != y.shape:
                if self.shapes:  # new data addresses: every captured shape reads the old ones
                    self.shapes.clear()
                self.x, self.y = torch.empty_like(x), torch.empty_like(y)
            self.x.copy_(x)
            self.y.copy_(y)
            self._src = (x, y, (x._version, y._version))

    def _fn(self, carry, s: int, e: int, idx: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        new, out = self.vstep(tree_map(lambda t: t[s:e], carry), self.shared, self.x[idx], self.y[idx], mask)
        if new:
            write_back(carry, new, slice(s, e))
        return out.detach()

    def step(self, s: int, e: int, b: int, idx: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Clients [s, e) take their step on rows ``idx`` (e − s, b) weighted by ``mask``; their aux values."""
        shape = self.shapes.get((s, e, b))
        if shape is None:
            shape = self.shapes[(s, e, b)] = self._build(s, e, idx.clone(), mask.clone())
        idx_buf, mask_buf, graph, out = shape
        idx_buf.copy_(idx)
        mask_buf.copy_(mask)
        if graph is None:
            return self._fn(self.carry, s, e, idx_buf, mask_buf)
        graph.replay()
        return out  # static: read before this shape's next replay (the caller copies it at once)

    def _build(self, s: int, e: int, idx: torch.Tensor, mask: torch.Tensor) -> tuple:
        if not self.cuda:
            return idx, mask, None, None
        scratch = tree_map(torch.clone, self.carry)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation (cuDNN, cuBLAS, autograd) before capture
            for _ in range(2):
                self._fn(scratch, s, e, idx, mask)
        torch.cuda.current_stream().wait_stream(side)
        del scratch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._fn(self.carry, s, e, idx, mask)
        return idx, mask, graph, out


def layout(tree, rows: bool = False) -> list:
    """A tree's structure and its tensors' shapes and dtypes (``rows``: per row, the leading dimension aside):
    what buffers made for one tree must match to take another."""
    leaves, spec = tree_flatten(tree)
    return [str(spec), *[(tuple(t.shape[1:] if rows else t.shape), t.dtype) for t in leaves]]


def _vector_order(plan: BatchPlan, x: torch.Tensor):
    """``plan`` in vector order: (the permutation, its rows, its sizes, the 0/1 row weights (A, K, B))."""
    order = plan.vector_order()
    perm = torch.as_tensor(order, device=x.device)
    rows = plan.rows.index_select(0, perm)
    sizes = plan.sizes[order]
    mask = torch.arange(rows.shape[2], device=x.device) < torch.as_tensor(sizes, device=x.device)[..., None]
    return perm, rows, sizes, mask.to(x.dtype)


def _inverse(perm: torch.Tensor) -> torch.Tensor:
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm), device=perm.device)
    return inv


def _batch_dependent(model: torch.nn.Module) -> bool:
    """True if a module's training output depends on the other rows of the batch (batch norm)."""
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _segments(sizes_k: np.ndarray, chunk: int | None):
    """Contiguous runs [s, e) of equal nonzero batch size in one step's column, cut by ``_split``."""
    out, s, n = [], 0, len(sizes_k)
    while s < n:
        if sizes_k[s] == 0:
            s += 1
            continue
        e = s
        while e < n and sizes_k[e] == sizes_k[s]:
            e += 1
        out.append((s, e, int(sizes_k[s])))
        s = e
    return _split(out, chunk)


def _split(segments, chunk: int | None):
    """Cut segments [s, e) into pieces of at most ``chunk`` clients (None: leave them whole)."""
    if not chunk:
        return list(segments)
    return [(i, min(i + chunk, e), bs) for s, e, bs in segments for i in range(s, e, chunk)]


def rows_of(tree, s: int, e: int):
    """Rows ``s:e`` of every tensor in a carry, as views: a nested dict walked directly (torch's pytree costs
    a step's worth of the lecture's arithmetic a call), anything else through it."""
    if isinstance(tree, dict):
        return {k: rows_of(v, s, e) for k, v in tree.items()}
    if torch.is_tensor(tree):
        return tree[s:e]
    return tree_map(lambda t: t[s:e], tree)


def write_back(dst: dict, src: dict, where: slice, unsqueeze: bool = False) -> None:
    """Copy the (nested dict) carry ``src`` into rows ``where`` of ``dst``, key by key (a tensor that is already
    there, updated in place, is left alone)."""
    for name, s_ in src.items():
        d = dst[name]
        if isinstance(s_, dict):
            write_back(d, s_, where, unsqueeze)
            continue
        tgt = d[where]
        if tgt.data_ptr() != s_.data_ptr():  # BN buffers were already updated in place
            tgt.copy_(s_.unsqueeze(0) if unsqueeze else s_)


def make_backend(name: str, chunk_clients: int | None = None, *, channels_last: bool = False,
                 graphs: bool = False):
    """The backend called ``name``; ``chunk_clients`` caps clients per vmap call and ``graphs`` replays steps
    from static buffers (vectorised only); ``channels_last``: the loop's forward passes in that memory
    format."""
    if name == "loop":
        if chunk_clients is not None:  # it would be ignored: say so rather than run something else
            from ..errors import ConfigError

            raise ConfigError("chunk_clients", chunk_clients,
                              "unset (None): the loop backend trains one client at a time",
                              "set backend='vectorised'; backend='auto' picks loop for large models on a CPU")
        return LoopBackend(channels_last)
    return VectorisedBackend(chunk_clients, graphs=graphs)


__all__ = ["BatchPlan", "LoopBackend", "VectorisedBackend", "client_steps", "layout", "make_backend", "write_back"]
