"""Loss landscapes of local training (FedALA paper Fig. 4), by the method of Li et al. (NeurIPS 2018).

    >>> ls = compute_landscape({"FedAvg": fedavg_run, "FedALA": fedala_run}, client=4, rounds=(25, 50))
    >>> ls.loss.shape, ls.explained_variance, ls.points()     # grid, C1/C2 variance, projected models

How it is computed (docs/design.md#loss-surface):

1. Points: the tracked client's flattened local models at the start (after initialisation) and at the end
   (after local training) of every round in the window, for every run compared. They come from the run's
   snapshots (``snapshot_clients``/``snapshot_from`` in the config).
2. Anchor: the last run's last end-of-round model (FedALA's, so FedALA ends at (0, 0)).
3. Basis: the top two principal components of (point − anchor) over the points of *all* runs, so both
   trajectories live in one shared plane. Raw parameter units, no filter normalisation (Li et al.'s
   trajectory plots do the same); the explained variance ratio labels the axes ("C1: 43.21 %").
   Computed through the n × n Gram matrix (n points ≪ P parameters), in float64.
4. Surface: the client's local loss (mean cross-entropy) at anchor + x·c1 + y·c2 on a grid over the
   bounding box of the projected points plus a margin, evaluated on one fixed subset of the client's data.
   Grid points are evaluated together: ``torch.func.vmap`` over flattened parameter vectors through
   ``functional_call``, in chunks sized to a memory budget.
5. Honesty: the models lie *off* the plane, so the contour under a point is not its loss. Every point
   therefore also carries its true loss (the model itself evaluated on the same subset) and its residual
   distance from the plane.

Compute only: this module never imports matplotlib (``fedala_lab.figures.trajectory`` draws).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..compute.parallel import forward_threads, thread_map
from ..errors import ConfigError, DataError

# Floats of working memory one chunk of grid points may use (parameters + activations): 64 M ≈ 256 MB.
MEMORY_BUDGET = 64 * 2**20


# --------------------------------------------------------------------------------------------------
# PCA plane


def pca_directions(points: np.ndarray | torch.Tensor, anchor: np.ndarray | torch.Tensor,
                   k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Top-k principal directions of ``points − anchor`` (rows), and their explained variance ratios.

    As Li et al. (and scikit-learn's PCA) the differences are centred before the decomposition; the
    directions are unit vectors (k, P) in float64. The sign of each is fixed so that its largest
    loading on the points is positive (a deterministic choice, like scikit-learn's ``svd_flip``).
    Works through the n × n Gram matrix, accumulated over blocks of columns in float64, so a few hundred
    snapshots of a 582k-parameter CNN never need a float64 copy of all of them.
    Raises :class:`DataError` if the points span fewer than k dimensions.
    """
    pts, anc = _as_tensor(points), _as_tensor(anchor)
    n = pts.shape[0]
    if n < k + 1:
        raise DataError(f"a {k}-D PCA plane needs at least {k + 1} model snapshots, got {n}")
    gram = torch.zeros(n, n, dtype=torch.float64)
    for cols in _column_blocks(pts.shape[1]):
        dc = _centred(pts, anc, cols)
        gram += dc @ dc.T
    vals, vecs = torch.linalg.eigh(gram)
    vals, vecs = vals.flip(0), vecs.flip(1)  # descending
    total = float(vals.clamp_min(0).sum())
    if total <= 0 or float(vals[k - 1]) <= 1e-12 * total:
        raise DataError(f"the model snapshots span fewer than {k} dimensions; nothing to project")
    u = vecs[:, :k]
    for j in range(k):
        if u[u[:, j].abs().argmax(), j] < 0:
            u[:, j] = -u[:, j]
    comps = torch.empty(k, pts.shape[1], dtype=torch.float64)
    for cols in _column_blocks(pts.shape[1]):
        comps[:, cols] = (u.T @ _centred(pts, anc, cols)) / vals[:k, None].sqrt()  # orthonormal rows
    return comps.numpy(), (vals[:k] / total).numpy()


def project(points, anchor, basis) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates (n, 2) of ``points`` in the plane anchor + span(basis), and their distances off it."""
    pts, anc, b = _as_tensor(points), _as_tensor(anchor), _as_tensor(basis).to(torch.float64)
    xy = torch.zeros(pts.shape[0], b.shape[0], dtype=torch.float64)
    for cols in _column_blocks(pts.shape[1]):
        xy += _diff(pts, anc, cols) @ b[:, cols].T
    res2 = torch.zeros(pts.shape[0], dtype=torch.float64)
    for cols in _column_blocks(pts.shape[1]):  # second pass: exact residuals, no cancellation
        res2 += ((_diff(pts, anc, cols) - xy @ b[:, cols]) ** 2).sum(1)
    return xy.numpy(), res2.sqrt().numpy()


_BLOCK = 1 << 16  # columns per block: 300 snapshots × 65,536 × 8 bytes = 150 MB at most


def _column_blocks(p: int):
    return [slice(j, min(j + _BLOCK, p)) for j in range(0, p, _BLOCK)]


def _as_tensor(a) -> torch.Tensor:
    return a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))


def _diff(pts: torch.Tensor, anc: torch.Tensor, cols: slice) -> torch.Tensor:
    return pts[..., cols].to(torch.float64) - anc[cols].to(torch.float64)


def _centred(pts: torch.Tensor, anc: torch.Tensor, cols: slice) -> torch.Tensor:
    d = _diff(pts, anc, cols)
    return d - d.mean(0, keepdim=True)


# --------------------------------------------------------------------------------------------------
# evaluating many parameter vectors at once


class LossFunction:
    """Mean cross-entropy of a model on fixed data (x, y), as a function of flat parameter vectors.

    ``loss(flat)`` takes (G, P) and returns (G,) losses: the G parameter vectors are evaluated together
    with ``vmap(functional_call)``, in chunks so parameters plus activations stay within ``memory``
    floats. ``param_names``/``param_shapes`` give the flattening order (the run's ``meta``).
    """

    def __init__(self, model: torch.nn.Module, param_names: Sequence[str], param_shapes: Mapping[str, Sequence[int]],
                 x: torch.Tensor, y: torch.Tensor, *, memory: int = MEMORY_BUDGET):
        buffers = dict(model.named_buffers())
        if any(b.numel() for b in buffers.values()):
            # Snapshots hold parameters only; a batch-norm model's loss would need the client's statistics.
            raise ConfigError("model", type(model).__name__,
                              "a model without batch norm buffers for loss surfaces (snapshots hold "
                              "parameters only)")
        self.model = model.eval()
        self.names = list(param_names)
        self.shapes = [tuple(int(s) for s in param_shapes[n]) for n in self.names]
        self.sizes = [int(np.prod(s)) if len(s) else 1 for s in self.shapes]
        self.num_params = sum(self.sizes)
        self.x, self.y = x, y
        self.device = x.device
        self.dtype = next(iter(model.parameters())).dtype
        per_point = self.num_params + len(x) * _activation_floats(model, x[:1])
        self.chunk = max(1, int(memory // max(per_point, 1)))
        self._batched = self._batched_on(self.model)

    def _batched_on(self, model: torch.nn.Module):
        """(G, P) flat vectors -> (G,) losses, through ``model`` (each thread needs its own: parallel.py)."""
        from torch.func import functional_call, vmap

        def one(flat):
            parts = torch.split(flat, self.sizes)
            params = {n: p.reshape(s) for n, p, s in zip(self.names, parts, self.shapes)}
            out = functional_call(model, params, (self.x,))
            return torch.nn.functional.cross_entropy(out, self.y)

        return vmap(one)

    def __call__(self, flat) -> np.ndarray:
        flat = torch.as_tensor(flat)
        if flat.ndim == 1:
            flat = flat[None]
        if flat.shape[1] != self.num_params:
            raise DataError(f"parameter vectors have {flat.shape[1]} entries, the model {self.num_params}")
        out = []
        with torch.inference_mode():
            for i in range(0, len(flat), self.chunk):
                out.append(self._batched(flat[i:i + self.chunk].to(self.device, self.dtype)))
        return _to_numpy(out)

    def surface(self, anchor, basis, xs, ys, progress: bool = False) -> np.ndarray:
        """Losses (len(ys), len(xs)) at anchor + x·basis[0] + y·basis[1] for every grid point."""
        # The grid is built where it is evaluated (no host copy per chunk), in float64; MPS has no
        # float64, so there it is built on the host as before.
        dev = self.device if self.device.type != "mps" else torch.device("cpu")
        a = torch.as_tensor(np.asarray(anchor), dtype=torch.float64, device=dev)
        b = torch.as_tensor(np.asarray(basis), dtype=torch.float64, device=dev)
        gx, gy = np.meshgrid(np.asarray(xs, np.float64), np.asarray(ys, np.float64))  # (ny, nx)
        coords = torch.as_tensor(np.stack([gx.ravel(), gy.ravel()], 1), device=dev)
        from ..progress import bar as tqdm  # a notebook keeps how it ended

        starts = range(0, len(coords), self.chunk)
        bar = tqdm(total=len(starts), desc="loss surface", unit="chunk", disable=not progress, leave=False)

        # Parameters are built chunk by chunk (a 21×21 grid of a 582k-parameter CNN is 1 GB at once); on a
        # CPU the chunks are shared out among threads, each computed as in one thread (compute/parallel.py).
        def chunk(i: int, batched) -> torch.Tensor:
            with torch.inference_mode():
                flat = (a[None] + coords[i:i + self.chunk] @ b).to(self.dtype).to(self.device)
                out = batched(flat)
            bar.update(1)
            return out

        threads = forward_threads(self.device)
        out = thread_map(chunk, starts, threads=threads, ctx=self._batched,
                         per_thread=lambda: self._batched_on(copy.deepcopy(self.model)))
        bar.close()
        return _to_numpy(out).reshape(gx.shape)


def _to_numpy(parts: list[torch.Tensor]) -> np.ndarray:
    """Losses gathered on the device, copied to the host once (one sync, not one per chunk)."""
    return torch.cat(parts).cpu().double().numpy() if parts else np.zeros(0)


def _activation_floats(model: torch.nn.Module, x1: torch.Tensor) -> int:
    """Floats the leaf modules output for one sample (a memory estimate for chunking)."""
    total = [0]
    hooks = [m.register_forward_hook(lambda _m, _i, o: total.__setitem__(0, total[0] + o.numel()))
             for m in model.modules() if not list(m.children())]
    try:
        with torch.inference_mode():
            model(x1)
    finally:
        for h in hooks:
            h.remove()
    return max(total[0], 1)


# --------------------------------------------------------------------------------------------------
# the landscape of recorded runs


@dataclass
class Trajectory:
    """One run's path through the plane: start-of-round and end-of-round models of the tracked client."""

    label: str
    rounds: np.ndarray  # (R,)
    start_xy: np.ndarray  # (R, 2) after local initialisation (FedAvg: G; FedALA: ALA's blend)
    end_xy: np.ndarray  # (R, 2) after local training
    start_loss: np.ndarray  # (R,) true local loss of the model itself (not of its projection)
    end_loss: np.ndarray
    start_residual: np.ndarray  # (R,) distance of the model from the plane (parameter units)
    end_residual: np.ndarray
    algo: str = ""  # the run's algorithm (its colour in the figures)

    def frame(self) -> pd.DataFrame:
        """Tidy: label, round, phase (start/end), x, y, loss, residual."""
        rows = []
        for phase, xy, loss, res in (("start", self.start_xy, self.start_loss, self.start_residual),
                                     ("end", self.end_xy, self.end_loss, self.end_residual)):
            rows.append(pd.DataFrame({"label": self.label, "round": self.rounds, "phase": phase,
                                      "x": xy[:, 0], "y": xy[:, 1], "loss": loss, "residual": res}))
        return pd.concat(rows).sort_values(["round", "phase"], ascending=[True, False], kind="stable") \
            .reset_index(drop=True)

    @property
    def max_residual(self) -> float:
        """The largest distance of any of the run's models from the plane."""
        return float(max(self.start_residual.max(), self.end_residual.max()))

    def path_length(self) -> float:
        """Length of the path start₁ → end₁ → start₂ → … in the plane (a scale for the residuals)."""
        pts = self.path()
        return float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum()) if len(pts) > 1 else 0.0

    def path(self) -> np.ndarray:
        """(2R, 2) points in visiting order: start₁, end₁, start₂, end₂, …"""
        return np.stack([self.start_xy, self.end_xy], 1).reshape(-1, 2)


@dataclass
class Landscape:
    """A loss surface on a PCA plane and the trajectories projected onto it (Fig. 4 data)."""

    xs: np.ndarray  # (nx,) C1 coordinates of the grid
    ys: np.ndarray  # (ny,) C2 coordinates
    loss: np.ndarray  # (ny, nx) local loss at anchor + x·c1 + y·c2
    explained_variance: np.ndarray  # (2,) ratios of the two components
    trajectories: list[Trajectory]
    client: int
    rounds: tuple[int, int]
    anchor_label: str
    num_samples: int
    split: str
    seconds: float = 0.0  # time to compute (basis, true losses, surface)
    basis: np.ndarray | None = field(default=None, repr=False)  # (2, P)
    anchor: np.ndarray | None = field(default=None, repr=False)  # (P,)

    def points(self) -> pd.DataFrame:
        """All projected models of all runs (tidy, see :meth:`Trajectory.frame`)."""
        return pd.concat([t.frame() for t in self.trajectories], ignore_index=True)

    def summary(self, after: int | None = None) -> pd.DataFrame:
        """Per run: final end-of-round local loss, mean start- and end-of-round losses over the window's rounds
        (those after round ``after`` when given: with the Fig. 4 protocol, the rounds with ALA on, which the
        two runs do not share), largest residual, path length."""
        rows = []
        for t in self.trajectories:
            keep = np.ones(len(t.rounds), bool) if after is None else t.rounds > after
            if not keep.any():
                raise ConfigError("after", after, f"a round before the window's last ({int(t.rounds[-1])})")
            rows.append({
                "label": t.label, "final_end_loss": float(t.end_loss[-1]),
                "mean_start_loss": float(t.start_loss[keep].mean()), "mean_end_loss": float(t.end_loss[keep].mean()),
                "max_residual": t.max_residual,
                "path_length": t.path_length(),
            })
        return pd.DataFrame(rows)

    def __getitem__(self, label: str) -> Trajectory:
        for t in self.trajectories:
            if t.label == label:
                return t
        raise KeyError(f"no trajectory labelled {label!r} (have {[t.label for t in self.trajectories]})")


def client_subset(data, client: int, num_samples: int | None, split: str = "train",
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed subset of one client's data: all of it if it is small, else ``num_samples`` rows
    drawn without replacement from a generator seeded by ``seed`` (kept in their stored order)."""
    if split not in ("train", "test"):
        raise ConfigError("split", split, "train or test")
    if not 0 <= client < data.num_clients:
        raise ConfigError("client", client, f"a client id below {data.num_clients}")
    x, y = data.client_train(client) if split == "train" else data.client_test(client)
    if len(y) == 0:
        raise DataError(f"client {client} has no {split} samples")
    if num_samples is not None and len(y) > num_samples:
        idx = np.sort(np.random.default_rng(seed).choice(len(y), num_samples, replace=False))
        idx_t = torch.as_tensor(idx, device=x.device)
        x, y = x[idx_t], y[idx_t]
    return x, y


def loss_function_for(run, client: int, *, num_samples: int | None = 256, split: str = "train", seed: int = 0,
                      device: str | torch.device = "cpu") -> LossFunction:
    """The client's local loss as a function of flat parameters, rebuilt from the run's config."""
    from ..data.federated import FederatedData
    from ..models import build_model

    data = FederatedData.from_config(run.config.data, device)
    model = build_model(run.config.model, data.input_shape, data.num_classes).to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    x, y = client_subset(data, client, num_samples, split, seed)
    return LossFunction(model, run.meta["param_names"], run.meta["param_shapes"], x, y)


def _window(run, client: int, rounds: tuple[int, int] | None, label: str):
    r, start, end = run.snapshots(client)
    n = min(len(r), len(start), len(end))  # a run stopped mid-round has a start without an end
    r, start, end = r[:n], start[:n], end[:n]
    keep = np.ones(n, bool) if rounds is None else (r >= rounds[0]) & (r <= rounds[1])
    if not keep.any():
        have = f"recorded: {int(r[0])}–{int(r[-1])}" if n else "none recorded"
        raise DataError(f"{label}: no snapshots of client {client} in rounds {rounds} ({have}); "
                        "set snapshot_from to the window's first round")
    return r[keep], start[keep], end[keep]


def compute_landscape(runs: Mapping[str, object] | Sequence[tuple[str, object]], client: int, *,
                      rounds: tuple[int, int] | None = None, grid: int | tuple[int, int] = 21,
                      margin: float = 0.2, num_samples: int | None = 256, split: str = "train",
                      seed: int = 0, device: str | torch.device = "cpu", progress: bool = False) -> Landscape:
    """The shared-plane loss landscape of ``client`` for several runs (Fig. 4 of the FedALA paper).

    ``runs``: ``{label: Run}`` (or (label, Run) pairs), compared in one plane; the anchor is the *last*
    run's last end-of-round model. ``rounds``: the inclusive window of snapshot rounds (default: all
    recorded). ``grid``: points per axis (or (nx, ny)). ``margin``: fraction of the points' extent added
    on every side. ``num_samples`` rows of the client's ``split`` (fixed by ``seed``) define the loss.
    """
    tic = time.perf_counter()
    items = list(runs.items()) if isinstance(runs, Mapping) else list(runs)
    if not items:
        raise ConfigError("runs", runs, "at least one run with snapshots")
    nx, ny = (grid, grid) if isinstance(grid, int) else grid
    if nx < 2 or ny < 2:
        raise ConfigError("grid", grid, "at least 2 points per axis")
    if not (isinstance(margin, (int, float)) and 0 <= margin <= 5):
        raise ConfigError("margin", margin, "a fraction between 0 and 5 of the points' extent")
    ref = items[0][1]
    for label, run in items[1:]:
        if run.config.data != ref.config.data or run.meta["param_names"] != ref.meta["param_names"] or \
                run.config.model != ref.config.model:
            raise ConfigError("runs", label, "runs on the same data and model (one loss surface)")
    if rounds is not None and (len(rounds) != 2 or rounds[0] > rounds[1]):
        raise ConfigError("rounds", rounds, "a window (first, last) with first <= last")

    windows = [(label, *_window(run, client, rounds, label)) for label, run in items]
    anchor = windows[-1][3][-1].astype(np.float64)
    allpts = np.concatenate([np.concatenate([s, e]) for _, _, s, e in windows])
    basis, ratio = pca_directions(allpts, anchor)

    loss_fn = loss_function_for(ref, client, num_samples=num_samples, split=split, seed=seed, device=device)
    trajs = []
    for (label, r, s, e), (_, run) in zip(windows, items):
        sxy, sres = project(s, anchor, basis)
        exy, eres = project(e, anchor, basis)
        trajs.append(Trajectory(label, np.asarray(r), sxy, exy, loss_fn(torch.as_tensor(s)),
                                loss_fn(torch.as_tensor(e)), sres, eres, algo=run.config.algo))

    pts = np.concatenate([np.concatenate([t.start_xy, t.end_xy]) for t in trajs])
    lo, hi = pts.min(0), pts.max(0)
    span = np.maximum(hi - lo, 1e-12)
    span = np.maximum(span, 0.05 * span.max())  # a flat direction still gets a visible band
    lo, hi = lo - margin * span, hi + margin * span
    xs, ys = np.linspace(lo[0], hi[0], nx), np.linspace(lo[1], hi[1], ny)
    surface = loss_fn.surface(anchor, basis, xs, ys, progress=progress)
    return Landscape(xs=xs, ys=ys, loss=surface, explained_variance=ratio, trajectories=trajs, client=client,
                     rounds=(int(min(t.rounds.min() for t in trajs)), int(max(t.rounds.max() for t in trajs))),
                     anchor_label=items[-1][0], num_samples=len(loss_fn.y), split=split,
                     seconds=time.perf_counter() - tic, basis=basis, anchor=anchor)


def projection_check(landscape: Landscape) -> pd.DataFrame:
    """How far each marker's contour is from its model's loss: per run, round and phase (start/end), the true
    local loss of the model, the surface's loss under its projection (bilinear between grid points, as the
    contours are drawn) and the model's distance from the plane. Tidy: label, algo, round, phase, true_loss,
    plane_loss, residual."""
    from scipy.interpolate import RegularGridInterpolator

    surface = RegularGridInterpolator((landscape.ys, landscape.xs), landscape.loss, bounds_error=False,
                                      fill_value=None)
    parts = []
    for t in landscape.trajectories:
        f = t.frame()
        parts.append(f.assign(algo=t.algo, true_loss=f["loss"], plane_loss=surface(f[["y", "x"]].to_numpy()))
                     [["label", "algo", "round", "phase", "true_loss", "plane_loss", "residual"]])
    return pd.concat(parts, ignore_index=True)
