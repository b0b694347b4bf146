"""The recorded MNIST figures (:mod:`fedala_lab.reproduce.recorded`) as a closed accordion under a tab's live
figure. Only the recorded folder is read, never a path a page sends."""

from __future__ import annotations

from ..reproduce.recorded import recorded_figure


def recorded_panel(key: str, title: str) -> None:
    """A closed accordion under a tab's live figure: the recorded figure ``key`` and its caption."""
    import gradio as gr

    path, caption = recorded_figure(key)
    with gr.Accordion(title, open=False, elem_id=f"recorded-{key}"):
        if path:
            gr.Image(path, show_label=False, interactive=False, buttons=["download", "fullscreen"])
        gr.Markdown(caption)
