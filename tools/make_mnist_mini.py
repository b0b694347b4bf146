"""Regenerate fedala_lab/data/mnist_mini.npz, the embedded MNIST subset (docs/design.md#data).

    python tools/make_mnist_mini.py SOURCE [--out FILE]

SOURCE is either a PFLlib MNIST partition directory (``train/`` and ``test/`` of .npz files, e.g. the FedALA
repository's MNIST Dir(0.1) partition) or a folder with torchvision's MNIST idx files (the data root that
holds ``MNIST/raw/``, or that ``raw`` folder itself). All 70,000 images are pooled in the source's order
(PFLlib: client by client, train then test; torchvision: train then test), then
``fedala_lab.data.mnist_mini.draw`` takes 300 per label with ``default_rng(0)`` and downsamples them to
14×14. The result is written with ``np.savez_compressed`` (default: a new file in the current folder, never
the package's own) and its fingerprint compared with the shipped one.

The draw follows the pool's order: from the FedALA repository's partition this reproduces the shipped
arrays exactly; another source gives another, equally balanced subset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fedala_lab.data import mnist_mini
from fedala_lab.data.sources import pfllib_pool, read_idx


def mnist_uint8(source: Path) -> tuple[np.ndarray, np.ndarray]:
    """All MNIST images of ``source`` as uint8 (N, 28, 28) and labels, in the source's order."""
    if (source / "train").is_dir() and (source / "test").is_dir():
        pool = pfllib_pool(source)
        x = np.rint((pool.x[:, 0].astype(np.float64) + 1.0) / 2.0 * 255.0)
        back = (x.astype(np.float32) / np.float32(255.0) * np.float32(2.0) - np.float32(1.0))
        err = float(np.abs(back - pool.x[:, 0]).max()) if len(x) else 0.0
        if x.min() < 0 or x.max() > 255 or err > 1e-6:
            sys.exit(f"{source}: the images are not MNIST's 8-bit pixels scaled to [-1, 1] (error {err:g})")
        return x.astype(np.uint8), pool.y
    for raw in (source / "MNIST" / "raw", source):
        files = {f: next((p for p in (raw / f, raw / (f + ".gz")) if p.is_file()), None)
                 for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
        if all(files.values()):
            x = np.concatenate([read_idx(files[f"{s}-images-idx3-ubyte"]) for s in ("train", "t10k")])
            y = np.concatenate([read_idx(files[f"{s}-labels-idx1-ubyte"]) for s in ("train", "t10k")])
            return x, y.astype(np.int64)
    sys.exit(f"{source}: neither a PFLlib partition (train/, test/) nor torchvision's MNIST idx files")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="PFLlib MNIST partition directory or torchvision MNIST folder")
    ap.add_argument("--out", type=Path, default=Path("mnist_mini.npz"), help="file to write (mnist_mini.npz)")
    args = ap.parse_args(argv)
    x, y = mnist_uint8(args.source)
    if len(x) != 70_000:
        print(f"note: {len(x)} images, not MNIST's 70,000", file=sys.stderr)
    xs, ys = mnist_mini.draw(x, y)
    np.savez_compressed(args.out, x=xs, y=ys)
    same = mnist_mini.fingerprint(xs, ys) == mnist_mini.SHA256
    print(f"wrote {args.out}: x {xs.dtype} {xs.shape}, y {np.bincount(ys).tolist()} per label, "
          f"{args.out.stat().st_size:,} bytes; "
          + ("the same arrays as the shipped file" if same else "NOT the shipped arrays (another pool order)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
