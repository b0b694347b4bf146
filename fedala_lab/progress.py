"""Progress bars that end as they ended, wherever they are shown.

    >>> from fedala_lab.progress import bar
    >>> with bar(total=150, desc="runs", unit="round") as b: ...

:func:`bar` takes tqdm's arguments and is ``tqdm.auto.tqdm`` (a text bar in a terminal), except in a notebook.
There tqdm draws a widget, and a notebook that is saved or executed headless (nbclient, ``jupyter nbconvert
--execute``) keeps only the text the widget stood for when it was drawn: "0%| | 0/150", whatever the bar
reached, since the widget's later states live in the kernel. The notebook bar here replaces its output, as it
closes, with its final line (a display update, which an executed notebook keeps): a saved notebook shows how
the bar ended, and a bar that is not to stay (``leave=False``) leaves an empty line.
"""

from __future__ import annotations

import functools


def bar(*args, **kwargs):
    """A tqdm progress bar (``tqdm.auto.tqdm``'s arguments) that, in a notebook, ends as its final text line."""
    from tqdm import notebook
    from tqdm.auto import tqdm

    if issubclass(tqdm, notebook.tqdm) and not kwargs.get("disable"):
        return _notebook_bar()(*args, **kwargs)
    return tqdm(*args, **kwargs)


@functools.cache
def _notebook_bar():
    from IPython.display import display
    from tqdm.notebook import tqdm as widget_bar

    class NotebookBar(widget_bar):
        """tqdm's notebook widget, shown with a display id, and replaced by its final line when it closes."""

        def __init__(self, *args, **kwargs):
            self._handle = None
            super().__init__(*args, **{**kwargs, "display": False})
            if not self.disable:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self):
            if self.disable:
                return
            super().close()
            handle, self._handle = self._handle, None
            if handle is not None:
                line = self.format_meter(**self.format_dict) if self.leave else ""
                handle.update({"text/plain": line}, raw=True)

    return NotebookBar


__all__ = ["bar"]
