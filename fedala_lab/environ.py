"""The environment variables fedala_lab reads, and the one check of their values.

A variable that is set but holds no usable value is refused with one line naming it and what it may hold
(a :class:`~fedala_lab.errors.ConfigError`), never ignored and never taken for the current folder (an empty
path is ``.``). Each is checked where it is read; the command line and the app check them all before any
work (:func:`check_environment`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

RUNS = "FEDALA_LAB_RUNS"
APP_RUNS = "FEDALA_LAB_APP_RUNS"
DATA = "FEDALA_LAB_DATA"
MNIST_PARTITION = "FEDALA_LAB_MNIST_PARTITION"
SHARED_DATA = "FEDALA_LAB_SHARED_DATA"
RECORDED = "FEDALA_LAB_RECORDED"
WORKERS = "FEDALA_LAB_WORKERS"
PROCESSES = "FEDALA_LAB_PROCESSES"
FORWARD_THREADS = "FEDALA_LAB_FORWARD_THREADS"

# name -> what the folder is and the default when the variable is unset
FOLDERS = {
    RUNS: "the run store; unset: ./runs",
    APP_RUNS: "the app's run store; unset: ./runs/app",
    DATA: "torchvision's data folder; unset: ~/.cache/fedala_lab/data",
    MNIST_PARTITION: "the FedALA repository's MNIST Dir(0.1) partition, e.g. its dataset/mnist-0.1-npz",
    SHARED_DATA: "a folder holding fedala-mnist-dir0.1, the MNIST Dir(0.1) partition",
    RECORDED: "the recorded MNIST figures; unset: figures/mnist of the checkout",
}
# name -> what the number counts (a whole number >= 1)
COUNTS = {
    WORKERS: "worker processes for local training; unset: one per CPU core",
    PROCESSES: "processes computing several runs side by side (the app's clicks, get_or_run_many); unset: one "
               "per CPU core, at most 4",
    FORWARD_THREADS: "the most threads for forward passes, 1 turns them off; unset: one per worker",
}


def env_folder(name: str) -> Path | None:
    """The folder ``$name`` names, or None when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    if not raw.strip():
        raise ConfigError(name, raw, f"a folder path ({FOLDERS[name]})")
    return Path(raw).expanduser()


def env_count(name: str) -> int | None:
    """The whole number >= 1 that ``$name`` holds, or None when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(name, raw, f"a whole number >= 1 ({COUNTS[name]})")
    return n


def check_environment() -> None:
    """Refuse a bad value of any of fedala_lab's variables now, before a command or the app starts work."""
    for name in FOLDERS:
        env_folder(name)
    for name in COUNTS:
        env_count(name)


__all__ = ["COUNTS", "FOLDERS", "check_environment", "env_count", "env_folder"]
