"""The settings every simulation tab shares: their widgets, their defaults, and values → a RunConfig.

The data settings stand above the tabs; the training settings on the Train & compare tab (ALA's η, s and
p are mirrored on the ALA tab). Every long handler takes them all, in the order of :data:`DATA_FIELDS`
then :data:`TRAIN_FIELDS` (the order of the API's parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from ..algorithms import registry
from ..config import algo_label
from ..errors import ConfigError
from ..experiments.plans import paper_methods, with_ala
from ..experiments.presets import preset
from .widgets import Dropdown, Followers, Number, Radio, Slider, whole_slider

DATASET_CHOICES = [  # short enough to read in full in the data row at 1280 px
    ("MNIST subset, 14×14 (embedded)", "mnist_mini"),
    ("digits 8×8 (embedded)", "digits"),
    ("MNIST", "mnist"),
    ("Fashion-MNIST", "fashion_mnist"),
    ("CIFAR-10", "cifar10"),
    ("CIFAR-100", "cifar100"),
]
PARTITION_CHOICES = [("IID", "iid"), ("pathological", "pathological"), ("Dirichlet", "dirichlet")]
MODEL_CHOICES = [
    ("MLP 128-64 (fast)", "mlp"),
    ("small CNN (slower)", "smallcnn"),
    ("auto (CNN by image size)", "auto"),
    ("FedAvgCNN (paper, 28×28)", "fedavgcnn"),
]


def p_max(model: str) -> int:
    """ALA's largest p for ``model``: its number of blocks (MLP 3, the CNNs 4), so the p sliders offer only what
    the config accepts. An unknown name keeps 4 (the config then names the problem)."""
    from ..errors import FedalaError
    from ..models import build_model, num_blocks

    try:  # 28×28 fits every model offered (FedAvgCNN needs it); the number of blocks does not depend on it
        return num_blocks(build_model(model, (1, 28, 28), 10))
    except (FedalaError, ValueError, TypeError):
        return 4


# Algorithms offered on the Train & compare tab: (label, config name). First FedALA and its baselines
# (Local is the no-federation one), then the FedALA paper's personalised-FL baselines (its Table 2), then
# those of them ALA applies to, with ALA (its Table 4: ALA replaces their local initialisation).
_PAPER, _ALA = paper_methods(), registry.modifier("ala").suffix
PFL_BASELINES = _PAPER["pfl"]
TRAIN_ALGOS = [
    (algo_label(a), a)
    for a in (*_PAPER["traditional"], *_PAPER["fedala"], *(a + _ALA for a in _PAPER["traditional"]),
              *_PAPER["fine_tuned"], *_PAPER["local"],
              *PFL_BASELINES, *(a for a in with_ala(PFL_BASELINES) if a not in PFL_BASELINES),
              # yours, registered by a plugin (--plugin, $FEDALA_LAB_PLUGINS, an installed entry point) before the
              # page is built, and the variants they take
              *(n for n in registry.names() if not registry.resolve(n).base.builtin))
]
TRAIN_ALGOS_INFO = ("Per-FedAvg … PartialFed: the FedALA paper's personalised-FL baselines, each on its own "
                    "default hyper-parameters; “+ALA”: ALA replaces their local initialisation. Every "
                    "personalised method is scored with each client's own model.")

DATA_FIELDS = ("dataset", "partition", "num_clients", "beta", "classes_per_client")
TRAIN_FIELDS = ("model", "rounds", "join_ratio", "lr", "batch_size", "local_epochs", "mu", "stragglers", "eta", "s",
                "p", "seed")
# The "teach" preset is the default of every widget: the embedded MNIST subset, 20 clients, Dir(0.1), MLP,
# lr 0.1, 50 rounds.
_TEACH = preset("teach")
DEFAULTS = {k: getattr(_TEACH.data, k) for k in DATA_FIELDS} | {k: getattr(_TEACH, k) for k in TRAIN_FIELDS}
# Settings the config holds as floats: widgets may send 0 for 0.0, converted before validation so that
# messages read "beta=0.0" whatever the widget sent. Every other number is made whole (20.0 → 20).
_FLOAT_FIELDS = ("beta", "join_ratio", "lr", "mu", "stragglers", "eta", "s")


def whole(value):
    """Sliders and number boxes send floats; 20.0 means 20. Anything else is left for the config to refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


MAX_SEEDS = 5  # the most seeds a tab's "seeds" slider offers (every seed is one more run per method)


def seed_count(value) -> int:
    """A tab's "seeds" value (how many seeds each run is repeated over), validated: a whole number from 1 to
    :data:`MAX_SEEDS`, else refused naming the field."""
    value = whole(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SEEDS:
        raise ConfigError("seeds", value, f"an integer from 1 to {MAX_SEEDS}")
    return value


def make_config(algo: str = "fedala", preset_name: str = "teach", **settings):
    """A preset (default "teach") with the widgets' values; RunConfig/DataConfig validation is the input
    check, so every bad value is refused with the library's message naming the field."""
    changes = {}
    for k, v in settings.items():  # None too: the config refuses it (a default would run what was not asked)
        if k not in _FLOAT_FIELDS:
            v = whole(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        changes[k] = v
    return preset(preset_name, algo=algo, **changes)


# One-click scenarios on the Train & compare tab: (label, preset, algorithms ticked, changes to the preset).
# Choosing one sets the fields of SCENARIO_FIELDS from it; everything stays editable. Local (no federation)
# is ticked where the question "why federate at all?" is the point: the tab's verdict compares it with the
# best federated method, over the tab's seeds and paired by seed (analysis/stats.py).
SCENARIOS = {
    "teach": ("the lecture's default: Dir(0.1)", "teach", ["fedavg", "fedala", "local"], {}),
    "collab": ("when federating pays: Dir(0.5)", "teach", ["fedavg", "fedala", "local"], {"beta": 0.5}),
    "fedprox": ("FedProx's setting: stragglers", "teach-fedprox", ["fedavg", "fedprox"], {}),
}
# Seeds the app takes: the config's range has no top, but a run store lists seeds as 64-bit integers.
SEED_MAX = 2**31 - 1
SCENARIO_FIELDS = ("partition", "classes_per_client", "beta", "local_epochs", "stragglers", "mu")


def scenario_values(name: str) -> tuple[list, list[str]]:
    """(values of :data:`SCENARIO_FIELDS`, algorithms) of scenario ``name``."""
    _, preset_name, algos, changes = SCENARIOS[name]
    cfg = preset(preset_name, **changes)
    return [getattr(cfg.data, k) if hasattr(cfg.data, k) else getattr(cfg, k) for k in SCENARIO_FIELDS], algos


# how the notice names the fields a scenario sets (the data row's first: they change every tab)
SCENARIO_NAMES = {"partition": "partition", "classes_per_client": "labels per client", "beta": "Dirichlet β",
                  "local_epochs": "local epochs E", "stragglers": "stragglers", "mu": "FedProx μ"}


def scenario_notice(name: str, before: list) -> str:
    """The line shown above the tabs once scenario ``name`` was chosen: what it changed (``before`` are the
    values of :data:`SCENARIO_FIELDS` it replaced), and that every tab now uses it. Empty when it changed
    nothing."""
    label = SCENARIOS[name][0]
    values, _ = scenario_values(name)
    changed = [f"{SCENARIO_NAMES[k]} {_shown(old)} → **{_shown(new)}**"
               for k, old, new in zip(SCENARIO_FIELDS, before, values, strict=True) if not _same(old, new)]
    if not changed:
        return ""
    back = "" if name == "teach" else f" Choose “{SCENARIOS['teach'][0]}” on *Train & compare* to go back."
    return (f"**Scenario: {label}.** It changed the settings of every tab (the data row above and *Train & "
            f"compare*): {', '.join(changed)}.{back}")


def _same(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _shown(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return {val: lab for lab, val in PARTITION_CHOICES}.get(v, str(v)) if isinstance(v, str) else str(v)


@dataclass
class Settings:
    """The shared setting widgets by field name; :attr:`inputs` in the handlers' parameter order."""

    widgets: dict = field(default_factory=dict)
    notice: object = None  # the line above the tabs saying what a scenario changed for every tab
    followers: Followers = field(default_factory=Followers)  # sliders whose range follows a setting

    def __getitem__(self, name: str):
        return self.widgets[name]

    @property
    def data_inputs(self) -> list:
        return [self.widgets[k] for k in DATA_FIELDS]

    @property
    def inputs(self) -> list:
        return [self.widgets[k] for k in DATA_FIELDS + TRAIN_FIELDS]


def data_settings(settings: Settings) -> None:
    """The data row above the tabs. β is shown for the Dirichlet partition only, labels per client for the
    pathological one (both are still sent: the config ignores what its partition does not use)."""
    d = DEFAULTS
    with gr.Row(equal_height=True):
        dataset = Dropdown(DATASET_CHOICES, value=d["dataset"], label="dataset", elem_id="dataset", scale=3,
                           min_width=250, field="dataset")
        partition = Radio(PARTITION_CHOICES, value=d["partition"], label="partition", elem_id="partition", scale=3,
                          field="partition")
        num_clients = whole_slider(2, 100, d["num_clients"], "clients N", "clients", field="num_clients", scale=3)
        beta = Number(d["beta"], label="Dirichlet β (small = skewed)", elem_id="beta", field="beta", scale=2,
                      visible=d["partition"] == "dirichlet")
        classes = whole_slider(1, 10, d["classes_per_client"], "labels per client (pathological)", "classes",
                               field="classes_per_client", scale=2, visible=d["partition"] == "pathological")
    partition.change(lambda p: (gr.update(visible=p == "dirichlet"), gr.update(visible=p == "pathological")),
                     partition, [beta, classes], queue=False, api_visibility="private")
    settings.notice = gr.Markdown(elem_id="scenario-notice")
    settings.widgets.update(dataset=dataset, partition=partition, num_clients=num_clients, beta=beta,
                            classes_per_client=classes)


def train_settings(settings: Settings) -> None:
    """The training settings (on the Train & compare tab)."""
    d = DEFAULTS
    with gr.Row():
        rounds = whole_slider(1, 300, d["rounds"], "rounds T", "rounds", field="rounds")
        join_ratio = Slider(0.05, 1.0, value=d["join_ratio"], step=0.05, label="join ratio ρ (clients per round)",
                            elem_id="join-ratio", field="join_ratio")
        batch_size = whole_slider(1, 64, d["batch_size"], "batch size", "batch-size", field="batch_size")
        local_epochs = whole_slider(1, 20, d["local_epochs"], "local epochs E", "local-epochs", field="local_epochs")
        seed = Number(d["seed"], precision=0, minimum=0, maximum=SEED_MAX, label="seed", elem_id="seed", field="seed",
                      whole=True)
    with gr.Row():
        model = Dropdown(MODEL_CHOICES, value=d["model"], label="model", elem_id="model", min_width=200,
                         field="model")
        lr = Number(d["lr"], label="learning rate", elem_id="lr", field="lr")
        mu = Number(d["mu"], label="FedProx μ", elem_id="mu", field="mu")
        stragglers = Slider(0.0, 0.95, value=d["stragglers"], step=0.05, elem_id="stragglers", field="stragglers",
                            label="stragglers (FedAvg drops them)", min_width=200)
    with gr.Row():  # a row of their own: seven widgets in one clipped the sliders' end labels at 1280 px
        eta, s, p = ala_settings("")
    settings.widgets.update(model=model, rounds=rounds, join_ratio=join_ratio, batch_size=batch_size, seed=seed,
                            local_epochs=local_epochs, lr=lr, mu=mu, stragglers=stragglers, eta=eta, s=s, p=p)
    settings.followers.add(model, p, p_max, lo=1, event="change")  # the MLP has 3 blocks, the CNNs 4


def ala_settings(prefix: str) -> tuple:
    """ALA's η, s and p (``prefix`` tells the ALA tab's mirror of them apart)."""
    d = DEFAULTS
    eta = Number(d["eta"], label="ALA η (weight learning rate)", elem_id=f"{prefix}eta", field="eta")
    s = Slider(1, 100, value=d["s"], step=1, label="ALA s (% of local data)", elem_id=f"{prefix}s", field="s")
    p = whole_slider(1, p_max(d["model"]), d["p"], "ALA p (top blocks)", f"{prefix}p", field="p")
    return eta, s, p
