"""A registered algorithm's own code, answered for in one line: an exception raised by a plugin's constructor or
by a hook it wrote becomes a :class:`~fedala_lab.errors.HookError` naming the method, the hook, the error and
the line of the plugin's file it came from (the command line prints it on one line with exit code 2, the app
shows it as a message, a sweep lists it as the run's failure).

Only code outside fedala_lab is guarded: an exception in fedala_lab's own hooks is a bug of fedala_lab and
keeps its traceback. An error raised on purpose (a :class:`~fedala_lab.errors.FedalaError`: a hook that
refuses a setting) goes on as it is.
"""

from __future__ import annotations

import functools
import threading
import traceback
from pathlib import Path

from ..errors import FedalaError, HookError

# the methods of an Algorithm the engine calls (algorithms/base.py)
HOOKS = ("init_state", "downloads", "select", "initialise", "personalise", "objective", "local_train",
         "aggregate", "meta")

_CLASSES: dict[tuple, type] = {}  # (an algorithm's class, label, name) -> that class with its own hooks guarded
_LOCK = threading.Lock()


def build_guarded(build, setup, *, label: str, algo: str):
    """``build(setup)`` (a registered algorithm's constructor or function), its own hooks guarded."""
    try:
        obj = build(setup)
    except FedalaError:
        raise
    except Exception as err:
        raise HookError(_message(label, "constructor (build)", err, _file(build)), hook="build",
                        algo=algo) from err
    key = (type(obj), label, algo)
    with _LOCK:
        if key not in _CLASSES:
            _CLASSES[key] = _guarded_class(*key)
    try:
        obj.__class__ = _CLASSES[key]
    except TypeError:  # a class whose layout cannot take a subclass (__slots__): left as it is
        pass
    return obj


def _own(fn) -> bool:
    """Whether ``fn`` is code of a plugin, not fedala_lab's."""
    return not (getattr(fn, "__module__", None) or "").startswith("fedala_lab")


def _guarded_class(cls: type, label: str, algo: str) -> type:
    """A subclass of ``cls`` that guards the hooks ``cls`` defines outside fedala_lab. It keeps the name, module
    and qualified name of ``cls`` (an instance pickles as one of ``cls``), and overrides only what ``cls``
    overrides (engine/sides.py reads which hooks a method overrides)."""

    def guard(hook: str):
        inner = getattr(cls, hook)

        @functools.wraps(inner)
        def call(self, *args, **kwargs):
            try:
                return inner(self, *args, **kwargs)
            except FedalaError:
                raise
            except Exception as err:
                raise HookError(_message(label, f"{hook} hook", err, _file(inner)), hook=hook, algo=algo) from err

        return call

    own = {h: guard(h) for h in HOOKS if _own(getattr(cls, h, None))}
    if not own:
        return cls
    return type(cls.__name__, (cls,), {**own, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                       "__doc__": cls.__doc__})


def _file(fn) -> str:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None) or getattr(
        getattr(fn, "__init__", None), "__code__", None)
    return code.co_filename if code is not None else ""


def _message(label: str, what: str, err: Exception, file: str) -> str:
    """``FedAvgM's aggregate hook raised ValueError: … (my_methods.py, line 12)``: the last line of ``file`` (the
    plugin's) the error passed through."""
    text = " ".join(str(err).split())
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if file and f.filename == file]
    where = f" ({Path(file).name}, line {lines[-1]})" if lines else ""
    return f"{label}'s {what} raised {type(err).__name__}{': ' + text if text else ''}{where}"


__all__ = ["HOOKS", "build_guarded"]
