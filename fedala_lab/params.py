"""Declared parameters: a name, a default, what is allowed and what it means — one declaration each.

Every setting of fedala_lab is declared once with :class:`Param`: the config's fields (``RunConfig``,
``DataConfig``) and every algorithm's hyper-parameters (an algorithm's spec lists its own,
``algorithms/registry.py``). The declaration is the value's check (one :class:`~fedala_lab.errors.ConfigError`
naming the field and the allowed range), its documentation (``help(RunConfig)``, the CLI's help, the
extension guide) and its default.

    >>> lr = Param("lr", 0.005, Float(0, lo_open=True), "local learning rate")
    >>> lr.check(-1.0)
    Traceback (most recent call last):
    ConfigError: lr=-1.0 is not allowed: a finite number > 0
"""

from __future__ import annotations

import dataclasses
import keyword
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

FLOAT32_MAX = 3.4028234663852886e38  # the largest float32 (torch.finfo(torch.float32).max)


class Allowed:
    """What values a parameter may take: ``ok(value)`` and a phrase for messages (``text``)."""

    text = "any value"

    def ok(self, value) -> bool:
        return True

    def coerce(self, value):
        """The stored form of an allowed value (a float parameter keeps 80 as 80.0: one config, one key)."""
        return value

    def why(self, value) -> str:
        """Why ``value`` is refused where :attr:`text` alone would not say (empty: the text says it)."""
        return ""


@dataclass(frozen=True)
class Int(Allowed):
    lo: int | None = None
    hi: int | None = None

    @property
    def text(self) -> str:
        return (f"an integer{'' if self.lo is None else f' >= {self.lo}'}"
                f"{'' if self.hi is None else f' and <= {self.hi}'}")

    def ok(self, value) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool)
                and (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi))


@dataclass(frozen=True)
class Float(Allowed):
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    @property
    def text(self) -> str:
        lo = "" if self.lo is None else f"{'>' if self.lo_open else '>='} {self.lo}"
        hi = "" if self.hi is None else f"{'<' if self.hi_open else '<='} {self.hi}"
        return "a finite number " + " and ".join(s for s in (lo, hi) if s)

    def ok(self, value) -> bool:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            return False
        if abs(value) > FLOAT32_MAX:  # runs compute in float32: torch refuses such a value in a step
            return False
        return ((self.lo is None or (value > self.lo if self.lo_open else value >= self.lo))
                and (self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)))

    def coerce(self, value):
        return float(value)

    def why(self, value) -> str:
        big = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(
            value) > FLOAT32_MAX
        return f"beyond float32, in which runs compute: at most {FLOAT32_MAX:.4g} in size" if big else ""


@dataclass(frozen=True)
class Bool(Allowed):
    text = "true or false"

    def ok(self, value) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class Choice(Allowed):
    choices: tuple

    @property
    def text(self) -> str:
        return "one of " + ", ".join(map(str, self.choices))

    def ok(self, value) -> bool:
        try:
            return value in self.choices
        except TypeError:  # an unhashable value (a list) is simply not one of them
            return False


@dataclass(frozen=True)
class Optional(Allowed):
    """None, or what ``inner`` allows."""

    inner: Allowed

    @property
    def text(self) -> str:
        return f"{self.inner.text}, or none"

    def ok(self, value) -> bool:
        return value is None or self.inner.ok(value)

    def coerce(self, value):
        return None if value is None else self.inner.coerce(value)

    def why(self, value) -> str:
        return self.inner.why(value)


@dataclass(frozen=True)
class Rule(Allowed):
    """Any other rule: a predicate and the phrase that says what it allows."""

    test: Callable[[Any], bool]
    text: str = "a valid value"

    def ok(self, value) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError, AttributeError):
            return False


@dataclass(frozen=True)
class Param:
    """One declared parameter: ``name``, ``default``, what is ``allowed`` and what it means (``doc``).

    ``hint``: advice added to a refusal (e.g. where the reference's value comes from). ``short``: how a
    run's settings line shows it (``"μ"`` → ``μ 0.001``, always; a template ``"ALA after round {}"``: only when
    not the default); without one it shows as ``name value`` when not the default."""

    name: str
    default: Any
    allowed: Allowed = Allowed()
    doc: str = ""
    hint: str = ""
    short: str = ""

    def __post_init__(self):
        # a name becomes a config field, a keyword argument and ``--set name=…``: an ASCII Python identifier
        # (never "", "a=b c", "x²", nor a look-alike letter from another alphabet)
        n = self.name
        if not (isinstance(n, str) and n.isascii() and n.isidentifier() and not keyword.iskeyword(n)):
            raise ConfigError("Param.name", n, "a Python identifier in ASCII: letters a-z A-Z, digits and '_', "
                              "not starting with a digit, not a Python keyword")

    def check(self, value):
        """``value`` in its stored form, or a :class:`ConfigError` naming this parameter and what is allowed."""
        if not self.allowed.ok(value):
            hint = "; ".join(h for h in (self.allowed.why(value), self.hint) if h)
            raise ConfigError(self.name, value, self.allowed.text, hint)
        return self.allowed.coerce(value)

    def shown(self, value) -> str | None:
        """This parameter with ``value`` in a run's settings line, or None when it is not shown there."""
        text = f"{value:g}" if isinstance(value, float) else str(value)
        if "{}" in self.short:
            return self.short.format(text) if value != self.default else None
        if self.short:
            return f"{self.short} {text}"
        return f"{self.name} {text}" if value != self.default else None

    def describe(self) -> str:
        """One line for help texts: ``name (default …; allowed …): meaning``."""
        return f"{self.name} (default {self.default!r}; {self.allowed.text}): {self.doc}"


def param_field(default, allowed: Allowed = Allowed(), doc: str = "", *, hint: str = "", factory=None):
    """A dataclass field declared as a :class:`Param` (read back with :func:`declared`)."""
    meta = {"param": (allowed, doc, hint)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def declared(cls) -> list[Param]:
    """The :class:`Param` of every field of a dataclass declared with :func:`param_field`, in order."""
    out = []
    for f in dataclasses.fields(cls):
        if "param" in f.metadata:
            allowed, doc, hint = f.metadata["param"]
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append(Param(f.name, default, allowed, doc, hint))
    return out


def check_fields(obj) -> None:
    """Check every declared field of a frozen dataclass instance, storing each value in its checked form."""
    for p in declared(type(obj)):
        object.__setattr__(obj, p.name, p.check(getattr(obj, p.name)))


def help_lines(params: Sequence[Param], indent: str = "    ") -> str:
    """Parameters as an indented list for a docstring."""
    return "\n".join(f"{indent}{p.describe()}" for p in params)
