"""A worker's training step of each pFL method against FedAvg's, and each method's arithmetic floor.

    python benchmarks/pfl_step_time.py                          # mnist-dir0.1, 200 batches, 5 repeats
    python benchmarks/pfl_step_time.py --steps 100 --repeats 3 --methods fedavg,pfedme
    python benchmarks/pfl_step_time.py --profile apple          # torch.profiler's top operators of one method
    PYTHONPATH=/other/checkout python benchmarks/pfl_step_time.py   # the same measurement of another checkout

What is timed is what a training worker process runs (compute/workers.py) for one client, at one torch thread:
each method's algorithm builds its round as the engine would (``local_train`` on a Round of the preset's run,
``backend="auto"``: the workers' kernels, channels-last convolutions and fused linear updates), its training
calls are recorded instead of sent, and each call's recipe is rebuilt into a worker's runner
(``workers._runner``) and run over the same ``--steps`` batches of real MNIST rows of one client
(``--client``). Ditto makes two calls (the global model's SGD, the personal model's); their times add. The
methods run interleaved (the order reversed every other repeat) and from the same starting models each
repeat; we report medians, ms per batch (a FedAvg step: one batch of the client) and the ratio to FedAvg's.

The floor column is the arithmetic each method must do per batch, timed in the same repeats:

- fedavg: its step, F.
- ditto: two SGD steps (the global and the personal model), 2·F; its proximal pull λ(v − w) is one more
  elementwise pass over the parameters, not counted.
- fedphp: FedAvg's step with a forward pass below the top block (the private model h; no gradient: h only
  supervises) before each batch, timed as one run. The MMD between the two representations (10 × 512 at
  batch 10) is not counted.
- apple: FedAvg's step with two passes over the N clients' core models before each batch, timed as one run:
  θ̃ = Σ p_j θ_j and the p-gradient ⟨g, θ_j⟩ (``p @ C`` and ``C @ g`` over every parameter; 46 MB for 20
  MNIST CNNs). They depend on each other through the forward and backward pass, so neither can be folded
  into the other, and streaming them evicts the step's own data from the caches, which is part of the cost.
- pfedme: K gradient steps of the personal model θ per batch, K·F (its pull towards w is one more
  elementwise pass per step, w's own step one per batch: not counted).

So measured ÷ floor says how much of a method's step is overhead. Ratios are paired within each repeat (the
same moment's load), then the median. Prints the table (markdown) and the load average before and after (a
second busy process on a core inflates every number; compare ratios).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch.utils._pytree import tree_map

from fedala_lab.algorithms.base import Round, Work
from fedala_lab.compute import workers
from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments.presets import preset

METHODS = ("fedavg", "ditto", "fedphp", "apple", "pfedme")


class _Recorder:
    """Stands in for the run's workers backend: records each training call (step, carry, shared, plan) and
    returns the carry unchanged, so that an algorithm's ``local_train`` runs through without training."""

    name = "workers"

    def __init__(self):
        self.calls = []

    def run(self, step, carry, shared, plan, x, y, *, train, model, aux_size=1, timings=None):
        self.calls.append((step, tree_map(torch.Tensor.clone, carry), shared, plan))
        return tree_map(torch.Tensor.clone, carry), np.zeros((plan.num_clients, plan.sizes.shape[1], aux_size))


class Method:
    """One method's training calls for one client, rebuilt as a worker runs them."""

    def __init__(self, name: str, data: FederatedData, client: int, steps: int):
        cfg = preset("mnist-dir0.1", algo=name, rounds=1, checkpoint_every=0, backend="auto")
        sim = Simulation(cfg, data)  # its worker pool starts only at a training call: never here
        kernels = sim.backend.kernels
        recorder = _Recorder()
        sim.setup.backend = recorder
        clients = torch.tensor([client])
        rnd = Round(sim.setup, 1, global_params=sim.global_params, local_params=sim.local_params,
                    local_buffers=sim.local_buffers, selected=clients, state=sim.state)
        plan = sim.setup.plan(1, clients, epochs=1, limits={client: steps})
        sim.algo.local_train(rnd, Work(clients, plan))
        self.name, self.cfg, self.model, self.data = name, cfg, sim.model, data
        self.steps = int(plan.num_steps[0])
        self.calls, self.recipes = [], []
        for step, carry, shared, call_plan in recorder.calls:
            recipe = getattr(step, "sgd", None) or getattr(step, "recipe", None)
            assert recipe is not None and workers.portable(recipe), f"{name}: a step the workers cannot run"
            n = min(int(call_plan.num_steps[0]), self.steps)  # Ditto's personal call plans its own epoch
            self.recipes.append(recipe)
            self.calls.append((workers._runner(sim.model, kernels, recipe), carry, shared,
                               call_plan.rows[0, :n].numpy(), call_plan.sizes[0, :n]))

    def run(self, x=None) -> float:
        """Seconds of this method's training calls from the recorded starting models (copies); ``x``: the images
        (default: the data's)."""
        total = 0.0
        for runner, carry, shared, rows, sizes in self.calls:
            slot = tree_map(lambda t: t[0].clone(), carry)
            t0 = time.perf_counter()
            runner.train_client(slot, shared, self.data.train_x if x is None else x, self.data.train_y, rows, sizes)
            total += time.perf_counter() - t0
        return total


class _Rows:
    """The data's images, running ``extra(rows)`` whenever a step takes a batch (``x[idx]``): FedAvg's step with
    another piece of arithmetic before each batch, back to back, as the method's own step runs them."""

    def __init__(self, x: torch.Tensor, extra):
        self.x, self.extra = x, extra

    def __getitem__(self, idx):
        self.extra(idx)
        return self.x[idx]


def floor_runs(fedavg: Method) -> dict:
    """FedAvg's timed call with a method's extra arithmetic per batch (``_Rows``): FedPHP's private forward pass
    below the top block (no gradient), APPLE's two passes over the N core models (θ̃ = p @ C and the p-gradient
    C @ g, every parameter). Run this way the extra work also evicts the step's data from the caches, as in
    the method's own step (46 MB of cores against a 32 MB L3 here); timed apart it would look cheaper."""
    from fedala_lab.models import top_block_start

    trainer, data = fedavg.calls[0][0], fedavg.data  # FedAvg's worker trainer
    private = copy.deepcopy(fedavg.model)  # the architecture, in the worker's memory format
    if trainer.channels_last:
        private = private.to(memory_format=torch.channels_last)
    top = top_block_start(private, 1)

    def forward(idx):
        xb = data.train_x[idx]
        if trainer.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            private(xb, stop=top)

    n = data.num_clients
    cores = [torch.randn(n, p.numel()) for p in private.parameters()]
    mixing = torch.full((n,), 1.0 / n)
    grads = [torch.randn(c.shape[1]) for c in cores]

    def passes(idx):
        for c in cores:
            mixing @ c
        for c, g in zip(cores, grads):
            c @ g

    return {"fedphp": lambda: fedavg.run(_Rows(data.train_x, forward)),
            "apple": lambda: fedavg.run(_Rows(data.train_x, passes))}


def floor_seconds(name: str, times: dict, k: int, rep: int) -> float:
    """The method's arithmetic per run in repeat ``rep`` (module docstring)."""
    fedavg = times["fedavg"][rep]
    if name == "ditto":
        return 2 * fedavg
    if name == "pfedme":
        return k * fedavg
    return times.get(f"floor:{name}", times["fedavg"])[rep]


def profile(method: Method, top: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    method.run()
    with prof(activities=[ProfilerActivity.CPU]) as p:
        method.run()
    print(f"### torch.profiler: {method.name}, {method.steps} batches, one thread\n")
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated; fedavg is always measured")
    ap.add_argument("--steps", type=int, default=200, help="batches per timed run (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    ap.add_argument("--client", type=int, default=17, help="whose rows (default 17: 4,239 train rows)")
    ap.add_argument("--profile", default=None, help="a method: print torch.profiler's top operators of one run")
    ap.add_argument("--top", type=int, default=25, help="operators listed by --profile")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # a worker's setting
    load0 = os.getloadavg()
    data = FederatedData.from_config(preset("mnist-dir0.1").data, "cpu")
    if args.profile:
        profile(Method(args.profile, data, args.client, args.steps), args.top)
        print(f"load average before / after: {load0[0]:.2f} / {os.getloadavg()[0]:.2f}")
        return 0
    names = ["fedavg"] + [m for m in args.methods.split(",") if m and m != "fedavg"]
    methods = {n: Method(n, data, args.client, args.steps) for n in names}
    runs = {n: m.run for n, m in methods.items()}
    runs.update({f"floor:{n}": f for n, f in floor_runs(methods["fedavg"]).items() if n in names})
    for run in runs.values():  # warm-up: first calls pay one-off costs (torch.func, kernel choice)
        run()
    times: dict[str, list[float]] = {n: [] for n in runs}
    for rep in range(args.repeats):
        for n in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
            times[n].append(runs[n]())
        print(f"repeat {rep + 1}/{args.repeats}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in runs),
              file=sys.stderr, flush=True)
    steps = methods["fedavg"].steps
    load1 = os.getloadavg()
    print(f"\n{steps} batches of client {args.client} (batch {methods['fedavg'].cfg.batch_size}), one torch "
          f"thread, median of {args.repeats} interleaved repeats; torch {torch.__version__}\n")
    print("| method | calls | ms per batch | ÷ FedAvg | floor ms | floor ÷ FedAvg | measured ÷ floor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    reps = range(args.repeats)
    for n in names:
        k = methods[n].cfg.pfedme_k
        floor = [floor_seconds(n, times, k, r) for r in reps]
        # ratios paired within each repeat (the same moment's load), then the median
        ratio = statistics.median(times[n][r] / times["fedavg"][r] for r in reps)
        floor_ratio = statistics.median(floor[r] / times["fedavg"][r] for r in reps)
        over = statistics.median(times[n][r] / floor[r] for r in reps)
        print(f"| {n} | {len(methods[n].calls)} | {1000 * statistics.median(times[n]) / steps:.2f} | {ratio:.2f} | "
              f"{1000 * statistics.median(floor) / steps:.2f} | {floor_ratio:.2f} | {over:.2f} |")
    print(f"\nload average before: {' / '.join(f'{x:.2f}' for x in load0)}; after: "
          f"{' / '.join(f'{x:.2f}' for x in load1)} (1 / 5 / 15 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
