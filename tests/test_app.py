"""The lecture app's handlers, in-process (no server): widgets → config → library → figure.

Each handler is called as the page calls it (plain values in; figures, tables and a status line out) on
small settings (10 clients, a few rounds of the embedded digits), with a recording stand-in for
``gr.Progress`` and a fake request for the per-session Stop flag. The end-to-end tests (server,
gradio_client, browser) are in test_app_e2e.py.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from conftest import APP_SMALL

gr = pytest.importorskip("gradio")

from fedala_lab.config import algo_label
from fedala_lab.errors import ConfigError
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore
from fedala_lab.webapp import ui
from fedala_lab.webapp.settings import TRAIN_ALGOS

SMALL = APP_SMALL
DATA = {k: SMALL[k] for k in ui.DATA_FIELDS}


class Progress:
    """Records what a handler reports (gr.Progress's call signature); ``hook`` runs on each report."""

    def __init__(self, hook=None):
        self.calls: list[tuple] = []
        self.hook = hook

    def __call__(self, progress, desc=None, total=None, unit="steps"):
        self.calls.append((progress, desc))
        if self.hook:
            self.hook(progress, desc)

    @property
    def descs(self) -> list[str]:
        return [d or "" for _, d in self.calls]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return ui.LectureApp(tmp_path_factory.mktemp("app_store"))


def test_defaults_are_the_teach_preset():
    for algo in ("fedavg", "fedala", "fedprox"):
        cfg = ui.make_config(algo=algo, **{k: ui.DEFAULTS[k] for k in ui.DATA_FIELDS + ui.TRAIN_FIELDS})
        assert cfg == preset("teach", algo=algo)
    # widgets send floats: whole numbers become ints, anything else is refused by the config, naming it
    assert ui.make_config(num_clients=12.0, rounds=7.0).data.num_clients == 12
    with pytest.raises(ConfigError, match="num_clients=2.5"):
        ui.make_config(num_clients=2.5)
    with pytest.raises(ConfigError, match="beta=0.0"):
        ui.make_config(beta=0)


def test_partition_draws_who_holds_which_labels(app):
    from fedala_lab.data.federated import FederatedData

    fig, table, slider, note = app.partition(**DATA)
    data = FederatedData.from_config(ui.make_config(**DATA).data)
    counts = data.label_counts().groupby(["client", "label"])["count"].sum()
    ax = fig.axes[0]
    assert len(ax.collections[0].get_offsets()) == len(counts)  # one bubble per (client, label) held
    assert ax.get_xlabel() == "client" and ax.get_ylabel() == "label" and "Dir(β=0.1)" in ax.get_title()
    assert list(table["client"]) == list(range(10))
    assert table["train"].sum() + table["test"].sum() == 1797
    assert slider.value == 10 and "serves" in note  # the clients slider spans what this split serves
    fig, *_ = app.partition(**{**DATA, "partition": "pathological", "classes_per_client": 2}, kind="heatmap")
    assert fig.axes[0].images and len(fig.axes) == 2  # heatmap and its colorbar


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"beta": 0.0}, "beta=0.0 is not allowed"),
        ({"beta": -1.0}, "beta=-1.0 is not allowed"),
        ({"num_clients": 2000}, "num_clients=2000 is not allowed: a whole number from 2 to 100"),
        ({"num_clients": 12.5}, "num_clients=12.5 is not allowed"),
        ({"beta": None}, "beta=None is not allowed"),
        ({"partition": "pathological", "classes_per_client": 11}, "classes_per_client=11 is not allowed"),
        ({"dataset": "imagenet"}, "dataset='imagenet' is not allowed: one of mnist_mini, digits"),
        ({"dataset": "pfllib:/etc"}, "dataset='pfllib:/etc' is not allowed: one of mnist_mini"),  # never a path
        ({"partition": "x"}, "partition='x' is not allowed: one of iid"),
        ({"classes_per_client": 11}, "classes_per_client=11 is not allowed: a whole number from 1 to 10"),
    ],
)
def test_partition_bad_inputs_are_visible_errors(app, bad, message):
    with pytest.raises(gr.Error, match=message):
        app.partition(**{**DATA, **bad})


def test_train_curves_summary_progress_and_cache(app):
    rec = Progress()
    acc_fig, verdict, loss_fig, rank_fig, _, table, status = app.train(["fedavg", "fedala"], 1, **SMALL, progress=rec)
    store = app.store
    runs = [store.find(ui.make_config(algo=a, **SMALL)) for a in ("fedavg", "fedala")]
    assert all(r is not None for r in runs)
    ax = acc_fig.axes[0]
    assert [ln.get_label() for ln in ax.get_lines()] == ["FedAvg", "FedALA"]
    for line, run in zip(ax.get_lines(), runs, strict=True):  # the curves are the recorded accuracies
        np.testing.assert_allclose(line.get_ydata(), run.rounds["acc"].to_numpy())
    assert len(loss_fig.axes[0].get_lines()) == 2 and loss_fig.axes[0].get_ylabel() == "test loss"
    assert list(table["algorithm"]) == ["FedAvg", "FedALA"]
    assert list(table["run"]) == [r.path.name for r in runs]
    assert table["best acc % (pooled)"].tolist() == pytest.approx([round(r.summary()["best_acc"], 2) for r in runs])
    assert set(table["source"]) == {"computed"} and status.startswith("2 run(s) in")
    # the methods ranked by final accuracy, best on top, and a verdict in the runs' own numbers
    ticks = sorted(rank_fig.axes[0].get_yticklabels(), key=lambda t: -t.get_position()[1])  # top first
    ranked = [t.get_text() for t in ticks]
    assert ranked == sorted(["FedAvg", "FedALA"], key=lambda a: -table.set_index("algorithm").loc[
        a, "final acc % (pooled)"])
    gap = runs[1].final_acc - runs[0].final_acc
    assert "Tick *Local*" in verdict and f"FedALA − FedAvg = {gap:+.2f} points; one seed: no interval" in verdict
    # progress: every round of both runs, with its accuracy, out of the total of 10 rounds
    round_reports = [(p, d) for p, d in rec.calls if d and "round" in d and "accuracy" in d]
    assert len(round_reports) == 10
    assert round_reports[0][0] == (1, 10) and round_reports[-1][0] == (10, 10)
    assert "FedALA (2/2): round 5/5 · accuracy" in round_reports[-1][1]

    rec2 = Progress()
    *_, table2, status2 = app.train(["fedavg", "fedala"], 1, **SMALL, progress=rec2)
    assert set(table2["source"]) == {"run store"} and "(2 served from the run store: " in status2
    assert f"on {runs[0].config.platform()}" in status2  # where the served runs were computed, and when
    assert not [d for d in rec2.descs if "accuracy" in d]  # nothing simulated
    assert table2["best acc % (pooled)"].tolist() == table["best acc % (pooled)"].tolist()


def test_train_refuses_bad_settings_before_any_work(app):
    with pytest.raises(gr.Error, match=r"p=4 is not allowed: 1 &lt;= p &lt;= 3"):  # the MLP has 3 blocks
        app.train(["fedala"], 1, **{**SMALL, "p": 4})
    with pytest.raises(gr.Error, match="at least one algorithm"):
        app.train([], 1, **SMALL)
    with pytest.raises(gr.Error, match="algo='fedsgd' is not allowed"):
        app.train(["fedavg", "fedsgd"], 1, **SMALL)
    with pytest.raises(gr.Error, match="lr=0.0 is not allowed"):
        app.train(["fedavg"], 1, **{**SMALL, "lr": 0.0})


def test_stop_keeps_the_checkpoint_and_run_again_resumes(app, tmp_path):
    import threading

    from fedala_lab.engine.simulate import simulate

    settings = {**SMALL, "rounds": 8, "seed": 5}
    request = types.SimpleNamespace(session_hash="lecturer")
    answers = []

    def click_stop_in_round_3(progress, desc):  # Stop comes from another request, as the page's does
        if desc and "round 3/" in desc and not answers:
            answers.append(threading.Thread(target=lambda: answers.append(app.stop(request))))
            answers[0].start()

    acc_fig, _, _, _, _, table, status = app.train(
        ["fedala"], 1, **settings, progress=Progress(click_stop_in_round_3), request=request
    )
    answers[0].join(timeout=30)
    assert status == "Stopped after round 4 of 8 (checkpoint kept: Run again resumes)."
    assert answers[1] == status  # Stop answers, once the job has stopped, with the job's own line
    # what was done so far is shown: the partial curve, and the run's row saying where it stopped
    (line,) = acc_fig.axes[0].get_lines()
    assert line.get_label() == "FedALA (stopped at round 4)" and list(line.get_xdata()) == [1, 2, 3, 4]
    assert list(table["status"]) == ["stopped at round 4"] and list(table["rounds"]) == [4]
    cfg = ui.make_config(algo="fedala", **settings)
    assert app.store.find(cfg) is None and app.store.checkpoint_for(cfg).is_file()
    assert table["run"].iloc[0] == app.store.name_for(cfg)  # the name the Runs tab lists it by
    # the per-client plots drawn after it show the same stopped run at its last round, never an older one
    per_client, spread = app.train_clients(["fedala"], 1, **settings)
    assert [t.get_text().split(":")[0] for t in per_client.axes[0].get_legend().get_texts()] == [
        "FedALA (stopped at round 4)"]
    stopped = per_client.axes[0].collections[1].get_offsets()[:, 1]
    np.testing.assert_allclose(np.sort(stopped), np.sort(acc_at(app.store, cfg, 4)))
    assert [t.get_text() for t in spread.axes[0].get_xticklabels()] == ["FedALA (stopped at round 4)"]

    rec = Progress()
    *_, table, status = app.train(["fedala"], 1, **settings, progress=rec, request=request)
    first = next(d for d in rec.descs if "accuracy" in d)
    assert "round 5/8" in first  # resumed after the 4 rounds done before Stop
    assert not app.store.checkpoint_for(cfg).exists()
    uninterrupted = simulate(cfg, progress=False)
    np.testing.assert_array_equal(app.store.find(cfg).rounds["acc"], uninterrupted.rounds["acc"])  # bit for bit
    # Stop once the job has finished (or from a session with no job) is harmless
    assert app.stop(request) == "Nothing is running."
    assert app.stop(types.SimpleNamespace(session_hash="nobody")) == "Nothing is running."


def test_stop_of_a_sweep_says_what_was_kept(app):
    import threading

    request = types.SimpleNamespace(session_hash="sweeper")
    answers = []

    def stop_in_the_second_run(progress, desc):
        if desc and "(2/3): round 2/" in desc and not answers:
            answers.append(threading.Thread(target=lambda: answers.append(app.stop(request))))
            answers[0].start()

    *_, status = app.train(["fedavg", "fedprox", "local"], 1, **{**SMALL, "seed": 41}, request=request,
                           progress=Progress(stop_in_the_second_run))
    answers[0].join(timeout=30)
    assert status.startswith("Stopped after round 3 of 5 (FedProx (2/3); checkpoint kept")
    assert "1 of the 3 runs had finished before it: it is kept in the run store." in status and answers[1] == status


def acc_at(store, cfg, t: int) -> np.ndarray:
    """Every client's test accuracy in round ``t`` of the stopped run of ``cfg`` (its checkpoint)."""
    from fedala_lab.experiments.runs import load_stored

    c = load_stored(store, store.name_for(cfg)).clients
    return c.loc[c["round"] == t, "test_acc"].to_numpy()


def test_ala_inside_draws_fig2_and_fig3(app):
    w_fig, loss_fig, table, note = app.ala(3, 4, **SMALL)
    run = app.store.find(ui.make_config(algo="fedala", **SMALL))
    names = run.meta["ala_params"]
    images = [im for ax in w_fig.axes for im in ax.images]
    assert len(images) == len(names) == 2  # p = 1: the output layer's weight and bias
    _, w = run.ala_weights(3, 4)
    np.testing.assert_allclose(images[0].get_array(), w[names[0]])
    assert list(table["tensor"]) == names and "after round 4" in note
    assert "share of W at 0 (keeps the local value)" in table  # readable headers
    from fedala_lab.data.federated import FederatedData

    held = FederatedData.from_config(run.config.data).labels_held(3)
    assert f"holds labels {', '.join(map(str, held))}" in note
    assert len(w_fig.axes[0].patches) == len(held)  # Fig. 2 frames the output rows of the labels it holds
    assert loss_fig.axes[0].get_lines() and "epoch" in loss_fig.axes[0].get_xlabel()
    with pytest.raises(gr.Error, match="round=1 is not allowed"):
        app.ala(3, 1, **SMALL)
    with pytest.raises(gr.Error, match="client=10 is not allowed"):
        app.ala(10, 4, **SMALL)


def test_ala_inside_recomputes_when_the_client_was_not_tracked(app):
    # 24 clients: "auto" tracking keeps the first 4 clients' weights only
    settings = {**SMALL, "partition": "iid", "num_clients": 24, "rounds": 3}
    cfg = ui.make_config(algo="fedala", **settings)
    get_or_run(cfg, app.store, progress=False)
    assert 17 not in app.store.find(cfg).tracked_clients()
    w_fig, *_ = app.ala(17, 3, **settings)
    assert 17 in app.store.find(cfg).tracked_clients()
    assert "client 17" in w_fig._suptitle.get_text()


def test_train_offers_local_and_draws_each_clients_accuracy(app):
    _, verdict, *_, table, _ = app.train(["fedavg", "fedala", "local"], 1, **SMALL)
    assert list(table["algorithm"]) == ["FedAvg", "FedALA", "Local"]
    # one seed: the verdict gives the runs' numbers and the gap to Local, and says one seed cannot tell who wins
    # (tests/test_train_verdict.py checks the verdict over seeds)
    final = dict(zip(table["algorithm"], table["final acc % (pooled)"]))
    assert "Does federating pay? One seed cannot say" in verdict and "Federating pays here" not in verdict
    assert "− Local = " in verdict and "one seed: no interval" in verdict
    per_client, spread = app.train_clients(["fedavg", "fedala", "local"], 1, **SMALL)
    ax = per_client.axes[0]
    best_first = sorted(final, key=lambda a: -final[a])  # in the verdict's order
    assert [t.get_text().split(":")[0] for t in ax.get_legend().get_texts()] == best_first
    assert [len(c.get_offsets()) for c in ax.collections[1:]] == [10, 10, 10]  # one marker per client
    assert [t.get_text() for t in spread.axes[0].get_xticklabels()] == best_first
    # nothing stored for these settings yet: nothing drawn, what the page shows stays
    assert app.train_clients(["fedprox"], 1, **{**SMALL, "seed": 77}) == (gr.skip(), gr.skip())


def test_train_offers_the_papers_pfl_baselines_and_ala_on_them(app):
    offered = [v for _, v in TRAIN_ALGOS]
    for a in ("perfedavg", "fedrep", "pfedme", "ditto", "fedamp", "fedphp", "fedfomo", "apple", "partialfed"):
        assert a in offered
    # ALA on the seven the paper applies it to, not on those that download several client models
    assert {a for a in offered if a.endswith("+ala")} >= {"ditto+ala", "fedrep+ala", "partialfed+ala"}
    assert "fedfomo+ala" not in offered and "apple+ala" not in offered
    *_, table, _ = app.train(["ditto", "ditto+ala", "fedfomo"], 1, **SMALL)
    assert list(table["algorithm"]) == ["Ditto", "Ditto+ALA", "FedFomo"]
    assert (table["final acc % (pooled)"] > 10).all()  # above chance on 10 classes
    # FedFomo downloads several client models a round: more bytes down than Ditto's one model
    assert table["MB down"].iloc[2] > table["MB down"].iloc[0]


def test_stop_before_a_queued_job_starts_keeps_what_the_page_shows(app):
    request = types.SimpleNamespace(session_hash="waiting")
    app.arm("train")(request)  # the Run click: the job now waits in the queue
    assert app.stop(request) == "The job waiting in the queue will not start."
    rec = Progress()
    out = app.train(["fedavg"], 1, **{**SMALL, "seed": 31}, progress=rec, request=request)
    assert out == (*[gr.skip()] * 6, "Stopped before it started: nothing ran, the page keeps what it showed.")
    assert not [d for d in rec.descs if "round" in d]
    # the next click is a fresh job
    app.arm("train")(request)
    *_, status = app.train(["fedavg"], 1, **{**SMALL, "seed": 31}, progress=Progress(), request=request)
    assert status.startswith("1 run(s) in")


def test_trajectory_draws_fig4(app):
    fig, said, acc, check, table, note, status = app.trajectory(2, 5, 2, 7, "settings", **{**SMALL, "rounds": 8})
    from matplotlib.contour import ContourSet
    from matplotlib.quiver import Quiver

    ax = fig.axes[0]
    assert any(isinstance(c, ContourSet) for c in ax.collections)  # the loss surface
    # rounds 3–5 are shared by both runs (ALA on after round 5): drawn once, in grey; then each run's own
    assert len([c for c in ax.collections if isinstance(c, Quiver)]) == 3
    assert [t.get_text().split(" (")[0] for t in fig.legends[0].get_texts()][:3] == [
        "rounds ≤ 5: both runs", "FedAvg", "FedALA"]
    assert ax.get_xlabel().startswith("C1") and ax.get_ylabel().startswith("C2")
    # readable headers; the rounds after K only
    assert list(table["run"]) == ["FedAvg", "FedALA"]
    assert "start-of-round loss (mean after K)" in table and "client's test accuracy % (mean after K)" in table
    fedala = app.store.find(ui.make_config(algo="fedala", **{**SMALL, "rounds": 8}).replace(
        ala_after=5, snapshot_clients="2", snapshot_from=3))
    own = fedala.clients[(fedala.clients["client"] == 2) & (fedala.clients["round"] > 5)]["test_acc"].mean()
    assert table["client's test accuracy % (mean after K)"].iloc[1] == pytest.approx(own, abs=0.006)
    # the accuracy around K: all clients and the client, FedALA's lines from K on, K marked
    lines = {ln.get_label(): ln for ln in acc.axes[0].get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == {"FedAvg, all clients", "FedALA, all clients", "FedAvg, client 2", "FedALA, client 2"}
    assert list(lines["FedALA, all clients"].get_xdata()) == [5, 6, 7, 8]
    assert "ALA on after round 5" in [t.get_text() for t in acc.axes[0].texts]
    # what it shows, in words with its numbers
    assert "rounds 3–8" in note and "after round 5" in note and "Start of a round" in note
    assert f"{table['start-of-round loss (mean after K)'].iloc[1]:.2f}" in note
    # the claim above the figure, in the same numbers; the status line says where the runs came from
    start = table["start-of-round loss (mean after K)"]
    assert f"{start.iloc[1]:.2f} against {start.iloc[0]:.2f} with FedAvg" in said and "rounds 6–8" in said
    assert status.startswith("2 run(s) in")
    # plot and table side by side: each run's true end-of-round loss against the contour under its marker
    lines = {ln.get_label(): ln for ln in check.axes[0].get_lines()}
    assert set(lines) == {"FedAvg: true loss", "FedAvg: contour under its marker", "FedALA: true loss",
                          "FedALA: contour under its marker"}
    assert list(lines["FedALA: true loss"].get_xdata()) == [6, 7, 8]
    assert lines["FedALA: true loss"].get_ydata()[-1] == pytest.approx(
        table["final end-of-round loss"].iloc[1], abs=5e-5)
    assert "Reading the contours" in note and "off the plotted plane" in note
    with pytest.raises(gr.Error, match="K=8 is not allowed"):
        app.trajectory(2, 8, 2, 7, "settings", **{**SMALL, "rounds": 8})
    with pytest.raises(gr.Error, match="client=10 is not allowed: a client id from 0 to 9"):
        app.trajectory(10, 5, 2, 7, "settings", **{**SMALL, "rounds": 8})


def test_ablation_sweeps_p_and_refuses_p_beyond_the_model(app):
    fig, frame, found, status = app.ablation("p", "1,2", 1, **SMALL)
    assert list(frame["p"]) == [1, 2] and frame["ALA weights"].is_monotonic_increasing
    assert len(fig.axes) == 2 and status.startswith("2 FedALA run(s)")
    # one seed: no empty interval columns, and the sentence says what one seed cannot tell
    assert "best 95 % CI" not in frame and "one seed" in found and "Set seeds to 3" in found
    fig, frame, found, status = app.ablation("p", "1,2", 2, **SMALL)
    assert list(frame["seeds"]) == [2, 2] and "best 95 % CI" in frame and status.startswith("4 FedALA run(s)")
    runs = {p: [app.store.find(ui.make_config(algo="fedala", **{**SMALL, "p": p, "seed": k})) for k in (0, 1)]
            for p in (1, 2)}
    for p, row in frame.set_index("p").iterrows():  # mean over seeds 0 and 1 of the stored runs
        best = [r.summary()["best_acc"] for r in runs[p]]
        assert row["best acc %"] == pytest.approx(np.mean(best), abs=0.01)
        # the interval: t(0.975, 1) · s / √2, computed apart from the library (t with 1 df is Cauchy: tan(0.475π))
        half = np.tan(0.475 * np.pi) * np.std(best, ddof=1) / np.sqrt(2)
        assert row["best 95 % CI"] == (f"± {half:.2f}" if half > 0 else "—")
    # p = 2 against the page's p = 1, paired by seed, in words: the difference and what 2 seeds can tell
    diff = np.mean([b.best_acc - a.best_acc for a, b in zip(runs[1], runs[2])])
    assert "against p = 1 (the page's)" in found and f"p = 2 − p = 1 = {diff:+.2f} points" in found
    assert "over 2 seeds" in found
    # one value: nothing to compare, said so (never "0.00 points apart")
    *_, found, _ = app.ablation("p", "1", 1, **SMALL)
    assert "One value, p = 1" in found and "points apart" not in found
    # s: ALA's cost counted (images through ALA per round, all clients), which grows with s whatever the load
    _, frame, _, _ = app.ablation("s", "5,50,100", 1, **SMALL)
    images = frame["ALA images per round (counted)"].tolist()
    assert images == sorted(images) and images[0] < images[-1] and "ALA ms per round (timed)" in frame
    run = app.store.find(ui.make_config(algo="fedala", **{**SMALL, "s": 100.0}))
    assert images[-1] == sum(run.meta["train_sizes"])  # s = 100: every training image once
    with pytest.raises(gr.Error, match="p=9 is not allowed"):
        app.ablation("p", "1,9", 1, **SMALL)
    with pytest.raises(gr.Error, match="values="):
        app.ablation("s", "a lot", 1, **SMALL)
    with pytest.raises(gr.Error, match="param='eta' is not allowed"):
        app.ablation("eta", "1", 1, **SMALL)
    with pytest.raises(gr.Error, match="seeds=9 is not allowed"):
        app.ablation("p", "1", 9, **SMALL)


def test_p_sliders_offer_only_what_the_model_has():
    from fedala_lab.webapp.settings import p_max

    assert (p_max("mlp"), p_max("smallcnn"), p_max("fedavgcnn")) == (3, 4, 4)
    demo = ui.build_app(store=None)
    sliders = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) in ("p", "ala-p")]
    assert len(sliders) == 2 and all(s.maximum == 3 for s in sliders)  # the default model, the MLP
    # every table shows its headers before a first click (no "1 2 3" placeholder)
    tables = [b for b in demo.blocks.values() if isinstance(b, gr.Dataframe)]
    assert tables and all(list(t.value["headers"]) != [1, 2, 3] and t.value["headers"] for t in tables)


def test_fedlama_compares_communication_at_equal_steps(app):
    fig, table, found, status = app.fedlama(5, 2, False, "authors", 6, **SMALL)
    by = dict(zip(table["method"], table["upload % of FedAvg(τ0)"], strict=True))
    assert by["FedAvg(τ0=5)"] == 100.0 and by["FedAvg(φτ0=10)"] == pytest.approx(50.0)
    assert 50.0 <= by["FedLAMA(τ0=5, φ=2)"] <= 100.0
    assert len(fig.axes[0].get_lines()) == 3 and status.startswith("3 run(s)")
    # the bytes are on the tab: upload and download in MB, as the runs recorded them (6 rounds of their own)
    lama_cfg = ui.make_config(algo="fedlama", preset_name="teach-fedlama", tau0=5, phi=2, lama_rule="authors",
                              **{**SMALL, "rounds": 6})
    run = app.store.find(lama_cfg)
    assert run is not None and run.summary()["rounds"] == 6
    row = table.set_index("method").loc["FedLAMA(τ0=5, φ=2)"]
    assert row["upload MB"] == pytest.approx(run.summary()["bytes_up"] / 2**20, abs=0.01)
    # the run's own best (what the Runs tab lists) is beside the best on the steps all runs evaluate, named so
    assert row["best acc % (its own rounds, as on Runs)"] == pytest.approx(run.summary()["best_acc"], abs=0.006)
    assert row["best acc % (steps all evaluate)"] <= row["best acc % (its own rounds, as on Runs)"]
    assert row["download MB"] == pytest.approx(run.summary()["bytes_down"] / 2**20, abs=0.01)
    # the sentence names the rule, the share of bytes and which model is evaluated
    assert "the authors' rule" in found and f"{by['FedLAMA(τ0=5, φ=2)']:.1f} %" in found
    assert "server model" in found and "points" in found
    # the paper's rule is offered too, and is another run
    *_, found_spec, _ = app.fedlama(5, 2, False, "spec", 6, **SMALL)
    assert "the paper's rule" in found_spec
    assert app.store.find(lama_cfg.replace(lama_rule="spec")) is not None
    with pytest.raises(gr.Error, match="tau0=0 is not allowed"):
        app.fedlama(0, 2, False, "authors", 6, **SMALL)
    with pytest.raises(gr.Error, match="rule='paper' is not allowed"):
        app.fedlama(5, 2, False, "paper", 6, **SMALL)


def test_fedlama_tab_defaults_are_the_teach_fedlama_preset():
    from fedala_lab.webapp.tabs import fedlama as tab

    demo = ui.build_app(store=None)
    values = {c.elem_id: c.value for c in demo.blocks.values() if getattr(c, "elem_id", None) and hasattr(c, "value")}
    cfg = preset("teach-fedlama")
    assert (values["tau0"], values["phi"], values["lama-rounds"], values["lama-rule"]) == (
        cfg.tau0, cfg.phi, cfg.rounds, cfg.lama_rule) == (5, 2, 100, "authors")
    assert cfg.lama_eval == "server" and set(tab.RULES) == {"authors", "spec"}


def test_runs_tab_reaches_only_the_store(app, tmp_path):
    table, _, fig, details, _, said = app.runs("")
    assert len(table) >= 2 and fig is None and details == {} and said == ""
    name = table["name"].iloc[0]
    table, _, fig, details, _, _ = app.runs(name)
    algo = details["config"]["algo"]
    assert fig.axes[0].get_lines() and algo_label(algo) == table.set_index("name").loc[name, "algorithm"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for bad in ("../" + name, "/etc/passwd", str(outside), ".checkpoints", "no-such-run", ["no-such-run"]):
        with pytest.raises(gr.Error, match="is not a run name"):
            app.runs(bad)


def test_runs_tab_lists_stopped_runs_filters_and_compares(app):
    from fedala_lab.record.store import RunStore

    request = types.SimpleNamespace(session_hash="runs-tab")

    def stop_in_round_1(progress, desc):
        if desc and "round 1/" in desc:
            app.stops.stop(request.session_hash, wait=0)  # the flag only: Stop's answer is tested above

    app.train(["fedala"], 1, **{**SMALL, "seed": 9, "rounds": 6}, progress=Progress(stop_in_round_1), request=request)
    listed, *_ = app.runs("")
    stopped = listed[listed["status"].str.startswith("stopped")]
    mine = app.store.name_for(ui.make_config(algo="fedala", **{**SMALL, "seed": 9, "rounds": 6}))
    assert list(stopped.loc[stopped["name"] == mine, "status"]) == ["stopped at round 2"]
    stopped = stopped[stopped["name"] == mine]
    assert set(listed.columns) >= {"date", "algorithm", "data", "clients", "settings", "rounds", "status",
                                   "best acc %", "final acc %", "name"}
    fedala = listed[listed["algorithm"] == "FedALA"]
    assert fedala["settings"].str.contains(r"η [\d.]+, s \d+, p", regex=True).all()
    assert (fedala["data"] == "digits Dir(0.1)").any()
    # filters: algorithm, status, text
    only, *_ = app.runs("", algorithm="fedavg")
    assert set(only["algorithm"]) == {"FedAvg"}
    only, *_ = app.runs("", status="stopped")
    assert mine in list(only["name"]) and set(only["status"].str[:7]) == {"stopped"}
    only, *_ = app.runs("", text="S 80, P 2")
    assert len(only) and only["settings"].str.contains("s 80, p 2").all()
    # several runs: their curves on one plot (the stopped one's rounds so far too), a table comparing them
    pick = [fedala.loc[fedala["status"] == "complete", "name"].iloc[0], stopped["name"].iloc[0]]
    _, selection, fig, details, compared, said = app.runs(pick)
    assert selection.value == pick
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2 and "(stopped at round 2), digits Dir(0.1)" in lines[1].get_label()
    assert list(lines[1].get_xdata()) == [1, 2]
    assert list(compared["run"]) == pick and list(compared["status"]) == ["complete", "stopped at round 2"]
    assert details["name"] == pick[-1] and details["summary"]["status"] == "partial"
    assert "1 unfinished run(s) left out" in said and "one seed: no interval" in said
    assert RunStore(app.store.root).find(app.store.load(pick[0]).config) is not None  # read-only: nothing moved


def test_unexpected_errors_become_a_short_message():
    from fedala_lab.webapp.jobs import friendly

    @friendly
    def broken():
        raise ZeroDivisionError("division by zero")

    with pytest.raises(gr.Error, match="internal error \\(ZeroDivisionError: division by zero\\)"):
        broken()


def test_page_has_one_named_endpoint_per_tab_and_a_bounded_queue(tmp_path):
    demo = ui.build_app(store=tmp_path, concurrency=3)
    fns = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    assert {"partition", "train", "ala", "trajectory", "ablation", "fedlama", "runs", "stop"} <= set(fns)
    for name in ("train", "ala", "trajectory", "ablation", "fedlama"):
        assert fns[name].concurrency_limit == 3 and fns[name].concurrency_id == "simulation"
    assert isinstance(demo.lecture_app.store, RunStore) and demo.lecture_app.store.root == tmp_path


def test_no_page_event_runs_two_deferred_handlers():
    """Gradio's page, when a deferred handler ("always_last", the default for ``change``) finishes, sends its
    whole event again: two such handlers on one event restart each other while both are in flight (on a slow
    machine the clients slider's two followers did so for as long as the page was open). Every event has at
    most one; the sliders following one setting share a handler, which updates each of them."""
    demo = ui.build_app(store=None)
    deferred = {}
    for fn in demo.config["dependencies"]:
        if fn["trigger_mode"] == "always_last" and fn["queue"] is not False:
            for target in fn["targets"]:
                deferred.setdefault(tuple(target), []).append(fn["api_name"])
    assert deferred and all(len(fns) == 1 for fns in deferred.values()), deferred
    ids = {b._id: getattr(b, "elem_id", None) for b in demo.blocks.values()}
    outputs = {ids[fn["targets"][0][0]]: sorted(ids[o] for o in fn["outputs"]) for fn in demo.config["dependencies"]
               if fn["targets"] and fn["targets"][0][1] in ("change", "release") and fn["api_name"].startswith("update")}
    assert outputs == {"model": ["ala-p", "p"], "clients": ["ala-client", "traj-client"],
                       "rounds": ["ala-round", "traj-k"]}


def test_cli_and_launcher_flags(monkeypatch):
    from fedala_lab import webapp
    from fedala_lab.cli import build_parser

    args = build_parser().parse_args(["app"])
    assert args.func is webapp.cmd_app
    assert (args.host, args.port, args.share) == ("127.0.0.1", 7860, False)
    args = build_parser().parse_args(["app", "--host", "0.0.0.0", "--port", "8000", "--share"])
    assert (args.host, args.port, args.share) == ("0.0.0.0", 8000, True)
    with pytest.raises(ConfigError, match="port=0"):
        webapp.launch(port=0)
    monkeypatch.delenv("FEDALA_LAB_APP_RUNS", raising=False)
    assert str(webapp.default_store_root()) == "runs/app"
    monkeypatch.setenv("FEDALA_LAB_APP_RUNS", "/tmp/x")
    assert str(webapp.default_store_root()) == "/tmp/x"


def test_warm_up_runs_the_default_path_quietly(caplog, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: no store, no files
    with caplog.at_level("WARNING", logger="fedala_lab.webapp.ui"):
        ui.warm_up()
    assert not [r for r in caplog.records if "warm-up failed" in r.getMessage()]
    assert list(tmp_path.iterdir()) == []


def test_trajectory_follows_the_papers_protocol_by_default(app):
    *_, table, note, _ = app.trajectory(2, 5, 2, 7, "paper", **{**SMALL, "rounds": 8})
    assert "pathological, 2 labels per client" in note.split(":")[0]
    assert list(table["run"]) == ["FedAvg", "FedALA"]
    with pytest.raises(gr.Error, match="setting='nope'"):
        app.trajectory(2, 5, 2, 7, "nope", **{**SMALL, "rounds": 8})


def test_recorded_figures_are_offered_with_their_findings_or_how_to_make_them(tmp_path):
    import json

    from fedala_lab.reproduce.recorded import COMMAND, recorded_figure

    path, caption = recorded_figure("fig4", tmp_path)
    assert path is None and COMMAND in caption
    (tmp_path / "index.json").write_text(json.dumps({"figures": {"fig4": {
        "paper": "Fig. 4", "title": "trajectories", "files": ["fig4_trajectory.pdf", "fig4_trajectory.png"],
        "only_command": f"{COMMAND} --only fig4", "findings": ["FedALA ends lower"]}}}))
    path, caption = recorded_figure("fig4", tmp_path)
    assert path is None and "missing" in caption  # listed but not there
    (tmp_path / "fig4_trajectory.png").write_bytes(b"\x89PNG")
    path, caption = recorded_figure("fig4", tmp_path)
    assert path == str(tmp_path / "fig4_trajectory.png")
    assert caption.startswith("**Recorded, not live**") and "- FedALA ends lower" in caption
    assert recorded_figure("fig9", tmp_path)[0] is None


def test_data_problems_are_told_in_the_apps_terms(app, tmp_path, monkeypatch):
    # a Dirichlet split the 3,000-image subset cannot give 50 clients: moved to what it serves, said in the
    # app's terms (clients, β, images), not the library's least_samples
    *_, slider, note = app.partition(**{**DATA, "dataset": "mnist_mini", "partition": "dirichlet",
                                        "num_clients": 50, "beta": 0.1})
    assert slider.value < 50 and f"clients N 50 → {slider.value}" in note
    assert f"Dir(0.1) cannot give {slider.value + 1} clients at least" in note and "of the 3,000 images" in note
    # files not on this machine: the Download button, never a fetch by itself
    monkeypatch.setenv("FEDALA_LAB_DATA", str(tmp_path))
    with pytest.raises(gr.Error, match="fashion_mnist is not on this machine.*Download"):
        app.partition(**{**DATA, "dataset": "fashion_mnist"})
    assert list(tmp_path.iterdir()) == []
    assert "nothing to download" in app.download("mnist_mini")


def test_fedprox_scenario_sets_stragglers_and_both_methods_train(app):
    from fedala_lab.webapp.settings import SCENARIO_FIELDS, scenario_values

    values, algos = scenario_values("fedprox")
    got = dict(zip(SCENARIO_FIELDS, values))
    assert (got["partition"], got["classes_per_client"], got["local_epochs"], got["stragglers"], got["mu"]) == \
        ("pathological", 2, 5, 0.9, 1.0) and algos == ["fedavg", "fedprox"]
    assert dict(zip(SCENARIO_FIELDS, scenario_values("teach")[0]))["stragglers"] == 0.0
    small = {**SMALL, "partition": "pathological", "local_epochs": 2, "stragglers": 0.5, "mu": 0.1}
    *_, table, _ = app.train(["fedavg", "fedprox"], 1, **small)
    assert list(table["algorithm"]) == ["FedAvg", "FedProx"] and table["best acc % (pooled)"].notna().all()
    runs = [app.store.find(ui.make_config(algo=a, **small)) for a in ("fedavg", "fedprox")]
    assert all((r.rounds["stragglers"] > 0).all() for r in runs)
    assert (runs[0].rounds["dropped"] > 0).all() and (runs[1].rounds["dropped"] == 0).all()
    with pytest.raises(gr.Error, match="stragglers=1.5 is not allowed"):
        app.train(["fedprox"], 1, **{**small, "stragglers": 1.5})
    # the Runs tab tells a run with stragglers (and its seed) from a normal one
    listing, *_ = app.runs("")
    rows = listing[listing["name"].isin([r.path.name for r in runs])].set_index("algorithm")
    assert rows.loc["FedAvg", "settings"].endswith("50 % stragglers dropped")
    assert "50 % stragglers kept" in rows.loc["FedProx", "settings"]
    assert (rows["seed"] == SMALL["seed"]).all()


def test_scenario_says_what_it_changed_for_every_tab():
    from fedala_lab.webapp.settings import SCENARIO_FIELDS, scenario_notice, scenario_values

    teach, _ = scenario_values("teach")
    note = scenario_notice("fedprox", teach)
    assert "every tab" in note and "partition Dirichlet → **pathological**" in note
    assert "stragglers 0 → **0.9**" in note and "local epochs E 1 → **5**" in note and "go back" in note
    assert scenario_notice("teach", teach) == ""  # nothing changed: nothing to say
    back = scenario_notice("teach", scenario_values("fedprox")[0])
    assert "partition pathological → **Dirichlet**" in back and "go back" not in back
    # the notice stands above the tabs, and choosing a scenario writes it
    demo = ui.build_app(store=None)
    notice = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "scenario-notice")
    scenario = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "scenario")
    deps = [d for d in demo.config["dependencies"] if scenario._id in [t[0] for t in d["targets"]]]
    assert any(notice._id in d["outputs"] for d in deps)
    assert len(SCENARIO_FIELDS) == 6


def test_heterogeneity_ladder_runs_fedavg_on_every_split_over_seeds(app):
    from fedala_lab.analysis.tables import SEED_DIFF
    from fedala_lab.webapp.tabs.data import LADDER

    small = {**SMALL, "rounds": 3}
    fig, text, said, status = app.ladder(2, **small)
    assert list(text["split"]) == list(LADDER) and (text["seeds"] == 2).all()
    assert text.loc[0, SEED_DIFF] == "reference"  # IID, which the others are paired with
    # each split against IID in words, with the paired difference of the stored runs' best accuracy
    iid = [app.store.find(ui.make_config(algo="fedavg", **{**small, **LADDER["IID"], "seed": k})) for k in (0, 1)]
    for label, split in list(LADDER.items())[1:]:
        runs = [app.store.find(ui.make_config(algo="fedavg", **{**small, **split, "seed": k})) for k in (0, 1)]
        diff = np.mean([r.best_acc - i.best_acc for r, i in zip(runs, iid)])
        assert f"- {label} − IID = {diff:+.1f} points" in said
    assert said.count(" over 2 seeds") == len(LADDER) - 1 and "Holm-adjusted over" in said
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == len(LADDER)
    for split in LADDER.values():  # every split's runs are in the store, FedAvg, seeds 0 and 1
        for seed in (0, 1):
            assert app.store.find(ui.make_config(algo="fedavg", **{**small, **split, "seed": seed})) is not None
    assert "run(s)" in status
    with pytest.raises(gr.Error, match="seeds=9 is not allowed"):
        app.ladder(9, **small)


def test_ablation_stopped_after_one_value_says_so(app):
    import threading

    request = types.SimpleNamespace(session_hash="ablation-stop")
    answers = []

    def stop_in_the_second_value(progress, desc):
        if desc and "p=3, seed 0" in desc and "round 2/" in desc and not answers:
            answers.append(threading.Thread(target=lambda: answers.append(app.stop(request))))
            answers[0].start()

    _, frame, found, status = app.ablation("p", "1,3", 1, **{**SMALL, "rounds": 4}, request=request,
                                           progress=Progress(stop_in_the_second_value))
    answers[0].join(timeout=30)
    assert list(frame["p"]) == [1]
    assert "Only p = 1 finished with all its seeds before Stop" in found and "points apart" not in found
    assert status.startswith("Stopped after round 3 of 4") and "Drawn: the 1 value(s)" in status
    assert answers[1] == status


def test_clients_slider_offers_only_what_the_split_serves(app):
    from fedala_lab.webapp.split import served

    # digits, Dir(0.1): the partition scan finds the largest N it serves; every N offered draws
    ok = served(ui.make_config(**DATA).data)
    assert ok.lo == 2 and 10 < ok.hi < 100 and ok.ns == tuple(range(2, ok.hi + 1))
    for n in (ok.hi, ok.hi // 2):
        _, table, slider, note = app.partition(**{**DATA, "num_clients": n})
        assert len(table) == n and slider.value == n and (slider.minimum, slider.maximum) == (ok.lo, ok.hi)
    # a number it cannot serve is moved to the nearest it can, and the line says why: never an error
    _, table, slider, note = app.partition(**{**DATA, "num_clients": ok.hi + 1})
    assert len(table) == ok.hi and slider.value == ok.hi
    assert f"clients N {ok.hi + 1} → {ok.hi}" in note and f"cannot give {ok.hi + 1} clients" in note
    # pathological, 2 labels of 10 per client: PFLlib's rule serves 5, 9, 10, 13… but not 6
    _, table, slider, note = app.partition(**{**DATA, "partition": "pathological", "num_clients": 6})
    assert len(table) == 5 and "clients N 6 → 5" in note and "leaves a label without a client" in note
    # a job sent a number the split cannot serve is refused at once, naming the field and the numbers
    with pytest.raises(gr.Error, match=rf"num_clients={ok.hi + 1} is not allowed: a number of clients this split "
                                       rf"serves: 2–{ok.hi}"):
        app.train(["fedavg"], 1, **{**SMALL, "num_clients": ok.hi + 1})


def test_a_job_on_a_pfllib_folder_runs(app, tmp_path):
    """Data that comes partitioned (a PFLlib folder) has its clients given, no split to check: its job runs."""
    from test_pfllib import _make_partition

    from fedala_lab.webapp.jobs import Job

    _make_partition(tmp_path / "part", [(12, 4), (10, 3)])
    cfg = ui.make_config(algo="fedavg", dataset=f"pfllib:{tmp_path / 'part'}", num_clients=2, rounds=1,
                         model="mlp")
    got = app.fetch(Job(Progress()), [cfg],
                    lambda store, callback: [get_or_run(cfg, store, progress=False, callback=callback)])
    assert [r.summary()["rounds"] for r in got.runs] == [1] and got.status == ""


def test_hundred_clients_at_dir_001_are_refused_fast(app, monkeypatch):
    """Refused from the split's scan (short probes, cached), never after a split's whole budget of draws (it
    took 11 s: 100,000 Dirichlet draws before the refusal)."""
    from fedala_lab.data import federated
    from fedala_lab.webapp import split

    tries = []
    real = federated.split_indices

    def counted(data, y, *args, **kwargs):
        tries.append(data.max_tries)
        return real(data, y, *args, **kwargs)

    monkeypatch.setattr(federated, "split_indices", counted)
    monkeypatch.setattr(split, "_SCANS", type(split._SCANS)())  # scanned afresh here
    with pytest.raises(gr.Error, match=r"num_clients=100 is not allowed: a number of clients this split serves: "
                                       r"2–\d+ \(Dir\(0.01\) cannot give \d+ clients"):
        app.train(["fedavg"], 1, **{**SMALL, "dataset": "mnist_mini", "num_clients": 100, "beta": 0.01})
    assert tries and max(tries) <= split.PROBE_TRIES < 100_000, tries


def test_refused_twice_in_a_row_shows_one_message(app):
    request = types.SimpleNamespace(session_hash="enter-then-blur")
    bad = {**DATA, "beta": 0.0}
    with pytest.raises(gr.Error, match="beta=0.0 is not allowed") as first:
        app.partition(**bad, request=request)
    with pytest.raises(gr.Error, match="beta=0.0 is not allowed") as again:  # β's box losing focus
        app.partition(**bad, request=request)
    assert first.value.visible and not again.value.visible
    with pytest.raises(gr.Error) as other:  # another session, or another value: shown
        app.partition(**bad, request=types.SimpleNamespace(session_hash="someone-else"))
    assert other.value.visible


def test_out_of_range_seeds_are_refused_and_the_runs_tab_survives_one(app, tmp_path):
    from fedala_lab.webapp.settings import SEED_MAX

    demo = ui.build_app(store=tmp_path)
    seed = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "seed")
    with pytest.raises(gr.Error, match=rf"seed=18446744073709551616 is not allowed: a whole number from 0 to {SEED_MAX}"):
        seed.preprocess(2**64)
    assert seed.preprocess(SEED_MAX) == SEED_MAX
    # a run stored by a script with such a seed: listed (its seed as text), compared, never an error
    own = ui.LectureApp(tmp_path)
    get_or_run(ui.make_config(algo="fedavg", **{**SMALL, "rounds": 2, "seed": 2**64}), own.store, progress=False)
    listing, *_ = own.runs("")
    assert list(listing["seed"]) == [str(2**64)]
    *_, details, compared, _ = own.runs(listing["name"].iloc[0])
    assert details["config"]["seed"] == str(2**64) and list(compared["seed"]) == [str(2**64)]


def test_fedlama_rule_is_checked_by_the_page_naming_the_field(tmp_path):
    demo = ui.build_app(store=tmp_path)
    rule = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "lama-rule")
    with pytest.raises(gr.Error, match=r"rule='../x' is not allowed: one of authors, spec"):
        rule.preprocess("../x")
    assert rule.preprocess("spec") == "spec"


def test_runs_picker_and_legend_tell_two_fedala_runs_apart(app):
    from fedala_lab.webapp.tabs.runs import distinct

    a = ui.make_config(algo="fedala", **SMALL)
    b = a.replace(eta=0.5)
    assert distinct([a, b], ["x-1", "x-2"]) == ["FedALA, digits Dir(0.1), eta 1.0", "FedALA, digits Dir(0.1), eta 0.5"]
    for cfg in (a, b):
        get_or_run(cfg, app.store, progress=False)
    names = [app.store.find(c).path.name for c in (a, b)]
    _, selection, fig, _, _, _ = app.runs(names)
    labels = {v: lab for lab, v in selection.choices}
    assert labels[names[0]] != labels[names[1]] and "eta 0.5" in labels[names[1]]
    legend = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert len(set(legend)) == 2 and legend[1].endswith("eta 0.5")


def test_curves_that_need_a_word_get_it_in_their_own_numbers(app):
    *_, notes, _, _ = app.train(["fedavg", "pfedme", "perfedavg"], 1, **SMALL)
    runs = {a: app.store.find(ui.make_config(algo=a, **SMALL)) for a in ("pfedme", "perfedavg")}
    first = {a: r.rounds["acc"].iloc[0] for a, r in runs.items()}
    assert "*pFedMe* is scored on each client's personal model" in notes
    assert f"({first['pfedme']:.1f} %)" in notes and f"({runs['pfedme'].rounds['acc'].iloc[1]:.1f} %)" in notes
    assert "*Per-FedAvg* is scored on the global model after one adaptation step" in notes
    assert f"({first['perfedavg']:.1f} %)" in notes and "FedAvg" not in notes.split("*")[0]


def test_many_methods_draw_the_best_few_in_colour(app):
    from fedala_lab.webapp.tabs.train import HIGHLIGHT

    algos = ["fedavg", "local", "fedala", "fedprox", "ditto", "fedrep", "partialfed"]
    acc, *_, table, _ = app.train(algos, 1, **SMALL)
    final = table.set_index("algorithm")["final acc % (pooled)"]
    coloured = set(final.sort_values(ascending=False).index[:HIGHLIGHT]) | {"FedAvg", "Local"}
    lines = acc.axes[0].get_lines()
    grey = {ln.get_label() for ln in lines if ln.get_color() == "0.72"}
    assert len(grey) == len(algos) - len(coloured)
    legend = [t.get_text() for t in acc.axes[0].get_legend().get_texts()]
    assert set(legend) == coloured | {f"{len(grey)} others (grey)"}


def test_every_method_offered_has_a_colour_of_its_own():
    """Two methods in one colour read as one curve: APPLE's dips were taken for pFedMe's (both were magenta).
    A method's +ALA version keeps its colour (with its own line style) by design."""
    from fedala_lab.figures.style import colour_for

    methods = [a for _, a in TRAIN_ALGOS if "+ala" not in a]
    colours = {a: colour_for(a) for a in methods}
    assert len(set(colours.values())) == len(methods), colours


def test_runs_tab_says_over_seeds_whether_a_gap_is_noise(app):
    """Runs alike but for their seed are one group: each group against FedAvg's, paired by seed, in words."""
    from scipy import stats

    cfgs = {a: [ui.make_config(algo=a, **{**SMALL, "rounds": 3, "seed": k}) for k in (0, 1, 2)]
            for a in ("fedavg", "fedala")}
    runs = {a: [get_or_run(c, app.store, progress=False) for c in cs] for a, cs in cfgs.items()}
    names = [r.path.name for a in ("fedala", "fedavg") for r in runs[a]]  # FedALA picked first: FedAvg is still the reference
    *_, said = app.runs(names)
    d = np.array([a.final_acc - b.final_acc for a, b in zip(runs["fedala"], runs["fedavg"])])
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert f"- FedALA − FedAvg = {d.mean():+.1f} points, 95 % CI ±{half:.1f}, p " in said
    assert "over 3 seeds (paired t)" in said and "Holm" not in said  # one comparison: nothing to adjust
    gains = np.concatenate([
        (a.clients.query(f"round == {a.acc.index[-1]}").set_index("client")["test_acc"]
         - b.clients.query(f"round == {b.acc.index[-1]}").set_index("client")["test_acc"]).to_numpy()
        for a, b in zip(runs["fedala"], runs["fedavg"])])
    assert (f"FedALA vs FedAvg, per client (final accuracy, 3 seeds): {(gains > 0).sum()} of {len(gains)} "
            f"client-seed pairs gain, {(gains < 0).sum()} lose") in said
    # one seed of each: no interval, said so
    *_, said = app.runs([runs["fedavg"][0].path.name, runs["fedala"][0].path.name])
    assert "FedALA − FedAvg = " in said and "one seed: no interval" in said
    # one group: its mean and interval
    *_, said = app.runs([r.path.name for r in runs["fedala"]])
    assert "FedALA: " in said and "95 % CI" in said and "over 3 seeds" in said


def test_importing_the_app_leaves_open_progress_bars_working():
    """Gradio patches tqdm's class process-wide when a Progress(track_tqdm=True) is made. Made at import, that
    patch broke every bar already open: closing one (or collecting it) raised in ``__del__``, and a traceback
    printed during a collection inside ``ast.parse`` made CPython 3.11 fail with "AST constructor recursion
    depth mismatch" in an unrelated test. The download button still asks Gradio to track torchvision's bars."""
    import subprocess
    import sys

    code = (
        "import gc, tqdm\n"
        "from tqdm.auto import tqdm as bar\n"
        "b = bar(total=2, disable=True)\n"
        "import fedala_lab.webapp.tabs.data as data\n"
        "assert not hasattr(tqdm.tqdm, '__init__orig__'), 'tqdm patched at import'\n"
        "assert data.DOWNLOAD_PROGRESS.track_tqdm is True\n"
        "b.close(); del b; gc.collect()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr
