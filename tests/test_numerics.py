"""Numbers across machines (docs/design.md#numbers-across-machines): the numerics mode, the platform in every
run key and manifest, and portable numbers that do not move when the other instruction-set paths are forced
(how an AVX2-only host computes). Processes of their own: torch reads the kernel settings as it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedala_lab import numerics
from fedala_lab.errors import ConfigError
from fedala_lab.experiments.presets import preset

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json
from fedala_lab import preset, numerics
from fedala_lab.experiments.runs import get_or_run
cfg = preset("teach", algo="fedala", rounds=8, num_clients=10)
run = get_or_run(cfg, cache="off", progress=False)
print(json.dumps({"acc": run.rounds["acc"].tolist(), "key": cfg.key(), "platform": numerics.platform_id("cpu"),
                  "recorded": run.meta["env"]["numerics"]}))
"""
# how an AVX2-only x86-64 host computes, as far as one host can pretend: the vector kernels capped at AVX2 and
# glibc told the CPU has no AVX-512
AVX2_HOST = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-AVX512CD"}


def child(**env) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k not in ("FEDALA_LAB_NUMERICS", *AVX2_HOST, "MKL_CBWR")},
           "PYTHONPATH": str(ROOT), **env}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_portable = pytest.mark.skipif(not numerics.portable_possible(), reason="portable numerics need x86-64 with AVX2")


@needs_portable
def test_portable_numbers_do_not_move_with_the_cpus_instruction_sets():
    portable = child(FEDALA_LAB_NUMERICS="portable")
    as_avx2_host = child(FEDALA_LAB_NUMERICS="portable", ONEDNN_MAX_CPU_ISA="AVX2",
                         GLIBC_TUNABLES=AVX2_HOST["GLIBC_TUNABLES"])
    assert portable["acc"] == as_avx2_host["acc"] and portable["key"] == as_avx2_host["key"]
    assert portable["platform"] == "x86_64:portable-avx2"
    kernels = portable["recorded"]["kernels"]
    assert kernels["aten"] == "AVX2" and kernels["mkl"] in ("COMPATIBLE", None) and kernels["onednn"] == "AVX2"
    assert portable["recorded"]["numerics"] == "portable" and portable["recorded"]["platform"] == portable["platform"]

    native = child()
    assert native["platform"] != portable["platform"] and native["key"] != portable["key"]  # stored apart
    assert native["recorded"]["numerics"] == "native"
    other_kernels = child(ATEN_CPU_CAPABILITY="default")  # another CPU family's kernels: another platform
    assert other_kernels["platform"] != native["platform"] and other_kernels["key"] != native["key"]


def test_the_platform_is_in_every_key_and_manifest(tmp_path):
    from fedala_lab.experiments.runs import get_or_run
    from fedala_lab.record.run import computed_on, served_note

    cfg = preset("teach-digits", algo="fedavg", rounds=2, num_clients=4)
    assert cfg.code()["platform"] == numerics.platform_id("cpu") == cfg.platform()
    run = get_or_run(cfg, tmp_path, progress=False)
    again = get_or_run(cfg, tmp_path, progress=False)
    assert not run.served and again.served
    rec = again.meta["env"]["numerics"]
    assert rec["platform"] == cfg.platform() and rec["cpu"] and rec["torch"]
    note = served_note(again)
    assert "served from the run store" in note and cfg.key() in note and cfg.platform() in note
    assert computed_on(again).startswith("computed 20") and " UTC on " in computed_on(again)


def test_modes_are_checked():
    env = os.environ.get(numerics.VARIABLE)
    try:
        os.environ[numerics.VARIABLE] = "fastest"
        with pytest.raises(ConfigError, match="FEDALA_LAB_NUMERICS='fastest' is not allowed: native"):
            numerics.mode()
        with pytest.raises(ConfigError, match="numerics='fast' is not allowed"):
            numerics.use("fast")
    finally:
        if env is None:
            os.environ.pop(numerics.VARIABLE, None)
        else:
            os.environ[numerics.VARIABLE] = env


@needs_portable
def test_portable_too_late_or_against_a_contrary_setting_is_refused_in_one_line():
    late = ("import torch; (torch.randn(8, 8) @ torch.randn(8, 8)).sum()\n"
            "from fedala_lab import numerics\nnumerics.use('portable')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FEDALA_LAB_NUMERICS", None)
    out = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "set before torch computes anything" in out.stderr
    cli = subprocess.run([sys.executable, "-m", "fedala_lab.cli", "run", "--preset", "teach", "--algos", "fedavg"],
                         env={**env, "FEDALA_LAB_NUMERICS": "portable", "MKL_CBWR": "AVX2"}, capture_output=True,
                         text=True, check=False)
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "$MKL_CBWR=AVX2" in cli.stderr
