"""The app's environment: no telemetry (set before Gradio is imported) and where its runs are kept."""

from __future__ import annotations

import os
from pathlib import Path

from ..environ import APP_RUNS, env_folder


def offline_env() -> None:
    """Keep Gradio and the Hugging Face hub client quiet: no telemetry, no version checks, no hub calls.

    Both libraries read these variables when imported, so the package ``fedala_lab.webapp`` calls this
    as it is imported, before any of its modules imports gradio: every entry point (``python app.py``,
    ``fedala-lab app``, ``from fedala_lab.webapp import ui``, a tab module) gets gradio after it.
    ``setdefault``: a user who wants otherwise can still say so in the environment.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def default_store_root() -> Path:
    """``$FEDALA_LAB_APP_RUNS`` or ``./runs/app``: kept apart from the CLI's ``./runs`` on purpose, so the
    Runs tab shows (and can reach) only what the app itself computed."""
    return env_folder(APP_RUNS) or Path("runs", "app")
