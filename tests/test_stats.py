"""Statistics over seeds (fedala_lab/analysis/stats.py) against oracles: intervals and p-values computed here by
their formulas (or by other scipy functions than the module calls), Holm by hand, a permutation check that the
paired test pairs, and the per-client numbers of hand-made runs by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp

from fedala_lab.analysis import stats as st
from fedala_lab.config import RunConfig
from fedala_lab.errors import ConfigError
from fedala_lab.record.run import Run

# ------------------------------------------------------------------------------------------ intervals


@pytest.mark.parametrize("values", [[90.1, 91.4, 89.7], [70.0, 72.5, 71.0, 69.5, 74.0], [12.0, 15.5]])
def test_t_interval_is_mean_plus_minus_t_s_over_root_n(values):
    a = np.array(values)
    n, mean, s = len(a), a.mean(), a.std(ddof=1)
    # the oracle: scipy's t distribution's own interval (another function than the module's t.ppf)
    lo, hi = sp.t.interval(0.95, n - 1, loc=mean, scale=s / math.sqrt(n))
    got = st.interval(values)
    assert got["ci_method"] == "t" and got["n"] == n and got["note"] == ""
    assert got["mean"] == pytest.approx(mean) and got["std"] == pytest.approx(s)
    assert (got["ci_lo"], got["ci_hi"]) == pytest.approx((lo, hi))
    if n == 2:  # t with 1 degree of freedom is the Cauchy distribution: t(0.975, 1) = tan(0.475 π)
        assert got["ci_hi"] - mean == pytest.approx(math.tan(0.475 * math.pi) * s / math.sqrt(2))


def test_bootstrap_interval_from_ten_seeds():
    rng = np.random.default_rng(7)
    values = list(80 + 2 * rng.standard_normal(12))
    got = st.interval(values)
    assert got["ci_method"] == "bootstrap" and st.interval(values) == got  # the same interval every time
    # an independent percentile bootstrap (numpy, its own generator, many resamples): the same bounds, closely
    a = np.array(values)
    means = a[np.random.default_rng(1).integers(0, len(a), (200_000, len(a)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    width = hi - lo
    assert abs(got["ci_lo"] - lo) < 0.05 * width and abs(got["ci_hi"] - hi) < 0.05 * width
    assert st.interval(values[:9])["ci_method"] == "t"  # below 10 seeds: Student t


def test_no_interval_for_one_seed_identical_runs_or_equal_values():
    one = st.interval([88.0])
    assert one["note"] == "one seed: no interval" and math.isnan(one["ci_lo"]) and math.isnan(one["std"])
    same = st.interval([88.0, 88.0, 88.0], identical=True)
    assert "identical runs: no interval" in same["note"] and math.isnan(same["ci_hi"])
    equal = st.interval([88.0, 88.0 + 1e-13, 88.0])  # equal but for float rounding
    assert equal["note"] == "the 3 seeds gave the same value: no interval" and math.isnan(equal["ci_lo"])
    assert st.interval([])["note"] == "no run" and st.interval([np.nan, 3.0])["n"] == 1


# --------------------------------------------------------------------------------------------- pairs


def test_paired_t_and_wilcoxon_against_their_formulas():
    x = np.array([91.2, 90.4, 92.8, 89.9, 91.5])
    r = np.array([80.1, 79.0, 81.4, 78.2, 80.0])
    d = x - r
    got = st.paired(x, r)
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert got["p_t"] == pytest.approx(2 * sp.t.sf(abs(t), len(d) - 1))
    assert got["p_t"] == pytest.approx(sp.ttest_rel(x, r).pvalue)
    assert got["diff_mean"] == pytest.approx(d.mean()) and got["diff_n"] == 5
    assert (got["diff_ci_lo"], got["diff_ci_hi"]) == pytest.approx(
        sp.t.interval(0.95, 4, loc=d.mean(), scale=d.std(ddof=1) / math.sqrt(5)))
    # every difference positive: the exact signed-rank p is 2 · (1/2)^5, the smallest 5 pairs can give, above 0.05
    assert got["p_wilcoxon"] == pytest.approx(2 / 2**5) == got["wilcoxon_min_p"]
    assert "cannot reach 0.05" in got["wilcoxon_note"] and "2/2^5 = 0.0625" in got["wilcoxon_note"]
    six = st.paired([3.0, 1.0, 4.0, 1.5, 5.0, 9.0], [0.0] * 6)  # six distinct positive differences
    assert six["p_wilcoxon"] == pytest.approx(2 / 2**6) and six["p_wilcoxon"] < 0.05 and six["wilcoxon_note"] == ""


def test_paired_says_when_the_runs_are_the_references_own():
    got = st.paired([85.0, 86.0, 84.0], [85.0, 86.0, 84.0], same_runs=True)
    assert got["diff_mean"] == 0 and math.isnan(got["p_t"]) and math.isnan(got["p_wilcoxon"])
    assert "the reference's own" in got["diff_note"] and math.isnan(got["diff_ci_lo"])
    shifted = st.paired([86.0, 87.0, 85.0], [85.0, 86.0, 84.0])  # the same difference every seed
    assert shifted["diff_note"] == "the 3 seeds gave the same difference: no interval" and math.isnan(shifted["p_t"])


def test_holm_by_hand():
    p = [0.01, 0.04, 0.03, 0.005, np.nan]
    # m = 4: 0.005·4 = 0.02; 0.01·3 = 0.03; 0.03·2 = 0.06; 0.04·1 = 0.04 → max(0.06, 0.04) = 0.06
    np.testing.assert_allclose(st.holm(p), [0.03, 0.06, 0.06, 0.02, np.nan])
    np.testing.assert_allclose(st.holm([0.5, 0.9]), [1.0, 1.0])  # capped at 1 (0.5·2) and monotone
    np.testing.assert_allclose(st.holm([0.02]), [0.02])  # a family of one: unchanged


def _frame(values: dict, seeds=(0, 1, 2, 3, 4), **columns) -> pd.DataFrame:
    """A runs' frame by hand: {label: final accuracies by seed}, best = final + 1, distinct trajectories."""
    rows = [{"label": lab, "algo": "fedavg" if lab == "FedAvg" else lab.lower(), "seed": s, "final_acc": v,
             "best_acc": v + 1, "trajectory": f"{lab}-{s}", **columns}
            for lab, vs in values.items() for s, v in zip(seeds, vs)]
    return pd.DataFrame(rows)


def test_the_paired_test_pairs_seeds():
    """The reference's seeds differ a lot, the method follows them closely: paired, the gain is clear; shuffle
    which seed is which on one side and the same numbers give another, far larger p."""
    ref = [60.0, 75.0, 68.0, 82.0, 71.0]
    method = [61.1, 76.3, 68.9, 83.2, 71.8]
    long = st.seed_stats(_frame({"FedAvg": ref, "FedALA": method}))
    row = long[(long["label"] == "FedALA") & (long["metric"] == "final")].iloc[0]
    assert row["p_t"] == pytest.approx(sp.ttest_rel(method, ref).pvalue) and row["p_t"] < 0.001
    assert sp.ttest_ind(method, ref).pvalue > 0.5  # unpaired, the seeds' spread hides the gain
    shuffled = [method[i] for i in (3, 0, 4, 1, 2)]
    again = st.seed_stats(_frame({"FedAvg": ref, "FedALA": shuffled}))
    p = again[(again["label"] == "FedALA") & (again["metric"] == "final")]["p_t"].iloc[0]
    assert p == pytest.approx(sp.ttest_rel(shuffled, ref).pvalue) and p > 100 * row["p_t"]


def test_seed_stats_reference_holm_family_and_settings():
    frame = pd.concat([_frame({"FedAvg": [70, 71, 69, 72, 70], "FedALA": [80, 82, 79, 83, 80],
                               "Ditto": [71, 70, 70, 73, 70]}, setting="A"),
                       _frame({"FedAvg": [50, 52, 49, 51, 50], "FedALA": [51, 50, 50, 53, 50]}, setting="B")])
    long = st.seed_stats(frame, ["algo", "setting"])  # default reference: FedAvg, within each setting
    final = long[long["metric"] == "final"].set_index(["algo", "setting"])
    assert final["reference"].isna().sum() == 2 and set(final["reference"].dropna()) == {"fedavg"}
    a = final.loc[[("fedala", "A"), ("ditto", "A")], "p_t"].to_numpy()
    np.testing.assert_allclose(final.loc[[("fedala", "A"), ("ditto", "A")], "p_holm"], st.holm(a))
    assert list(final.loc[[("fedala", "A"), ("ditto", "A")], "holm_family"]) == [2, 2]
    assert final.loc[("fedala", "B"), "holm_family"] == 1  # setting B: one comparison, its own family
    assert final.loc[("fedala", "B"), "p_holm"] == final.loc[("fedala", "B"), "p_t"]
    # by name or label, any case; a name that is not there is refused, naming the field and what is allowed
    for name in ("FedALA", "fedala"):
        assert set(st.seed_stats(frame, ["algo", "setting"], against=name)["reference"].dropna()) == {"fedala"}
    with pytest.raises(ConfigError, match="against='nope' is not allowed: one of the compared algo values"):
        st.seed_stats(frame, ["algo", "setting"], against="nope")
    assert "reference" not in st.seed_stats(frame, ["algo", "setting"], against=None)


def test_identical_runs_are_said_not_given_an_interval_of_zero():
    frame = _frame({"FedAvg": [70, 70, 70], "FedALA": [80, 80, 80]}, seeds=(0, 1, 2))
    frame["trajectory"] = frame["label"]  # every seed gave the same run
    long = st.seed_stats(frame, against="FedAvg")
    ala = long[(long["label"] == "FedALA") & (long["metric"] == "final")].iloc[0]
    assert bool(ala["identical"]) and "identical runs: no interval" in ala["note"]
    assert "identical runs" in ala["diff_note"] and math.isnan(ala["p_t"]) and math.isnan(ala["diff_ci_lo"])
    assert "identical runs: no interval" in st.verdicts(long)[0]


def test_verdicts_in_words():
    ref = [60.0, 75.0, 68.0]
    long = st.seed_stats(_frame({"FedAvg": ref, "FedALA": [71.6, 87.1, 79.5], "Ditto": [60.5, 74.0, 69.1]},
                                seeds=(0, 1, 2)))
    d = np.array([71.6, 87.1, 79.5]) - ref
    half = sp.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    p_holm = st.holm([sp.ttest_rel([71.6, 87.1, 79.5], ref).pvalue, sp.ttest_rel([60.5, 74.0, 69.1], ref).pvalue])
    ala, ditto = st.verdicts(long, "final")
    assert ala == (f"FedALA − FedAvg = {d.mean():+.1f} points, 95 % CI ±{half:.1f}, p = {p_holm[0]:.2g} over 3 "
                   "seeds (paired t, Holm-adjusted over 2 comparisons)")
    assert ditto.endswith(": with 3 seeds this gap could be noise")  # its interval holds 0
    assert st.verdict(long, "ditto") == ditto  # by name, any case
    one = st.seed_stats(_frame({"FedAvg": [60.0], "FedALA": [71.6]}, seeds=(0,)))
    assert st.verdicts(one) == ["FedALA − FedAvg = +11.6 points; one seed: no interval, so this gap could be noise"]
    assert st.format_p(2.6e-4) == "0.00026" and st.format_p(3e-6) == "< 0.0001" and st.format_p(np.nan) == "—"
    assert st.format_ci(95.2, 94.0, 96.4) == "95.20 ± 1.20" and st.format_ci(95.2, 94.0, 96.0) == "95.20 [94.00, 96.00]"


# ------------------------------------------------------------------------------------------ per client


def _run(final: list, earlier: list, seed: int = 0, algo: str = "fedavg", **data) -> Run:
    """A run by hand: two evaluated rounds of every client (its test accuracy in %), pooled = the clients' mean."""
    cfg = RunConfig(algo=algo, seed=seed, rounds=2).replace(num_clients=len(final), **data)
    clients = pd.DataFrame([{"round": rnd, "client": c, "test_acc": float(v)}
                            for rnd, accs in ((1, earlier), (2, final)) for c, v in enumerate(accs)])
    rounds = pd.DataFrame({"round": [1, 2], "acc": [np.mean(earlier), np.mean(final)], "seconds": [0.1, 0.1],
                           "bytes_up": [0, 0], "bytes_down": [0, 0]})
    return Run(cfg, clients, rounds)


FINAL = [55.0, 90.0, 72.5, 60.0, 88.0, 95.0, 40.0, 81.0, 77.0, 66.0]
EARLY = [58.0, 85.0, 70.0, 64.0, 80.0, 96.0, 35.0, 82.0, 70.0, 66.0]


def test_fairness_by_hand():
    got = st.fairness(_run(FINAL, EARLY))
    a = sorted(FINAL)  # 40, 55, 60, 66, 72.5, 77, 81, 88, 90, 95
    # 10 clients: the worst 10 % is the one lowest; percentiles interpolate linearly at (n − 1)·q
    assert got["final_worst10"] == got["final_worst"] == 40.0
    assert got["final_p10"] == pytest.approx(a[0] + 0.9 * (a[1] - a[0]))  # 53.5
    assert got["final_p50"] == pytest.approx((a[4] + a[5]) / 2)  # 74.75
    assert got["final_p90"] == pytest.approx(a[8] + 0.1 * (a[9] - a[8]))  # 90.5
    mean = sum(a) / 10
    assert got["final_client_std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in a) / 10))
    best = [max(f, e) for f, e in zip(FINAL, EARLY)]  # each client at its own best round
    assert got["best_worst"] == min(best) == 40.0 and got["best_p90"] == pytest.approx(
        sorted(best)[8] + 0.1 * (sorted(best)[9] - sorted(best)[8]))
    twenty = st.spread_numbers(list(range(20)))  # 20 clients: the worst 10 % is the mean of the 2 lowest
    assert twenty["worst10"] == 0.5 and twenty["worst"] == 0


def test_client_gains_by_hand():
    ref = _run(FINAL, EARLY, seed=0)
    better = _run([v + (5 if i % 2 else -2) for i, v in enumerate(FINAL)], EARLY, seed=0, algo="fedala")
    g = st.client_gains(better, ref)
    assert list(g["gain"]) == [-2, 5] * 5
    twice = st.gain_summary([(better, ref), (_run([v + 1 for v in FINAL], EARLY, seed=1, algo="fedala"),
                                             _run(FINAL, EARLY, seed=1))])
    # seed 0: five −2 and five +5; seed 1: ten +1 → mean (15 + 10) / 20, median 1
    assert twice == {"seeds": 2, "pairs": 20, "gain": 15, "lose": 5, "tie": 0, "mean_gain": pytest.approx(1.25),
                     "median_gain": 1.0, "worst_loss": -2.0}
    words = st.gain_words(twice, "FedALA", "FedAvg")
    assert words.startswith("FedALA vs FedAvg, per client (final accuracy, 2 seeds): 15 of 20 client-seed pairs "
                            "gain, 5 lose; gain per client: mean +1.2, median +1.0, lowest -2.0 points")
    with pytest.raises(ConfigError, match="a run of the same seed"):
        st.client_gains(better, _run(FINAL, EARLY, seed=1))
    with pytest.raises(ConfigError, match="the same data"):
        st.client_gains(better, _run(FINAL, EARLY, seed=0, beta=0.5))


def test_gain_table_pairs_runs_by_seed():
    frame = st.groups_frame({"FedAvg": [_run(FINAL, EARLY, seed=s) for s in (0, 1)],
                             "FedALA": [_run([v + 1 + s for v in FINAL], EARLY, seed=s, algo="fedala")
                                        for s in (1, 0)]})
    t = st.gain_table(frame).set_index("label")
    assert list(t.index) == ["FedALA"] and t.loc["FedALA", "reference"] == "FedAvg"
    assert t.loc["FedALA", "pairs"] == 20 and t.loc["FedALA", "mean_gain"] == pytest.approx(1.5)  # +1 and +2


def test_fairness_of_a_real_run_matches_its_own_record(tmp_path):
    """The per-client std of the last round is what the engine recorded as acc_std (computed apart)."""
    from fedala_lab import preset
    from fedala_lab.experiments.runs import get_or_run

    run = get_or_run(preset("teach", rounds=2, num_clients=10), tmp_path, progress=False)
    f = st.fairness(run)
    assert f["final_client_std"] == pytest.approx(run.rounds["acc_std"].iloc[-1])
    last = run.clients[run.clients["round"] == 2]["test_acc"]
    assert f["final_worst"] == last.min() and f["final_worst10"] == last.min()  # 10 clients: the one lowest
    metrics = st.metrics_frame([run])
    assert set(st.METRICS) - {"best", "final"} <= set(metrics.columns) and metrics["run"].iloc[0] is run
