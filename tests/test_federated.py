"""FederatedData on the embedded digits and the shared MNIST partition, and the Fig. 6–9 display."""

import numpy as np
import pytest
import torch
from conftest import SHARED_MNIST

from fedala_lab.config import DataConfig
from fedala_lab.data.federated import FederatedData
from fedala_lab.errors import ConfigError, DataError
from fedala_lab.figures.data import DataDistributionDisplay


@pytest.fixture(scope="module")
def digits():
    return FederatedData.from_config(DataConfig(dataset="digits", partition="dirichlet", beta=0.1, num_clients=20))


def test_digits_dirichlet_sizes_and_split(digits):
    assert digits.num_clients == 20 and digits.input_shape == (1, 8, 8) and digits.num_classes == 10
    assert digits.train_sizes.sum() + digits.test_sizes.sum() == 1797
    total = digits.train_sizes + digits.test_sizes
    assert (total >= 40).all()  # least_samples = min(40, 1797/20/2)
    np.testing.assert_array_equal(digits.train_sizes, np.floor(0.75 * total).astype(int))
    assert digits.train_x.dtype == torch.float32 and digits.train_x.min() >= -1 and digits.train_x.max() <= 1


def test_label_counts_is_tidy_and_complete(digits):
    counts = digits.label_counts()
    assert list(counts.columns) == ["client", "split", "label", "count"]
    assert counts["count"].sum() == 1797 and (counts["count"] > 0).all()
    train = counts[counts["split"] == "train"].groupby("client")["count"].sum()
    np.testing.assert_array_equal(train.to_numpy(), digits.train_sizes)
    _x, y = digits.client_train(3)
    got = counts[(counts.client == 3) & (counts.split == "train")].set_index("label")["count"]
    assert got.to_dict() == {int(k): int(v) for k, v in zip(*np.unique(y.numpy(), return_counts=True))}


def test_labels_held_are_those_counted(digits):
    counts = digits.label_counts()
    for split in ("train", "test"):
        want = sorted(counts[(counts.client == 3) & (counts.split == split)]["label"])
        assert digits.labels_held(3, split) == want


def test_from_config_is_memoised_and_tensors_stay_put(digits):
    again = FederatedData.from_config(DataConfig(dataset="digits", partition="dirichlet", beta=0.1, num_clients=20))
    assert again is digits  # the app and notebooks rebuild the same data without re-reading it


def test_same_seed_same_split_other_seed_other_split():
    a = FederatedData.from_config(DataConfig(partition="iid", num_clients=7, seed=3))
    b = FederatedData.from_config(DataConfig(partition="iid", num_clients=7, seed=4))
    assert not torch.equal(a.train_y, b.train_y)


def test_resize_to_28_feeds_the_paper_cnn():
    fd = FederatedData.from_config(DataConfig(num_clients=5, partition="iid", resize=28))
    assert fd.input_shape == (1, 28, 28)


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="shared MNIST partition not present")
def test_shared_mnist_partition():
    fd = FederatedData.from_config(DataConfig(dataset=f"pfllib:{SHARED_MNIST}", num_clients=20))
    assert fd.train_sizes.sum() == 52_492 and fd.test_sizes.sum() == 17_508
    assert fd.input_shape == (1, 28, 28)
    _, y16 = fd.client_train(16)
    assert set(y16.tolist()) == {0}
    with pytest.raises(ConfigError, match="num_clients=10 is not allowed: 20"):
        FederatedData.from_config(DataConfig(dataset=f"pfllib:{SHARED_MNIST}", num_clients=10))


def test_missing_pfllib_directory_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match=str(tmp_path / "nope")):
        FederatedData.from_config(DataConfig(dataset=f"pfllib:{tmp_path / 'nope'}", num_clients=2))


@pytest.mark.parametrize("kind", ["bubble", "heatmap"])
def test_distribution_display_draws_the_counts(digits, kind):
    disp = DataDistributionDisplay.from_data(digits, kind=kind)
    assert disp.figure_ is disp.ax_.figure and disp.ax_.get_xlabel() == "client" and disp.ax_.get_ylabel() == "label"
    m = disp.matrix()
    assert m.shape == (10, 20) and m.sum() == 1797
    if kind == "bubble":
        offsets = disp.artist_.get_offsets()
        assert len(offsets) == len(disp.counts_) == int((m > 0).sum())
        sizes = disp.artist_.get_sizes()
        # area ∝ samples: the biggest bubble is the largest count
        assert disp.counts_["count"].to_numpy()[np.argmax(sizes)] == m.max()
    else:
        np.testing.assert_array_equal(disp.artist_.get_array(), m)
        assert disp.colorbar_ is not None


def test_distribution_display_split_and_bad_kind(digits):
    disp = DataDistributionDisplay.from_data(digits, split="test")
    assert disp.matrix().sum() == 457
    with pytest.raises(ConfigError, match="kind='pie'"):
        disp.plot(kind="pie")
