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


def build(app, demo, settings) -> None:
    kind = gr.Radio([("bubbles", "bubble"), ("heatmap", "heatmap")], value="bubble", label="view",
                    elem_id="data-kind")
    with gr.Row():
        data_plot = plot(label="samples per client and label", elem_id="data-plot", scale=3)
        data_table = gr.Dataframe(label="per client", elem_id="data-table", max_height=420, interactive=False,
                                  scale=1)
    s = settings
    gr.on([s["dataset"].change, s["partition"].change, s["num_clients"].release,
           s["classes_per_client"].release, s["beta"].submit, s["beta"].blur, kind.change, demo.load],
          app.partition, s.data_inputs + [kind], [data_plot, data_table], api_name="partition",
          trigger_mode="always_last", **LIGHT)
