"""Run configuration: frozen dataclasses, validated on construction.

Every field says why it exists. Defaults follow the FedALA reference code (docs/design.md#ala); where the
project departs, the field that restores the reference behaviour is named in the comment.

A config is a value: ``replace(cfg, lr=0.1)`` makes a new one (and validates it). ``cfg.key()`` is the
hash that names its run folder; it covers only the fields that can change the result (for example ``mu``
is left out of a FedAvg run, and the data ``root`` never counts).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError, ConfigFileError

DATASETS = ("digits", "mnist_mini", "mnist", "fashion_mnist", "cifar10", "cifar100")
# "pfllib-pool:<dir>": every image of a PFLlib partition pooled, to be partitioned afresh (e.g. MNIST
# pathological from the shared Dir(0.1) files when torchvision's MNIST is absent; data/sources.py).
POOL_PREFIX = "pfllib-pool:"


def pool_directory(dataset) -> str | None:
    """The directory of a ``pfllib-pool:<dir>`` dataset name; None for any other name (or a bare prefix)."""
    if isinstance(dataset, str) and dataset.startswith(POOL_PREFIX) and len(dataset) > len(POOL_PREFIX):
        return dataset[len(POOL_PREFIX):]
    return None

PARTITIONS = ("iid", "pathological", "dirichlet")
MODELS = ("auto", "fedavgcnn", "smallcnn", "mlp", "resnet18", "fasttext")
BACKENDS = ("auto", "vectorised", "loop", "workers")
# Every algorithm: config name -> the papers' spelling (legends, tables, the app). The one list of both.
# "fedala" is "fedavg+ala" (the paper's FedALA is ALA on a FedAvg server).
ALGORITHMS = {
    "fedavg": "FedAvg", "fedprox": "FedProx", "fedala": "FedALA", "fedavg+ala": "FedAvg+ALA",
    "fedprox+ala": "FedProx+ALA", "fedavg-c": "FedAvg-C", "fedprox-c": "FedProx-C", "local": "Local",
    "fedlama": "FedLAMA", "fedlama+ala": "FedLAMA+ALA",
}


def algo_label(algo: str) -> str:
    """The papers' spelling of an algorithm name (``fedala`` → ``FedALA``); unknown names as they are."""
    return ALGORITHMS.get(algo, algo)


# Upper bounds on work counts. Not physics, but a typo guard: a round of the smallest problem takes
# milliseconds, so 10⁵ rounds is already hours, and 10¹² (a slip of the keyboard) would never end.
MAX_ROUNDS = 100_000
MAX_EPOCHS = 1_000  # local_epochs, finetune_epochs: E = 20 is FedProx's largest
MAX_STEPS = 10_000_000  # local_steps, tau0
MAX_START_EPOCHS = 100_000


def default_data_root() -> str:
    """Where torchvision datasets live unless ``root=`` says otherwise (``$FEDALA_LAB_DATA`` wins)."""
    return os.environ.get("FEDALA_LAB_DATA", str(Path.home() / ".cache" / "fedala_lab" / "data"))


# --------------------------------------------------------------------------------------------------
# small validation helpers: one clear message naming the field and the allowed range


def _check(ok: bool, name: str, value, allowed: str, hint: str = ""):
    if not ok:
        raise ConfigError(name, value, allowed, hint)


def _int(name, value, lo=None, hi=None):
    ok = isinstance(value, int) and not isinstance(value, bool)
    rng = f"an integer{'' if lo is None else f' >= {lo}'}{'' if hi is None else f' and <= {hi}'}"
    _check(ok and (lo is None or value >= lo) and (hi is None or value <= hi), name, value, rng)


def _float(name, value, lo=None, hi=None, lo_open=False, hi_open=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (lo is None or (value > lo if lo_open else value >= lo)) and (
            hi is None or (value < hi if hi_open else value <= hi)
        )
    lo_s = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
    hi_s = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
    _check(ok, name, value, "a finite number " + " and ".join(s for s in (lo_s, hi_s) if s))


def _choice(name, value, choices):
    _check(value in choices, name, value, "one of " + ", ".join(map(str, choices)))


def _coerce_floats(obj) -> None:
    """Store integral values of float fields as floats, so s=80 and s=80.0 are one config (one key)."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        if f.type in ("float", "float | None") and isinstance(v, int) and not isinstance(v, bool):
            object.__setattr__(obj, f.name, float(v))


def _bool(name, value):
    _check(isinstance(value, bool), name, value, "true or false")


# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataConfig:
    """Which data, and how it is split among clients (docs/design.md#data)."""

    # "digits" (scikit-learn, offline, the default), "mnist_mini" (3,000 MNIST digits at 14×14 shipped with
    # the package, offline: the teach preset's), a torchvision name, or "pfllib:<dir>" for a
    # partition directory written by PFLlib / the FedALA repository (used as is: no re-partitioning).
    dataset: str = "digits"
    # iid | pathological | dirichlet (PFLlib's "pat" and "dir"). Ignored for pfllib: directories.
    partition: str = "dirichlet"
    num_clients: int = 20
    # Dirichlet concentration: small = each client sees few labels (paper: 0.1).
    beta: float = 0.1
    # Pathological: labels per client (paper: 2 for MNIST/Cifar10, 10 for Cifar100).
    classes_per_client: int = 2
    # Pathological: equal shares of a class among its clients (PFLlib's balance flag) instead of random.
    balance: bool = False
    # Dirichlet: redraw until every client has this many samples; None = min(40, N / clients / 2)
    # (docs/design.md#data).
    least_samples: int | None = None
    # Fraction of each client's samples used for training; the rest is its test split (paper: 0.75).
    train_ratio: float = 0.75
    # Seed of the partition itself. Kept apart from the run seed so that seeds of a table share one
    # partition, as in the paper (PFLlib generates its data once with seed 1).
    seed: int = 1
    # Resize images to resize×resize (e.g. 28 puts the 8×8 digits through the paper's MNIST CNN).
    resize: int | None = None
    # torchvision data folder (None: $FEDALA_LAB_DATA or ~/.cache/fedala_lab/data). Never part of the key.
    root: str | None = None
    # Let torchvision download missing files. Off by default: nothing touches the network unasked.
    download: bool = False
    # Dirichlet redraws before giving up with an error (the reference loops forever). Draws are cheap
    # (thousands per second); digits with 20 clients at β = 0.1 succeeds on ~0.13 % of draws.
    max_tries: int = 100_000

    def __post_init__(self):
        d = self.dataset
        _check(
            isinstance(d, str) and (d in DATASETS or (d.startswith("pfllib:") and len(d) > 7) or self.is_pool),
            "dataset", d, "one of " + ", ".join(DATASETS) + ", pfllib:<directory> or pfllib-pool:<directory>",
        )
        _choice("partition", self.partition, PARTITIONS)
        _int("num_clients", self.num_clients, 1)
        _float("beta", self.beta, 0, lo_open=True)
        _int("classes_per_client", self.classes_per_client, 1)
        _bool("balance", self.balance)
        if self.least_samples is not None:
            _int("least_samples", self.least_samples, 1)
        _float("train_ratio", self.train_ratio, 0, 1, lo_open=True, hi_open=True)
        _int("seed", self.seed, 0)
        if self.resize is not None:
            _int("resize", self.resize, 4, 512)
        _bool("download", self.download)
        _int("max_tries", self.max_tries, 1)
        _coerce_floats(self)

    @property
    def is_pfllib(self) -> bool:
        return self.dataset.startswith("pfllib:")

    @property
    def pool_dir(self) -> str | None:
        """The PFLlib directory pooled by a ``pfllib-pool:<dir>`` dataset, else None."""
        return pool_directory(self.dataset)

    @property
    def is_pool(self) -> bool:
        return self.pool_dir is not None


@dataclass(frozen=True)
class RunConfig:
    """One simulated federated run (one algorithm, one seed)."""

    data: DataConfig = field(default_factory=DataConfig)
    # Model name; "auto" picks FedAvgCNN for 28×28/32×32 images and the small CNN for 8×8 digits.
    model: str = "auto"
    algo: str = "fedala"
    rounds: int = 50
    # ρ: fraction of clients selected per round (⌊ρ·N⌋, at least one), drawn without replacement.
    join_ratio: float = 1.0
    # Local epochs E per round for selected clients.
    local_epochs: int = 1
    # FedLAMA counts local work in SGD steps: when set, a round is this many steps (τ0) instead of epochs.
    local_steps: int | None = None
    batch_size: int = 10
    # Local learning rate (reference code default for the 4-layer CNN: 0.005).
    lr: float = 0.005
    # Reference: every round walks the client's (pre-shuffled) train split in the same order and drops
    # the last partial batch (DataLoader(shuffle=False, drop_last=True)). shuffle=True reshuffles each
    # epoch from a generator derived from (seed, round, client); drop_last=False keeps the partial batch.
    shuffle: bool = False
    drop_last: bool = True
    # FedProx proximal coefficient μ (paper grid choice 0.001). μ = 0 is FedAvg.
    mu: float = 0.001
    # Systems heterogeneity (docs/design.md#fedprox): this fraction of the selected clients are stragglers
    # each round, doing only a uniformly random part (1 … S − 1 of their S local steps) of their local work.
    stragglers: float = 0.0
    # Whether the server drops the stragglers (they train nothing and send nothing) or keeps their partial
    # updates. None = the algorithm's own choice, as in the FedProx paper: FedProx (and FedProx+ALA,
    # FedProx-C) keeps them, every other algorithm drops them.
    drop_stragglers: bool | None = None
    # ALA (docs/design.md#ala): η weight learning rate, s percent of the train split, p top blocks.
    eta: float = 1.0
    s: float = 80.0
    p: int = 1
    # Start-phase convergence: stop when > num_pre_loss pass losses exist and the std of the last
    # num_pre_loss is < threshold (code default 0.1; the paper used 0.01).
    threshold: float = 0.1
    num_pre_loss: int = 10
    # Cap on start-phase passes: the reference has none and can hang. Clients that hit it are reported.
    max_start_epochs: int = 50
    # Reference: ALA runs for every client each round (all are evaluated). False: only selected ones.
    ala_all_clients: bool = True
    # ALA is off (plain FedAvg initialisation) while round <= ala_after (Fig. 4 protocol: K = 155).
    ala_after: int = 0
    # FedAvg-C / FedProx-C: epochs of local fine-tuning of the received model before evaluation.
    finetune_epochs: int = 1
    # FedLAMA: base interval τ0 (steps) and interval factor φ (FedAvg is φ = 1).
    tau0: int = 10
    phi: int = 2
    # FedLAMA interval rule: "spec" (docs/design.md#fedlama: layers are long while δ_l < 1 − λ_l; the crossing
    # layer keeps τ0) or "authors" (the authors' code also relaxes the crossing layer — on the MNIST CNN, whose fc1 is
    # 90 % of the parameters and crosses first, only this rule saves communication).
    lama_rule: str = "spec"
    seed: int = 0
    # Evaluate every k rounds (evaluation of every client is a large share of a CPU round).
    eval_every: int = 1
    # Reference evaluation drops each client's last partial test batch (drop_last=True); we count every
    # test sample by default. True restores the reference.
    eval_drop_last: bool = False
    # Record the train-split loss of every initialised and trained local model (Fig. 5). Costs a forward
    # pass over all train data twice per evaluated round. Recording only (no result depends on it): not in
    # the key; a figure that reads it asks get_or_run(needs=has_train_loss) for a run that has it.
    record_train_loss: bool = True
    # Clients whose ALA weights and learning curves are kept: "auto" = all when small, else the first 4;
    # "all", "none", or comma-separated ids like "0,4,8".
    track_clients: str = "auto"
    # Clients whose flattened local models are saved at the start and end of each round (Fig. 4).
    snapshot_clients: str = "none"
    # Rounds from which snapshots are kept (Fig. 4 uses a late window, e.g. 140–200).
    snapshot_from: int = 1
    # Engine states the run store keeps with the finished run, as points later runs branch from
    # (docs/design.md#run-store): "last" (the last round's), "none", or rounds "1,10,20" (and the last).
    # An MNIST CNN state is ≈ 49 MB (20 clients × 582,026 float32 parameters). Never part of the key.
    keep_states: str = "last"
    # "auto": vectorised on a GPU and for small models; on a CPU, models over 200k parameters train a client
    # at a time in worker processes, one per core ("workers"; "loop": in this process, 1.4× faster than
    # vectorised there for the MNIST CNN, benchmarks/results.md).
    backend: str = "auto"
    # "auto" = cuda, then mps, then cpu. Never part of the key.
    device: str = "auto"
    # Save a resumable checkpoint every k rounds (0 = never).
    checkpoint_every: int = 10
    # torch CPU threads during the run; None = auto: one per process on a CPU. With torch's default threads a
    # busy neighbour process made an MNIST round 18× slower here (every small step waits for a descheduled
    # thread); parallelism comes from processes instead. Never part of the key.
    threads: int | None = None

    def __post_init__(self):
        _check(isinstance(self.data, DataConfig), "data", self.data, "a DataConfig")
        _choice("model", self.model, MODELS)
        _choice("algo", self.algo, ALGORITHMS)
        _int("rounds", self.rounds, 1, MAX_ROUNDS)
        _float("join_ratio", self.join_ratio, 0, 1, lo_open=True)
        _int("local_epochs", self.local_epochs, 1, MAX_EPOCHS)
        if self.local_steps is not None:
            _int("local_steps", self.local_steps, 1, MAX_STEPS)
        _int("batch_size", self.batch_size, 1)
        _float("lr", self.lr, 0, lo_open=True)
        _bool("shuffle", self.shuffle)
        _bool("drop_last", self.drop_last)
        _float("mu", self.mu, 0)
        _float("stragglers", self.stragglers, 0, 1)
        if self.drop_stragglers is not None:
            _bool("drop_stragglers", self.drop_stragglers)
        _check(not (self.stragglers and self.uses_lama), "stragglers", self.stragglers,
               "0 with FedLAMA", "its layer intervals assume that every active client synchronises")
        _float("eta", self.eta, 0, lo_open=True)
        _float("s", self.s, 0, 100, lo_open=True)
        _int("p", self.p, 1)
        _float("threshold", self.threshold, 0, lo_open=True)
        _int("num_pre_loss", self.num_pre_loss, 1)
        _int("max_start_epochs", self.max_start_epochs, 1, MAX_START_EPOCHS)
        _bool("ala_all_clients", self.ala_all_clients)
        _int("ala_after", self.ala_after, 0, MAX_ROUNDS)
        _int("finetune_epochs", self.finetune_epochs, 1, MAX_EPOCHS)
        _int("tau0", self.tau0, 1, MAX_STEPS)
        _int("phi", self.phi, 1)
        _choice("lama_rule", self.lama_rule, ("spec", "authors"))
        _int("seed", self.seed, 0)
        _int("eval_every", self.eval_every, 1, MAX_ROUNDS)
        _bool("eval_drop_last", self.eval_drop_last)
        _bool("record_train_loss", self.record_train_loss)
        for name in ("track_clients", "snapshot_clients"):
            v = getattr(self, name)
            _check(isinstance(v, str) and _parse_clients(v) is not None, name, v,
                   '"auto", "all", "none" or comma-separated client ids like "0,4"')
        _int("snapshot_from", self.snapshot_from, 1, MAX_ROUNDS)
        _check(isinstance(self.keep_states, str) and _parse_rounds(self.keep_states) is not None, "keep_states",
               self.keep_states, '"last", "none" or comma-separated rounds like "1,10" (the last is kept too)')
        _choice("backend", self.backend, BACKENDS)
        _check(isinstance(self.device, str) and self.device.split(":")[0] in ("auto", "cpu", "cuda", "mps"),
               "device", self.device, "auto, cpu, cuda, cuda:<n> or mps")
        _int("checkpoint_every", self.checkpoint_every, 0)
        if self.threads is not None:
            _int("threads", self.threads, 1)
        _coerce_floats(self)

    # -- derived facts ----------------------------------------------------------------------------

    @property
    def uses_ala(self) -> bool:
        return self.algo == "fedala" or self.algo.endswith("+ala")

    @property
    def uses_prox(self) -> bool:
        return self.algo.startswith("fedprox")

    @property
    def drops_stragglers(self) -> bool:
        """Whether stragglers are dropped: ``drop_stragglers``, else the algorithm's choice (FedProx keeps
        their partial work, every other algorithm drops them; docs/design.md#fedprox)."""
        return (not self.uses_prox) if self.drop_stragglers is None else self.drop_stragglers

    @property
    def uses_finetune(self) -> bool:
        return self.algo.endswith("-c")

    @property
    def uses_lama(self) -> bool:
        return self.algo.startswith("fedlama")

    def kept_rounds(self) -> list[int]:
        """The rounds whose engine states the store keeps (``keep_states``), ascending; the last included."""
        spec = _parse_rounds(self.keep_states)
        if spec == ():
            return []
        extra = () if spec == "last" else spec
        return sorted({t for t in extra if t < self.rounds} | {self.rounds})

    def clients_to(self, which: str, num_clients: int) -> list[int]:
        """Resolve ``track_clients``/``snapshot_clients`` to client ids (validated against N)."""
        spec = getattr(self, which)
        ids = _parse_clients(spec)
        if ids == "all":
            return list(range(num_clients))
        if ids == "auto":
            return list(range(num_clients)) if num_clients <= 20 else list(range(4))
        bad = [i for i in ids if i >= num_clients]
        _check(not bad, which, spec, f"client ids below num_clients={num_clients}")
        return list(ids)

    # -- serialisation and identity ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """Build from a (possibly flat) mapping: data fields may sit at top level or under "data".

        Unknown keys, a non-mapping ``d`` or a non-mapping ``data`` raise :class:`ConfigError` naming the
        key and listing the allowed ones.
        """
        if not isinstance(d, Mapping):
            raise ConfigError("config", d, "a mapping of settings, e.g. {\"algo\": \"fedala\", \"rounds\": 50}")
        d = dict(d)
        data = d.pop("data", None)
        if isinstance(data, DataConfig):
            data = data.__dict__
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError("data", data, "a mapping of data settings: " + ", ".join(_DATA_NAMES))
        data = dict(data)
        for k in list(d):
            if k in _DATA_NAMES and k not in _RUN_NAMES:
                data[k] = d.pop(k)
            elif k == "data_seed":
                data["seed"] = d.pop(k)
        unknown = [(k, d[k]) for k in d if k not in _RUN_NAMES] + [(k, data[k]) for k in data
                                                                   if k not in _DATA_NAMES]
        if unknown:
            raise unknown_setting(*unknown[0])
        return cls(data=DataConfig(**data), **d)

    def replace(self, **changes) -> RunConfig:
        """A copy with changes; data fields (``num_clients=``, ``beta=``…) are routed to ``data``.

        ``seed`` is the run seed and ``data_seed`` the partition seed. An unknown name raises
        :class:`ConfigError` listing the allowed ones.
        """
        for k, v in changes.items():
            if k not in SETTING_NAMES and k != "data":
                raise unknown_setting(k, v)
        data_changes = {k: changes.pop(k) for k in list(changes) if k in _DATA_NAMES and k not in _RUN_NAMES}
        if "data_seed" in changes:
            data_changes["seed"] = changes.pop("data_seed")
        data = dataclasses.replace(self.data, **data_changes) if data_changes else self.data
        return dataclasses.replace(self, data=data, **changes)

    def canonical(self) -> dict[str, Any]:
        """The fields that can change the result, with unused hyper-parameters dropped."""
        d = self.to_dict()
        for k in RECORDING_FIELDS:
            d.pop(k)
        for k in ("root", "download"):
            d["data"].pop(k)
        if not self.uses_prox:
            d.pop("mu")
        if self.stragglers:  # only a run with stragglers has them in its key; None resolved to its meaning
            d["drop_stragglers"] = self.drops_stragglers
        else:
            d.pop("stragglers"), d.pop("drop_stragglers")
        if not self.uses_ala:
            for k in ("eta", "s", "p", "threshold", "num_pre_loss", "max_start_epochs",
                      "ala_all_clients", "ala_after"):
                d.pop(k)
        if not self.uses_finetune:
            d.pop("finetune_epochs")
        if not self.uses_lama:
            d.pop("tau0"), d.pop("phi"), d.pop("lama_rule")
        if self.data.is_pfllib:
            for k in ("partition", "beta", "classes_per_client", "balance", "least_samples",
                      "train_ratio", "seed", "max_tries"):
                d["data"].pop(k)
        elif self.data.partition != "dirichlet":
            for k in ("beta", "least_samples", "max_tries"):
                d["data"].pop(k)
        if not self.data.is_pfllib and self.data.partition != "pathological":
            d["data"].pop("classes_per_client"), d["data"].pop("balance")
        return d

    def key(self) -> str:
        """12 hex digits of the SHA-256 of the canonical config: same key ⇒ same result."""
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def slug(self) -> str:
        """A readable folder prefix, e.g. ``fedala-digits-dirichlet0.1-n20-r50-s0``."""
        ds = self.data.dataset
        if self.data.is_pfllib:
            ds = "pfllib-" + Path(ds[7:]).name
        elif self.data.is_pool:
            ds = "pool-" + Path(self.data.pool_dir).name
        part = "" if self.data.is_pfllib else {
            "iid": "-iid",
            "pathological": f"-pat{self.data.classes_per_client}",
            "dirichlet": f"-dir{self.data.beta:g}",
        }[self.data.partition]
        algo = self.algo.replace("+", "_")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in ds)
        return f"{algo}-{safe}{part}-n{self.data.num_clients}-r{self.rounds}-s{self.seed}"


# Fields that change neither a run's result nor its identity (not in the key): where and how it runs, and
# what is recorded or kept besides the result. get_or_run(needs=…) recomputes a stored run lacking a recording.
RECORDING_FIELDS = ("device", "checkpoint_every", "threads", "track_clients", "snapshot_clients", "snapshot_from",
                    "record_train_loss", "keep_states")
_RUN_NAMES = frozenset(f.name for f in fields(RunConfig))
_DATA_NAMES = tuple(f.name for f in fields(DataConfig))
# Every name a setting can be given by (replace, from_dict, --set, sweep axes, spec files): the run's
# fields, the data's fields (routed into ``data``) and ``data_seed`` (the partition seed; ``seed`` is the run's).
SETTING_NAMES = tuple(sorted((_RUN_NAMES - {"data"}) | set(_DATA_NAMES) | {"data_seed"}))


def unknown_setting(name, value) -> ConfigError:
    """The error for a setting that does not exist, listing those that do."""
    return ConfigError(str(name), value, "a known setting; one of " + ", ".join(SETTING_NAMES))


def merge_settings(base: dict, extra: Mapping) -> dict:
    """Overlay ``extra`` (a settings mapping, e.g. a config file) on ``base`` (``RunConfig.to_dict()``);
    ``data`` is merged key by key. Non-mappings raise :class:`ConfigError`."""
    if not isinstance(extra, Mapping):
        raise ConfigError("config", extra, "a mapping of settings")
    data = extra.get("data")
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError("data", data, "a mapping of data settings: " + ", ".join(_DATA_NAMES))
    out = dict(base)
    out["data"] = {**base["data"], **(data or {})}
    out.update({k: v for k, v in extra.items() if k != "data"})
    return out


def parse_value(text: str):
    """A setting's value written as text (``--set``, ``--grid``): booleans strictly (true/false), then
    int, float, None (none/null), else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_values(text: str, name: str) -> list:
    """A list of values written as text: ``"0,1,2"`` (each by :func:`parse_value`) or ``"0-4"`` (an integer
    range, both ends included). ``name`` is the setting the error names."""
    out: list = []
    for t in (t.strip() for t in text.split(",")):
        if not t:
            continue
        lo, sep, hi = t.partition("-")
        if sep and lo.isdigit() and hi.isdigit():
            if int(hi) < int(lo):
                raise ConfigError(name, t, "a range low-high with low <= high")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(parse_value(t))
    if not out:
        raise ConfigError(name, text, "a comma-separated list of values")
    return out


def with_settings_file(cfg: RunConfig, path: str | os.PathLike) -> RunConfig:
    """``cfg`` with the settings of a JSON or YAML file (:func:`read_config_file`) merged in; a bad setting
    raises the ConfigError naming it and the file."""
    settings = read_config_file(path)
    try:  # from_dict routes the file's top-level data fields (and data_seed) into "data"
        return RunConfig.from_dict(merge_settings(cfg.to_dict(), settings))
    except ConfigError as err:
        raise ConfigError(err.field, err.value, err.allowed, f"in config file {path}") from None


def read_config_file(path: str | os.PathLike) -> dict:
    """Read a JSON or YAML settings file into a dict.

    ``.json`` is read as JSON, ``.yaml``/``.yml`` as YAML (safe loader: no Python objects), anything else
    as JSON, then YAML. Every problem (no such file, a folder, not text, a syntax error, a tag that would
    build a Python object, an empty file, not a mapping) raises :class:`ConfigError` naming the file and
    what is wrong, on one line.
    """
    import yaml

    p = Path(path)
    if p.is_dir():
        raise ConfigFileError(p, "is a folder, not a settings file (JSON or YAML)")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigFileError(p, "no such file") from None
    except OSError as err:
        raise ConfigFileError(p, f"cannot be read ({err.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise ConfigFileError(p, "holds binary data, not a JSON or YAML text")
    if not text.strip():
        raise ConfigFileError(p, "is empty: write settings such as 'rounds: 50'")

    def as_json():
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigFileError(p, f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None

    def as_yaml():
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = " ".join(str(getattr(err, "problem", None) or str(err).splitlines()[0]).split())
            if isinstance(err, yaml.constructor.ConstructorError):
                problem += "; tags that build Python objects are never loaded"
            raise ConfigFileError(p, f"is not valid YAML ({where}{problem})") from None

    suffix = p.suffix.lower()
    if suffix == ".json":
        d = as_json()
    elif suffix in (".yaml", ".yml"):
        d = as_yaml()
    else:
        try:
            d = as_json()
        except ConfigFileError:
            d = as_yaml()
    if d is None:
        raise ConfigFileError(p, "holds no settings: write settings such as 'rounds: 50'")
    if not isinstance(d, dict):
        raise ConfigFileError(p, f"holds a {type(d).__name__}, not a mapping of settings such as 'rounds: 50'")
    if d.get("data") is not None and not isinstance(d["data"], dict):
        raise ConfigFileError(p, f"'data' must be a mapping of data settings, not {d['data']!r}")
    return d


def _parse_clients(spec: str):
    """'auto' | 'all' | 'none' | '0,4,8' → 'auto' | 'all' | tuple of ints; None if malformed."""
    return _parse_list(spec, ("auto", "all"), 0)


def _parse_rounds(spec: str):
    """'last' | 'none' | '1,10' → 'last' | () | tuple of rounds >= 1; None if malformed."""
    return _parse_list(spec, ("last",), 1, MAX_ROUNDS)


def _parse_list(spec: str, words: tuple[str, ...], lo: int, hi: int | None = None):
    """One of ``words``, 'none' (or '') → (), or comma-separated integers in [lo, hi] → a tuple; None if
    malformed."""
    if not isinstance(spec, str):
        return None
    s = spec.strip().lower()
    if s in words:
        return s
    if s in ("none", ""):
        return ()
    try:
        values = tuple(int(t) for t in s.split(","))
    except ValueError:
        return None
    return values if all(v >= lo and (hi is None or v <= hi) for v in values) else None
