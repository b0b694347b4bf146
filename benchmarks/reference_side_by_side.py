"""The public FedALA reference code and fedala_lab, side by side on one machine, in one run.

    python benchmarks/reference_side_by_side.py --reference ~/src/FedALA --rounds 3
    python benchmarks/reference_side_by_side.py --reference ~/src/FedALA --rounds 3 --repeats 2   # order reversed the 2nd time
    python benchmarks/reference_side_by_side.py --reference ~/src/FedALA --partition ~/src/FedALA/dataset/mnist-0.1-npz

``--reference`` is a checkout of the public FedALA repository (github.com/TsingZ0/FedALA: its ``system/main.py``);
nothing is fetched. ``--partition`` is a PFLlib-layout MNIST partition (default: where the ``mnist-dir0.1``
preset looks: ``$FEDALA_LAB_MNIST_PARTITION``, …). Both run FedALA with the reference's hyper-parameters
(lr 0.005, batch 10, η 1, s 80, p 1 = its ``layer_idx`` 2, ρ 1, one local epoch, 20 clients) for ``--rounds``
rounds on the CPU, one after the other, and the script prints the seconds of each round side by side with
their ratio, and the medians of the normal rounds (3 on, the first two being a plain round and ALA's start
phase).

How the reference's rounds are timed: its ``main.py`` prints ``Round number: i`` in each round (its rounds
count from 0); the issue that asked for this script times a round from its line to the next one (the last:
to its final "Best global accuracy" line), read from its output as it appears. That line comes after the
round's ALA (its ``send_models`` runs first), so line-to-line seconds give each round the NEXT round's ALA:
the start phase shows up in round 1, not 2. The seconds it prints itself after each round (a line of
dashes; ``time.time()`` around the whole round: ALA, evaluation, training, aggregation) do not have that shift, and the ratios
are printed against both. The reference reads ``../dataset/<name>/{train,test}/<i>.npz`` relative to its
``system/`` folder: the script builds that layout in a temporary folder with links to the partition's files
(either naming, ``train0_.npz`` or ``0.npz``) and a copy of ``system/``, so the checkout itself is never
changed.

The work differs in one place: each round the reference evaluates the test split and ONE pass over the
train split (the loss of the models ALA initialised). fedala_lab's ``mnist-dir0.1`` preset records none
(``record_train_loss=False``, its default), and twice when Fig. 5 asks (``True``: of the initialised and of
the trained models, both drawn there). Both are run, one after the other, so the reference's work lies
between the two fedala_lab columns (``--repeats`` runs the three again, in the reverse order).

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


def run_fedala_lab(partition: Path, rounds: int, record_train_loss: bool) -> dict:
    from fedala_lab.engine.simulate import simulate
    from fedala_lab.experiments.presets import preset

    cfg = preset("mnist-dir0.1", rounds=rounds, record_train_loss=record_train_loss, checkpoint_every=0,
                 device="cpu")
    cfg = cfg.replace(dataset=f"pfllib:{partition}")
    t0 = time.perf_counter()
    run = simulate(cfg, progress=False)
    r = run.rounds
    return {"per_round": list(r["seconds"]), "wall": time.perf_counter() - t0, "split": r, "acc": run.final_acc}


def report(done: dict, rounds: int, partition: Path, loads: list) -> dict:
    """Print one repeat's table (``done``: the reference's run under "ref", ours by ``record_train_loss``);
    return its normal rounds' median ratios to the reference's own seconds."""
    print(f"\nFedALA, MNIST partition {partition.name}, {rounds} rounds, CPU; load average at the start of each "
          f"run and at the end: {' / '.join(f'{x:.2f}' for x in loads)}")
    print("seconds per round; reference: from its 'Round number' line to the next (lines) and as it prints "
          "them itself (own);\nfedala_lab: with the train-split loss recorded twice (2 passes) and not at all (0 passes)")
    print(f"{'round':>5} {'ref lines':>10} {'ref own':>8} {'ours 2 passes':>14} {'ours 0 passes':>14} "
          f"{'÷ own':>6} {'÷ own':>6}   ours (0 passes) init/eval/train s")
    own = done["ref"]["own"][:rounds]
    lines = done["ref"]["per_round"][:rounds]
    two, zero = done[True]["per_round"], done[False]["per_round"]
    s = done[False]["split"]
    for i in range(rounds):
        phases = "/".join(f"{s[f'{k}_seconds'].iloc[i]:.1f}" for k in ("init", "eval", "train"))
        print(f"{i + 1:>5} {lines[i]:>10.1f} {own[i]:>8.1f} {two[i]:>14.1f} {zero[i]:>14.1f} "
              f"{two[i] / own[i]:>6.2f} {zero[i] / own[i]:>6.2f}   {phases}")
    print(f"{'total':>5} {sum(lines):>10.1f} {sum(own):>8.1f} {sum(two):>14.1f} {sum(zero):>14.1f} "
          f"{sum(two) / sum(own):>6.2f} {sum(zero) / sum(own):>6.2f}")
    ratios = {}
    if rounds > 2:
        med = {k: statistics.median(v[2:]) for k, v in
               (("lines", lines), ("own", own), ("two", two), ("zero", zero))}
        ratios = {"two": med["two"] / med["own"], "zero": med["zero"] / med["own"]}
        print(f"normal rounds (3 on), medians: reference {med['own']:.1f} s (own; lines {med['lines']:.1f}), "
              f"fedala_lab {med['two']:.1f} s (2 passes) / {med['zero']:.1f} s (0 passes); ratios to its own: "
              f"{ratios['two']:.2f} / {ratios['zero']:.2f}, to its lines: "
              f"{med['two'] / med['lines']:.2f} / {med['zero'] / med['lines']:.2f}")
    print(f"final accuracy: fedala_lab {100 * done[True]['acc']:.2f} % (both runs: "
          f"{100 * done[False]['acc']:.2f} %)")
    return ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, required=True, help="a checkout of the FedALA repository")
    p.add_argument("--partition", type=Path, default=None, help="a PFLlib-layout MNIST partition")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1,
                   help="times to run all three, the order reversed every other time (a machine that speeds "
                        "up or slows down during the runs then favours neither side); the ratios' median is printed")
    p.add_argument("--reference-threads", type=int, default=None,
                   help="torch threads of the reference (default: its own, torch's default)")
    args = p.parse_args()
    if args.rounds < 2:  # the reference divides by its rounds after the first when it ends
        p.error("--rounds must be at least 2")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.partition is None:
        from fedala_lab.experiments.presets import mnist_partition_dir

        args.partition = Path(mnist_partition_dir())
    partition = args.partition.expanduser()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        system = reference_layout(args.reference.expanduser(), partition, Path(tmp))
        jobs = {"ref": lambda: run_reference(system, args.rounds, "mnist-bench", args.reference_threads),
                True: lambda: run_fedala_lab(partition, args.rounds, True),
                False: lambda: run_fedala_lab(partition, args.rounds, False)}
        for k in range(args.repeats):
            order = ["ref", False, True] if k % 2 == 0 else [True, False, "ref"]
            done, loads = {}, []
            for job in order:
                loads.append(os.getloadavg()[0])
                done[job] = jobs[job]()
            loads.append(os.getloadavg()[0])
            ratios.append(report(done, args.rounds, partition, loads))
    if args.repeats > 1 and args.rounds > 2:
        for key, label in (("zero", "0 passes"), ("two", "2 passes")):
            vals = [r[key] for r in ratios]
            print(f"normal round ÷ the reference's own, {label}: {' '.join(f'{v:.2f}' for v in vals)}; "
                  f"median {statistics.median(vals):.2f}")


if __name__ == "__main__":
    main()
