"""Plans: which runs an experiment needs, as validated configs. Nothing here runs anything (runs.py does).

- :class:`SweepSpec`: a base config and a grid of axes, one config per grid point (``fedala-lab sweep``).
- :class:`Plan`, :func:`build_plan`: the runs behind every paper figure, at the "quick" (the teach data, a laptop
  CPU) or the "paper" scale (the FedALA repository's MNIST partition, a GPU). Its tables and ablations are sweeps, and
  the named reproduction sweeps (:data:`SWEEPS`) are the paper plan's tables.
- :func:`fig4_configs`, :func:`fig4_window`: the paper's Fig. 4 protocol, FedAvg and FedALA sharing their
  first K rounds, and the rounds its plot shows.
- :func:`comparison_configs`, :data:`FEDLAMA_SCALES`: FedLAMA's comparison at equal local SGD steps.

Single named configs are presets (presets.py); every plan starts from one.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config import MAX_GRID_POINTS, RunConfig, merge_settings, read_config_file, setting_names
from ..data.config import dataset_label
from ..errors import ConfigError
from .presets import preset

# ------------------------------------------------------------------------------------------------ sweeps

# spellings accepted for grid axes, besides the config field names themselves
AXIS_ALIASES = {"algos": "algo", "algorithm": "algo", "seeds": "seed", "clients": "num_clients",
                "data-seed": "data_seed", "partition_seed": "data_seed"}
# axes that make repetitions, not settings: left out of a table's rows by default
SEED_AXES = ("seed", "data_seed")
_SPEC_KEYS = ("name", "preset", "config", "grid", "by")


def axis_name(name: str) -> str:
    """The config field a grid axis names (``--grid num-clients=…``, ``seeds: […]``); refuses fields that
    cannot change a result."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("grid", name, "an axis named after a config field, e.g. p, s, beta, num_clients")
    key = AXIS_ALIASES.get(name.strip(), name.strip())
    key = AXIS_ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
    if key not in setting_names():
        raise ConfigError("grid", name, "a RunConfig or DataConfig field (e.g. algo, seed, p, s, eta, beta, "
                          "num_clients, data_seed)")
    if key in ("data", "device", "checkpoint_every", "root", "download", "threads"):
        raise ConfigError("grid", name, "a field that can change a result (not data/device/root/download/"
                          "checkpoint_every/threads)")
    return key


def _values(axis: str, values) -> tuple:
    if isinstance(values, (str, int, float, bool)) or values is None:
        values = [values]
    values = tuple(itertools.islice(values, MAX_GRID_POINTS + 1))  # never an endless or huge range read whole
    if len(values) > MAX_GRID_POINTS:
        raise ConfigError(f"grid.{axis}", f"more than {MAX_GRID_POINTS:,} values",
                          f"at most {MAX_GRID_POINTS:,} values; split the sweep")
    if not values:
        raise ConfigError(f"grid.{axis}", [], "at least one value")
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"grid.{axis}", list(values), "distinct values")
    return values


@dataclass(frozen=True)
class SweepSpec:
    """A base config and a grid of axes; :meth:`expand` makes one :class:`RunConfig` per grid point.

    ``grid`` is an ordered tuple of ``(axis, values)``; the last axis varies fastest. ``by`` names the
    table's rows (default: every axis except the seeds). A spec file (YAML or JSON)::

        name: p-ablation
        preset: teach                 # optional base preset
        config: {rounds: 30}          # optional overrides of the base (flat or with a "data" mapping)
        grid:                         # axis -> values; any RunConfig/DataConfig field, or data_seed
          algo: [fedavg, fedala]
          p: [1, 2]
          seed: [0, 1, 2]
        by: [algo, p]                 # optional: the table's rows (default: every axis but the seeds)
    """

    base: RunConfig = field(default_factory=RunConfig)
    grid: tuple[tuple[str, tuple], ...] = ()
    by: tuple[str, ...] | None = None
    name: str = "sweep"

    def __post_init__(self):
        grid = tuple((axis_name(a), _values(a, v)) for a, v in
                     (self.grid.items() if isinstance(self.grid, Mapping) else self.grid))
        axes = [a for a, _ in grid]
        dup = sorted({a for a in axes if axes.count(a) > 1})
        if dup:
            raise ConfigError("grid", dup[0], "each axis once")
        points = math.prod(len(v) for _, v in grid)
        if points > MAX_GRID_POINTS:
            raise ConfigError("grid", " × ".join(f"{a} {len(v):,}" for a, v in grid) + f" = {points:,} points",
                              f"at most {MAX_GRID_POINTS:,} grid points in one sweep; split it (e.g. by seeds)")
        object.__setattr__(self, "grid", grid)
        if self.by is not None:
            by = (self.by,) if isinstance(self.by, str) else tuple(self.by)
            object.__setattr__(self, "by", tuple(axis_name(b) for b in by))
        if not isinstance(self.base, RunConfig):
            raise ConfigError("base", self.base, "a RunConfig")

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping, *, base: RunConfig | None = None) -> SweepSpec:
        """From a spec mapping (see the class docstring); ``base`` replaces the spec's preset."""
        if not isinstance(d, Mapping):
            raise ConfigError("spec", type(d).__name__, "a mapping with keys " + ", ".join(_SPEC_KEYS))
        unknown = sorted(set(d) - set(_SPEC_KEYS))
        if unknown:
            raise ConfigError(f"spec.{unknown[0]}", d[unknown[0]], "one of the keys " + ", ".join(_SPEC_KEYS))
        if base is None:
            base = preset(d["preset"]) if d.get("preset") else RunConfig()
        overrides = d.get("config") or {}
        if not isinstance(overrides, Mapping):
            raise ConfigError("spec.config", overrides, "a mapping of config fields")
        if overrides:
            # from_dict routes top-level data fields and data_seed into "data" (they win over it)
            base = RunConfig.from_dict(merge_settings(base.to_dict(), overrides))
        grid = d.get("grid") or {}
        if not isinstance(grid, Mapping):
            raise ConfigError("spec.grid", grid, "a mapping axis -> list of values")
        return cls(base=base, grid=tuple(grid.items()), by=d.get("by"), name=str(d.get("name") or "sweep"))

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, base: RunConfig | None = None) -> SweepSpec:
        """Read a YAML (``.yaml``/``.yml``) or JSON spec file."""
        path = Path(path)
        spec = cls.from_dict(read_config_file(path), base=base)
        return spec if spec.name != "sweep" else dataclasses.replace(spec, name=path.stem)

    def with_axes(self, **axes) -> SweepSpec:
        """A copy with axes replaced or added (``spec.with_axes(seed=range(5))``)."""
        # canonical names, so an alias replaces its axis; values: __post_init__
        grid = {**dict(self.grid), **{axis_name(a): v for a, v in axes.items()}}
        return dataclasses.replace(self, grid=tuple(grid.items()))

    # -- expansion ---------------------------------------------------------------------------------

    @property
    def axes(self) -> list[str]:
        return [a for a, _ in self.grid]

    def points(self) -> list[dict]:
        """Every grid point as {axis: value}, in product order (last axis fastest)."""
        names = self.axes
        return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in self.grid))]

    def expand(self) -> list[tuple[dict, RunConfig]]:
        """(point, config) for every grid point; a bad value raises the ConfigError naming its field."""
        out = []
        for point in self.points():
            try:
                cfg = self.base.replace(**point) if point else self.base
            except ConfigError as err:
                err.add_note(f"at grid point {point}")
                raise
            out.append((point, cfg))
        return out

    def configs(self) -> list[RunConfig]:
        """The config of every grid point, in order."""
        return [cfg for _, cfg in self.expand()]

    def table_by(self) -> tuple[str, ...]:
        """The table's row keys: ``by``, else every axis except the seeds, else the algorithm."""
        if self.by:
            return self.by
        rows = tuple(a for a in self.axes if a not in SEED_AXES)
        return rows or ("algo",)


# ---------------------------------------------------------------------------------------- Fig. 4 protocol


def fig4_configs(base_cfg: RunConfig, *, K: int, window: tuple[int, int],
                 client: int) -> tuple[RunConfig, RunConfig]:
    """The paper's Fig. 4 protocol: (FedAvg, FedALA with ``ala_after=K``) on ``base_cfg``, validated.

    FedALA runs with ALA deactivated for rounds ≤ K (plain FedAvg initialisation) and activated afterwards;
    FedAvg is the same run continued without ALA. Both record ``client``'s local models from the window's
    first round on and stop at its last round. Every random draw is derived from (seed, round, client,
    purpose), so the FedAvg run with the same seed *is* the FedALA run's first K rounds (tested in
    tests/test_ala.py): FedAvg keeps its engine state of round K, and the FedALA run starts from it
    (``get_or_run`` branches, docs/design.md#run-store). Paper: MNIST pathological, K = 155, window 140–200.
    """
    first, last = window_rounds(window)
    _check_K(K, last)
    n = base_cfg.data.num_clients
    if not isinstance(client, int) or isinstance(client, bool) or not 0 <= client < n:
        raise ConfigError("client", client, f"a client id from 0 to {n - 1}")
    cfg = base_cfg.replace(rounds=last, snapshot_clients=str(client), snapshot_from=first)
    # FedALA(ala_after=K) is FedAvg through round max(1, K): the FedAvg run keeps its state there
    return cfg.replace(algo="fedavg", keep_states=str(max(1, K))), cfg.replace(algo="fedala", ala_after=K)


def fig4_window(K: int, before: int, last: int) -> tuple[int, int]:
    """The rounds a Fig. 4 plot shows: from ``before`` rounds before ALA is switched on after round K (at
    the earliest round 1) to ``last`` (K < last, as :func:`fig4_configs` asks)."""
    _check_K(K, last)
    if not isinstance(before, int) or isinstance(before, bool) or before < 0:
        raise ConfigError("rounds before K", before, "an integer >= 0")
    return window_rounds((max(1, K - before), last))


def _check_K(K, last: int) -> None:
    if not isinstance(K, int) or isinstance(K, bool) or not 0 <= K < last:
        raise ConfigError("K", K, f"an integer with 0 <= K < {last} (the window's last round): ALA must be "
                          "on for part of the window")


def window_rounds(window) -> tuple[int, int]:
    """A window of rounds ``(first, last)`` as two integers with 1 <= first <= last."""
    try:
        first, last = (int(v) for v in window)
    except (TypeError, ValueError):
        raise ConfigError("window", window, "a pair (first round, last round)") from None
    if not 1 <= first <= last:
        raise ConfigError("window", window, "rounds with 1 <= first <= last")
    return first, last


# -------------------------------------------------------------------------------- FedLAMA's comparison

# FedLAMA's comparison at two scales: (preset, its changes).
FEDLAMA_SCALES = {
    # teach problem (embedded MNIST subset, 20 clients, Dir(0.1), MLP), 100 rounds of τ0 = 5 steps: seconds on a CPU
    "quick": ("teach-fedlama", {}),
    # the FedALA repository's MNIST Dir(0.1) partition, FedAvgCNN, reference lr 0.005 and batch 10; τ0 = 50 steps,
    # 200 rounds (10,000 steps ≈ 4 epochs of a median client). GPU scale (benchmarks/results.md: CPU rounds).
    "full": ("mnist-dir0.1", {"tau0": 50, "local_steps": 50, "phi": 2, "rounds": 200, "shuffle": True,
                              "record_train_loss": False, "eval_every": 2, "checkpoint_every": 20}),
}


def fedlama_base(scale: str = "quick", overrides: Mapping | None = None) -> RunConfig:
    """The base config of FedLAMA's comparison at ``scale`` ("quick" or "full"), with ``overrides``."""
    if scale not in FEDLAMA_SCALES:
        raise ConfigError("preset", scale, "one of " + ", ".join(FEDLAMA_SCALES))
    name, extra = FEDLAMA_SCALES[scale]
    return preset(name, **{**extra, **(overrides or {})})


def comparison_configs(base: RunConfig, *, tau0: int | None = None, phi: int | None = None,
                       with_ala: bool = False) -> dict[str, RunConfig]:
    """FedAvg(τ0), FedAvg(φτ0) and FedLAMA(τ0, φ) on ``base``'s data and hyper-parameters, by label.

    All three do the same local SGD steps in all: FedAvg(φτ0) runs (rounds − 1) // φ + 1 rounds of φ·τ0
    steps, so its evaluations fall on the steps where FedLAMA's model is fully synchronised. ``with_ala``
    adds FedALA(τ0) (ALA on FedAvg(τ0)) and FedLAMA+ALA(τ0, φ) (docs/design.md#fedlama).
    """
    tau0 = base.tau0 if tau0 is None else tau0
    phi = base.phi if phi is None else phi
    rounds_long = (base.rounds - 1) // phi + 1
    cfgs = {
        f"FedAvg(τ0={tau0})": base.replace(algo="fedavg", local_steps=tau0),
        f"FedAvg(φτ0={phi * tau0})": base.replace(algo="fedavg", local_steps=phi * tau0, rounds=rounds_long),
        f"FedLAMA(τ0={tau0}, φ={phi})": base.replace(algo="fedlama", tau0=tau0, phi=phi, local_steps=tau0),
    }
    if with_ala:
        cfgs[f"FedALA(τ0={tau0})"] = base.replace(algo="fedala", local_steps=tau0)
        cfgs[f"FedLAMA+ALA(τ0={tau0}, φ={phi})"] = base.replace(algo="fedlama+ala", tau0=tau0, phi=phi,
                                                                 local_steps=tau0)
    return cfgs


# ------------------------------------------------------------------------------------------ paper plans


def paper_methods() -> dict[str, tuple[str, ...]]:
    """The methods the FedALA paper compares (its Table 2; specs with ``fedala_paper`` in the registry), by
    kind, each in the registry's order: ``local`` (no federation, the reference every personalised method should
    beat to be worth its communication), ``traditional`` (FedAvg, FedProx), ``fine_tuned`` (their ``-c``
    variants), ``pfl`` (its personalised-FL baselines, by category) and ``fedala`` (the paper's own method)."""
    from ..algorithms import registry

    specs = [s for s in registry.specs() if s.fedala_paper]
    traditional = [s for s in specs if s.category == "traditional"]
    finetune = registry.modifier("finetune")
    return {
        "local": tuple(s.name for s in specs if s.category == "baseline"),
        "traditional": tuple(s.name for s in traditional),
        "fine_tuned": tuple(s.name + finetune.suffix for s in traditional if finetune.name in s.modifiers),
        "pfl": tuple(s.name for s in specs if s.category not in ("baseline", "traditional")),
        "fedala": tuple(a for a, target in registry.aliases().items() if registry.resolve(target).base.fedala_paper),
    }


# The FedALA paper's Table 2 in its order, Local first.
PAPER_METHODS = tuple(name for kind in paper_methods().values() for name in kind)


def with_ala(algos) -> tuple[str, ...]:
    """Each method of ``algos`` that takes ALA, followed by itself with ALA (the paper's Table 4; FedAvg's is
    FedALA), in order: ``("fedavg", "fedala", "fedprox", "fedprox+ala", …)``."""
    from ..algorithms import registry

    suffix = registry.modifier("ala").suffix
    out = []
    for a in algos:
        alg = registry.resolve(a)
        if alg.uses("ala") or alg.modifiers or "ala" not in alg.base.modifiers:
            continue
        out += [a, registry.alias_for(a + suffix)]
    return tuple(out)


@dataclass
class Plan:
    """Everything the figures of one scale are computed from (all explicit, all overridable)."""

    name: str
    base_name: str  # the preset the practical setting comes from ("teach", "mnist-dir0.1")
    practical: RunConfig  # Dir(0.1): Table 7 column, ablations, Fig. 2, 3, 5
    pathological: RunConfig  # Table 2 column, Fig. 4
    seeds: tuple[int, ...]  # tables (paper: 5 runs)
    ablation_seeds: tuple[int, ...]
    table_algos: tuple[str, ...] = PAPER_METHODS
    s_values: tuple[float, ...] = (5, 10, 20, 40, 80, 100)
    p_values: tuple[int, ...] = (1, 2, 3)
    fig2: dict = field(default_factory=dict)  # client, p, rounds (two rounds shown)
    fig3_client: int = 8
    # setting, K, window, client, grid, num_samples; or K "auto": chosen from the FedAvg run's curve
    # (plateau: points, rounds; search: first and last round tried; before/after: the window around K)
    fig4: dict = field(default_factory=dict)
    fig5_rounds: int = 200
    # FedLAMA's comparison: its scale (a key of FEDLAMA_SCALES) and changes to it
    fedlama: tuple[str, dict] = field(default_factory=lambda: ("quick", {}))
    notes: list[str] = field(default_factory=list)
    figures: tuple[str, ...] | None = None  # the figures this preset makes (None: all of reproduce/paper.py's)
    ablation_rounds: int | None = None  # horizon of the s and p ablations (None: the practical setting's)
    # What the runs record or keep besides their result (recording only, not in the key), so the first
    # figure to compute a run records what every figure reads: (match, settings) pairs, see recorded()
    recording: list[tuple[dict, dict]] = field(default_factory=list)
    shortened: bool = False  # a horizon far below the paper's: tables and findings say so

    # the data settings the figures show, in their order (a plan may show the practical one only)
    settings: tuple[str, ...] = ("pathological", "practical")

    def setting(self, which: str) -> RunConfig:
        return self.practical if which == "practical" else self.pathological

    def recorded(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` with the recording settings the plan wants for it (:attr:`recording`): a rule's ``match``
        names a ``setting`` (practical or pathological data) and config fields (``algo``, ``seed``,
        ``rounds``, a tuple meaning any of those values); its settings are applied when all match."""
        for match, settings in self.recording:
            ok = True
            for k, v in match.items():
                have = cfg.data == self.setting(v).data if k == "setting" else getattr(cfg, k)
                ok = ok and (have if k == "setting" else (have in v if isinstance(v, tuple) else have == v))
            if ok:
                cfg = cfg.replace(**settings)
        return cfg

    def table(self, setting: str, algos: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None,
              name: str | None = None) -> SweepSpec:
        """The runs of a Table 2/7 column: ``setting`` × algorithms (default: the table's) × seeds."""
        return SweepSpec(self.setting(setting), (("algo", algos or self.table_algos),
                                                 ("seed", self.seeds if seeds is None else seeds)),
                         name=name or f"{self.name}-{setting}")

    def ala_table(self, seeds: tuple[int, ...] | None = None) -> SweepSpec:
        """The runs of Table 4: each of the table's methods that takes ALA, with and without it, on the
        practical setting."""
        return self.table("practical", with_ala(self.table_algos), seeds, name=f"{self.name}-ala")

    def ablation(self, param: str) -> SweepSpec:
        """The runs of Table 1 (``param="s"``) or Table 6 (``"p"``): FedALA on the practical setting, over
        :attr:`ablation_rounds`."""
        values = {"s": self.s_values, "p": self.p_values}[param]
        grid = ((param, values), ("seed", self.ablation_seeds))
        base = self.practical.replace(algo="fedala", rounds=self.ablation_rounds or self.practical.rounds)
        return SweepSpec(base, grid, name=f"{self.name}-{param}-ablation")


# The MNIST plan's rounds (what a 2-core CPU affords in an hour for every figure of the plan) and the pFL
# comparison's (the shortest horizon at which it says something, which its arithmetic floors do not let fit
# in 90 minutes): docs/reproduction.md#the-plans-budget.
MNIST_ROUNDS = 15
MNIST_PFL_ROUNDS = 10


def _mnist_fig4(R: int, K: int | None = None, window: tuple[int, int] | None = None) -> dict:
    """Fig. 4 on MNIST pathological for a horizon of R rounds: K where FedAvg's best accuracy has plateaued,
    searched on the curve of the tables' pathological FedAvg run extended to twice the horizon (FedAvg is
    still rising after R rounds), and a window of ``before`` rounds before K and ``after`` after it. Or a
    fixed protocol (``K``, ``window``)."""
    H = 2 * R  # the FedAvg run K is read from
    y = 3 if H >= 12 else 1  # plateau: best accuracy rises by < 0.5 points over the next y rounds
    hi = max(1, H - y)
    lo = min(max(1, H // 3), hi)
    f = {"setting": "pathological", "K": "auto", "plateau": {"points": 0.5, "rounds": y}, "search": (lo, hi),
         "horizon": H, "before": min(2, lo - 1), "after": 5 if H >= 12 else 1, "client": 4, "grid": 21,
         "num_samples": 300}
    if K is not None:  # nothing to read off a curve: no longer FedAvg run
        f.update(K=K, window=tuple(window), search=(K, K), before=K - window[0], after=window[1] - K, horizon=R)
    return f


def _mnist_recording(plan: Plan) -> list[tuple[dict, dict]]:
    """What the MNIST plan's shared runs record and keep (recording only), so that every figure reads them:
    Fig. 5's train-split losses; FedAvg's state of round 1, from which FedALA and the ablations branch;
    FedALA's state at the ablations' horizon (s = 80, p = 1 is that run cut there); the pathological FedAvg
    runs' snapshots of Fig. 4's client and the states of the rounds K may take: the tables' run (R rounds)
    keeps those up to R, and its extension to Fig. 4's horizon (which starts from its last state) the rest."""
    R, f, s0 = plan.practical.rounds, plan.fig4, plan.seeds[0]
    lo, hi = f["search"]
    H = max(R, f.get("horizon", R))
    grid = sorted({1, *range(lo, hi + 1, 2), hi, R, H})
    snapshots = {"snapshot_clients": str(f["client"]), "snapshot_from": max(1, lo - f["before"])}
    h = plan.ablation_rounds or R
    rules = [
        ({"setting": "practical", "algo": ("fedavg", "fedala"), "seed": s0, "rounds": plan.fig5_rounds},
         {"record_train_loss": True}),
        ({"setting": "practical", "algo": "fedavg", "seed": s0, "rounds": R}, {"keep_states": "1"}),
        ({"setting": "pathological", "algo": "fedavg", "seed": s0, "rounds": R},
         {**snapshots, "keep_states": ",".join(str(r) for r in grid if r <= R)}),
    ]
    if H > R:
        rules.append(({"setting": "pathological", "algo": "fedavg", "seed": s0, "rounds": H},
                      {**snapshots, "keep_states": ",".join(map(str, grid))}))
    if h < R:
        rules.append(({"setting": "practical", "algo": "fedala", "seed": s0, "rounds": R}, {"keep_states": str(h)}))
    return rules


_POOLED_NOTE = ("torchvision MNIST not found: MNIST pathological is drawn from the Dir(0.1) partition's 70,000 images "
                "pooled (dataset {})")


def build_plan(preset_name: str = "quick", *, rounds: int | None = None, seeds: int | None = None,
               fig4: tuple[int, int, int] | None = None, device: str | None = None) -> Plan:
    """The runs behind every figure of ``preset_name`` ("quick", "mnist", "mnist-pfl" or "paper").

    ``rounds`` replaces the number of rounds of every run except Fig. 4's; ``seeds`` the number of seeds
    (tables; ablations use at most as many); ``fig4=(K, first, last)`` replaces Fig. 4's protocol;
    ``device`` every run's device. These exist to scale a preset down for a smoke test.

    - ``quick``: the teach preset's data (3,000 MNIST digits at 14×14, embedded), 20 clients, its MLP
      (196→128→64→10), 50 rounds;
      practical Dir(0.1) and pathological (2 labels per client) partitions; 3 seeds for tables, 2 for
      ablations. Minutes on a 2-core CPU.
    - ``mnist``: the paper's data, model and reference hyper-parameters at the horizon a 2-core CPU affords
      in an hour (:data:`MNIST_ROUNDS` rounds, one seed; docs/reproduction.md#the-plans-budget): the FedALA
      repository's MNIST Dir(0.1) partition and MNIST pathological, FedAvgCNN, lr 0.005, batch 10, η 1, s 80,
      p 1, ρ 1. Runs are shared between figures and branched from one another (docs/design.md#run-store);
      Fig. 4's K is chosen from the pathological FedAvg run's curve (docs/design.md#loss-surface). Tables and
      findings are labelled as shortened.
    - ``mnist-pfl``: the FedALA paper's whole comparison on the same MNIST Dir(0.1) partition and settings:
      Tables 2 (its practical column), 3 and 4 with every pFL baseline, at :data:`MNIST_PFL_ROUNDS` rounds and
      one seed, labelled as shortened; every method in PFLlib's data order (each epoch reshuffled).
    - ``paper``: the FedALA repository's own MNIST Dir(0.1) partition (``preset("mnist-dir0.1")``, 2,000
      rounds, 5 seeds) with the 4-layer CNN, and torchvision MNIST pathological (``preset("mnist-pat")``)
      when its files are present; Fig. 4 as in the paper (K = 155, rounds 140–200, client 4). For a GPU.
    """
    if preset_name not in _PLANS:
        raise ConfigError("preset", preset_name, PLAN_NAMES_TEXT)
    plan = _PLANS[preset_name]()
    _scale(plan, rounds=rounds, seeds=seeds, fig4=fig4, device=device)
    return plan


def _shortened(R: int) -> str:
    return (f"shortened horizon: {R} rounds per run where the paper runs 2,000, one seed where it runs 5; "
            "accuracies are far from converged and not comparable to the paper's numbers")


def _pooled_notes(pathological: RunConfig) -> list[str]:
    """The note that the pathological setting pools the Dir(0.1) partition's images, where it does."""
    ds = pathological.data.dataset
    return [] if ds == "mnist" else [_POOLED_NOTE.format(dataset_label(ds))]


def _quick_plan() -> Plan:
    return Plan(
        name="quick", base_name="teach", practical=preset("teach"),
        pathological=preset("teach", partition="pathological", classes_per_client=2),
        seeds=(0, 1, 2), ablation_seeds=(0, 1), p_values=(1, 2, 3),
        # p = 2 shows two layers of W (the MLP's fc2 and output); client 8 as in the paper's Fig. 3
        fig2={"client": 8, "p": 2, "rounds": (2, None)},
        fig3_client=8,
        # as notebook 5: ALA switched on after round 40, once FedAvg has levelled off; client 7 holds
        # ≈ 300 training images (client 4, the paper's, only 45 on this data); rounds 35–50 shown
        fig4={"setting": "pathological", "K": 40, "window": (35, 50), "client": 7, "grid": 31,
              "num_samples": 256},
        fig5_rounds=200,
    )


def _paper_plan() -> Plan:
    pathological = preset("mnist-pat")
    return Plan(
        name="paper", base_name="mnist-dir0.1", practical=preset("mnist-dir0.1"), pathological=pathological,
        seeds=(0, 1, 2, 3, 4), ablation_seeds=(0, 1, 2), p_values=(1, 2, 3, 4),
        fig2={"client": 8, "p": 2, "rounds": (2, None)}, fig3_client=8,
        # the paper's protocol (pathological: torchvision MNIST, else the Dir(0.1) partition's images pooled)
        fig4={"setting": "pathological", "K": 155, "window": (140, 200), "client": 4, "grid": 21,
              "num_samples": 300},
        fig5_rounds=2000, fedlama=("full", {}), notes=_pooled_notes(pathological),
    )


def _mnist_plan() -> Plan:
    R = MNIST_ROUNDS
    # checkpoints every 2 rounds: a killed call loses at most one round of the run it was in
    pathological = preset("mnist-pat", rounds=R, checkpoint_every=2)
    return Plan(
        name="mnist", base_name="mnist-dir0.1", practical=preset("mnist-dir0.1", rounds=R, checkpoint_every=2),
        pathological=pathological, seeds=(0,), ablation_seeds=(0,), p_values=(1, 2),
        # p = 1: W of the head, the table's FedALA run; client 8 holds one 0 and 3,599 ones
        fig2={"client": 8, "p": 1, "rounds": (2, None)}, fig3_client=8,
        fig4=_mnist_fig4(R), fig5_rounds=R, notes=[_shortened(R), *_pooled_notes(pathological)],
        ablation_rounds=3, shortened=True,
        # the hour's budget holds these four methods; the pFL baselines have their own plan (mnist-pfl)
        table_algos=("fedavg", "fedprox", "fedavg-c", "fedala"),
        figures=("table2", "table3", "fig2", "fig3", "fig4", "fig5", "table1", "table6", "data", "curves"),
    )


# The pFL comparison's data order, one for all its methods: each client's split reshuffled every epoch, as PFLlib's
# loaders did when the paper's baselines ran (FedALA's own code walks it in order: docs/reproduction.md#data-order)
PFL_ORDER_NOTE = ("data order: every method reshuffles each client's train split every epoch (PFLlib's "
                  "DataLoader(shuffle=True), under which the paper's baselines ran; the official FedALA code walks it "
                  "in its stored order)")


def _mnist_pfl_plan() -> Plan:
    R = MNIST_PFL_ROUNDS
    # APPLE's pull fades over the comparison's own rounds, as PFLlib's default L = 1 does over its run
    practical = preset("mnist-dir0.1", rounds=R, checkpoint_every=2, apple_fade_rounds=R, shuffle=True)
    plan = Plan(
        name="mnist-pfl", base_name="mnist-dir0.1", practical=practical, pathological=practical,
        seeds=(0,), ablation_seeds=(0,), settings=("practical",), shortened=True,
        notes=[_shortened(R), PFL_ORDER_NOTE], figures=("table2", "table3", "applicability"),
    )
    # X+ALA is X through round 1 (ALA skips it): each method of Table 4 keeps its state of round 1, so that
    # its run with ALA (Table 2's FedALA included) starts there instead of recomputing it
    bases = with_ala(plan.table_algos)[::2]
    plan.recording = [({"setting": "practical", "algo": bases, "seed": plan.seeds[0]}, {"keep_states": "1"})]
    return plan


_PLANS = {"quick": _quick_plan, "mnist": _mnist_plan, "mnist-pfl": _mnist_pfl_plan, "paper": _paper_plan}
PLAN_NAMES = tuple(_PLANS)
PLAN_NAMES_TEXT = "one of " + ", ".join(PLAN_NAMES)


def _scale(plan: Plan, *, rounds: int | None, seeds: int | None, fig4, device: str | None) -> None:
    """:func:`build_plan`'s overrides, applied to ``plan`` in place."""
    changes = {}
    if rounds is not None:
        if not isinstance(rounds, int) or rounds < 2:
            raise ConfigError("rounds", rounds, "an integer >= 2")
        changes["rounds"] = rounds
        plan.fig5_rounds = rounds
        if plan.name == "mnist-pfl":  # APPLE's pull fades over the comparison's own rounds (_mnist_pfl_plan)
            changes["apple_fade_rounds"] = rounds
    if device is not None:
        changes["device"] = device
    if changes:
        plan.practical = plan.practical.replace(**changes)
        plan.pathological = plan.pathological.replace(**changes)
    if plan.name == "quick" and rounds is not None:  # --rounds shortens FedLAMA's teach runs too
        plan.fedlama = ("quick", {"rounds": rounds})
    if seeds is not None:
        if not isinstance(seeds, int) or seeds < 1:
            raise ConfigError("seeds", seeds, "an integer >= 1")
        plan.seeds = tuple(range(seeds))
        plan.ablation_seeds = tuple(range(min(seeds, len(plan.ablation_seeds))))
    if fig4 is not None:
        try:
            K, first, last = (int(v) for v in fig4)
        except (TypeError, ValueError):
            raise ConfigError("fig4", fig4, "K,FIRST,LAST (three integers)") from None
        window_rounds((first, last))
        if plan.name == "mnist" and not first <= K <= last:
            raise ConfigError("fig4", fig4, "K within the window FIRST…LAST")
        plan.fig4 = {**plan.fig4, "K": K, "window": (first, last)}
    if plan.shortened:  # the note names the horizon the runs have
        plan.notes[0] = _shortened(plan.practical.rounds)
    if plan.name == "mnist":
        R = plan.practical.rounds
        plan.ablation_rounds = min(plan.ablation_rounds, R)
        if rounds is not None or fig4 is not None:
            f = plan.fig4
            plan.fig4 = _mnist_fig4(R, *((f["K"], f["window"]) if fig4 is not None else ()))
        plan.recording = _mnist_recording(plan)


# ---------------------------------------------------------------------------- named reproduction sweeps

# Tables 7 and 2 of the paper as sweeps: the paper plan's tables, MNIST Dir(0.1) on the FedALA repository's
# own partition and MNIST pathological (its data source chosen by presets.mnist_pathological_dataset),
# 2,000 rounds, 5 seeds.
SWEEPS = {
    "table7-mnist-dir0.1": (
        lambda: build_plan("paper").table("practical", name="table7-mnist-dir0.1"),
        "Table 7: MNIST Dir(0.1), every method of Table 2 × 5 seeds, 2000 rounds"),
    "table2-mnist-pat": (
        lambda: build_plan("paper").table("pathological", ("fedavg", "fedprox", "fedala"),
                                          name="table2-mnist-pat"),
        "Table 2 (MNIST): pathological, FedAvg/FedProx/FedALA × 5 seeds, 2000 rounds"),
}


def sweep_preset(name: str) -> SweepSpec:
    """A named reproduction sweep (see :data:`SWEEPS`)."""
    if name not in SWEEPS:
        raise ConfigError("sweep", name, "one of " + ", ".join(SWEEPS))
    return SWEEPS[name][0]()
