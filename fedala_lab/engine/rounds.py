"""One round's bookkeeping, whoever carries the round: the evaluation schedule, what the clients report, the
client rows and the round's row, divergence and timing (docs/design.md#one-round-two-transports).

A round is three phases over a :class:`RoundState`, what the round works on, declared:

    start  = begin(rs, t)                       server: select, the stragglers' work, whether t is evaluated
    report = serve(rs, start)                   the clients ``rs`` holds: initialise, evaluate, train
    row    = finish(rs, start, report, to_run)  server: divergence, aggregate, the records, the round's row

``Simulation.run_round`` calls them in a row on itself, a state that holds every client. engine/sides.py calls
``begin`` and ``finish`` on the server's state (G, its algorithm state, the senders' uploads) and ``serve`` on
a client's (itself alone, one row), one client at a time (Flower carries them, flower/): the same code, so the
same numbers.

Every hook's answer is checked where it is received (``checked_*``): a wrong type or shape is a
:class:`HookError` naming the hook and the algorithm; a non-finite model is divergence, blamed on the first
place it appeared (a hook's output, or the training losses), never recorded as a finished round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from ..algorithms.base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from ..config import RunConfig
from ..errors import HookError, TrainingDiverged
from .recorder import Recorder
from .stragglers import LocalWork, draw_work

# The numbers a client reports for itself (NaN or 0 where its round did not measure them), and the seconds of
# its phases; a Flower reply carries both (flower/apps.py).
NUMBERS = ("test_loss_sum", "test_correct", "test_num", "init_loss", "trained_loss", "train_loss", "local_steps",
           "diverged", "seconds", "bytes_down", "test_auc")
PHASES = ("init_seconds", "eval_seconds", "train_seconds")
METRICS = NUMBERS + PHASES
# Where a client's model first became NaN or infinite (``diverged``; 0: it did not), in the round's order.
INITIALISE, PERSONALISE, LOSS, LOCAL_TRAIN = 1, 2, 3, 4


def evaluated(cfg: RunConfig, t: int) -> bool:
    """Whether round ``t`` of ``cfg``'s run is evaluated: every ``eval_every`` rounds from round 1, and the last."""
    return (t - 1) % cfg.eval_every == 0 or t == cfg.rounds


@dataclass(eq=False, repr=False)
class RoundState:
    """What a round works on: all that :func:`begin`, :func:`serve` and :func:`finish` read and write. ``cfg``:
    the run's config (the hooks see ``setup.cfg``, which notices a read of ``rounds``); ``setup``: model, data,
    backend; ``algo``: the hooks; ``global_params``: G; ``local_params``/``local_buffers``: (N, …) each;
    ``state``: the algorithm's, never looked into; ``recorder``: None on a client side, which records nothing;
    ``round``/``seconds``: the last finished round, the rounds' seconds. A ``Simulation`` is one, holding every
    client's rows; each side of engine/sides.py holds one: a client's, its own row alone."""

    cfg: RunConfig
    setup: Setup
    algo: Algorithm
    global_params: dict[str, torch.Tensor]
    local_params: dict[str, torch.Tensor]
    local_buffers: dict[str, torch.Tensor]
    state: Any
    recorder: Recorder | None
    round: int = 0
    seconds: float = 0.0

    @property
    def num_clients(self) -> int:
        return self.setup.num_clients

    def round_view(self, t: int, selected: torch.Tensor | None = None) -> Round:
        """Round ``t`` as the algorithm's hooks see it (algorithms/base.py)."""
        return Round(self.setup, t, global_params=self.global_params, local_params=self.local_params,
                     local_buffers=self.local_buffers, selected=selected, state=self.state)


@dataclass
class RoundStart:
    """What the server decided at the start of round ``t``: the selected clients, their local work (stragglers),
    whether the round is evaluated, whose models it snapshots; ``rnd``: the round as hooks see it (a client's own)."""

    t: int
    rnd: Round
    selected: torch.Tensor
    work: LocalWork
    evaluated: bool
    snapshot: frozenset[int]
    started: float = field(default_factory=time.perf_counter)

    @cached_property
    def sel_mask(self) -> np.ndarray:
        """The selected clients as a mask over all N."""
        mask = np.zeros(len(self.work.straggler), dtype=bool)
        mask[self.selected.cpu().numpy()] = True
        return mask


@dataclass
class Report:
    """What the clients measured in a round: ``numbers`` (:data:`NUMBERS`, one value per client), the seconds
    of the phases (summed over the calls that ran them), model snapshots (which → client → flat parameters)
    and, from clients apart from the server, what their hooks recorded."""

    numbers: dict[str, np.ndarray]
    phases: dict[str, float] = field(default_factory=dict)
    snapshots: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)
    records: list = field(default_factory=list)

    @classmethod
    def blank(cls, n: int) -> Report:
        zero = ("local_steps", "diverged", "seconds", "bytes_down")  # a client that did not train, or got nothing
        return cls({k: np.zeros(n) if k in zero else np.full(n, np.nan) for k in NUMBERS},
                   dict.fromkeys(PHASES, 0.0))

    def flag(self, clients, code: int) -> None:
        """Clients whose model became non-finite at ``code`` (the first place counts)."""
        d = self.numbers["diverged"]
        idx = np.asarray(clients, dtype=np.int64)
        d[idx] = np.where(d[idx] == 0, code, d[idx])

    def row(self, c: int) -> dict[str, float]:
        """Client ``c``'s numbers and the phases' seconds (what its reply carries)."""
        return {**{k: float(v[c]) for k, v in self.numbers.items()}, **self.phases}

    def put(self, c: int, metrics: dict[str, float]) -> None:
        """Client ``c``'s numbers from its reply; its phases' seconds add to the round's."""
        for k in NUMBERS:
            self.numbers[k][c] = metrics[k]
        for k in PHASES:
            if math.isfinite(metrics[k]):
                self.phases[k] += metrics[k]


# ------------------------------------------------------------------------------------------ the phases


def begin(rs: RoundState, t: int) -> RoundStart:
    """The server's start of round ``t``: ``select``, the stragglers' draw (engine/stragglers.py), the schedule."""
    cfg, algo = rs.cfg, rs.algo
    rnd = rs.round_view(t)
    selected = rnd.selected = checked_selection(algo.select(rnd), rs)
    ids = selected.cpu().numpy()
    per_epoch = rs.setup.batches_per_epoch(rs.setup.train_sizes[ids])
    steps = algo.local_steps or cfg.local_steps  # a round of SGD steps rather than epochs when set
    full = per_epoch * cfg.local_epochs if steps is None else np.where(per_epoch > 0, steps, 0)
    work = draw_work(cfg, t, ids, full, rs.num_clients)
    rec = rs.recorder
    snapshot = frozenset(rec.snapshot) if t >= rec.snapshot_from else frozenset()
    return RoundStart(t, rnd, selected, work, evaluated(cfg, t), snapshot)


def serve(rs: RoundState, start: RoundStart) -> Report:
    """The clients' part of the round for every client ``rs`` holds (:attr:`Round.everyone`): receive what the
    server sends (``initialise``), evaluate before local training (``personalise``'s models or the local ones),
    train the selected ones (``local_train``), measure. Writes their models into ``rs``."""
    cfg, algo, rnd = rs.cfg, rs.algo, start.rnd
    report = Report.blank(rs.num_clients)
    num, held = report.numbers, rnd.everyone
    own = {"params": rs.local_params, "buffers": rs.local_buffers}

    # 2. local initialisation from what the server sends
    tic = time.perf_counter()
    init = held if algo.initialise_all else start.selected
    if len(init):
        sent = checked_sent(algo.initialise(rnd, init), rs, len(init))
        ids = init.cpu().numpy()
        for name, v in {**sent.params, **sent.rows}.items():
            rs.local_params[name][init] = v
        num["bytes_down"][ids] = shares(sent.bytes, len(ids), sent.client_bytes)
        report.flag(ids[~finite_rows(sent.rows, len(ids), shared=sent.params)], INITIALISE)
    report.snapshots["start"] = snapshots(rs.local_params, held, start.snapshot)
    report.phases["init_seconds"] = time.perf_counter() - tic

    # 3. evaluation before local training
    tic = time.perf_counter()
    if start.evaluated:
        ids = held.cpu().numpy()
        models = checked_models(algo.personalise(rnd), rs, len(ids))
        if models is None:
            models = own
        else:
            report.flag(ids[~finite_rows(models["params"], len(ids), held)], PERSONALISE)
        test = rnd.evaluate(models["params"], models["buffers"], "test", auc=True)
        num["test_loss_sum"][ids], num["test_correct"][ids], num["test_num"][ids], num["test_auc"][ids] = (
            test["loss_sum"], test["correct"], test["num"], test["auc"])
        if cfg.record_train_loss:
            tr = rnd.evaluate(rs.local_params, rs.local_buffers, "train")
            num["init_loss"][ids] = tr["loss_sum"] / np.maximum(tr["num"], 1)
    report.phases["eval_seconds"] = time.perf_counter() - tic

    # 4. local training of the selected clients, the stragglers' work as the server drew it
    tic = time.perf_counter()
    trainers = start.selected
    if len(trainers):
        _train(rs, start, trainers, report)
    senders = start.work.senders(start.selected)  # the selected clients that were not dropped
    if start.evaluated and cfg.record_train_loss and len(senders):
        tr = rnd.evaluate(rs.local_params, rs.local_buffers, "train", clients=senders)
        num["trained_loss"][senders.cpu().numpy()] = tr["loss_sum"] / np.maximum(tr["num"], 1)
    report.snapshots["end"] = snapshots(rs.local_params, held, start.snapshot)
    report.phases["train_seconds"] = time.perf_counter() - tic
    return report


def _train(rs: RoundState, start: RoundStart, trainers: torch.Tensor, report: Report) -> None:
    cfg, algo, rnd, num = rs.cfg, rs.algo, start.rnd, report.numbers
    steps = algo.local_steps or cfg.local_steps
    plan = rs.setup.plan(start.t, trainers, epochs=None if steps else cfg.local_epochs, steps=steps,
                          limits=start.work.limits)
    rnd.timings.clear()
    trained = checked_trained(algo.local_train(rnd, Work(trainers, plan)), rs, len(trainers))
    for k, v in trained.params.items():
        rs.local_params[k][trainers] = v
    for k, v in trained.buffers.items():
        rs.local_buffers[k][trainers] = v
    ids = trainers.cpu().numpy()
    losses_all = np.asarray(trained.losses, dtype=np.float64)
    valid = trained.done if trained.done is not None else ~np.isnan(losses_all)
    losses = np.where(valid, losses_all, 0.0)
    n_steps = valid.sum(1)
    num["local_steps"][ids] = n_steps
    with np.errstate(all="ignore"):
        num["train_loss"][ids] = np.where(n_steps > 0, losses.sum(1) / np.maximum(n_steps, 1), np.nan)
    num["seconds"][ids] = np.where(n_steps > 0, [rnd.timings.get(int(c), 0.0) for c in ids], 0.0)  # a step or none
    report.flag(ids[~np.isfinite(losses).all(1)], LOSS)
    report.flag(ids[~finite_rows({**trained.params, **trained.buffers}, len(ids))], LOCAL_TRAIN)


def finish(rs: RoundState, start: RoundStart, report: Report, to_run: Callable) -> dict:
    """The server's end of the round: stop on divergence (a :class:`TrainingDiverged` with the holder's
    ``to_run(status="diverged")``, its rounds before this one), ``aggregate`` the senders' models into G, record
    the clients' rows (evaluated rounds) and the round's row; returns that row."""
    algo, rec, rnd, t = rs.algo, rs.recorder, start.rnd, start.t
    num = report.numbers
    for which, flats in report.snapshots.items():
        rec.snapshot_rows(t, which, flats)
    rec.take(t, report.records)  # what clients apart from the server recorded, before the server's
    codes = num["diverged"].astype(np.int64)
    if codes.any():
        rec.take(t, rnd.records)
        _diverged(rs, t, codes, to_run)

    # 5. server aggregation of the senders' models
    tic = time.perf_counter()
    senders = start.work.senders(start.selected)
    agg = checked_aggregated(algo.aggregate(rnd, senders), rs, len(senders)) if len(senders) else Aggregated({}, 0)
    if not finite(agg.params):
        rec.take(t, rnd.records)
        codes = np.zeros(rs.num_clients, dtype=np.int64)
        _diverged(rs, t, codes, to_run, hook="aggregate")
    rs.global_params.update(agg.params)
    bytes_up = np.zeros(rs.num_clients, dtype=np.int64)
    bytes_up[senders.cpu().numpy()] = shares(agg.bytes, len(senders), agg.client_bytes)
    report.phases["aggregate_seconds"] = time.perf_counter() - tic
    seconds = time.perf_counter() - start.started
    rec.take(t, rnd.records)

    accs = None
    if start.evaluated:
        with np.errstate(invalid="ignore"):  # a client without test samples has no accuracy (NaN)
            accs = np.where(num["test_num"] > 0, 100 * num["test_correct"] / np.maximum(num["test_num"], 1), np.nan)
        rec.client_rows(client_rows(t, start, num, accs, bytes_up))
    row = round_row(rs, start, num, accs, bytes_up, report.phases, seconds, rec.rounds["best_acc"])
    rec.round_row(row)
    rs.round, rs.seconds = t, rs.seconds + seconds
    return row


# ------------------------------------------------------------------------------------------ the rows


def client_rows(t: int, start: RoundStart, num: dict, accs: np.ndarray, bytes_up: np.ndarray) -> dict[str, np.ndarray]:
    """An evaluated round's row of every client: its test numbers before local training (``accs``: its test
    accuracy in percent), its training."""
    n = len(bytes_up)
    return {
        "round": np.full(n, t), "client": np.arange(n), "selected": start.sel_mask,
        "test_acc": accs, "test_loss": num["test_loss_sum"] / np.maximum(num["test_num"], 1),
        "test_auc": 100 * num["test_auc"],
        "test_correct": num["test_correct"].astype(np.int64), "test_num": num["test_num"].astype(np.int64),
        "train_loss": num["train_loss"], "init_loss": num["init_loss"], "trained_loss": num["trained_loss"],
        "seconds": num["seconds"], "straggler": start.work.straggler,
        "local_steps": num["local_steps"].astype(np.int64),
        "bytes_up": bytes_up, "bytes_down": num["bytes_down"].astype(np.int64),
    }


def round_row(rs: RoundState, start: RoundStart, num: dict, accs: np.ndarray | None, bytes_up: np.ndarray, phases: dict,
              seconds: float, best_before: list) -> dict:
    """The round's row: pooled test accuracy (100 Σ correct / Σ samples, percent) and the spread of the clients'
    ``accs`` (percentage points), the test AUC (percent, the clients' weighted by their test samples, as the FedALA
    reference averages them), the losses weighted by train samples (a dropped straggler weighs 0), the traffic (the
    clients' sums), the seconds."""
    cfg, work = rs.cfg, start.work
    sel = start.sel_mask
    if start.evaluated:
        acc = float(100 * num["test_correct"].sum() / max(num["test_num"].sum(), 1))
        acc_std = float(np.nanstd(accs)) if np.isfinite(accs).any() else math.nan
        test_loss = float(num["test_loss_sum"].sum() / max(num["test_num"].sum(), 1))
        scored = np.isfinite(num["test_auc"]) & (num["test_num"] > 0)
        auc = float(100 * np.sum(num["test_auc"][scored] * num["test_num"][scored]) / num["test_num"][scored].sum()) \
            if scored.any() else math.nan
    else:
        acc = acc_std = test_loss = auc = math.nan
    prev = [b for b in best_before if not math.isnan(b)]
    best = max([acc, *prev]) if not math.isnan(acc) else (prev[-1] if prev else math.nan)
    w_all, w_sel = rs.setup.train_sizes, rs.setup.train_sizes[sel] * ~work.dropped[sel]
    losses = start.evaluated and cfg.record_train_loss
    return {
        "round": start.t, "acc": acc, "acc_std": acc_std, "test_loss": test_loss,
        "train_loss": float(np.nansum(num["train_loss"][sel] * w_sel) / max(w_sel.sum(), 1)),
        "init_loss": float(np.sum(num["init_loss"] * w_all) / w_all.sum()) if losses else math.nan,
        "trained_loss": float(np.nansum(num["trained_loss"][sel] * w_sel) / max(w_sel.sum(), 1)) if losses
        else math.nan,
        "best_acc": best, "auc": auc, "num_selected": int(sel.sum()),
        "stragglers": int(work.straggler.sum()), "dropped": int(work.dropped.sum()),
        "bytes_up": int(bytes_up.sum()), "bytes_down": int(num["bytes_down"].sum()), "seconds": seconds,
        **{k: float(phases.get(k, math.nan)) for k in (*PHASES, "aggregate_seconds")},
    }


# ------------------------------------------------------------------------------------------ divergence


def _diverged(rs: RoundState, t: int, codes: np.ndarray, to_run: Callable, hook: str = "") -> None:
    """Stop the run at round ``t``: the first place a model became non-finite, by :func:`divergence_message`,
    the run so far (rounds before ``t``) with status "diverged"."""
    first = int(codes[codes > 0].min()) if codes.any() else 0
    clients = np.flatnonzero(codes == first).tolist() if first else []
    hook = hook or {INITIALISE: "initialise", PERSONALISE: "personalise", LOCAL_TRAIN: "local_train"}.get(first, "")
    rs.round = t - 1
    run = to_run(status="diverged")
    run.message = msg = divergence_message(rs.cfg, t, clients, hook)
    raise TrainingDiverged(msg, run)


def divergence_message(cfg: RunConfig, t: int, clients: list[int], hook: str = "") -> str:
    """Why a run diverged, the most likely cause first. A hook whose output was non-finite while what it was
    given was finite is named; a loss that became non-finite gets the algorithm's own hint where it has one
    (FedProx: μ·lr ≥ 1), else the step size."""
    label = cfg.algorithm.label
    hint = cfg.algorithm.divergence_hint(cfg)
    if hook in ("initialise", "personalise", "aggregate"):
        whose = f" for client(s) {clients[:5]}" if clients else ""
        head = (f"training diverged in round {t}: {label}'s {hook} hook returned a NaN or infinite model{whose} "
                "though the models it was given were finite: ")
        # a method's own setting (Ditto's λ drives the personal models it returns) before "the hook itself"
        return head + (f"{hint}" if hint else "the hook's computation is the cause, not the learning rate")
    if hook == "local_train":
        head = (f"training diverged in round {t}: the model {label}'s local_train returned for client(s) "
                f"{clients[:5]} is NaN or infinite while its losses were finite. ")
    else:
        head = f"training diverged in round {t}: the loss of client(s) {clients[:5]} became NaN or infinite. "
    lr_text = (f"the learning rate lr={cfg.lr:g} is most likely too large for this model and batch size "
               f"{cfg.batch_size}; try a smaller lr")
    if hint:
        return head + hint + ". Otherwise " + lr_text
    return head + lr_text[0].upper() + lr_text[1:]


# ------------------------------------------------------------------------------------------ helpers


def shares(total: int, count: int, given=None) -> np.ndarray:
    """Each of ``count`` clients' bytes of ``total``: ``given`` (the hook's own split), else even shares (the
    first ``total % count`` one byte more), so the clients' bytes always sum to the round's."""
    if given is not None:
        return np.asarray(given, dtype=np.int64)
    base, extra = divmod(int(total), max(count, 1))
    return np.full(count, base, dtype=np.int64) + (np.arange(count) < extra)


def finite_rows(tensors: dict, count: int, held: torch.Tensor | None = None, shared: dict | None = None) -> np.ndarray:
    """Which of ``count`` rows are finite in every floating tensor of ``tensors`` ((count, …) each, or (N, …)
    with the rows of ``held`` taken) and in ``shared`` (tensors every row holds alike)."""
    rows = [(v if held is None or v.shape[0] == count else v[held]).reshape(count, -1)
            for v in tensors.values() if v.is_floating_point()]
    if not rows:
        return np.full(count, finite(shared or {}))
    # A row whose sum is finite has no NaN or infinite element, so the sums answer with one host copy a round
    # (a check per element and tensor cost more than the round's bookkeeping); only where a sum is not finite
    # (a NaN, an infinity, or a sum that overflowed) is every element looked at, for the same answer.
    ok = torch.isfinite(rows[0].sum(1))
    for r in rows[1:]:
        ok &= torch.isfinite(r.sum(1))
    ok = ok.cpu()
    if not ok.all():
        ok = torch.stack([torch.isfinite(r).all(1) for r in rows]).all(0).cpu()
    return ok.numpy() & finite(shared or {})


def finite(tensors: dict) -> bool:
    """Whether every floating tensor of ``tensors`` is finite (one host read)."""
    alls = [torch.isfinite(v).all() for v in tensors.values() if v.is_floating_point()]
    return not alls or bool(torch.stack(alls).all())


def snapshots(local_params: dict, held: torch.Tensor, wanted: frozenset[int]) -> dict[int, torch.Tensor]:
    """The flattened models (float32, CPU) of the ``wanted`` clients among ``held``."""
    if not wanted:  # the default: no client is snapshotted, and ``held`` stays on the device
        return {}
    return {c: torch.cat([v[c].reshape(-1) for v in local_params.values()]).to("cpu", torch.float32)
            for c in sorted(wanted & set(held.cpu().tolist()))}


# ------------------------------------------------------------------------------------------ hook answers
# What each hook must return, checked where the engine receives it: anything else is a HookError that names the
# hook, the algorithm and what was expected, instead of a traceback from deep inside the engine.


def _refuse(rs: RoundState, hook: str, message: str):
    raise HookError(f"{rs.cfg.algorithm.label}'s {hook} {message}", hook=hook, algo=rs.cfg.algo)


def _returned(rs: RoundState, hook: str, got, wanted: str):
    shown = repr(got)[:80] if isinstance(got, (list, tuple, int, float, str)) else type(got).__name__
    _refuse(rs, hook, f"returned {shown}: expected {wanted}")


def _shapes(rs: RoundState, hook: str, tensors, rows: int | None, what: str) -> None:
    """``tensors`` by name, each a tensor of the model's shape for that name (with ``rows`` rows first)."""
    if not isinstance(tensors, dict):
        _returned(rs, hook, tensors, f"{what}s as a dict of tensors by name")
    known = {**rs.setup.shapes, **{k: tuple(v.shape[1:]) for k, v in rs.local_buffers.items()}}
    for k, v in tensors.items():
        if k not in known:
            _refuse(rs, hook, f"returned a {what} {k!r} the model does not have (it has "
                    f"{', '.join(rs.setup.param_names)})")
        want = known[k] if rows is None else (rows, *known[k])
        if not torch.is_tensor(v) or tuple(v.shape) != want:
            got = tuple(v.shape) if torch.is_tensor(v) else type(v).__name__
            _refuse(rs, hook, f"returned {what} {k!r} of shape {got}: expected a tensor of shape {want}")


def _bytes(rs: RoundState, hook: str, got, count: int) -> None:
    b = got.bytes
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
        _returned(rs, hook, b, "an int >= 0 as its bytes")
    if got.client_bytes is not None and (len(got.client_bytes) != count or sum(got.client_bytes) != b):
        _refuse(rs, hook, f"returned client_bytes that do not split its bytes={b} over its {count} clients")


def checked_selection(got, rs: RoundState) -> torch.Tensor:
    """``select``'s clients: a non-empty 1-D integer tensor of distinct ids of the run's clients."""
    n = rs.num_clients
    wanted = f"a non-empty 1-D integer tensor of distinct client ids in 0 … {n - 1}"
    if not torch.is_tensor(got) or got.dim() != 1 or got.is_floating_point() or got.dtype == torch.bool:
        _returned(rs, "select", got, wanted)
    ids = got.cpu().tolist()
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) >= n:
        _refuse(rs, "select", f"returned clients {ids[:10]}: expected {wanted}")
    return got.to(rs.setup.device)


def checked_sent(got, rs: RoundState, count: int) -> Sent:
    """``initialise``'s answer for ``count`` clients: a Sent of the model's shapes."""
    if not isinstance(got, Sent):
        _returned(rs, "initialise", got, "a Sent(params, bytes, rows=…) (algorithms/base.py)")
    _shapes(rs, "initialise", got.params, None, "parameter")
    _shapes(rs, "initialise", got.rows, count, "row of parameter")
    _bytes(rs, "initialise", got, count)
    return got


def checked_models(got, rs: RoundState, held: int):
    """``personalise``'s answer: None, or every held client's model ((N, …) or (held, …) tensors)."""
    if got is None:
        return None
    if not isinstance(got, dict) or set(got) != {"params", "buffers"}:
        _returned(rs, "personalise", got, 'None or {"params": {…}, "buffers": {…}}, (N, …) tensors each')
    for part in ("params", "buffers"):
        first = next(iter(got[part].values()), None) if isinstance(got[part], dict) else None
        rows = first.shape[0] if torch.is_tensor(first) and first.dim() and first.shape[0] == held else rs.num_clients
        _shapes(rs, "personalise", got[part], rows, part[:-1])
    return got


def checked_trained(got, rs: RoundState, count: int) -> Trained:
    """``local_train``'s answer for ``count`` clients: their parameters, buffers and step losses."""
    if not isinstance(got, Trained):
        _returned(rs, "local_train", got, "a Trained(params, buffers, losses) (algorithms/base.py)")
    _shapes(rs, "local_train", got.params, count, "parameter")
    _shapes(rs, "local_train", got.buffers, count, "buffer")
    losses = np.asarray(got.losses)
    if losses.ndim != 2 or losses.shape[0] != count:
        _refuse(rs, "local_train", f"returned losses of shape {losses.shape}: expected ({count}, steps), a row "
                "per client trained")
    return got


def checked_aggregated(got, rs: RoundState, count: int) -> Aggregated:
    """``aggregate``'s answer from ``count`` senders: an Aggregated of the model's shapes."""
    if not isinstance(got, Aggregated):
        _returned(rs, "aggregate", got, "an Aggregated(params, bytes) (algorithms/base.py)")
    _shapes(rs, "aggregate", got.params, None, "parameter")
    _bytes(rs, "aggregate", got, count)
    return got


__all__ = ["METRICS", "NUMBERS", "PHASES", "Report", "RoundStart", "RoundState", "begin", "divergence_message",
           "evaluated", "finish", "serve"]
