"""Which stored runs a run may start from: "branch instead of re-running" (docs/design.md#run-store).

A run of config B may start at round t from the engine state a stored run of config A kept at round t when
the two runs are identical through round t, records included. Every random draw comes from (seed, round,
client, purpose) (docs/design.md#determinism), so that is a matter of configs:

1. the same result through round t: :func:`prefix_key` (A, t) == :func:`prefix_key` (B, t). The prefix key is
   the canonical config (the key's fields) without ``rounds`` and, while a modifier has not acted yet
   (t ≤ :func:`base_through`: the modifier's spec says through which round its runs equal its base's), with
   the algorithm replaced by the one it modifies and the modifier's hyper-parameters dropped. ALA skips round
   1 (every local model equals what the method sends) and the rounds ≤ ``ala_after``, so FedALA(ala_after=K)
   is FedAvg through round max(1, K), X+ALA(ala_after=K) is X through it, and two FedALA runs with
   ``ala_after`` K1 and K2 (any s, p, η…) agree through min(max(1, K1), max(1, K2)). With
   ``ala_all_clients=False`` and ρ < 1 the clients not selected keep their model instead of receiving G, so
   such a run is its own from round 1 (no mapping). Without the mapping, two configs with the same prefix key
   differ only in ``rounds``: the longer one extends the shorter.
2. the same evaluation through round t: ``eval_every`` is in the key, so the rounds before t agree, and
   round t itself must be evaluated by both or by neither (the last round is always evaluated): t on the
   grid 1, 1 + k, …, or ``eval_every`` = 1, unless t is the last round of both.
3. B's records through round t are in A's: the train-split losses if B records them, B's snapshot clients
   from B's ``snapshot_from`` on (A's from no later), B's tracked clients' per-client records (ALA's passes
   and weights) when A's algorithm keeps such records and had acted before t. What A recorded beyond that
   is dropped. Otherwise the branch is refused and B starts from scratch (or from another stored run).

The algorithm's state is A's when A and B are the same config but for ``rounds`` (an extension); when A ran
the method B's modifier wraps, B starts with a fresh state of its own around A's (the wrapped method's state
carries on, e.g. FedLAMA's intervals under FedLAMA+ALA); else B's initial one.

:func:`find_prefix` picks, among the stored runs and their kept rounds, the latest valid one.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from ..engine.rounds import evaluated
from ..errors import DataError


def _outer(cfg: RunConfig):
    """The outermost modifier of ``cfg``'s algorithm that says through which round its runs equal the
    unmodified method's, or None."""
    mods = cfg.algorithm.modifiers
    return mods[-1] if mods and mods[-1].base_through is not None else None


def base_of(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its outermost modifier taken off (FedALA → FedAvg, FedLAMA+ALA → FedLAMA)."""
    return cfg.replace(algo=cfg.algorithm.without(_outer(cfg).name))


def base_through(cfg: RunConfig) -> int:
    """The last round through which ``cfg``'s run equals the run of the method its outermost modifier wraps
    (0: none, or no such modifier): ALA skips round 1 and the rounds ≤ ``ala_after``."""
    mod = _outer(cfg)
    return mod.base_through(cfg) if mod is not None else 0


def prefix_key(cfg: RunConfig, t: int) -> str:
    """What decides ``cfg``'s run through round ``t``: the canonical config without ``rounds``, the algorithm
    replaced by the method it modifies while the modifier has not acted (t ≤ :func:`base_through`)."""
    c = base_of(cfg) if t <= base_through(cfg) else cfg
    d = c.canonical()
    d.pop("rounds")
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def refusal(stored: RunConfig, t: int, cfg: RunConfig, *, read_horizon: bool = False) -> str:
    """Why the run of ``cfg`` may not start from the state ``stored``'s run kept at round ``t`` ("" if it may).
    ``read_horizon``: ``stored``'s algorithm read the run's total rounds while it ran (config.HorizonWatched)."""
    if not 1 <= t <= cfg.rounds:
        return f"round {t} is not within the {cfg.rounds} rounds asked for"
    if t == cfg.rounds == stored.rounds and stored.key() == cfg.key():
        return "it is the run itself"
    if prefix_key(stored, t) != prefix_key(cfg, t):
        return f"the runs differ before round {t + 1}"
    if stored.rounds != cfg.rounds and not (stored.algorithm.horizon_free and cfg.algorithm.horizon_free):
        return "its algorithm reads the run's total rounds (horizon_free=False): every length is its own run"
    if stored.rounds != cfg.rounds and read_horizon:
        return (f"its algorithm read the run's total rounds (cfg.rounds = {stored.rounds}) while it ran: its rounds "
                "depend on its length, so every length is computed afresh")
    if evaluated(stored, t) != evaluated(cfg, t):
        return (f"round {t} is evaluated by one run only (eval_every={cfg.eval_every}; the last round is always "
                "evaluated)")
    if cfg.record_train_loss and not stored.record_train_loss:
        return "it did not record the train-split losses (record_train_loss)"
    n = cfg.data.num_clients
    want = set(cfg.clients_to("snapshot_clients", n))
    if want and cfg.snapshot_from <= t:
        have = set(stored.clients_to("snapshot_clients", n))
        if not want <= have or stored.snapshot_from > cfg.snapshot_from:
            return (f"it did not snapshot clients {sorted(want)} from round {cfg.snapshot_from} on "
                    f"(it snapshots {sorted(have)} from round {stored.snapshot_from})")
    if t > base_through(stored) and stored.algorithm.tracks_clients:  # per-client records were kept
        want = set(cfg.clients_to("track_clients", n))
        if not want <= set(stored.clients_to("track_clients", n)):
            return f"it did not track clients {sorted(want)} (track_clients)"
    return ""


def extends(stored: RunConfig, cfg: RunConfig) -> bool:
    """Whether the two configs differ in ``rounds`` only (then the algorithm's state carries over)."""
    a, b = stored.canonical(), cfg.canonical()
    a.pop("rounds"), b.pop("rounds")
    return a == b


def state_carry(stored: RunConfig, cfg: RunConfig) -> str:
    """How the algorithm's state of ``stored``'s run carries into ``cfg``'s (Simulation.start_from): "same"
    (an extension), "inner" (``stored`` ran the method ``cfg``'s outermost modifier wraps) or "fresh"."""
    if extends(stored, cfg):
        return "same"
    if _outer(cfg) is not None and stored.algo == cfg.algorithm.without(_outer(cfg).name):
        return "inner"
    return "fresh"


@dataclass
class Prefix:
    """A stored run a new run starts from: its folder, config, the round and the file of the kept state."""

    path: Path
    config: RunConfig
    round: int
    state_file: Path

    @property
    def name(self) -> str:
        return self.path.name


def candidates(cfg: RunConfig, stored: Iterable[tuple[Path, RunConfig, dict]], *, after: int = 0) -> list[Prefix]:
    """Every valid (stored run, kept round) for ``cfg`` beyond round ``after``, the latest round first.
    ``stored``: (folder, config, {round: state file}, reads_horizon), as ``RunStore.with_states()`` yields
    them."""
    out = []
    for path, scfg, states, read_horizon in stored:
        for t, f in states.items():
            if t > after and not refusal(scfg, t, cfg, read_horizon=read_horizon):
                out.append(Prefix(Path(path), scfg, t, Path(f)))
    out.sort(key=lambda p: (-p.round, not extends(p.config, cfg), p.name))
    return out


def find_prefix(cfg: RunConfig, store, *, after: int = 0):
    """The latest valid start for ``cfg`` in ``store`` beyond round ``after``: (Prefix, its Run, its state
    dict), or None. A damaged state or run is skipped with a warning."""
    from ..record.run import Run

    for pre in candidates(cfg, store.with_states(), after=after):
        try:
            state = store.load_state(pre.path, pre.round)
            run = Run.load(pre.path)
        except DataError as err:
            warnings.warn(f"cannot branch from {pre.name}: {err}", stacklevel=2)
            continue
        return pre, run, state
    return None


def rounds_to_compute(cfgs: Iterable[RunConfig], store) -> int:
    """How many rounds getting ``cfgs`` in this order will simulate: none for a run the store holds, else its
    rounds after the latest start among the stored runs and the runs before it in the list (an estimate for
    a progress bar: checkpoints and recordings a stored run lacks are not counted)."""
    known = list(store.with_states())
    seen, total = set(), 0
    for cfg in cfgs:
        if cfg.key() in seen:
            continue
        seen.add(cfg.key())
        if store.has(cfg):
            continue
        found = candidates(cfg, known)
        total += cfg.rounds - (found[0].round if found else 0)
        known.append((Path("(planned)"), cfg, {t: Path("(planned)") for t in cfg.kept_rounds()}, False))
    return total
