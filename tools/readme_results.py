"""Write README.md's result blocks from fresh runs, or check that they are current.

    python tools/readme_results.py            # recompute (a run store in a temporary folder) and rewrite them
    python tools/readme_results.py --check    # recompute and compare; exit 1 naming the block that differs

Each block stands between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` in README.md and is text
this script renders from the runs it makes, never typed:

- ``make-run``: what ``make run`` prints (``fedala-lab run --preset teach --algos fedavg,fedprox,fedala``), run
  by the CLI itself in a fresh folder;
- ``fedlama``: FedLAMA's upload and accuracy against FedAvg on the ``teach-fedlama`` preset over seeds 0–2,
  with the authors' interval rule and the paper's.

Both are computed with portable numerics (``FEDALA_LAB_NUMERICS=portable``, as ``make run`` computes): the same
numbers on every x86-64 CPU with AVX2, Intel or AMD (docs/design.md#numbers-across-machines). Elsewhere (an ARM
machine) they cannot be reproduced exactly and ``--check`` says so instead of comparing.

``--check`` compares everything a run computes (accuracies, rounds, the shares and differences): the seconds
column (wall-clock, which varies with the machine and its load) and the hash at the end of each run folder's
name (the run key, which changes with the code) are not compared. tests/test_readme.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAKE_RUN = ["run", "--preset", "teach", "--algos", "fedavg,fedprox,fedala", "--no-progress"]
SEEDS = (0, 1, 2)


def _env() -> dict:
    """This checkout's fedala_lab with portable numerics, for a process of its own (torch reads them at start)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "FEDALA_LAB_NUMERICS": "portable"}


def make_run_block(workdir: Path) -> str:
    """The table ``make run`` prints, run in ``workdir`` (its run store ``runs/`` there, as from a checkout)."""
    out = subprocess.run([sys.executable, "-m", "fedala_lab.cli", *MAKE_RUN], cwd=workdir, env=_env(), check=True,
                         capture_output=True, text=True).stdout
    return "```\n" + out.strip("\n") + "\n```"


def fedlama_block(store: Path) -> str:
    """FedLAMA against FedAvg on the teach-fedlama preset over :data:`SEEDS`, both interval rules, as a sentence."""
    import numpy as np

    from fedala_lab import preset
    from fedala_lab.analysis.fedlama import comm_accuracy_frame
    from fedala_lab.experiments.runs import comparison_runs

    base = preset("teach-fedlama")
    up, diff = [], []
    for seed in SEEDS:
        frame = comm_accuracy_frame(comparison_runs(base.replace(seed=seed), store=store))
        ref, lama = frame[frame["reference"]].iloc[0], frame[frame["algo"] == "fedlama"].iloc[0]
        up.append(lama.comm_pct)
        diff.append(lama.final_acc - ref.final_acc)
    frame = comm_accuracy_frame(comparison_runs(base.replace(lama_rule="spec"), store=store))
    spec = float(frame.loc[frame["algo"] == "fedlama", "comm_pct"].iloc[0])
    up, diff = np.array(up), np.array(diff)
    return (f"The preset (τ0 = {base.tau0}, φ = {base.phi}, {base.rounds} rounds) uses the interval rule of the "
            f"authors' code, under which FedLAMA uploads {up.mean():.1f} ± {up.std(ddof=1):.1f} % of FedAvg's bytes "
            f"at a final accuracy {diff.mean():+.2f} ± {diff.std(ddof=1):.2f} points from it (seeds "
            f"{SEEDS[0]}–{SEEDS[-1]}, docs/design.md#fedlama); `--set lama_rule=spec` is the paper's rule, which "
            f"uploads {spec:.1f} % here (seed {SEEDS[0]})"
            + (", almost nothing saved." if spec > 90 else "."))


def blocks(workdir: Path) -> dict[str, str]:
    """Every block, computed in processes of their own with portable numerics."""
    fedlama = subprocess.run([sys.executable, __file__, "--fedlama-json", str(workdir / "runs")], env=_env(),
                             check=True, capture_output=True, text=True).stdout
    return {"make-run": make_run_block(workdir), "fedlama": json.loads(fedlama)}


def reproducible_here() -> str:
    """"" where portable numerics hold (x86-64 with AVX2), else why this machine computes other numbers."""
    sys.path.insert(0, str(ROOT))
    from fedala_lab import numerics

    c = numerics.cpu()
    return "" if numerics.portable_possible() else (
        f"this machine ({c['arch']}, {c['model']}) cannot compute the portable numbers (x86-64 with AVX2 only)")


def _span(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results:{name} -->\n)(.*?)(\n<!-- /results:{name} -->)", re.DOTALL)


def current(text: str, name: str) -> str:
    """The block ``name`` as README.md holds it."""
    m = _span(name).search(text)
    if m is None:
        raise SystemExit(f"README.md has no block {name} (<!-- results:{name} --> … <!-- /results:{name} -->)")
    return m.group(2)


def comparable(block: str) -> str:
    """A block without what varies from machine to machine or with the code: the seconds column of the run
    table and the key hash ending each run folder's name."""
    block = re.sub(r"(-[0-9a-f]{12})\b", "-<key>", block)
    return re.sub(r"^(\S+\s+[\d.]+\s+[\d.]+\s+\d+)\s+[\d.]+(\s+)", r"\1 <s>\2", block, flags=re.MULTILINE)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with README.md instead of rewriting it")
    ap.add_argument("--fedlama-json", metavar="STORE", help=argparse.SUPPRESS)  # blocks(): one block, as JSON
    args = ap.parse_args(argv)
    if args.fedlama_json:
        print(json.dumps(fedlama_block(Path(args.fedlama_json))))
        return 0
    why = reproducible_here()
    if why:
        print(f"README.md's blocks are not checked here: {why}")
        return 0 if args.check else 1
    text = README.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = blocks(Path(tmp))
    if args.check:
        stale = [n for n, b in fresh.items() if comparable(current(text, n)) != comparable(b)]
        for n in stale:
            print(f"README.md block {n} is not current; fresh:\n{fresh[n]}\nREADME:\n{current(text, n)}")
        return 1 if stale else 0
    for name, block in fresh.items():
        current(text, name)  # present
        text = _span(name).sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
