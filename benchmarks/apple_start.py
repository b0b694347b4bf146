"""Why APPLE starts near chance: its core models learn at η·p_ii, 1/N of the others' rate while p is uniform.

APPLE's personalised model is θ̃_i = Σ_j p_ij θ_j, so the gradient reaching client i's own core θ_i is p_ii·g:
with p_i uniform at the start (1/N) each core moves N times less per step than a FedAvg client's model. This
script runs, on the same data and seeds, FedAvg, APPLE, and APPLE with the core's step scaled by N (PFLlib's
choice, η·N·p_ii: FedAvg's step while p_ii = 1/N), and prints the pooled test accuracy per round (mean over
seeds). If the slow core step is the cause, the scaled variant leaves chance as fast as FedAvg.

    python benchmarks/apple_start.py --preset teach --rounds 10 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import fedala_lab as fl
from fedala_lab.algorithms import apple
from fedala_lab.compute.steps import recipe_step
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run


class AppleScaledCore(apple.APPLE):
    """APPLE whose core step is η·N·p_ii·g (PFLlib's scaling): a FedAvg-sized step while p_ii = 1/N."""

    def __init__(self, setup):
        super().__init__(setup)
        self.step = recipe_step(setup.model, apple.make_apple_step, lr=setup.cfg.lr * setup.num_clients,
                                lr_p=setup.cfg.apple_dr_lr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="teach")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--algos", default="fedavg,apple,apple-scaled-core")
    ap.add_argument("--store", default=None, help="run store (default: $FEDALA_LAB_RUNS or ./runs)")
    args = ap.parse_args()
    fl.register_algorithm("apple-scaled-core", AppleScaledCore, params=apple.PARAMS, modifiers=())
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{args.preset}, {args.rounds} rounds, seeds {seeds}: pooled test accuracy % by round (mean over seeds)")
    for algo in args.algos.split(","):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = [get_or_run(preset(args.preset, algo=algo, rounds=args.rounds, seed=s), args.store,
                               progress=False) for s in seeds]
        acc = np.mean([r.rounds["acc"].to_numpy() for r in runs], axis=0) * 100
        print(f"{algo:<18}" + " ".join(f"{a:5.1f}" for a in acc))


if __name__ == "__main__":
    main()
