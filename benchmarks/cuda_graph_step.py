"""Does a CUDA graph take the launch overhead out of the vectorised SGD step? (a measurement, not yet used)

    python benchmarks/cuda_graph_step.py                 # the MNIST CNN, 20 clients, batch 10, 200 steps

One batched SGD step of the paper's 4-layer CNN (compute/steps.py, the step the vectorised backend runs for
all clients at once) timed eagerly and replayed from a captured ``torch.cuda.CUDAGraph``, on random
MNIST-shaped batches. The graph reads its batch from static input tensors (copied in before each replay, as
a backend would gather a step's rows into them) and updates the static parameters in place, as the eager
step does. Reported: ms per step (median of ``--repeats`` timings of ``--steps`` steps, CUDA synchronised),
and the largest |Δ| between the parameters after the same steps eagerly and by replay, next to the
difference between two eager runs (the noise floor of nondeterministic kernels). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from fedala_lab.compute.steps import SGD, make_sgd_step
from fedala_lab.models import build_model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--device", default="cuda", help="cuda (cpu runs the eager part only, to try the script)")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("cuda_graph_step.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    a, b, n = args.clients, args.batch, args.steps
    model = build_model("fedavgcnn", (1, 28, 28), 10, seed=0).to(dev)
    step = make_sgd_step(model, SGD(args.lr)).batched
    g = torch.Generator(device="cpu").manual_seed(0)
    init = {k: (v.detach().unsqueeze(0).repeat(a, *[1] * v.dim())
                + 0.01 * torch.randn(a, *v.shape, generator=g).to(dev)) for k, v in model.named_parameters()}
    xs = (torch.rand(n, a, b, 1, 28, 28, generator=g) * 2 - 1).to(dev)
    ys = torch.randint(0, 10, (n, a, b), generator=g).to(dev)
    w = torch.ones(a, b, device=dev)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def eager() -> tuple[dict, float]:
        params = {k: v.clone() for k, v in init.items()}
        carry = {"params": params, "buffers": {}}
        sync()
        t0 = time.perf_counter()
        for i in range(n):
            new, _ = step(carry, {}, xs[i], ys[i], w)
            carry = {"params": new["params"], "buffers": {}}
        sync()
        return carry["params"], (time.perf_counter() - t0) / n

    eager()  # warm-up: cuDNN's algorithm choice, the allocator's first blocks
    runs = [eager() for _ in range(args.repeats)]
    e_ms = statistics.median(r[1] for r in runs) * 1e3
    noise = max((runs[0][0][k] - runs[1][0][k]).abs().max().item() for k in init) if len(runs) > 1 else 0.0
    print(f"eager: {e_ms:.3f} ms per step ({a} clients × batch {b}, {n} steps, median of {args.repeats}); "
          f"two eager runs differ by at most {noise:.2e}")
    if not cuda:
        return 0

    params = {k: v.clone() for k, v in init.items()}
    carry = {"params": params, "buffers": {}}
    sx, sy = xs[0].clone(), ys[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture, as torch's docs ask
        for _ in range(3):
            step(carry, {}, sx, sy, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    with torch.cuda.graph(graph):
        static_out = step(carry, {}, sx, sy, w)  # kept: its tensors live in the graph's memory pool
    capture_ms = (time.perf_counter() - t0) * 1e3

    def replay() -> float:
        for k, p in params.items():
            p.copy_(init[k])
        sync()
        t0 = time.perf_counter()
        for i in range(n):
            sx.copy_(xs[i])
            sy.copy_(ys[i])
            graph.replay()
        sync()
        return (time.perf_counter() - t0) / n

    replay()
    assert static_out[1].shape == (a, 1)
    g_ms = statistics.median(replay() for _ in range(args.repeats)) * 1e3
    replay()
    diff = max((params[k] - runs[0][0][k]).abs().max().item() for k in init)
    print(f"graph: {g_ms:.3f} ms per step (capture {capture_ms:.0f} ms); {e_ms / g_ms:.1f}× the eager step; "
          f"parameters after {n} steps differ from eager by at most {diff:.2e}")
    print(f"| {torch.cuda.get_device_name()} | {a} | {b} | {e_ms:.3f} | {g_ms:.3f} | {e_ms / g_ms:.1f} | "
          f"{diff:.1e} | {noise:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
