"""Displays draw what the analysis computed: data and artists are checked, never pixels."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED_MNIST

from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore

ROUNDS = 6


def cfg(**kw):
    """teach (the embedded MNIST subset, Dir(0.1), 20 clients, MLP) cut to a few rounds, recording the
    train-split losses that Fig. 5 draws (the preset itself does not)."""
    return preset("teach", rounds=ROUNDS, device="cpu", record_train_loss=True, **kw)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return RunStore(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def runs(store):
    """Two seeds of FedAvg, FedProx, FedALA and FedProx+ALA, and FedALA with p = 2 and s = 20."""
    out = {}
    for algo in ("fedavg", "fedprox", "fedala", "fedprox+ala"):
        for seed in (0, 1):
            out[algo, seed] = get_or_run(cfg(algo=algo, seed=seed), store, progress=False)
    out["p2", 0] = get_or_run(cfg(algo="fedala", p=2, seed=0), store, progress=False)
    out["s20", 0] = get_or_run(cfg(algo="fedala", s=20, seed=0), store, progress=False)
    return out


# -------------------------------------------------------------------------------- accuracy curves


def test_accuracy_curves_one_line_per_run(runs):
    from fedala_lab.figures import AccuracyCurveDisplay

    sel = [runs["fedavg", 0], runs["fedala", 0]]
    d = AccuracyCurveDisplay.from_runs(sel)
    assert len(d.lines_) == 2 and len(d.ax_.get_lines()) == 2
    assert [line.get_label() for line in d.lines_] == ["FedAvg", "FedALA"]
    assert d.lines_[0].get_color() == "black" and d.lines_[1].get_color() == "tab:blue"
    np.testing.assert_allclose(d.lines_[1].get_ydata(), runs["fedala", 0].rounds["acc"].to_numpy())
    assert "%" in d.ax_.get_ylabel() and d.ax_.get_xlabel() == "round"
    d2 = AccuracyCurveDisplay.from_runs(sel, metric="test_loss", labels=["a", "b"])
    assert [line.get_label() for line in d2.lines_] == ["a", "b"]
    from fedala_lab.errors import ConfigError

    with pytest.raises(ConfigError, match="metric"):
        AccuracyCurveDisplay.from_runs(sel, metric="nope")


# ------------------------------------------------------------------------------------ Fig. 2 and 3


def test_ala_weights_display_one_heatmap_per_tensor(runs):
    from fedala_lab.figures import ALAWeightsDisplay

    run = runs["p2", 0]
    d = ALAWeightsDisplay.from_run(run, client=8, round_=3)
    names = run.meta["ala_params"]
    assert names == ["fc2.0.weight", "fc2.0.bias", "fc.weight", "fc.bias"]
    assert len(d.images_) == len(names) == len(d.ax_)
    r, w = run.ala_weights(8, 3)
    assert d.round_ == r == 3
    for im, n in zip(d.images_, names):
        data = np.asarray(im.get_array())
        np.testing.assert_array_equal(data, w[n].reshape(w[n].shape[0], -1))  # biases as (n, 1) strips
        assert im.get_clim() == (0.0, 1.0) and im.get_cmap().name == "gray"  # lighter = larger
    assert d.colorbar_ is not None and "ALA weight" in d.colorbar_.ax.get_ylabel()
    assert "client 8" in d.figure_._suptitle.get_text()
    assert set(d.summary()["param"]) == set(names)
    # a single Axes is used as the bounding box of the panels
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    d2 = ALAWeightsDisplay.from_run(run, client=8, ax=ax)
    assert d2.figure_ is fig and len(d2.ax_) == 4 and d2.round_ == ROUNDS
    with pytest.raises(KeyError, match="no ALA weights"):
        ALAWeightsDisplay.from_run(runs["fedavg", 0], client=0)


def test_ala_loss_display_marks_the_start_phase(runs):
    from fedala_lab.figures import ALALossDisplay

    run = runs["fedala", 0]
    d = ALALossDisplay.from_run(run, client=8)
    ala = run.ala[run.ala["client"] == 8]
    assert len(d.line_.get_xdata()) == len(ala)
    np.testing.assert_array_equal(d.line_.get_xdata(), np.arange(1, len(ala) + 1))
    np.testing.assert_allclose(d.line_.get_ydata(), ala.sort_values(["round", "epoch"])["loss"])
    start = int(ala["start_phase"].sum())
    assert d.start_epochs == start >= 11  # reference criterion: more than num_pre_loss passes
    assert len(ala) == start + (ROUNDS - 2)  # then one pass per round
    assert d.span_ is not None and f"{start} epochs" in d.span_.get_label()
    assert len(d.ax_.get_lines()) == 2 and "epoch" in d.ax_.get_xlabel()
    assert "start phase" in [t.get_text() for t in d.ax_.get_legend().get_texts()][-1]


def test_ala_weights_mark_the_labels_the_client_holds(runs):
    from matplotlib.patches import Rectangle

    from fedala_lab.data.federated import FederatedData
    from fedala_lab.figures import ALALossDisplay, ALAWeightsDisplay

    run = runs["p2", 0]
    held = FederatedData.from_config(run.config.data).labels_held(8)
    assert 0 < len(held) < 10  # Dir(0.1): a few labels
    d = ALAWeightsDisplay.from_run(run, client=8, held_labels=held)
    assert d.output_layer() == ["fc.weight", "fc.bias"]
    assert len(d.held_marks_) == 2 * len(held)  # a frame per held label on the output weight and its bias
    out = d.ax_[2]  # fc.weight: one row per label
    assert sorted(int(p.get_y() + 0.5) for p in out.patches if isinstance(p, Rectangle)) == held
    red = [int(t.get_text()) for t in out.get_yticklabels() if t.get_color() == "tab:red"]
    assert red == held and f"{len(held)} label(s) it holds" in d.figure_._suptitle.get_text()
    assert not [p for p in d.ax_[0].patches if isinstance(p, Rectangle)]  # fc2's rows are no labels
    # Fig. 3 marks the round Fig. 2 shows
    loss = ALALossDisplay.from_run(runs["fedala", 0], client=8, round_=4)
    x0, x1 = loss.round_mark_.get_x(), loss.round_mark_.get_x() + loss.round_mark_.get_width()
    ala = loss.curve_
    assert list(ala.loc[(ala["cum_epoch"] > x0) & (ala["cum_epoch"] < x1), "round"].unique()) == [4]
    assert ALALossDisplay.from_run(runs["fedala", 0], client=8).round_mark_ is None


def test_one_colour_per_method_everywhere():
    from fedala_lab.figures.style import colour_for, line_styles

    assert colour_for("fedavg") == "black" and colour_for("fedala") == colour_for("fedavg+ala") == "tab:blue"
    assert line_styles(["fedavg", "fedprox", "fedala"]) == [("black", "-"), ("tab:orange", "--"), ("tab:blue", "-")]
    # a method drawn twice keeps its colour and takes the next line style
    assert line_styles(["fedavg", "fedavg", "fedlama"]) == [("black", "-"), ("black", "--"), ("tab:purple", "-")]
    # one method in several settings: the colours of the default cycle tell them apart
    assert line_styles(["fedavg"] * 3) == [("C0", "-"), ("C1", "-"), ("C2", "-")]


def test_colour_follows_the_algorithm_not_the_label(runs):
    from fedala_lab.figures import AccuracyCurveDisplay

    d = AccuracyCurveDisplay.from_runs([runs["fedavg", 0], runs["fedala", 0]],
                                       labels=["FedAvg", "FedALA (ALA on after round 3)"])
    assert [ln.get_color() for ln in d.lines_] == ["black", "tab:blue"]


def test_client_accuracy_displays(runs):
    from fedala_lab.analysis.curves import client_accuracy
    from fedala_lab.figures import ClientAccuracyDisplay, ClientSpreadDisplay

    sel = [runs["fedavg", 0], runs["fedala", 0]]
    frame = client_accuracy(sel)
    last = sel[1].clients[sel[1].clients["round"] == ROUNDS]
    np.testing.assert_allclose(frame.loc[frame["label"] == "FedALA", "acc"], last["test_acc"])
    assert set(frame["round"]) == {ROUNDS} and len(frame) == 2 * 20
    d = ClientAccuracyDisplay.from_runs(sel)
    assert [len(m.get_offsets()) for m in d.markers_] == [20, 20]
    assert [tuple(m.get_facecolor()[0][:3]) for m in d.markers_] == [(0, 0, 0), pytest.approx((0.122, 0.467, 0.706),
                                                                                              abs=1e-3)]
    np.testing.assert_allclose(d.markers_[1].get_offsets()[:, 1], last["test_acc"])
    spread = ClientSpreadDisplay.from_runs(sel)
    assert [t.get_text() for t in spread.ax_.get_xticklabels()] == ["FedAvg", "FedALA"]
    assert spread.medians_["FedALA"] == pytest.approx(float(np.median(last["test_acc"])))
    assert len(spread.ax_.collections) >= 2  # the clients as points, one group per method


def test_text_of_a_setting():
    from fedala_lab.analysis.tables import data_title, run_settings

    assert data_title(cfg().data) == "MNIST-mini, Dir(β=0.1), 20 clients"
    assert data_title(cfg(partition="pathological").data) == "MNIST-mini, pathological, 2 labels per client, 20 clients"
    assert run_settings(cfg(algo="fedavg")) == "lr 0.1, batch 10, E 1, ρ 1"
    assert run_settings(cfg(algo="fedprox+ala")) == "lr 0.1, batch 10, E 1, ρ 1, μ 0.001, η 1, s 80, p 1"
    assert run_settings(cfg(ala_after=30)).endswith("p 1, ALA after round 30")
    assert run_settings(preset("teach-fedlama")).endswith("τ0 5, φ 2, rule authors") and "τ 5 steps" in run_settings(
        preset("teach-fedlama"))
    assert run_settings(preset("teach-fedlama", lama_eval="clients")).endswith("rule authors, evaluating clients")


# ----------------------------------------------------------------------------------------- Fig. 5


def test_convergence_display_two_lines_per_run(runs):
    from fedala_lab.figures import ConvergenceDisplay

    sel = [runs["fedavg", 0], runs["fedala", 0]]
    d = ConvergenceDisplay.from_runs(sel)
    assert len(d.lines_) == 4
    styles = [line.get_linestyle() for line in d.lines_]
    assert styles == ["--", "-", "--", "-"]
    np.testing.assert_allclose(d.lines_[2].get_ydata(), runs["fedala", 0].rounds["init_loss"])
    np.testing.assert_allclose(d.lines_[3].get_ydata(), runs["fedala", 0].rounds["trained_loss"])
    assert d.ax_.get_yscale() == "log"
    assert list(d.gap_["label"]) == ["FedAvg", "FedALA"]
    assert d.gap_["final_gap"].iloc[1] == pytest.approx(
        runs["fedala", 0].rounds["init_loss"].iloc[-1] - runs["fedala", 0].rounds["trained_loss"].iloc[-1])


def _synthetic_run(oscillating=3, rounds=30):
    """5 clients whose trained losses fall smoothly, but for one that alternates between 0.1 and 3 from round 10."""
    from fedala_lab.record.run import Run

    t = np.arange(1, rounds + 1)
    rows = []
    for c in range(5):
        loss = np.exp(-t / 10) * (1 + c / 10)
        if c == oscillating:
            loss = np.where(t >= 10, np.where(t % 2 == 0, 3.0, 0.1), loss)
        rows += [{"round": r, "client": c, "init_loss": 2 * v, "trained_loss": v} for r, v in zip(t, loss)]
    clients = pd.DataFrame(rows)
    sizes = np.array([100, 100, 100, 20, 100])
    w = sizes[clients["client"]] / sizes.sum()
    rounds_df = (clients.assign(init_loss=clients["init_loss"] * w, trained_loss=clients["trained_loss"] * w)
                 .groupby("round")[["init_loss", "trained_loss"]].sum().reset_index())
    rounds_df["acc"] = 90 - 50 * np.exp(-t / 4)
    rounds_df["best_acc"] = rounds_df["acc"].cummax()
    return Run(config=preset("teach", algo="fedala", rounds=rounds), clients=clients, rounds=rounds_df,
               meta={"train_sizes": sizes.tolist()})


def test_variance_shares_name_the_client_that_moves_the_mean():
    from fedala_lab.analysis.curves import client_spread, plateau_round, variance_shares

    run = _synthetic_run()
    v = variance_shares(run)
    assert v["client"].iloc[0] == 3 and v["share"].iloc[0] > 0.95 and v["share"].sum() == pytest.approx(1)
    assert v["train_size"].iloc[0] == 20 and v["first"].iloc[0] == 4 and v["last"].iloc[0] == 30
    spread = client_spread([run])
    piv = run.clients.pivot(index="round", columns="client", values="trained_loss")
    np.testing.assert_allclose(spread["median"], piv.median(axis=1))
    # K: best accuracy 90 − 50·exp(−t/4) % gains < 0.5 points over 3 rounds first after round 15
    gains = [run.rounds["best_acc"][t + 2] - run.rounds["best_acc"][t - 1] for t in range(1, 28)]
    k = next(t for t, g in zip(range(1, 28), gains) if g < 0.5)
    pl = plateau_round(run, points=0.5, rounds=3, search=(5, 25))
    assert pl["found"] and pl["K"] == k and pl["best_after"] - pl["best_at_K"] < 0.5
    late = plateau_round(run, points=0.001, rounds=3, search=(5, 25))
    assert not late["found"] and late["K"] == 25


def test_training_outcomes_count_the_clients_far_above_the_median():
    from fedala_lab.analysis.curves import training_outcomes

    run = _synthetic_run()  # client 3 (20 samples) ends at 3.0 in even rounds from 10 on, at 0.1 in odd ones
    o = training_outcomes(run, rounds=(10, 30))
    assert o["rounds"] == (10, 30) and o["clients"] == 5 and o["far_clients"] == 1
    assert o["worse"] == 0  # every trained loss here is half its initial one
    piv = run.clients.pivot(index="round", columns="client", values="trained_loss").loc[10:30]
    far = piv[3] > 10 * piv.median(axis=1)  # the even rounds once the others have fallen below 0.3
    assert far.sum() == 9 and set(far[far].index) == set(range(14, 31, 2))
    assert o["far"] == pytest.approx(9 / 21)
    sizes = np.array([100, 100, 100, 20, 100])
    assert o["far_share"] == pytest.approx(((piv[3] * 20).where(far, 0) / (piv * sizes).sum(axis=1)).mean())


def test_convergence_display_per_client_panel():
    from fedala_lab.figures import ConvergenceDisplay

    run = _synthetic_run()
    d = ConvergenceDisplay.from_runs([run], per_client=True)
    assert len(d.ax_) == 2 and len(d.lines_) == 2 and len(d.medians_) == 1 and len(d.bands_) == 1
    (top,) = d.top_lines_
    assert "client 3 (20 train samples)" in top.get_label() and "% of the mean" in top.get_label()
    np.testing.assert_allclose(top.get_ydata(), run.clients.query("client == 3")["trained_loss"])
    assert ConvergenceDisplay.from_runs([run]).spread_ is None  # the paper's single panel by default


# ------------------------------------------------------------------------------------------ tables


def test_accuracy_table_layout_and_renderings(runs):
    from fedala_lab.figures import AccuracyTable

    sel = [runs[a, s] for a in ("fedavg", "fedala") for s in (0, 1)]
    t = AccuracyTable.from_runs(sel)
    assert list(t.frame_.index) == ["FedAvg", "FedALA"]
    assert list(t.frame_.columns) == ["MNIST-mini Dir(0.1) (best)", "MNIST-mini Dir(0.1) (final)"]
    best = [runs["fedala", s].acc.max() for s in (0, 1)]
    # ± is the 95 % interval over the 2 seeds: t(0.975, 1) · s / √2, and t with 1 df is Cauchy: tan(0.475 π)
    half = np.tan(0.475 * np.pi) * np.std(best, ddof=1) / np.sqrt(2)
    assert t.frame_.loc["FedALA", "MNIST-mini Dir(0.1) (best)"] == f"{np.mean(best):.2f} ± {half:.2f}"
    assert "95 % interval of the mean over seeds" in t.caption and "Student t" in t.caption
    # the numbers behind it: FedALA against FedAvg, paired by seed
    diffs = [runs["fedala", s].best_acc - runs["fedavg", s].best_acc for s in (0, 1)]
    row = t.stats_.set_index("algo").loc["fedala"]
    assert row["reference"] == "fedavg" and row["best_diff"] == pytest.approx(np.mean(diffs))
    md = t.to_markdown().splitlines()
    assert md[0].startswith("| method |") and md[1].startswith("|:---|") and len(md[2].split("|")) == 5
    tex = t.to_latex(label="tab:acc")
    assert r"\toprule" in tex and r"$\pm$" in tex and r"\label{tab:acc}" in tex and "FedALA" in tex
    cells = t.table_.get_celld()
    assert len(cells) == (2 + 1) * 2 + 2  # header + 2 rows by 2 columns, plus 2 row labels
    assert t.ax_.get_title().startswith("Test accuracy")


def test_applicability_gain(runs):
    from fedala_lab.analysis.ablation import applicability_frame
    from fedala_lab.figures import AccuracyTable

    sel = [runs[a, s] for a in ("fedavg", "fedala", "fedprox", "fedprox+ala") for s in (0, 1)]
    f = applicability_frame(sel)
    assert list(f["base"]) == ["fedavg", "fedprox"] and list(f["with_ala"]) == ["fedala", "fedprox+ala"]
    gain = np.mean([runs["fedprox+ala", s].best_acc for s in (0, 1)]) - \
        np.mean([runs["fedprox", s].best_acc for s in (0, 1)])
    assert f.loc[1, "gain"] == pytest.approx(gain)
    t = AccuracyTable.from_applicability(sel)
    assert list(t.frame_.columns) == ["base", "+ALA", "gain", "p"]
    # the gain paired by seed, with its 95 % interval (t with 1 df: tan(0.475 π)) and p (paired t, Holm over the rows)
    d = [runs["fedprox+ala", s].best_acc - runs["fedprox", s].best_acc for s in (0, 1)]
    half = np.tan(0.475 * np.pi) * np.std(d, ddof=1) / np.sqrt(2)
    assert t.frame_.loc["FedProx", "gain"] == f"{gain:+.2f} ± {half:.2f}"
    from scipy import stats

    p = [stats.ttest_rel([runs[a, s].best_acc for s in (0, 1)], [runs[b, s].best_acc for s in (0, 1)]).pvalue
         for a, b in (("fedala", "fedavg"), ("fedprox+ala", "fedprox"))]
    np.testing.assert_allclose(f["p"], p)
    lo, hi = sorted(p)  # Holm over two, by hand: the smaller doubled, the larger kept at least that
    holm = {lo: min(1.0, 2 * lo), hi: max(min(1.0, 2 * lo), hi)}
    np.testing.assert_allclose(f["p_holm"], [holm[v] for v in p])
    assert "Holm-adjusted over the rows" in t.caption


def test_cost_table_counts_the_methods_work_without_evaluation(runs):
    """Table 3 compares methods by their own work: a run that records more (Fig. 5's train-split losses)
    spends more on evaluation, which must not make its method look slower."""
    import dataclasses

    from fedala_lab.analysis.tables import cost_table
    from fedala_lab.figures import AccuracyTable

    def timed(run, eval_s):  # the recorded run with phase times set by hand: round 2 has ALA's start phase
        rd = run.rounds.copy()
        ala = run.config.algo == "fedala"
        rd["init_seconds"] = np.where(rd["round"] == 2, 5.0, 1.0) if ala else 0.0
        rd["train_seconds"], rd["aggregate_seconds"], rd["eval_seconds"] = 2.0, 0.5, eval_s
        rd["seconds"] = rd[["init_seconds", "train_seconds", "aggregate_seconds", "eval_seconds"]].sum(axis=1) + 0.1
        return dataclasses.replace(run, rounds=rd)

    # FedAvg records the train-split losses (10 s of evaluation a round), FedProx does not (1 s)
    sel = [timed(runs["fedavg", 0], 10.0), timed(runs["fedprox", 0], 1.0), timed(runs["fedala", 0], 10.0)]
    t = cost_table(sel).set_index("algo")
    assert t.loc["fedavg", "method_seconds"] == t.loc["fedprox", "method_seconds"] == pytest.approx(2.5)
    assert t.loc["fedala", "method_seconds"] == pytest.approx(3.5)
    assert t.loc["fedavg", "seconds"] == pytest.approx(12.6) and t.loc["fedprox", "seconds"] == pytest.approx(3.6)
    assert t.loc["fedala", "start_phase_seconds"] == pytest.approx(4.0)
    assert t.loc["fedavg", "start_phase_seconds"] == pytest.approx(0.0)
    table = AccuracyTable.from_costs(sel, plot=False).frame_
    assert list(table["method s / round"]) == ["2.500", "2.500", "3.500"]
    assert list(table["eval s"]) == ["10.000", "1.000", "10.000"]


def test_seed_table_pairs_runs_by_seed_and_reports_the_client_spread(runs):
    from fedala_lab.analysis.tables import final_spread, format_seed_table, seed_table
    from fedala_lab.errors import ConfigError

    groups = {"FedAvg": [runs["fedavg", s] for s in (0, 1)], "FedALA": [runs["fedala", s] for s in (1, 0)]}
    t = seed_table(groups, reference="FedAvg").set_index("label")
    best = [runs["fedala", s].best_acc for s in (1, 0)]
    assert t.loc["FedALA", "best_mean"] == pytest.approx(np.mean(best))
    assert t.loc["FedALA", "best_std"] == pytest.approx(np.std(best, ddof=1))
    diffs = [runs["fedala", s].best_acc - runs["fedavg", s].best_acc for s in (0, 1)]  # same seeds
    assert t.loc["FedALA", "diff_mean"] == pytest.approx(np.mean(diffs))
    assert t.loc["FedALA", "diff_std"] == pytest.approx(np.std(diffs, ddof=1))
    assert np.isnan(t.loc["FedAvg", "diff_mean"]) and list(t["n_seeds"]) == [2, 2]  # the reference: no pair
    half = np.tan(0.475 * np.pi) * np.std(diffs, ddof=1) / np.sqrt(2)  # t(0.975, 1) · s / √2
    assert (t.loc["FedALA", "diff_lo"], t.loc["FedALA", "diff_hi"]) == pytest.approx(
        (np.mean(diffs) - half, np.mean(diffs) + half))
    run = runs["fedala", 0]
    last = run.clients[run.clients["round"] == ROUNDS]
    assert final_spread(run) == pytest.approx(np.std(last["test_acc"]))
    assert t.loc["FedALA", "spread_mean"] == pytest.approx(np.mean([final_spread(r) for r in groups["FedALA"]]))
    text = format_seed_table(t.reset_index())
    assert list(text.columns) == ["seeds", "best acc % (95 % CI)", "final acc % (95 % CI)", "client spread (95 % CI)",
                                  "paired diff of best (95 % CI)", "p (paired t, Holm)"]
    assert text.loc["FedALA", "paired diff of best (95 % CI)"] == f"{np.mean(diffs):+.1f} ± {half:.1f}"
    assert text.loc["FedAvg", "paired diff of best (95 % CI)"] == "reference"
    assert "diff_mean" in seed_table(groups)  # FedAvg's group is the reference by default
    from fedala_lab.reproduce.paper import _verdicts

    # the figures driver's findings (Table 2): each method against FedAvg in its setting, in words
    (line,) = _verdicts([runs[a, s] for a in ("fedavg", "fedala") for s in (0, 1)], ["algo", "setting"], "best")
    assert line.startswith(f"MNIST-mini Dir(0.1), best round: FedALA − FedAvg = {np.mean(diffs):+.2f} points, 95 % CI "
                           f"±{half:.2f}, p = ") and "over 2 seeds (paired t)" in line
    assert "diff_mean" not in seed_table(groups, reference=None)
    with pytest.raises(ConfigError, match="reference='nope'"):
        seed_table(groups, reference="nope")


# ------------------------------------------------------------------------------------- ablations


def test_ablation_of_p_counts_ala_weights(runs):
    from fedala_lab.figures import AblationDisplay
    from fedala_lab.models import MLP, num_ala_weights

    d = AblationDisplay.from_runs([runs["fedala", 0], runs["fedala", 1], runs["p2", 0]], param="p")
    f = d.frame_
    assert list(f["p"]) == [1, 2] and list(f["n_seeds"]) == [2, 1]
    assert list(f["ala_weights"]) == [num_ala_weights(MLP(196), 1), num_ala_weights(MLP(196), 2)] == [650, 8906]
    # the same count read off the run's own parameter shapes
    shapes = runs["p2", 0].meta["param_shapes"]
    assert f["ala_weights"].iloc[1] == sum(int(np.prod(shapes[n])) for n in runs["p2", 0].meta["ala_params"])
    assert len(d.errorbars_) == 2 and len(d.cost_.patches) == 2
    assert d.ax_[1].get_yscale() == "log" and "%" in d.ax_[0].get_ylabel()
    # error bars are the 95 % interval over seeds (t with 1 df: tan(0.475 π) · s / √2), none for p = 2's one seed
    best = [runs["fedala", s].best_acc for s in (0, 1)]
    half = np.tan(0.475 * np.pi) * np.std(best, ddof=1) / np.sqrt(2)
    (bars,) = d.errorbars_[0].lines[2]
    (lo1, hi1), (lo2, hi2) = [(seg[0][1], seg[1][1]) for seg in bars.get_segments()]
    assert (lo1, hi1) == pytest.approx((np.mean(best) - half, np.mean(best) + half)) and lo2 == hi2
    assert "95 % interval" in d.ax_[0].get_title()


def test_ablation_of_s_and_its_checks(runs):
    from fedala_lab.errors import ConfigError
    from fedala_lab.figures import AblationDisplay

    d = AblationDisplay.from_runs([runs["s20", 0], runs["fedala", 0]], param="s")
    assert list(d.frame_["s"]) == [20, 80] and d.ax_[0].get_xscale() == "log"
    assert (d.frame_["ala_seconds"] > 0).all()
    with pytest.raises(ConfigError, match="differ only"):
        AblationDisplay.from_runs([runs["s20", 0], runs["p2", 0]], param="s")
    with pytest.raises(ConfigError, match="ALA runs"):
        AblationDisplay.from_runs([runs["fedavg", 0]], param="p")


# ----------------------------------------------------------------------------------------- Fig. 4


def test_trajectory_display_artists(tmp_path):
    """Drawn from precomputed landscape data (what the app passes): contours, arrows, markers, labels."""
    from fedala_lab.analysis.landscape import Landscape, Trajectory
    from fedala_lab.figures import TrajectoryDisplay

    xs, ys = np.linspace(-1, 1, 9), np.linspace(-2, 2, 7)
    X, Y = np.meshgrid(xs, ys)
    loss = 0.05 + X ** 2 + 0.5 * Y ** 2

    def traj(label, shift):
        r = np.arange(10, 14)
        s = np.c_[np.linspace(-0.8, -0.2, 4), np.full(4, shift)]
        e = s + [0.1, -0.3]
        return Trajectory(label, r, s, e, np.ones(4), np.full(4, 0.1), np.zeros(4), np.zeros(4))

    ls = Landscape(xs, ys, loss, np.array([0.6, 0.25]), [traj("FedAvg", 1.0), traj("FedALA", 0.0)], client=4,
                   rounds=(10, 13), anchor_label="FedALA", num_samples=50, split="train")
    d = TrajectoryDisplay(ls).plot()
    from matplotlib.contour import QuadContourSet

    assert isinstance(d.contourf_, QuadContourSet) and isinstance(d.contour_, QuadContourSet)
    assert d.colorbar_ is not None and "local loss" in d.colorbar_.ax.get_ylabel()
    assert len(d.arrows_) == 2 and tuple(d.arrows_[0].get_facecolor()[0][:3]) == pytest.approx((0, 0, 0))
    assert len(d.arrows_[1].U) == 2 * 4 - 1  # start→end→next start…
    assert [len(m.get_offsets()) for m in d.start_markers_] == [4, 4]
    assert [len(m.get_offsets()) for m in d.end_markers_] == [4, 4]
    np.testing.assert_allclose(d.end_markers_[1].get_offsets(), ls["FedALA"].end_xy)
    assert d.start_markers_[0].get_paths()[0] is not d.end_markers_[0].get_paths()[0]  # circles vs squares
    assert re.fullmatch(r"C1: 60\.00 %", d.ax_.get_xlabel()) and re.fullmatch(r"C2: 25\.00 %", d.ax_.get_ylabel())
    texts = [t.get_text() for t in d.legend_.get_texts()]
    assert texts[0].startswith("FedAvg (final local loss 0.1") and "off-plane" in texts[0]
    assert any("start of round" in t for t in texts) and any("end of round" in t for t in texts)
    written = d.savefig(tmp_path / "fig4.png", formats=("png", "pdf"))
    assert [p.suffix for p in written] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in written)


# --------------------------------------------------------------------------------- paper.py and CLI


def test_paper_plan_points_at_the_shared_mnist_partition():
    from fedala_lab.experiments.plans import build_plan

    plan = build_plan("paper")
    assert plan.practical.data.dataset.startswith("pfllib:")
    assert plan.practical.data.dataset.endswith("fedala-mnist-dir0.1")
    assert plan.practical.rounds == 2000 and plan.practical.model == "fedavgcnn"
    assert plan.seeds == (0, 1, 2, 3, 4) and plan.p_values == (1, 2, 3, 4)
    assert plan.fig4["K"] == 155 and plan.fig4["window"] == (140, 200) and plan.fig4["client"] == 4
    # MNIST pathological (Table 2, Fig. 4): torchvision's files, else the shared partition's images pooled
    assert plan.pathological.data.partition == "pathological" and plan.fig4["setting"] == "pathological"
    assert plan.pathological.data.dataset == "mnist" or (
        plan.pathological.data.dataset.startswith("pfllib-pool:") and plan.notes)
    small = build_plan("paper", rounds=3, seeds=1, fig4=(1, 1, 3), device="cpu")
    assert small.practical.rounds == 3 and small.seeds == (0,) and small.fig4["window"] == (1, 3)
    assert small.practical.device == "cpu" and small.fig5_rounds == 3
    from fedala_lab.errors import ConfigError

    with pytest.raises(ConfigError, match="preset"):
        build_plan("huge")
    with pytest.raises(ConfigError, match="window"):
        build_plan("quick", fig4=(1, 5, 2))


def test_describe_configs_names_what_differs():
    from fedala_lab.figures.index import describe_configs

    base = preset("teach")
    text = describe_configs([base.replace(algo=a, seed=s) for a in ("fedavg", "fedala") for s in (0, 1)],
                            base, "teach")
    assert text == 'preset("teach") with algo ∈ {fedavg, fedala}; seed ∈ {0, 1}'
    assert describe_configs([base], base, "teach") == 'preset("teach")'


def test_figures_command_end_to_end(tmp_path, capsys, monkeypatch):
    """All figures of the quick preset, scaled down (3 rounds, 1 seed), then again from the store."""
    from fedala_lab.cli import main
    from fedala_lab.reproduce import FIGURES

    out, runs = tmp_path / "figs", tmp_path / "runs"
    args = ["figures", "--out", str(out), "--store", str(runs), "--rounds", "3", "--seeds", "1",
            "--fig4", "2,2,3", "--no-progress", "--formats", "png"]
    assert main(args) == 0
    index = pd.read_json(out / "index.json", typ="series")["figures"]
    assert set(index) == set(FIGURES)
    readme = (out / "README.md").read_text()
    for entry in index.values():
        for f in entry["files"]:
            assert (out / f).is_file(), f
            assert f in readme
        assert entry["paper"] in readme and entry["seconds"] >= 0
    assert "Fig. 4" in readme and "the starting points tell the methods apart" in readme
    assert index["fig4"]["runs_total"] == 2 and "ala_after ∈ {" in index["fig4"]["configs"]
    table2 = (out / "table2_accuracy.md").read_text()
    assert table2.startswith("| method |")
    for label in ("Local", "Per-FedAvg", "FedRep", "pFedMe", "Ditto", "FedAMP", "FedPHP", "FedFomo", "APPLE",
                  "PartialFed", "FedALA"):  # the paper's whole comparison
        assert f"| {label} |" in table2, label
    table3 = pd.read_csv(out / "table3_cost.csv").set_index("algo")
    assert table3.loc["fedavg", "up"] == 1 and table3.loc["local", "total"] == 0
    assert table3.loc["fedfomo", "down"] > 1 and table3.loc["apple", "down"] > 1  # several client models down
    assert 0 < table3.loc["fedrep", "up"] < 1  # the body only
    assert "95 % interval of the mean over seeds" in (out / "table2_accuracy.tex").read_text().replace(r"\%", "%")
    assert any("one seed: no interval" in f for f in index["table2"]["findings"])  # --seeds 1: no interval, said so
    table4 = pd.read_csv(out / "applicability.csv")
    assert sorted(table4["base"]) == sorted(["fedavg", "fedprox", "perfedavg", "fedrep", "pfedme", "ditto", "fedamp",
                                             "fedphp", "partialfed"])
    capsys.readouterr()
    env = json.loads((out / "index.json").read_text())["environment"]
    env_line = next(line for line in readme.splitlines() if line.startswith("Preset:"))
    monkeypatch.setattr("fedala_lab.reproduce.driver._environment", lambda: {"platform": "another machine"})
    # an older version of Table 6, made on another day than the index's last call: its changes name its own day
    t6 = out / "table6_p_ablation.csv"
    older = pd.read_csv(t6)
    older.loc[0, "best_mean"] -= 1.0
    older.to_csv(t6, index=False)
    full = json.loads((out / "index.json").read_text())
    full["figures"]["table6"]["made"] = "2000-01-02"
    (out / "index.json").write_text(json.dumps(full))
    assert main(args[:1] + ["--only", "fig3,table6"] + args[1:]) == 0  # cached: nothing recomputed
    printed = capsys.readouterr().out
    assert "fig3" in printed and "0 runs computed" in printed and "table2" not in printed.split("\n")[0]
    index2 = pd.read_json(out / "index.json", typ="series")["figures"]
    assert set(index2) == set(FIGURES)  # the other figures' entries are kept
    assert index2["fig3"]["runs_computed"] == 0
    assert index2["table6"]["changes"][0].startswith("changed since the version of 2000-01-02 (`table6_p_ablation.csv`")
    assert "(+1.00)" in index2["table6"]["changes"][1]
    # a redraw keeps the machine and load of the call that computed the runs (their times are its)
    assert json.loads((out / "index.json").read_text())["environment"] == env
    assert env_line in (out / "README.md").read_text()


def test_plans_name_the_papers_comparison():
    from fedala_lab.experiments.plans import PAPER_METHODS, build_plan, with_ala

    assert with_ala(("local", "fedavg", "fedavg-c", "ditto", "fedfomo", "fedala")) == ("fedavg", "fedala", "ditto",
                                                                                       "ditto+ala")
    if not SHARED_MNIST.is_dir():
        pytest.skip("the MNIST partition is not on this machine")
    plan = build_plan("mnist-pfl")
    assert plan.settings == ("practical",) and plan.table_algos == PAPER_METHODS and plan.shortened
    assert {"partialfed", "partialfed-adaptive"} <= set(PAPER_METHODS)  # both PartialFed forms in Tables 2/3
    # one data order for every method of the comparison, PFLlib's (each epoch reshuffled), and the plan says so
    assert all(c.shuffle for c in plan.table("practical").configs() + plan.ala_table().configs())
    assert any(n.startswith("data order") for n in plan.notes)
    assert {c.algo for c in plan.ala_table().configs()} >= {"fedala", "fedrep+ala", "partialfed+ala"}
    # each method of Table 4 keeps its round 1, where its run with ALA starts (tests/test_branch.py); no other
    kept = {c.algo for c in map(plan.recorded, plan.table("practical").configs()) if c.keep_states == "1"}
    assert kept == set(with_ala(PAPER_METHODS)[::2]) and "apple" not in kept and "fedala" not in kept
    # its README describes what it runs, and nothing it does not draw (it has no Fig. 4, 5 nor ablations)
    from fedala_lab.reproduce.driver import describe_plan

    lines = describe_plan(plan)
    assert lines[0].startswith("practical setting") and lines[1] == "seeds: [0]" and len(lines) == 2
    assert any(line.startswith("Fig. 4") for line in describe_plan(build_plan("mnist")))


def test_figures_command_errors(capsys):
    from fedala_lab.cli import main

    assert main(["figures", "--list"]) == 0
    assert "fig4" in capsys.readouterr().out
    assert main(["figures", "--only", "fig99", "--no-progress"]) == 2
    assert "only='fig99'" in capsys.readouterr().err
    assert main(["figures", "--fig4", "1,2", "--no-progress"]) == 2


def test_runs_with_the_same_label_stay_separate_lines(tmp_path):
    from conftest import make_ragged_data, small_cfg

    from fedala_lab.engine.simulate import simulate
    from fedala_lab.figures import AccuracyCurveDisplay

    data = make_ragged_data()
    runs = [simulate(small_cfg(algo="fedavg", rounds=2, seed=s), data, progress=False) for s in (0, 1)]
    disp = AccuracyCurveDisplay.from_runs(runs)
    assert [ln.get_label() for ln in disp.ax_.get_lines()] == ["FedAvg", "FedAvg (2)"]
    assert all(len(ln.get_xdata()) == 2 for ln in disp.ax_.get_lines())


# ------------------------------------------------------------------------------------------- mnist plan


def _tiny_mnist(src, dest, n_train=10, n_test=5):
    """The MNIST Dir(0.1) partition cut to each client's first rows, in the FedALA repository's layout."""
    from fedala_lab.data.pfllib import load_pfllib

    splits = load_pfllib(src)
    for split, n, parts in (("train", n_train, splits.train), ("test", n_test, splits.test)):
        (dest / split).mkdir(parents=True)
        for i, (x, y) in enumerate(parts):
            with open(dest / split / f"{split}{i}_.npz", "wb") as f:
                np.savez_compressed(f, data={"x": x[:n], "y": y[:n]})


def test_mnist_plan_budget_and_shape():
    from fedala_lab.experiments.plans import build_plan

    plan = build_plan("mnist")
    assert plan.practical.rounds == plan.pathological.rounds == 15 and plan.seeds == (0,)
    assert plan.practical.model == "fedavgcnn" and plan.practical.lr == 0.005 and plan.practical.batch_size == 10
    assert not plan.practical.record_train_loss and plan.shortened and plan.ablation_rounds == 3
    # K is read off the tables' pathological FedAvg run extended to twice the horizon
    assert plan.fig4["K"] == "auto" and plan.fig4["horizon"] == 30 and plan.fig4["search"] == (10, 27)
    assert plan.fig4["client"] == 4
    # the shared runs record what every figure reads, whoever computes them first
    fedavg_dir = plan.recorded(plan.practical.replace(algo="fedavg"))
    assert fedavg_dir.record_train_loss and fedavg_dir.kept_rounds() == [1, 15]
    fedavg_pat = plan.recorded(plan.pathological.replace(algo="fedavg"))
    assert fedavg_pat.snapshot_clients == "4" and fedavg_pat.snapshot_from == 8
    assert fedavg_pat.kept_rounds() == [1, 10, 12, 14, 15]  # its extension starts from round 15
    longer = plan.recorded(plan.pathological.replace(algo="fedavg", rounds=30))
    assert (longer.snapshot_clients, longer.snapshot_from) == ("4", 8)
    assert longer.kept_rounds() == [1, 10, 12, 14, 15, 16, 18, 20, 22, 24, 26, 27, 30]
    assert plan.recorded(plan.practical.replace(algo="fedala")).kept_rounds() == [3, 15]
    assert not plan.recorded(plan.practical.replace(algo="fedprox")).record_train_loss
    fixed = build_plan("mnist", fig4=(8, 6, 13)).fig4
    assert fixed["search"] == (8, 8) and fixed["horizon"] == 15  # no curve to read: no longer run
    # every K the search may pick gives valid configs, and the FedAvg run read first is the tables' one
    # through Fig. 4's horizon
    from fedala_lab.reproduce.paper import _fig4_fedavg_cfg, _fig4_from_fedavg

    assert _fig4_fedavg_cfg(plan) == longer.replace(seed=plan.seeds[0])
    for K in range(10, 28):
        table, fa, fl = _fig4_from_fedavg(plan, K)
        assert table == longer and fl.ala_after == K and fl.snapshot_from == K - 2
        assert fa.rounds >= fl.rounds == K + 5 and fa.rounds == max(30, K + 5)


def _mnist_cut(tmp_path, monkeypatch):
    _tiny_mnist(SHARED_MNIST, tmp_path / "shared" / "fedala-mnist-dir0.1")
    monkeypatch.setenv("FEDALA_LAB_MNIST_PARTITION", str(tmp_path / "shared" / "fedala-mnist-dir0.1"))
    monkeypatch.setenv("FEDALA_LAB_DATA", str(tmp_path / "no-torchvision"))  # MNIST pathological: the cut pooled


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="shared MNIST partition not present")
@pytest.mark.filterwarnings("ignore:.*hold fewer than batch_size")
def test_mnist_preset_smoke_on_a_tiny_cut(tmp_path, monkeypatch):
    """`fedala-lab figures --preset mnist --only fig4,fig5 --rounds 2 --seeds 1` on 10 train rows per client:
    Fig. 4's K read off the FedAvg run and FedALA branched from it, Fig. 5's per-client view, the index."""
    from fedala_lab.reproduce import run_figures

    _mnist_cut(tmp_path, monkeypatch)
    out = tmp_path / "figs"
    entries = run_figures("mnist", only=["fig4", "fig5"], rounds=2, seeds=1, out=out, store=tmp_path / "runs",
                          progress=False, formats=("png",), device="cpu")
    readme = (out / "README.md").read_text()
    assert "Preset: `mnist`" in readme and "shortened horizon: 2 rounds" in readme
    assert all((out / f).is_file() for e in entries.values() for f in e["files"])
    fig4 = entries["fig4"]
    K = int(re.match(r"K = (\d+)", fig4["findings"][0])[1])
    assert 1 <= K <= 3 and "extended to 4 rounds" in fig4["findings"][0] and "client 4" in fig4["findings"][1]
    # FedAvg through Fig. 4's horizon (twice the tables'), then FedALA from its state at K
    assert fig4["runs_computed"] == 2 and len(fig4["runs_branched"]) == 1
    assert f"from round {K} of fedavg-pool" in fig4["runs_branched"][0] and f"from round {K}" in readme
    assert any("per client" in x for x in entries["fig5"]["findings"])
    assert len(entries["fig5"]["runs_branched"]) == 1  # FedALA Dir(0.1) from FedAvg's round 1


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="shared MNIST partition not present")
@pytest.mark.filterwarnings("ignore:.*hold fewer than batch_size")
def test_mnist_preset_every_figure_on_a_tiny_cut(tmp_path, monkeypatch):
    """Every figure of the mnist preset (2 rounds, 1 seed, 10 train rows per client) and runs shared as planned."""
    from fedala_lab.experiments.plans import build_plan
    from fedala_lab.reproduce import run_figures

    _mnist_cut(tmp_path, monkeypatch)
    out = tmp_path / "figs"
    entries = run_figures("mnist", rounds=2, seeds=1, out=out, store=tmp_path / "runs", progress=False,
                          formats=("png",), device="cpu")
    assert list(entries) == list(build_plan("mnist").figures)
    for e in entries.values():
        assert all((out / f).is_file() for f in e["files"]), e["files"]
    assert entries["fig2"]["runs_computed"] == entries["fig3"]["runs_computed"] == entries["fig5"]["runs_computed"] == 0
    assert entries["table1"]["runs_computed"] == 5  # s = 80 is the table's FedALA run
    assert len(entries["table1"]["runs_branched"]) == 6  # all from FedAvg Dir(0.1)'s round 1 (s = 80 too)


def test_ranked_methods_draw_the_95_interval_over_seeds(runs):
    from fedala_lab.figures import RankedAccuracyDisplay

    sel = [runs[a, s] for a in ("fedavg", "fedala") for s in (0, 1)] + [runs["p2", 0]]
    labels = ["FedAvg", "FedAvg", "FedALA", "FedALA", "FedALA p 2"]
    d = RankedAccuracyDisplay.from_runs(sel, labels=labels)
    rank = d.ranking_.set_index("label")
    final = [runs["fedala", s].final_acc for s in (0, 1)]
    half = np.tan(0.475 * np.pi) * np.std(final, ddof=1) / np.sqrt(2)  # t(0.975, 1) · s / √2
    assert (rank.loc["FedALA", "lo"], rank.loc["FedALA", "hi"]) == pytest.approx(
        (np.mean(final) - half, np.mean(final) + half))
    assert np.isnan(rank.loc["FedALA p 2", "lo"])  # one seed: no interval, no line
    texts = [t.get_text() for t in d.ax_.texts]
    assert f"{np.mean(final):.2f} ± {half:.2f}" in texts and "95 % interval" in d.ax_.get_xlabel()
    lines = [c.get_segments()[0] for c in d.ax_.collections if type(c).__name__ == "LineCollection"]
    across = [seg for seg in lines if seg[0][1] == seg[1][1]]  # horizontal: the intervals (bars are vertical)
    assert sorted(seg[0][0] for seg in across) == pytest.approx(sorted(rank.loc[["FedAvg", "FedALA"], "lo"]))


def test_a_new_version_of_a_table_says_what_changed_and_by_how_much(tmp_path):
    from fedala_lab.figures.index import render_readme
    from fedala_lab.reproduce.driver import previous_tables, table_changes

    cols = ["algo", "setting", "best_mean", "final_mean", "row"]
    old = pd.DataFrame([["local", "x", 98.25, 98.25, "Local"], ["fedavg", "x", 79.47, 79.40, "FedAvg"],
                        ["fedfomo", "x", 97.92, 97.92, "FedFomo"]], columns=cols)
    old.to_csv(tmp_path / "t.csv", index=False)
    before = previous_tables(tmp_path, {"files": ["t.csv", "t.png", "missing.csv"]})
    assert list(before) == ["t.csv"]
    new = pd.DataFrame([["local", "x", 98.25, 98.25, "Local"], ["fedavg", "x", 80.50, 79.40, "FedAvg"],
                        ["partialfed-a", "x", 97.0, 96.0, "PartialFed-Adaptive"]], columns=cols)
    new.to_csv(tmp_path / "t.csv", index=False)
    lines = table_changes(before, tmp_path, ("best_mean", "final_mean"), "2026-11-28")
    assert lines == ["changed since the version of 2026-11-28 (`t.csv`, best_mean, final_mean; points):",
                     "  - FedAvg: best_mean 79.47 → 80.50 (+1.03)", "  - new: PartialFed-Adaptive",
                     "  - gone: FedFomo", "  - unchanged (within 0.005): Local"]
    assert table_changes(previous_tables(tmp_path, {"files": ["t.csv"]}), tmp_path, ("best_mean",), "") == []
    entry = {"paper": "Table 2", "title": "t", "files": ["t.csv"], "only_command": "c", "command": "c",
             "preset": "p", "configs": "c", "seconds": 1.0, "runs_computed": 0, "runs_total": 0, "findings": ["f"],
             "changes": lines, "made": "2026-11-29"}
    text = render_readme({"figures": {"table2": entry}})
    assert "runs computed, made on 2026-11-29" in text  # a figure kept from an older call says when it was made
    assert "- changed since the version of 2026-11-28" in text and "\n  - FedAvg: best_mean 79.47 → 80.50" in text
