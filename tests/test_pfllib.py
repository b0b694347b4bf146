"""PFLlib / FedALA-repository partition files, read with the restricted unpickler."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_MNIST as SHARED

from fedala_lab.data.pfllib import ClientSplits, RestrictedUnpickler, load_pfllib, safe_load_npz_object
from fedala_lab.errors import DataError, UnsafeFileError


def _save(path: Path, x, y, protocol=None):
    """Write one client file the way PFLlib does: np.savez_compressed(f, data={'x': x, 'y': y})."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        if protocol is None:
            np.savez_compressed(f, data={"x": x, "y": y})
        else:  # same layout, pickled with a chosen protocol (numpy itself uses 4)
            arr = np.empty((), dtype=object)
            arr[()] = {"x": x, "y": y}
            with zipfile.ZipFile(f, "w") as zf, zf.open("data.npy", "w") as m:
                np.lib.format.write_array_header_1_0(m, np.lib.format.header_data_from_array_1_0(arr))
                pickle.dump(arr, m, protocol=protocol)


def _make_partition(root: Path, sizes, fedala_names=True, config=True, num_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    data = []
    for i, (ntr, nte) in enumerate(sizes):
        parts = []
        for split, n in (("train", ntr), ("test", nte)):
            x = rng.uniform(-1, 1, (n, 1, 4, 4)).astype(np.float32)
            y = rng.integers(0, num_classes, n).astype(np.int64)
            name = f"{split}{i}_.npz" if fedala_names else f"{i}.npz"
            _save(root / split / name, x, y)
            parts.append((x, y))
        data.append(parts)
    if config:
        (root / "config.json").write_text(json.dumps({"num_clients": len(sizes), "num_classes": num_classes}))
    return data


# ---------------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def shared_splits():
    if not SHARED.is_dir():
        pytest.skip(f"shared MNIST partition not found at {SHARED}")
    return load_pfllib(SHARED)


def test_shared_mnist_partition_sizes_and_types(shared_splits):
    s = shared_splits
    assert isinstance(s, ClientSplits)
    assert s.name == "fedala-mnist-dir0.1"
    assert s.num_clients == 20 and len(s.test) == 20 and s.num_classes == 10
    assert sum(len(y) for _, y in s.train) == 52_492
    assert sum(len(y) for _, y in s.test) == 17_508
    for x, y in s.train + s.test:
        assert x.dtype == np.float32 and y.dtype == np.int64
        assert x.shape[1:] == (1, 28, 28) and len(x) == len(y)
    x, _ = s.train[0]
    assert float(x.min()) == -1.0 and float(x.max()) == 1.0


def test_shared_mnist_label_counts_match_config(shared_splits):
    cfg = json.loads((SHARED / "config.json").read_text())
    stats = cfg["Size of samples for labels in clients"]
    assert len(stats) == 20
    for i, ((_, ytr), (_, yte)) in enumerate(zip(shared_splits.train, shared_splits.test)):
        counts = np.bincount(np.concatenate([ytr, yte]), minlength=10)
        expected = np.zeros(10, np.int64)
        for label, n in stats[i]:
            expected[label] = n
        assert np.array_equal(counts, expected), f"client {i}"
        # PFLlib's split: sklearn train_test_split(train_size=0.75) keeps floor(0.75 n) for training
        assert len(ytr) == int(0.75 * (len(ytr) + len(yte)))


def test_shared_mnist_extreme_clients(shared_splits):
    _, ytr = shared_splits.train[16]
    _, yte = shared_splits.test[16]
    assert set(np.unique(ytr)) == {0} and set(np.unique(yte)) == {0}  # client 16: only digit 0
    assert len(ytr) + len(yte) == 3628
    y8 = np.concatenate([shared_splits.train[8][1], shared_splits.test[8][1]])
    assert np.bincount(y8, minlength=10)[1] == 3599 and len(y8) == 3600  # client 8: almost only 1s


# ------------------------------------------------------------------------------ synthetic files


@pytest.mark.parametrize("fedala_names", [True, False], ids=["train{i}_.npz", "{i}.npz"])
def test_both_namings_round_trip(tmp_path, fedala_names):
    data = _make_partition(tmp_path, [(5, 2), (3, 1), (7, 3)], fedala_names=fedala_names)
    s = load_pfllib(tmp_path)
    assert s.num_clients == 3 and s.num_classes == 4
    for (tr, te), (xtr, ytr), (xte, yte) in zip(data, s.train, s.test):
        assert np.array_equal(tr[0], xtr) and np.array_equal(tr[1], ytr)
        assert np.array_equal(te[0], xte) and np.array_equal(te[1], yte)


def test_without_config_infers_clients_and_classes(tmp_path):
    _make_partition(tmp_path, [(4, 2), (4, 2)], config=False, num_classes=3)
    # force a known top label so the inferred class count is exact
    x = np.zeros((2, 1, 4, 4), np.float32)
    _save(tmp_path / "train" / "train1_.npz", x, np.array([5, 0]))
    s = load_pfllib(tmp_path)
    assert s.num_clients == 2 and s.num_classes == 6


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols(tmp_path, protocol):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    y = np.array([1, 0], dtype=np.int64)
    _save(tmp_path / "a.npz", x, y, protocol=protocol)
    d = safe_load_npz_object(tmp_path / "a.npz")
    assert np.array_equal(d["x"], x) and d["x"].dtype == np.float32
    assert np.array_equal(d["y"], y) and d["y"].dtype == np.int64


def test_numeric_member_read_without_pickle(tmp_path):
    np.savez(tmp_path / "plain.npz", data=np.arange(6).reshape(2, 3))
    out = safe_load_npz_object(tmp_path / "plain.npz")
    assert np.array_equal(out, np.arange(6).reshape(2, 3))


def test_labels_and_features_converted(tmp_path):
    # float64 x and int32 y (what a hand-made partition may hold) come back as float32 / int64
    for split in ("train", "test"):
        _save(tmp_path / split / "0.npz", np.ones((3, 2), np.float64), np.array([0, 1, 1], np.int32))
    s = load_pfllib(tmp_path)
    assert s.train[0][0].dtype == np.float32 and s.train[0][1].dtype == np.int64
    assert s.num_classes == 2


# ------------------------------------------------------------------------------------ safety


class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def _write_evil_npz(path: Path, payload) -> None:
    """An npz whose object member would run code under np.load(allow_pickle=True)."""
    arr = np.empty((), dtype=object)
    arr[()] = {"x": np.zeros((1, 2), np.float32), "y": np.zeros(1, np.int64), "z": payload}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf, zf.open("data.npy", "w") as m:
        np.lib.format.write_array_header_1_0(m, np.lib.format.header_data_from_array_1_0(arr))
        pickle.dump(arr, m, protocol=4)


def test_code_running_pickle_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "part" / "train" / "train0_.npz"
    _write_evil_npz(evil, _Evil(f"echo pwned > {marker}"))
    _save(tmp_path / "part" / "test" / "test0_.npz", np.zeros((1, 2), np.float32), np.zeros(1, np.int64))
    with pytest.raises(UnsafeFileError) as e:
        load_pfllib(tmp_path / "part")
    msg = str(e.value)
    assert str(evil) in msg
    assert "posix.system" in msg or "nt.system" in msg
    assert "only numpy arrays are allowed" in msg
    assert not marker.exists()
    # sanity check of the test itself: numpy's own loader WOULD run it
    with np.load(evil, allow_pickle=True) as z:
        z["data"]
    assert marker.read_text().strip() == "pwned"


@pytest.mark.parametrize("module,name", [
    ("builtins", "eval"), ("subprocess", "Popen"), ("numpy", "load"), ("numpy.core.multiarray", "fromfile"),
    ("numpy.testing._private.utils", "runstring"), ("builtins", "getattr"),
])
def test_unpickler_refuses_other_globals(module, name):
    payload = f"c{module}\n{name}\n.".encode()  # protocol-0 GLOBAL opcode, then STOP
    with pytest.raises(UnsafeFileError, match=f"{module}.{name}"):
        RestrictedUnpickler(io.BytesIO(payload), source="x.pkl").load()


class _ForgeByReduce:
    def __reduce__(self):  # numpy.ndarray((1,), object, buffer=b"AAAAAAAA"): a pointer made of file bytes
        return (np.ndarray, ((1,), np.dtype(object), b"A" * 8))


@pytest.mark.parametrize("payload", [
    pickle.dumps({"x": _ForgeByReduce()}, protocol=4),
    # NEWOBJ: ndarray.__new__(ndarray, (1,), 'O', b'AAAAAAAA'), written opcode by opcode
    b"\x80\x03cnumpy\nndarray\nK\x01\x85X\x01\x00\x00\x00OC\x08AAAAAAAA\x87\x81.",
], ids=["reduce", "newobj"])
def test_unpickler_refuses_calling_ndarray(payload):
    # numpy.ndarray is an allowed global (pickled arrays name it) but must not be callable
    with pytest.raises(UnsafeFileError, match=r"calls numpy.ndarray\(...\) directly"):
        RestrictedUnpickler(io.BytesIO(payload), source="forged.pkl").load()


def test_unpickler_returns_plain_ndarrays():
    inner = np.array([np.ones(2), None], dtype=object)
    arr = np.empty((), dtype=object)
    arr[()] = {"x": np.zeros((2, 2), np.float32), "o": inner, "t": (np.arange(3),), "s": np.float32(2.5)}
    for protocol in (2, 4, 5):
        d = RestrictedUnpickler(io.BytesIO(pickle.dumps(arr, protocol=protocol))).load().item()
        assert type(d["x"]) is np.ndarray and type(d["o"]) is np.ndarray and type(d["o"][0]) is np.ndarray
        assert type(d["t"][0]) is np.ndarray and np.array_equal(d["t"][0], [0, 1, 2])
        assert d["s"] == np.float32(2.5) and d["s"].dtype == np.float32


def test_unpickler_allows_numpy_both_spellings():
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        payload = f"c{mod}\n_reconstruct\n.".encode()
        assert callable(RestrictedUnpickler(io.BytesIO(payload)).load())


# ------------------------------------------------------------------------------------- errors


def test_missing_directory(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_pfllib(tmp_path / "nope")


def test_missing_split_folder(tmp_path):
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match="test"):
        load_pfllib(tmp_path)


def test_missing_client_file_named(tmp_path):
    _make_partition(tmp_path, [(3, 1), (3, 1)])
    (tmp_path / "config.json").write_text(json.dumps({"num_clients": 3, "num_classes": 4}))
    with pytest.raises(DataError) as e:
        load_pfllib(tmp_path)
    assert "client 2 of 3" in str(e.value) and "train2_.npz" in str(e.value)


def test_extra_client_files_beyond_config(tmp_path):
    _make_partition(tmp_path, [(3, 1), (3, 1)])
    (tmp_path / "config.json").write_text(json.dumps({"num_clients": 1, "num_classes": 4}))
    with pytest.raises(DataError, match=r"clients \[1\] beyond num_clients=1"):
        load_pfllib(tmp_path)


def test_corrupt_zip_named(tmp_path):
    _make_partition(tmp_path, [(3, 1)])
    bad = tmp_path / "test" / "test0_.npz"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(DataError, match="test0_.npz is not a readable .npz"):
        load_pfllib(tmp_path)
    # a damaged deflate stream inside a valid zip directory (zlib.error, not BadZipFile)
    good = tmp_path / "train" / "train0_.npz"
    raw = bytearray(good.read_bytes())
    raw[120:180] = b"\xff" * 60
    good.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="train0_.npz is not a readable .npz"):
        safe_load_npz_object(good)


def test_truncated_pickle_named(tmp_path):
    arr = np.empty((), dtype=object)
    arr[()] = {"x": np.zeros((2, 2), np.float32), "y": np.zeros(2, np.int64)}
    path = tmp_path / "t.npz"
    with zipfile.ZipFile(path, "w") as zf, zf.open("data.npy", "w") as m:
        np.lib.format.write_array_header_1_0(m, np.lib.format.header_data_from_array_1_0(arr))
        m.write(pickle.dumps(arr, protocol=4)[:40])
    with pytest.raises(DataError, match="t.npz holds a corrupt pickle"):
        safe_load_npz_object(path)


def test_missing_keys_and_mismatched_lengths(tmp_path):
    for split in ("train", "test"):
        _save(tmp_path / split / "0.npz", np.zeros((3, 2), np.float32), np.zeros(3, np.int64))
    arr_path = tmp_path / "train" / "0.npz"
    with open(arr_path, "wb") as f:
        np.savez_compressed(f, data={"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(DataError, match=r"0.npz lacks \['y'\]"):
        load_pfllib(tmp_path)
    _save(arr_path, np.zeros((3, 2), np.float32), np.zeros(2, np.int64))
    with pytest.raises(DataError, match="'x' has 3 samples but 'y' has 2"):
        load_pfllib(tmp_path)


def test_wrong_member_and_non_dict(tmp_path):
    np.savez(tmp_path / "a.npz", other=np.zeros(2))
    with pytest.raises(DataError, match="has no member 'data'"):
        safe_load_npz_object(tmp_path / "a.npz")
    for split in ("train", "test"):
        (tmp_path / "p" / split).mkdir(parents=True)
        np.savez(tmp_path / "p" / split / "0.npz", data=np.zeros(3))  # a plain array, not {'x','y'}
    with pytest.raises(DataError, match="holds ndarray, expected a dict"):
        load_pfllib(tmp_path / "p")


def test_labels_outside_config_classes(tmp_path):
    _make_partition(tmp_path, [(3, 1)], num_classes=4)
    _save(tmp_path / "test" / "test0_.npz", np.zeros((1, 1, 4, 4), np.float32), np.array([7]))
    with pytest.raises(DataError, match="test0_.npz has labels outside 0..3"):
        load_pfllib(tmp_path)
