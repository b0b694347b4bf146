"""Number inputs that refuse, never round or clamp.

Gradio's own Slider and Number round a value sent with ``precision=0`` (2.5 rounds become 2, ``true``
becomes 1), fail on NaN with no message, and refuse an out-of-range value with a traceback in the server
log. These subclasses check the value instead: a whole number where one is needed, within the widget's
range (the range of the session's copy of the widget, which follows updates such as the client slider
tracking N), finite. Anything else is refused with the library's one-line message naming the setting
(a visible ``gr.Error``), logged as one line.
"""

from __future__ import annotations

import contextlib
import logging
import math

import gradio as gr
from gradio import component_meta

from ..errors import ConfigError

log = logging.getLogger(__name__)


def html_text(message: str) -> str:
    """The error modal renders HTML: keep "<directory>" or "1 <= p" visible (">" alone is harmless)."""
    return message.replace("&", "&amp;").replace("<", "&lt;")


def refusal(err: ConfigError) -> gr.Error:
    """A visible, one-line refusal of a bad value (no traceback in the server log, one log line)."""
    log.warning("refused: %s", err)
    return gr.Error(html_text(str(err)), print_exception=False)


def checked_number(field: str, value, lo=None, hi=None, *, whole: bool = False):
    """``value`` if it is a finite number within [lo, hi] (and whole, if asked), else a refusal.

    Whole numbers sent as floats (20.0) come back as ints. ``None`` (an emptied box) is refused too:
    silently falling back to a default would run something other than what the page shows.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and whole:
        ok = float(value).is_integer()
    if ok:
        ok = (lo is None or value >= lo) and (hi is None or value <= hi)
    if not ok:
        kind = "a whole number" if whole else "a number"
        if lo is not None and hi is not None:
            allowed = f"{kind} from {_fmt(lo)} to {_fmt(hi)}"
        elif lo is not None:
            allowed = f"{kind} >= {_fmt(lo)}"
        elif hi is not None:
            allowed = f"{kind} <= {_fmt(hi)}"
        else:
            allowed = f"{kind}, finite"
        raise refusal(ConfigError(field, value, allowed))
    return int(value) if whole else value


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@contextlib.contextmanager
def _no_stub_files():
    """Gradio writes a ``.pyi`` stub next to the source of every component subclass as the class is
    defined (meant for custom-component projects): in an installed package that would write into
    site-packages, and fail where it is read-only. Defining ours skips that step."""
    make = getattr(component_meta, "create_or_modify_pyi", None)
    component_meta.create_or_modify_pyi = lambda *args, **kwargs: None
    try:
        yield
    finally:
        if make is not None:
            component_meta.create_or_modify_pyi = make


with _no_stub_files():

    class Slider(gr.Slider):
        """A slider whose value is checked against its range (and, with ``whole``, to be a whole number),
        never rounded or clamped. ``field`` names the setting in messages."""

        # named parameters, not *args: Gradio's component metaclass records constructor arguments by name
        def __init__(self, minimum: float = 0, maximum: float = 100, value=None, *, field: str,
                     whole: bool = False, **kwargs):
            super().__init__(minimum=minimum, maximum=maximum, value=value, **kwargs)
            self.field, self.whole = field, whole

        def get_block_name(self) -> str:  # the page draws it as Gradio's slider…
            return "slider"

        def get_config(self, cls=None):  # …from the properties Gradio's own signature lists
            return super().get_config(cls or gr.Slider)

        def preprocess(self, payload):
            return checked_number(self.field, payload, self.minimum, self.maximum, whole=self.whole)

    class Number(gr.Number):
        """A number box checked like :class:`Slider` (range when given, whole numbers with ``whole``)."""

        def __init__(self, value=None, *, field: str, whole: bool = False, **kwargs):
            super().__init__(value=value, **kwargs)
            self.field, self.whole = field, whole

        def get_block_name(self) -> str:
            return "number"

        def get_config(self, cls=None):
            return super().get_config(cls or gr.Number)

        def preprocess(self, payload):
            return checked_number(self.field, payload, self.minimum, self.maximum, whole=self.whole)
