"""FederatedData: every client's train and test split, placed on the device once.

All clients' train rows live in one tensor (``train_x``), client i owning rows
``train_offsets[i]:train_offsets[i+1]``; the same for test. The engine indexes these tensors directly, so
data is never re-read or copied per round (the reference re-reads npz files from disk every round).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..errors import ConfigError, DataError
from ..fingerprint import content_hash
from .config import CUSTOM_PREFIX, DataConfig, directory_content
from .pfllib import check_finite


@dataclass(eq=False)
class FederatedData:
    name: str
    num_classes: int
    class_names: tuple[str, ...]
    train_x: torch.Tensor  # (N_train, *input_shape), all clients concatenated
    train_y: torch.Tensor  # (N_train,) int64
    train_offsets: np.ndarray  # (num_clients + 1,)
    test_x: torch.Tensor
    test_y: torch.Tensor
    test_offsets: np.ndarray
    # the DataConfig this data was built from (None: given as arrays); a run on it keeps its config's key
    # while the content is still what was built (``built``: its content hash then), see :meth:`config`
    source: DataConfig | None = None
    built: str | None = None

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_arrays(cls, train, test, num_classes: int, *, name: str = "custom", class_names=None,
                    device: str | torch.device = "cpu") -> FederatedData:
        """Build from per-client ``[(x, y), …]`` lists (numpy or torch) for train and test.

        Images (any float or small integer pixels) become float32; integer inputs of a text model (token ids,
        int32/int64) stay int64. A run on such data is keyed by its content (:meth:`fingerprint`), never by a
        path: ``simulate(cfg, data=fd)`` and ``get_or_run(cfg, data=fd)`` store it as ``custom:<name>``."""
        num_classes = _checked_num_classes(num_classes)
        train, test = _checked_clients(train, test, num_classes, name)
        if class_names and len(class_names) != num_classes:
            raise ConfigError("class_names", tuple(class_names), f"one name per class: {num_classes} names "
                              f"(num_classes={num_classes})")

        def cat(parts, i):
            return torch.as_tensor(np.concatenate([p[i] for p in parts]))

        def offsets(parts):
            return np.concatenate([[0], np.cumsum([len(p[1]) for p in parts])]).astype(np.int64)

        def inputs(t: torch.Tensor) -> torch.Tensor:
            return t.long() if t.dtype in (torch.int32, torch.int64) else t.float()

        dev = torch.device(device)
        return cls(
            name=name, num_classes=num_classes,
            class_names=tuple(class_names) if class_names else tuple(str(i) for i in range(num_classes)),
            train_x=inputs(cat(train, 0)).to(dev), train_y=cat(train, 1).long().to(dev),
            train_offsets=offsets(train),
            test_x=inputs(cat(test, 0)).to(dev), test_y=cat(test, 1).long().to(dev),
            test_offsets=offsets(test),
        )

    @classmethod
    def from_config(cls, cfg: DataConfig, device: str | torch.device = "cpu") -> FederatedData:
        """Load the source, partition it (unless it is a PFLlib directory) and place it on ``device``.

        Results are memoised per (config, device): the app and notebooks rebuild the same data often.
        """
        if cfg.directory is not None and directory_content(cfg.directory) != cfg.content:
            raise DataError(f"the files in {cfg.directory} changed since this config was made (their content hash "
                            "differs): make the config again to use them as they are now")
        key = (_data_key(cfg), str(device))
        hit = _CACHE.get(key)
        if hit is not None and hit.fingerprint() == hit.built:  # edited in place by a caller: build afresh
            _CACHE.move_to_end(key)
            return hit
        if cfg.is_custom:
            raise ConfigError("dataset", cfg.dataset, "a data set fedala_lab can load",
                              "custom: data exists only as arrays: pass it as data= (FederatedData.from_arrays)")
        data = _build(cfg, device)
        data.source, data.built = cfg, data.fingerprint()
        _CACHE[key] = data
        while len(_CACHE) > 4:
            _CACHE.popitem(last=False)
        return data

    # -- facts -------------------------------------------------------------------------------------

    @property
    def num_clients(self) -> int:
        return len(self.train_offsets) - 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    @property
    def train_sizes(self) -> np.ndarray:
        return np.diff(self.train_offsets)

    @property
    def test_sizes(self) -> np.ndarray:
        return np.diff(self.test_offsets)

    def client_train(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.train_offsets[i], self.train_offsets[i + 1]
        return self.train_x[a:b], self.train_y[a:b]

    def client_test(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.test_offsets[i], self.test_offsets[i + 1]
        return self.test_x[a:b], self.test_y[a:b]

    def client(self, i: int) -> FederatedData:
        """Client ``i``'s data alone, as data of one client (views of these tensors): what it holds in a
        federation (engine/sides.py)."""
        (a, b), (c, d) = self.train_offsets[i:i + 2], self.test_offsets[i:i + 2]
        return FederatedData(self.name, self.num_classes, self.class_names, self.train_x[a:b], self.train_y[a:b],
                             np.array([0, b - a]), self.test_x[c:d], self.test_y[c:d], np.array([0, d - c]))

    def label_counts(self) -> pd.DataFrame:
        """Tidy counts: one row per (client, split, label) with count > 0 (the Fig. 6–9 data)."""
        rows = []
        for split, y, off in (("train", self.train_y, self.train_offsets),
                              ("test", self.test_y, self.test_offsets)):
            y_np = y.cpu().numpy()
            for c in range(self.num_clients):
                counts = np.bincount(y_np[off[c]:off[c + 1]], minlength=self.num_classes)
                for label in np.flatnonzero(counts):
                    rows.append((c, split, int(label), int(counts[label])))
        return pd.DataFrame(rows, columns=["client", "split", "label", "count"])

    def labels_held(self, client: int, split: str = "train") -> list[int]:
        """The labels ``client`` holds samples of in ``split`` ("train" or "test")."""
        y, off = (self.train_y, self.train_offsets) if split == "train" else (self.test_y, self.test_offsets)
        return sorted(int(v) for v in np.unique(y[off[client]:off[client + 1]].cpu().numpy()))

    def summary(self, counts: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per client: train and test sizes and number of distinct labels.

        ``counts``: this data's label counts if already computed, so they are not counted again: the frame
        of :meth:`label_counts` or a DataDistributionDisplay's ``counts_`` (split "all").
        """
        counts = self.label_counts() if counts is None else counts
        labels = counts.groupby("client")["label"].nunique()
        return pd.DataFrame({
            "client": np.arange(self.num_clients),
            "train": self.train_sizes, "test": self.test_sizes,
            "labels": labels.reindex(range(self.num_clients), fill_value=0).to_numpy(),
        })

    def to(self, device) -> FederatedData:
        dev = torch.device(device)
        if dev == self.device:
            return self
        moved = FederatedData(self.name, self.num_classes, self.class_names,
                              self.train_x.to(dev), self.train_y.to(dev), self.train_offsets,
                              self.test_x.to(dev), self.test_y.to(dev), self.test_offsets, self.source, self.built)
        return moved

    # -- identity ----------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """SHA-256 (hex) of what the clients hold: every tensor's dtype, shape and values, the split offsets
        and the number of classes. Never remembered on the object: the tensors can be edited in place, and a run
        must be stored under the data it ran on; hashed once per call that gets a run
        (:func:`~fedala_lab.fingerprint.hashed_once_per_call`), at every other call."""
        return content_hash(self, "data", self._hash)

    def _hash(self) -> str:
        import hashlib

        h = hashlib.sha256(f"{self.num_classes}|".encode())
        for t in (self.train_x, self.train_y, self.test_x, self.test_y):
            c = t.detach().cpu().contiguous()
            h.update(f"{c.dtype}|{tuple(c.shape)}|".encode())
            h.update(c.numpy().tobytes())
        for off in (self.train_offsets, self.test_offsets):
            h.update(np.asarray(off, dtype=np.int64).tobytes())
        return h.hexdigest()

    def config(self) -> DataConfig:
        """The DataConfig that names this data as it is now: the one it was built from while its content is
        what was built, else ``custom:<name>`` with its content hash (data edited in place after
        :meth:`from_config` is ``custom:<dataset>-edited``)."""
        name, content = self.name, self.fingerprint()
        if self.source is not None:
            if content == self.built:
                return self.source
            name = f"{self.source.dataset.split(':')[-1]}-edited"
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "data"
        return DataConfig(dataset=CUSTOM_PREFIX + safe, num_clients=self.num_clients, content=content)


def _checked_num_classes(num_classes) -> int:
    """``num_classes`` as an int, or a ConfigError: a whole number >= 1 (never 3.7 read as 3)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
        raise ConfigError("num_classes", num_classes, "an integer >= 1 (the number of labels; labels are "
                          "0 … num_classes-1)")
    return int(num_classes)


def _checked_clients(train, test, num_classes: int, name: str):
    """``train`` and ``test`` as lists of numpy ``(x, y)`` pairs, y int64, checked before anything is built.

    One DataError naming the split, the client and what is allowed for each way a client's arrays can be wrong:
    x and y of different row counts (their rows would shift onto the next client), x not numbers or of another
    feature shape than the first client's, NaN or infinite x, labels that are not whole numbers in
    ``0 … num_classes-1`` (0.5 is refused, never truncated)."""
    for arg, parts in (("train", train), ("test", test)):
        if isinstance(parts, (np.ndarray, torch.Tensor)):  # one client's x (or all rows) instead of the list
            raise ConfigError(arg, f"an array of shape {tuple(parts.shape)}", "a list with one (x, y) pair per client")
        if isinstance(parts, (str, bytes)) or not hasattr(parts, "__len__"):
            raise ConfigError(arg, type(parts).__name__, "a list with one (x, y) pair per client")
    if len(train) != len(test):
        raise ConfigError("test", f"{len(test)} clients", f"as many clients as train ({len(train)})")
    if not len(train):
        raise ConfigError("num_clients", 0, "at least 1 client")
    shape, out = None, {}
    for split, parts in (("train", train), ("test", test)):
        out[split] = []
        for i, part in enumerate(parts):
            where = f"{name}: {split}[{i}] (client {i}'s {split} data)"
            if isinstance(part, (str, bytes)) or not hasattr(part, "__len__") or len(part) != 2:
                size = f" of length {len(part)}" if hasattr(part, "__len__") else ""
                raise DataError(f"{where} is not an (x, y) pair but a {type(part).__name__}{size}; each client "
                                "is an (x, y) pair of arrays")
            x, y = (_numpy(v, f"{where}: {k}") for k, v in zip("xy", part))
            if x.dtype.kind not in "biuf":
                raise DataError(f"{where}: x holds {x.dtype} values; x must hold numbers (float pixels or "
                                "integer token ids)")
            if x.ndim < 1:
                raise DataError(f"{where}: x is a single value; x must be an array of rows, one per sample")
            if y.ndim != 1 or len(y) != len(x):
                raise DataError(f"{where}: y has shape {y.shape} but x has {len(x)} rows; y must hold one label "
                                "per row of x")
            if len(x):  # an empty client ([] or (0, …)) takes the others' shape
                if shape is None:
                    shape, kind, first = x.shape[1:], x.dtype, f"{split}[{i}]"
                elif x.shape[1:] != shape:
                    raise DataError(f"{where}: x's rows have shape {x.shape[1:]} but {first}'s have {shape}; "
                                    "every client's samples must have one shape")
            check_finite(x, f"{name}: client {i}'s {split} images")  # the words of the pfllib loader's check
            out[split].append((x, _labels(y, num_classes, where)))
    if shape is None:
        raise DataError(f"{name}: no client holds a sample; give at least one (x, y) pair with rows")
    return tuple([(x if len(x) else x.astype(kind).reshape(0, *shape), y) for x, y in out[split]]
                 for split in ("train", "test"))


def _numpy(v, where: str) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    try:
        return np.asarray(v)
    except (TypeError, ValueError) as err:  # a ragged list of rows
        raise DataError(f"{where} is not an array of numbers: its rows differ in length or type ("
                        f"{str(err).split('.')[0]})") from None


def _labels(y: np.ndarray, num_classes: int, where: str) -> np.ndarray:
    """``y`` as int64 labels, or a DataError: whole numbers in 0 … num_classes-1."""
    allowed = f"labels must be whole numbers from 0 to {num_classes - 1} (num_classes={num_classes})"
    if y.dtype.kind not in "biuf":
        raise DataError(f"{where}: y holds {y.dtype} values; {allowed}")
    if y.dtype.kind == "f":
        frac = ~np.isfinite(y) | (y != np.round(y))
        if frac.any():
            raise DataError(f"{where}: label {y[frac][0].item()!r} (row {int(np.flatnonzero(frac)[0])}) is not a whole "
                            f"number; {allowed}")
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where}: label {y[row].item()!r} (row {row}) is out of range; {allowed}")
    return y.astype(np.int64)


_CACHE: OrderedDict[tuple, FederatedData] = OrderedDict()


def _data_key(cfg: DataConfig) -> str:
    import json

    d = {k: v for k, v in cfg.__dict__.items() if k not in ("download",)}
    return json.dumps(d, sort_keys=True, default=str)


def _build(cfg: DataConfig, device) -> FederatedData:
    if cfg.is_pfllib:
        from .pfllib import load_pfllib

        splits = load_pfllib(cfg.directory)
        train, test = splits.train, splits.test
        if cfg.resize:
            train = [(_resize(x, cfg.resize), y) for x, y in train]
            test = [(_resize(x, cfg.resize), y) for x, y in test]
        if cfg.num_clients != len(train):
            raise ConfigError("num_clients", cfg.num_clients,
                              f"{len(train)}, the number of clients in {cfg.directory}")
        return FederatedData.from_arrays(train, test, splits.num_classes, name=splits.name, device=device)

    from .sources import load_pool

    pool = load_pool(cfg.dataset, root=cfg.root, download=cfg.download, resize=cfg.resize)
    n = len(pool.y)
    if cfg.num_clients > n:
        raise ConfigError("num_clients", cfg.num_clients, f"at most the {n} samples of {cfg.dataset}")
    train_idx, test_idx = split_indices(cfg, pool.y)
    train = [(pool.x[i], pool.y[i]) for i in train_idx]
    test = [(pool.x[i], pool.y[i]) for i in test_idx]
    return FederatedData.from_arrays(train, test, pool.num_classes, name=pool.name,
                                     class_names=pool.class_names, device=device)


def split_indices(cfg: DataConfig, labels: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's train and test indices into ``labels`` under ``cfg``'s partition (labels only: the app
    checks which numbers of clients a split can serve without building the data)."""
    from . import partition as part

    rng = np.random.default_rng(cfg.seed)
    if cfg.partition == "iid":
        parts = part.iid(labels, cfg.num_clients, rng)
    elif cfg.partition == "pathological":
        parts = part.pathological(labels, cfg.num_clients, cfg.classes_per_client, rng, balance=cfg.balance,
                                  least_samples=cfg.least_samples)
    else:
        parts = part.dirichlet(labels, cfg.num_clients, cfg.beta, rng, least_samples=cfg.least_samples,
                               max_tries=cfg.max_tries)
    return part.split_train_test(parts, cfg.train_ratio, rng)


def _resize(x: np.ndarray, size: int) -> np.ndarray:
    t = torch.nn.functional.interpolate(torch.as_tensor(x), size=(size, size), mode="bilinear",
                                        align_corners=False)
    return t.clamp_(-1, 1).numpy()
