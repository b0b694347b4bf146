"""Where a run computes: the device, torch's CPU threads, and the facts that say where a number came from."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from ..errors import ConfigError
from ..numerics import describe


def resolve_device(name: str) -> torch.device:
    """"auto" → cuda, then mps, then cpu; anything else must be available."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "a device this machine has (no CUDA GPU found); use auto or cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ConfigError("device", name, f"a device this machine has: cuda:0 to cuda:{n - 1} ({n} GPU(s))")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("device", name, "a device this machine has (no Apple MPS found); use auto or cpu")
    return dev


class cpu_threads:
    """Temporarily set torch's CPU threads (None: leave them as they are)."""

    def __init__(self, n: int | None):
        self.n, self.old = n, None

    def __enter__(self):
        if self.n is not None:
            self.old = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            torch.set_num_threads(self.old)
        return False


# glibc's malloc gives a freed block above its mmap threshold (128 KB at first) back to the system and trims
# the free top of its heap above the trim threshold; a training step's tensors of the same sizes, allocated
# again at the next step, then fault fresh zeroed pages in (docs/design.md#performance counts them in a teach
# run and a worker training the MNIST CNN). The values glibc's own adaptive rule rises
# to at most keep that memory for reuse: blocks up to 32 MB from the heap, a free top of up to 64 MB kept.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD, _TRIM_THRESHOLD = 32 << 20, 64 << 20
_MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


@functools.cache
def keep_freed_memory() -> bool:
    """Have this process's allocator keep freed memory for reuse instead of handing it back (see above), once;
    whether that is in effect. Results do not change (only where memory comes from); glibc on Linux only, and
    left alone when glibc's own malloc settings are in the environment (``MALLOC_TRIM_THRESHOLD_``,
    ``MALLOC_MMAP_THRESHOLD_``…, or ``GLIBC_TUNABLES`` naming ``glibc.malloc``): set one of them to choose
    otherwise."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    if any(v in os.environ for v in _MALLOC_VARIABLES) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    # both set: setting either turns glibc's adaptive thresholds off
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


_ENV_CACHE: dict = {}


def environment(device: torch.device) -> dict:
    """Versions, device, git commit: enough to say where a number came from."""
    if "base" not in _ENV_CACHE:
        import sys

        import numpy
        import pandas

        from .._version import __version__

        commit = None
        try:
            here = Path(__file__).resolve().parent
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                    timeout=5, check=False).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
        _ENV_CACHE["base"] = {
            "fedala_lab": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": numpy.__version__, "pandas": pandas.__version__, "platform": platform.platform(),
            "git_commit": commit, "torch_threads": torch.get_num_threads(),
        }
    env = dict(_ENV_CACHE["base"])
    env["device"] = str(device)
    env["numerics"] = describe(device)
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


__all__ = ["cpu_threads", "environment", "keep_freed_memory", "resolve_device"]
