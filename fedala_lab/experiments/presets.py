"""Named configurations. Each override says why it departs from the RunConfig defaults.

    >>> from fedala_lab.experiments.presets import preset
    >>> cfg = preset("teach", algo="fedprox", mu=0.01)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path

from ..config import POOL_PREFIX, DataConfig, RunConfig, pool_directory
from ..environ import MNIST_PARTITION, SHARED_DATA, env_folder
from ..errors import ConfigError, DataError

# Where the paper's MNIST partition comes from, for the message that says so when it is missing.
MNIST_PARTITION_SOURCE = ("the folder dataset/mnist-0.1-npz of the FedALA repository "
                          "(https://github.com/TsingZ0/FedALA)")


def mnist_partition_dir() -> str:
    """Where the FedALA repository's MNIST Dir(0.1) partition (PFLlib layout, 20 clients) is looked for.

    ``$FEDALA_LAB_MNIST_PARTITION`` (the folder itself, e.g. a clone's ``dataset/mnist-0.1-npz``), else
    ``$FEDALA_LAB_SHARED_DATA/fedala-mnist-dir0.1``, else ``shared/data/fedala-mnist-dir0.1`` beside the
    checkout (where a lab machine may keep data for every checkout). Not checked here: see
    :func:`check_partition`.
    """
    folder = env_folder(MNIST_PARTITION)
    if folder is None:
        base = env_folder(SHARED_DATA) or Path(__file__).resolve().parents[3] / "shared" / "data"
        folder = base / "fedala-mnist-dir0.1"
    return str(folder)


def mnist_pathological_dataset(root: str | None = None) -> str:
    """Where MNIST pathological comes from: torchvision's MNIST files when present (the paper's source),
    else every image of the MNIST Dir(0.1) partition pooled and re-partitioned (``pfllib-pool:<dir>``; it
    holds all 70,000 MNIST images, so the pool is MNIST in another order). With neither, the pool too:
    :func:`check_partition` then names both sources."""
    from ..data.sources import mnist_files_present  # here: the data package loads torch

    if mnist_files_present("mnist", root or None):
        return "mnist"
    return POOL_PREFIX + mnist_partition_dir()


def check_partition(cfg: RunConfig) -> None:
    """Refuse at once a config that reads the MNIST Dir(0.1) partition (``pfllib:`` or ``pfllib-pool:``) where
    it is not, saying where it comes from and how to point at it. Other folders are left to the loader."""
    d = cfg.data
    folder = d.dataset[len("pfllib:"):] if d.is_pfllib else pool_directory(d.dataset)
    if folder is None or Path(folder).is_dir() or Path(folder) != Path(mnist_partition_dir()):
        return
    alternative = " (or use torchvision's MNIST: --dataset mnist --download true)" if d.is_pool else ""
    raise DataError(f"the MNIST Dir(0.1) partition of the FedALA paper is not at {folder}: download "
                    f"{MNIST_PARTITION_SOURCE} and set {MNIST_PARTITION} to that folder{alternative}")


def _teach() -> RunConfig:
    return RunConfig(
        # 3,000 real MNIST digits at 14×14, shipped in the package (data/mnist_mini.py): offline, instant. On
        # them FedAvg falls in order as heterogeneity grows (IID > Dir(0.1) > Dir(0.05) > pathological) and the
        # ALA s ablation is resolved, which the 8×8 digits did not show (docs/design.md#data; teach-digits).
        data=DataConfig(dataset="mnist_mini", partition="dirichlet", beta=0.1, num_clients=20),
        # An MLP sized by the input, 196→128→64→10 (blocks fc1, fc2, fc: p = 1…3). On a CPU a vmapped conv
        # becomes a slow grouped conv (docs/design.md#performance); model="smallcnn" gives the paper's
        # four-block CNN shape, slower.
        model="mlp",
        rounds=50,
        # A small problem: a larger step than the paper's 0.005 reaches a plateau in 50 rounds.
        lr=0.1,
        # Reference order (no reshuffling, last partial batch dropped) as in every other preset.
        # The per-round train-split losses cost a large share of a run here (docs/design.md) and only Fig. 5
        # draws them; the figure driver asks for them there (record_train_loss=True).
        record_train_loss=False,
        checkpoint_every=0,  # runs take seconds; checkpoints would only cost disk writes
    )


def _teach_digits() -> RunConfig:
    # The teach preset before the embedded MNIST subset: scikit-learn's 8×8 digits (1,797 images), MLP
    # 64→128→64→10, train-split losses recorded. Faster, but FedAvg's accuracy does not fall in order of
    # heterogeneity there (docs/design.md#data).
    return _teach().replace(dataset="digits", record_train_loss=True)


def _teach_fedprox() -> RunConfig:
    # FedProx's own setting (docs/design.md#fedprox): systems heterogeneity on strongly non-IID clients.
    return _teach().replace(
        algo="fedprox",
        # two labels per client: the paper's gain grows with statistical heterogeneity
        partition="pathological", classes_per_client=2,
        # 90 % of the selected clients straggle each round (the paper's largest share); FedAvg drops them,
        # FedProx keeps their partial work (drop_stragglers=None: each algorithm's own choice)
        stragglers=0.9,
        # much local work to cut short (the paper: E = 20; E = 5 keeps a run short here)
        local_epochs=5,
        # the FedProx paper's μ for MNIST; lr·μ = 0.1 keeps the proximal step stable
        mu=1.0,
    )


def _mnist_dir01() -> RunConfig:
    return RunConfig(
        # The FedALA repository's own MNIST Dir(0.1) partition: 20 clients, 52,492 / 17,508 images.
        data=DataConfig(dataset="pfllib:" + mnist_partition_dir(), num_clients=20),
        model="fedavgcnn",
        # Reference hyper-parameters (FedALA run_me.sh / main.py): batch 10, lr 0.005, η = 1, s = 80,
        # p = 1 (layer_idx = 2), ρ = 1, one local epoch; Table 7 runs 2000 rounds.
        rounds=2000, lr=0.005, batch_size=10, eta=1.0, s=80, p=1, join_ratio=1.0,
        eval_every=1,
        # The train-split losses (Fig. 5) cost two forward passes over all 52,492 train images per evaluated
        # round, a large share of a CPU round, and change no result: off; Fig. 5 asks for them (needs=).
        record_train_loss=False,
        checkpoint_every=50,
    )


def _mnist_pat() -> RunConfig:
    return RunConfig(
        # Table 2 / Fig. 4 setting: MNIST pathological, 2 labels per client, 20 clients. From torchvision
        # when its files are present, else the Dir(0.1) partition's images pooled (mnist_pathological_dataset).
        data=DataConfig(dataset=mnist_pathological_dataset(), partition="pathological", classes_per_client=2,
                        num_clients=20),
        model="fedavgcnn", rounds=2000, lr=0.005, batch_size=10, checkpoint_every=50,
        record_train_loss=False,  # as mnist-dir0.1: recording only, costly on a CPU
    )


def _teach_fedlama() -> RunConfig:
    # FedLAMA (algorithms/fedlama.py) on the teach problem: seconds on a CPU. Chosen so that the lecture shows
    # the saving: FedLAMA uploads well under FedAvg(τ0)'s bytes (same 500 local steps) at its accuracy within
    # seed noise, while FedAvg every φ·τ0 steps loses accuracy; the paper's rule (lama_rule="spec") saves
    # almost nothing here. docs/design.md#fedlama has the numbers over seeds, README.md's FedLAMA line today's.
    return _teach().replace(
        algo="fedlama",
        # One round = τ0 = 5 local SGD steps (about half an epoch of a median client), 100 rounds: the 500 steps
        # of 50 rounds of one epoch; local_steps is set too, so `--algos fedavg,fedlama` compares with FedAvg(τ0).
        # φ = 2 as in the paper's main tables (φ = 4 halves the upload again but loses accuracy here).
        tau0=5, local_steps=5, phi=2, rounds=100,
        # The authors' code's rule: it also relaxes the layer at which δ_l crosses 1 − λ_l, here fc1's weight
        # (73 % of the MLP's parameters); the paper's text keeps it at τ0 and saves almost nothing.
        lama_rule="authors",
        # Each client's τ0 steps continue its pass over its data from round to round (FedLAMA's own order); each
        # pass in a fresh order, as the authors' loader reshuffles every epoch.
        shuffle=True,
    )


PRESETS = {
    "teach": (_teach, ("embedded MNIST subset (3,000 digits, 14×14), 20 clients, Dir(0.1), MLP, 50 rounds: "
                       "seconds on a laptop CPU")),
    "teach-digits": (_teach_digits, "teach on scikit-learn's 8×8 digits (the default before mnist_mini)"),
    "teach-fedprox": (_teach_fedprox, ("teach with FedProx's setting: pathological split, E = 5, 90 % stragglers "
                                       "(FedAvg drops them, FedProx keeps their partial work), μ = 1")),
    "mnist-dir0.1": (_mnist_dir01, ("the FedALA repository's real MNIST Dir(0.1) partition with the reference "
                                    "settings ($FEDALA_LAB_MNIST_PARTITION)")),
    "mnist-pat": (_mnist_pat, ("MNIST pathological (2 labels/client), reference settings; torchvision files "
                               "or the Dir(0.1) partition's images pooled")),
    "teach-fedlama": (_teach_fedlama, ("teach with FedLAMA: τ0 = 5 local steps per round, φ = 2, 100 rounds, the "
                                       "authors' interval rule, reshuffled")),
}


def preset(name: str, **overrides) -> RunConfig:
    """A named config with ``overrides`` applied (data fields such as ``num_clients`` are routed; ``data`` takes
    a DataConfig, or a mapping of data fields applied over the preset's)."""
    if name not in PRESETS:
        raise ConfigError("preset", name, "one of " + ", ".join(PRESETS))
    cfg = PRESETS[name][0]()
    if "data" in overrides:
        cfg = replace(cfg, data=_data(cfg.data, overrides.pop("data")))
    return cfg.replace(**overrides) if overrides else cfg


def _data(base: DataConfig, value) -> DataConfig:
    if isinstance(value, DataConfig):
        return value
    names = [f.name for f in fields(DataConfig)]
    if not isinstance(value, Mapping) or not all(k in names for k in value):
        raise ConfigError("data", value, "a DataConfig, or a mapping of data settings (" + ", ".join(names) + ")")
    return replace(base, **value)
