"""Numbers the README files state about results are rendered from runs, never typed.

README.md's result blocks are written by tools/readme_results.py from fresh runs (the slow test here runs them
again and compares, seconds and run-key hashes apart); each figures/**/README.md is rendered by
``fedala_lab.figures.index.render_readme`` from the index.json the figures driver wrote next to it, from the
runs that made the figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import readme_results

FIGURE_DIRS = sorted(p.parent for p in (ROOT / "figures").rglob("index.json"))


def test_readme_marks_its_result_blocks():
    text = readme_results.README.read_text()
    for name in ("make-run", "fedlama"):
        assert readme_results.current(text, name).strip()


def test_comparison_leaves_out_only_seconds_and_run_keys():
    row = "fedala              95.24       94.98     50      5.4  runs/fedala-mnist_mini-dir0.1-n20-r50-s0-a7f8707d8f26"
    same = row.replace("5.4", "9.9").replace("a7f8707d8f26", "0123456789ab")
    assert readme_results.comparable(row) == readme_results.comparable(same)
    for changed in (row.replace("95.24", "95.25"), row.replace("  50 ", "  49 "), row.replace("s0-", "s1-")):
        assert readme_results.comparable(row) != readme_results.comparable(changed)


@pytest.mark.slow
def test_readme_result_blocks_are_current(tmp_path):
    """Run what README.md reports (make run; FedLAMA over three seeds) afresh, with portable numerics as ``make run``
    computes them, and compare with the text: the same numbers on every x86-64 CPU with AVX2."""
    why = readme_results.reproducible_here()
    if why:
        pytest.skip(f"README.md's numbers are portable numerics: {why}")
    text = readme_results.README.read_text()
    for name, block in readme_results.blocks(tmp_path).items():
        assert readme_results.comparable(readme_results.current(text, name)) == readme_results.comparable(block), (
            f"README.md's {name} block is not what a fresh run gives: run tools/readme_results.py\n{block}")


@pytest.mark.parametrize("folder", FIGURE_DIRS, ids=[str(p.relative_to(ROOT)) for p in FIGURE_DIRS])
def test_figure_readme_is_rendered_from_its_index(folder):
    from fedala_lab.figures.index import render_readme

    index = json.loads((folder / "index.json").read_text())
    text = (folder / "README.md").read_text()
    heads = {k: text.find(f"## {f['paper']}: {f['title']}") for k, f in index["figures"].items()}
    assert all(pos >= 0 for pos in heads.values()), "a figure of index.json has no section in README.md"
    order = sorted(heads, key=heads.get)
    assert render_readme(index, order) == text
