"""DataConfig: which data, and how it is split among clients (docs/design.md#data).

A data set is named by what it holds, never by where it lies: the run key of a ``pfllib:<dir>`` partition
carries a SHA-256 of its files (``content``), not the folder's path, so the same files at two paths make one
key and changed files another; data given as arrays (``FederatedData.from_arrays``) is ``custom:<name>``
with the hash of its tensors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, DataError
from ..params import Bool, Choice, Float, Int, Optional, Rule, check_fields, param_field

DATASETS = ("digits", "mnist_mini", "mnist", "fashion_mnist", "cifar10", "cifar100")
PARTITIONS = ("iid", "pathological", "dirichlet")
PFLLIB_PREFIX = "pfllib:"
# "pfllib-pool:<dir>": every image of a PFLlib partition pooled, to be partitioned afresh (e.g. MNIST
# pathological from a Dir(0.1) partition's files when torchvision's MNIST is absent; data/sources.py).
POOL_PREFIX = "pfllib-pool:"
# "custom:<name>": clients' data given as arrays (FederatedData.from_arrays), known by its content hash.
CUSTOM_PREFIX = "custom:"
# Partition fields: meaningless for data that comes partitioned (a PFLlib directory, custom arrays).
PARTITION_FIELDS = ("partition", "beta", "classes_per_client", "balance", "least_samples", "train_ratio", "seed",
                    "max_tries")


def pool_directory(dataset) -> str | None:
    """The directory of a ``pfllib-pool:<dir>`` dataset name; None for any other name (or a bare prefix)."""
    return _after(dataset, POOL_PREFIX)


def pfllib_directory(dataset) -> str | None:
    """The directory of a ``pfllib:<dir>`` dataset name; None for any other name (or a bare prefix)."""
    return _after(dataset, PFLLIB_PREFIX)


def _after(dataset, prefix: str) -> str | None:
    if isinstance(dataset, str) and dataset.startswith(prefix) and len(dataset) > len(prefix):
        return dataset[len(prefix):]
    return None


def dataset_label(dataset: str) -> str:
    """A dataset name as text for indexes and notes: a partition folder by its name only
    (``pfllib:…/fedala-mnist-dir0.1``), since the folder is this machine's, not the result's."""
    for prefix in (PFLLIB_PREFIX, POOL_PREFIX):
        folder = _after(dataset, prefix)
        if folder is not None:
            return f"{prefix}…/{Path(folder).name}"
    return dataset


def default_data_root() -> str:
    """Where torchvision datasets live unless ``root=`` says otherwise (``$FEDALA_LAB_DATA`` wins)."""
    return os.environ.get("FEDALA_LAB_DATA", str(Path.home() / ".cache" / "fedala_lab" / "data"))


def _dataset_name(d) -> bool:
    return isinstance(d, str) and (d in DATASETS or any(_after(d, p) for p in (PFLLIB_PREFIX, POOL_PREFIX,
                                                                              CUSTOM_PREFIX)))


@dataclass(frozen=True)
class DataConfig:
    """Which data, and how it is split among clients (docs/design.md#data)."""

    dataset: str = param_field(
        "digits", Rule(_dataset_name, "one of " + ", ".join(DATASETS) + ", pfllib:<directory> or "
                       "pfllib-pool:<directory>"),
        "digits (scikit-learn, offline), mnist_mini (3,000 MNIST digits at 14×14 shipped with the package, "
        "offline: the teach preset's), a torchvision name, pfllib:<dir> (a PFLlib / FedALA partition directory, "
        "used as partitioned), pfllib-pool:<dir> (its images pooled and partitioned afresh) or custom:<name> "
        "(arrays given to FederatedData.from_arrays)")
    partition: str = param_field("dirichlet", Choice(PARTITIONS),
                                 "iid | pathological | dirichlet (PFLlib's \"pat\" and \"dir\"); unused for "
                                 "data that comes partitioned")
    num_clients: int = param_field(20, Int(1), "number of clients N")
    beta: float = param_field(0.1, Float(0, lo_open=True), "Dirichlet concentration: small = each client sees "
                              "few labels (paper: 0.1)")
    classes_per_client: int = param_field(2, Int(1), "pathological: labels per client (paper: 2 for "
                                          "MNIST/Cifar10, 10 for Cifar100)")
    balance: bool = param_field(False, Bool(), "pathological: equal shares of a class among its clients "
                                "(PFLlib's balance flag) instead of random ones")
    least_samples: int | None = param_field(None, Optional(Int(1)), "Dirichlet: redraw until every client has "
                                            "this many samples; pathological: a random share is at least this "
                                            "÷ the number of classes; none = min(40, N / clients / 2)")
    train_ratio: float = param_field(0.75, Float(0, 1, lo_open=True, hi_open=True),
                                     "fraction of each client's samples used for training; the rest is its test "
                                     "split (paper: 0.75)")
    # Kept apart from the run seed so that the seeds of a table share one partition, as in the paper
    # (PFLlib generates its data once, with seed 1).
    seed: int = param_field(1, Int(0), "seed of the partition itself (the run's seed is RunConfig.seed)")
    resize: int | None = param_field(None, Optional(Int(4, 512)), "resize images to resize×resize (e.g. 28 "
                                     "puts the 8×8 digits through the paper's MNIST CNN)")
    root: str | None = param_field(None, Optional(Rule(lambda v: isinstance(v, str), "a folder")),
                                   "torchvision data folder (none: $FEDALA_LAB_DATA or ~/.cache/fedala_lab/data); "
                                   "never part of the key")
    download: bool = param_field(False, Bool(), "let torchvision download missing files; off by default: nothing "
                                 "touches the network unasked")
    # Draws are cheap; digits with 20 clients at β = 0.1 succeeds on a small fraction of draws.
    max_tries: int = param_field(100_000, Int(1), "Dirichlet redraws before giving up with an error (the "
                                 "reference loops forever)")
    content: str | None = param_field(
        None, Optional(Rule(lambda v: isinstance(v, str) and len(v) >= 12, "a content hash (hex)")),
        "SHA-256 (hex) of the data's files or tensors: filled in for pfllib: and pfllib-pool: directories when "
        "the config is made, and for custom: data; it, not a path, names the data in the run key")

    def __post_init__(self):
        check_fields(self)
        if self.is_custom and self.content is None:
            raise ConfigError("content", None, "the content hash of custom data",
                              "custom:<name> data is made by FederatedData.from_arrays; pass it as data=")
        if self.content is None and self.directory is not None and Path(self.directory).expanduser().is_dir():
            # hashed now; a folder that is missing is said so by whoever reads the data (a preset, the loader)
            object.__setattr__(self, "content", directory_content(self.directory))

    def replace(self, **changes) -> DataConfig:
        """A copy with changes (validated); another ``dataset`` drops the old content hash (it is recomputed)."""
        if "dataset" in changes and "content" not in changes and changes["dataset"] != self.dataset:
            changes["content"] = None
        return dataclasses.replace(self, **changes)

    @property
    def is_pfllib(self) -> bool:
        """Data that comes partitioned from a PFLlib directory (``pfllib:<dir>``)."""
        return pfllib_directory(self.dataset) is not None

    @property
    def pool_dir(self) -> str | None:
        """The PFLlib directory pooled by a ``pfllib-pool:<dir>`` dataset, else None."""
        return pool_directory(self.dataset)

    @property
    def is_pool(self) -> bool:
        return self.pool_dir is not None

    @property
    def is_custom(self) -> bool:
        return self.dataset.startswith(CUSTOM_PREFIX)

    @property
    def directory(self) -> str | None:
        """The folder a ``pfllib:`` or ``pfllib-pool:`` dataset reads, else None."""
        return pfllib_directory(self.dataset) or pool_directory(self.dataset)

    @property
    def comes_partitioned(self) -> bool:
        """Whether the clients' splits are given (a PFLlib directory, custom arrays): no partition fields apply."""
        return self.is_pfllib or self.is_custom

    @property
    def short_name(self) -> str:
        """The dataset without its folder (:func:`dataset_label`): ``pfllib:…/fedala-mnist-dir0.1``, ``mnist``."""
        return dataset_label(self.dataset)

    def canonical(self) -> dict:
        """The fields that decide the clients' data: no folder, no download switch, and only the partition
        fields a partition uses; a directory or custom data is named by its content hash, not by its name or
        where it lies (the run store keeps the same content under two names once: RunStore.dir_for)."""
        d = dataclasses.asdict(self)
        for k in ("root", "download"):
            d.pop(k)
        if self.directory is not None or self.is_custom:
            d["dataset"] = self.dataset.split(":", 1)[0]  # pfllib, pfllib-pool or custom: the content names it
        else:
            d.pop("content")
        if self.comes_partitioned:
            for k in PARTITION_FIELDS:
                d.pop(k)
            if self.is_custom:
                d.pop("resize")
        else:
            if self.partition != "dirichlet":
                d.pop("beta"), d.pop("max_tries")
            if self.partition == "iid":  # the pathological split sizes its clients by it too
                d.pop("least_samples")
            if self.partition != "pathological":
                d.pop("classes_per_client"), d.pop("balance")
        return d

    def same_data(self, other: DataConfig) -> bool:
        """Whether ``other`` describes the same clients' data (folders and download switches aside)."""
        return isinstance(other, DataConfig) and self.canonical() == other.canonical()


# ---------------------------------------------------------------------------------------- content hashes

_CONTENT_CACHE: dict[tuple, str] = {}


def directory_content(directory: str | os.PathLike) -> str:
    """SHA-256 (hex) of a data directory's files: their paths relative to it and their bytes, in sorted
    order. Remembered per (folder, files' sizes and modification times), so a config is cheap to remake."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise DataError(f"data folder {root} does not exist (or is not a folder): it should hold a PFLlib "
                        "partition (train/ and test/ with one .npz per client, and config.json)")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    stamp = (str(root.resolve()), tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                                        for p in files))
    hit = _CONTENT_CACHE.get(stamp)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root).as_posix()).encode() + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    _CONTENT_CACHE[stamp] = digest = h.hexdigest()
    return digest
