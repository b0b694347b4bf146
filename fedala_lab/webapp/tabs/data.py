"""Data: who holds which labels (paper Fig. 6–9), redrawn whenever a data setting changes."""

from __future__ import annotations

import gradio as gr

from ...analysis.tables import data_title
from ..jobs import friendly
from ..settings import make_config
from ..widgets import LIGHT, plot


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


def build(app, demo, settings) -> None:
    kind = gr.Radio([("bubbles", "bubble"), ("heatmap", "heatmap")], value="bubble", label="view",
                    elem_id="data-kind")
    with gr.Row():
        data_plot = plot(label="samples per client and label", elem_id="data-plot", scale=3)
        data_table = gr.Dataframe(label="per client", elem_id="data-table", max_height=420, interactive=False,
                                  scale=1)
    with gr.Row():
        fetch = gr.Button("Download the chosen dataset (needs the network)", elem_id="data-download", scale=1)
        fetched = gr.Markdown(elem_id="data-download-status")
    s = settings
    fetch.click(app.download, [s["dataset"]], [fetched], api_name="download", concurrency_limit=1)
    gr.on([s["dataset"].change, s["partition"].change, s["num_clients"].release,
           s["classes_per_client"].release, s["beta"].submit, s["beta"].blur, kind.change, demo.load],
          app.partition, s.data_inputs + [kind], [data_plot, data_table], api_name="partition",
          trigger_mode="always_last", **LIGHT)
