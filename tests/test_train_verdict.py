"""Train & compare's verdict over seeds (fedala_lab/webapp/tabs/train.py): the tab's handler on the teach preset
with a few rounds, its headline checked against the statistics module (fedala_lab/analysis/stats.py) computed
from the same stored runs, its one-seed wording, and "could be noise" where two methods cannot be told apart."""

from __future__ import annotations

import pytest

gr = pytest.importorskip("gradio")

from fedala_lab.analysis import stats
from fedala_lab.webapp import ui
from fedala_lab.webapp.tabs.train import DEFAULT_SEEDS

# the teach preset (the page's defaults), 3 rounds: short runs, three seeds each
TEACH = {**{k: ui.DEFAULTS[k] for k in ui.DATA_FIELDS + ui.TRAIN_FIELDS}, "rounds": 3}
LABELS = {"fedavg": "FedAvg", "fedala": "FedALA", "local": "Local"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return ui.LectureApp(tmp_path_factory.mktemp("verdict_store"))


def stored(app, algo: str, seeds, **changes) -> list:
    runs = [app.store.find(ui.make_config(algo=algo, **{**TEACH, **changes, "seed": s})) for s in seeds]
    assert all(r is not None for r in runs), algo
    return runs


def row_of(frame, label: str, reference: str):
    long = stats.seed_stats(frame, against=reference, metrics=["final"])
    return long[(long["label"] == label) & (long["metric"] == "final")].iloc[0]


def said_numbers(row) -> list[str]:
    """The numbers a verdict line must carry for ``row`` (a paired comparison over several seeds)."""
    p = row["p_holm"] if row["holm_family"] > 1 else row["p_t"]
    return [f"{row['diff_mean']:+.2f} points", f"95 % CI ±{row['diff_ci_hi'] - row['diff_mean']:.2f}",
            f"p = {stats.format_p(p)}" if p >= 1e-4 else "p < 0.0001", f"over {int(row['diff_n'])} seeds"]


def test_the_headline_over_three_seeds_is_what_the_statistics_module_computes(app):
    assert DEFAULT_SEEDS == 3
    algos = ["fedavg", "fedala", "fedavg+ala", "local"]  # FedAvg+ALA is FedALA: one run a seed
    _, found, _, ranked, notes, summary, status = app.train(algos, DEFAULT_SEEDS, **TEACH)
    assert status.startswith("9 run(s) in") and "Computed once: FedAvg+ALA is FedALA" in status
    assert sorted(app.store.list()["algo"]) == sorted(["fedavg", "fedala", "local"] * 3)
    assert list(zip(summary["algorithm"], summary["seed"])) == [
        (LABELS[a], s) for a in ("fedavg", "fedala", "local") for s in range(3)]
    groups = {LABELS[a]: stored(app, a, range(3)) for a in ("fedavg", "fedala", "local")}
    frame = stats.groups_frame(groups)
    own = stats.seed_stats(frame, against=None, metrics=["final"]).set_index("label")
    order = list(own["mean"].sort_values(ascending=False, kind="stable").index)  # best first, mean over seeds
    # the best federated method against FedAvg, and against Local: paired by seed, Holm-adjusted
    best = next(lab for lab in order if lab not in ("FedAvg", "Local"))
    row = row_of(frame, best, "FedAvg")
    line = next(ln for ln in found.split("\n\n") if ln.startswith("**Against FedAvg:**"))
    assert f"{best} − FedAvg = " in line and all(x in line for x in said_numbers(row))
    assert ("could be noise" in line) == stats.is_noise(row)
    fed = next(lab for lab in order if lab != "Local")
    row = row_of(frame, fed, "Local")
    line = next(ln for ln in found.split("\n\n") if "− Local = " in ln and "federating" in ln.lower())
    assert f"{fed} − Local = " in line and all(x in line for x in said_numbers(row))
    lead = ("**Does federating pay? Not measurably here**" if stats.is_noise(row) else
            "**Federating pays here**" if row["diff_mean"] > 0 else "**Here federating does not pay:**")
    assert line.startswith(lead)
    assert ("could be noise" in line) == stats.is_noise(row)
    # below the plots, per client: how many client-seed pairs gain against Local, from the same runs
    gains = stats.gain_table(frame, against="Local").set_index("label").loc[fed]
    assert f"{fed} vs Local, per client (final accuracy, 3 seeds): {gains['gain']} of {gains['pairs']} client-seed " \
           f"pairs gain, {gains['lose']} lose" in notes
    # the ranked plot and the per-client plot order the methods as the headline does (mean over seeds)
    ticks = sorted(ranked.axes[0].get_yticklabels(), key=lambda t: -t.get_position()[1])
    assert [t.get_text() for t in ticks] == order
    per_client, spread = app.train_clients(algos, DEFAULT_SEEDS, **TEACH)
    legend = [t.get_text().split(":")[0] for t in per_client.axes[0].get_legend().get_texts()]
    assert legend == order and "mean of 3 seeds" in per_client.axes[0].get_title()
    assert [t.get_text() for t in spread.axes[0].get_xticklabels()] == order
    assert "mean of 3 seeds" in spread.axes[0].get_title()
    # each client's marker is its final accuracy averaged over the 3 seeds
    from fedala_lab.analysis.curves import client_accuracy

    top = order[0]
    mean = client_accuracy(groups[top], [f"{top} {s}" for s in range(3)]).groupby("client")["acc"].mean()
    shown = per_client.axes[0].collections[1 + order.index(top)].get_offsets()[:, 1]
    assert sorted(shown) == pytest.approx(sorted(mean))
    # the same click again: every run served from the store
    *_, status = app.train(algos, DEFAULT_SEEDS, **TEACH)
    assert "(9 served from the run store" in status


def test_one_seed_has_no_interval_and_names_no_winner(app):
    _, found, _, ranked, notes, *_ = app.train(["fedavg", "fedala", "local"], 1, **TEACH)
    assert found.count("one seed: no interval, so this gap could be noise") == 2  # against FedAvg, and Local
    assert "One seed cannot say" in found and "no winner is named" in notes
    for claim in ("Federating pays here", "federating does not pay", "95 % CI", "p = "):
        assert claim not in found
    assert "one seed" in ranked.axes[0].get_title()
    # neither FedAvg nor Local ticked: the methods' own accuracies, without an interval, and how to ask more
    _, found, *_ = app.train(["fedala", "fedprox"], 1, **TEACH)
    assert "**Final accuracy (pooled), over one seed:**" in found and "best first" not in found
    assert "Tick *Local*" in found


def test_two_near_identical_methods_could_be_noise(app):
    # FedProx with a tiny proximal term is FedAvg but for rounding-sized steps
    near = {"mu": 0.001}
    _, found, *_ = app.train(["fedavg", "fedprox"], 3, **{**TEACH, **near})
    frame = stats.groups_frame({"FedAvg": stored(app, "fedavg", range(3), **near),
                                "FedProx": stored(app, "fedprox", range(3), **near)})
    row = row_of(frame, "FedProx", "FedAvg")
    assert stats.is_noise(row)  # the case this test is about: the interval holds 0
    line = next(ln for ln in found.split("\n\n") if ln.startswith("**Against FedAvg:**"))
    assert all(x in line for x in said_numbers(row)) and "with 3 seeds this gap could be noise" in line
    assert "Tick *Local*" in found  # no Local: nothing said about federating at all


@pytest.mark.parametrize("seeds", [0, 6, 2.5, True, None])
def test_seeds_out_of_range_are_refused_naming_the_field(app, seeds):
    with pytest.raises(gr.Error, match=r"seeds=.* is not allowed: an integer from 1 to 5"):
        app.train(["fedavg"], seeds, **TEACH)
