"""What recording the test AUC every round costs: the same run with and without it, in alternating pairs.

The round's test evaluation scores every row (the softmax of its outputs travels back with the losses) and
compute/metrics.py ranks them, one sort for all clients. Without AUC the evaluation returns losses and counts only
(here by forcing ``auc=False``). Each pair runs both, in alternating order, so a change of the machine's load
hits both alike; the load average is printed before and after.

    python benchmarks/auc_cost.py --preset teach --algo fedavg --pairs 5
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from fedala_lab.algorithms.base import Round
from fedala_lab.engine.simulate import Simulation, simulate
from fedala_lab.experiments.presets import preset


def _without_auc():
    """Round.evaluate with the AUC off, NaN in its place: the evaluation as it was before AUC was recorded."""
    scored = Round.evaluate

    def evaluate(self, params, buffers, split="test", clients=None, *, auc=False):
        out = scored(self, params, buffers, split, clients)
        if auc:
            out["auc"] = np.full(len(out["num"]), np.nan)
        return out

    return scored, evaluate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="teach")
    ap.add_argument("--algo", default="fedavg")
    ap.add_argument("--rounds", type=int, default=None, help="default: the preset's")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200, help="alternating evaluation calls of each kind")
    args = ap.parse_args()
    cfg = preset(args.preset, algo=args.algo, **({"rounds": args.rounds} if args.rounds else {}))
    scored, unscored = _without_auc()
    load0 = os.getloadavg()
    times = {"with": [], "without": []}
    evals = {"with": [], "without": []}
    for i in range(args.pairs):
        for mode in (("with", "without") if i % 2 == 0 else ("without", "with")):
            Round.evaluate = scored if mode == "with" else unscored
            tic = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run = simulate(cfg, progress=False)
            times[mode].append(time.perf_counter() - tic)
            evals[mode].append(float(run.rounds["eval_seconds"].sum()))
    Round.evaluate = scored
    load1 = os.getloadavg()
    w, wo = np.array(times["with"]), np.array(times["without"])
    ew, ewo = np.array(evals["with"]), np.array(evals["without"])
    per_round = (ew - ewo) / cfg.rounds * 1e3
    print(f"{args.preset}, {args.algo}, {cfg.rounds} rounds, {args.pairs} pairs; load average (1, 5, 15 min) "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} before, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} after")
    print(f"run seconds, median: with AUC {np.median(w):.3f}, without {np.median(wo):.3f}; paired ratio "
          f"{np.median(w / wo):.3f} (min {np.min(w / wo):.3f}, max {np.max(w / wo):.3f})")
    print(f"evaluation seconds per run, median: with {np.median(ew):.3f}, without {np.median(ewo):.3f}; "
          f"paired difference per round {np.median(per_round):.2f} ms (min {per_round.min():.2f}, "
          f"max {per_round.max():.2f})")
    # the round's test evaluation alone, many alternating calls: less of the machine's noise than whole runs
    sim = Simulation(cfg)
    rnd = sim.round_view(1)
    calls = {True: [], False: []}
    for i in range(2 * args.calls):
        auc = i % 2 == 0
        tic = time.perf_counter()
        rnd.evaluate(sim.local_params, sim.local_buffers, "test", auc=auc)
        calls[auc].append(time.perf_counter() - tic)
    sim.close()
    on, off = np.median(calls[True]) * 1e3, np.median(calls[False]) * 1e3
    load2 = os.getloadavg()
    print(f"one test evaluation of all {sim.num_clients} clients, median of {args.calls} each: with AUC {on:.3f} ms, "
          f"without {off:.3f} ms (+{on - off:.3f} ms); load average {load2[0]:.2f} after")


if __name__ == "__main__":
    main()
