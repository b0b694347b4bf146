"""Where a round's time goes on a CUDA GPU: kernels, launches and host syncs (torch.profiler).

    python benchmarks/gpu_profile.py                          # FedALA on mnist-dir0.1, vectorised
    python benchmarks/gpu_profile.py --algo fedavg --out prof.md --trace trace.json.gz

Runs ``--warm`` rounds first (FedALA: round 1 has no ALA, round 2 is ALA's start phase), then profiles one
normal round and times ``--timed`` more without the profiler (CUDA synchronised around each, so the
seconds are the GPU's, not the launch queue's). The profiled rounds are short on purpose, with the preset's
shapes (model, clients, batch size): ``--local-steps`` SGD steps per round instead of an epoch and ALA on
``--s`` % of each client's rows, since torch.profiler takes minutes to digest the events of a whole MNIST
round (about 260 SGD and 210 ALA steps). Per-step numbers carry over to the full round. Reports:

- the round's wall time against the time the GPU spent in kernels (the sum of kernel durations: the
  floor a round could reach with no launch gaps);
- launches (``cudaLaunchKernel`` and friends), host syncs (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, device-to-host copies) and their CPU time;
- the top operators by GPU time and by CPU time, and the phase split of the timed rounds.

Needs a CUDA GPU; it says so and exits 2 without one.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import time

import torch

from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments.presets import preset

LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync", "cudaMemcpy")


def _dev_time(e) -> float:
    """An averaged event's own GPU time in µs (the attribute's name moved between torch versions)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(e, name):
            return float(getattr(e, name))
    return 0.0


def _is_kernel(e) -> bool:
    """A GPU-side event (a kernel or a copy), not the CPU-side operator that launched it: summing both would
    count each kernel twice."""
    from torch.autograd import DeviceType

    return getattr(e, "device_type", None) == DeviceType.CUDA


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mnist-dir0.1")
    ap.add_argument("--algo", default="fedala")
    ap.add_argument("--backend", default="vectorised", choices=["vectorised", "loop"])
    ap.add_argument("--warm", type=int, default=2, help="rounds before the profiled one")
    ap.add_argument("--timed", type=int, default=3, help="normal rounds timed after it, without the profiler")
    ap.add_argument("--graphs", action="store_true", help="Simulation(graphs=True): steps replayed from CUDA graphs")
    ap.add_argument("--local-steps", type=int, default=20, help="SGD steps per round (default 20)")
    ap.add_argument("--s", type=float, default=5.0, help="ALA's window, %% of a client's rows (default 5)")
    ap.add_argument("--device", default="cuda", help="cuda (cpu: to try the script on a machine without one)")
    ap.add_argument("--out", default=None, help="also write the report (Markdown) here")
    ap.add_argument("--trace", default=None, help="write a Chrome trace of the profiled round (.json.gz)")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu_profile.py: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    rounds = args.warm + 1 + args.timed
    cfg = preset(args.preset, device=args.device, rounds=rounds, checkpoint_every=0).replace(
        algo=args.algo, backend=args.backend, local_steps=args.local_steps, s=args.s)
    data = FederatedData.from_config(cfg.data, torch.device(args.device))
    sim = Simulation(cfg, data, graphs=args.graphs)
    t = 0
    for _ in range(args.warm):
        t += 1
        sim.run_round(t)
        sim.round = t
    from torch.profiler import ProfilerActivity, profile

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t += 1
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        t0 = time.perf_counter()
        sim.run_round(t)
        sync()
        profiled_wall = time.perf_counter() - t0
    sim.round = t
    walls, phases = [], []
    for _ in range(args.timed):
        t += 1
        sync()
        t0 = time.perf_counter()
        row = sim.run_round(t)
        sync()
        walls.append(time.perf_counter() - t0)
        sim.round = t
        phases.append({k: row.get(f"{k}_seconds", float("nan")) for k in ("init", "eval", "train", "aggregate")})

    ka = prof.key_averages()
    kernels = [e for e in ka if _is_kernel(e)]
    kernel_us = sum(_dev_time(e) for e in kernels)
    kernel_n = sum(e.count for e in kernels)
    launches = sum(e.count for e in ka if e.key in LAUNCH)
    syncs = {e.key: (e.count, e.cpu_time_total / 1e3) for e in ka if e.key in SYNC}
    by_gpu = sorted(kernels, key=_dev_time, reverse=True)[:15]
    by_cpu = sorted((e for e in ka if not _is_kernel(e)), key=lambda e: e.self_cpu_time_total, reverse=True)[:20]
    med = statistics.median(walls) if walls else float("nan")
    where = torch.cuda.get_device_name() if cuda else "CPU"
    how = args.backend + (" with CUDA graphs" if args.graphs else "")
    lines = [f"## GPU profile: {args.algo} on {args.preset}, {how} — {where}", "",
             (f"torch {torch.__version__}; {cfg.data.num_clients} clients, batch {cfg.batch_size}, "
              f"{cfg.local_steps} SGD steps a round, ALA on s = {cfg.s:g} %, "
              f"record_train_loss={cfg.record_train_loss}; profiled round {args.warm + 1}; load average "
              f"{os.getloadavg()[0]:.2f}."), "",
             "| | value |", "|---|---:|",
             f"| profiled round, wall (s, with the profiler's overhead) | {profiled_wall:.3f} |",
             f"| timed rounds, wall (s, median of {len(walls)}, no profiler) | {med:.3f} |",
             f"| GPU busy in kernels during the profiled round (s) | {kernel_us / 1e6:.3f} |",
             f"| kernel time ÷ timed round | {kernel_us / 1e6 / med:.2f} |",
             f"| kernels and copies run on the GPU | {kernel_n} |",
             f"| launch calls on the CPU ({', '.join(LAUNCH[:2])}, …) | {launches} |",
             f"| mean kernel length (µs) | {kernel_us / max(kernel_n, 1):.1f} |",
             f"| CPU time per launch in the round (µs: timed round ÷ launches) | {med * 1e6 / max(launches, 1):.1f} |"]
    for k, (n, ms) in sorted(syncs.items()):
        lines.append(f"| {k}: calls / CPU ms | {n} / {ms:.1f} |")
    if phases:
        lines += ["", "Timed rounds' phases (s, median): " + ", ".join(
            f"{k} {statistics.median(p[k] for p in phases):.3f}" for k in phases[0])]
    lines += ["", "Top kernels by GPU time:", "", "| kernel | runs | GPU ms |", "|---|---:|---:|"]
    lines += [f"| `{e.key[:90]}` | {e.count} | {_dev_time(e) / 1e3:.1f} |" for e in by_gpu]
    lines += ["", "Top operators by own CPU time:", "", "| op | calls | CPU ms | GPU ms |", "|---|---:|---:|---:|"]
    lines += [f"| `{e.key[:70]}` | {e.count} | {e.self_cpu_time_total / 1e3:.1f} | {_dev_time(e) / 1e3:.1f} |"
              for e in by_cpu]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n")
    if args.trace:
        raw = args.trace.removesuffix(".gz")
        prof.export_chrome_trace(raw)
        if args.trace.endswith(".gz"):
            with open(raw, "rb") as src, gzip.open(args.trace, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
