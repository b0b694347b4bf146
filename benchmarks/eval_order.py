"""What the evaluation order of FedFomo and APPLE changes: PFLlib's order against the one the engine had before.

PFLlib (December 2022) evaluates FedFomo's clients before their federated update, so it reports each client's
model as its last training left it, and APPLE's personalised model as its last batch mixed it. The engine used
to evaluate FedFomo after the update and APPLE's mix of this round's downloaded cores. This script runs both
orders on the same data and seeds (the earlier ones as subclasses here) and prints the pooled test accuracy
(%) of the last and of the best round, mean over seeds, and the paired difference.

    python benchmarks/eval_order.py --preset teach --rounds 10 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

import fedala_lab as fl
from fedala_lab.algorithms import apple, fedfomo
from fedala_lab.algorithms.base import Sent
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run


class FomoCombinedFirst(fedfomo.FedFomo):
    """FedFomo evaluated after the federated update (the update in ``initialise``, then the round evaluates)."""

    def initialise(self, rnd, clients):
        sent = super().initialise(rnd, clients)
        return Sent({}, sent.bytes, rows=self.combine(rnd, clients), client_bytes=sent.client_bytes)

    def local_train(self, rnd, work):
        ids = work.clients.cpu().numpy()
        n = rnd.data.train_sizes[ids]
        plan = rnd.plan(work.clients, epochs=self.cfg.local_epochs,
                        limits=dict(zip(ids.tolist(), work.plan.num_steps.tolist())),
                        sizes=n - fedfomo.held_out(n, self.cfg.fomo_val))
        return rnd.train(work.clients, plan)


class AppleMixAtStart(apple.APPLE):
    """APPLE evaluated on Σ_j p_ij θ_j of the cores downloaded this round, with the current p."""

    def personalise(self, rnd):
        p, cores = rnd.state.p, rnd.local_params
        return {"params": {k: torch.tensordot(p.to(v.dtype), v, dims=1) for k, v in cores.items()},
                "buffers": rnd.local_buffers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="teach")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--store", default=None, help="run store (default: $FEDALA_LAB_RUNS or ./runs)")
    args = ap.parse_args()
    fl.register_algorithm("fedfomo-combined-first", FomoCombinedFirst, params=fedfomo.PARAMS, modifiers=())
    fl.register_algorithm("apple-mix-at-start", AppleMixAtStart, params=apple.PARAMS, modifiers=())
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{args.preset}, {args.rounds} rounds, seeds {seeds}: pooled test accuracy %, mean over seeds "
          "(paired difference: PFLlib's order minus the earlier one)")
    for pfllib, earlier in (("fedfomo", "fedfomo-combined-first"), ("apple", "apple-mix-at-start")):
        out = {}
        for algo in (pfllib, earlier):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs = [get_or_run(preset(args.preset, algo=algo, rounds=args.rounds, seed=s), args.store,
                                   progress=False) for s in seeds]
            out[algo] = np.array([[r.final_acc, r.best_acc] for r in runs])
        for algo, a in out.items():
            print(f"{algo:<24} final {a[:, 0].mean():6.2f}   best {a[:, 1].mean():6.2f}")
        d = out[pfllib] - out[earlier]
        print(f"{'difference':<24} final {d[:, 0].mean():+6.2f} ± {d[:, 0].std(ddof=1):.2f}   "
              f"best {d[:, 1].mean():+6.2f} ± {d[:, 1].std(ddof=1):.2f}")


if __name__ == "__main__":
    main()
