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
import threading

import gradio as gr
from gradio import component_meta

from ..errors import ConfigError

log = logging.getLogger(__name__)
# Events that draw without simulating share four workers; those only the page uses are no API endpoints.
LIGHT = {"concurrency_limit": 4, "concurrency_id": "light"}
PRIVATE = {"api_visibility": "private"}


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


def checked_choice(field: str, value, choices, *, many: bool = False):
    """``value`` if it is one of ``choices`` (Gradio's (label, value) pairs), or with ``many`` a list of them;
    else a refusal naming ``field`` and listing the allowed values. ``None`` is refused too (unless a choice):
    a silent default would run something other than what was asked."""
    allowed = [v for _, v in choices]

    def known(v):  # exact: True is not the choice 1, nor "1" the choice 1
        return any(type(v) is type(a) and v == a for a in allowed)

    shown = ", ".join("'' (any)" if a == "" else str(a) for a in allowed)
    if many:
        if not isinstance(value, list) or not all(known(v) for v in value):
            raise refusal(ConfigError(field, value, f"a list of any of {shown}"))
    elif not known(value):
        raise refusal(ConfigError(field, value, f"one of {shown}"))
    return value


class _AsGradio:
    """A checked input drawn as the Gradio component it extends (``_gradio``): the same page component, from
    the properties Gradio's own signature lists (``field`` and the like stay on the server)."""

    _gradio: type

    def get_block_name(self) -> str:
        return self._gradio.__name__.lower()

    def get_config(self, cls=None):
        return super().get_config(cls or self._gradio)


class _Choices(_AsGradio):
    """An input with choices whose value is checked against them (:func:`checked_choice`; ``many``: a list of
    them), unless it takes custom values. ``field`` names the setting in messages."""

    many = False

    def __init__(self, choices=None, *, value=None, field: str, **kwargs):
        super().__init__(choices=choices, value=value, **kwargs)
        self.field = field

    def preprocess(self, payload):
        if not getattr(self, "allow_custom_value", False):
            checked_choice(self.field, payload, self.choices, many=self.many)
        return super().preprocess(payload)


with _no_stub_files():

    class Slider(_AsGradio, gr.Slider):
        """A slider whose value is checked against its range (and, with ``whole``, to be a whole number),
        never rounded or clamped. ``field`` names the setting in messages."""

        _gradio = gr.Slider

        # named parameters, not *args: Gradio's component metaclass records constructor arguments by name
        def __init__(self, minimum: float = 0, maximum: float = 100, value=None, *, field: str,
                     whole: bool = False, **kwargs):
            super().__init__(minimum=minimum, maximum=maximum, value=value, **kwargs)
            self.field, self.whole = field, whole

        def preprocess(self, payload):
            return checked_number(self.field, payload, self.minimum, self.maximum, whole=self.whole)

    class Number(_AsGradio, gr.Number):
        """A number box checked like :class:`Slider` (range when given, whole numbers with ``whole``)."""

        _gradio = gr.Number

        def __init__(self, value=None, *, field: str, whole: bool = False, **kwargs):
            super().__init__(value=value, **kwargs)
            self.field, self.whole = field, whole

        def preprocess(self, payload):
            return checked_number(self.field, payload, self.minimum, self.maximum, whole=self.whole)

    # Gradio checks a choice too, but with a message that names no setting and a traceback in the server log;
    # these check first (the session's choices, which follow updates) and refuse with one line.

    class Dropdown(_Choices, gr.Dropdown):
        """A dropdown whose value must be one of its choices (a list of them with ``multiselect``)."""

        _gradio = gr.Dropdown

        @property
        def many(self) -> bool:
            return bool(self.multiselect)

    class Radio(_Choices, gr.Radio):
        """Radio buttons whose value must be one of their choices."""

        _gradio = gr.Radio

    class CheckboxGroup(_Choices, gr.CheckboxGroup):
        """Checkboxes whose value must be a list of their choices."""

        _gradio = gr.CheckboxGroup
        many = True


# -- layout pieces ---------------------------------------------------------------------------------


def whole_slider(lo, hi, value, label: str, elem_id: str, step: int = 1, *, field: str, **kw) -> Slider:
    """A slider of whole numbers (clients, rounds, sizes): other values are refused, never rounded."""
    return Slider(lo, hi, value=value, step=step, precision=0, label=label, elem_id=elem_id, field=field,
                  whole=True, **kw)


def plot(label: str, elem_id: str, **kw) -> gr.Plot:
    """A figure output; its label is the accessible name only (every figure carries its own title). Under it, a
    button that downloads the figure shown as a PNG file (``{elem_id}-download``), there once a figure is."""
    fig = gr.Plot(label=label, elem_id=elem_id, show_label=False, format="png", **kw)
    button = gr.DownloadButton("⬇ PNG", elem_id=f"{elem_id}-download", size="sm", visible=False, scale=0,
                               min_width=90, elem_classes=["figure-download"])
    fig.change(png_file, fig, button, show_progress="hidden", **LIGHT, **PRIVATE)
    return fig


FIGURE_FILES = 200  # the newest figure files kept for download (older ones are deleted as new ones come)


def png_file(shown):
    """The figure a plot shows (the PNG it was sent as) written to a file of its own, for its download button.
    Named by its content: a figure drawn again (served from the run store) is the same file, here and in Gradio's
    cache (which copies what a button offers into a folder named by the content's hash)."""
    import base64
    import hashlib
    import tempfile
    from pathlib import Path

    url = getattr(shown, "plot", None) or ""
    head, _, data = url.partition(",")
    if head != "data:image/png;base64" or not data:  # no figure (cleared) or not one of ours
        return gr.DownloadButton(visible=False)
    png = base64.b64decode(data)
    folder = Path(tempfile.gettempdir(), "fedala-lab-figures")
    folder.mkdir(exist_ok=True)
    path = folder / f"figure-{hashlib.sha256(png).hexdigest()[:16]}.png"
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(png)
        tmp.replace(path)  # never a half-written file offered
    for old in sorted(folder.glob("figure-*.png"), key=lambda q: q.stat().st_mtime)[:-FIGURE_FILES]:
        old.unlink(missing_ok=True)
    return gr.DownloadButton(value=str(path), visible=True)


def table(label: str, elem_id: str, columns, **kw) -> gr.Dataframe:
    """A read-only table whose cells wrap, so every column stays in view (no cut-off on the right). Before a
    first result it shows its ``columns``' headers and no rows (Gradio's own placeholder reads "1 2 3")."""
    import pandas as pd

    kw.setdefault("value", pd.DataFrame(columns=list(columns)))
    return gr.Dataframe(label=label, elem_id=elem_id, interactive=False, wrap=True, **kw)


def run_stop(prefix: str) -> tuple[gr.Button, gr.Button, gr.Markdown]:
    """A tab's Run and Stop buttons and its status line (ids ``{prefix}-run``, ``-stop``, ``-status``)."""
    with gr.Row():
        run = gr.Button("Run", variant="primary", elem_id=f"{prefix}-run", scale=0, min_width=120)
        stop = gr.Button("Stop", variant="stop", elem_id=f"{prefix}-stop", scale=0, min_width=120)
    return run, stop, gr.Markdown(elem_id=f"{prefix}-status", elem_classes=["status"])


def mirror(a, b) -> None:
    """Keep two widgets of one setting equal (a setting shown on two tabs), in the browser: what is typed
    or dragged in one is copied into the other, unchecked (the server checks what a job is sent)."""
    for src, dst in ((a, b), (b, a)):
        src.input(None, src, dst, js="(v) => v", queue=False, **PRIVATE)


# The number box of Gradio's slider, and what this page script changes in it:
# - its focus leaving clamps a typed value to the slider's range (0 typed as the batch size would run as 1):
#   an out-of-range (or empty) value is kept as typed, by stopping that event before the slider sees it; the
#   server then refuses the value naming the setting (Slider.preprocess), and the page keeps what it showed;
# - a click into it announces the slider's value ("release"), which starts what the release starts (a redraw
#   of the partition whose answer resets the box being typed in; the ALA tab's run): a click only focuses it;
# - Enter announces nothing: Enter commits the typed value as the focus leaving does (a "release").
KEEP_TYPED_VALUES_JS = """
() => {
  const sliderBox = (el) => el instanceof HTMLInputElement && el.type === "number"
    && el.dataset.testid === "number-input";
  document.addEventListener("blur", (event) => {
    const box = event.target;
    if (!sliderBox(box)) {
      return;
    }
    const value = box.valueAsNumber;
    const lo = parseFloat(box.min), hi = parseFloat(box.max);
    if (box.value === "" || Number.isNaN(value) || value < lo || value > hi) {
      event.stopImmediatePropagation();
    }
  }, true);
  document.addEventListener("pointerup", (event) => {
    if (sliderBox(event.target)) {
      event.stopPropagation();
    }
  }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && sliderBox(event.target)) {
      event.target.blur();
    }
  }, true);
}
"""


class Followers:
    """Sliders whose range follows another widget's value: the client sliders follow N, the round sliders T,
    ALA's p the model (:meth:`add` each, then :meth:`wire` once the page is built).

    Each target's range becomes ``lo`` … ``top(n)`` for the source's value n, and its value moves inside it: a
    value now out of range goes to the nearest end, which the slider shows (no warning: dragging N from 20 to 2
    would raise one for every value passed). A value of the source its own range refuses (N = 1 typed, 2.5
    rounds) moves nothing: Run refuses it, once, naming it.

    One handler per source and event, however many sliders follow it: when a deferred handler ("always_last",
    Gradio's default for ``change``) finishes, Gradio's page sends its whole *event* again, so two handlers on one
    change event restart each other for as long as both are in flight (a slow machine or link: for ever)."""

    def __init__(self):
        self._groups: dict[tuple, tuple] = {}  # (source id, event) -> (source, event, [(target, top, lo)])

    def add(self, source, target, top, lo: int = 0, event: str = "release") -> None:
        self._groups.setdefault((source._id, event), (source, event, []))[2].append((target, top, lo))

    def wire(self) -> None:
        for source, event, rules in self._groups.values():
            def update(n, *values, source=source, rules=rules):
                # unchecked values (preprocess=False): what the source's own check refuses moves nothing here
                whole_n = (isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)
                           and n == int(n))
                if not (isinstance(n, str) or whole_n) or (whole_n and not source.minimum <= n <= source.maximum):
                    return [gr.skip()] * len(rules)
                return [_followed(n if isinstance(n, str) else int(n), value, top, lo)
                        for value, (_, top, lo) in zip(values, rules, strict=True)]

            targets = [target for target, *_ in rules]
            getattr(source, event)(update, [source, *targets], targets, preprocess=False, **LIGHT, **PRIVATE)
        self._groups.clear()


def _followed(n, value, top, lo: int):
    """The update of a slider following the value ``n``: its range ``lo`` … ``top(n)``, its value inside it."""
    hi = top(n)
    # a slider's range must be wider than one value (Gradio refuses minimum == maximum with a traceback):
    # a single allowed value is offered as lo … lo + 1, the config refuses the other
    out = {"maximum": max(hi, lo + 1)}
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not lo <= value <= hi:
        out["value"] = min(max(value, lo), hi)
    return gr.Slider(**out)
