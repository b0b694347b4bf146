"""Why FedALA trails FedRep and PartialFed after 5 rounds on MNIST Dir(0.1): how far ALA moves the head.

With p = 1 ALA learns one weight per parameter of the output layer, W, starting at 1 (the global head) and
carried from round to round; the evaluated head is L + W ⊙ (G − L), so W near 1 means the client is evaluated
with mostly the global head. FedRep and PartialFed keep a fully personal head and take the lower layers from
the same global model. This script runs FedALA on the paper's partition (every client's W recorded) at the
default η = 1 and at larger η, and prints per round the mean, min and max over clients of mean(W) of the
output layer, and the pooled test accuracy.

    FEDALA_LAB_MNIST_PARTITION=/path/to/mnist-0.1-npz python benchmarks/fedala_head.py --rounds 5 --eta 1,10
"""

from __future__ import annotations

import argparse

import numpy as np

from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--eta", default="1,10", help="comma-separated ALA learning rates η")
    ap.add_argument("--p", default="1", help="comma-separated p (top layers ALA weights)")
    ap.add_argument("--store", default=None, help="run store (default: $FEDALA_LAB_RUNS or ./runs)")
    args = ap.parse_args()
    for p in (int(v) for v in args.p.split(",")):
        for eta in (float(v) for v in args.eta.split(",")):
            cfg = preset("mnist-dir0.1", algo="fedala", rounds=args.rounds, eta=eta, p=p, track_clients="all")
            run = get_or_run(cfg, args.store, progress=False)
            acc = run.rounds.set_index("round")["acc"]
            head = run.meta["ala_params"][-2]  # the output layer's weight (its bias is last)
            print(f"FedALA p={p} η={eta:g}: final {run.final_acc:.2f} %, best {run.best_acc:.2f} %")
            for t in range(2, args.rounds + 1):
                means = [float(np.mean(run.ala_weights(c, t)[1][head])) for c in run.tracked_clients()]
                print(f"  round {t}: mean W of {head} over clients {np.mean(means):.3f} "
                      f"(min {np.min(means):.3f}, max {np.max(means):.3f}); accuracy {100 * acc[t]:.2f} %")


if __name__ == "__main__":
    main()
