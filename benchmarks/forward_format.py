"""Forward passes of the MNIST CNN in three memory formats, interleaved, at one torch thread.

    python benchmarks/forward_format.py [--repeats 9]

What evaluation and ALA's feature pass do on a CPU (``compute.backends.nhwc``): images and conv weights in
channels-last format. With one input channel ``Tensor.contiguous(memory_format=torch.channels_last)``
returns the tensor unchanged (its NCHW strides count as both formats) and the convolution takes a slow path;
``Tensor.to(memory_format=…)`` writes true channels-last strides. Rows per second of 2,048 random images in
chunks of 256 (the evaluation chunk), median over interleaved repeats, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.func import functional_call

from fedala_lab.compute.backends import nhwc
from fedala_lab.models import FedAvgCNN


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args()
    torch.set_num_threads(1)
    cl = torch.channels_last
    model = FedAvgCNN(1, 10, 1024).eval()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(2048, 1, 28, 28)
    layouts = {
        "NCHW": (params, lambda b: b),
        "contiguous(channels_last)": ({k: v.contiguous(memory_format=cl) if v.dim() == 4 else v
                                       for k, v in params.items()}, lambda b: b.contiguous(memory_format=cl)),
        "to(channels_last) (nhwc)": ({k: nhwc(v) for k, v in params.items()}, nhwc),
    }

    def rows_per_s(p, fmt) -> float:
        t = time.perf_counter()
        with torch.no_grad():
            for j in range(0, len(x), 256):
                functional_call(model, (p, {}), (fmt(x[j:j + 256]),))
        return len(x) / (time.perf_counter() - t)

    load0 = os.getloadavg()[0]
    res = {k: [] for k in layouts}
    for _ in range(args.repeats):
        for k, (p_, fmt) in layouts.items():
            res[k].append(rows_per_s(p_, fmt))
    base = statistics.median(res["NCHW"])
    print(f"MNIST CNN forward, 256 rows a chunk, 1 thread, median of {args.repeats} interleaved repeats; "
          f"load average {load0:.2f} → {os.getloadavg()[0]:.2f}")
    for k, v in res.items():
        m = statistics.median(v)
        print(f"{k:>27}: {m:7.0f} rows/s ({m / base:.2f}× NCHW; min {min(v):.0f}, max {max(v):.0f})")


if __name__ == "__main__":
    main()
