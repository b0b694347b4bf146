"""The lecture's click, checkout against checkout: ``teach`` runs simulated in one process per repeat, the
checkouts interleaved (A B, then B A, …), medians and paired ratios.

    python benchmarks/teach_click.py --checkouts /path/to/before .          # FedAvg + FedALA, 5 repeats
    python benchmarks/teach_click.py --checkouts OLD NEW --algos fedavg,fedala,local --repeats 7

Each repeat starts ``python -c`` with ``PYTHONPATH`` set to the checkout (a script in benchmarks/ would otherwise
import the installed, editable checkout), builds the data, runs every algorithm once for two rounds (imports and
first-call costs out of the timing), then times ``simulate(preset("teach", algo=a))`` for each algorithm in turn
(the embedded MNIST subset, 20 clients, Dir(0.1), MLP, 50 rounds: what the app's default click computes,
without the web server). Reported: per checkout the median of the summed seconds and of each algorithm's, each
algorithm's final accuracy (so a change that moves results shows), the paired ratio of each checkout to the
first (repeat by repeat, then the median), and the load average before and after. On the shared 2-core
machines only ratios taken side by side mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import fedala_lab as fl
algos = sys.argv[1].split(",")
for a in algos:
    fl.simulate(fl.preset("teach", algo=a, rounds=2), progress=False)
out = {}
for a in algos:
    t0 = time.perf_counter()
    run = fl.simulate(fl.preset("teach", algo=a), progress=False)
    out[a] = {"seconds": time.perf_counter() - t0, "final_acc": run.final_acc}
print(json.dumps(out))
"""


def once(checkout: Path, algos: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    res = subprocess.run([sys.executable, "-c", CHILD, algos], cwd=checkout, env=env, capture_output=True,
                         text=True, check=False)
    if res.returncode:
        raise SystemExit(f"{checkout}: exit {res.returncode}\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkouts", nargs="+", type=Path, required=True, help="checkout folders; the first is the "
                    "baseline of the ratios")
    ap.add_argument("--algos", default="fedavg,fedala")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cos = [c.resolve() for c in args.checkouts]
    algos = args.algos.split(",")
    before = os.getloadavg()
    runs: dict[Path, list[dict]] = {c: [] for c in cos}
    for r in range(args.repeats):
        for c in (cos if r % 2 == 0 else cos[::-1]):
            runs[c].append(once(c, args.algos))
            print(f"repeat {r + 1}, {c.name or c}: " + ", ".join(
                f"{a} {runs[c][-1][a]['seconds']:.2f} s" for a in algos), flush=True)
    after = os.getloadavg()
    total = {c: [sum(x[a]["seconds"] for a in algos) for x in runs[c]] for c in cos}
    print(f"\nteach, {'+'.join(algos)}, 50 rounds each; {args.repeats} interleaved repeats; load average "
          f"{before[0]:.2f} before, {after[0]:.2f} after (1 min); torch threads: the engine's default\n")
    print("| checkout | " + " | ".join(f"{a} s" for a in algos) + " | total s (median) | ratio to first (paired, "
          "median) | " + " | ".join(f"{a} final %" for a in algos) + " |")
    print("|---|" + "---:|" * (2 * len(algos) + 2))
    for c in cos:
        ratio = statistics.median(t / b for t, b in zip(total[c], total[cos[0]], strict=True))
        print(f"| {c} | " + " | ".join(f"{statistics.median(x[a]['seconds'] for x in runs[c]):.2f}" for a in algos)
              + f" | {statistics.median(total[c]):.2f} | {ratio:.2f} | "
              + " | ".join(f"{100 * runs[c][0][a]['final_acc']:.2f}" for a in algos) + " |")


if __name__ == "__main__":
    main()
