"""Sample pools (fedala_lab.data.sources): digits and mnist_mini offline, torchvision layouts on tiny fake files."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_MNIST

from fedala_lab.data import mnist_mini, sources
from fedala_lab.data.sources import Pool, load_pool, read_idx
from fedala_lab.errors import ConfigError, DataError, UnsafeFileError

# ----------------------------------------------------------------------------------------- digits


def test_digits_pool():
    p = load_pool("digits")
    assert isinstance(p, Pool) and p.name == "digits"
    assert p.x.shape == (1797, 1, 8, 8) and p.x.dtype == np.float32
    assert p.y.shape == (1797,) and p.y.dtype == np.int64
    assert set(np.unique(p.y)) == set(range(10)) and p.num_classes == 10
    assert p.class_names == tuple("0123456789")
    assert float(p.x.min()) == -1.0 and float(p.x.max()) == 1.0
    # values are k/16·2−1 for integer k in 0..16
    # (float32 scaling and back: ≤ 16 · 2^-24 ≈ 1e-6 off an integer; atol 1e-5 leaves room, 1/16 is far)
    assert np.allclose((p.x + 1) / 2 * 16, np.round((p.x + 1) / 2 * 16), atol=1e-5)
    assert np.bincount(p.y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_digits_resized_to_28():
    small, big = load_pool("digits"), load_pool("digits", resize=28)
    assert big.x.shape == (1797, 1, 28, 28) and big.x.dtype == np.float32
    assert float(big.x.min()) >= -1.0 and float(big.x.max()) <= 1.0
    assert np.array_equal(big.y, small.y)
    # bilinear (align_corners=False) preserves a constant image and roughly the mean
    assert abs(float(big.x.mean()) - float(small.x.mean())) < 0.02
    same = load_pool("digits", resize=8)
    assert np.array_equal(same.x, small.x)  # resizing to the native size is a no-op


# ------------------------------------------------------------------------------------ mnist_mini


def test_mnist_mini_pool_is_the_shipped_balanced_subset():
    p = load_pool("mnist_mini")
    assert p.name == "mnist_mini" and p.num_classes == 10 and p.class_names == tuple("0123456789")
    assert p.x.shape == (3000, 1, 14, 14) and p.x.dtype == np.float32 and p.y.dtype == np.int64
    assert np.bincount(p.y).tolist() == [300] * 10
    assert float(p.x.min()) == -1.0 and float(p.x.max()) == 1.0
    # values are k/255·2−1 for integer k in 0..255, as the other uint8 sources
    k = (p.x + 1) / 2 * 255  # float32 there and back: ≤ 255 · 2^-24 ≈ 1.5e-5 off an integer; atol 1e-4
    assert np.allclose(k, np.round(k), atol=1e-4)
    x, y = mnist_mini.load()
    assert (x.dtype, x.shape, y.dtype) == (np.uint8, (3000, 14, 14), np.uint8)
    assert mnist_mini.fingerprint(x, y) == mnist_mini.SHA256
    assert mnist_mini.FILE.stat().st_size < 250_000
    notes = (mnist_mini.FILE.parent / "MNIST_MINI.md").read_text()
    assert "LeCun" in notes and "Attribution-Share Alike 3.0" in notes and mnist_mini.SHA256 in notes
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"fedala_lab.data" = ["mnist_mini.npz", "MNIST_MINI.md"]' in pyproject  # shipped in the wheel


def test_mnist_mini_recipe():
    g = np.random.default_rng(3)
    x = g.integers(0, 256, size=(400, 28, 28), dtype=np.uint8)
    y = g.permutation(np.repeat(np.arange(10), 40))
    xs, ys = mnist_mini.draw(x, y, per_label=7)
    assert xs.shape == (70, 14, 14) and xs.dtype == np.uint8 and np.bincount(ys).tolist() == [7] * 10
    # each drawn image is a pool image of its label, 2×2 means rounded, kept in pool order
    small = mnist_mini.downsample(x)
    where = [next(i for i in range(400) if np.array_equal(small[i], im)) for im in xs]
    assert where == sorted(where) and y[where].tolist() == ys.tolist()
    block = np.array([[1, 2], [2, 2]], np.uint8)  # mean 1.75 → 2; [[0, 1], [0, 1]]: 0.5 → 0 (half to even)
    assert mnist_mini.downsample(np.tile(block, (1, 14, 14)))[0, 0, 0] == 2
    assert mnist_mini.downsample(np.tile(np.array([[0, 1], [0, 1]], np.uint8), (1, 14, 14)))[0, 0, 0] == 0
    again = mnist_mini.draw(x, y, per_label=7)
    assert np.array_equal(again[0], xs) and np.array_equal(again[1], ys)
    with pytest.raises(ValueError, match="uint8 images"):
        mnist_mini.draw(x.astype(np.float32), y)


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="shared MNIST partition not present")
def test_mnist_mini_regenerates_from_the_fedala_partition(tmp_path, capsys):
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "tools" / "make_mnist_mini.py"
    spec = importlib.util.spec_from_file_location("make_mnist_mini", script)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([str(SHARED_MNIST), "--out", str(tmp_path / "m.npz")]) == 0
    assert "the same arrays as the shipped file" in capsys.readouterr().out
    with np.load(tmp_path / "m.npz") as z:
        assert mnist_mini.fingerprint(z["x"], z["y"]) == mnist_mini.SHA256


def test_unknown_name_and_bad_resize():
    with pytest.raises(ConfigError, match="dataset='svhn'") as e:
        load_pool("svhn")
    assert e.value.field == "dataset" and "cifar100" in str(e.value)
    with pytest.raises(ConfigError, match="load_pfllib"):
        load_pool("pfllib:/some/dir")
    with pytest.raises(ConfigError, match="resize"):
        load_pool("digits", resize=0)


# ------------------------------------------------------------------------------------ MNIST-like


def _idx_bytes(a: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}i", *a.shape) + a.astype(np.uint8).tobytes()


def _write_mnist(raw: Path, n_train=3, n_test=2, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.arange(n_train, dtype=np.uint8) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (9 - np.arange(n_test, dtype=np.uint8)) % 10,
    }
    arrays["train-images-idx3-ubyte"][0, 0, 0] = 0  # make both ends of the range appear
    arrays["train-images-idx3-ubyte"][0, 0, 1] = 255
    for name, a in arrays.items():
        if gz:
            with gzip.open(raw / (name + ".gz"), "wb") as f:
                f.write(_idx_bytes(a))
        else:
            (raw / name).write_bytes(_idx_bytes(a))
    return arrays


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
@pytest.mark.parametrize("gz", [False, True], ids=["idx", "idx.gz"])
def test_mnist_like_from_idx_files(tmp_path, name, folder, gz):
    a = _write_mnist(tmp_path / folder / "raw", gz=gz)
    p = load_pool(name, root=str(tmp_path))
    assert p.name == name and p.num_classes == 10 and len(p.class_names) == 10
    assert p.x.shape == (5, 1, 28, 28) and p.x.dtype == np.float32
    assert p.y.dtype == np.int64
    # train first, then test: the merged pool of the paper
    assert p.y.tolist() == [0, 1, 2, 9, 8]
    imgs = np.concatenate([a["train-images-idx3-ubyte"], a["t10k-images-idx3-ubyte"]]).astype(np.float32)
    assert np.allclose(p.x[:, 0], imgs / 255 * 2 - 1, atol=1e-6)  # float32 scaling in another order: ~1 ulp
    assert p.x[0, 0, 0, 0] == -1.0 and p.x[0, 0, 0, 1] == 1.0
    if name == "fashion_mnist":
        assert p.class_names[0] == "T-shirt/top" and p.class_names[9] == "Ankle boot"


def test_mnist_resize(tmp_path):
    _write_mnist(tmp_path / "MNIST" / "raw")
    p = load_pool("mnist", root=str(tmp_path), resize=14)
    assert p.x.shape == (5, 1, 14, 14)
    assert float(p.x.min()) >= -1 and float(p.x.max()) <= 1


def test_mnist_missing_files_message(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    with pytest.raises(DataError) as e:
        load_pool("mnist", root=str(tmp_path), download=False)
    msg = str(e.value)
    assert f"{raw}{os.sep}" in msg
    for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
              "t10k-labels-idx1-ubyte"):
        assert f in msg
    assert "download=True" in msg and "--download" in msg
    # one file missing: it is the one named as missing
    _write_mnist(raw)
    (raw / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="missing: t10k-labels-idx1-ubyte"):
        load_pool("mnist", root=str(tmp_path))


def test_default_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDALA_LAB_DATA", str(tmp_path / "envroot"))
    with pytest.raises(DataError, match=str(tmp_path / "envroot" / "FashionMNIST" / "raw")):
        load_pool("fashion_mnist")


def test_failed_download_is_one_data_error(tmp_path, monkeypatch):
    from urllib.error import URLError

    def no_network(*args, **kwargs):
        raise URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(sources, "_tv_mnist_download", no_network)
    monkeypatch.setattr(sources, "_tv_cifar_download", no_network)
    with pytest.raises(DataError) as e:
        load_pool("mnist", root=str(tmp_path), download=True)
    msg = str(e.value)
    assert msg.startswith("downloading mnist into") and str(tmp_path / "MNIST" / "raw") in msg
    assert "Name or service not known" in msg and "train-images-idx3-ubyte" in msg
    with pytest.raises(DataError, match="cifar-10-batches-py"):
        load_pool("cifar10", root=str(tmp_path), download=True)


def test_download_skipped_when_files_present(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("must not download")

    monkeypatch.setattr(sources, "_tv_mnist_download", boom)
    _write_mnist(tmp_path / "MNIST" / "raw")
    assert len(load_pool("mnist", root=str(tmp_path), download=True)) == 5


def test_corrupt_idx_files(tmp_path):
    bad = tmp_path / "x-idx3-ubyte"
    bad.write_bytes(b"\x00\x00\x0d\x01" + struct.pack(">i", 1) + b"\x00\x00\x00\x00")  # float type
    with pytest.raises(DataError, match="not an unsigned-byte idx"):
        read_idx(bad)
    bad.write_bytes(_idx_bytes(np.zeros((2, 3, 3)))[:-4])
    with pytest.raises(DataError, match=r"holds 14 bytes of data, its header says \(2, 3, 3\)"):
        read_idx(bad)
    raw = tmp_path / "MNIST" / "raw"
    _write_mnist(raw)
    (raw / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(5)))  # 5 labels for 2 images
    with pytest.raises(DataError, match="do not match"):
        load_pool("mnist", root=str(tmp_path))


# ----------------------------------------------------------------------------------------- CIFAR


def _cifar_arrays(n, k, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    return data, rng.integers(0, k, n).tolist()


def _write_cifar10(root: Path, per_batch=(2, 1, 3, 1, 2), n_test=3, protocol=pickle.DEFAULT_PROTOCOL):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = []
    for i, n in enumerate(list(per_batch) + [n_test]):
        data, labels = _cifar_arrays(n, 10, i)
        name = f"data_batch_{i + 1}" if i < len(per_batch) else "test_batch"
        d = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
             b"filenames": [f"img{j}.png".encode() for j in range(n)]}
        with open(folder / name, "wb") as f:
            pickle.dump(d, f, protocol=protocol)
        batches.append((data, labels))
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    meta = {b"num_cases_per_batch": 10000, b"label_names": [s.encode() for s in names], b"num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=protocol)
    return batches


def _check_pool(p, batches, k):
    data = np.concatenate([b[0] for b in batches])
    labels = [label for b in batches for label in b[1]]
    assert p.x.shape == (len(data), 3, 32, 32) and p.x.dtype == np.float32
    assert p.y.dtype == np.int64 and p.y.tolist() == labels
    # float32 scaling in another order: ~1 ulp (1.2e-7) of values in [−1, 1]
    assert np.allclose(p.x, data.reshape(-1, 3, 32, 32).astype(np.float32) / 255 * 2 - 1, atol=1e-6)
    assert p.num_classes == k and len(p.class_names) == k


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_from_python_batches(tmp_path, protocol):
    batches = _write_cifar10(tmp_path, protocol=protocol)
    p = load_pool("cifar10", root=str(tmp_path))
    _check_pool(p, batches, 10)  # 5 train batches then test_batch: 12 images
    assert len(p) == 12
    assert p.class_names[:3] == ("airplane", "automobile", "bird")


def test_cifar100_from_python_batches(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    batches = []
    for seed, name, n in ((0, "train", 4), (1, "test", 2)):
        data, fine = _cifar_arrays(n, 100, seed)
        d = {b"filenames": [b"a.png"] * n, b"batch_label": name.encode(), b"fine_labels": fine,
             b"coarse_labels": [f // 5 for f in fine], b"data": data}
        (folder / name).write_bytes(pickle.dumps(d))
        batches.append((data, fine))
    meta = {b"fine_label_names": [f"c{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"s{i}".encode() for i in range(20)]}
    (folder / "meta").write_bytes(pickle.dumps(meta))
    p = load_pool("cifar100", root=str(tmp_path))
    _check_pool(p, batches, 100)  # the fine labels, as PFLlib uses
    assert p.class_names[99] == "c99"
    p = load_pool("cifar100", root=str(tmp_path), resize=16)
    assert p.x.shape == (6, 3, 16, 16)


def _py2_batch(d: dict) -> bytes:
    """Opcode-level imitation of the real CIFAR files (Python 2 cPickle, protocol 2).

    Python-2 str keys and strings are BINSTRINGs (bytes under encoding='bytes'); the array is
    rebuilt by ``numpy.core.multiarray._reconstruct`` with a py2-era dtype state, as in the originals.
    """
    def s(b: bytes) -> bytes:
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b

    def i(v: int) -> bytes:
        return b"J" + struct.pack("<i", v)

    def obj(v) -> bytes:
        if isinstance(v, bytes):
            return s(v)
        if isinstance(v, int):
            return i(v)
        if isinstance(v, list):
            return b"](" + b"".join(obj(e) for e in v) + b"e"
        assert isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 2
        arr = b"cnumpy.core.multiarray\n_reconstruct\n" + b"(cnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b")
        arr += b"tR"  # _reconstruct(ndarray, (0,), 'b')
        dtype = b"cnumpy\ndtype\n(" + s(b"u1") + i(0) + i(1) + b"tR"
        dtype += b"(" + i(3) + s(b"|") + b"NNN" + i(-1) + i(-1) + i(0) + b"tb"  # dtype.__setstate__
        state = b"(" + i(1) + b"(" + i(v.shape[0]) + i(v.shape[1]) + b"t" + dtype + b"\x89"
        state += s(v.tobytes()) + b"t"
        return arr + state + b"b"

    return b"\x80\x02}(" + b"".join(obj(k) + obj(v) for k, v in d.items()) + b"u."


def test_cifar10_python2_format(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batches = []
    for idx, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        data, labels = _cifar_arrays(2, 10, idx)
        (folder / name).write_bytes(_py2_batch({b"batch_label": name.encode(), b"labels": labels,
                                                b"data": data, b"filenames": [b"f.png", b"g.png"]}))
        batches.append((data, labels))
    (folder / "batches.meta").write_bytes(
        _py2_batch({b"num_cases_per_batch": 10000, b"label_names": [b"c%d" % j for j in range(10)],
                    b"num_vis": 3072}))
    # the imitation is faithful: numpy + plain pickle read it as the CIFAR homepage does
    with open(folder / "test_batch", "rb") as f:
        assert pickle.load(f, encoding="bytes")[b"data"].shape == (2, 3072)
    p = load_pool("cifar10", root=str(tmp_path))
    _check_pool(p, batches, 10)
    assert p.class_names == tuple(f"c{j}" for j in range(10))


def test_cifar_missing_files_message(tmp_path):
    with pytest.raises(DataError) as e:
        load_pool("cifar10", root=str(tmp_path))
    msg = str(e.value)
    assert f"{tmp_path / 'cifar-10-batches-py'}{os.sep}" in msg
    assert "data_batch_1" in msg and "test_batch" in msg and "batches.meta" in msg
    assert "download=True" in msg
    with pytest.raises(DataError) as e:
        load_pool("cifar100", root=str(tmp_path))
    assert f"{tmp_path / 'cifar-100-python'}{os.sep}" in str(e.value)
    assert "train, test, meta" in str(e.value)
    _write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DataError, match="missing: data_batch_4"):
        load_pool("cifar10", root=str(tmp_path))


class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def test_code_running_cifar_batch_is_refused(tmp_path):
    _write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    evil = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    data, labels = _cifar_arrays(2, 10, 0)
    evil.write_bytes(pickle.dumps({b"data": data, b"labels": labels, b"x": _Evil(f"touch {marker}")}))
    with pytest.raises(UnsafeFileError) as e:
        load_pool("cifar10", root=str(tmp_path))
    assert str(evil) in str(e.value) and "system" in str(e.value)
    assert not marker.exists()


def test_cifar_bad_batch_contents(tmp_path):
    _write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8),
                                                        b"labels": [0, 1]}))
    with pytest.raises(DataError, match=r"data_batch_2: 'data' must be a uint8 array of shape \(n, 3072\)"):
        load_pool("cifar10", root=str(tmp_path))
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8),
                                                        b"labels": [0]}))
    with pytest.raises(DataError, match="'labels' must list one label per image"):
        load_pool("cifar10", root=str(tmp_path))
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8),
                                                        b"labels": [10]}))
    with pytest.raises(DataError, match=r"labels outside 0..9"):
        load_pool("cifar10", root=str(tmp_path))
    (folder / "data_batch_2").write_bytes(b"\x80\x04garbage")
    with pytest.raises(DataError, match="corrupt pickle"):
        load_pool("cifar10", root=str(tmp_path))
