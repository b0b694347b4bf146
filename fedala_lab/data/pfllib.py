"""Read partitions written by PFLlib or the FedALA repository, without trusting their pickles.

PFLlib's generator (``dataset/utils/dataset_utils.py: save_file``) writes one file per client and split,
``np.savez_compressed(f, data={'x': X, 'y': y})``: the member ``data.npy`` is a 0-d *object* array, so its
payload is a pickle. The reference reads it back with ``np.load(..., allow_pickle=True)``, which runs any
code a tampered file asks for. Here the ``.npy`` member is parsed by hand and its pickle is fed to
:class:`RestrictedUnpickler`, which rebuilds numpy arrays, dtypes and scalars and refuses every other
global with :class:`~fedala_lab.errors.UnsafeFileError` (docs/design.md#data).

Layout (docs/design.md#data)::

    <dir>/config.json                 num_clients, num_classes, per-client label counts (optional here)
    <dir>/train/{i}.npz               PFLlib naming
    <dir>/train/train{i}_.npz         FedALA repository naming
    <dir>/test/{i}.npz | test/test{i}_.npz

Departures from the reference loader: nothing is unpickled beyond numpy arrays; a missing ``config.json``
is tolerated (client count and class count are inferred from the files and labels); every problem is a
:class:`~fedala_lab.errors.DataError` that names the file.
"""

from __future__ import annotations

import builtins
import codecs
import io
import json
import math
import os
import pickle
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from ..errors import DataError, UnsafeFileError

try:  # numpy >= 2 keeps the implementation in numpy._core
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - numpy 1.26
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

class _ForgedArray(Exception):
    """Raised when a pickle calls ``numpy.ndarray`` itself; turned into ``UnsafeFileError`` by ``load``."""


class _PickledArray(np.ndarray):
    """What a pickle's ``numpy.ndarray`` global resolves to.

    Legitimate pickles only pass the type to ``_reconstruct`` (which builds the array without calling
    ``__new__``). Calling it, ``ndarray((1,), dtype=object, buffer=b"AAAAAAAA")``, would turn file bytes
    into object pointers (a crash at best), so ``__new__`` refuses. ``RestrictedUnpickler.load`` turns
    the arrays built from this type back into plain ``np.ndarray`` views.
    """

    def __new__(cls, *args, **kwargs):
        raise _ForgedArray()


# (module, name) -> object. Both module spellings occur: numpy 1.x and Python-2 era files (the CIFAR
# batches) say ``numpy.core.multiarray``, numpy 2 writes ``numpy._core.multiarray``. The objects are
# resolved here once, so no module named by a file is ever imported.
_ALLOWED: dict[tuple[str, str], object] = {}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_mod, "_reconstruct")] = _multiarray._reconstruct  # ndarray.__reduce__ (protocol <= 4)
    _ALLOWED[(_mod, "scalar")] = _multiarray.scalar  # numpy scalars such as np.int64(3)
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    # ndarray.__reduce_ex__(5): frombuffer(buf, dtype).reshape(shape); builds an array, nothing else.
    _ALLOWED[(_mod, "_frombuffer")] = _numeric._frombuffer
_ALLOWED[("numpy", "ndarray")] = _PickledArray  # usable by _reconstruct, refuses to be called
_ALLOWED[("numpy", "dtype")] = np.dtype
# Plain containers and bytes: protocol <= 2 pickles written by Python 3 spell bytes as
# _codecs.encode(str, 'latin1'), and sets/bytearrays as calls to their builtin types.
_ALLOWED[("_codecs", "encode")] = codecs.encode  # the same function as _codecs.encode
for _name in ("set", "frozenset", "bytearray"):
    _ALLOWED[("builtins", _name)] = getattr(builtins, _name)
    _ALLOWED[("__builtin__", _name)] = getattr(builtins, _name)  # Python 2 spelling
del _mod, _name


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays, dtypes, scalars and plain containers, nothing else.

    Dicts, lists, tuples, str, bytes, int, float, bool and None come from pickle opcodes and need no
    global; every global a pickle names is looked up in a fixed allow-list (numpy's ``_reconstruct``,
    ``_frombuffer``, ``ndarray``, ``dtype``, ``scalar`` in both ``numpy.core`` and ``numpy._core``
    spellings, plus ``_codecs.encode`` and ``set``/``frozenset``/``bytearray`` for old protocols). Anything
    else (``os.system``, ``builtins.eval``, ``subprocess.Popen``…) raises
    :class:`~fedala_lab.errors.UnsafeFileError` naming ``source`` and the refused global, before
    anything is called. Persistent ids are refused too, and so is calling ``numpy.ndarray`` directly
    (it can build object arrays over raw file bytes, i.e. forged pointers); numpy itself refuses object
    arrays from raw bytes in ``frombuffer`` and ``__setstate__``.
    """

    def __init__(self, file, *, source: str = "<pickle>", **kwargs):
        super().__init__(file, **kwargs)
        self.source = str(source)

    def find_class(self, module: str, name: str):
        obj = _ALLOWED.get((module, name))
        if obj is None:
            raise UnsafeFileError(
                f"{self.source} asks to load {module}.{name}; only numpy arrays are allowed "
                "(the file may have been tampered with; it was not executed)"
            )
        return obj

    def persistent_load(self, pid):
        raise UnsafeFileError(f"{self.source} uses a persistent id ({pid!r}); only numpy arrays are allowed")

    def load(self):
        try:
            obj = super().load()
        except _ForgedArray:
            raise UnsafeFileError(
                f"{self.source} calls numpy.ndarray(...) directly (a way to forge object pointers); "
                "only numpy arrays are allowed"
            ) from None
        return _plain(obj)


def _plain(obj):
    """Replace the ``_PickledArray`` instances ``_reconstruct`` made by plain ``np.ndarray`` views."""
    if isinstance(obj, np.ndarray):
        if type(obj) is not np.ndarray:
            obj = obj.view(np.ndarray)
        if obj.dtype == object:
            for idx in np.ndindex(obj.shape):
                obj[idx] = _plain(obj[idx])
        return obj
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_plain(v) for v in obj)
    return obj


def restricted_load(file, *, source: str = "<pickle>", encoding: str = "ASCII") -> object:
    """Unpickle one object from the binary ``file`` (or ``bytes``) with :class:`RestrictedUnpickler`.

    Forbidden globals raise ``UnsafeFileError``; a truncated or garbled pickle becomes ``DataError``.
    """
    if isinstance(file, (bytes, bytearray, memoryview)):
        file = io.BytesIO(file)
    try:
        return RestrictedUnpickler(file, source=source, encoding=encoding).load()
    except DataError:  # UnsafeFileError, or a reader's own (an unreadable file)
        raise
    except Exception as err:  # noqa: BLE001 - garbage can fail in any way; one clear message instead
        raise DataError(f"{source} holds a corrupt pickle ({type(err).__name__}: {err})") from None


def _read_npy_header(f, source: str):
    version = npformat.read_magic(f)
    if version == (1, 0):
        return npformat.read_array_header_1_0(f)
    if version == (2, 0):
        return npformat.read_array_header_2_0(f)
    reader = getattr(npformat, "_read_array_header", None)  # version 3.0 (utf-8 header), rare
    if reader is None:
        raise DataError(f"{source}: unsupported .npy format version {version}")
    return reader(f, version)


def safe_load_npz_object(path, key: str = "data", *, pickled: bool = False) -> object:
    """Return member ``key`` of the ``.npz`` at ``path`` without running code from it.

    An object array's pickle goes through :class:`RestrictedUnpickler`; a 0-d object array (what PFLlib
    writes) is unwrapped to the object it holds. A plain numeric member is returned as an array (never
    unpickled), or with ``pickled`` (the caller wants PFLlib's pickled dict) refused after its header.
    Missing file, bad zip, missing member or bad header → ``DataError``; a pickle that names a forbidden
    global → ``UnsafeFileError``.

    Nothing is read beyond what the member's header declares: a numeric member whose size disagrees
    with its header is refused before its data are read, and a pickle is read as it is unpickled (no
    copy of the whole member first), so a small file that inflates to hundreds of MB costs nothing.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DataError(f"{source} does not exist")
    member = key if key.endswith(".npy") else key + ".npy"
    try:
        with zipfile.ZipFile(path) as zf:
            if member not in zf.namelist():
                raise DataError(f"{source} has no member {key!r} (it holds {sorted(zf.namelist())})")
            info = zf.getinfo(member)
            with zf.open(info) as raw:
                return _read_member(_Member(raw, source), info.file_size, source, member, pickled)
    except DataError:
        raise
    except _UNREADABLE as err:
        raise DataError(_unreadable(source, err)) from None


# bad zip, bad deflate stream, encrypted, unknown method
_UNREADABLE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError, NotImplementedError)


def _unreadable(source: str, err: BaseException) -> str:
    return f"{source} is not a readable .npz file ({type(err).__name__}: {err})"


class _Member:
    """A zip member as the .npy header reader and the unpickler read it: bytes counted, and a damaged
    compressed stream turned into the DataError naming the file wherever the reader stands."""

    def __init__(self, raw, source: str):
        self._raw, self._source, self.pos = raw, source, 0

    def read(self, n: int = -1) -> bytes:
        return self._count(self._raw.read, n)

    def readline(self, n: int = -1) -> bytes:
        return self._count(self._raw.readline, n)

    def _count(self, fn, n: int) -> bytes:
        try:
            data = fn(n)
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError) as err:
            raise DataError(_unreadable(self._source, err)) from None
        self.pos += len(data)
        return data


def _read_member(f: _Member, size: int, source: str, member: str, pickled: bool) -> object:
    try:
        shape, fortran, dtype = _read_npy_header(f, source)
    except DataError:
        raise
    except (ValueError, SyntaxError, EOFError, OSError) as err:
        raise DataError(f"{source}: bad .npy header in {member!r} ({err})") from None
    if not dtype.hasobject:
        declared = math.prod(shape) * dtype.itemsize
        if size != f.pos + declared:
            raise DataError(f"{source}: {member!r} declares a {dtype} array of shape {shape} ({declared:,} bytes) "
                            f"but holds {size - f.pos:,} bytes of data")
        if pickled:
            raise DataError(f"{source} holds ndarray, expected a dict with 'x' and 'y' ({member!r} is a {dtype} "
                            f"array of shape {shape}, not the pickled dict PFLlib writes)")
        data = f.read(declared)
        if len(data) != declared:
            raise DataError(f"{source}: cannot read array {member!r} (truncated)")
        return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()
    # numpy writes object arrays as pickle.dump(array); latin1 also decodes Python-2 era pickles.
    obj = restricted_load(f, source=source, encoding="latin1")
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject and obj.shape == ():
        obj = obj.item()
    return obj


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value, compare by identity
class ClientSplits:
    """A ready-made federated partition: per client (x, y) train and test arrays."""

    name: str
    train: list[tuple[np.ndarray, np.ndarray]]  # per client (x float32, y int64)
    test: list[tuple[np.ndarray, np.ndarray]]
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.train)


_PATTERNS = {
    "train": (re.compile(r"^(\d+)\.npz$"), re.compile(r"^train(\d+)_\.npz$")),
    "test": (re.compile(r"^(\d+)\.npz$"), re.compile(r"^test(\d+)_\.npz$")),
}


def _client_files(directory: Path, split: str) -> dict[int, Path]:
    folder = directory / split
    if not folder.is_dir():
        raise DataError(
            f"{folder} is missing: a PFLlib partition needs {split}/{{i}}.npz or "
            f"{split}/{split}{{i}}_.npz files (docs/design.md#data)"
        )
    found: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        for pat in _PATTERNS[split]:  # PFLlib's name first, so it wins if both exist
            m = pat.match(p.name)
            if m and int(m.group(1)) not in found:
                found[int(m.group(1))] = p
    return found


def _read_client(path: Path, client: int) -> tuple[np.ndarray, np.ndarray]:
    obj = safe_load_npz_object(path, pickled=True)
    if not isinstance(obj, dict):
        raise DataError(f"{path} holds {type(obj).__name__}, expected a dict with 'x' and 'y'")
    obj = {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}
    missing = [k for k in ("x", "y") if k not in obj]
    if missing:
        raise DataError(f"{path} lacks {missing} (it holds keys {sorted(map(str, obj))})")
    try:
        x = np.asarray(obj["x"], dtype=np.float32)
        y = np.asarray(obj["y"])
    except (TypeError, ValueError) as err:
        raise DataError(f"{path}: 'x' is not a numeric array ({err})") from None
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or y.size == 0):
        raise DataError(f"{path}: 'y' must be a 1-d integer array, got {y.dtype} of shape {y.shape}")
    if x.ndim < 1 or len(x) != len(y):
        raise DataError(f"{path}: 'x' has {len(x) if x.ndim else 0} samples but 'y' has {len(y)}")
    check_finite(x, f"{path} (client {client})")
    return np.ascontiguousarray(x), y.astype(np.int64, copy=False)


def check_finite(x, where: str) -> None:
    """Refuse images with NaN or infinite pixels (``where`` names them): training on them would only end in a
    "diverged" run blamed on the learning rate."""
    bad = ~np.isfinite(x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x))  # numpy or torch
    if bad.any():
        rows = int(bad.reshape(len(bad), -1).any(axis=1).sum()) if bad.ndim else 1
        raise DataError(f"{where}: {int(bad.sum()):,} pixel value(s) in {rows:,} of its {len(bad):,} images are NaN "
                        "or infinite; images must hold finite numbers")


def load_pfllib(directory: str | os.PathLike) -> ClientSplits:
    """Load a PFLlib / FedALA-repository partition directory as :class:`ClientSplits`.

    ``num_clients`` and ``num_classes`` come from ``config.json`` when it has them (as in PFLlib);
    otherwise the clients are the indices found in ``train/`` (they must be 0..n-1 and match ``test/``)
    and the classes are ``max label + 1``. Labels outside ``[0, num_classes)`` are an error.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DataError(f"PFLlib partition directory {directory} does not exist")
    config: dict = {}
    cfg_path = directory / "config.json"
    if cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text())
        except (OSError, ValueError) as err:
            raise DataError(f"{cfg_path} is not valid JSON ({err})") from None
        if not isinstance(config, dict):
            raise DataError(f"{cfg_path} must hold a JSON object")

    files = {split: _client_files(directory, split) for split in ("train", "test")}
    n = config.get("num_clients")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise DataError(f"{cfg_path}: num_clients={n!r} is not a positive integer")
    if n is None:
        n = len(files["train"])
        if n == 0:
            raise DataError(f"{directory / 'train'} holds no client files ({{i}}.npz or train{{i}}_.npz)")
    for split, found in files.items():
        for i in range(n):
            if i not in found:
                pfl, fedala = directory / split / f"{i}.npz", directory / split / f"{split}{i}_.npz"
                raise DataError(f"client {i} of {n}: neither {pfl} nor {fedala} exists")
        extra = sorted(set(found) - set(range(n)))
        if extra:
            raise DataError(
                f"{directory / split} has files for clients {extra} beyond num_clients={n}"
                + (f" from {cfg_path}" if config else " (client ids must be 0..n-1)")
            )

    train = [_read_client(files["train"][i], i) for i in range(n)]
    test = [_read_client(files["test"][i], i) for i in range(n)]

    max_label = max((int(y.max()) for _, y in train + test if y.size), default=-1)
    min_label = min((int(y.min()) for _, y in train + test if y.size), default=0)
    num_classes = config.get("num_classes")
    if num_classes is None:
        num_classes = max_label + 1
    if not isinstance(num_classes, int) or num_classes < 1:
        raise DataError(f"{directory}: num_classes={num_classes!r} is not a positive integer")
    if min_label < 0 or max_label >= num_classes:
        bad = next(
            files[s][i] for s, parts in (("train", train), ("test", test))
            for i, (_, y) in enumerate(parts) if y.size and (y.min() < 0 or y.max() >= num_classes)
        )
        raise DataError(f"{bad} has labels outside 0..{num_classes - 1} (num_classes={num_classes})")
    return ClientSplits(name=directory.name, train=train, test=test, num_classes=num_classes)
