import pytest
import torch

from fedala_lab.errors import ConfigError
from fedala_lab.models import (
    MLP,
    FastText,
    FedAvgCNN,
    ResNet18,
    SmallCNN,
    ala_param_names,
    build_model,
    layer_blocks,
    num_ala_weights,
    num_parameters,
)


def test_fedavgcnn_parameter_counts_match_the_paper():
    assert num_parameters(FedAvgCNN(in_channels=1, num_classes=10, dim=1024)) == 582_026
    assert num_parameters(FedAvgCNN(in_channels=3, num_classes=10, dim=1600)) == 878_538


def test_fedavgcnn_shapes_and_reference_parameter_names():
    m = FedAvgCNN(in_channels=1, num_classes=10, dim=1024)
    assert m(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["conv1.0.weight", "conv1.0.bias", "conv2.0.weight", "conv2.0.bias",
                     "fc1.1.weight", "fc1.1.bias", "fc.weight", "fc.bias"]


def test_number_of_ala_weights_per_p_table6():
    m = FedAvgCNN(in_channels=1, num_classes=10, dim=1024)
    assert [num_ala_weights(m, p) for p in (1, 2, 3, 4)] == [5_130, 529_930, 581_194, 582_026]
    assert ala_param_names(m, 1) == ["fc.weight", "fc.bias"]
    assert [n for n, _ in layer_blocks(m)] == ["conv1", "conv2", "fc1", "fc"]


def test_p_out_of_range_names_the_blocks():
    with pytest.raises(ConfigError, match=r"1 <= p <= 4.*conv1, conv2, fc1, fc"):
        num_ala_weights(SmallCNN(), 5)


def test_resnet18_has_six_blocks_and_torchvision_size():
    m = ResNet18(num_classes=10)
    assert [n for n, _ in layer_blocks(m)] == ["conv1", "conv2_x", "conv3_x", "conv4_x", "conv5_x", "fc"]
    assert num_parameters(m) == 11_181_642  # torchvision resnet18(num_classes=10)
    assert num_ala_weights(m, 1) == 512 * 10 + 10
    assert num_ala_weights(m, 6) == num_parameters(m)
    m.eval()
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_forward_start_stop_compose_to_the_full_model():
    m = SmallCNN()
    x = torch.randn(5, 1, 8, 8)
    feats = m(x, stop=2)
    assert feats.shape == (5, 32, 2, 2)
    assert torch.equal(m(feats, start=2), m(x))  # the same layers on the same values: bit for bit


def test_mlp_and_fasttext():
    m = MLP(64, 10)
    assert [n for n, _ in layer_blocks(m)] == ["fc1", "fc2", "fc"]
    assert m(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    ft = FastText(vocab_size=50, num_classes=4, hidden_dim=8)
    tokens = torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]])
    assert ft(tokens).shape == (2, 4)
    assert [n for n, _ in layer_blocks(ft)] == ["embedding", "fc1", "fc"]
    # padding ids do not count in the mean
    emb = ft.embedding.embedding.weight
    assert torch.equal(ft.embedding(tokens)[1], emb[5])  # a mean of one row is that row


def test_build_model_auto_and_mismatch_errors():
    assert [n for n, _ in layer_blocks(build_model("auto", (1, 8, 8), 10))] == ["conv1", "conv2", "fc1", "fc"]
    assert num_parameters(build_model("auto", (1, 28, 28), 10)) == 582_026
    with pytest.raises(ConfigError, match="FedAvgCNN needs images of at least 16×16.*resize=28"):
        build_model("fedavgcnn", (1, 8, 8), 10)
    with pytest.raises(ConfigError, match="model='nope'"):
        build_model("nope", (1, 8, 8), 10)


def test_build_model_seed_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("smallcnn", (1, 8, 8), 10, seed=7)
    after = torch.rand(1)
    b = build_model("smallcnn", (1, 8, 8), 10, seed=7)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_seeded_builds_are_thread_safe():
    from concurrent.futures import ThreadPoolExecutor

    want = {s: build_model("mlp", (1, 8, 8), 10, seed=s).state_dict() for s in range(4)}
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda s: (s, build_model("mlp", (1, 8, 8), 10, seed=s).state_dict()),
                            [s for _ in range(50) for s in range(4)]))
    for s, sd in got:
        for k, v in sd.items():
            assert torch.equal(v, want[s][k])
