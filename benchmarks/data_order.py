"""What the data order changes in the pFL comparison: each client's train split walked in its stored order every
epoch (the official FedALA code's ``DataLoader(shuffle=False)``) against reshuffled every epoch (PFLlib's, under
which the FedALA paper's baselines ran).

Runs each method with ``shuffle`` False and True on the same data and seeds and prints the pooled test accuracy
(%) of the last and of the best round, mean over seeds, and the paired difference (reshuffled minus stored).

    python benchmarks/data_order.py --preset teach --rounds 10 --seeds 0,1,2
    FEDALA_LAB_MNIST_PARTITION=... python benchmarks/data_order.py --preset mnist-dir0.1 --rounds 5 --seeds 0 \\
        --algos fedavg,fedrep,fedala
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from fedala_lab.experiments.plans import PAPER_METHODS
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="teach")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--algos", default=",".join(PAPER_METHODS))
    ap.add_argument("--store", default=None, help="run store (default: $FEDALA_LAB_RUNS or ./runs)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{args.preset}, {args.rounds} rounds, seeds {seeds}: pooled test accuracy %, mean over seeds; "
          "diff = reshuffled − stored order, paired by seed")
    print(f"{'method':<22}{'stored final':>13}{'shuffled final':>15}{'diff':>8}{'stored best':>13}"
          f"{'shuffled best':>14}{'diff':>8}{'seconds':>9}")
    for algo in args.algos.split(","):
        tic = time.perf_counter()
        acc = {}
        for shuffle in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs = [get_or_run(preset(args.preset, algo=algo, rounds=args.rounds, seed=s, shuffle=shuffle),
                                   args.store, progress=False) for s in seeds]
            acc[shuffle] = np.array([[r.final_acc, r.best_acc] for r in runs])
        d = acc[True] - acc[False]
        print(f"{algo:<22}{acc[False][:, 0].mean():13.2f}{acc[True][:, 0].mean():15.2f}{d[:, 0].mean():+8.2f}"
              f"{acc[False][:, 1].mean():13.2f}{acc[True][:, 1].mean():14.2f}{d[:, 1].mean():+8.2f}"
              f"{time.perf_counter() - tic:9.1f}", flush=True)


if __name__ == "__main__":
    main()
