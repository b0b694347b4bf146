"""Trajectory: paper Fig. 4, one client's local models on its loss surface, FedAvg vs FedALA with ALA
switched on after round K (the protocol of experiments.plans.fig4_configs).

By default the tab follows the paper's protocol rather than the data settings above: the pathological split
(2 labels per client), where FedAvg's global model fits a client worst and ALA has most to fix; a client
with a few hundred training images; K after FedAvg has levelled off (round 40 of 50 on the defaults). On the
shared Dir(0.1) settings the two end at about the same local loss, which says little about ALA; the
"settings above" choice shows that too. Below the live figure: the recorded one on real MNIST."""

from __future__ import annotations

import time

import gradio as gr
import numpy as np

from ...analysis.tables import data_title
from ...errors import ConfigError
from ...experiments.plans import fig4_configs, fig4_window
from ...experiments.runs import fig4_runs
from ..jobs import finished_status, job
from ..recorded import recorded_panel
from ..settings import DEFAULTS, make_config, whole
from ..widgets import Radio, plot, run_stop, table, whole_slider
from . import Panel

PAPER_LABELS = 2  # labels per client of the paper's pathological MNIST
SETTINGS = {"paper": "the paper's protocol: pathological split, 2 labels per client",
            "settings": "the data settings above"}
# the tab's own defaults: client 7 holds ≈ 300 training images in the default pathological split (client 4, the
# paper's, 45); K after FedAvg has levelled off (10 rounds before the end)
DEFAULT = {"client": 7, "K": DEFAULTS["rounds"] - 10, "before": 5, "grid": 21, "setting": "paper"}


# the table's columns: summary column → header
COLUMNS = {"label": "run", "mean_start_loss": "start-of-round loss (mean after K)",
           "mean_end_loss": "end-of-round loss (mean after K)", "final_end_loss": "final end-of-round loss",
           "client_acc": "client's test accuracy % (mean after K)", "pooled_acc": "all clients' accuracy % (mean after K)",
           "max_residual": "largest distance off the plane", "path_length": "path length in the plane"}


@job
def trajectory(app, client, K, before, grid, setting, settings, job):
    """Fig. 4: ``client``'s local models on its loss surface, FedAvg vs FedALA with ALA switched on after
    round K, from round K − ``before`` to the last round of the current settings; the claim above the figure;
    the accuracy per round around K; a table of the rounds after K, what they show (notes) and the status line.
    ``setting``: "paper" (the pathological split, 2 labels per client, whatever the data settings say) or
    "settings"."""
    from ...analysis.curves import mean_after, switch_curves
    from ...figures.curves import AccuracyCurveDisplay
    from ...figures.projection import ProjectionCheckDisplay
    from ...figures.trajectory import TrajectoryDisplay

    if setting not in SETTINGS:
        raise ConfigError("setting", setting, " or ".join(map(repr, SETTINGS)))
    cfg = make_config(algo="fedala", **settings)
    if setting == "paper":
        cfg = cfg.replace(partition="pathological", classes_per_client=PAPER_LABELS)
    client, K, before, grid = whole(client), whole(K), whole(before), whole(grid)
    window = fig4_window(K, before, cfg.rounds)
    cfgs = fig4_configs(cfg, K=K, window=window, client=client)  # checked before any work
    tic = time.perf_counter()
    got = app.fetch(job, cfgs, lambda store, callback: fig4_runs(cfg, K=K, window=window, client=client,
                                                                 store=store, callback=callback),
                    labels=["FedAvg", f"FedALA (ALA on after round {K})"])
    if got.status:  # stopped: a surface needs both runs' every round of the window
        return *[gr.skip()] * 6, got.status + " The surface is drawn once both runs are."
    total = sum(c.rounds for c in cfgs)
    job.progress((total, total), desc=f"loss surface: {grid}×{grid} points", unit="rounds")
    fedavg, fedala = got.runs
    disp = TrajectoryDisplay.from_runs(fedavg, fedala, client, grid=grid, rounds=window)
    acc = AccuracyCurveDisplay(switch_curves(fedavg, fedala, client, K), marks={K + 0.5: f"ALA on after round {K}"},
                               title=f"Test accuracy: all clients and client {client}").plot()
    frame = disp.landscape_.summary(after=K)
    frame["client_acc"] = [mean_after(r, K, client) for r in got.runs]
    frame["pooled_acc"] = [mean_after(r, K) for r in got.runs]
    images = int(fedavg.meta["train_sizes"][client])
    shown = frame[list(COLUMNS)].round({"mean_start_loss": 4, "mean_end_loss": 4, "final_end_loss": 4, "client_acc": 2,
                                        "pooled_acc": 2, "max_residual": 3, "path_length": 2})
    check = ProjectionCheckDisplay(disp.landscape_, after=K if K < window[1] else None)
    moved = {t.label: travelled(t, K) for t in disp.landscape_.trajectories}
    frame["moved"] = [moved.get(label, float("nan")) for label in frame["label"]]
    return (disp.figure_, claim(frame, client, K, window), acc.figure_, check.plot().figure_,
            shown.rename(columns=COLUMNS), explain(frame, cfg, client, images, K, window) + " " + off_plane(check.frame_, K),
            finished_status(got, time.perf_counter() - tic))


def travelled(t, K: int) -> float:
    """How far local training moves the client's model in a round (start to end, in the plane), on average over
    the rounds after K."""
    keep = t.rounds > K
    return float(np.linalg.norm(t.end_xy[keep] - t.start_xy[keep], axis=1).mean()) if keep.any() else float("nan")


def claim(frame, client: int, K: int, window) -> str:
    """The figure's point in one sentence of this run pair's numbers, for above the figure."""
    if K >= window[1]:
        return f"ALA switches on after round {K}, the last round shown: move K back to compare the methods."
    avg, ala = (frame.iloc[i] for i in (0, 1))
    rounds = f"rounds {K + 1}–{window[1]}"
    if ala.mean_start_loss < avg.mean_start_loss:
        ratio = avg.mean_start_loss / max(ala.mean_start_loss, 1e-12)
        return (f"**With ALA, client {client} starts its rounds {ratio:.1f}× lower on its own loss** (mean "
                f"{ala.mean_start_loss:.2f} against {avg.mean_start_loss:.2f} with FedAvg, {rounds}) and is evaluated "
                f"at {ala.client_acc:.1f} % against {avg.client_acc:.1f} %: ALA keeps what the client's model learned "
                "instead of restarting from the global model.")
    return (f"**Here ALA does not start client {client}'s rounds lower** ({ala.mean_start_loss:.2f} against "
            f"{avg.mean_start_loss:.2f} with FedAvg, {rounds}); its accuracy {ala.client_acc:.1f} % against "
            f"{avg.client_acc:.1f} %.")


def off_plane(check, K: int) -> str:
    """How far the contours under the end-of-round markers (after K) are from the models' true losses."""
    end = check[(check["phase"] == "end") & (check["round"] > K)]
    if end.empty:
        return ""
    gap = (end["plane_loss"] - end["true_loss"]).abs()
    worst = end.loc[gap.idxmax()]
    return (f"**Reading the contours:** the models lie off the plotted plane (up to {end['residual'].max():.2g} in "
            f"parameter units), so the contour under an end-of-round marker differs from the model's true loss by "
            f"up to {gap.max():.2g} ({worst['label']}, round {int(worst['round'])}: contour {worst['plane_loss']:.3g}, "
            f"true {worst['true_loss']:.3g}). The lower plot sets the two side by side; compare losses in the "
            "table, positions on the plot.")


def explain(frame, cfg, client: int, images: int, K: int, window) -> str:
    """What the figure and the table show, in the measured numbers of this run pair."""
    avg, ala = (frame.iloc[i] for i in (0, 1))
    head = (f"{data_title(cfg.data)}: client {client} ({images} training images), rounds {window[0]}–{window[1]}; "
            f"ALA switched on after round {K} (grey: the rounds both runs share).")
    if K >= window[1]:
        return head
    s_avg, s_ala, e_avg, e_ala = avg.mean_start_loss, ala.mean_start_loss, avg.mean_end_loss, ala.mean_end_loss
    start = (f"**Start of a round** (red circles): {s_ala:.2f} with ALA against {s_avg:.2f} with FedAvg (the claim "
             "above the figure).")
    epochs = f"{cfg.local_epochs} epoch{'s' if cfg.local_epochs != 1 else ''}"
    if e_ala > e_avg:  # higher with ALA: why, in the rounds' own numbers
        d_avg, d_ala = s_avg - e_avg, s_ala - e_ala
        end = (f" **End of a round** (green squares): {e_ala:.3f} with ALA against {e_avg:.3f} with FedAvg, higher "
               f"with ALA. Local training lowers FedAvg's loss by {d_avg:.3f} a round (moving its model "
               f"{avg.moved:.2f} in the plane) and ALA's by {d_ala:.3f} ({ala.moved:.2f})")
        if d_ala < d_avg and ala.moved < avg.moved:
            end += (f": ALA's start already fits the client, its gradients are small, and {epochs} of SGD move it "
                    "less far, while FedAvg's model goes deeper into the client's own training images each round, a "
                    "fit that the next round's average replaces")
        end += (". A lower loss at the end of a round is not the goal: the client is evaluated with the model it "
                "holds at the start of a round" + (", where ALA is ahead (the accuracy below)." if
                                                     ala.client_acc > avg.client_acc else " (the accuracy below)."))
    elif max(e_avg, e_ala) <= 1.5 * min(e_avg, e_ala):
        end = (f" **End of a round** (green squares): {e_ala:.3f} with ALA against {e_avg:.3f}, about the same: "
               f"{epochs} of SGD on the client's {images} images fit them from either start, so the end points do "
               "not tell the methods apart.")
    else:
        end = f" **End of a round** (green squares): {e_ala:.3f} with ALA against {e_avg:.3f}."
    acc = (f" **Accuracy** (each model before local training, as every round is evaluated): client {client} "
           f"{ala.client_acc:.1f} % with ALA against {avg.client_acc:.1f} %, all clients {ala.pooled_acc:.1f} % "
           f"against {avg.pooled_acc:.1f} % (mean over rounds {K + 1}–{window[1]}): the jump at K in the second plot.")
    return f"{head}\n\n{start}{end}{acc}"


def build(app, settings) -> Panel:
    d, own = DEFAULTS, DEFAULT
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=340):
            setting = Radio([(v, k) for k, v in SETTINGS.items()], value=own["setting"], label="data",
                            elem_id="traj-setting", field="setting")
            client = whole_slider(0, d["num_clients"] - 1, own["client"], "client", "traj-client", field="client")
            K = whole_slider(0, d["rounds"] - 1, own["K"], "ALA activation round K (ALA on after it)",
                             "traj-k", field="K")
            with gr.Row():
                before = whole_slider(0, 20, own["before"], "rounds shown before K", "traj-before",
                                      field="rounds before K")
                grid = whole_slider(5, 41, own["grid"], "surface grid (points per axis)", "traj-grid", step=2,
                                    field="grid")
            run, stop, status = run_stop("traj")
        with gr.Column(scale=7, min_width=480):
            said = gr.Markdown(elem_id="traj-claim", elem_classes=["note"])
            traj_plot = plot(label="trajectories on the loss surface", elem_id="traj-plot",
                             elem_classes=["main-plot", "below-note"])
    gr.Markdown("Paper Fig. 4: one client's local models on its loss surface, FedAvg (black) vs FedALA (blue), FedALA "
                "being FedAvg until round K and using ALA after it (shared rounds grey). Red circles: start of a "
                "round, green squares: its end.", elem_classes=["note"])
    notes = gr.Markdown(elem_id="traj-notes", elem_classes=["note"])
    with gr.Row():
        acc_plot = plot(label="accuracy around K", elem_id="traj-acc-plot")
        check_plot = plot(label="true loss against the surface's", elem_id="traj-check-plot")
    losses = table(label="rounds after K", elem_id="traj-table", columns=COLUMNS.values())
    settings.followers.add(settings["num_clients"], client, lambda n: n - 1, event="change")
    settings.followers.add(settings["rounds"], K, lambda t: t - 1)
    recorded_panel("fig4", "The paper's setting, recorded: Fig. 4 on real MNIST pathological with the paper's CNN")
    return Panel("trajectory", run, stop, status, [client, K, before, grid, setting],
                 [traj_plot, said, acc_plot, check_plot, losses, notes])
