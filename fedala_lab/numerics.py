"""Which arithmetic computes a run on a CPU, and the platform that names it (docs/design.md#numbers-across-machines).

PyTorch picks its CPU kernels by what the processor offers: ATen's vectorised kernels by instruction set
(AVX-512, AVX2 or none), MKL's matrix products by the CPU's vendor and model, oneDNN's convolutions by
instruction set. Each sums in its own order, so the same run ends a point apart on two CPU families, the same
on every repeat on each. Two modes, chosen by ``$FEDALA_LAB_NUMERICS`` before torch computes anything:

- ``native`` (the default): the fastest kernels this CPU has. Results repeat on this machine and on machines
  of the same CPU family, not across families.
- ``portable``: ATen's AVX2 kernels, MKL's COMPATIBLE branch and oneDNN at most AVX2 — the same numbers on
  every x86-64 CPU with AVX2, Intel or AMD, a little slower (benchmarks/results.md measures it). Elsewhere (an
  ARM laptop, a GPU) there is nothing to pin: the numbers are that platform's own.

:func:`platform_id` names what computed a run (device, mode, kernels chosen); it is part of every run's key, so
a store shared between machines never serves one machine's numbers as another's.

This module imports no torch at import time: the package applies ``$FEDALA_LAB_NUMERICS`` (:func:`apply`) before
anything of torch computes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys

from .errors import ConfigError

VARIABLE = "FEDALA_LAB_NUMERICS"
MODES = ("native", "portable")
# what portable pins, and to what: the environment variables torch's CPU libraries read
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# the CPU features that decide which kernels these libraries choose (a subset of /proc/cpuinfo's flags)
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
_MKL_COMPATIBLE = 3  # MKL_CBWR_COMPATIBLE, mkl_cbwr_set's code for that branch
# mkl_cbwr_get's codes (mkl_cbwr.h): 1 = MKL's own choice per CPU (no reproducibility branch set)
_MKL_BRANCHES = {1: "auto", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}


def mode() -> str:
    """The numerics mode ``$FEDALA_LAB_NUMERICS`` asks for ("native" when unset)."""
    raw = os.environ.get(VARIABLE)
    if raw is None:
        return "native"
    if raw.strip().lower() not in MODES:
        raise ConfigError(VARIABLE, raw, "native (the fastest kernels of this CPU; the default) or portable (the "
                                         "same numbers on every x86-64 CPU with AVX2)")
    return raw.strip().lower()


@functools.cache
def cpu() -> dict:
    """This machine's processor: ``arch``, ``vendor``, ``model`` and the kernel-deciding ``flags`` (Linux reads
    /proc/cpuinfo; elsewhere what ``platform`` says)."""
    arch = platform.machine().lower().replace("amd64", "x86_64")
    info = {"arch": arch, "vendor": "", "model": platform.processor() or arch, "flags": []}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError:
        return info
    fields = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields.setdefault(k.strip(), v.strip())
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    info.update(vendor=fields.get("vendor_id", fields.get("CPU implementer", "")),
                model=fields.get("model name", info["model"]), flags=sorted(flags & set(_ISA_FLAGS)) or sorted(flags))
    return info


def portable_possible() -> bool:
    """Whether portable numerics can be had here: an x86-64 CPU with AVX2 and FMA."""
    c = cpu()
    return c["arch"] == "x86_64" and {"avx2", "fma"} <= set(c["flags"])


def apply() -> str:
    """Put ``$FEDALA_LAB_NUMERICS`` into effect for this process (and the processes it starts, which inherit the
    environment); the mode. Portable sets :data:`PORTABLE_ENV` — read by torch when it first computes — and,
    if torch is already loaded, asks MKL for its COMPATIBLE branch directly. Refused (ConfigError) where it
    cannot hold: on a CPU without AVX2, against a contrary setting of those variables, or when torch has
    already computed with other kernels."""
    m = mode()
    if m == "native":
        return m
    if not portable_possible():
        c = cpu()
        raise ConfigError(VARIABLE, "portable", f"native on this machine ({c['arch']}, {c['model']}): portable "
                                                "numbers need an x86-64 CPU with AVX2")
    for name, value in PORTABLE_ENV.items():
        have = os.environ.get(name)
        if have is not None and have.strip().upper() != value.upper():
            raise ConfigError(VARIABLE, "portable", f"native while ${name}={have} is set (portable needs {value})")
        os.environ[name] = value
    if "torch" in sys.modules:
        _mkl_compatible()
        _check_portable()
    return m


def _mkl():
    """MKL's service library inside torch (ctypes), or None where torch has no MKL."""
    import ctypes

    import torch

    lib = os.path.join(os.path.dirname(torch.__file__), "lib",
                       "libtorch_cpu.so" if sys.platform.startswith("linux") else "libtorch_cpu.dylib")
    try:
        mkl = ctypes.CDLL(lib)
        mkl.mkl_serv_cbwr_get.restype = ctypes.c_int
        mkl.mkl_serv_cbwr_get_auto_branch.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return mkl


def _mkl_compatible() -> None:
    """MKL's COMPATIBLE branch for a torch already loaded (MKL reads ``MKL_CBWR`` only as it loads)."""
    mkl = _mkl()
    if mkl is not None and mkl.mkl_serv_cbwr_get(1) != _MKL_COMPATIBLE:
        mkl.mkl_serv_cbwr_set(_MKL_COMPATIBLE)  # refused once MKL has computed: _check_portable says so


def _check_portable() -> None:
    kernels = chosen()
    if kernels["aten"] != "AVX2" or kernels["mkl"] not in ("COMPATIBLE", None):
        raise ConfigError(VARIABLE, "portable", f"set before torch computes anything in this process (torch "
                                                f"already uses ATen {kernels['aten']}, MKL {kernels['mkl']}): set it "
                                                "in the environment, or call fedala_lab.numerics.use('portable') "
                                                "first thing")


def use(name: str) -> str:
    """Choose the numerics mode from Python (a notebook's first cell): ``$FEDALA_LAB_NUMERICS`` set and applied
    (see :func:`apply`)."""
    if name not in MODES:
        raise ConfigError("numerics", name, " or ".join(MODES))
    if name == "native" and mode() == "portable" and "torch" in sys.modules:
        raise ConfigError("numerics", name, "portable: this process already set torch's kernels for it")
    os.environ[VARIABLE] = name
    return apply()


def chosen() -> dict:
    """The CPU kernels torch uses in this process: ``aten`` (its vector kernels: AVX512, AVX2, DEFAULT…),
    ``mkl`` (MKL's branch: "auto" for its own choice, COMPATIBLE…; None without MKL), ``mkl_auto`` (the branch
    MKL's own choice takes on this CPU) and ``onednn`` (the most oneDNN may use)."""
    import torch

    mkl = _mkl()
    return {"aten": torch.backends.cpu.get_cpu_capability(),
            "mkl": None if mkl is None else _MKL_BRANCHES.get(mkl.mkl_serv_cbwr_get(1), str(mkl.mkl_serv_cbwr_get(1))),
            "mkl_auto": None if mkl is None else int(mkl.mkl_serv_cbwr_get_auto_branch()),
            "onednn": os.environ.get("ONEDNN_MAX_CPU_ISA", "auto")}


@functools.cache
def _platform(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        i = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(i)
        return (f"cuda:{torch.cuda.get_device_name(i)}:sm{major}{minor}:cuda{torch.version.cuda}"
                f":cudnn{torch.backends.cudnn.version()}")
    if device.startswith("mps"):
        return f"mps:{cpu()['model']}"
    if mode() == "portable":
        apply()  # refuses, in one line, what cannot hold (no AVX2, torch already computing otherwise)
        return "x86_64:portable-avx2"
    kernels, c = chosen(), cpu()
    flags = hashlib.sha256(" ".join(c["flags"]).encode()).hexdigest()[:8]
    blas = f"mkl-{kernels['mkl']}-{kernels['mkl_auto']}" if kernels["mkl"] is not None else "blas"
    return f"{c['arch']}:{c['vendor'] or 'cpu'}:{kernels['aten']}:{blas}:{kernels['onednn']}:isa-{flags}"


def platform_id(device) -> str:
    """The short name of what computes a run on ``device`` here: for a CPU the mode and the kernels torch chose
    (with a digest of the kernel-deciding CPU features), for a GPU its model, compute capability and the
    CUDA/cuDNN versions. Equal names ⇒ equal numbers for equal runs (portable: on every x86-64 CPU with AVX2)."""
    return _platform(str(device))


def describe(device) -> dict:
    """What a run's manifest records of where it was computed: the platform name, the mode, the CPU, the
    kernels, torch's version."""
    import torch

    c = cpu()
    out = {"platform": platform_id(device), "numerics": mode(), "cpu": c["model"], "arch": c["arch"],
           "torch": torch.__version__}
    if str(device).startswith("cpu"):
        out["kernels"] = chosen()
    return out


__all__ = ["MODES", "PORTABLE_ENV", "VARIABLE", "apply", "chosen", "cpu", "describe", "mode", "platform_id",
           "portable_possible", "use"]
