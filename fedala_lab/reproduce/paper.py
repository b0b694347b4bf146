"""The paper's figures and tables, each mapped to its runs (the plan's) and its Display: :data:`FIGURES`.

Each maker takes a :class:`Context` (the plan, the run cache, the output folder), gets its runs, hands them
to a Display and writes the files; it returns them with findings, sentences whose numbers are read off the
runs, for the README. Which runs: fedala_lab/experiments/plans.py; drawing: fedala_lab/figures/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..config import RunConfig, algo_label
from ..experiments.plans import Plan, fig4_configs
from ..experiments.runs import RunCache, fig4_runs, get_or_run, has_train_loss, holds_recording
from .fedlama import fedlama_figures


@dataclass
class Context:
    """What every maker works with: the plan, the run cache (shared by all figures of a call), where the
    files go and in which formats."""

    plan: Plan
    store: RunCache
    out: Path
    progress: bool = True
    formats: tuple[str, ...] = ("png", "pdf")
    dpi: int = 100

    def run(self, cfg: RunConfig, needs=None):
        """The run of ``cfg`` from the store, or computed now (from a stored run it extends or branches from,
        docs/design.md#run-store). It records what the plan wants recorded of it (:meth:`Plan.recorded`), so
        the first figure to need a run computes what every figure reads; a stored run lacking that, or
        failing ``needs`` (as in :func:`get_or_run`), is recomputed."""
        cfg = self.plan.recorded(cfg)
        have = holds_recording(cfg)
        check = have if needs is None else (lambda run: have(run) and needs(run))
        return get_or_run(cfg, self.store, progress=self.progress, needs=check)

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

    def setting_axes(self, width: float, height: float, *, stacked: bool = False) -> list:
        """One axes per setting of the plan, on one figure: side by side, each ``width`` × ``height``
        inches, or ``stacked`` in a column."""
        from matplotlib.figure import Figure

        n = len(self.plan.settings)
        fig = Figure(figsize=(width, height * n) if stacked else (width * n, height), layout="constrained")
        axes = fig.subplots(n, 1, squeeze=False)[:, 0] if stacked else fig.subplots(1, n, squeeze=False)[0]
        return list(axes)

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
    # the configs of the runs it needs, in the order it asks for them (an estimate where they depend on runs,
    # as Fig. 4's K on the mnist plan): the overall progress bar's rounds
    planned: Callable[[Plan], list[RunConfig]] = lambda plan: []
    # columns of its CSV table compared with the version it replaces, for the README's "changed" lines
    compared: tuple[str, ...] = ()


def _table_runs(ctx: Context, setting: str, algos: tuple[str, ...] | None = None, seeds=None):
    return [ctx.run(cfg) for cfg in ctx.plan.table(setting, algos, seeds).configs()]


def _fig2_cfg(plan: Plan) -> RunConfig:
    return plan.practical.replace(algo="fedala", p=plan.fig2["p"], seed=plan.ablation_seeds[0])


def _fig3_cfgs(plan: Plan) -> list[RunConfig]:
    return [plan.setting(s).replace(algo="fedala", seed=plan.seeds[0]) for s in plan.settings]


def _fig5_cfgs(plan: Plan) -> list[RunConfig]:
    # the train-split losses are recording only (not in the key): a stored run without them is recomputed
    cfg = plan.practical.replace(rounds=plan.fig5_rounds, seed=plan.seeds[0], record_train_loss=True)
    return [cfg.replace(algo=a) for a in ("fedavg", "fedala")]


def _fig4_fedavg_cfg(plan: Plan) -> RunConfig:
    """The pathological FedAvg run of the tables (seed 0) through Fig. 4's horizon (the tables' run or its
    extension), recording what Fig. 4 may need (Plan.recorded): K is read off its curve."""
    setting = plan.setting(plan.fig4["setting"])
    rounds = max(setting.rounds, plan.fig4.get("horizon", setting.rounds))
    return plan.recorded(setting.replace(algo="fedavg", seed=plan.seeds[0], rounds=rounds))


def _fig4_from_fedavg(plan: Plan, K: int) -> tuple[RunConfig, RunConfig, RunConfig]:
    """Fig. 4 grown out of the pathological FedAvg run of the tables (mnist plan): (that run through Fig. 4's
    horizon, FedAvg through the window's last round: the same run or its extension, FedALA with ALA from
    round K + 1). The FedAvg run records the client's snapshots and keeps the states K may need
    (Plan.recorded); FedALA starts from its state at K (or the kept round before) and records the client
    from the window's first round."""
    f = plan.fig4
    table = _fig4_fedavg_cfg(plan)
    first, last = max(1, K - f["before"]), K + f["after"]
    fedavg = table.replace(rounds=max(table.rounds, last))
    fedala = table.replace(algo="fedala", ala_after=K, rounds=last, snapshot_from=first, keep_states="last")
    return table, fedavg, fedala


def _fig4_planned(plan: Plan) -> list[RunConfig]:
    f = plan.fig4
    if "search" in f:  # K comes from a run: estimated by the last round the search may give
        return list(_fig4_from_fedavg(plan, f["search"][1] if f["K"] == "auto" else f["K"]))
    return list(fig4_configs(plan.setting(f["setting"]), K=f["K"], window=f["window"], client=f["client"]))


def make_data(ctx: Context):
    from ..analysis.tables import setting_label
    from ..data.federated import FederatedData
    from ..figures.data import DataDistributionDisplay

    findings = []
    for ax, s in zip(ctx.setting_axes(8.5, 3.2, stacked=True), ctx.plan.settings):
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

    from ..figures.ala import ALAWeightsDisplay

    client = ctx.plan.fig2["client"]
    run = ctx.run(_fig2_cfg(ctx.plan))
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
    from ..analysis.tables import setting_label
    from ..figures.ala import ALALossDisplay

    findings = []
    client = ctx.plan.fig3_client
    for ax, cfg in zip(ctx.setting_axes(6.4, 3.9), _fig3_cfgs(ctx.plan)):
        run = ctx.run(cfg)
        d = ALALossDisplay.from_run(run, client, ax=ax, title=f"{setting_label(cfg)}: client {client}")
        c = d.curve_
        sp, later = c[c.start_phase], c[~c.start_phase]
        findings.append(f"{setting_label(cfg)}: start phase {len(sp)} epochs, loss {sp['loss'].iloc[0]:.3f} → "
                        f"{sp['loss'].iloc[-1]:.3f}; later rounds (one epoch each) mean {later['loss'].mean():.3f}, "
                        f"range {later['loss'].min():.3f}–{later['loss'].max():.3f}")
    return ctx.save(d, "fig3_ala_loss"), findings


def make_fig4(ctx: Context):
    f = ctx.plan.fig4
    if "search" in f:
        return _fig4_grown(ctx)
    cfg = ctx.plan.setting(f["setting"])
    fa, fl = fig4_runs(cfg, K=f["K"], window=f["window"], client=f["client"], store=ctx.store,
                       progress=ctx.progress)
    return _fig4_draw(ctx, fa, fl, K=f["K"], window=f["window"])


def _fig4_grown(ctx: Context):
    """Fig. 4 of the mnist plan: K read off the pathological FedAvg run's curve, FedALA branched from it."""
    from ..analysis.curves import plateau_round

    f, plan = ctx.plan.fig4, ctx.plan
    table = ctx.run(_fig4_fedavg_cfg(plan))
    if f["K"] == "auto":
        pl = plateau_round(table, points=f["plateau"]["points"], rounds=f["plateau"]["rounds"], search=f["search"])
        K, (lo, hi), y, x = pl["K"], pl["search"], pl["rounds"], pl["points"]
        run_is = (f"the tables' run, seed {plan.seeds[0]}, " + (f"extended to {table.config.rounds} rounds"
                  if table.config.rounds > plan.setting(f["setting"]).rounds else f"{table.config.rounds} rounds"))
        how = (f"K = {K}, chosen from the recorded curve of the pathological FedAvg run ({run_is}): the first "
               f"round in {lo}–{hi} after which FedAvg's "
               f"best accuracy rose by less than {x:g} points over the next {y} rounds "
               f"({pl['best_at_K']:.2f} % at round {K}, {pl['best_after']:.2f} % at round {K + y})"
               if pl["found"] else
               f"K = {K}: no round in {lo}–{hi} of the pathological FedAvg run ({run_is}) was followed by "
               f"less than {x:g} points of best-accuracy gain over {y} rounds "
               f"(FedAvg had not plateaued: {pl['best_at_K']:.2f} % at round {K}, {pl['best_after']:.2f} % at "
               f"round {K + y}); K is the last round the rule could test")
    else:
        K, how = f["K"], f"K = {f['K']}, fixed (--fig4)"
    _, fa_cfg, fl_cfg = _fig4_from_fedavg(plan, K)
    fa, fl = ctx.run(fa_cfg), ctx.run(fl_cfg)
    window = (fl_cfg.snapshot_from, fl_cfg.rounds)
    br = fl.meta.get("branched_from")
    grown = [how, (f"window: rounds {window[0]}–{window[1]} ({f['before']} before K, {f['after']} after); client "
                   f"{f['client']} ({fl.meta['train_sizes'][f['client']]:,} train samples, the paper's Fig. 4 client)"),
             (f"the FedALA run (ALA from round {K + 1}) started from the FedAvg run's engine state at round "
              f"{br['round']} ({br['run']}) and computed rounds {br['round'] + 1}–{window[1]}" if br else
              "the FedALA run was computed from round 1 (no stored run it could branch from)")]
    files, findings = _fig4_draw(ctx, fa, fl, K=K, window=window)
    return files, grown + findings[1:]


def _fig4_draw(ctx: Context, fa, fl, *, K: int, window: tuple[int, int]):
    from ..compute.device import resolve_device
    from ..figures.trajectory import TrajectoryDisplay

    f = ctx.plan.fig4
    cfg = ctx.plan.setting(f["setting"])
    d = TrajectoryDisplay.from_runs(fa, fl, f["client"], grid=f["grid"], rounds=window,
                                    num_samples=f["num_samples"], device=resolve_device(cfg.device),
                                    progress=ctx.progress)
    summ = d.landscape_.summary(after=K).set_index("label")  # the rounds with ALA on: those the runs do not share
    a, b = summ.loc["FedAvg"], summ.loc["FedALA"]
    ev = d.landscape_.explained_variance
    findings = [
        (f"K = {K} (ALA on from round {K + 1}), rounds {window[0]}–{window[1]}, client "
         f"{f['client']}, loss on {d.landscape_.num_samples} train samples, grid {f['grid']}×{f['grid']} "
         f"({d.landscape_.seconds:.1f} s)"),
        (f"rounds {K + 1}–{window[1]} (ALA on): the client starts its rounds at a mean local loss of "
         f"{b.mean_start_loss:.3f} with FedALA against {a.mean_start_loss:.3f} with FedAvg; after local training "
         f"both end low, mean {b.mean_end_loss:.3f} vs {a.mean_end_loss:.3f}, last trained model "
         f"{b.final_end_loss:.4f} vs {a.final_end_loss:.4f} (true losses of the models, not of their "
         "projections): the starting points tell the methods apart, the end points do not"),
        (f"C1 + C2 explain {100 * (ev[0] + ev[1]):.1f} % of the variance; largest distance off the plane "
         f"{max(a.max_residual, b.max_residual):.3g} (FedAvg {a.max_residual:.3g}, FedALA "
         f"{b.max_residual:.3g}; path lengths in the plane {a.path_length:.3g} and {b.path_length:.3g})"),
    ]
    d.landscape_.points().to_csv(ctx.out / "fig4_trajectory_points.csv", index=False)
    return ctx.save(d, "fig4_trajectory") + [ctx.out / "fig4_trajectory_points.csv"], findings


def make_fig5(ctx: Context):
    from ..figures.convergence import ConvergenceDisplay

    runs = [ctx.run(cfg, needs=has_train_loss) for cfg in _fig5_cfgs(ctx.plan)]
    d = ConvergenceDisplay.from_runs(runs, per_client=True)
    findings = []
    for r in d.gap_.itertuples():
        meet = f"within 10 % of each other from round {int(r.meet_round)} on" if r.meet_round == r.meet_round \
            else "not within 10 % of each other by the last round"
        findings.append(f"{r.label}: final initialised {r.final_init_loss:.4f} vs trained {r.final_trained_loss:.4f}; "
                        f"{meet}")
    return ctx.save(d, "fig5_convergence"), findings + _fig5_clients(d, runs)


DOMINANT = 0.5  # a client with this share of the weighted curve's round-to-round variance decides its shape


def _fig5_clients(d, runs) -> list[str]:
    """Findings of the per-client view: for each run the client that moves the weighted trained-loss curve
    most, its share, how jagged the curve is; and, where one client dominates an ALA run, why (the numbers
    read off the run and its data; docs/design.md#federated-loop)."""
    import numpy as np

    from ..data.federated import FederatedData

    out = []
    tops = d.top_.drop_duplicates("label") if d.top_ is not None and len(d.top_) else None
    for run, (label, df) in zip(runs, d.frame_.groupby("label", sort=False)):
        if tops is None or label not in set(tops["label"]):
            out.append(f"{label}, per client: too few evaluated rounds ({len(df)}) for the clients' shares of the "
                       "curve's round-to-round variance")
            continue
        t = tops[tops["label"] == label].iloc[0]
        c, share, n = int(t["client"]), float(t["share"]), int(t["train_size"])
        loss = df["trained_loss"].to_numpy()
        step = np.abs(np.diff(np.log10(np.maximum(loss, 1e-300))))
        jumps = df["round"].to_numpy()[1:][step > np.log10(2)]
        jag = (f"{len(jumps)} round-to-round changes larger than ×2 (rounds {jumps.min()}–{jumps.max()})"
               if len(jumps) else "no round-to-round change larger than ×2")
        out.append(f"{label}, per client: the weighted trained-loss curve shows {jag}; client {c} ({n:,} train "
                   f"samples, {100 * t['weight']:.1f} % of the weight) accounts for {100 * share:.1f} % of the "
                   f"variance of its round-to-round changes over rounds {int(t['first'])}–{int(t['last'])}"
                   + (" and decides its shape" if share >= DOMINANT else "; no single client dominates"))
        if share < DOMINANT and len(jumps):
            out.append(_fig5_spread_jumps(label, run, (int(jumps.min()), int(jumps.max()))))
        if share < DOMINANT or not run.config.uses_ala:
            continue
        counts = FederatedData.from_config(run.config.data).label_counts()
        mine = counts[(counts["client"] == c) & (counts["split"] == "train")].sort_values("count", ascending=False)
        top_label, top_n = int(mine["label"].iloc[0]), int(mine["count"].iloc[0])
        cfg = run.config
        steps = (n // cfg.batch_size if cfg.drop_last else -(-n // cfg.batch_size)) * cfg.local_epochs
        lo, hi = (int(jumps.min()), int(jumps.max())) if len(jumps) else (int(t["first"]), int(t["last"]))
        span = run.clients[(run.clients["round"] >= lo) & (run.clients["round"] <= hi)].dropna(subset=["trained_loss"])
        own, others = span[span["client"] == c], span[span["client"] != c]
        out.append(
            f"Why {label}'s curve is jagged: client {c} holds {n} train samples, {top_n} of them {top_label}s; in "
            f"rounds {lo}–{hi} its trained loss ranges {own['trained_loss'].min():.3g}–"
            f"{own['trained_loss'].max():.3g} while every other client stays below "
            f"{others['trained_loss'].max():.3g}. With "
            f"lr {run.config.lr:g} and {'reshuffled' if run.config.shuffle else 'a fixed'} batch order its {steps} "
            f"local SGD steps a round sometimes overshoot into predicting {top_label} for everything; ALA starts each round "
            f"partly from the client's own previous model, so a collapsed round is followed by a good one and "
            f"vice versa, a cycle its {100 * t['weight']:.1f} % weight turns into swings of the weighted mean. "
            "FedAvg restarts every client from the global model. The median and interquartile band (right) are "
            "smooth: the swings are this one client's, not FedALA's as a whole.")
    return out


def _fig5_spread_jumps(label: str, run, rounds: tuple[int, int]) -> str:
    """Why a weighted trained-loss curve jumps although no client dominates it (numbers read off the run)."""
    from ..analysis.curves import training_outcomes

    o = training_outcomes(run, rounds=rounds)
    cfg = run.config
    return (f"Why {label}'s curve is jagged in rounds {o['rounds'][0]}–{o['rounds'][1]}: in a round, "
            f"{o['far']:.1f} of {o['clients']:.0f} clients on average end their local training with a train loss "
            f"over 10× the median client's, {o['far_clients']} different clients in all, making "
            f"{100 * o['far_share']:.0f} % of the weighted mean; which ones changes from round to round, so "
            f"the mean jumps while the median and interquartile band (right) stay smooth. Local training "
            f"raised the loss of {o['worse']:.0f} of {o['clients']:.0f} clients in a median round (lr "
            f"{cfg.lr:g}, {'reshuffled' if cfg.shuffle else 'a fixed'} batch order, {cfg.local_epochs} "
            f"epoch(s)); these are the trained models' own losses: an effect of local SGD on small clients, not of "
            f"how the curve is recorded.")


def make_table2(ctx: Context):
    from ..figures.tables import AccuracyTable

    runs = [r for s in ctx.plan.settings for r in _table_runs(ctx, s)]
    title = "Test accuracy (%) — Tables 2/7 layout"
    if ctx.plan.shortened:
        title += f" — shortened: {runs[0].config.rounds} rounds (paper: 2,000)"
    t = AccuracyTable.from_runs(runs, title=title)
    files = ctx.save(t, "table2_accuracy")
    files += [ctx.write("table2_accuracy.md", t.to_markdown()), ctx.write("table2_accuracy.tex", t.to_latex()),
              _csv(t.stats_, ctx.out / "table2_accuracy.csv")]
    auc = AccuracyTable.from_runs(runs, which="auc", plot=False)  # the reference code's other measure, beside it
    files.append(ctx.write("table2_auc.md", auc.to_markdown()))
    st = t.stats_
    findings = [(f"shortened horizon: {runs[0].config.rounds} rounds, {len(ctx.plan.seeds)} seed(s) (paper: 2,000 "
                "rounds, 5 seeds); best = the best evaluated round, final = the last")] if ctx.plan.shortened else []
    for setting, df in st.groupby("setting", sort=False):
        top = df.sort_values("best_mean", ascending=False).iloc[0]
        findings.append(f"{setting}: highest best-round accuracy {top['row']} {top['best_mean']:.2f} %; "
                        + ", ".join(f"{r.row} {r.best_mean:.2f}" for r in df.itertuples()))
    findings += _verdicts(runs, ["algo", "setting"], "best")
    return files, findings


def _verdicts(runs, by: list, metric: str, against=None) -> list[str]:
    """Each group of ``runs`` against its reference (default FedAvg; docs/comparing.md), in words, per setting."""
    from ..analysis import stats
    from ..analysis.tables import setting_label

    frame = stats.metrics_frame(runs, [b for b in by if b not in ("algo", "setting")])
    frame["setting"] = [setting_label(r.config) for r in runs]
    long = stats.seed_stats(frame, by, against=stats.AUTO if against is None else against, metrics=[metric])
    labels = {a: algo_label(a) for a in frame["algo"].unique()}
    column = by[0] if by[0] != "setting" else by[1]
    return [f"{setting}, {metric} round: {v}" for setting, part in long.groupby("setting", sort=False)
            for v in stats.verdicts(part, metric, labels=labels, digits=2, by=column)]


def make_applicability(ctx: Context):
    from ..figures.tables import AccuracyTable

    runs = [ctx.run(cfg) for cfg in ctx.plan.ala_table().configs()]
    title = "Table 4: ALA added to each method (local initialisation only)"
    if ctx.plan.shortened:
        title += f" — shortened: {runs[0].config.rounds} rounds"
    t = AccuracyTable.from_applicability(runs, title=title)
    files = ctx.save(t, "applicability")
    files += [ctx.write("applicability.md", t.to_markdown()), ctx.write("applicability.tex", t.to_latex()),
              _csv(t.stats_, ctx.out / "applicability.csv")]
    from ..analysis.stats import format_ci, format_p

    findings = [f"{algo_label(r.with_ala)}: {r.ala_mean:.2f} vs {algo_label(r.base)} {r.base_mean:.2f} % (gain "
                f"{format_ci(r.gain, r.gain_lo, r.gain_hi, 2, sign=True)} points, best round, paired over {r.n_seeds} "
                f"seed(s); p (paired t, Holm over the rows): {format_p(r.p_holm)})" for r in t.stats_.itertuples()]
    gains = t.stats_["gain"]
    findings.append(f"ALA raised the best-round accuracy of {int((gains > 0).sum())} of {len(gains)} methods "
                    f"(gains {gains.min():+.2f} to {gains.max():+.2f} points)")
    return files, findings


def make_table3(ctx: Context):
    from ..figures.tables import AccuracyTable

    runs = _table_runs(ctx, "practical")
    t = AccuracyTable.from_costs(runs, title="Table 3: computation and communication per round, measured")
    files = ctx.save(t, "table3_cost")
    files += [ctx.write("table3_cost.md", t.to_markdown()), _csv(t.stats_, ctx.out / "table3_cost.csv")]
    st = t.stats_.set_index("algo")
    base = float(st.loc["fedavg", "method_seconds"]) if "fedavg" in st.index else float("nan")
    findings = [f"{r.label}: {r.method_seconds:.3f} s a round without evaluation ({r.method_seconds / base:.1f}× "
                f"FedAvg's) and {r.eval_seconds:.3f} s of evaluation, {r.up:.2f} Σ up and "
                f"{r.down:.2f} Σ down per client (paper: {r.formula})" for r in t.stats_.itertuples()]
    if "fedala" in st.index:
        findings.append(f"FedALA's start phase (round 2) took {st.loc['fedala', 'start_phase_seconds']:.2f} s more "
                        "than a normal round")
    return files, findings


def _ablation(ctx: Context, param: str, stem: str):
    import pandas as pd

    from ..analysis import stats
    from ..analysis.tables import ci_cell, frame_to_markdown
    from ..figures.ablation import AblationDisplay

    spec = ctx.plan.ablation(param)
    runs = [ctx.run(cfg) for cfg in spec.configs()]
    d = AblationDisplay.from_runs(runs, param=param)
    df = d.frame_
    md = pd.DataFrame({param: [f"{v:g}" for v in df[param]]})
    rows = df.to_dict("records")
    md["best acc %"] = [ci_cell(r, "best") for r in rows]
    md["final acc %"] = [ci_cell(r, "final") for r in rows]
    if "ala_weights" in df:
        md["ALA weights"] = [f"{int(v):,}" for v in df["ala_weights"]]
    md["ALA ms/round"] = [f"{1000 * v:.1f}" for v in df["ala_seconds"]]
    files = ctx.save(d, stem) + [ctx.write(f"{stem}.md", frame_to_markdown(md.set_index(param)) + "\n"
                                           + stats.CI_NOTE + "\n"), _csv(df, ctx.out / f"{stem}.csv")]
    findings = [", ".join(f"{param}={r[param]:g}: {r['best_mean']:.2f}" for _, r in df.iterrows())
                + " (best-round accuracy %, mean over seeds)"]
    ref = getattr(spec.base, param)  # the paper's value: every other one against it, paired by seed
    if ref in set(df[param]):
        long = stats.seed_stats(stats.metrics_frame(runs, [param]), [param], against=ref, metrics=["best"])
        findings += stats.verdicts(long, "best", labels={v: f"{param}={v:g}" for v in df[param]}, digits=2)
    if "ala_weights" in df:
        findings.append("ALA weights: " + ", ".join(f"p={int(r['p'])}: {int(r['ala_weights']):,}"
                                                    for _, r in df.iterrows()))
    findings.append("ALA time per round, all clients (ms; wall clock, inflated by other load): " + ", ".join(
        f"{param}={r[param]:g}: {1000 * r['ala_seconds']:.0f}" for _, r in df.iterrows()))
    return files, findings


def make_curves(ctx: Context):
    from ..analysis.tables import setting_label
    from ..figures.curves import AccuracyCurveDisplay

    findings = []
    for ax, s in zip(ctx.setting_axes(6.0, 3.9), ctx.plan.settings):
        runs = _table_runs(ctx, s, seeds=ctx.plan.seeds[:1])
        d = AccuracyCurveDisplay.from_runs(runs, ax=ax, title=f"{setting_label(ctx.plan.setting(s))} (seed "
                                                              f"{ctx.plan.seeds[0]})")
        findings.append(f"{setting_label(ctx.plan.setting(s))}: final " + ", ".join(
            f"{lab} {df['value'].iloc[-1]:.2f}" for lab, df in d.curves_.groupby("label", sort=False)))
    return ctx.save(d, "accuracy_curves"), findings


def make_fedlama(ctx: Context):
    """FedLAMA's figures (fedlama.py) at the plan's scale (its runs are counted by ctx.store, which it uses)."""
    scale, overrides = ctx.plan.fedlama
    results = fedlama_figures(ctx.out, preset=scale, store=ctx.store, progress=ctx.progress,
                              overrides=overrides or None)
    files = [Path(f) for r in results for f in r["files"]]
    return files, [f"{Path(r['file']).stem}: {r['reproduces']}" for r in results]


def _csv(df, path: Path) -> Path:
    df.to_csv(path, index=False, float_format="%.6g")
    return path


def _tables_planned(plan: Plan, algos=None, seeds=None) -> list[RunConfig]:
    return [c for s in plan.settings for c in plan.table(s, algos, seeds).configs()]


def _fedlama_planned(plan: Plan) -> list[RunConfig]:
    from ..experiments.plans import comparison_configs, fedlama_base

    scale, overrides = plan.fedlama
    return list(comparison_configs(fedlama_base(scale, overrides or None), with_ala=True).values())


FIGURES: dict[str, FigureSpec] = {s.key: s for s in [
    FigureSpec("table2", "Tables 2 and 7", "accuracy of each method (traditional FL, the pFL baselines, FedALA, "
               "Local), mean and 95 % interval over seeds, best and final round", make_table2, _tables_planned,
               ("best_mean", "final_mean")),
    FigureSpec("table3", "Table 3", "computation (seconds per round, ALA's start phase) and communication (models "
               "up and down per client per round) of each method, measured", make_table3,
               lambda plan: plan.table("practical").configs()),
    FigureSpec("fig2", "Fig. 2", "learned ALA weights W per layer (lighter = larger), after the start phase "
               "and in the last round", make_fig2, lambda plan: [_fig2_cfg(plan)]),
    FigureSpec("fig3", "Fig. 3", "ALA loss against weight-learning epochs: start phase, then one epoch per "
               "round", make_fig3, _fig3_cfgs),
    FigureSpec("fig4", "Fig. 4", "local trajectory of one client on its loss surface (PCA plane), FedAvg "
               "black vs FedALA blue, ALA switched on after K rounds", make_fig4, _fig4_planned),
    FigureSpec("fig5", "Fig. 5", "global objective of the initialised vs the trained local models per round "
               "(left); per client: median, interquartile band and the client that moves the mean most (right)",
               make_fig5, _fig5_cfgs),
    FigureSpec("table1", "Table 1 (s)", "accuracy and ALA cost against s (% of local data used to learn W)",
               partial(_ablation, param="s", stem="table1_s_ablation"),
               lambda plan: plan.ablation("s").configs(), ("best_mean", "final_mean")),
    FigureSpec("table6", "Tables 1 (p) and 6", "accuracy and number of ALA weights against p",
               partial(_ablation, param="p", stem="table6_p_ablation"),
               lambda plan: plan.ablation("p").configs(), ("best_mean", "final_mean")),
    FigureSpec("applicability", "Table 4 (applicability of ALA)", "accuracy gain when ALA is added to each "
               "method that takes it (the local initialisation only)", make_applicability,
               lambda plan: plan.ala_table().configs(), ("base_mean", "ala_mean", "gain")),
    FigureSpec("data", "Figs. 6–9", "samples per client and label (bubble plots)", make_data),
    FigureSpec("fedlama", "FedLAMA Fig. 1 and Tables 1–4", "layer-wise aggregation intervals: δ_l vs 1 − λ_l, "
               "accuracy vs communication (also with ALA), interval timeline", make_fedlama, _fedlama_planned),
    FigureSpec("curves", "— (supplementary)", "test accuracy per round of the table's methods (seed 0)",
               make_curves, lambda plan: _tables_planned(plan, seeds=plan.seeds[:1])),
]}


def planned_configs(plan: Plan, keys) -> list[RunConfig]:
    """The configs the figures ``keys`` ask for, in order, as they ask for them (with the plan's recording)."""
    return [plan.recorded(c) for k in keys for c in FIGURES[k].planned(plan)]
