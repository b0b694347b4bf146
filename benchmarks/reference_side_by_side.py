"""The public FedALA reference code and fedala_lab, side by side on one machine, in one run.

    python benchmarks/reference_side_by_side.py --reference ~/src/FedALA --rounds 3
    python benchmarks/reference_side_by_side.py --reference ~/src/FedALA --partition ~/src/FedALA/dataset/mnist-0.1-npz

``--reference`` is a checkout of the public FedALA repository (github.com/TsingZ0/FedALA: its ``system/main.py``);
nothing is fetched. ``--partition`` is a PFLlib-layout MNIST partition (default: where the ``mnist-dir0.1``
preset looks: ``$FEDALA_LAB_MNIST_PARTITION``, …). Both run FedALA with the reference's hyper-parameters
(lr 0.005, batch 10, η 1, s 80, p 1 = its ``layer_idx`` 2, ρ 1, one local epoch, 20 clients) for ``--rounds``
rounds on the CPU, one after the other, and the script prints the seconds of each round side by side with
their ratio, and the medians of the normal rounds (3 on, the first two being a plain round and ALA's start
phase).

How the reference's rounds are timed: its ``main.py`` prints ``Round number: i`` at the start of each round
(its rounds count from 0); a round's seconds are the time from its line to the next one (the last: to its
final "Best global accuracy" line), read from its output as it appears. Its own budget per round is printed
too. The reference reads ``../dataset/<name>/{train,test}/<i>.npz`` relative to its ``system/`` folder: the
script builds that layout in a temporary folder with links to the partition's files (either naming,
``train0_.npz`` or ``0.npz``) and a copy of ``system/``, so the checkout itself is never changed. It evaluates
test accuracy and the train loss every round; fedala_lab runs the ``mnist-dir0.1`` preset with the train-split
losses recorded too (``record_train_loss=True``), to compare the same work.

Quote the ratio measured in one run on one machine, with the load average printed beside it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUND = re.compile(r"Round number:\s*(\d+)")
END = re.compile(r"Best global accuracy")


def reference_layout(reference: Path, partition: Path, work: Path, name: str = "mnist-bench") -> Path:
    """A copy of the reference's ``system/`` beside ``dataset/<name>`` linking the partition's files under the
    names its reader expects (``<i>.npz``); returns the ``system`` folder to run in."""
    system = reference / "system"
    if not (system / "main.py").is_file():
        sys.exit(f"reference_side_by_side: no system/main.py in {reference}: give a checkout of the FedALA repository")
    shutil.copytree(system, work / "system")
    for split in ("train", "test"):
        src = partition / split
        if not src.is_dir():
            sys.exit(f"reference_side_by_side: {src} is missing: give a PFLlib partition (train/ and test/)")
        dst = work / "dataset" / name / split
        dst.mkdir(parents=True)
        for f in src.glob("*.npz"):
            m = re.fullmatch(rf"(?:{split})?(\d+)_?\.npz", f.name)
            if m:
                (dst / f"{m.group(1)}.npz").symlink_to(f.resolve())
    return work / "system"


def run_reference(system: Path, rounds: int, name: str, threads: int | None) -> dict:
    """Run the reference for ``rounds`` rounds (its ``-gr`` counts the rounds after its round 0) and time the
    rounds from its output lines."""
    cmd = [sys.executable, "-u", "main.py", "-data", name, "-m", "cnn", "-algo", "FedALA", "-gr", str(rounds - 1),
           "-dev", "cpu", "-nc", "20", "-lr", "0.005", "-lbs", "10", "-et", "1", "-s", "80", "-p", "2"]
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    marks, budget = [], []
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, cwd=system, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as proc:
        for line in proc.stdout:
            now = time.perf_counter()
            if ROUND.search(line) or END.search(line):
                marks.append(now)
            elif line.startswith("-" * 10):  # its own "------ <seconds>" after each round
                try:
                    budget.append(float(line.strip("-\n ").split()[-1]))
                except ValueError:
                    pass
        proc.wait()
    if proc.returncode:
        sys.exit(f"reference_side_by_side: the reference exited with {proc.returncode}: {' '.join(cmd)}")
    return {"per_round": [b - a for a, b in itertools.pairwise(marks)], "own": budget, "wall": time.perf_counter() - t0}


def run_fedala_lab(partition: Path, rounds: int) -> dict:
    from fedala_lab.engine.simulate import simulate
    from fedala_lab.experiments.presets import preset

    cfg = preset("mnist-dir0.1", rounds=rounds, record_train_loss=True, checkpoint_every=0, device="cpu")
    cfg = cfg.replace(dataset=f"pfllib:{partition}")
    t0 = time.perf_counter()
    run = simulate(cfg, progress=False)
    r = run.rounds
    return {"per_round": list(r["seconds"]), "wall": time.perf_counter() - t0, "split": r, "acc": run.final_acc}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, required=True, help="a checkout of the FedALA repository")
    p.add_argument("--partition", type=Path, default=None, help="a PFLlib-layout MNIST partition")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reference-threads", type=int, default=None,
                   help="torch threads of the reference (default: its own, torch's default)")
    args = p.parse_args()
    if args.rounds < 2:  # the reference divides by its rounds after the first when it ends
        p.error("--rounds must be at least 2")
    if args.partition is None:
        from fedala_lab.experiments.presets import mnist_partition_dir

        args.partition = Path(mnist_partition_dir())
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        system = reference_layout(args.reference.expanduser(), args.partition.expanduser(), Path(tmp))
        ref = run_reference(system, args.rounds, "mnist-bench", args.reference_threads)
    load1 = os.getloadavg()
    ours = run_fedala_lab(args.partition.expanduser(), args.rounds)
    load2 = os.getloadavg()
    print(f"\nFedALA, MNIST partition {args.partition.name}, {args.rounds} rounds, CPU; load average before / "
          f"between / after: {load0[0]:.2f} / {load1[0]:.2f} / {load2[0]:.2f}")
    print(f"{'round':>5} {'reference s':>12} {'fedala_lab s':>13} {'ratio':>6}   fedala_lab init/eval/train s")
    s = ours["split"]
    for i, (a, b) in enumerate(zip(ref["per_round"], ours["per_round"]), 1):
        phases = "/".join(f"{s[f'{k}_seconds'].iloc[i - 1]:.1f}" for k in ("init", "eval", "train"))
        print(f"{i:>5} {a:>12.1f} {b:>13.1f} {b / a:>6.2f}   {phases}")
    print(f"{'total':>5} {sum(ref['per_round']):>12.1f} {sum(ours['per_round']):>13.1f} "
          f"{sum(ours['per_round']) / sum(ref['per_round']):>6.2f}")
    normal = slice(2, None)
    if len(ref["per_round"]) > 2:
        a, b = statistics.median(ref["per_round"][normal]), statistics.median(ours["per_round"][normal])
        print(f"normal rounds (3 on), medians: reference {a:.1f} s, fedala_lab {b:.1f} s, ratio {b / a:.2f}")
    print(f"fedala_lab final accuracy {100 * ours['acc']:.2f} %; the reference's own per-round budget: "
          + ", ".join(f"{v:.1f}" for v in ref["own"]))


if __name__ == "__main__":
    main()
