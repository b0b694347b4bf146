"""The loop over a run's rounds, on one object that holds every client (the round itself: engine/rounds.py).

    run = simulate(RunConfig(algo="fedala", rounds=50))
    run = simulate(cfg, model=my_module, data=my_data)      # your own nn.Module and FederatedData

Per round t (docs/design.md#federated-loop, the loop the FedALA paper evaluates), through the algorithm's
hooks (algorithms/base.py, the round interface):

1. ``select``: ⌊ρ·N⌋ clients without replacement (generator from (seed, t));
2. ``initialise``: every client (or, if the algorithm says so, every selected one) builds its local model from
   what the server sends (FedAvg: G; FedALA: ALA) — the engine writes what the hook returns (a ``Sent``);
3. every client's model (or ``personalise``'s: a personal model, a fine-tuned copy) is evaluated on its own
   test split *before* local training (pooled accuracy Σ correct / Σ n_test; ``eval_every`` thins this out);
4. ``local_train``: each selected client trains E epochs (plain SGD plus the algorithm's objective term by
   default); with ``stragglers`` some do only part of that work, or are dropped (engine/stragglers.py,
   docs/design.md#fedprox) — the engine writes the returned ``Trained`` models;
5. ``aggregate``: the server builds the new G from the models it received (an ``Aggregated``).

All clients' parameters live stacked on a leading client dimension (``local_params[name]`` is (N, *shape));
the backend (loop or vectorised, compute/backends.py; on a CPU local training in worker processes,
compute/workers.py) runs per-client steps over them. Every random draw comes from a generator derived from
(seed, round, client, purpose), so a run is deterministic on CPU and a resumed run equals an uninterrupted one.

The loop knows no algorithm: the hooks come from the config's algorithm spec (algorithms/registry.py), and
whatever an algorithm carries from round to round is its own state value, held here as ``sim.state`` and
checkpointed without being looked into. A hook sees a ``Round`` (its view of this round), never the engine.
What a round works on is declared (``rounds.RoundState``): a Simulation is that state for every client.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..algorithms.base import Setup, resolve_backend, state_from_dict, state_to_dict
from ..compute import rng
from ..compute.backends import make_backend
from ..compute.device import cpu_threads, environment, keep_freed_memory, resolve_device
from ..compute.workers import WorkerBackend, WorkerPool, worker_count
from ..config import DataConfig, RunConfig, watch_horizon
from ..data.federated import FederatedData
from ..errors import ConfigError, RunCancelled
from ..models import CUSTOM_PREFIX, build_model, fingerprint, num_parameters
from ..record.run import Run, torch_save
from . import rounds
from .recorder import Recorder

CHECKPOINT_FORMAT = 6  # 5: per-client bytes in the client rows, their seconds only where measured; 6: accuracies in %


def bind(cfg: RunConfig, data: FederatedData | None = None, model: nn.Module | None = None) -> RunConfig:
    """``cfg`` as the config of a run on ``data`` and ``model`` when they are given: data other than the
    config's own (arrays: ``FederatedData.from_arrays``) makes it ``custom:<name>`` with the data's content
    hash, a module makes ``model="custom:<hash>"`` of its architecture and initial weights. So a run is stored
    under what it ran on, never under the built-in data's or model's key."""
    named = data.config() if data is not None else None
    if named is not None and not cfg.data.same_data(named):
        if cfg.data.num_clients != data.num_clients and cfg.data != DataConfig():  # a setting that contradicts the data
            raise ConfigError("num_clients", cfg.data.num_clients,
                              f"{data.num_clients}, the number of clients in the data given")
        cfg = cfg.replace(data=named)
    if model is not None:
        if not isinstance(model, nn.Module):
            raise ConfigError("model", type(model).__name__, "a torch.nn.Module (or leave it out and set cfg.model)")
        cfg = cfg.replace(model=CUSTOM_PREFIX + fingerprint(model))
    return cfg


def prepared(cfg: RunConfig, data: FederatedData | None = None,
             model: nn.Module | None = None) -> tuple[RunConfig, torch.device, FederatedData, nn.Module]:
    """What a run is built from: ``cfg`` bound to ``data`` and ``model`` (:func:`bind`) and checked, its device,
    the clients' data there (default: built from ``cfg.data``) and the model's architecture and initial weights
    (a copy of ``model``, else cfg.model's built with the run's seed)."""
    cfg = bind(cfg, data, model).check()
    device = resolve_device(cfg.device)
    keep_freed_memory()  # compute/device.py: each step's tensors reuse the last step's pages
    data = (data or FederatedData.from_config(cfg.data, device)).to(device)
    if data.num_clients != cfg.data.num_clients:
        raise ConfigError("num_clients", cfg.data.num_clients,
                          f"{data.num_clients}, the number of clients in the data given")
    if model is None:
        if cfg.model.startswith(CUSTOM_PREFIX):
            raise ConfigError("model", cfg.model, "a model fedala_lab can build, or pass the module: this config "
                              "names a custom model", "simulate(cfg, model=my_module) / get_or_run(..., model=…)")
        model = build_model(cfg.model, data.input_shape, data.num_classes,
                            seed=rng.torch_seed(cfg.seed, 0, rng.SERVER, rng.MODEL_INIT))
    else:
        model = copy.deepcopy(model)
        _check_fits(model, data)
    model = model.to(device)
    for p in model.parameters():
        p.requires_grad_(False)  # the engine passes its own tensors to functional_call
    return cfg, device, data, model


def run_threads(cfg: RunConfig, device: torch.device) -> int | None:
    """torch CPU threads for a run: ``cfg.threads``, else one per process on a CPU.

    Why one: a training step on these models is small, and with torch's default threads every step waits for
    all of them; when another process keeps a core busy, the thread sharing that core is descheduled and each
    step waits for it (docs/design.md#performance). One thread per process degrades in proportion to the load
    instead; parallelism comes from processes (sweep workers, the app's queue)."""
    if cfg.threads is not None:
        return cfg.threads
    return 1 if device.type == "cpu" else None


class Simulation(rounds.RoundState):
    """One run: the round's state of every client (a :class:`~.rounds.RoundState`), services, the round loop.

    ``data``: the clients' data (default: built from ``cfg.data``); ``model``: an ``nn.Module`` of your own
    (its weights are the initial global model; default: ``cfg.model`` built with the run's seed). Either makes
    the run's config say so (:func:`bind`), so ``sim.cfg`` may differ from ``cfg``.

    ``workers``: the "workers" backend's processes (local training on a CPU, compute/workers.py): how many
    (None: one per core) or a :class:`~fedala_lab.compute.workers.WorkerPool` to share; they start at the first
    training call and stop when ``run()`` ends, or at :meth:`close`. ``channels_last`` (convolutions in that
    memory format) and ``fused_linear`` (the workers' linear layers updated inside the backward pass): faster
    on a CPU, equal to float rounding only (docs/design.md#performance); None: on when ``backend="auto"``
    picks the workers. ``graphs`` (experimental): the vectorised backend's steps from static buffers, CUDA
    graphs on a GPU (compute/backends.py).
    """

    def __init__(self, cfg: RunConfig, data: FederatedData | None = None, *, model: nn.Module | None = None,
                 chunk_clients: int | None = None, workers: int | WorkerPool | None = None,
                 channels_last: bool | None = None, fused_linear: bool | None = None, graphs: bool = False):
        if workers is not None and not isinstance(workers, WorkerPool):
            worker_count(workers)  # refused up front, whichever backend the run picks
        cfg, self.device, self.data, self.model = prepared(cfg, data, model)
        self.cfg = cfg
        self.num_params = num_parameters(self.model)  # decides the backend
        name = resolve_backend(cfg.backend, self.device, self.num_params)
        if channels_last is None:
            channels_last = cfg.backend == "auto" and name == "workers" and any(
                p.dim() == 4 for p in self.model.parameters())
        if fused_linear is None:
            fused_linear = cfg.backend == "auto" and name == "workers"
        backend = self._make_backend(name, chunk_clients, workers, channels_last, fused_linear, graphs)
        n = self.data.num_clients
        # the algorithm sees the config through a watch: whether it reads the run's total rounds decides
        # whether the store may continue this run to another length (reads_horizon)
        self.setup = Setup(watch_horizon(cfg), self.model, self.data, tracked=cfg.clients_to("track_clients", n),
                           backend=backend,
                           chunk_clients=chunk_clients, channels_last=bool(channels_last) and name == "workers",
                           graphs=graphs)
        self.algo = cfg.algorithm.build(self.setup)  # checks what it needs of the model (ALA's p…)
        self.untrained = self._check_local_work()
        self.dtype = next(self.model.parameters()).dtype

        self.param_names = list(self.setup.param_names)
        self.global_params = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        self.local_params = {k: v.unsqueeze(0).repeat(n, *[1] * v.dim()) for k, v in self.global_params.items()}
        self.local_buffers = {k: v.detach().unsqueeze(0).repeat(n, *[1] * v.dim()).clone()
                              for k, v in self.model.named_buffers()}
        self.round = 0
        self.seconds = 0.0
        self.recorder = self._recorder()
        self.branched_from: dict | None = None  # the stored run and round this run started from (start_from)
        self._horizon_read_before = False  # read by the part of this run a checkpoint holds
        self.state = self.algo.init_state(self.setup)  # the algorithm's, opaque

    def _recorder(self) -> Recorder:
        n = self.num_clients
        return Recorder(self.cfg.clients_to("track_clients", n), self.cfg.clients_to("snapshot_clients", n),
                        self.cfg.snapshot_from)

    def _make_backend(self, name: str, chunk_clients, workers, channels_last: bool, fused_linear: bool,
                      graphs: bool = False):
        if name != "workers":
            return make_backend(name, chunk_clients, graphs=graphs)
        if self.device.type != "cpu":
            raise ConfigError("backend", name, f"auto, loop or vectorised on a {self.device.type} device: the "
                              "worker processes train on the CPU")
        if chunk_clients is not None:
            raise ConfigError("chunk_clients", chunk_clients, "unset (None): the workers backend trains one "
                              "client at a time in each process", "set backend='vectorised'")
        return WorkerBackend(self.model, workers=workers, channels_last=channels_last, fused_linear=fused_linear,
                             capacity=self.data.num_clients)

    @property
    def backend(self):
        """The run's backend (local SGD and evaluation)."""
        return self.setup.backend

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
        untrained = [int(c) for c in np.flatnonzero(self.setup.batches_per_epoch(sizes) == 0)]
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

    # -- facts -------------------------------------------------------------------------------------

    @property
    def train_sizes(self) -> np.ndarray:
        return self.data.train_sizes

    def evaluate(self, params: dict, buffers: dict, split: str, clients=None) -> dict[str, np.ndarray]:
        """Sum of losses, number correct and number of samples per client on its ``split``."""
        return self.round_view(self.round).evaluate(params, buffers, split, clients)

    # -- the round loop ----------------------------------------------------------------------------

    def run(self, *, progress: bool = True, callback: Callable | None = None,
            checkpoint: str | Path | None = None) -> Run:
        """Run rounds ``self.round + 1 … cfg.rounds`` and return the recorded :class:`Run`.

        ``callback(sim, row)`` is called after each round with the round's summary row; returning
        ``False`` stops the run (a checkpoint is written first when ``checkpoint`` is given) by raising
        :class:`RunCancelled`.
        """
        from ..progress import bar as tqdm  # a notebook keeps how it ended

        try:
            with cpu_threads(self.threads):
                return self._run(tqdm, progress, callback, checkpoint)
        finally:
            self.close()  # no worker process outlives the run: returned, cancelled, diverged or interrupted

    @property
    def threads(self) -> int | None:
        """torch CPU threads for this run (:func:`run_threads`)."""
        return run_threads(self.cfg, self.device)

    def _run(self, tqdm, progress, callback, checkpoint) -> Run:
        cfg = self.cfg
        bar = tqdm(total=cfg.rounds, initial=self.round, desc=cfg.algo, unit="round", disable=not progress,
                   leave=False, dynamic_ncols=True)
        try:
            for t in range(self.round + 1, cfg.rounds + 1):
                row = self.run_round(t)
                if not math.isnan(row["acc"]):
                    bar.set_postfix(acc=f"{row['acc']:.2f}%", best=f"{row['best_acc']:.2f}%")
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

    @property
    def reads_horizon(self) -> bool:
        """Whether this run's algorithm has read ``cfg.rounds`` (config.HorizonWatched): then its rounds depend
        on its length and the store never continues it to another."""
        return self._horizon_read_before or self.setup.cfg.horizon_read

    def run_round(self, t: int) -> dict:
        """Round ``t`` (engine/rounds.py) on every client at once; returns the round's row."""
        start = rounds.begin(self, t)
        return rounds.finish(self, start, rounds.serve(self, start), self.to_run)

    # -- output and checkpoints --------------------------------------------------------------------

    def to_run(self, status: str = "complete") -> Run:
        clients, rounds = self.recorder.frames()
        meta = {
            "env": {**environment(self.device), "backend": self.backend.name,
                    "backend_choice": "auto" if self.cfg.backend == "auto" else "cfg.backend",
                    **(self.backend.info() if hasattr(self.backend, "info") else {}),
                    "torch_threads": torch.get_num_threads(),
                    "threads_choice": "cfg.threads" if self.cfg.threads is not None else "auto"},
            "code": self.cfg.code(),  # what computed it (the run key covers it)
            "param_names": self.param_names,
            "param_shapes": {k: list(v.shape[1:]) for k, v in self.local_params.items()},
            **self.algo.meta(self.state),
            "untrained_clients": list(self.untrained),
            "reads_horizon": self.reads_horizon,
            "seconds": self.seconds,
            "model_bytes": self.setup.param_bytes(),
            "train_sizes": self.train_sizes.tolist(),
            "test_sizes": self.data.test_sizes.tolist(),
            "tracked_clients": sorted(self.recorder.tracked),
        }
        if self.branched_from:
            meta["branched_from"] = dict(self.branched_from)
        if status == "complete" and self.round < self.cfg.rounds:
            status = "partial"
        return Run(config=self.cfg, clients=clients, rounds=rounds, arrays=self.recorder.arrays(), meta=meta,
                   status=status, tables=self.recorder.table_frames())

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
            "reads_horizon": self.reads_horizon,
        }

    def _recording(self) -> dict:
        """What this run records besides its result (not in the key, so a checkpoint must match it too)."""
        return {k: getattr(self.cfg, k) for k in ("track_clients", "snapshot_clients", "snapshot_from",
                                                  "record_train_loss")}

    def start_from(self, d: dict, prefix: Run, *, algo_state: str) -> None:
        """Start at round ``d["round"]`` from the engine state ``d`` of another config's run ``prefix`` that
        equals this run through that round (experiments/prefix.py decides which; docs/design.md#run-store).

        The models and buffers are ``d``'s. The algorithm's state: ``algo_state="same"``, ``d``'s (the same
        algorithm: an extension); ``"inner"``, a fresh state holding ``d``'s as the state of the method it wraps
        (``prefix`` ran that method, e.g. FedLAMA for FedLAMA+ALA before ALA starts); ``"fresh"``, the initial
        one. The records of rounds ≤ that round are ``prefix``'s, as far as this config records them. Raises
        ValueError (changing nothing) when the state does not fit this run's model, format or rounds."""
        t = int(d.get("round", -1))
        if d.get("format") != CHECKPOINT_FORMAT or not 1 <= t <= self.cfg.rounds:
            raise ValueError("not an engine state this run can start from")
        shapes = {k: tuple(v.shape) for k, v in self.local_params.items()}
        if {k: tuple(v.shape) for k, v in d["local"].items()} != shapes or set(d["global"]) != set(shapes):
            raise ValueError("the engine state holds another model")
        fresh = self.algo.init_state(self.setup)
        if algo_state == "same":
            state = state_from_dict(fresh, d["state"])
        elif algo_state == "inner":
            if not hasattr(fresh, "inner"):
                raise ValueError("this algorithm wraps no other's state")
            fresh.inner = state_from_dict(fresh.inner, d["state"])
            state = fresh
        else:
            state = fresh
        recorder = self._recorder()
        recorder.load_prefix(prefix, t, train_loss=self.cfg.record_train_loss)
        self._put(d, state)
        self.recorder = recorder
        self.branched_from = {"run": prefix.path.name if prefix.path else prefix.config.slug(), "round": t,
                              "seconds": float(d["seconds"])}
        # its rounds so far are the prefix's: read with the horizon if the prefix's were (then of this length)
        self._horizon_read_before = bool(prefix.meta.get("reads_horizon", True))

    def load_state_dict(self, d: dict) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (changing nothing) for another config or format."""
        if d.get("format") != CHECKPOINT_FORMAT or d.get("key") != self.cfg.key() or d.get("recorder") is None:
            raise ValueError("checkpoint belongs to another config or format")
        if d.get("recording", self._recording()) != self._recording():
            raise ValueError("checkpoint records other clients or quantities than this config")
        self._put(d, state_from_dict(self.state, d["state"]))
        self.recorder.load_state_dict(d["recorder"])
        self.branched_from = d.get("branched_from")
        self._horizon_read_before = bool(d.get("reads_horizon", True))  # unknown: as if read (never continued)

    def _put(self, d: dict, state) -> None:
        """The engine state ``d``'s models, round and seconds, and the algorithm state ``state``, as this run's."""
        self.global_params, self.local_params, self.local_buffers = (
            {k: v.to(self.device) for k, v in d[part].items()} for part in ("global", "local", "buffers"))
        self.round, self.seconds, self.state = int(d["round"]), float(d["seconds"]), state

    def save_checkpoint(self, path: str | Path, *, recorder: bool = True) -> None:
        """Write atomically: a temporary file in the same folder, then ``os.replace``. ``recorder=False``:
        the engine state alone (:meth:`state_dict`), as the run store keeps it."""
        write_checkpoint(self.state_dict(recorder=recorder), path)

    def load_checkpoint(self, path: str | Path) -> bool:
        """Restore from ``path`` if it holds a checkpoint of this config; False if absent or foreign."""
        return load_checkpoint(path, self.load_state_dict)


def write_checkpoint(d: dict, path: str | Path) -> None:
    """Write the state ``d`` to ``path`` atomically: a temporary file in the same folder, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch_save(d, tmp)  # a full disk: an OSError saying so
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never a half-written file left behind
        raise


def load_checkpoint(path: str | Path, load: Callable[[dict], None]) -> bool:
    """``load`` the state in ``path``; False if there is none, or it is torn or refused (``load`` raised)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        load(torch.load(path, map_location="cpu", weights_only=True))
    except Exception:  # noqa: BLE001 - a torn or foreign file is ignored, never trusted
        return False
    return True


def read_checkpoint(path: str | Path) -> Run | None:
    """What a stopped run recorded before its checkpoint, as a Run with status "partial" (its rounds,
    clients and ALA tables so far), without building its simulation; None for a checkpoint that is torn,
    of another format, or written before checkpoints held their config. Tensors are mapped, not read."""
    try:
        d = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
        if d.get("format") != CHECKPOINT_FORMAT or "config" not in d or not isinstance(d.get("recorder"), dict):
            return None  # another format, or an engine state without records (a run's kept state)
        cfg = RunConfig.from_dict(d["config"])
        if cfg.key() != d.get("key"):
            return None
    except Exception:  # noqa: BLE001 - a torn or foreign file is listed as nothing, never trusted
        return None
    rec = Recorder([], [], 1)
    rec.load_state_dict(d["recorder"])
    clients, rounds = rec.frames()
    return Run(config=cfg, clients=clients, rounds=rounds, arrays=rec.arrays(),
               meta={"seconds": float(d["seconds"]), "stopped_round": int(d["round"])}, status="partial",
               tables=rec.table_frames())


def simulate(cfg: RunConfig, data: FederatedData | None = None, *, model: nn.Module | None = None,
             progress: bool = True, callback: Callable | None = None, checkpoint: str | Path | None = None,
             resume: bool = True, workers: int | WorkerPool | None = None) -> Run:
    """Run one configured simulation and return its recorded :class:`Run` (not saved; see the store).

    ``data``: clients' data of your own (a ``FederatedData``, e.g. ``FederatedData.from_arrays``); ``model``:
    an ``nn.Module`` of your own, whose weights are the initial global model. The returned run's config says
    so (``custom:`` data and model, by content hash). ``workers``: training processes on a CPU (None: one
    per core). With ``checkpoint``, state is saved there every ``cfg.checkpoint_every`` rounds and, if
    ``resume``, a checkpoint found there is continued — giving the same result as an uninterrupted run.
    """
    sim = Simulation(cfg, data, model=model, workers=workers)
    if checkpoint and resume:
        sim.load_checkpoint(checkpoint)
    return sim.run(progress=progress, callback=callback, checkpoint=checkpoint)


def _check_fits(model: nn.Module, data: FederatedData) -> None:
    """A module given as the model must hold parameters and map a batch of the data's inputs to a tensor of one
    score per class and sample."""
    name = type(model).__name__
    first = next(model.parameters(), None)
    if first is None:
        raise ConfigError("model", name, "a module with parameters to train (it has none)")
    x = data.train_x[:2].to(first.device)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as err:  # noqa: BLE001 - any failure of the user's module: say what it was given
        raise ConfigError("model", name, f"a module that accepts inputs of shape {tuple(data.input_shape)} "
                          f"({data.train_x.dtype})", (str(err).splitlines() or [type(err).__name__])[0]) from None
    finally:
        model.train(was)
    if not isinstance(out, torch.Tensor):
        raise ConfigError("model", name, f"a module whose forward returns one tensor of scores, (batch, "
                          f"{data.num_classes}); it returns a {type(out).__name__}")
    if tuple(out.shape) != (len(x), data.num_classes):
        raise ConfigError("model", name, f"a module whose output has {data.num_classes} scores per sample (one "
                          f"per class, num_classes={data.num_classes}); it gives shape {tuple(out.shape)} for "
                          f"{len(x)} samples")
