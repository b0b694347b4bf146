"""The committed figures of the paper's own setting, for the app and the notebooks to show beside a live version.

``fedala-lab figures --preset mnist`` draws Figs. 2–5 on real MNIST with the paper's 4-layer CNN in about
an hour of a 2-core CPU and writes them, with an ``index.json`` of what each shows, to ``figures/mnist/`` of
the checkout. A lecturer can show those instead of waiting: the app's Trajectory and ALA tabs and notebooks
4 and 5 offer them, labelled as recorded. Only that folder is read (``$FEDALA_LAB_RECORDED`` names another one), never a path a page
sends; an installed package without a checkout simply has none and says how to make them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..environ import RECORDED as ENV_RECORDED
from ..environ import env_folder

COMMAND = "fedala-lab figures --preset mnist"


def recorded_dir() -> Path:
    """Where the recorded MNIST figures are: ``$FEDALA_LAB_RECORDED``, else the checkout's figures/mnist."""
    return env_folder(ENV_RECORDED) or Path(__file__).resolve().parents[2] / "figures" / "mnist"


def recorded_figure(key: str, folder: Path | None = None) -> tuple[str | None, str]:
    """(PNG path or None, a Markdown caption) for figure ``key`` of the index (``fig2``, ``fig4``…).

    The caption says what was run (the index's title and configs) and its findings, the numbers read off
    the recorded runs; without the figure it says how to make it."""
    folder = recorded_dir() if folder is None else folder
    try:
        entry = json.loads((folder / "index.json").read_text())["figures"][key]
        png = next(f for f in entry["files"] if f.endswith(".png"))
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        return None, (f"No recorded figure here: `{COMMAND}` makes them (about an hour on a 2-core CPU) in "
                      f"{folder}.")
    path = folder / png
    if not path.is_file():
        return None, f"{path} is listed in {folder / 'index.json'} but missing: run `{COMMAND}` again."
    lines = [(f"**Recorded, not live** — {entry.get('paper', key)} on real MNIST with the paper's CNN: "
              f"{entry.get('title', '')}. Made by `{entry.get('only_command', COMMAND)}`.")]
    lines += [f"- {f}" for f in entry.get("findings", [])]
    return str(path), "\n".join(lines)
