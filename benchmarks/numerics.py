"""What portable numerics cost, and that they do not move: native against portable, paired, in fresh processes.

    python benchmarks/numerics.py [--repeats 5] [--append benchmarks/results.md]

Each repeat runs, in turn and each in a process of its own (torch reads the kernel settings as it starts):
``make run``'s three runs (FedAvg, FedProx, FedALA on the teach preset, 50 rounds, the MLP) and a CNN case
(FedALA on the teach data with ``smallcnn``, 10 rounds: convolutions go through oneDNN), once with native and
once with portable numerics (``FEDALA_LAB_NUMERICS``), computed with ``cache="off"``. Reported: the median of
the simulation seconds each mode took (the runs' own clocks, no process start) and the median of the paired
ratios portable / native, with the load average before and after. Then the portable numbers again with the
other instruction-set paths forced (``ATEN``/oneDNN caps, glibc told there is no AVX-512): they must not move.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "make run (MLP, 3 × 50 rounds)": [{"algo": a} for a in ("fedavg", "fedprox", "fedala")],
    "smallcnn FedALA, 10 rounds": [{"algo": "fedala", "model": "smallcnn", "rounds": 10}],
}
CHILD = """
import json, sys
from fedala_lab import preset, numerics
from fedala_lab.experiments.runs import get_or_run
out = []
for kw in json.loads(sys.argv[1]):
    run = get_or_run(preset("teach", **kw), cache="off", progress=False)
    s = run.summary()
    out.append({"seconds": s["seconds"], "best": s["best_acc"], "final": s["final_acc"]})
print(json.dumps({"runs": out, "platform": numerics.platform_id("cpu"), "kernels": numerics.chosen()}))
"""
NO_AVX512 = "glibc.cpu.hwcaps=-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-AVX512CD"


def child(case: list[dict], mode: str, extra: dict | None = None) -> dict:
    env = {**os.environ, "FEDALA_LAB_NUMERICS": mode, "PYTHONPATH": str(ROOT), **(extra or {})}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--append", type=Path, default=None)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    rows, numbers = [], {}
    for name, case in CASES.items():
        secs = {"native": [], "portable": []}
        for _ in range(args.repeats):
            for mode in ("native", "portable"):  # interleaved: a drift of the machine's speed hits both
                got = child(case, mode)
                secs[mode].append(sum(r["seconds"] for r in got["runs"]))
                numbers.setdefault((name, mode), set()).add(json.dumps([(r["best"], r["final"]) for r in got["runs"]]))
                numbers[(name, mode, "platform")] = got["platform"]
        ratios = [p / n for p, n in zip(secs["portable"], secs["native"])]
        rows.append((name, statistics.median(secs["native"]), statistics.median(secs["portable"]),
                     statistics.median(ratios), min(ratios), max(ratios)))
        print(rows[-1], file=sys.stderr, flush=True)
    forced = {"ATEN/oneDNN at AVX2, glibc without AVX-512": {"ONEDNN_MAX_CPU_ISA": "AVX2", "GLIBC_TUNABLES": NO_AVX512}}
    stays = {}
    for label, extra in forced.items():
        for name, case in CASES.items():
            got = child(case, "portable", extra)
            stays[(label, name)] = json.dumps([(r["best"], r["final"]) for r in got["runs"]]) in numbers[(name, "portable")]
    load1 = os.getloadavg()[0]
    import torch

    lines = [f"\n## Portable numerics: cost and stability (`numerics.py`, {time.strftime('%Y-%m-%d')})\n",
             (f"{platform.processor() or platform.machine()} · {os.cpu_count()} CPUs · torch {torch.__version__} · "
              f"{args.repeats} interleaved repeats, each mode in a fresh process · load average {load0:.2f} before, "
              f"{load1:.2f} after. Seconds: the runs' own simulation clocks (no process start), medians.\n"),
             "| case | native s | portable s | portable / native (median of pairs, min–max) | repeats give one result |",
             "|---|---:|---:|---|---|"]
    for name, nat, por, r, lo, hi in rows:
        same = all(len(numbers[(name, m)]) == 1 for m in ("native", "portable"))
        lines.append(f"| {name} | {nat:.2f} | {por:.2f} | {r:.2f}× ({lo:.2f}–{hi:.2f}) | {'yes' if same else 'NO'} |")
    lines.append("")
    for name in CASES:
        for mode in ("native", "portable"):
            res = json.loads(next(iter(numbers[(name, mode)])))
            lines.append(f"- {name}, {mode} (`{numbers[(name, mode, 'platform')]}`): best / final % "
                         + ", ".join(f"{b:.2f} / {f:.2f}" for b, f in res))
    for (label, name), ok in stays.items():
        lines.append(f"- portable with {label}, {name}: {'the same numbers' if ok else 'OTHER NUMBERS'}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.append:
        with open(args.append, "a") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
