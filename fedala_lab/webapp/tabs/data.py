"""Data: who holds which labels (paper Fig. 6–9), redrawn whenever a data setting changes; and what the
heterogeneity does to FedAvg (the ladder: IID, Dir(0.1), Dir(0.05), pathological, over seeds)."""

from __future__ import annotations

import time

import gradio as gr

from ...analysis.tables import SEED_DIFF, SEED_P, data_title
from ...errors import ConfigError
from ..jobs import finished_status, friendly, job
from ..settings import DATASET_CHOICES, MAX_SEEDS, PARTITION_CHOICES, make_config, seed_count
from ..split import HIGHEST, LOWEST, served, spans
from ..widgets import LIGHT, Radio, checked_choice, checked_number, plot, run_stop, table, whole_slider
from . import Panel

# The ladder's splits, from IID to the most skewed: on the embedded MNIST subset FedAvg's best accuracy falls
# at every step by more than the seeds' std (docs/design.md#data). Milder Dirichlet splits (β ≥ 0.5) are
# within about 2 points of IID there and not reliably ordered, so the ladder leaves them out.
LADDER = {"IID": {"partition": "iid"}, "Dir(0.1)": {"partition": "dirichlet", "beta": 0.1},
          "Dir(0.05)": {"partition": "dirichlet", "beta": 0.05},
          "pathological": {"partition": "pathological", "classes_per_client": 2}}


@friendly
def partition(app, dataset, partition, num_clients, beta, classes_per_client, kind="bubble",
              request: gr.Request = None):
    """Partition the data and draw who holds which labels (paper Fig. 6–9) plus a per-client table; the clients
    slider set to the range this split serves (:mod:`..split`), and a line saying so. A number of clients
    the split cannot serve is moved into the range (the line says from what, to what and why), never refused:
    this runs whenever a data setting changes, and every setting a student can pick must draw."""
    from ...data.federated import FederatedData
    from ...figures.data import DataDistributionDisplay

    args = (dataset, partition, num_clients, beta, classes_per_client, kind)
    # the page sends the values unchecked (preprocess=False): checked here, so that β's Enter and then its focus
    # leaving give one message, not two (the widgets' own checks would refuse each)
    with app.once(request, "partition", args):  # the widgets' own checks, in the parameters' order
        checked_choice("dataset", dataset, DATASET_CHOICES)  # never a path: only the data sets the page offers
        checked_choice("partition", partition, PARTITION_CHOICES)
        checked_number("num_clients", num_clients, LOWEST, HIGHEST, whole=True)
        checked_number("beta", beta)
        checked_number("classes_per_client", classes_per_client, 1, 10, whole=True)
        checked_choice("kind", kind, KINDS)
        cfg = make_config(dataset=dataset, partition=partition, num_clients=num_clients, beta=beta,
                          classes_per_client=classes_per_client).data
    ok = served(cfg)
    n = ok.nearest(cfg.num_clients)
    note = f"This split serves **{spans(ok.ns)} clients**" + (f": {ok.why}." if ok.why else ".")
    if n != cfg.num_clients:
        note = f"**clients N {cfg.num_clients} → {n}**, the nearest number this split serves ({spans(ok.ns)}): {ok.why}."
        cfg = cfg.replace(num_clients=n)
    data = FederatedData.from_config(cfg)
    disp = DataDistributionDisplay.from_data(data, kind=kind, title=data_title(cfg))
    slider = gr.Slider(minimum=ok.lo, maximum=ok.hi, value=n)
    return disp.figure_, data.summary(counts=disp.counts_), slider, note  # the counts just drawn, not recounted


@job
def ladder(app, seeds, settings, job):
    """FedAvg on each split of :data:`LADDER` (the dataset, clients and training settings of the page), run
    seeds 0 … ``seeds`` − 1: best accuracy and the spread between clients, mean and 95 % interval over seeds, and
    each split against IID in words (paired by seed: :mod:`~fedala_lab.analysis.stats`)."""
    from ...analysis import stats
    from ...analysis.tables import format_seed_table, seed_table
    from ...figures import HeterogeneityDisplay

    seeds = seed_count(seeds)
    base = make_config(algo="fedavg", **settings)
    # every split must serve the clients: the ladder runs with the fewest any of them serves, and says so
    splits = {label: served(base.data.replace(**split)) for label, split in LADDER.items()}
    common = sorted(set.intersection(*(set(r.ns) for r in splits.values())))
    want = base.data.num_clients
    moved = ""
    if want not in common:
        if not common:
            raise ConfigError("num_clients", want, "a number of clients every split of the ladder serves",
                              "none does on this data")
        n = min(common, key=lambda m: (abs(m - want), m))
        why = "; ".join(f"{label}: {spans(r.ns)}" for label, r in splits.items() if want not in r.ns)
        moved = f" Run with {n} clients, the nearest number every split serves ({why})."
        base = base.replace(num_clients=n)
    cfgs = {label: [base.replace(**split, seed=s) for s in range(seeds)] for label, split in LADDER.items()}
    flat = [c for cs in cfgs.values() for c in cs]
    tic = time.perf_counter()
    got = app.fetch(job, flat, labels=[f"FedAvg {label}, seed {c.seed}" for label, cs in cfgs.items()
                                       for c in cs])
    if got.status:  # stopped: a ladder needs every split
        return gr.skip(), gr.skip(), gr.skip(), got.status + " The ladder is drawn once every split has its runs."
    runs = iter(got.runs)
    groups = {label: [next(runs) for _ in cs] for label, cs in cfgs.items()}
    disp = HeterogeneityDisplay.from_runs(groups, title=f"FedAvg on {data_title(base.data).split(',')[0]}, "
                                                        f"{base.data.num_clients} clients, {seeds} seed(s)")
    text = format_seed_table(seed_table(groups, reference="IID")).reset_index(names="split")
    long = stats.seed_stats(stats.groups_frame(groups), against="IID", metrics=["best"])
    said = "**Is each fall real?** Best accuracy, each split against IID with the same seed:\n\n" + "\n".join(
        f"- {v}" for v in stats.verdicts(long, "best"))
    return disp.figure_, text, said, finished_status(got, time.perf_counter() - tic) + moved


KINDS = [("bubbles", "bubble"), ("heatmap", "heatmap")]
LADDER_SEEDS = 3  # the ladder's default: mean ± std over seeds 0–2
# the ladder table's columns (analysis.tables.format_seed_table, with the split's name first)
LADDER_COLUMNS = ("split", "seeds", "best acc % (95 % CI)", "final acc % (95 % CI)", "client spread (95 % CI)",
                  SEED_DIFF, SEED_P)
EMBEDDED = ("mnist_mini", "digits")
# torchvision's download bars, shown on the page. Gradio patches tqdm's class for the whole process when a
# Progress(track_tqdm=True) is made; made here, at import, the patch would break every bar already open (its
# close raises in __del__). Set afterwards, Gradio patches only when the button is pressed.
DOWNLOAD_PROGRESS = gr.Progress()
DOWNLOAD_PROGRESS.track_tqdm = True


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
    """The Data tab: who holds which labels, redrawn on every data setting (no Run button of its own)."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=7, min_width=480):
            data_plot = plot(label="samples per client and label", elem_id="data-plot", elem_classes=["main-plot"])
        with gr.Column(scale=3, min_width=280):
            kind = Radio(KINDS, value="bubble", label="view", elem_id="data-kind", field="kind")
            notice = gr.Markdown(elem_id="data-notice")
            data_table = table(label="per client", elem_id="data-table", columns=("client", "train", "test", "labels"),
                               max_height=330)
    with gr.Row():
        fetch = gr.Button("Download the chosen dataset (needs the network)", elem_id="data-download", scale=1)
        fetched = gr.Markdown(elem_id="data-download-status")
    s = settings
    fetch.click(app.download, [s["dataset"]], [fetched], api_name="download", concurrency_limit=1)
    # the page's status line takes an error's badge: the figure and table keep what they show
    gr.on([s["dataset"].change, s["partition"].change, s["num_clients"].release,
           s["classes_per_client"].release, s["beta"].submit, s["beta"].blur, kind.change, demo.load],
          app.partition, s.data_inputs + [kind], [data_plot, data_table, s["num_clients"], notice],
          api_name="partition", trigger_mode="always_last", show_progress_on=notice, preprocess=False, **LIGHT)


def build_ladder(app, settings) -> Panel:
    """The Heterogeneity tab: FedAvg on four splits of the chosen data, over seeds (the ladder)."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=340):
            gr.Markdown("**Heterogeneity and FedAvg.** FedAvg on four splits of the chosen data, from IID to "
                        "pathological (2 labels per client), with the clients and training settings of *Train & "
                        "compare*, over seeds: the best pooled accuracy and the spread between clients, with 95 % "
                        "intervals, and whether each fall is more than the seeds' noise. The first time a few "
                        "seconds a run; then instant.", elem_classes=["note"])
            seeds = whole_slider(1, MAX_SEEDS, LADDER_SEEDS, "seeds", "ladder-seeds", field="seeds")
            run, stop, status = run_stop("ladder")
        with gr.Column(scale=7, min_width=480):
            ladder_plot = plot(label="FedAvg per split", elem_id="ladder-plot", elem_classes=["main-plot"])
            ladder_said = gr.Markdown(elem_id="ladder-verdict", elem_classes=["note"])
    ladder_table = table(label="mean and 95 % interval over seeds", elem_id="ladder-table", columns=LADDER_COLUMNS)
    return Panel("ladder", run, stop, status, [seeds], [ladder_plot, ladder_table, ladder_said])
