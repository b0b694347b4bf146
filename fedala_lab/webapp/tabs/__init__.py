"""The app's tabs, one module each: its layout (``build``) and its handler(s), which :mod:`..ui` binds to
the app's run store (``LectureApp``) and wires to the page.

A tab with a long job returns a :class:`Panel` from ``build``: the page arms and queues its job on the
Run button (and on ``triggers``), stops it with Stop, and refreshes the Runs tab after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Panel:
    """A tab's long job as the page wires it: ``name`` is the handler's and the API endpoint's name."""

    name: str
    run: object
    stop: object
    status: object
    inputs: list
    outputs: list
    triggers: list = field(default_factory=list)  # more events that start the job (e.g. a slider's release)
    then: list = field(default_factory=list)  # (handler name, inputs, outputs) drawn after a successful job
