"""FedLAMA's figure set: the comparison's runs (experiments) drawn by FedLAMA's Displays (figures) into files.

    >>> fedlama_figures("figures/fedlama", preset="quick")       # Fig. 1, Tables 1–4 as curves, timeline
"""

from __future__ import annotations

import time
from pathlib import Path

from ..experiments.plans import FEDLAMA_SCALES, fedlama_base
from ..experiments.runs import comparison_runs
from ..record.store import open_store


def fedlama_figures(out_dir, *, preset: str = "quick", store=None, progress: bool = False,
                    overrides: dict | None = None) -> list[dict]:
    """Run (or load) the FedLAMA comparison and write its figures (PNG + PDF) into ``out_dir``.

    ``preset``: "quick" (teach, seconds on a CPU) or "full" (the FedALA repository's MNIST partition, GPU scale): a scale of
    :data:`~fedala_lab.experiments.plans.FEDLAMA_SCALES`.
    ``store``: a RunStore, RunCache or folder for the runs (None: the default store, ``$FEDALA_LAB_RUNS`` or
    ./runs).
    ``overrides``: config changes applied to the preset (e.g. ``{"rounds": 10}``).
    Returns one dict per figure: file, reproduces, config, command, seconds.
    """
    from ..figures.fedlama import CommAccuracyDisplay, FedLAMACurvesDisplay, IntervalTimelineDisplay  # torch

    base = fedlama_base(preset, overrides)
    name, extra = FEDLAMA_SCALES[preset]
    store = open_store() if store is None else store  # always into a store, never simulated unsaved
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tau0, phi = base.tau0, base.phi
    cmd_runs = (f"fedala-lab run --preset {name} --algos fedavg,fedlama --tau0 {tau0} --local-steps {tau0} "
                f"--phi {phi}" + "".join(f" --set {k}={v}" for k, v in {**extra, **(overrides or {})}.items()
                                        if k not in ("tau0", "local_steps", "phi")))
    api = f"fedala_lab.reproduce.fedlama_figures({str(out)!r}, preset={preset!r})"
    results = []

    tic = time.perf_counter()
    runs = comparison_runs(base, store=store, progress=progress)
    runs_seconds = time.perf_counter() - tic
    tic = time.perf_counter()
    # only FedALA and FedLAMA+ALA are new; the three above are reused (same labels, same order)
    ala_runs = comparison_runs(base, store=store, progress=progress, with_ala=True, have=runs)
    ala_seconds = time.perf_counter() - tic
    lama_label = f"FedLAMA(τ0={tau0}, φ={phi})"
    fedavg_label = f"FedAvg(τ0={tau0})"
    config = {"preset": name, **extra, **(overrides or {}), "tau0": tau0, "phi": phi, "rounds": base.rounds}

    def emit(make, stem, reproduces, extra_seconds=0.0):
        # seconds: drawing, plus the runs this figure was the first to need (0 when loaded from the store)
        started = time.perf_counter()
        files = make().savefig(out / f"{stem}.png", formats=("png", "pdf"))
        results.append({"file": str(files[0]), "files": [str(f) for f in files], "reproduces": reproduces,
                        "config": config, "command": f"{api}  # runs: {cmd_runs}",
                        "seconds": round(time.perf_counter() - started + extra_seconds, 3)})

    emit(lambda: FedLAMACurvesDisplay.from_run(runs[lama_label]), "fedlama_fig1_curves",
         "FedLAMA Fig. 1: δ_l and 1 − λ_l against the number of layers given the long interval "
         "(last re-assignment of the run)", runs_seconds)
    emit(lambda: CommAccuracyDisplay.from_runs(runs), "fedlama_comm_accuracy",
         "FedLAMA Tables 1–4 layout: accuracy vs % of FedAvg(τ0)'s communication for FedAvg(τ0), "
         "FedAvg(φτ0), FedLAMA(τ0, φ) at equal local SGD steps")
    emit(lambda: IntervalTimelineDisplay.from_run(runs[lama_label]), "fedlama_interval_timeline",
         "per-layer aggregation interval over rounds, with the unit discrepancies d_l")
    ala_set = {k: v for k, v in ala_runs.items() if "ALA" in k or k == fedavg_label}
    emit(lambda: CommAccuracyDisplay.from_runs(
        ala_set, reference=fedavg_label, title="FedLAMA + ALA (not in any paper): accuracy vs communication"),
         "fedlama_ala_comm_accuracy",
         "beyond the papers: FedLAMA with ALA on the clients vs FedALA and FedAvg at equal local steps",
         ala_seconds)
    return results
