"""Data: who holds which labels (paper Fig. 6–9), redrawn whenever a data setting changes; and what the
heterogeneity does to FedAvg (the ladder: IID, Dir(0.1), Dir(0.05), pathological, over seeds)."""

from __future__ import annotations

import time

import gradio as gr

from ...analysis.tables import data_title
from ...errors import ConfigError
from ...experiments.runs import get_or_run
from ..jobs import finished_status, friendly, job
from ..settings import make_config, whole
from ..widgets import LIGHT, Radio, plot, run_stop, table, whole_slider
from . import Panel

# The ladder's splits, from IID to the most skewed: on the embedded MNIST subset FedAvg's best accuracy falls
# at every step by more than the seeds' std (docs/design.md#data). Milder Dirichlet splits (β ≥ 0.5) are
# within about 2 points of IID there and not reliably ordered, so the ladder leaves them out.
LADDER = {"IID": {"partition": "iid"}, "Dir(0.1)": {"partition": "dirichlet", "beta": 0.1},
          "Dir(0.05)": {"partition": "dirichlet", "beta": 0.05},
          "pathological": {"partition": "pathological", "classes_per_client": 2}}


@friendly
def partition(app, dataset, partition, num_clients, beta, classes_per_client, kind="bubble"):
    """Partition the data and draw who holds which labels (paper Fig. 6–9) plus a per-client table."""
    from ...data.federated import FederatedData
    from ...figures.data import DataDistributionDisplay

    cfg = make_config(dataset=dataset, partition=partition, num_clients=num_clients, beta=beta,
                      classes_per_client=classes_per_client).data
    data = FederatedData.from_config(cfg)
    disp = DataDistributionDisplay.from_data(data, kind=kind or "bubble", title=data_title(cfg))
    return disp.figure_, data.summary(counts=disp.counts_)  # the counts just drawn, not recounted


@job
def ladder(app, seeds, settings, job):
    """FedAvg on each split of :data:`LADDER` (the dataset, clients and training settings of the page), run
    seeds 0 … ``seeds`` − 1: best accuracy and the spread between clients, mean ± std over seeds."""
    from ...analysis.tables import format_seed_table, seed_table
    from ...figures import HeterogeneityDisplay

    seeds = whole(seeds)
    if not isinstance(seeds, int) or isinstance(seeds, bool) or not 1 <= seeds <= 5:
        raise ConfigError("seeds", seeds, "an integer from 1 to 5")
    base = make_config(algo="fedavg", **settings)
    cfgs = {label: [base.replace(**split, seed=s) for s in range(seeds)] for label, split in LADDER.items()}
    flat = [c for cs in cfgs.values() for c in cs]
    tic = time.perf_counter()
    got = app.fetch(job, flat, lambda store, callback: [get_or_run(c, store, progress=False, callback=callback)
                                                        for c in flat],
                    labels=[f"FedAvg {label}, seed {c.seed}" for label, cs in cfgs.items() for c in cs])
    if got.status:  # stopped: a ladder needs every split
        return gr.skip(), gr.skip(), got.status
    runs = iter(got.runs)
    groups = {label: [next(runs) for _ in cs] for label, cs in cfgs.items()}
    disp = HeterogeneityDisplay.from_runs(groups, title=f"FedAvg on {data_title(base.data).split(',')[0]}, "
                                                        f"{base.data.num_clients} clients, {seeds} seed(s)")
    text = format_seed_table(seed_table(groups, reference="IID")).reset_index(names="split")
    return disp.figure_, text, finished_status(got, time.perf_counter() - tic)


# the ladder table's columns (analysis.tables.format_seed_table, with the split's name first)
LADDER_COLUMNS = ("split", "seeds", "best acc %", "final acc %", "client spread", "paired diff of best")
EMBEDDED = ("mnist_mini", "digits")
DOWNLOAD_PROGRESS = gr.Progress(track_tqdm=True)  # torchvision's download bars, shown on the page


@friendly
def download(app, dataset, progress=DOWNLOAD_PROGRESS):
    """Fetch ``dataset``'s files into the data folder (torchvision's mirrors; the only network use of the app,
    and only on this button). Returns a one-line status."""
    from ...config import default_data_root
    from ...data.sources import load_pool

    if dataset in EMBEDDED:
        return f"{dataset} ships with the package: nothing to download."
    progress(0, desc=f"downloading {dataset} into {default_data_root()}")
    pool = load_pool(dataset, download=True)
    return f"{dataset}: {len(pool):,} images ready in {default_data_root()}."


def build(app, demo, settings) -> Panel:
    kind = Radio([("bubbles", "bubble"), ("heatmap", "heatmap")], value="bubble", label="view", elem_id="data-kind",
                 field="kind")
    with gr.Row():
        data_plot = plot(label="samples per client and label", elem_id="data-plot", scale=3)
        data_table = table(label="per client", elem_id="data-table", columns=("client", "train", "test", "labels"),
                           max_height=420, scale=1)
    with gr.Row():
        fetch = gr.Button("Download the chosen dataset (needs the network)", elem_id="data-download", scale=1)
        fetched = gr.Markdown(elem_id="data-download-status")
    s = settings
    fetch.click(app.download, [s["dataset"]], [fetched], api_name="download", concurrency_limit=1)
    gr.on([s["dataset"].change, s["partition"].change, s["num_clients"].release,
           s["classes_per_client"].release, s["beta"].submit, s["beta"].blur, kind.change, demo.load],
          app.partition, s.data_inputs + [kind], [data_plot, data_table], api_name="partition",
          trigger_mode="always_last", **LIGHT)
    gr.Markdown("**Heterogeneity and FedAvg.** FedAvg on four splits of the chosen data, from IID to "
                "pathological (2 labels per client), with the clients and training settings of *Train & "
                "compare*, over seeds: the best pooled accuracy falls at every step, and the spread between "
                "clients is wider than under IID (on the embedded MNIST subset most for Dir(0.05), not for "
                "pathological). "
                "The first time ≈ 4 s a run on a laptop CPU (12 runs for 3 seeds); then instant.")
    seeds = whole_slider(1, 5, 3, "seeds", "ladder-seeds", field="seeds")
    run, stop, status = run_stop("ladder")
    ladder_plot = plot(label="FedAvg per split", elem_id="ladder-plot")
    # below the plot, full width: beside it, its columns were cut off at 1280 px
    ladder_table = table(label="mean ± std over seeds", elem_id="ladder-table", columns=LADDER_COLUMNS)
    return Panel("ladder", run, stop, status, [seeds], [ladder_plot, ladder_table])
