"""The one round loop every algorithm runs on.

    run = simulate(RunConfig(algo="fedala", rounds=50))

Per round t (docs/design.md#federated-loop, the loop the FedALA paper evaluates):

1. select ⌊ρ·N⌋ clients without replacement (generator from (seed, t));
2. every client (or, if the algorithm says so, every selected one) initialises its local model from the
   global one (``algo.initialise``: FedAvg copies G, FedALA runs ALA);
3. every client's model is evaluated on its own test split *before* local training (pooled accuracy
   Σ correct / Σ n_test; ``eval_every`` thins this out);
4. each selected client trains E epochs of plain SGD from its initialised model; with ``stragglers`` some
   do only part of that work, or are dropped (engine/stragglers.py, docs/design.md#fedprox);
5. the server aggregates the models it received (``algo.aggregate``).

All clients' parameters live stacked on a leading client dimension (``local_params[name]`` is
(N, *shape)); the backend (loop or vectorised, compute/backends.py; on a CPU local training in worker
processes, compute/workers.py) runs per-client steps over them.
Every random draw comes from a generator derived from (seed, round, client, purpose), so a run is
deterministic on CPU and a resumed run equals an uninterrupted one.

The loop knows no algorithm: the pieces come from ``build_algorithm``, and whatever an algorithm carries
from round to round (ALA's weights, FedLAMA's intervals) is its own state value, held here as
``sim.state`` and checkpointed without being looked into.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..algorithms.base import state_from_dict, state_to_dict
from ..algorithms.registry import build_algorithm, training_parts
from ..compute import rng
from ..compute.backends import BatchPlan, make_backend
from ..compute.steps import make_eval_step, make_sgd_step
from ..compute.workers import WorkerBackend, WorkerPool
from ..config import RunConfig
from ..data.federated import FederatedData
from ..errors import ConfigError, RunCancelled, TrainingDiverged
from ..models import build_model, num_parameters
from ..record.run import Run
from .recorder import Recorder
from .stragglers import LocalWork, draw_work

SMALL_MODEL = 200_000  # parameters from which a client at a time beats the vectorised backend on a CPU
EVAL_CHUNK = 256  # rows per client per evaluation step (memory, not results, depends on it)
CHECKPOINT_FORMAT = 3  # 3: straggler columns in the recorder; 2: the algorithm's state as one typed value


def resolve_device(name: str) -> torch.device:
    """"auto" → cuda, then mps, then cpu; anything else must be available."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "a device this machine has (no CUDA GPU found); use auto or cpu")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("device", name, "a device this machine has (no Apple MPS found); use auto or cpu")
    return dev


def resolve_backend(name: str, device: torch.device, num_params: int) -> str:
    """"auto" → "vectorised", except a model over SMALL_MODEL parameters on a CPU → "workers".

    On a CPU a step of a large model is real arithmetic, and vmap turns its convolutions into slow
    grouped ones (docs/design.md#performance); small models are bound by per-step overhead, which vmap
    amortises. "workers" trains a client at a time in each of N worker processes (one per core, one
    thread each) and runs every other step a client at a time here, as "loop" does. The same rule picks
    the backend of any other steps (:meth:`Simulation.backend_for`).
    """
    if name != "auto":
        return name
    return "workers" if device.type == "cpu" and num_params >= SMALL_MODEL else "vectorised"


class Simulation:
    """State and shared services of one run; ``run()`` is the round loop.

    ``workers`` and ``channels_last`` concern the "workers" backend (local training in worker processes on
    a CPU, compute/workers.py): the number of processes (None: one per core, or ``$FEDALA_LAB_WORKERS``)
    or a :class:`~fedala_lab.compute.workers.WorkerPool` to share; ``channels_last`` runs conv models in
    that memory format there (equal to float rounding only, like changing threads). The workers start at
    the first training call and stop when ``run()`` ends, or at :meth:`close`.
    """

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, *, chunk_clients: int | None = None,
                 workers: int | WorkerPool | None = None, channels_last: bool = False):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.data = (data or FederatedData.from_config(cfg.data, self.device)).to(self.device)
        if self.data.num_clients != cfg.data.num_clients:
            raise ConfigError("num_clients", cfg.data.num_clients,
                              f"{self.data.num_clients}, the number of clients in the data given")
        self.model = build_model(cfg.model, self.data.input_shape, self.data.num_classes,
                                 seed=rng.torch_seed(cfg.seed, 0, rng.SERVER, rng.MODEL_INIT)).to(self.device)
        for p in self.model.parameters():
            p.requires_grad_(False)  # the engine passes its own tensors to functional_call
        self.algo = build_algorithm(cfg, self.model)  # checks what it needs of the model (ALA's p…)
        self.num_params = num_parameters(self.model)  # decides the backend
        self.untrained = self._check_local_work()
        self.sgd_step = make_sgd_step(self.model, cfg.lr, self.algo.grad_term)
        self.backend = self._make_backend(resolve_backend(cfg.backend, self.device, self.num_params),
                                          chunk_clients, workers, channels_last)
        self._backends = {self.backend.name: self.backend}
        self.dtype = next(self.model.parameters()).dtype

        n = self.num_clients
        self.param_names = [k for k, _ in self.model.named_parameters()]
        self.global_params = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        self.local_params = {k: v.unsqueeze(0).repeat(n, *[1] * v.dim()) for k, v in self.global_params.items()}
        self.local_buffers = {k: v.detach().unsqueeze(0).repeat(n, *[1] * v.dim()).clone()
                              for k, v in self.model.named_buffers()}
        self._bytes = {k: v.numel() * v.element_size() for k, v in self.global_params.items()}
        self.eval_step = make_eval_step(self.model)
        self.round = 0
        self.seconds = 0.0
        self.recorder = Recorder(cfg.clients_to("track_clients", n), cfg.clients_to("snapshot_clients", n),
                                 cfg.snapshot_from)
        self.branched_from: dict | None = None  # the stored run and round this run started from (start_from)
        self._plans: dict = {}
        self.state = self.algo.init_state(self) if self.algo.init_state else None  # the algorithm's, opaque

    def _make_backend(self, name: str, chunk_clients, workers, channels_last):
        if name != "workers":
            return make_backend(name, chunk_clients)
        if self.device.type != "cpu":
            raise ConfigError("backend", name, f"auto, loop or vectorised on a {self.device.type} device: the "
                              "worker processes train on the CPU")
        if chunk_clients is not None:
            raise ConfigError("chunk_clients", chunk_clients, "unset (None): the workers backend trains one "
                              "client at a time in each process", "set backend='vectorised'")
        build = functools.partial(training_parts, self.cfg, self.data.input_shape, self.data.num_classes)
        return WorkerBackend(build, self.sgd_step, workers=workers, channels_last=channels_last,
                             capacity=self.num_clients)

    def close(self) -> None:
        """Stop the backend's worker processes, if any (``run()`` does this when it ends)."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check_local_work(self) -> list[int]:
        """Clients without a single local batch (fewer train samples than a batch, with drop_last): the
        reference's DataLoader(drop_last=True) gives them no local training, and so do we, saying so.
        If no client has a batch, nothing would ever train: the config is refused."""
        cfg = self.cfg
        sizes = self.train_sizes
        untrained = [int(c) for c in np.flatnonzero(self.batches_per_epoch(sizes) == 0)]
        if len(untrained) == self.num_clients:
            largest = int(sizes.max()) if len(sizes) else 0
            if largest == 0:
                raise ConfigError("num_clients", cfg.data.num_clients,
                                  "fewer clients: with this many, no client holds a train sample")
            raise ConfigError("batch_size", cfg.batch_size,
                              f"at most {largest}, the largest client's train split: with drop_last=true no "
                              "client would have a full batch to train on",
                              "use a smaller batch_size, fewer clients, or drop_last=false")
        if untrained:
            import warnings

            shown = untrained if len(untrained) <= 12 else [*untrained[:12], "…"]
            warnings.warn(f"{len(untrained)} of {self.num_clients} clients ({', '.join(map(str, shown))}) hold "
                          f"fewer than batch_size={cfg.batch_size} train samples: with drop_last=true (as the "
                          "reference) they never train locally and keep the model they receive; "
                          "drop_last=false trains them on a partial batch", stacklevel=3)
        return untrained

    # -- facts the algorithms use ------------------------------------------------------------------

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def train_sizes(self) -> np.ndarray:
        return self.data.train_sizes

    @property
    def train_offsets(self) -> np.ndarray:
        return self.data.train_offsets

    def param_bytes(self, names) -> int:
        return sum(self._bytes[n] for n in names)

    def batches_per_epoch(self, n):
        """Local SGD batches in one pass over ``n`` train samples (an int or an array of them)."""
        b = self.cfg.batch_size
        return n // b if self.cfg.drop_last else -(-n // b)

    # -- services ----------------------------------------------------------------------------------

    def run_steps(self, step, carry, shared, plan, x, y, *, train: bool, aux_size: int = 1, timings=None):
        return self.backend.run(step, carry, shared, plan, x, y, train=train, model=self.model,
                                aux_size=aux_size, timings=timings)

    def backend_for(self, num_params: int):
        """The backend for steps through ``num_params`` parameters: ``cfg.backend`` when set, else the size
        rule of :func:`resolve_backend`. Local training uses the run's own backend (the whole model); ALA's
        head-only weight-learning steps are small, so they run vectorised even where a large model on a CPU
        trains a client at a time. Other steps never go to worker processes: "workers" means the loop here."""
        name = resolve_backend(self.cfg.backend, self.device, num_params)
        if name == "workers":
            name = "loop"
        if name not in self._backends:
            self._backends[name] = make_backend(name)
        return self._backends[name]

    def plan_from(self, batches: list[list[np.ndarray]]) -> BatchPlan:
        return BatchPlan.from_batches(batches, self.device)

    def gather(self, clients: torch.Tensor, params: dict | None = None, buffers: dict | None = None) -> dict:
        """A working copy of these clients' models: {"params": {…}, "buffers": {…}} with (A, …) tensors."""
        params = self.local_params if params is None else params
        buffers = self.local_buffers if buffers is None else buffers
        return {"params": {k: v[clients] for k, v in params.items()},
                "buffers": {k: v[clients] for k, v in buffers.items()}}

    def train_plan(self, t: int, clients: torch.Tensor, *, epochs: int | None = None,
                   steps: int | None = None, stream: int = rng.TRAIN_ORDER,
                   limits: dict[int, int] | None = None) -> BatchPlan:
        """Local SGD batches: ``epochs`` passes over each client's train split, or exactly ``steps`` batches;
        ``limits`` cuts some clients' work to their first so many batches (stragglers).

        Reference order by default: the split in its stored order every time, last partial batch dropped.
        """
        cfg = self.cfg
        ids = tuple(clients.cpu().tolist())
        key = (ids, epochs, steps, stream)
        cache = not cfg.shuffle and not limits  # stragglers' cuts change every round
        if cache and key in self._plans:
            return self._plans[key]
        b = cfg.batch_size
        batches = []
        for c in ids:
            n, off = int(self.train_sizes[c]), int(self.train_offsets[c])
            seq: list[np.ndarray] = []
            per_epoch = self.batches_per_epoch(n)
            if per_epoch == 0:
                batches.append(seq)
                continue
            epoch = 0
            while (steps is None and epoch < epochs) or (steps is not None and len(seq) < steps):
                order = (rng.generator(cfg.seed, t, c, stream, epoch).permutation(n) if cfg.shuffle
                         else np.arange(n))
                for j in range(per_epoch):
                    seq.append(off + order[j * b:(j + 1) * b])
                    if steps is not None and len(seq) == steps:
                        break
                epoch += 1
            batches.append(seq[:limits[c]] if limits and c in limits else seq)
        plan = self.plan_from(batches)
        if cache:
            self._plans[key] = plan
        return plan

    def local_work(self, t: int, selected: torch.Tensor, *, epochs: int | None = None,
                   steps: int | None = None) -> tuple[BatchPlan, LocalWork]:
        """Round ``t``'s local training plan of the selected clients, with the stragglers' work cut short
        or dropped (engine/stragglers.py; docs/design.md#fedprox), and who straggled."""
        ids = selected.cpu().numpy()
        per_epoch = self.batches_per_epoch(self.train_sizes[ids])
        full = per_epoch * epochs if steps is None else np.where(per_epoch > 0, steps, 0)
        work = draw_work(self.cfg, t, ids, full, self.num_clients)
        return self.train_plan(t, selected, epochs=epochs, steps=steps, limits=work.limits), work

    def eval_plan(self, split: str) -> BatchPlan:
        key = ("eval", split)
        if key not in self._plans:
            sizes = self.data.train_sizes if split == "train" else self.data.test_sizes
            offs = self.data.train_offsets if split == "train" else self.data.test_offsets
            b = self.cfg.batch_size
            batches = []
            for c in range(self.num_clients):
                n = int(sizes[c])
                if self.cfg.eval_drop_last and split == "test":
                    n = n // b * b  # the reference's DataLoader(drop_last=True) on the test split
                batches.append([offs[c] + np.arange(j, min(j + EVAL_CHUNK, n)) for j in range(0, n, EVAL_CHUNK)])
            self._plans[key] = self.plan_from(batches)
        return self._plans[key]

    def evaluate(self, params: dict, buffers: dict, split: str, clients=None) -> dict[str, np.ndarray]:
        """Sum of losses, number correct and number of samples per client on its ``split``."""
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.test_x, self.data.test_y)
        plan = self.eval_plan(split)
        carry = {"params": params, "buffers": buffers}
        if clients is not None:
            carry = self.gather(clients, params, buffers)
            plan = plan.take(clients.cpu().numpy())
        _, aux = self.run_steps(self.eval_step, carry, {}, plan, x, y, train=False, aux_size=2)
        return {"loss_sum": np.nansum(aux[..., 0], 1), "correct": np.nansum(aux[..., 1], 1),
                "num": plan.sizes.sum(1)}

    # -- the round loop ----------------------------------------------------------------------------

    def select(self, t: int) -> torch.Tensor:
        n = self.num_clients
        k = max(1, int(self.cfg.join_ratio * n))
        ids = np.arange(n) if k == n else np.sort(
            rng.generator(self.cfg.seed, t, rng.SERVER, rng.SELECT).choice(n, size=k, replace=False))
        return torch.as_tensor(ids, device=self.device)

    def run(self, *, progress: bool = True, callback: Callable | None = None,
            checkpoint: str | Path | None = None) -> Run:
        """Run rounds ``self.round + 1 … cfg.rounds`` and return the recorded :class:`Run`.

        ``callback(sim, row)`` is called after each round with the round's summary row; returning
        ``False`` stops the run (a checkpoint is written first when ``checkpoint`` is given) by raising
        :class:`RunCancelled`.
        """
        from tqdm.auto import tqdm

        try:
            with cpu_threads(self.threads):
                return self._run(tqdm, progress, callback, checkpoint)
        finally:
            self.close()  # no worker process outlives the run: returned, cancelled, diverged or interrupted

    @property
    def threads(self) -> int | None:
        """torch CPU threads for this run: ``cfg.threads``, else one per process on a CPU.

        Why one: a training step on these models is small, and with torch's default threads every step
        waits for all of them; when another process keeps a core busy, the thread sharing that core is
        descheduled and each step waits for it (measured: a 40 s MNIST round took 740 s with 2 threads
        and one core busy, see benchmarks/results.md). One thread per process degrades in proportion to
        the load instead; parallelism comes from processes (sweep workers, the app's queue).
        """
        if self.cfg.threads is not None:
            return self.cfg.threads
        return 1 if self.device.type == "cpu" else None

    def _run(self, tqdm, progress, callback, checkpoint) -> Run:
        cfg = self.cfg
        bar = tqdm(total=cfg.rounds, initial=self.round, desc=cfg.algo, unit="round", disable=not progress,
                   leave=False, dynamic_ncols=True)
        try:
            for t in range(self.round + 1, cfg.rounds + 1):
                row = self.run_round(t)
                self.round = t
                if not math.isnan(row["acc"]):
                    bar.set_postfix(acc=f"{100 * row['acc']:.2f}%", best=f"{100 * row['best_acc']:.2f}%")
                bar.update(1)
                if checkpoint and cfg.checkpoint_every and t % cfg.checkpoint_every == 0 and t < cfg.rounds:
                    self.save_checkpoint(checkpoint)
                if callback is not None and callback(self, row) is False:
                    if checkpoint:
                        self.save_checkpoint(checkpoint)
                    raise RunCancelled(f"run stopped after round {t} of {cfg.rounds}", self.to_run())
        finally:
            bar.close()
        return self.to_run()

    def run_round(self, t: int) -> dict:
        cfg, algo, rec = self.cfg, self.algo, self.recorder
        n = self.num_clients
        t_start = time.perf_counter()
        selected = algo.select(self, t) if algo.select else self.select(t)
        sel_mask = np.zeros(n, dtype=bool)
        sel_mask[selected.cpu().numpy()] = True
        everyone = torch.arange(n, device=self.device)

        # 2. local initialisation
        tic = time.perf_counter()
        init_clients = everyone if algo.initialise_all else selected
        bytes_down = algo.initialise(self, t, init_clients)
        rec.snapshot_models(t, "start", self.local_params)
        t_init = time.perf_counter() - tic

        # 3. evaluation before local training
        tic = time.perf_counter()
        evaluated = (t - 1) % cfg.eval_every == 0 or t == cfg.rounds
        nan = np.full(n, np.nan)
        test, init_loss = None, nan
        if evaluated:
            params, buffers = algo.personalise(self, t) if algo.personalise else (self.local_params,
                                                                                  self.local_buffers)
            test = self.evaluate(params, buffers, "test")
            if cfg.record_train_loss:
                tr = self.evaluate(self.local_params, self.local_buffers, "train")
                init_loss = tr["loss_sum"] / np.maximum(tr["num"], 1)
        t_eval = time.perf_counter() - tic

        # 4. local training of the selected clients
        tic = time.perf_counter()
        steps = algo.local_steps or cfg.local_steps  # a round of SGD steps rather than epochs when set
        plan, work = self.local_work(t, selected, epochs=None if steps else cfg.local_epochs, steps=steps)
        timings = [] if self.backend.name in ("loop", "workers") else None
        trained, aux = self.run_steps(self.sgd_step, self.gather(selected), {"global": self.global_params}, plan,
                                      self.data.train_x, self.data.train_y, train=True, timings=timings)
        for k, v in trained["params"].items():
            self.local_params[k][selected] = v
        for k, v in trained["buffers"].items():
            self.local_buffers[k][selected] = v
        valid = plan.sizes > 0  # aux is NaN where a client had no batch; a NaN loss elsewhere is divergence
        losses = np.where(valid, aux[..., 0], 0.0)
        n_steps = valid.sum(1)
        local_steps = np.zeros(n, dtype=np.int64)
        local_steps[sel_mask] = n_steps
        with np.errstate(all="ignore"):
            sel_train_loss = np.where(n_steps > 0, losses.sum(1) / np.maximum(n_steps, 1), np.nan)
        diverged = ~np.isfinite(losses).all(1)
        train_loss = nan.copy()
        train_loss[sel_mask] = sel_train_loss
        seconds = nan.copy()
        if timings is not None:
            seconds[sel_mask] = timings
        t_train = time.perf_counter() - tic

        senders = work.senders(selected)  # the selected clients that were not dropped
        sent_mask = sel_mask & ~work.dropped
        trained_loss = nan.copy()
        if evaluated and cfg.record_train_loss and len(senders):
            tic = time.perf_counter()
            tr = self.evaluate(self.local_params, self.local_buffers, "train", clients=senders)
            trained_loss[sent_mask] = tr["loss_sum"] / np.maximum(tr["num"], 1)
            t_eval += time.perf_counter() - tic
        rec.snapshot_models(t, "end", self.local_params)

        if diverged.any():
            self._diverged(t, selected.cpu().numpy()[diverged])

        # 5. server aggregation
        tic = time.perf_counter()
        bytes_up = algo.aggregate(self, t, senders) if len(senders) else 0  # nobody sent: G stays
        t_agg = time.perf_counter() - tic
        seconds_round = time.perf_counter() - t_start
        self.seconds += seconds_round

        # record
        if test is not None:
            with np.errstate(invalid="ignore"):  # a client without test samples has no accuracy (NaN)
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
        prev_best = [b for b in rec.rounds["best_acc"] if not math.isnan(b)]
        best = max([acc, *prev_best]) if not math.isnan(acc) else (prev_best[-1] if prev_best else math.nan)
        w_all, w_sel = self.train_sizes, self.train_sizes[sel_mask] * sent_mask[sel_mask]  # dropped: weight 0
        row = {
            "round": t, "acc": acc, "acc_std": acc_std, "test_loss": test_loss,
            "train_loss": float(np.nansum(sel_train_loss * w_sel) / max(w_sel.sum(), 1)),
            "init_loss": float(np.sum(init_loss * w_all) / w_all.sum()) if evaluated and cfg.record_train_loss
            else float("nan"),
            "trained_loss": float(np.nansum(trained_loss[sel_mask] * w_sel) / max(w_sel.sum(), 1))
            if evaluated and cfg.record_train_loss else float("nan"),
            "best_acc": best, "num_selected": int(sel_mask.sum()),
            "stragglers": int(work.straggler.sum()), "dropped": int(work.dropped.sum()),
            "bytes_up": int(bytes_up), "bytes_down": int(bytes_down), "seconds": seconds_round,
            "init_seconds": t_init, "eval_seconds": t_eval, "train_seconds": t_train, "aggregate_seconds": t_agg,
        }
        rec.round_row(row)
        return row

    def _diverged(self, t: int, bad: np.ndarray) -> None:
        self.round = t - 1
        run = self.to_run(status="diverged")
        run.message = msg = divergence_message(self.cfg, t, bad.tolist())
        raise TrainingDiverged(msg, run)

    # -- output and checkpoints --------------------------------------------------------------------

    def to_run(self, status: str = "complete") -> Run:
        clients, rounds, ala = self.recorder.frames()
        meta = {
            "env": {**environment(self.device), "backend": self.backend.name,
                    "backend_choice": "auto" if self.cfg.backend == "auto" else "cfg.backend",
                    **(self.backend.info() if hasattr(self.backend, "info") else {}),
                    "torch_threads": torch.get_num_threads(),
                    "threads_choice": "cfg.threads" if self.cfg.threads is not None else "auto"},
            "param_names": self.param_names,
            "param_shapes": {k: list(v.shape[1:]) for k, v in self.local_params.items()},
            **(self.algo.meta(self.state) if self.algo.meta else {}),
            "untrained_clients": list(self.untrained),
            "seconds": self.seconds,
            "model_bytes": self.param_bytes(self.param_names),
            "train_sizes": self.train_sizes.tolist(),
            "test_sizes": self.data.test_sizes.tolist(),
            "tracked_clients": sorted(self.recorder.tracked),
        }
        if self.branched_from:
            meta["branched_from"] = dict(self.branched_from)
        if status == "complete" and self.round < self.cfg.rounds:
            status = "partial"
        return Run(config=self.cfg, clients=clients, rounds=rounds, ala=ala, arrays=self.recorder.arrays(),
                   meta=meta, status=status, tables=self.recorder.table_frames())

    def state_dict(self, *, recorder: bool = True) -> dict:
        """Everything a resumed run needs. ``recorder=False``: the engine state alone (what the run store keeps
        as a branch point; the run's own tables hold the records)."""
        return {
            # the config as plain values: a stopped run can be listed (read_checkpoint) before it is resumed
            "format": CHECKPOINT_FORMAT, "key": self.cfg.key(), "config": self.cfg.to_dict(),
            "round": self.round, "seconds": self.seconds,
            "global": self.global_params, "local": self.local_params, "buffers": self.local_buffers,
            "state": state_to_dict(self.state), "recorder": self.recorder.state_dict() if recorder else None,
            "branched_from": self.branched_from, "recording": self._recording(),
        }

    def _recording(self) -> dict:
        """What this run records besides its result (not in the key, so a checkpoint must match it too)."""
        return {k: getattr(self.cfg, k) for k in ("track_clients", "snapshot_clients", "snapshot_from",
                                                  "record_train_loss")}

    def start_from(self, d: dict, prefix: Run, *, algo_state: bool) -> None:
        """Start at round ``d["round"]`` from the engine state ``d`` of another config's run ``prefix`` that
        equals this run through that round (experiments/prefix.py decides which; docs/design.md#run-store).

        The models and buffers are ``d``'s; the algorithm's state is ``d``'s when ``algo_state``, else fresh
        (valid while ALA has not run: its state is still the initial one); the records of rounds ≤ that round
        are ``prefix``'s, as far as this config records them. Raises ValueError (changing nothing) when the
        state does not fit this run's model, format or rounds."""
        t = int(d.get("round", -1))
        if d.get("format") != CHECKPOINT_FORMAT or not 1 <= t <= self.cfg.rounds:
            raise ValueError("not an engine state this run can start from")
        shapes = {k: tuple(v.shape) for k, v in self.local_params.items()}
        if {k: tuple(v.shape) for k, v in d["local"].items()} != shapes or set(d["global"]) != set(shapes):
            raise ValueError("the engine state holds another model")
        fresh = self.algo.init_state(self) if self.algo.init_state else None
        state = state_from_dict(fresh, d["state"]) if algo_state else fresh
        glob, local, buffers = ({k: v.to(self.device) for k, v in d[part].items()}
                                for part in ("global", "local", "buffers"))
        self.round, self.seconds = t, float(d["seconds"])
        self.global_params, self.local_params, self.local_buffers, self.state = glob, local, buffers, state
        n = self.num_clients
        self.recorder = Recorder(self.cfg.clients_to("track_clients", n), self.cfg.clients_to("snapshot_clients", n),
                                 self.cfg.snapshot_from)
        self.recorder.load_prefix(prefix, t, train_loss=self.cfg.record_train_loss)
        self.branched_from = {"run": prefix.path.name if prefix.path else prefix.config.slug(), "round": t,
                              "seconds": float(d["seconds"])}

    def load_state_dict(self, d: dict) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (changing nothing) for another config or format."""
        if d.get("format") != CHECKPOINT_FORMAT or d.get("key") != self.cfg.key() or d.get("recorder") is None:
            raise ValueError("checkpoint belongs to another config or format")
        if d.get("recording", self._recording()) != self._recording():
            raise ValueError("checkpoint records other clients or quantities than this config")
        state = state_from_dict(self.state, d["state"])
        glob, local, buffers = ({k: v.to(self.device) for k, v in d[part].items()}
                                for part in ("global", "local", "buffers"))
        self.round, self.seconds = int(d["round"]), float(d["seconds"])
        self.global_params, self.local_params, self.local_buffers, self.state = glob, local, buffers, state
        self.recorder.load_state_dict(d["recorder"])
        self.branched_from = d.get("branched_from")

    def save_checkpoint(self, path: str | Path, *, recorder: bool = True) -> None:
        """Write atomically: a temporary file in the same folder, then ``os.replace``. ``recorder=False``:
        the engine state alone (:meth:`state_dict`), as the run store keeps it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(self.state_dict(recorder=recorder), tmp)
        os.replace(tmp, path)

    def load_checkpoint(self, path: str | Path) -> bool:
        """Restore from ``path`` if it holds a checkpoint of this config; False if absent or foreign."""
        path = Path(path)
        if not path.is_file():
            return False
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
            self.load_state_dict(d)
        except Exception:  # noqa: BLE001 - a torn or foreign file is ignored, never trusted
            return False
        return True


def read_checkpoint(path: str | Path) -> Run | None:
    """What a stopped run recorded before its checkpoint, as a Run with status "partial" (its rounds,
    clients and ALA tables so far), without building its simulation; None for a checkpoint that is torn,
    of another format, or written before checkpoints held their config. Tensors are mapped, not read."""
    try:
        d = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
        if d.get("format") != CHECKPOINT_FORMAT or "config" not in d:
            return None
        cfg = RunConfig.from_dict(d["config"])
        if cfg.key() != d.get("key"):
            return None
    except Exception:  # noqa: BLE001 - a torn or foreign file is listed as nothing, never trusted
        return None
    rec = Recorder([], [], 1)
    rec.load_state_dict(d["recorder"])
    clients, rounds, ala = rec.frames()
    return Run(config=cfg, clients=clients, rounds=rounds, ala=ala, arrays=rec.arrays(),
               meta={"seconds": float(d["seconds"]), "stopped_round": int(d["round"])}, status="partial",
               tables=rec.table_frames())


def divergence_message(cfg: RunConfig, t: int, clients: list[int]) -> str:
    """Why a run diverged, the most likely cause first.

    FedProx's proximal step alone multiplies θ − G by (1 − lr·μ) per step: for lr·μ ≥ 2 that grows
    without bound whatever the data, and from lr·μ ≥ 1 on it overshoots G every step, so there μ is the
    most likely cause. Otherwise the step size is.
    """
    head = (f"training diverged in round {t}: the loss of client(s) {clients[:5]} became NaN or infinite. ")
    lr_text = (f"the learning rate lr={cfg.lr:g} is most likely too large for this model and batch size "
               f"{cfg.batch_size}; try a smaller lr")
    if cfg.uses_prox and cfg.mu * cfg.lr >= 1:
        return head + (f"FedProx's mu={cfg.mu:g} is most likely too large for lr={cfg.lr:g}: each step scales "
                       f"θ − G by 1 − lr·mu = {1 - cfg.lr * cfg.mu:.3g}, which must stay within (−1, 1), so "
                       f"try mu < {1 / cfg.lr:g} (1/lr; the FedProx paper's grid is 0.001 to 1). Otherwise "
                       + lr_text)
    return head + lr_text[0].upper() + lr_text[1:]


def simulate(cfg: RunConfig, data: FederatedData | None = None, *, progress: bool = True,
             callback: Callable | None = None, checkpoint: str | Path | None = None,
             resume: bool = True) -> Run:
    """Run one configured simulation and return its recorded :class:`Run` (not saved; see the store).

    With ``checkpoint``, state is saved there every ``cfg.checkpoint_every`` rounds and, if ``resume``,
    a checkpoint found there is continued — giving the same result as an uninterrupted run.
    """
    sim = Simulation(cfg, data)
    if checkpoint and resume:
        sim.load_checkpoint(checkpoint)
    return sim.run(progress=progress, callback=callback, checkpoint=checkpoint)


class cpu_threads:
    """Temporarily set torch's CPU threads (None: leave them as they are)."""

    def __init__(self, n: int | None):
        self.n, self.old = n, None

    def __enter__(self):
        if self.n is not None:
            self.old = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            torch.set_num_threads(self.old)
        return False


_ENV_CACHE: dict = {}


def environment(device: torch.device) -> dict:
    """Versions, device, git commit: enough to say where a number came from."""
    if "base" not in _ENV_CACHE:
        import sys

        import numpy
        import pandas

        from .._version import __version__

        commit = None
        try:
            here = Path(__file__).resolve().parent
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                    timeout=5, check=False).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
        _ENV_CACHE["base"] = {
            "fedala_lab": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": numpy.__version__, "pandas": pandas.__version__, "platform": platform.platform(),
            "git_commit": commit, "torch_threads": torch.get_num_threads(),
        }
    env = dict(_ENV_CACHE["base"])
    env["device"] = str(device)
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env
