"""Models, each an ordered stack of *blocks* so that ALA's p means what the paper's Table 5 says.

Every model is a :class:`BlockNet`: an ``nn.Sequential`` whose children are the blocks, lowest first.
ALA's ``p`` counts blocks from the top (``p = 1`` is the output layer), and ``forward(x, start=k)``
runs blocks ``k..`` only — the engine uses that to compute the frozen lower blocks' features once per
round and learn ALA weights on the head alone (exact, docs/design.md#performance).

| model       | blocks (bottom → top)                                    | p = 1 means   |
|-------------|----------------------------------------------------------|---------------|
| FedAvgCNN   | conv1, conv2, fc1, fc                                    | output layer  |
| SmallCNN    | conv1, conv2, fc1, fc (same shape, sized for 8×8 digits) | output layer  |
| MLP         | fc1, fc2, fc                                             | output layer  |
| ResNet-18   | conv1 (stem), conv2_x … conv5_x, fc                      | fc            |
| FastText    | embedding, fc1 (hidden), fc (output)                     | output layer  |

Batch norm in federated learning (ResNet-18): the BN layers keep torchvision's running statistics as
*buffers*. fedala_lab averages and sends parameters only, so each client keeps its own running mean and
variance (the PFLlib reference does the same: its aggregation walks ``model.parameters()``). Training
uses batch statistics; evaluation uses the client's own running statistics.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from itertools import islice

import torch
from torch import nn

from .errors import ConfigError
from .fingerprint import code_fingerprint, content_hash, value_fingerprint

# Names a config's ``model`` takes ("auto": FedAvgCNN from 28×28 images up, SmallCNN for smaller ones, the MLP
# for anything else). FastText needs text data: pass it as a module, simulate(cfg, model=FastText(...), data=…).
MODELS = ("auto", "fedavgcnn", "smallcnn", "mlp", "resnet18")
CUSTOM_PREFIX = "custom:"  # a config's model "custom:<hash>": a module passed to simulate(..., model=module)


class BlockNet(nn.Sequential):
    """An ``nn.Sequential`` of named blocks.

    ``forward(x, start=k)`` skips the lowest k blocks (x is then block k's input); ``stop=k`` returns the
    input of block k (the features the lower blocks compute).
    """

    def __init__(self, blocks: dict[str, nn.Module]):
        super().__init__(OrderedDict(blocks))

    def forward(self, x, start: int = 0, stop: int | None = None):
        for block in islice(self._modules.values(), start, stop):
            x = block(x)
        return x


def _conv_block(cin, cout, k, padding):
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=padding), nn.ReLU(), nn.MaxPool2d(2))


def FedAvgCNN(in_channels: int = 1, num_classes: int = 10, dim: int = 1024) -> BlockNet:
    """The paper's 4-layer CNN (docs/design.md#models): two 5×5 convs (32, 64) with max-pool, fc 512, output.

    ``dim`` is the flattened size after conv2: 1024 for 1×28×28, 1600 for 3×32×32, 10,816 for 64×64.
    582,026 parameters for MNIST, 878,538 for Cifar10.
    """
    return BlockNet({
        "conv1": _conv_block(in_channels, 32, 5, 0),  # (C,28,28) -> (32,12,12)
        "conv2": _conv_block(32, 64, 5, 0),  # -> (64,4,4)
        "fc1": nn.Sequential(nn.Flatten(), nn.Linear(dim, 512), nn.ReLU()),  # -> (512,)
        "fc": nn.Linear(512, num_classes),
    })


def SmallCNN(in_channels: int = 1, num_classes: int = 10, image_size: int = 8, width: int = 16) -> BlockNet:
    """FedAvgCNN's shape shrunk for 8×8 digits: 3×3 convs (width, 2·width), fc 64, output.

    Same four blocks as FedAvgCNN, so p = 1…4 means the same thing; about 14k parameters at width 16.
    """
    side = image_size // 2 // 2  # two 2×2 max-pools, each rounding down (14×14 MNIST-mini: 7, then 3)
    return BlockNet({
        "conv1": _conv_block(in_channels, width, 3, 1),  # (C,8,8) -> (w,4,4)
        "conv2": _conv_block(width, 2 * width, 3, 1),  # -> (2w,2,2)
        "fc1": nn.Sequential(nn.Flatten(), nn.Linear(2 * width * side * side, 64), nn.ReLU()),
        "fc": nn.Linear(64, num_classes),
    })


def MLP(in_features: int, num_classes: int = 10, hidden: tuple[int, ...] = (128, 64)) -> BlockNet:
    """Fully connected net; blocks fc1…fcK then the output ``fc``. The input is flattened first."""
    blocks: dict[str, nn.Module] = {}
    prev = in_features
    for i, h in enumerate(hidden, 1):
        layers = [nn.Flatten()] if i == 1 else []
        blocks[f"fc{i}"] = nn.Sequential(*layers, nn.Linear(prev, h), nn.ReLU())
        prev = h
    if not hidden:
        blocks["flatten"] = nn.Flatten()  # parameter-free; never counted as a block for p
    blocks["fc"] = nn.Linear(prev, num_classes)
    return BlockNet(blocks)


def ResNet18(num_classes: int = 10, in_channels: int = 3) -> BlockNet:
    """torchvision's ResNet-18 regrouped into the paper's six blocks (Table 5): p = 6 is the whole net.

    Batch-norm running statistics stay with each client (see the module docstring).
    """
    from torchvision.models import resnet18

    r = resnet18(weights=None, num_classes=num_classes)
    if in_channels != 3:
        r.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return BlockNet({
        "conv1": nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool),
        "conv2_x": r.layer1,
        "conv3_x": r.layer2,
        "conv4_x": r.layer3,
        "conv5_x": r.layer4,
        "fc": nn.Sequential(r.avgpool, nn.Flatten(), r.fc),
    })


class _MeanEmbedding(nn.Module):
    """Token ids (batch, length) → mean of their embeddings (batch, dim); padding ids are ignored."""

    def __init__(self, vocab_size: int, dim: int, padding_idx: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        self.padding_idx = padding_idx

    def forward(self, tokens):
        mask = (tokens != self.padding_idx).unsqueeze(-1).to(self.embedding.weight.dtype)
        summed = (self.embedding(tokens) * mask).sum(1)
        return summed / mask.sum(1).clamp_min(1.0)


def FastText(vocab_size: int, num_classes: int = 4, hidden_dim: int = 32, padding_idx: int = 0) -> BlockNet:
    """fastText-style classifier (PFLlib's text model): mean token embedding → hidden → output.

    Takes a LongTensor (batch, length) of token ids. Blocks: embedding, fc1, fc (p = 1…3).
    """
    return BlockNet({
        "embedding": _MeanEmbedding(vocab_size, hidden_dim, padding_idx),
        "fc1": nn.Linear(hidden_dim, hidden_dim),
        "fc": nn.Linear(hidden_dim, num_classes),
    })


# --------------------------------------------------------------------------------------------------
# blocks and p


def layer_blocks(model: BlockNet) -> list[tuple[str, nn.Module]]:
    """The model's blocks, bottom to top, that hold parameters (what p counts). A module without children that
    holds parameters (a bare ``nn.Linear``: logistic regression) is one block, itself, named ""."""
    blocks = [(n, m) for n, m in model.named_children() if any(True for _ in m.parameters())]
    if not blocks and next(model.children(), None) is None and any(True for _ in model.parameters()):
        return [("", model)]
    return blocks


def num_blocks(model: BlockNet) -> int:
    return len(layer_blocks(model))


def _blocks_for_p(model: nn.Module, p: int) -> list[tuple[str, nn.Module]]:
    """:func:`layer_blocks`, or a ConfigError naming p where there are none (a module whose children hold no
    parameters)."""
    blocks = layer_blocks(model)
    if not blocks:
        raise ConfigError("p", p, f"a model whose children are blocks holding the parameters; this "
                          f"{type(model).__name__} has none", "wrap its layers in nn.Sequential(...)")
    return blocks


def _block_names(model: nn.Module, blocks) -> str:
    return ", ".join(n or f"the whole {type(model).__name__}" for n, _ in blocks)


def top_block_start(model: BlockNet, p: int) -> int:
    """Index (in ``model``'s children) of the lowest block ALA covers for this p (0 for a module that is its
    one block)."""
    blocks = _blocks_for_p(model, p)
    if not 1 <= p <= len(blocks):
        raise ConfigError("p", p, f"1 <= p <= {len(blocks)} (the model's blocks: {_block_names(model, blocks)})")
    first = blocks[len(blocks) - p][0]
    return [n for n, _ in model.named_children()].index(first) if first else 0


def ala_param_names(model: nn.Module, p: int, among=None) -> list[str]:
    """Names of the parameters in the top p blocks (those that get element-wise ALA weights); with ``among``,
    the top p of the blocks whose parameters all lie in ``among`` (what a method sends: FedRep's body)."""
    every = [(n, [f"{n}.{k}" if n else k for k, _ in m.named_parameters()]) for n, m in _blocks_for_p(model, p)]
    blocks = every if among is None else [(n, ks) for n, ks in every if set(ks) <= set(among)]
    if not 1 <= p <= len(blocks):
        which = "the model's blocks" if len(blocks) == len(every) else "the blocks this method sends"
        raise ConfigError("p", p, f"1 <= p <= {len(blocks)} ({which}: {_block_names(model, blocks)})")
    return [k for _, ks in blocks[len(blocks) - p:] for k in ks]


def num_ala_weights(model: BlockNet, p: int) -> int:
    """Number of ALA weights for p (paper Table 6: 5,130 / 529,930 / 581,194 / 582,026 on the CNN)."""
    params = dict(model.named_parameters())
    return sum(params[k].numel() for k in ala_param_names(model, p))


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def fingerprint(model: nn.Module) -> str:
    """16 hex digits of the SHA-256 of a module's architecture (its ``repr``: layers and their sizes), the code of
    every module class in it defined outside torch and fedala_lab (``forward`` and all the code it can reach:
    :func:`~fedala_lab.fingerprint.code_fingerprint`), every parameter and buffer (name, dtype, shape, values)
    and each submodule's own attributes (a scale set in ``__init__``, hooks): what names a custom model in a
    run key. Computed at every call (once per call that gets a run), so an edited class is a new model."""
    return content_hash(model, "model", lambda: _model_hash(model))


def _model_hash(model: nn.Module) -> str:
    import hashlib

    h = hashlib.sha256(repr(model).encode())
    for cls in sorted({type(m) for m in model.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        h.update(f"{cls.__module__}.{cls.__qualname__}={code_fingerprint(cls)}|".encode())
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
    for name, m in model.named_modules():  # what else each holds: settings, non-persistent buffers, hooks
        own = {k: v for k, v in vars(m).items() if k not in ("_parameters", "_modules")}
        h.update(f"{name}|{value_fingerprint(own)}".encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# construction from a config


def _cnn_dim(in_shape) -> int:
    _, h, w = in_shape
    fh, fw = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    return 64 * fh * fw


def auto_model_name(input_shape: tuple[int, ...]) -> str:
    """Which model "auto" means for an input shape: the paper's CNN from 28×28 up, else the small CNN."""
    if len(input_shape) == 3 and min(input_shape[1:]) >= 28:
        return "fedavgcnn"
    if len(input_shape) == 3:
        return "smallcnn"
    return "mlp"


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *, seed: int | None = None) -> BlockNet:
    """Build a model for inputs of ``input_shape`` (one sample, e.g. (1, 28, 28)) and check it fits.

    ``seed`` makes the initial weights reproducible without touching the global RNG.
    """
    if name not in MODELS:
        raise ConfigError("model", name, "one of " + ", ".join(MODELS))
    if name == "auto":
        name = auto_model_name(tuple(input_shape))
    # Initialisers draw from torch's global generator: hold a lock so that threads (several app users)
    # building models at once cannot interleave their draws and swap initial weights.
    fork = torch.random.fork_rng(devices=[]) if seed is not None else _nullcontext()
    with _BUILD_LOCK, fork:
        if seed is not None:
            torch.manual_seed(seed)
        model = _construct(name, tuple(input_shape), num_classes)
    _check_fits(model, name, tuple(input_shape))
    return model


_BUILD_LOCK = threading.Lock()


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _construct(name, shape, num_classes):
    if name == "fedavgcnn":
        if len(shape) != 3 or min(shape[1:]) < 16:
            raise ConfigError("model", name, "a model that fits the data: FedAvgCNN needs images of at "
                              f"least 16×16, the data has shape {shape}", "use resize=28 or model=smallcnn")
        return FedAvgCNN(in_channels=shape[0], num_classes=num_classes, dim=_cnn_dim(shape))
    if name == "smallcnn":
        if len(shape) != 3 or shape[1] != shape[2] or shape[1] < 4:
            raise ConfigError("model", name, "a model that fits the data: SmallCNN needs square images "
                              f"of at least 4×4, the data has shape {shape}")
        return SmallCNN(in_channels=shape[0], num_classes=num_classes, image_size=shape[1])
    if name == "mlp":
        return MLP(int(math.prod(shape)), num_classes)
    if name == "resnet18":
        if len(shape) != 3 or min(shape[1:]) < 32:
            raise ConfigError("model", name, "a model that fits the data: ResNet-18 needs images of at "
                              f"least 32×32, the data has shape {shape}", "use resize=32")
        return ResNet18(num_classes=num_classes, in_channels=shape[0])
    raise ConfigError("model", name, "one of " + ", ".join(MODELS))


def _check_fits(model: BlockNet, name: str, shape) -> None:
    """A dry forward on one dummy sample, so a mismatch fails here with a clear message."""
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, *shape))
    except RuntimeError as err:
        raise ConfigError("model", name, f"a model that accepts inputs of shape {shape}",
                          str(err).splitlines()[0]) from None
    finally:
        model.train(was)
