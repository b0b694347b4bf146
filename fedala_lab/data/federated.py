"""FederatedData: every client's train and test split, placed on the device once.

All clients' train rows live in one tensor (``train_x``), client i owning rows
``train_offsets[i]:train_offsets[i+1]``; the same for test. The engine indexes these tensors directly, so
data is never re-read or copied per round (the reference re-reads npz files from disk every round).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..errors import ConfigError, DataError
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
    source: DataConfig | None = None

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_arrays(cls, train, test, num_classes: int, *, name: str = "custom", class_names=None,
                    device: str | torch.device = "cpu") -> FederatedData:
        """Build from per-client ``[(x, y), …]`` lists (numpy or torch) for train and test.

        Images (any float or small integer pixels) become float32; integer inputs of a text model (token ids,
        int32/int64) stay int64. A run on such data is keyed by its content (:meth:`fingerprint`), never by a
        path: ``simulate(cfg, data=fd)`` and ``get_or_run(cfg, data=fd)`` store it as ``custom:<name>``."""
        if len(train) != len(test):
            raise ConfigError("test", f"{len(test)} clients", f"as many clients as train ({len(train)})")
        if not train:
            raise ConfigError("num_clients", 0, "at least 1 client")
        for split, parts in (("train", train), ("test", test)):
            for i, part in enumerate(parts):
                check_finite(part[0], f"{name}: client {i}'s {split} images")

        def cat(parts, i):
            return torch.as_tensor(np.concatenate([np.asarray(p[i]) for p in parts]))

        def offsets(parts):
            return np.concatenate([[0], np.cumsum([len(p[1]) for p in parts])]).astype(np.int64)

        def inputs(t: torch.Tensor) -> torch.Tensor:
            return t.long() if t.dtype in (torch.int32, torch.int64) else t.float()

        dev = torch.device(device)
        return cls(
            name=name, num_classes=int(num_classes),
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
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
        if cfg.is_custom:
            raise ConfigError("dataset", cfg.dataset, "a data set fedala_lab can load",
                              "custom: data exists only as arrays: pass it as data= (FederatedData.from_arrays)")
        data = _build(cfg, device)
        data.source = cfg
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
                              self.test_x.to(dev), self.test_y.to(dev), self.test_offsets, self.source)
        moved._fingerprint = getattr(self, "_fingerprint", None)
        return moved

    # -- identity ----------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """SHA-256 (hex) of what the clients hold: every tensor's dtype, shape and values, the split offsets
        and the number of classes. Computed once (the tensors are treated as read-only)."""
        hit = getattr(self, "_fingerprint", None)
        if hit is None:
            import hashlib

            h = hashlib.sha256(f"{self.num_classes}|".encode())
            for t in (self.train_x, self.train_y, self.test_x, self.test_y):
                c = t.detach().cpu().contiguous()
                h.update(f"{c.dtype}|{tuple(c.shape)}|".encode())
                h.update(c.numpy().tobytes())
            for off in (self.train_offsets, self.test_offsets):
                h.update(np.asarray(off, dtype=np.int64).tobytes())
            hit = self._fingerprint = h.hexdigest()
        return hit

    def config(self) -> DataConfig:
        """The DataConfig that names this data: the one it was built from, else ``custom:<name>`` with its
        content hash."""
        if self.source is not None:
            return self.source
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name) or "data"
        return DataConfig(dataset=CUSTOM_PREFIX + safe, num_clients=self.num_clients, content=self.fingerprint())


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
