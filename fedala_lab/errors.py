"""Errors that fedala_lab raises on purpose.

Every error a user can cause by a bad value or a bad file is a ``FedalaError`` whose message names the
value and what is allowed. The CLI prints ``str(err)`` on one line and exits with code 2; the app shows
it in a ``gr.Error``. Anything else escaping the library is a bug.
"""

from __future__ import annotations

SHOWN = 200  # characters of a value a message shows: a pasted 100,000-character name is not echoed back whole


def short_repr(value) -> str:
    """``repr(value)`` for a message, cut to :data:`SHOWN` characters with its full length said."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text):,} characters)"


class FedalaError(Exception):
    """Base class of the errors fedala_lab raises on purpose (bad input, bad files, diverged runs)."""

    def __reduce__(self):
        # Rebuilt without calling __init__, whose arguments differ from the message in the subclasses: an
        # error raised in a worker process (a sweep's pool) must come back whole, not as a broken pool.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls, args, state):
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class ConfigError(FedalaError, ValueError):
    """A configuration value is out of range or unknown. ``field`` names it."""

    def __init__(self, field: str, value, allowed: str, hint: str = ""):
        self.field, self.value, self.allowed = field, value, allowed
        msg = f"{field}={short_repr(value)} is not allowed: {allowed}"
        super().__init__(msg + (f" ({hint})" if hint else ""))


class ConfigFileError(ConfigError):
    """A settings file (``--config``, a sweep spec) cannot be read as settings: ``path: problem``."""

    def __init__(self, path, problem: str):
        self.field, self.value, self.allowed = "config", str(path), problem
        ValueError.__init__(self, f"config file {path}: {problem}")


class DataError(FedalaError, ValueError):
    """Data files are missing, corrupt or unsafe, or a partition request cannot be met."""


class SplitFailed(DataError):
    """A Dirichlet split found no draw that gives every client ``least`` samples (``best``: the largest
    smallest client reached). The attributes let an interface word the advice in its own terms."""

    def __init__(self, message: str, *, beta: float, clients: int, samples: int, least: int, best: int,
                 tries: int):
        super().__init__(message)
        self.beta, self.clients, self.samples, self.least, self.best, self.tries = (
            beta, clients, samples, least, best, tries)


class FilesMissing(DataError):
    """A dataset's files are not on this machine (``dataset``, ``folder``): fetch them or copy them there."""

    def __init__(self, message: str, *, dataset: str, folder: str):
        super().__init__(message)
        self.dataset, self.folder = dataset, folder


class UnsafeFileError(DataError):
    """A file asked us to unpickle something other than plain numpy arrays."""


class TrainingDiverged(FedalaError, RuntimeError):
    """A loss became NaN or infinite. ``run`` holds what was recorded up to that point."""

    def __init__(self, message: str, run=None):
        super().__init__(message)
        self.run = run


class SweepFailed(FedalaError):
    """Some runs of a sweep failed. ``result`` is the sweep's result without them (``result.failed``: every
    failed run's key and reason), so a caller can still see what finished."""

    def __init__(self, message: str, result=None):
        super().__init__(message)
        self.result = result


class HookError(FedalaError, TypeError):
    """An algorithm's hook returned something the round cannot use (a wrong type, shape or client id):
    ``hook`` names the hook, ``algo`` the algorithm."""

    def __init__(self, message: str, *, hook: str, algo: str):
        super().__init__(message)
        self.hook, self.algo = hook, algo


class SplitError(FedalaError, RuntimeError):
    """A method did something a federation cannot do (clients and server apart, as on Flower): read a model
    its side does not hold."""


class RunCancelled(FedalaError):
    """A run was stopped by its caller (the app's Stop button). Its last checkpoint can be resumed; ``run``
    holds what was recorded up to that point (a Run with status "partial")."""

    def __init__(self, message: str, run=None):
        super().__init__(message)
        self.run = run
