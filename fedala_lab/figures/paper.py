"""The paper's figures and tables, each mapped to its runs and its Display; ``fedala-lab figures``.

    fedala-lab figures                                   # quick preset: digits, a few minutes on a laptop CPU
    fedala-lab figures --preset paper                    # GPU scale, the shared MNIST data → figures/paper/
    fedala-lab figures --only fig4,table2 --no-progress

Every run comes from the run store (``RunStore.get_or_run``): a second call redraws from cached runs in
seconds. Each figure's runs are configured here, explicitly, per preset (:func:`build_plan`); the
output folder gets PNG (and PDF) files, Markdown/LaTeX/CSV versions of the tables, and a ``README.md``
that says for every file which paper figure or table it reproduces, the command and configs that made
it, how long it took and what it shows (numbers read off the runs, never typed in).

Presets:

- ``quick``: scikit-learn's 8×8 digits, 20 clients, the teach preset's MLP (64→128→64→10), 50 rounds;
  practical Dir(0.1) and pathological (2 labels per client) partitions; 3 seeds for tables, 2 for
  ablations. Minutes on a 2-core CPU.
- ``paper``: the FedALA repository's own MNIST Dir(0.1) partition (``preset("mnist-dir0.1")``, 2,000
  rounds, 5 seeds) with the 4-layer CNN, and torchvision MNIST pathological (``preset("mnist-pat")``)
  when its files are present; Fig. 4 as in the paper (K = 155, rounds 140–200, client 4). Meant for a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..config import RunConfig
from ..errors import ConfigError
from ..record.store import RunStore

# ==================================================================================================
# Fig. 4 protocol


def fig4_runs(base_cfg: RunConfig, *, K: int, window: tuple[int, int], client: int, store=None,
              progress: bool = False, callback: Callable | None = None):
    """The paper's Fig. 4 protocol: (FedAvg run, FedALA run) sharing their first K rounds.

    FedALA runs with ALA deactivated for rounds ≤ K (``ala_after=K``, plain FedAvg initialisation) and
    activated afterwards; FedAvg is the same run continued without ALA. Both record ``client``'s local
    models from the window's first round on and stop at its last round. Because every random draw is
    derived from (seed, round, client, purpose), the FedAvg run with the same seed *is* the continuation
    of the FedALA run's first K rounds (tested in tests/test_ala.py), so the two runs are simply
    configured, not forked from a checkpoint. Paper: MNIST pathological, K = 155, window 140–200.
    """
    cfgs = fig4_configs(base_cfg, K=K, window=window, client=client)
    store = store if isinstance(store, RunStore) else RunStore(store)
    return tuple(_with_snapshots(store, c, client, cfgs[0].snapshot_from, progress, callback) for c in cfgs)


def fig4_configs(base_cfg: RunConfig, *, K: int, window: tuple[int, int],
                 client: int) -> tuple[RunConfig, RunConfig]:
    """The two configs of :func:`fig4_runs` (FedAvg, FedALA with ``ala_after=K``), validated."""
    first, last = _window_arg(window)
    if not isinstance(K, int) or isinstance(K, bool) or not 0 <= K < last:
        raise ConfigError("K", K, f"an integer with 0 <= K < {last} (the window's last round): ALA must be "
                          "on for part of the window")
    if not isinstance(client, int) or isinstance(client, bool) or client < 0:
        raise ConfigError("client", client, "a client id (integer >= 0)")
    cfg = base_cfg.replace(rounds=last, snapshot_clients=str(client), snapshot_from=first)
    return cfg.replace(algo="fedavg"), cfg.replace(algo="fedala", ala_after=K)


def _window_arg(window) -> tuple[int, int]:
    try:
        first, last = (int(v) for v in window)
    except (TypeError, ValueError):
        raise ConfigError("window", window, "a pair (first round, last round)") from None
    if not 1 <= first <= last:
        raise ConfigError("window", window, "rounds with 1 <= first <= last")
    return first, last


def _with_snapshots(store, cfg: RunConfig, client: int, first: int, progress, callback):
    """The stored run of ``cfg`` if it holds the snapshots needed, else (re)compute it with them."""
    return store.get_or_run(cfg, progress=progress, callback=callback,
                            needs=lambda run: _has_snapshots(run, client, first))


def _has_snapshots(run, client: int, first: int) -> bool:
    r = run.arrays.get(f"snap_rounds/{client}")
    return r is not None and len(r) > 0 and int(r[0]) <= first


# ==================================================================================================
# plans: which runs each preset uses


@dataclass
class Plan:
    """Everything the figures of one preset are computed from (all explicit, all overridable)."""

    name: str
    base_name: str  # the preset the practical setting comes from ("teach", "mnist-dir0.1")
    practical: RunConfig  # Dir(0.1): Table 7 column, ablations, Fig. 2, 3, 5
    pathological: RunConfig  # Table 2 column, Fig. 4
    seeds: tuple[int, ...]  # tables (paper: 5 runs)
    ablation_seeds: tuple[int, ...]
    table_algos: tuple[str, ...] = ("fedavg", "fedprox", "fedavg-c", "fedala")
    s_values: tuple[float, ...] = (5, 10, 20, 40, 80, 100)
    p_values: tuple[int, ...] = (1, 2, 3)
    fig2: dict = field(default_factory=dict)  # client, p, rounds (two rounds shown)
    fig3_client: int = 8
    fig4: dict = field(default_factory=dict)  # setting, K, window, client, grid, num_samples
    fig5_rounds: int = 200
    notes: list[str] = field(default_factory=list)

    def setting(self, which: str) -> RunConfig:
        return self.practical if which == "practical" else self.pathological


def build_plan(preset_name: str = "quick", *, rounds: int | None = None, seeds: int | None = None,
               fig4: tuple[int, int, int] | None = None, device: str | None = None) -> Plan:
    """The runs behind every figure of ``preset_name`` ("quick" or "paper").

    ``rounds`` replaces the number of rounds of every run except Fig. 4's; ``seeds`` the number of seeds
    (tables; ablations use at most as many); ``fig4=(K, first, last)`` replaces Fig. 4's protocol;
    ``device`` every run's device. These exist to scale a preset down for a smoke test.
    """
    from ..presets import preset

    if preset_name == "quick":
        practical = preset("teach")
        pathological = preset("teach", partition="pathological", classes_per_client=2)
        plan = Plan(
            name="quick", base_name="teach", practical=practical, pathological=pathological,
            seeds=(0, 1, 2), ablation_seeds=(0, 1), p_values=(1, 2, 3),
            # p = 2 shows two layers of W (the MLP's fc2 and output); client 8 as in the paper's Fig. 3
            fig2={"client": 8, "p": 2, "rounds": (2, None)},
            fig3_client=8,
            # K and window chosen at teach scale: ALA switched on at round 31 of 40; 13 rounds shown
            fig4={"setting": "pathological", "K": 30, "window": (28, 40), "client": 4, "grid": 31,
                  "num_samples": 256},
            fig5_rounds=200,
        )
    elif preset_name == "paper":
        practical = preset("mnist-dir0.1")
        pathological = preset("mnist-pat")
        notes = []
        if pathological.data.dataset != "mnist":
            notes.append("torchvision MNIST not found: MNIST pathological is drawn from the shared partition's "
                         f"70,000 images pooled (dataset {pathological.data.dataset})")
        plan = Plan(
            name="paper", base_name="mnist-dir0.1", practical=practical, pathological=pathological,
            seeds=(0, 1, 2, 3, 4), ablation_seeds=(0, 1, 2), p_values=(1, 2, 3, 4),
            fig2={"client": 8, "p": 2, "rounds": (2, None)}, fig3_client=8,
            # the paper's protocol (pathological: torchvision MNIST, else the shared images pooled)
            fig4={"setting": "pathological", "K": 155, "window": (140, 200), "client": 4, "grid": 21,
                  "num_samples": 300},
            fig5_rounds=2000, notes=notes,
        )
    else:
        raise ConfigError("preset", preset_name, "quick or paper")

    changes = {}
    if rounds is not None:
        if not isinstance(rounds, int) or rounds < 2:
            raise ConfigError("rounds", rounds, "an integer >= 2")
        changes["rounds"] = rounds
        plan.fig5_rounds = rounds
    if device is not None:
        changes["device"] = device
    if changes:
        plan.practical = plan.practical.replace(**changes)
        plan.pathological = plan.pathological.replace(**changes)
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
        _window_arg((first, last))
        plan.fig4 = {**plan.fig4, "K": K, "window": (first, last)}
    return plan


# ==================================================================================================
# the figures


class _FigureStore(RunStore):
    """The run store as the figures use it: each run is read from disk once per call of
    :func:`run_figures` (figures share runs), and the runs handed out and computed are counted for the
    README's "runs computed / used" (through every path: ``Context.run``, :func:`fig4_runs`, FedLAMA's)."""

    def __init__(self, root=None):
        super().__init__(root)
        self._runs: dict = {}  # config key -> Run
        self.used: list = []  # runs handed out for the current figure (repeats included)
        self.computed = 0  # of which computed now (not from the store)

    def find(self, cfg: RunConfig):
        hit = self._runs.get(cfg.key())
        return hit if hit is not None else super().find(cfg)

    def get_or_run(self, cfg: RunConfig, *, force: bool = False, needs=None, **kwargs):
        key = cfg.key()
        hit = None if force else self.find(cfg)
        if hit is None or (needs is not None and not needs(hit)):
            # absent, forced, or without what this caller needs: the store re-reads under its lock or
            # recomputes, never from the memo
            self._runs.pop(key, None)
            hit = super().get_or_run(cfg, force=force, needs=needs, **kwargs)
            self.computed += 1
        self._runs[key] = hit
        self.used.append(hit)
        return hit


@dataclass
class Context:
    plan: Plan
    store: _FigureStore
    out: Path
    progress: bool = True
    formats: tuple[str, ...] = ("png", "pdf")
    dpi: int = 100

    def run(self, cfg: RunConfig):
        """The run of ``cfg`` from the store, or computed now."""
        return self.store.get_or_run(cfg, progress=self.progress)

    def save(self, disp, stem: str) -> list[Path]:
        """Write ``disp``'s figure as out/stem.<format>. PDFs carry no creation date, so files change only
        when their content does (they are committed)."""
        paths = []
        for fmt in self.formats:
            p = self.out / f"{stem}.{fmt}"
            meta = {"CreationDate": None} if fmt == "pdf" else ({"Date": None} if fmt == "svg" else {})
            disp.figure_.savefig(p, dpi=self.dpi, metadata=meta)
            paths.append(p)
        return paths

    def write(self, name: str, text: str) -> Path:
        p = self.out / name
        p.write_text(text)
        return p


@dataclass
class FigureSpec:
    key: str  # --only name
    paper: str  # which figure/table of the paper it reproduces
    title: str
    make: Callable[[Context], tuple[list[Path], list[str]]]  # -> files, findings


def _table_runs(ctx: Context, setting: str, algos: Iterable[str] | None = None, seeds=None):
    cfg = ctx.plan.setting(setting)
    return [ctx.run(cfg.replace(algo=a, seed=s)) for a in (algos or ctx.plan.table_algos)
            for s in (seeds if seeds is not None else ctx.plan.seeds)]


def _settings(plan: Plan) -> list[str]:
    return ["pathological", "practical"]


def make_data(ctx: Context):
    from matplotlib.figure import Figure

    from ..analysis.tables import setting_label
    from ..data.federated import FederatedData
    from ..figures.data import DataDistributionDisplay

    settings = _settings(ctx.plan)
    fig = Figure(figsize=(8.5, 3.2 * len(settings)), layout="constrained")
    axes = fig.subplots(len(settings), 1, squeeze=False)[:, 0]
    findings = []
    for ax, s in zip(axes, settings):
        cfg = ctx.plan.setting(s)
        data = FederatedData.from_config(cfg.data)
        d = DataDistributionDisplay.from_data(data, ax=ax,
                                              title=f"{setting_label(cfg)}: samples per client and label")
        summ = data.summary()
        findings.append(f"{setting_label(cfg)}: {int(summ['train'].sum())} train / {int(summ['test'].sum())} "
                        f"test samples; labels per client {int(summ['labels'].min())}–{int(summ['labels'].max())}; "
                        f"train samples per client {int(summ['train'].min())}–{int(summ['train'].max())}")
    return ctx.save(d, "fig6_data_distribution"), findings


def make_fig2(ctx: Context):
    from matplotlib.figure import Figure

    from .ala import ALAWeightsDisplay

    p, client = ctx.plan.fig2["p"], ctx.plan.fig2["client"]
    run = ctx.run(ctx.plan.practical.replace(algo="fedala", p=p, seed=ctx.plan.ablation_seeds[0]))
    first, last = ctx.plan.fig2["rounds"]
    last = last or int(run.rounds["round"].max())
    fig = Figure(figsize=(9.5, 6.6), layout="constrained")
    subs = fig.subfigures(2, 1)
    disps = [ALAWeightsDisplay.from_run(run, client, r, ax=sub.subplots(),
                                        title=f"client {client}, after ALA in round {r}")
             for sub, r in zip(subs, (first, last))]
    findings = []
    for d in disps:
        s = d.summary()
        findings.append(f"round {d.round_}: " + "; ".join(
            f"{r.param} mean {r.mean:.2f} ({100 * r.at_1:.0f} % at 1, {100 * r.at_0:.0f} % at 0)"
            for r in s.itertuples()))
    change = max(float(abs(disps[1].weights_[n] - disps[0].weights_[n]).max()) for n in disps[0].weights_)
    findings.append(f"largest change of any weight between rounds {disps[0].round_} and {disps[1].round_}: "
                    f"{change:.3f}" + (" (W is learned in the start phase and then barely moves)" if change < 0.1
                                       else " (W keeps changing after the start phase)"))
    return ctx.save(disps[0], "fig2_ala_weights"), findings


def make_fig3(ctx: Context):
    from matplotlib.figure import Figure

    from ..analysis.tables import setting_label
    from .ala import ALALossDisplay

    settings = _settings(ctx.plan)
    fig = Figure(figsize=(6.4 * len(settings), 3.9), layout="constrained")
    axes = fig.subplots(1, len(settings), squeeze=False)[0]
    findings = []
    client = ctx.plan.fig3_client
    for ax, s in zip(axes, settings):
        cfg = ctx.plan.setting(s).replace(algo="fedala", seed=ctx.plan.seeds[0])
        run = ctx.run(cfg)
        d = ALALossDisplay.from_run(run, client, ax=ax, title=f"{setting_label(cfg)}: client {client}")
        c = d.curve_
        sp, later = c[c.start_phase], c[~c.start_phase]
        findings.append(f"{setting_label(cfg)}: start phase {len(sp)} epochs, loss {sp['loss'].iloc[0]:.3f} → "
                        f"{sp['loss'].iloc[-1]:.3f}; later rounds (one epoch each) mean {later['loss'].mean():.3f}, "
                        f"range {later['loss'].min():.3f}–{later['loss'].max():.3f}")
    return ctx.save(d, "fig3_ala_loss"), findings


def make_fig4(ctx: Context):
    from ..engine.simulate import resolve_device
    from .trajectory import TrajectoryDisplay

    f = ctx.plan.fig4
    cfg = ctx.plan.setting(f["setting"])
    fa, fl = fig4_runs(cfg, K=f["K"], window=f["window"], client=f["client"], store=ctx.store,
                       progress=ctx.progress)
    d = TrajectoryDisplay.from_runs(fa, fl, f["client"], grid=f["grid"], rounds=f["window"],
                                    num_samples=f["num_samples"], device=resolve_device(cfg.device),
                                    progress=ctx.progress)
    summ = d.landscape_.summary().set_index("label")
    a, b = summ.loc["FedAvg"], summ.loc["FedALA"]
    verdict = "lower" if b.final_end_loss < a.final_end_loss else "NOT lower"
    ev = d.landscape_.explained_variance
    findings = [
        (f"K = {f['K']} (ALA on from round {f['K'] + 1}), rounds {f['window'][0]}–{f['window'][1]}, client "
         f"{f['client']}, loss on {d.landscape_.num_samples} train samples, grid {f['grid']}×{f['grid']} "
         f"({d.landscape_.seconds:.1f} s)"),
        (f"FedALA's trajectory ends at {verdict} local loss than FedAvg's: last trained model "
         f"{b.final_end_loss:.4f} vs {a.final_end_loss:.4f} (true losses of the models, not of their "
         f"projections); mean start-of-round loss {b.mean_start_loss:.3f} vs {a.mean_start_loss:.3f}"),
        (f"C1 + C2 explain {100 * (ev[0] + ev[1]):.1f} % of the variance; largest distance off the plane "
         f"{max(a.max_residual, b.max_residual):.3g} (FedAvg {a.max_residual:.3g}, FedALA "
         f"{b.max_residual:.3g}; path lengths in the plane {a.path_length:.3g} and {b.path_length:.3g})"),
    ]
    d.landscape_.points().to_csv(ctx.out / "fig4_trajectory_points.csv", index=False)
    return ctx.save(d, "fig4_trajectory") + [ctx.out / "fig4_trajectory_points.csv"], findings


def make_fig5(ctx: Context):
    from .convergence import ConvergenceDisplay

    cfg = ctx.plan.practical.replace(rounds=ctx.plan.fig5_rounds, seed=ctx.plan.seeds[0])
    runs = [ctx.run(cfg.replace(algo=a)) for a in ("fedavg", "fedala")]
    d = ConvergenceDisplay.from_runs(runs)
    findings = []
    for r in d.gap_.itertuples():
        meet = f"within 10 % of each other from round {int(r.meet_round)} on" if r.meet_round == r.meet_round \
            else "not within 10 % of each other by the last round"
        findings.append(f"{r.label}: final initialised {r.final_init_loss:.4f} vs trained {r.final_trained_loss:.4f}; "
                        f"{meet}")
    return ctx.save(d, "fig5_convergence"), findings


def make_table2(ctx: Context):
    from .tables import AccuracyTable

    runs = [r for s in _settings(ctx.plan) for r in _table_runs(ctx, s)]
    t = AccuracyTable.from_runs(runs, title="Test accuracy (%) — Tables 2/7 layout")
    files = ctx.save(t, "table2_accuracy")
    files += [ctx.write("table2_accuracy.md", t.to_markdown()), ctx.write("table2_accuracy.tex", t.to_latex()),
              _csv(t.stats_, ctx.out / "table2_accuracy.csv")]
    st = t.stats_
    findings = []
    for setting, df in st.groupby("setting", sort=False):
        top = df.sort_values("best_mean", ascending=False).iloc[0]
        findings.append(f"{setting}: highest best-round accuracy {top['row']} {top['best_mean']:.2f} %; "
                        + ", ".join(f"{r.row} {r.best_mean:.2f}" for r in df.itertuples()))
    return files, findings


def make_applicability(ctx: Context):
    from ..config import algo_label
    from .tables import AccuracyTable

    runs = _table_runs(ctx, "practical", algos=("fedavg", "fedala", "fedprox", "fedprox+ala"))
    t = AccuracyTable.from_applicability(runs, title="ALA added to FedAvg and FedProx")
    files = ctx.save(t, "applicability")
    files += [ctx.write("applicability.md", t.to_markdown()), ctx.write("applicability.tex", t.to_latex()),
              _csv(t.stats_, ctx.out / "applicability.csv")]
    findings = [f"{algo_label(r.base)}+ALA ({r.with_ala}): {r.ala_mean:.2f} vs {algo_label(r.base)} "
                f"{r.base_mean:.2f} % ({r.gain:+.2f} points, best round)" for r in t.stats_.itertuples()]
    return files, findings


def _ablation(ctx: Context, param: str, values, stem: str):
    import pandas as pd

    from ..analysis.tables import format_mean_std, frame_to_markdown
    from .ablation import AblationDisplay

    base = ctx.plan.practical.replace(algo="fedala")
    runs = [ctx.run(base.replace(**{param: v}, seed=s)) for v in values for s in ctx.plan.ablation_seeds]
    d = AblationDisplay.from_runs(runs, param=param)
    df = d.frame_
    md = pd.DataFrame({param: [f"{v:g}" for v in df[param]]})
    md["best acc %"] = [format_mean_std(m, s) for m, s in zip(df["best_mean"], df["best_std"])]
    md["final acc %"] = [format_mean_std(m, s) for m, s in zip(df["final_mean"], df["final_std"])]
    if "ala_weights" in df:
        md["ALA weights"] = [f"{int(v):,}" for v in df["ala_weights"]]
    md["ALA ms/round"] = [f"{1000 * v:.1f}" for v in df["ala_seconds"]]
    files = ctx.save(d, stem) + [ctx.write(f"{stem}.md", frame_to_markdown(md.set_index(param))),
                                 _csv(df, ctx.out / f"{stem}.csv")]
    findings = [", ".join(f"{param}={r[param]:g}: {r['best_mean']:.2f}" for _, r in df.iterrows())
                + " (best-round accuracy %, mean over seeds)"]
    if "ala_weights" in df:
        findings.append("ALA weights: " + ", ".join(f"p={int(r['p'])}: {int(r['ala_weights']):,}"
                                                    for _, r in df.iterrows()))
    findings.append("ALA time per round, all clients (ms; wall clock, inflated by other load): " + ", ".join(
        f"{param}={r[param]:g}: {1000 * r['ala_seconds']:.0f}" for _, r in df.iterrows()))
    return files, findings


def make_table1(ctx: Context):
    return _ablation(ctx, "s", ctx.plan.s_values, "table1_s_ablation")


def make_table6(ctx: Context):
    return _ablation(ctx, "p", ctx.plan.p_values, "table6_p_ablation")


def make_curves(ctx: Context):
    from matplotlib.figure import Figure

    from ..analysis.tables import setting_label
    from .curves import AccuracyCurveDisplay

    settings = _settings(ctx.plan)
    fig = Figure(figsize=(6.0 * len(settings), 3.9), layout="constrained")
    axes = fig.subplots(1, len(settings), squeeze=False)[0]
    findings = []
    for ax, s in zip(axes, settings):
        runs = _table_runs(ctx, s, seeds=ctx.plan.seeds[:1])
        d = AccuracyCurveDisplay.from_runs(runs, ax=ax, title=f"{setting_label(ctx.plan.setting(s))} (seed "
                                                              f"{ctx.plan.seeds[0]})")
        findings.append(f"{setting_label(ctx.plan.setting(s))}: final " + ", ".join(
            f"{lab} {df['value'].iloc[-1]:.2f}" for lab, df in d.curves_.groupby("label", sort=False)))
    return ctx.save(d, "accuracy_curves"), findings


def make_fedlama(ctx: Context):
    """FedLAMA's figures (fedala_lab/figures/fedlama.py) at the matching scale (its runs are counted by
    ctx.store, which it uses)."""
    from .fedlama import fedlama_figures

    which = "quick" if ctx.plan.name == "quick" else "full"
    overrides = {"rounds": ctx.plan.practical.rounds} if which == "quick" else {}
    results = fedlama_figures(ctx.out, preset=which, store=ctx.store, progress=ctx.progress,
                              overrides=overrides or None)
    files = [Path(f) for r in results for f in r["files"]]
    return files, [f"{Path(r['file']).stem}: {r['reproduces']}" for r in results]


def _csv(df, path: Path) -> Path:
    df.to_csv(path, index=False, float_format="%.6g")
    return path


FIGURES: dict[str, FigureSpec] = {s.key: s for s in [
    FigureSpec("table2", "Tables 2 and 7", "accuracy of FedAvg, FedProx, FedAvg-C and FedALA, mean ± std over "
               "seeds, best and final round", make_table2),
    FigureSpec("fig2", "Fig. 2", "learned ALA weights W per layer (lighter = larger), after the start phase "
               "and in the last round", make_fig2),
    FigureSpec("fig3", "Fig. 3", "ALA loss against weight-learning epochs: start phase, then one epoch per "
               "round", make_fig3),
    FigureSpec("fig4", "Fig. 4", "local trajectory of one client on its loss surface (PCA plane), FedAvg "
               "black vs FedALA blue, ALA switched on after K rounds", make_fig4),
    FigureSpec("fig5", "Fig. 5", "global objective of the initialised vs the trained local models per round",
               make_fig5),
    FigureSpec("table1", "Table 1 (s)", "accuracy and ALA cost against s (% of local data used to learn W)",
               make_table1),
    FigureSpec("table6", "Tables 1 (p) and 6", "accuracy and number of ALA weights against p", make_table6),
    FigureSpec("applicability", "Applicability of ALA (Cifar100 in the paper)", "accuracy gain when ALA is "
               "added to FedAvg and FedProx", make_applicability),
    FigureSpec("data", "Figs. 6–9", "samples per client and label (bubble plots)", make_data),
    FigureSpec("fedlama", "FedLAMA Fig. 1 and Tables 1–4", "layer-wise aggregation intervals: δ_l vs 1 − λ_l, "
               "accuracy vs communication (also with ALA), interval timeline", make_fedlama),
    FigureSpec("curves", "— (supplementary)", "test accuracy per round of the table's methods (seed 0)",
               make_curves),
]}


# ==================================================================================================
# running them and writing the index


def describe_configs(cfgs: list[RunConfig], base: RunConfig, base_name: str) -> str:
    """``preset("teach") with partition=pathological; algo ∈ {fedavg, fedala}; seed ∈ {0, 1}`` — the
    fields in which ``cfgs`` differ from ``base``, with the values they take."""
    def flat(cfg):
        d = cfg.to_dict()
        data = d.pop("data")
        out = {k: v for k, v in d.items() if k not in ("device", "checkpoint_every")}
        # data fields by their replace() names (the partition seed is data_seed, apart from the run seed)
        out.update({("data_seed" if k == "seed" else k): v for k, v in data.items() if k not in ("root", "download")})
        return out

    b = flat(base)
    flats = [flat(c) for c in cfgs]
    parts = []
    for k in b:
        vals = list(dict.fromkeys(json.dumps(f.get(k), default=str) for f in flats))
        if vals == [json.dumps(b[k], default=str)]:
            continue
        shown = [json.loads(v) for v in vals]
        fmt = [str(v) for v in shown]
        parts.append(f"{k}={fmt[0]}" if len(fmt) == 1 else f"{k} ∈ {{{', '.join(fmt)}}}")
    return f'preset("{base_name}")' + (" with " + "; ".join(parts) if parts else "")


def run_figures(preset_name: str = "quick", *, only: Iterable[str] | None = None, out: str | Path | None = None,
                store=None, progress: bool = True, formats=("png", "pdf"), dpi: int = 100,
                rounds: int | None = None, seeds: int | None = None, fig4: tuple | None = None,
                device: str | None = None, command: str | None = None, echo: Callable[[str], None] | None = None
                ) -> dict:
    """Make the figures of ``preset_name`` (all, or ``only`` these keys) into ``out``; update its index.

    Returns the index entries written ({key: entry}). ``out/index.json`` keeps every figure's entry, so
    ``--only`` refreshes some without losing the others; ``out/README.md`` is rebuilt from it.
    """
    keys = list(FIGURES) if not only else list(dict.fromkeys(only))
    bad = [k for k in keys if k not in FIGURES]
    if bad:
        raise ConfigError("only", ",".join(bad), "figure names among " + ", ".join(FIGURES))
    plan = build_plan(preset_name, rounds=rounds, seeds=seeds, fig4=fig4, device=device)
    out = Path(out if out is not None else default_out(preset_name))
    out.mkdir(parents=True, exist_ok=True)
    store = _FigureStore(store.root if isinstance(store, RunStore) else store)
    ctx = Context(plan, store, out, progress=progress, formats=tuple(formats), dpi=dpi)
    command = command or _command(preset_name, keys, out, rounds, seeds, fig4)
    from tqdm.auto import tqdm

    if echo is None:
        def echo(line):  # through tqdm, so the line does not tear the progress bars
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()

    index = _read_index(out)
    index.update(preset=plan.name, notes=plan.notes, plan=describe_plan(plan))
    entries = {}
    from ..engine.simulate import cpu_threads

    with cpu_threads(1 if plan.name == "quick" else None):
        for key in tqdm(keys, desc="figures", unit="figure", disable=not progress, leave=False):
            entry = _make_one(FIGURES[key], ctx, command=command,
                              only_command=_command(preset_name, [key], out, rounds, seeds, fig4))
            entries[key] = index["figures"][key] = entry
            # the index is rewritten after every figure, so an interrupted call keeps what it made
            index["environment"] = _environment()
            (out / "index.json").write_text(json.dumps(index, indent=2, ensure_ascii=False, default=str))
            (out / "README.md").write_text(render_readme(index))
            echo(f"{key:<14} {entry['seconds']:7.1f} s  ({entry['runs_computed']} runs computed, "
                 f"{entry['runs_total'] - entry['runs_computed']} from the store)  " + ", ".join(entry["files"]))
    return entries


def _make_one(spec: FigureSpec, ctx: Context, *, command: str, only_command: str) -> dict:
    """Make one figure; its index entry (files, command, configs, runs, seconds, findings)."""
    ctx.store.used, ctx.store.computed = [], 0
    tic = time.perf_counter()
    files, findings = spec.make(ctx)
    seconds = time.perf_counter() - tic
    runs = list({id(r): r for r in ctx.store.used}.values())  # a run handed out twice counts once
    plan = ctx.plan
    return {
        "key": spec.key, "paper": spec.paper, "title": spec.title, "preset": plan.name,
        "files": sorted({str(Path(f).relative_to(ctx.out)) for f in files}),
        "command": command, "only_command": only_command,
        "configs": describe_configs([r.config for r in runs], _base_of(plan), plan.base_name) if runs else "—",
        "runs": [r.path.name if r.path else r.config.slug() for r in runs],
        "runs_computed": ctx.store.computed, "runs_total": len(runs),
        "seconds": round(seconds, 1), "findings": findings,
    }


def describe_plan(plan: Plan) -> list[str]:
    """A few lines saying what a preset runs (for the README)."""
    from ..analysis.tables import setting_label

    def cfg_line(name, cfg):
        return (f"{name}: {setting_label(cfg)}, {cfg.data.num_clients} clients, model {cfg.model}, "
                f"{cfg.rounds} rounds, lr {cfg.lr:g}, batch {cfg.batch_size}, ALA η={cfg.eta:g} s={cfg.s:g} p={cfg.p}")

    lines = [cfg_line("practical setting", plan.practical), cfg_line("pathological setting", plan.pathological)]
    f = plan.fig4
    lines += [(f"seeds: {list(plan.seeds)} for tables, {list(plan.ablation_seeds)} for ablations; "
              f"s ∈ {list(plan.s_values)}, p ∈ {list(plan.p_values)}"),
              (f"Fig. 4: {f['setting']} setting, K = {f['K']}, rounds {f['window'][0]}–{f['window'][1]}, client "
              f"{f['client']}, grid {f['grid']}×{f['grid']}, {f['num_samples']} samples; Fig. 5: "
              f"{plan.fig5_rounds} rounds")]
    return lines


def default_out(preset_name: str) -> str:
    """figures/ for quick (committed), figures/paper/ for paper (a GPU run must not overwrite them)."""
    return "figures" if preset_name == "quick" else "figures/paper"


def _base_of(plan: Plan) -> RunConfig:
    from ..presets import preset

    return preset(plan.base_name)


def _command(preset_name, keys, out, rounds, seeds, fig4) -> str:
    parts = ["fedala-lab figures", f"--preset {preset_name}"]
    if keys and keys != list(FIGURES):
        parts.append("--only " + ",".join(keys))
    if str(out).rstrip("/") != default_out(preset_name):
        parts.append(f"--out {out}")
    if rounds is not None:
        parts.append(f"--rounds {rounds}")
    if seeds is not None:
        parts.append(f"--seeds {seeds}")
    if fig4 is not None:
        parts.append("--fig4 " + ",".join(str(v) for v in fig4))
    return " ".join(parts)


def _read_index(out: Path) -> dict:
    p = out / "index.json"
    if p.is_file():
        try:
            d = json.loads(p.read_text())
            if isinstance(d.get("figures"), dict):
                return d
        except json.JSONDecodeError:
            pass
    return {"figures": {}}


def _environment() -> dict:
    import torch

    from ..engine.simulate import environment

    cuda = torch.cuda.is_available()
    env = environment(torch.device("cuda:0" if cuda else "cpu"))
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"python": env["python"], "torch": env["torch"], "platform": env["platform"], "cpus": os.cpu_count(),
            "cuda": env["device_name"] if cuda else None, "load_1min_at_end": None if load is None else round(load, 2),
            "date": time.strftime("%Y-%m-%d")}


def render_readme(index: dict) -> str:
    """figures/README.md from the index: one section per figure, files, command, configs, time, findings."""
    figs = index["figures"]
    env = index.get("environment", {})
    order = [k for k in FIGURES if k in figs] + [k for k in figs if k not in FIGURES]
    total = sum(f["seconds"] for f in figs.values())
    lines = [
        "# Figures and tables",
        "",
        "Regenerated from recorded runs by `fedala-lab figures` (`fedala_lab/figures/paper.py` maps each paper",
        "figure or table to its runs and its Display). Every number below is read off the runs. Runs come from",
        "the run store (`$FEDALA_LAB_RUNS` or `./runs`): a second call only redraws.",
        "",
        f"Preset: `{index.get('preset')}`. Machine: {env.get('platform', '?')}, {env.get('cpus', '?')} CPUs"
        + (f", GPU {env['cuda']}" if env.get("cuda") else ", no GPU")
        + f", torch {env.get('torch', '?')}, {env.get('date', '')}; 1-minute load average at the end "
        f"{env.get('load_1min_at_end')} (other work on the machine inflates the times).",
        (f"Total time of the figures listed: {total:.0f} s (each figure's time includes the runs it "
         "computed; runs shared between figures are computed by the first that needs them)."),
        "",
    ]
    if index.get("plan"):
        lines += ["What the preset runs:", "", *[f"- {x}" for x in index["plan"]], ""]
    for note in index.get("notes", []):
        lines += [f"> Note: {note}", ""]
    lines += ["PNG and PDF files are both kept: the PDFs are vector versions for papers and slides, a few tens of",
              "KB each, written without a creation date so they change only when their content does. Tables",
              "also come as Markdown, LaTeX (booktabs) and CSV.", ""]
    lines += ["| file(s) | reproduces | seconds | runs computed / used |", "|---|---|---:|---:|"]
    for k in order:
        f = figs[k]
        shown = ", ".join(f"[`{p}`]({p})" for p in f["files"] if p.endswith((".png", ".md")))
        lines.append(f"| {shown} | {f['paper']} | {f['seconds']:.1f} | {f['runs_computed']} / {f['runs_total']} |")
    lines.append("")
    for k in order:
        f = figs[k]
        png = [p for p in f["files"] if p.endswith(".png")]
        lines += [f"## {f['paper']}: {f['title']}", ""]
        if png:
            lines += [f"![{f['paper']}]({png[0]})", ""]
        lines += [f"- files: {', '.join(f'`{p}`' for p in f['files'])}",
                  f"- command: `{f['only_command']}` (made by `{f['command']}`, preset `{f['preset']}`)",
                  f"- configs: `{f['configs']}`",
                  f"- time: {f['seconds']:.1f} s, {f['runs_computed']} of {f['runs_total']} runs computed"]
        for x in f["findings"]:
            lines.append(f"- {x}")
        lines.append("")
    return "\n".join(lines)


# ==================================================================================================
# command line


def add_subcommand(sub) -> None:
    """``fedala-lab figures``: registered through ``fedala_lab.cli._SUBCOMMAND_MODULES``."""
    p = sub.add_parser("figures", help="regenerate the paper's figures and tables from (cached) runs")
    p.add_argument("--preset", choices=["quick", "paper"], default="quick",
                   help="quick: digits, minutes on a CPU; paper: the shared MNIST partition, GPU scale")
    p.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(FIGURES)}")
    p.add_argument("--out", default=None, help="output folder (default: figures/ for quick, figures/paper/ for "
                   "paper, so a GPU run does not overwrite the committed quick figures)")
    p.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    p.add_argument("--formats", default="png,pdf", help="image formats (default: png,pdf)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default: 100)")
    p.add_argument("--rounds", type=int, default=None, help="override the rounds of every run except Fig. 4's")
    p.add_argument("--seeds", type=int, default=None, help="override the number of seeds")
    p.add_argument("--fig4", default=None, metavar="K,FIRST,LAST", help="override Fig. 4's protocol")
    p.add_argument("--device", default=None, help="override every run's device (auto, cpu, cuda)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--list", action="store_true", help="list the figures and exit")
    p.set_defaults(func=cmd_figures)


def cmd_figures(args) -> int:
    if args.list:
        for k, s in FIGURES.items():
            print(f"{k:<14} {s.paper:<34} {s.title}")
        return 0
    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    formats = tuple(f.strip().lower().lstrip(".") for f in args.formats.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad or not formats:
        raise ConfigError("formats", args.formats, "a comma-separated subset of png, pdf, svg")
    fig4 = None
    if args.fig4:
        try:
            fig4 = tuple(int(v) for v in args.fig4.split(","))
        except ValueError:
            raise ConfigError("fig4", args.fig4, "K,FIRST,LAST (three integers)") from None
        if len(fig4) != 3:
            raise ConfigError("fig4", args.fig4, "K,FIRST,LAST (three integers)")
    tic = time.perf_counter()
    out = args.out or default_out(args.preset)
    entries = run_figures(args.preset, only=only, out=out, store=args.store, progress=not args.no_progress,
                          formats=formats, dpi=args.dpi, rounds=args.rounds, seeds=args.seeds, fig4=fig4,
                          device=args.device)
    print(f"{len(entries)} figure(s) in {time.perf_counter() - tic:.1f} s → {Path(out) / 'README.md'}")
    return 0


__all__ = [
    "FIGURES",
    "Plan",
    "add_subcommand",
    "build_plan",
    "describe_configs",
    "fig4_runs",
    "render_readme",
    "run_figures",
]
