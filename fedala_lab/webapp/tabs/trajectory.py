"""Trajectory: paper Fig. 4, one client's local models on its loss surface, FedAvg vs FedALA with ALA
switched on after round K (the protocol of experiments.plans.fig4_configs).

By default the tab follows the paper's protocol rather than the data settings above: the pathological split
(2 labels per client), where FedAvg's global model fits a client worst and ALA has most to fix; a client
with a few hundred training images; K after FedAvg has levelled off (round 40 of 50 on the defaults). On the
shared Dir(0.1) settings the two end at about the same local loss, which says little about ALA; the
"settings above" choice shows that too. Below the live figure: the recorded one on real MNIST."""

from __future__ import annotations

import gradio as gr

from ...analysis.tables import data_title
from ...errors import ConfigError
from ...experiments.plans import fig4_configs, fig4_window
from ...experiments.runs import fig4_runs
from ..jobs import job
from ..recorded import recorded_panel
from ..settings import DEFAULTS, make_config, whole
from ..widgets import Radio, follow, plot, run_stop, table, whole_slider
from . import Panel

PAPER_LABELS = 2  # labels per client of the paper's pathological MNIST
SETTINGS = {"paper": "the paper's protocol: pathological split, 2 labels per client",
            "settings": "the data settings above"}


@job
def trajectory(app, client, K, before, grid, setting, settings, job):
    """Fig. 4: ``client``'s local models on its loss surface, FedAvg vs FedALA with ALA switched on after
    round K, from round K − ``before`` to the last round of the current settings. ``setting``: "paper"
    (the pathological split, 2 labels per client, whatever the data settings say) or "settings"."""
    from ...figures.trajectory import TrajectoryDisplay

    if setting not in SETTINGS:
        raise ConfigError("setting", setting, " or ".join(map(repr, SETTINGS)))
    cfg = make_config(algo="fedala", **settings)
    if setting == "paper":
        cfg = cfg.replace(partition="pathological", classes_per_client=PAPER_LABELS)
    client, K, before, grid = whole(client), whole(K), whole(before), whole(grid)
    window = fig4_window(K, before, cfg.rounds)
    cfgs = fig4_configs(cfg, K=K, window=window, client=client)  # checked before any work
    got = app.fetch(job, cfgs, lambda store, callback: fig4_runs(cfg, K=K, window=window, client=client,
                                                                 store=store, callback=callback),
                    labels=["FedAvg", f"FedALA (ALA on after round {K})"])
    if got.status:  # stopped: a surface needs both runs' every round of the window
        return gr.skip(), gr.skip(), got.status
    total = sum(c.rounds for c in cfgs)
    job.progress((total, total), desc=f"loss surface: {grid}×{grid} points", unit="rounds")
    disp = TrajectoryDisplay.from_runs(*got.runs, client, grid=grid, rounds=window)
    note = (f"{data_title(cfg.data)}: client {client} ({int(got.runs[0].meta['train_sizes'][client])} training "
            f"images), rounds {window[0]}–{window[1]}; ALA switched on after round {K}. Markers are "
            "projections: the table gives each run's true final local loss and how far its models lie off the "
            "plane.")
    return disp.figure_, disp.landscape_.summary().round(4), note


def build(app, settings) -> Panel:
    gr.Markdown("Paper Fig. 4: one client's local models on its loss surface, FedAvg (black) vs FedALA (blue), "
                "where FedALA is FedAvg until round K and uses ALA afterwards. Red circles: start of a round, "
                "green squares: its end. By default on the paper's protocol: the pathological split (2 labels "
                "per client), a client with a few hundred images, K once FedAvg has levelled off.")
    d = DEFAULTS
    setting = Radio([(v, k) for k, v in SETTINGS.items()], value="paper", label="data", elem_id="traj-setting",
                    field="setting")
    with gr.Row():
        # client 7 holds ≈ 300 training images in the default pathological split (client 4, the paper's, 45)
        client = whole_slider(0, d["num_clients"] - 1, 7, "client", "traj-client", field="client")
        K = whole_slider(0, d["rounds"] - 1, d["rounds"] - 10, "ALA activation round K (ALA on after it)", "traj-k",
                         field="K")
        before = whole_slider(0, 20, 5, "rounds shown before K", "traj-before", field="rounds before K")
        grid = whole_slider(5, 41, 21, "surface grid (points per axis)", "traj-grid", step=2, field="grid")
    run, stop, status = run_stop("traj")
    traj_plot = plot(label="trajectories on the loss surface", elem_id="traj-plot")
    losses = table(label="true local losses", elem_id="traj-table")
    follow(settings["num_clients"], client, "client", lambda n: n - 1)
    follow(settings["rounds"], K, "K", lambda t: t - 1)
    recorded_panel("fig4", "The paper's setting, recorded: Fig. 4 on real MNIST pathological with the paper's CNN")
    return Panel("trajectory", run, stop, status, [client, K, before, grid, setting], [traj_plot, losses])
