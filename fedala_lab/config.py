"""Run configuration: frozen dataclasses, validated on construction.

Every setting is declared once (fedala_lab/params.py) with its default, what is allowed and what it
means: the run's own fields below, the data's (:class:`DataConfig`, data/config.py) and every algorithm's
hyper-parameters, which the algorithm's spec declares (algorithms/registry.py). ``help(RunConfig)`` lists
them all. Defaults follow the FedALA reference code (docs/design.md#ala); where the project departs, the
setting that restores the reference behaviour says so.

A config is a value: ``cfg.replace(lr=0.1)`` makes a new one (and validates it). Hyper-parameters are
attributes like the fields (``cfg.mu``, ``cfg.p``) and are given like them (``RunConfig(algo="fedprox",
mu=0.01)``); a config stores only those that differ from their declared default. ``cfg.key()`` is the hash
that names its run folder; it covers only what can change the result: the algorithm's own hyper-parameters
(``mu`` is left out of a FedAvg run), never a folder (a ``pfllib:`` partition or custom data is named by its
content hash, a custom model by its architecture and weights).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .algorithms import registry
from .data.config import (  # noqa: F401 - re-exported: a config's data settings
    DATASETS,
    PARTITIONS,
    POOL_PREFIX,
    DataConfig,
    default_data_root,
    pool_directory,
)
from .errors import ConfigError, ConfigFileError
from .fingerprint import code_fingerprint, package_fingerprint
from .models import CUSTOM_PREFIX, MODELS
from .numerics import platform_id
from .params import (
    Allowed,
    Bool,
    Choice,
    Float,
    Int,
    Optional,
    Rule,
    check_fields,
    declared,
    help_lines,
    param_field,
)

BACKENDS = ("auto", "vectorised", "loop", "workers")

# Upper bounds on work counts. Not physics, but a typo guard: a round of the smallest problem takes
# milliseconds, so 10⁵ rounds is already hours, and 10¹² (a slip of the keyboard) would never end.
MAX_ROUNDS = 100_000
MAX_EPOCHS = 1_000  # local_epochs: E = 20 is FedProx's largest
MAX_STEPS = 10_000_000  # local_steps


def algo_label(algo: str) -> str:
    """The papers' spelling of an algorithm name (``fedala`` → ``FedALA``); unknown names as they are."""
    return registry.label(algo)


def _model_name(v) -> bool:
    return isinstance(v, str) and (v in MODELS or (v.startswith(CUSTOM_PREFIX) and len(v) > len(CUSTOM_PREFIX)))


class _Algorithms(Allowed):
    """A registered algorithm name (the list grows as algorithms are registered)."""

    def ok(self, value) -> bool:
        try:
            return registry.resolve(value) is not None
        except ConfigError:
            return False

    @property
    def text(self) -> str:
        return "one of " + ", ".join(registry.names())

    def why(self, value) -> str:
        """A malformed ``$FEDALA_LAB_PLUGINS``: why a name may be missing."""
        from .algorithms.plugins import env_problem

        return env_problem()


def _device_name(v) -> bool:
    # the forms torch.device takes that we mean: a GPU index is a whole number >= 0 ("cuda:-1" is refused here,
    # not by torch's traceback)
    return isinstance(v, str) and re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v) is not None


_CLIENTS_TEXT = '"auto", "all", "none" or comma-separated client ids like "0,4"'
_ROUNDS_TEXT = '"last", "none" or comma-separated rounds like "1,10" (the last is kept too)'


@dataclass(frozen=True, init=False)
class RunConfig:
    data: DataConfig = param_field(None, Rule(lambda v: isinstance(v, DataConfig), "a DataConfig"),
                                   "which data, and how it is split among clients", factory=DataConfig)
    model: str = param_field("auto", Rule(_model_name, "one of " + ", ".join(MODELS)),
                             "auto picks FedAvgCNN for 28×28/32×32 images, the small CNN for smaller ones; "
                             "custom:<hash> names a module passed as simulate(..., model=module)")
    algo: str = param_field("fedala", _Algorithms(),
                            "the algorithm (fedala_lab.algorithms.registry.names(): fedavg, fedprox, fedala, any "
                            "+ala variant…); its hyper-parameters are settings too")
    rounds: int = param_field(50, Int(1, MAX_ROUNDS), "communication rounds T")
    join_ratio: float = param_field(1.0, Float(0, 1, lo_open=True), "ρ: fraction of clients selected per round "
                                    "(⌊ρ·N⌋, at least one), drawn without replacement")
    local_epochs: int = param_field(1, Int(1, MAX_EPOCHS), "local epochs E per round for selected clients")
    local_steps: int | None = param_field(None, Optional(Int(1, MAX_STEPS)), "when set, a round is this many "
                                          "local SGD steps instead of epochs (FedLAMA counts work in steps)")
    batch_size: int = param_field(10, Int(1), "local batch size")
    lr: float = param_field(0.005, Float(0, lo_open=True), "local learning rate (reference code default for "
                            "the 4-layer CNN: 0.005)")
    shuffle: bool = param_field(False, Bool(), "reshuffle the train split every epoch from a generator of (seed, "
                                "round, client); the reference walks it in its stored order every round")
    drop_last: bool = param_field(True, Bool(), "drop each client's last partial batch, as the reference's "
                                  "DataLoader(drop_last=True)")
    stragglers: float = param_field(0.0, Float(0, 1), "systems heterogeneity (docs/design.md#fedprox): this "
                                    "fraction of the selected clients do only a random part (1 … S − 1 of their S "
                                    "local steps) of their work each round")
    drop_stragglers: bool | None = param_field(None, Optional(Bool()), "whether the server drops stragglers "
                                               "(they train and send nothing) or keeps their partial work; none = "
                                               "the algorithm's choice (FedProx keeps it, the others drop it)")
    seed: int = param_field(0, Int(0), "run seed: initial model, selection, batch order, ALA windows")
    eval_every: int = param_field(1, Int(1, MAX_ROUNDS), "evaluate every k rounds (and the last); evaluation of "
                                  "every client is a large share of a CPU round")
    eval_drop_last: bool = param_field(False, Bool(), "drop each client's last partial test batch as the "
                                       "reference does; by default every test sample counts")
    record_train_loss: bool = param_field(True, Bool(), "record the train-split loss of every initialised and "
                                          "trained local model (Fig. 5; two forward passes over all train data "
                                          "per evaluated round); recording only, not in the key")
    track_clients: str = param_field("auto", Rule(lambda v: _parse_clients(v) is not None, _CLIENTS_TEXT),
                                     "clients whose per-client records (ALA weights and passes) are kept: auto = "
                                     "all when N ≤ 20, else the first 4")
    snapshot_clients: str = param_field("none", Rule(lambda v: _parse_clients(v) is not None, _CLIENTS_TEXT),
                                        "clients whose flattened local models are saved at the start and end of "
                                        "each round (Fig. 4)")
    snapshot_from: int = param_field(1, Int(1, MAX_ROUNDS), "the first round snapshots are kept for")
    keep_states: str = param_field("last", Rule(lambda v: _parse_rounds(v) is not None, _ROUNDS_TEXT),
                                   "engine states the run store keeps with the finished run, as points later runs "
                                   "branch from (a state holds every client's model); never part of the key")
    backend: str = param_field("auto", Choice(BACKENDS), "auto: vectorised on a GPU and for small models; on a "
                               "CPU models over 200k parameters train a client at a time in worker processes")
    device: str = param_field("auto", Rule(_device_name, "auto, cpu, cuda, cuda:<n> (n a GPU index >= 0) or mps"),
                              "auto = cuda, then mps, then cpu; never part of the key")
    checkpoint_every: int = param_field(10, Int(0), "save a resumable checkpoint every k rounds (0 = never)")
    threads: int | None = param_field(None, Optional(Int(1)), "torch CPU threads during the run; none = one per "
                                      "process on a CPU (robust against a busy neighbour: docs/design.md#performance)"
                                      "; never part of the key")
    # The algorithms' hyper-parameters set to other than their declared defaults, as sorted (name, value)
    # pairs; read them as attributes (cfg.mu), set them as keywords (RunConfig(mu=0.01), cfg.replace(p=2)).
    params: tuple = ()

    def __init__(self, data: DataConfig | None = None, **settings):
        hyper = dict(settings.pop("params", None) or ())
        for k, v in settings.items():
            if k in _RUN_NAMES:
                continue
            if registry.param(k) is None:
                raise unknown_setting(k, v)
            hyper[k] = v
        for f in _FIELDS:
            if f.name == "params":
                continue
            value = data if f.name == "data" else settings.get(f.name, _MISSING)
            if value is _MISSING or (f.name == "data" and value is None):
                value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            object.__setattr__(self, f.name, value)
        check_fields(self)
        checked = {}
        for k, v in hyper.items():
            p = registry.param(k)
            v = p.check(v)
            if v != p.default or type(v) is not type(p.default):
                checked[k] = v
        object.__setattr__(self, "params", tuple(sorted(checked.items())))

    def __getattr__(self, name: str):
        # the algorithms' hyper-parameters: the value set, else the declared default
        if name.startswith("_") or name == "params":
            raise AttributeError(name)
        p = registry.param(name)
        if p is None:
            raise AttributeError(f"RunConfig has no setting {name!r}")
        return dict(self.params).get(name, p.default)

    # -- derived facts ----------------------------------------------------------------------------

    @property
    def algorithm(self) -> registry.Resolved:
        """The algorithm ``algo`` names: its spec, modifiers, label, colour and hyper-parameters."""
        return registry.resolve(self.algo)

    @property
    def uses_ala(self) -> bool:
        return self.algorithm.uses("ala")

    @property
    def drops_stragglers(self) -> bool:
        """Whether stragglers are dropped: ``drop_stragglers``, else the algorithm's choice (FedProx keeps
        their partial work, every other algorithm drops them; docs/design.md#fedprox)."""
        if self.drop_stragglers is not None:
            return self.drop_stragglers
        return not self.algorithm.keeps_stragglers

    def check(self) -> RunConfig:
        """Refuse settings the algorithm cannot run with (its spec's check: FedLAMA takes no stragglers and a
        round of exactly τ0 steps) with a :class:`ConfigError`; the config itself when it can run. Checked when
        a run is built, not at construction: a preset may be adjusted in several steps."""
        self.algorithm.check(self)
        return self

    def hyper_parameters(self) -> dict[str, Any]:
        """The algorithm's hyper-parameters and their values (those it declares, set or default)."""
        return {p.name: getattr(self, p.name) for p in self.algorithm.params}

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
        if bad:
            raise ConfigError(which, spec, f"client ids below num_clients={num_clients}")
        return list(ids)

    # -- serialisation and identity ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the run's fields, ``data`` as a mapping, and the hyper-parameters flat beside the fields
        (the algorithm's own with their values, and any other that was set)."""
        d = {f.name: getattr(self, f.name) for f in _FIELDS if f.name not in ("data", "params")}
        d["data"] = dataclasses.asdict(self.data)
        d.update(self.hyper_parameters())
        d.update(self.params)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """Build from a (possibly flat) mapping: data fields may sit at top level or under "data", the
        algorithms' hyper-parameters at top level (or under "params").

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
        hyper = d.pop("params", None) or {}
        if not isinstance(hyper, Mapping):
            hyper = dict(hyper) if isinstance(hyper, (list, tuple)) else None
            if hyper is None:
                raise ConfigError("params", d.get("params"), "a mapping of hyper-parameters")
        for k in list(d):
            if k in _DATA_NAMES and k not in _RUN_NAMES:
                data[k] = d.pop(k)
            elif k == "data_seed":
                data["seed"] = d.pop(k)
        unknown = ([(k, d[k]) for k in d if k not in _RUN_NAMES and registry.param(k) is None]
                   + [(k, data[k]) for k in data if k not in _DATA_NAMES])
        if unknown:
            raise unknown_setting(*unknown[0])
        return cls(data=DataConfig(**data), **{**dict(hyper), **d})

    def replace(self, **changes) -> RunConfig:
        """A copy with changes; data fields (``num_clients=``, ``beta=``…) are routed to ``data``, hyper-parameters
        (``mu=``, ``p=``…) to ``params``.

        ``seed`` is the run seed and ``data_seed`` the partition seed. An unknown name raises
        :class:`ConfigError` listing the allowed ones.
        """
        names = set(setting_names())
        for k, v in changes.items():
            if k not in names and k != "data":
                raise unknown_setting(k, v)
        data_changes = {k: changes.pop(k) for k in list(changes) if k in _DATA_NAMES and k not in _RUN_NAMES}
        if "data_seed" in changes:
            data_changes["seed"] = changes.pop("data_seed")
        data = changes.pop("data", self.data)
        if data_changes:
            data = data.replace(**data_changes)
        hyper = dict(self.params)
        hyper.update({k: changes.pop(k) for k in list(changes) if k not in _RUN_NAMES})
        current = {f.name: getattr(self, f.name) for f in _FIELDS if f.name not in ("data", "params")}
        return RunConfig(data=data, params=hyper, **{**current, **changes})

    def canonical(self) -> dict[str, Any]:
        """The settings that can change the result: the run's fields but those of :data:`RECORDING_FIELDS`,
        the data's canonical form, and the algorithm's own hyper-parameters."""
        d = {f.name: getattr(self, f.name) for f in _FIELDS if f.name not in ("data", "params", *RECORDING_FIELDS)}
        d["data"] = self.data.canonical()
        d.update(self.hyper_parameters())
        if self.stragglers:  # only a run with stragglers has them in its key; None resolved to its meaning
            d["drop_stragglers"] = self.drops_stragglers
        else:
            d.pop("stragglers"), d.pop("drop_stragglers")
        return d

    def code(self) -> dict[str, str]:
        """What computes this config's run besides its settings (docs/design.md#run-identity): ``package``,
        fedala_lab's computing modules and the Python/torch/numpy versions; ``algorithm``, the code of a
        registered algorithm defined outside fedala_lab (the code it can reach: see fingerprint.py), and of any
        such modifier it takes ("" for the built-ins); ``platform``, the arithmetic of the device it runs on
        here (:func:`fedala_lab.numerics.platform_id`: CPU kernels or GPU model)."""
        algo = self.algorithm
        own = [code_fingerprint(algo.base.build), *(code_fingerprint(m.wrap) for m in algo.modifiers)]
        return {"package": package_fingerprint(), "algorithm": "+".join(f for f in own if f),
                "platform": self.platform()}

    def platform(self) -> str:
        """:func:`fedala_lab.numerics.platform_id` of the device this config runs on here (``device`` resolved;
        a device this machine lacks is named as asked, ``"<device>:absent"``)."""
        from .compute.device import resolve_device

        try:
            device = resolve_device(self.device)
        except ConfigError:
            return f"{self.device}:absent"
        return platform_id(device)

    def key(self) -> str:
        """12 hex digits of the SHA-256 of the canonical config and of :meth:`code`: same key ⇒ same result.
        The data enters by its config (a custom or ``pfllib:`` data set by its content hash, taken when the
        run is asked for), a custom model by its code, architecture and initial weights."""
        blob = json.dumps({**self.canonical(), "code": self.code()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def slug(self) -> str:
        """A readable folder prefix, e.g. ``fedala-digits-dirichlet0.1-n20-r50-s0``."""
        data = self.data
        ds = data.dataset
        if data.is_pfllib:
            ds = "pfllib-" + Path(data.directory).name
        elif data.is_pool:
            ds = "pool-" + Path(data.pool_dir).name
        elif data.is_custom:
            ds = "custom-" + ds.split(":", 1)[1]
        part = "" if data.comes_partitioned else {
            "iid": "-iid",
            "pathological": f"-pat{data.classes_per_client}",
            "dirichlet": f"-dir{data.beta:g}",
        }[data.partition]
        algo = self.algo.replace("+", "_")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in ds)
        return f"{algo}-{safe}{part}-n{data.num_clients}-r{self.rounds}-s{self.seed}"


class HorizonWatched(RunConfig):
    """A run's config as its algorithm sees it (``setup.cfg``, ``rnd.cfg``): the same values, and a note of
    whether the algorithm read ``rounds``, the run's total. Round t of a run that never reads it depends on the
    earlier rounds only, so the run store may continue it to more rounds or cut it to fewer; a run that read
    it is its own length (experiments/prefix.py refuses to branch another length from it). Reading it through
    a method of the config (``cfg.key()``, ``cfg.replace(…)``) counts too: safe, if imprecise."""

    def __getattribute__(self, name):
        if name == "rounds":
            object.__setattr__(self, "_horizon_read", True)
        return super().__getattribute__(name)

    @property
    def horizon_read(self) -> bool:
        return self.__dict__.get("_horizon_read", False)


def watch_horizon(cfg: RunConfig) -> HorizonWatched:
    """``cfg`` as a :class:`HorizonWatched`, nothing read yet."""
    watched = object.__new__(HorizonWatched)
    watched.__dict__.update({f.name: cfg.__dict__[f.name] for f in fields(RunConfig)})
    return watched


_MISSING = object()
_FIELDS = fields(RunConfig)
# Fields that change neither a run's result nor its identity (not in the key): where and how it runs, and
# what is recorded or kept besides the result. get_or_run(needs=…) recomputes a stored run lacking a recording.
RECORDING_FIELDS = ("device", "checkpoint_every", "threads", "track_clients", "snapshot_clients", "snapshot_from",
                    "record_train_loss", "keep_states")
_RUN_NAMES = frozenset(f.name for f in _FIELDS) - {"params"}
_DATA_NAMES = tuple(f.name for f in fields(DataConfig))
registry.reserve(_RUN_NAMES | set(_DATA_NAMES) | {"data_seed", "params"})


def setting_names() -> tuple[str, ...]:
    """Every name a setting can be given by (replace, from_dict, --set, sweep axes, spec files): the run's
    fields, the data's fields (routed into ``data``), ``data_seed`` (the partition seed; ``seed`` is the run's)
    and every registered algorithm's hyper-parameters."""
    return tuple(sorted((_RUN_NAMES - {"data"}) | set(_DATA_NAMES) | {"data_seed"} | set(registry.param_names())))


def describe_settings() -> str:
    """Every setting with its default, what is allowed and what it means: the run's, the data's, and each
    registered algorithm's hyper-parameters (what ``help(RunConfig)`` shows, as of now)."""
    algos = []
    for spec in registry.specs():
        if spec.params:
            algos.append(f"  {spec.label} ({spec.name}):\n{help_lines(spec.params)}")
    for name in ("ala", "finetune"):
        mod = registry.modifier(name)
        if mod is not None and mod.params:
            algos.append(f"  {mod.suffix} modifier:\n{help_lines(mod.params)}")
    return ("Run settings (RunConfig fields):\n" + help_lines(declared(RunConfig)[1:], "  ")
            + "\n\nData settings (DataConfig fields, also given flat: RunConfig.replace(num_clients=…)):\n"
            + help_lines(declared(DataConfig), "  ")
            + "\n\nAlgorithms' hyper-parameters (settings like the fields; only the algorithm's own enter its key):\n"
            + "\n".join(algos))


RunConfig.__doc__ = ("One simulated federated run (one algorithm, one seed): a frozen, validated value.\n\n"
                     "    RunConfig(algo=\"fedprox\", mu=0.01, rounds=100).replace(num_clients=50)\n\n"
                     + describe_settings())


def unknown_setting(name, value) -> ConfigError:
    """The error for a setting that does not exist, listing those that do."""
    return ConfigError(str(name), value, "a known setting; one of " + ", ".join(setting_names()))


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


# The most grid points one sweep may have (and values one axis may list): far above any experiment here, low
# enough that expanding and checking them (a few ms each) stays a matter of seconds, not minutes.
MAX_GRID_POINTS = 10_000


def parse_values(text: str, name: str) -> list:
    """A list of values written as text: ``"0,1,2"`` (each by :func:`parse_value`) or ``"0-4"`` (an integer
    range, both ends included), at most :data:`MAX_GRID_POINTS` of them. ``name`` is the setting the error
    names."""
    out: list = []
    for t in (t.strip() for t in text.split(",")):
        if not t:
            continue
        lo, sep, hi = t.partition("-")
        if sep and lo.isdigit() and hi.isdigit():
            if int(hi) < int(lo):
                raise ConfigError(name, t, "a range low-high with low <= high")
            n = len(out) + int(hi) - int(lo) + 1
            if n > MAX_GRID_POINTS:
                raise ConfigError(name, text, f"at most {MAX_GRID_POINTS:,} values (it lists {n:,}"
                                  f"{' or more' if t != text.strip() else ''}); split the sweep")
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
