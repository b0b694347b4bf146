"""Algorithms from other modules and packages: plugins (docs/extending.md#plugins).

A module that registers algorithms when it is imported (``register_algorithm`` at its top level) is a plugin.
Three ways to load one, each usable wherever a built-in algorithm is — this process, sweep workers (process
pool, Ray), the command line, the app:

- an installed package's entry point in the group ``fedala_lab.algorithms`` (pyproject.toml:
  ``[project.entry-points."fedala_lab.algorithms"] mine = "my_package.methods"``; the value may also name a
  function, ``"my_package.methods:register"``, which is called), the convention of pytest and flake8 plugins;
- ``$FEDALA_LAB_PLUGINS``: comma-separated module names;
- ``--plugin MODULE`` on the command line, or :func:`load_plugins` in code.

The last two take a module from the current folder or the import path. The current folder is searched for
the named module only, never put on ``sys.path``: a ``./yaml.py`` beside it is not imported in place of the
installed yaml, in this process or in its workers.

Entry points and ``$FEDALA_LAB_PLUGINS`` load once per process, the first time an algorithm name is looked
up. Processes that run a sweep's grid points import :func:`plugin_modules` first — the modules loaded here and
those that define a registered algorithm — so a method registered in an importable module runs there too. A
method defined in ``__main__`` (a script run directly, a notebook) cannot be imported by another process:
:func:`check_importable` refuses it with the way out, before anything starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable
from importlib.machinery import PathFinder
from pathlib import Path

from ..errors import ConfigError, FedalaError

GROUP = "fedala_lab.algorithms"
ENV = "FEDALA_LAB_PLUGINS"

_LOADED: dict[str, str] = {}  # module name -> the sys.path folder it was imported from ("" if unknown)
_AUTO = {"state": "pending"}  # pending -> loading -> done


def _root_of(module) -> str:
    """The sys.path folder a module was imported from (a worker adds it to its own path)."""
    f = getattr(module, "__file__", None)
    if not f:
        return ""
    p = Path(f).resolve()
    depth = module.__name__.count(".") + (1 if p.name == "__init__.py" else 0)
    return str(p.parents[depth])


def env_modules(*, strict: bool = True) -> list[str]:
    """The module names ``$FEDALA_LAB_PLUGINS`` lists (comma-separated); a malformed value is refused, or with
    ``strict=False`` gives none: loading happens at the first name looked up, which may be while a module is
    imported (no place for an error), and the command line and the app refuse the value before any work, the
    registry when a name is not found (:func:`env_problem`)."""
    raw = os.environ.get(ENV, "")
    names = [m.strip() for m in raw.split(",") if m.strip()]
    if not all(part.isidentifier() for m in names for part in m.split(".")):
        if not strict:
            return []
        raise ConfigError(ENV, raw, "comma-separated importable module names, e.g. my_methods,lab.fednova")
    return names


def env_problem() -> str:
    """Why ``$FEDALA_LAB_PLUGINS`` was not loaded ("" when it is well formed), for a message about a name not
    found."""
    try:
        env_modules()
    except ConfigError as err:
        return f"{err}; its modules were not loaded"
    return ""


def load_plugins(modules: Iterable[str] | str = (), *, paths: Iterable[str] = ()) -> list[str]:
    """Import each module of ``modules`` (a name, or a list of names; registering its algorithms) and remember
    it for worker processes. ``paths``: folders a module is looked for in first (where a worker finds the
    caller's modules, the current folder for ``--plugin``); only the named module comes from there — the
    folders are not put on ``sys.path``, so a file there never shadows an installed module (a ``./yaml.py``).
    A module that cannot be imported raises :class:`ConfigError` naming it and the reason."""
    if isinstance(modules, str):  # one name, not its letters
        modules = [modules]
    try:
        modules, paths = list(modules), [str(p) for p in paths if p]
    except TypeError:
        raise ConfigError("plugins", modules, "a module name or a list of module names, e.g. ['my_methods']") from None
    done = []
    for name in modules:
        if not isinstance(name, str):
            raise ConfigError("plugin", name, "an importable module name (a string), e.g. my_methods or lab.fednova")
        name = name.strip()
        if not name:
            continue
        if not all(part.isidentifier() for part in name.split(".")):
            raise ConfigError("plugin", name, "an importable module name, e.g. my_methods or lab.fednova")
        try:
            module = _import(name, paths)
        except ConfigError:
            raise
        except (Exception, SystemExit) as err:  # noqa: BLE001 - whatever a plugin's import raises, named in one line
            raise ConfigError("plugin", name, _where(paths), _why(err)) from None
        _LOADED.setdefault(name, _root_of(module))
        done.append(name)
    return done


def _import(name: str, folders: list[str]):
    """Import the module ``name``, its top-level package or module taken from the first of ``folders`` that
    holds it, else from ``sys.path`` as usual. The folders stay off ``sys.path``: a package's submodules are
    found through the package itself."""
    top = name.split(".")[0]
    if top not in sys.modules:
        for folder in folders:
            spec = PathFinder.find_spec(top, [folder])
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[top] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(top, None)  # as Python's own import leaves a failed module
                    raise
                break
    return importlib.import_module(name)


def _where(folders: list[str]) -> str:
    """Where a plugin is looked for, in a message."""
    return "a module " + "".join(f"in {f} or " for f in folders) + "on the import path (PYTHONPATH, installed packages)"


def _why(err: BaseException) -> str:
    """What a plugin's import did instead of registering, in one line."""
    if isinstance(err, SystemExit):
        return f"importing it called sys.exit({err.code!r})"
    return f"importing it raised {type(err).__name__}: {' '.join(str(err).split())}"


def autoload() -> None:
    """Load the entry points of :data:`GROUP` and ``$FEDALA_LAB_PLUGINS`` once per process (the registry calls
    this before it looks a name up). A plugin that fails to load is skipped with a warning naming it."""
    if _AUTO["state"] != "pending" or not _package_ready():
        return
    _AUTO["state"] = "loading"
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group=GROUP):
            try:
                obj = ep.load()
                if callable(obj) and not isinstance(obj, type(sys)):
                    obj()
                module = ep.value.split(":")[0].strip()
                _LOADED.setdefault(module, _root_of(sys.modules[module]) if module in sys.modules else "")
            except (Exception, SystemExit) as err:  # noqa: BLE001 - one broken plugin must not take the others down
                warnings.warn(f"plugin {ep.name} ({ep.value}, entry point group {GROUP}) was not loaded: "
                              f"{_why(err)}", stacklevel=2)
        for name in env_modules(strict=False):
            try:
                load_plugins([name], paths=[os.getcwd()])  # as documented: the current folder too
            except ConfigError as err:
                warnings.warn(f"${ENV}: {err}", stacklevel=2)
    finally:
        _AUTO["state"] = "done"


def _package_ready() -> bool:
    """Whether ``import fedala_lab`` has finished (a plugin imports it: never load one halfway through)."""
    pkg = sys.modules.get("fedala_lab")
    return pkg is not None and hasattr(pkg, "__all__")


def plugin_modules(specs: Iterable) -> list[tuple[str, str]]:
    """(module, sys.path folder) of every module a worker process must import before it runs a grid point:
    the plugins loaded here and the modules defining the algorithms of ``specs`` (the registry's) that are not
    fedala_lab's own (``__main__`` excluded: see :func:`check_importable`)."""
    out = dict(_LOADED)
    for spec in specs:
        mod = getattr(spec.build, "__module__", None) or ""
        if mod and mod != "__main__" and not mod.startswith("fedala_lab") and mod in sys.modules:
            out.setdefault(mod, _root_of(sys.modules[mod]))
    return list(out.items())


def run_specs(cfgs: Iterable) -> list:
    """The base specs of the algorithms the run configs ``cfgs`` run, each once: what workers computing them must
    import (:func:`plugin_modules`) and may refuse (:func:`check_importable`), not every algorithm registered."""
    return list({c.algorithm.base.name: c.algorithm.base for c in cfgs}.values())


def check_importable(specs: Iterable, where: str) -> None:
    """Refuse, in one line, an algorithm of ``specs`` that other processes cannot import (defined in
    ``__main__``) for a path that needs them (``where``: e.g. "a sweep with 2 worker processes")."""
    for spec in specs:
        if getattr(spec.build, "__module__", None) == "__main__":
            raise FedalaError(f"{where} cannot run {spec.name}: it is defined in __main__ (your script or notebook), "
                              "which other processes cannot import; move its class and register_algorithm call "
                              f"into a module (e.g. my_methods.py) and import that, or pass --plugin my_methods "
                              f"or set {ENV}=my_methods")


__all__ = ["ENV", "GROUP", "autoload", "check_importable", "env_modules", "env_problem", "load_plugins",
           "plugin_modules", "run_specs"]
