"""Sample pools: every image of a dataset with its label, before any partitioning.

The paper's data pipeline (PFLlib's ``generate_mnist.py`` and friends, docs/design.md#data) merges the
official train and test sets into one pool, scales images to [−1, 1] (``Normalize([0.5], [0.5])`` on
[0, 1] pixels) and only then partitions the pool among clients. :func:`load_pool` returns such a pool;
the partition functions in :mod:`fedala_lab.data.partition` split it.

Sources:

- ``mnist_mini``: 3,000 real MNIST digits (300 per label) at 14×14, shipped inside the package
  (:mod:`fedala_lab.data.mnist_mini`: source, CC BY-SA 3.0 licence, how it was drawn). Works offline and
  instantly; the lecture's default (``preset("teach")``).
- ``digits``: scikit-learn's bundled 8×8 digits (1,797 images, pixel values 0..16). Works offline; the
  ``DataConfig`` default and the ``teach-digits`` preset. Neither is in the paper: they are stand-ins small
  enough for a laptop and for tests.
- ``mnist``, ``fashion_mnist``: the idx files in torchvision's layout ``<root>/MNIST/raw/`` and
  ``<root>/FashionMNIST/raw/``. They are read here (uncompressed or ``.gz``), so a half-finished
  torchvision extraction still loads; torchvision (which wants the uncompressed files) is used only to
  download.
- ``cifar10``, ``cifar100``: the official python batches in ``<root>/cifar-10-batches-py/`` and
  ``<root>/cifar-100-python/``. Departure from torchvision: they are unpickled with the restricted
  unpickler of :mod:`fedala_lab.data.pfllib` (torchvision uses plain ``pickle.load``, which runs whatever
  a tampered file asks for), and md5 sums are not checked (a file is validated by its shapes instead).
  CIFAR-100 uses the 100 fine labels, as PFLlib does.
- ``pfllib-pool:<dir>``: every train and test image of a PFLlib partition directory pooled again, so that
  it can be partitioned afresh. The shared MNIST Dir(0.1) partition holds all 70,000 MNIST images, so
  ``pfllib-pool:<that dir>`` with ``partition="pathological"`` gives the paper's MNIST pathological
  setting (Table 2, Fig. 4) without torchvision's files. Order: client 0's train rows, its test rows,
  then client 1's…, so the pool (and every partition drawn from it) is fixed by the directory.

Nothing touches the network unless ``download=True``; a missing or failed download is one
:class:`~fedala_lab.errors.DataError` that names the folder and the files expected there.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError, FilesMissing
from .config import default_data_root, pool_directory
from .pfllib import restricted_load

SOURCES = ("digits", "mnist_mini", "mnist", "fashion_mnist", "cifar10", "cifar100")


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value, compare by identity
class Pool:
    """All samples of a dataset before partitioning."""

    name: str
    x: np.ndarray  # (N, C, H, W) float32, values in [-1, 1]
    y: np.ndarray  # (N,) int64
    num_classes: int
    class_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.y)


def load_pool(name: str, *, root: str | None = None, download: bool = False,
              resize: int | None = None) -> Pool:
    """Load dataset ``name`` as one pool (train and test merged, images in [−1, 1]).

    ``root`` is the torchvision data folder (``None``: :func:`fedala_lab.data.config.default_data_root`);
    ``download=True`` lets torchvision fetch missing files; ``resize=k`` bilinearly resizes every image to
    k×k (e.g. 28 puts the 8×8 digits through the paper's MNIST CNN).
    """
    pooled = pool_directory(name)
    if name not in SOURCES and pooled is None:
        hint = "pfllib: directories are read with fedala_lab.data.pfllib.load_pfllib" if (
            isinstance(name, str) and name.startswith("pfllib:")) else ""
        raise ConfigError("dataset", name, "one of " + ", ".join(SOURCES) + " or pfllib-pool:<directory>", hint)
    if resize is not None and (not isinstance(resize, int) or isinstance(resize, bool) or resize < 1):
        raise ConfigError("resize", resize, "a positive integer (image side in pixels) or None")
    root_path = Path(root if root is not None else default_data_root()).expanduser()
    if pooled is not None:
        pool = pfllib_pool(pooled)
    elif name == "digits":
        pool = _digits()
    elif name == "mnist_mini":
        pool = _mnist_mini()
    elif name in ("mnist", "fashion_mnist"):
        pool = _mnist_like(name, root_path, download)
    else:
        pool = _cifar(name, root_path, download)
    if resize is not None and pool.x.shape[-2:] != (resize, resize):
        pool = Pool(pool.name, resize_images(pool.x, resize), pool.y, pool.num_classes, pool.class_names)
    return pool


def resize_images(x: np.ndarray, size: int, *, chunk: int = 8192) -> np.ndarray:
    """Bilinear resize of (N, C, H, W) images to size×size, clipped back to [−1, 1].

    ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``, in chunks so that a
    70,000-image pool does not need a second full-size float copy at once.
    """
    import torch
    import torch.nn.functional as F

    out = np.empty((len(x), x.shape[1], size, size), dtype=np.float32)
    with torch.no_grad():
        for s in range(0, len(x), chunk):
            t = torch.from_numpy(np.ascontiguousarray(x[s:s + chunk], dtype=np.float32))
            r = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False)
            out[s:s + chunk] = r.clamp_(-1.0, 1.0).numpy()
    return out


def _scale_uint8(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 pixels 0..255 → float32 in [−1, 1] (x/255·2 − 1, i.e. Normalize(0.5, 0.5) after ToTensor)."""
    out = np.empty(a.shape, np.float32) if out is None else out
    # divide first: 255/255·2 − 1 is exactly 1.0 (multiplying by 2/255 overshoots it in float32)
    np.divide(a, np.float32(255.0), out=out, casting="unsafe")
    out *= np.float32(2.0)
    out -= np.float32(1.0)
    return out


# ------------------------------------------------------------------------------------------- digits


def _digits() -> Pool:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / np.float32(16.0) * np.float32(2.0) - np.float32(1.0))[:, None]
    return Pool("digits", np.ascontiguousarray(x), d.target.astype(np.int64), 10,
                tuple(str(int(c)) for c in d.target_names))


def _mnist_mini() -> Pool:
    from . import mnist_mini

    x, y = mnist_mini.load()
    return Pool("mnist_mini", _scale_uint8(x)[:, None], y.astype(np.int64), 10, _MNIST_CLASSES["mnist"])


# ---------------------------------------------------------------------------- pooled PFLlib partition


def pfllib_pool(directory: str | os.PathLike) -> Pool:
    """All images of a PFLlib partition directory as one pool (client by client, train then test).

    Read with :func:`fedala_lab.data.pfllib.load_pfllib` (restricted unpickler). The images are used as
    stored (PFLlib already scaled them to [−1, 1]).
    """
    from .pfllib import load_pfllib

    splits = load_pfllib(directory)
    parts = [p for i in range(splits.num_clients) for p in (splits.train[i], splits.test[i])]
    x = np.ascontiguousarray(np.concatenate([p[0] for p in parts]), dtype=np.float32)
    y = np.concatenate([p[1] for p in parts]).astype(np.int64)
    return Pool(f"pool-{splits.name}", x, y, splits.num_classes,
                tuple(str(i) for i in range(splits.num_classes)))


# -------------------------------------------------------------------------------- MNIST-like (idx)

_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_MNIST_FOLDER = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}  # torchvision's class names
_MNIST_CLASSES = {
    "mnist": tuple(str(i) for i in range(10)),
    "fashion_mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
}
_IDX_UBYTE = 0x08


def _find(folder: Path, fname: str) -> Path | None:
    for cand in (folder / fname, folder / (fname + ".gz")):
        if cand.is_file():
            return cand
    return None


def _mnist_folder(name: str, root: Path) -> Path:
    return root / _MNIST_FOLDER[name] / "raw"


def mnist_files_present(name: str = "mnist", root: str | os.PathLike | None = None) -> bool:
    """Whether all four idx files of ``name`` ("mnist" or "fashion_mnist") are in torchvision's layout
    under ``root`` (None: the default data root), plain or ``.gz``: :func:`load_pool` reads them offline."""
    folder = _mnist_folder(name, Path(root if root is not None else default_data_root()).expanduser())
    return all(_find(folder, f) is not None for f in _MNIST_FILES)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an unsigned-byte idx file (LeCun's MNIST format), plain or gzip-compressed.

    Header: two zero bytes, a type byte (0x08 = uint8), the number of dimensions, then one big-endian
    int32 per dimension; the data follows. Anything else is a ``DataError`` naming the file.
    """
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path} ({err})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != _IDX_UBYTE or data[3] == 0:
        raise DataError(f"{path} is not an unsigned-byte idx file (bad header {data[:4]!r})")
    ndim = data[3]
    head = 4 + 4 * ndim
    if len(data) < head:
        raise DataError(f"{path} is truncated (header)")
    shape = tuple(int(v) for v in np.frombuffer(data, ">i4", count=ndim, offset=4))
    if len(data) - head != int(np.prod(shape)):
        raise DataError(f"{path} holds {len(data) - head} bytes of data, its header says {shape}")
    return np.frombuffer(data, np.uint8, offset=head).reshape(shape)


def _mnist_like(name: str, root: Path, download: bool) -> Pool:
    folder = _mnist_folder(name, root)
    found = {f: _find(folder, f) for f in _MNIST_FILES}
    missing = [f for f, p in found.items() if p is None]
    if missing and download:
        _download(name, folder, _MNIST_FILES, lambda: _tv_mnist_download(name, root))
        found = {f: _find(folder, f) for f in _MNIST_FILES}
        missing = [f for f, p in found.items() if p is None]
    if missing:
        raise _missing_error(name, folder, _MNIST_FILES, missing, download,
                             note=" (uncompressed, or the same names with .gz)")
    xs, ys = [], []
    for split in ("train", "t10k"):  # train first, then test: the merged pool of the paper
        img_path, lab_path = found[f"{split}-images-idx3-ubyte"], found[f"{split}-labels-idx1-ubyte"]
        imgs, labs = read_idx(img_path), read_idx(lab_path)
        if imgs.ndim != 3 or labs.ndim != 1 or len(imgs) != len(labs):
            raise DataError(f"{img_path} ({imgs.shape}) and {lab_path} ({labs.shape}) do not match: "
                            "expected (n, H, W) images and n labels")
        xs.append(imgs)
        ys.append(labs)
    imgs = np.concatenate(xs)
    y = np.concatenate(ys).astype(np.int64)
    if y.size and y.max() >= 10:
        raise DataError(f"{folder}: labels must be 0..9, found {int(y.max())}")
    x = _scale_uint8(imgs)[:, None]
    return Pool(name, x, y, 10, _MNIST_CLASSES[name])


def _tv_mnist_download(name: str, root: Path) -> None:
    from torchvision import datasets

    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    cls(root=str(root), train=True, download=True)  # downloads all four files, reads the idx files only


# ----------------------------------------------------------------------------------- CIFAR batches

_CIFAR = {
    # name: folder, train files, test files, meta file, label key, class-name key
    "cifar10": ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",),
                "batches.meta", "labels", "label_names"),
    "cifar100": ("cifar-100-python", ("train",), ("test",), "meta", "fine_labels", "fine_label_names"),
}


def _str_keys(d: dict) -> dict:
    """The batches are Python-2 pickles: read with encoding='bytes' their keys are b'data' etc."""
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in d.items()}


def _load_batch_dict(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            obj = restricted_load(f, source=str(path), encoding="bytes")
    except OSError as err:
        raise DataError(f"cannot read {path} ({err})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path} holds {type(obj).__name__}, expected a CIFAR batch dict")
    return _str_keys(obj)


def _cifar(name: str, root: Path, download: bool) -> Pool:
    folder_name, train_files, test_files, meta_file, label_key, names_key = _CIFAR[name]
    folder = root / folder_name
    expected = train_files + test_files + (meta_file,)
    missing = [f for f in expected if not (folder / f).is_file()]
    if missing and download:
        _download(name, folder, expected, lambda: _tv_cifar_download(name, root))
        missing = [f for f in expected if not (folder / f).is_file()]
    if missing:
        raise _missing_error(name, folder, expected, missing, download)

    meta = _load_batch_dict(folder / meta_file)
    names = meta.get(names_key)
    if not isinstance(names, list) or not names:
        raise DataError(f"{folder / meta_file} has no list {names_key!r}")
    class_names = tuple(n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names)
    k = len(class_names)

    batches = []
    for fname in train_files + test_files:  # train then test, merged as in the paper
        path = folder / fname
        d = _load_batch_dict(path)
        data, labels = d.get("data"), d.get(label_key)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
                or data.shape[1] != 3 * 32 * 32:
            got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
            raise DataError(f"{path}: 'data' must be a uint8 array of shape (n, 3072), got {got}")
        try:
            labels = np.asarray(labels, dtype=np.int64)
        except (TypeError, ValueError):
            labels = None
        if labels is None or labels.ndim != 1 or len(labels) != len(data):
            raise DataError(f"{path}: {label_key!r} must list one label per image ({len(data)})")
        if labels.size and (labels.min() < 0 or labels.max() >= k):
            raise DataError(f"{path}: labels outside 0..{k - 1}")
        batches.append((data, labels))

    n = sum(len(b[1]) for b in batches)
    x = np.empty((n, 3, 32, 32), dtype=np.float32)
    s = 0
    for data, labels in batches:  # fill in place: CIFAR's float pool is ~740 MB, avoid a second copy
        _scale_uint8(data.reshape(-1, 3, 32, 32), out=x[s:s + len(data)])
        s += len(data)
    y = np.concatenate([b[1] for b in batches])
    return Pool(name, x, y, k, class_names)


def _tv_cifar_download(name: str, root: Path) -> None:
    # Only the verified archive download and extraction; torchvision's CIFAR constructor would
    # unpickle the batches with plain pickle afterwards, which we never do.
    from torchvision import datasets
    from torchvision.datasets.utils import download_and_extract_archive

    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    download_and_extract_archive(cls.url, download_root=str(root), filename=cls.filename, md5=cls.tgz_md5)


# ------------------------------------------------------------------------------------------ errors


def _download(name: str, folder: Path, expected, fetch) -> None:
    try:
        fetch()
    except Exception as err:  # noqa: BLE001 - network, mirror, md5, disk: one message, no traceback
        msg = " ".join(str(err).split())[:500]
        raise DataError(
            f"downloading {name} into {folder}{os.sep} failed ({type(err).__name__}: {msg}). Check the "
            f"network, or put the files {', '.join(expected)} in {folder}{os.sep} by hand"
        ) from None


def _missing_error(name: str, folder: Path, expected, missing, download: bool, note: str = "") -> FilesMissing:
    how = ("the download finished but they are still missing" if download else
           "pass download=True (CLI --download) to fetch them, or copy them there by hand")
    return FilesMissing(
        f"{name} files not found: {folder}{os.sep} must contain {', '.join(expected)}{note}; "
        f"missing: {', '.join(missing)}. {how[0].upper() + how[1:]}.", dataset=name, folder=str(folder)
    )
