"""How close local training comes to this CPU's own limit: the training step's FLOP/s against torch.mm's.

    python benchmarks/cpu_limit.py [--repeats 5] [--steps 200]

Everything at one torch thread (a worker process's setting), in one run, interleaved, medians of the repeats:

- **FLOPs, counted from the model's shapes** (the MNIST CNN, FedAvgCNN, batch 10): a convolution is a GEMM of
  (batch·out_h·out_w) × (in_channels·k_h·k_w) × out_channels (im2col), a linear layer (batch) × in × out; one
  multiply-add is 2 FLOPs. A training step is the forward GEMMs plus, per layer, the GEMM for the gradient of its
  weight and the one for the gradient of its input (not for the first layer: nothing needs the images'
  gradient): about 3× the forward, 0.26 GFLOP for a batch of 10. Bias adds, ReLU, pooling, the loss and the SGD
  update are not counted (they are a few % of the arithmetic), so achieved FLOP/s are slightly understated.
- **The limit**: ``torch.mm`` on exactly those GEMMs (each layer's forward, weight-gradient and input-gradient
  shapes, fp32, contiguous), their FLOPs over their time; and a large square GEMM for reference.
- **The training step**: what the worker processes run (compute/workers.py: channels-last convolutions, linear
  layers' SGD update fused into the backward pass), on random data, SGD at lr 0.005.
- **Forward passes** (evaluation, ALA's feature pass): the model under ``torch.inference_mode`` in chunks of
  ``compute.plans.forward_chunk`` rows, channels-last, against the forward GEMMs at that chunk size.

Prints the table, the training step's FLOP/s ÷ a large square GEMM's, ``ratio: 0.xx`` (training FLOP/s ÷
torch.mm's on the step's own GEMMs, the limit for these shapes) and ``forward ratio: 0.xx``, with the load average before and after (a busy core halves everything; compare ratios, not seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from fedala_lab.compute.plans import forward_chunk
from fedala_lab.compute.steps import SGD
from fedala_lab.compute.workers import _Trainer
from fedala_lab.models import FedAvgCNN

BATCH = 10


def layer_gemms(model: torch.nn.Module, batch: int) -> list[tuple[str, int, int, int, bool]]:
    """(layer, M, K, N, first) of each convolution and linear layer's forward GEMM at ``batch`` samples."""
    shapes, hooks = [], []

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            _, c_out, h, w = output.shape
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            shapes.append((type(module).__name__, batch * h * w, k, c_out))
        elif isinstance(module, torch.nn.Linear):
            shapes.append((type(module).__name__, batch, module.in_features, module.out_features))

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.zeros(batch, 1, 28, 28))
    for h in hooks:
        h.remove()
    return [(name, m, k, n, i == 0) for i, (name, m, k, n) in enumerate(shapes)]


def training_gemms(layers) -> list[tuple[int, int, int]]:
    """(M, K, N) of every GEMM of a training step: forward, weight gradient and (but for the first layer)
    input gradient of each layer."""
    out = []
    for _, m, k, n, first in layers:
        out += [(m, k, n), (k, m, n)]  # y = x·W (M×K · K×N); ∇W = xᵀ·∇y (K×M · M×N)
        if not first:
            out.append((m, n, k))  # ∇x = ∇y·Wᵀ (M×N · N×K)
    return out


def flops(gemms) -> float:
    return float(sum(2 * m * k * n for m, k, n in gemms))


def time_gemms(gemms, reps: int) -> float:
    """Seconds for one pass over ``gemms`` with torch.mm (median of ``reps`` passes, after one warm-up)."""
    mats = [(torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)) for m, k, n in gemms]
    times = []
    for r in range(reps + 1):
        t = time.perf_counter()
        for a, b, c in mats:
            torch.mm(a, b, out=c)
        if r:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_training(model, steps: int) -> float:
    """Seconds per training step of the workers' trainer (median over chunks of 20 steps)."""
    trainer = _Trainer(model, SGD(lr=0.005), channels_last=True, fused_linear=True)
    n = steps * BATCH
    x, y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    carry = {"params": {k: v.detach().clone() for k, v in model.named_parameters()}, "buffers": {}}
    rows = np.arange(n).reshape(steps, BATCH)
    trainer.train_client(carry, {}, x, y, rows[:5], np.full(5, BATCH))  # warm-up
    per = []
    for i in range(0, steps, 20):
        t = time.perf_counter()
        trainer.train_client(carry, {}, x, y, rows[i:i + 20], np.full(len(rows[i:i + 20]), BATCH))
        per.append((time.perf_counter() - t) / len(rows[i:i + 20]))
    return statistics.median(per)


def time_forward(model, rows: int, chunk: int) -> float:
    """Seconds per ``chunk`` rows of forward passes, channels-last, inference mode (median over the chunks)."""
    m = model.to(memory_format=torch.channels_last).eval()
    x = torch.randn(rows, 1, 28, 28).to(memory_format=torch.channels_last)
    per = []
    with torch.inference_mode():
        m(x[:chunk])
        for i in range(0, rows, chunk):
            t = time.perf_counter()
            m(x[i:i + chunk])
            per.append(time.perf_counter() - t)
    return statistics.median(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="training steps per repeat")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load = os.getloadavg()
    model = FedAvgCNN(1, 10, 1024)
    layers = layer_gemms(model, BATCH)
    train_gemms = training_gemms(layers)
    chunk = forward_chunk(channels_last=True)
    fwd_gemms = [(m // BATCH * chunk, k, n) for _, m, k, n, _ in layers]
    big = [(1024, 1024, 1024)]
    res = {k: [] for k in ("big", "gemm", "step", "fgemm", "fwd")}
    for _ in range(args.repeats):  # interleaved: a change in the machine's load hits every measurement alike
        res["big"].append(flops(big) / time_gemms(big, 3))
        res["gemm"].append(flops(train_gemms) / time_gemms(train_gemms, 50))
        res["step"].append(flops(train_gemms) / time_training(model, args.steps))
        res["fgemm"].append(flops(fwd_gemms) / time_gemms(fwd_gemms, 20))
        res["fwd"].append(flops(fwd_gemms) / time_forward(model, 2048, chunk))
    med = {k: statistics.median(v) / 1e9 for k, v in res.items()}
    print(f"FedAvgCNN, batch {BATCH}, one torch thread, torch {torch.__version__}; medians of {args.repeats} "
          "interleaved repeats")
    print(f"  FLOPs per training step (counted from the shapes): {flops(train_gemms) / 1e9:.3f} GFLOP; "
          f"forward per {chunk} rows: {flops(fwd_gemms) / 1e9:.3f} GFLOP")
    for _, m, k, n, first in layers:
        print(f"    layer GEMM M={m} K={k} N={n}{' (first: no input gradient)' if first else ''}")
    print(f"  torch.mm 1024×1024×1024:            {med['big']:7.1f} GFLOP/s")
    print(f"  torch.mm on the step's GEMMs:       {med['gemm']:7.1f} GFLOP/s")
    print(f"  training step (workers' trainer):   {med['step']:7.1f} GFLOP/s "
          f"({flops(train_gemms) / med['step'] / 1e6:.2f} ms a step)")
    print(f"  torch.mm on the forward GEMMs:      {med['fgemm']:7.1f} GFLOP/s")
    print(f"  forward passes ({chunk} rows):         {med['fwd']:7.1f} GFLOP/s")
    print(f"  load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"ratio to a large GEMM (1024³): {med['step'] / med['big']:.2f}")
    print(f"ratio: {med['step'] / med['gemm']:.2f}")
    print(f"forward ratio: {med['fwd'] / med['fgemm']:.2f}")


if __name__ == "__main__":
    main()
