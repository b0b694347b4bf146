"""Algorithms from other modules and packages: plugins (docs/extending.md#plugins).

A module that registers algorithms when it is imported (``register_algorithm`` at its top level) is a plugin.
Three ways to load one, each usable wherever a built-in algorithm is — this process, sweep workers (process
pool, Ray), the command line, the app:

- an installed package's entry point in the group ``fedala_lab.algorithms`` (pyproject.toml:
  ``[project.entry-points."fedala_lab.algorithms"] mine = "my_package.methods"``; the value may also name a
  function, ``"my_package.methods:register"``, which is called), the convention of pytest and flake8 plugins;
- ``$FEDALA_LAB_PLUGINS``: comma-separated module names;
- ``--plugin MODULE`` on the command line, or :func:`load_plugins` in code.

Entry points and ``$FEDALA_LAB_PLUGINS`` load once per process, the first time an algorithm name is looked
up. Processes that run a sweep's grid points import :func:`plugin_modules` first — the modules loaded here and
those that define a registered algorithm — so a method registered in an importable module runs there too. A
method defined in ``__main__`` (a script run directly, a notebook) cannot be imported by another process:
:func:`check_importable` refuses it with the way out, before anything starts.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Iterable
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


def env_modules() -> list[str]:
    """The module names ``$FEDALA_LAB_PLUGINS`` lists (comma-separated); a malformed entry is refused."""
    raw = os.environ.get(ENV, "")
    names = [m.strip() for m in raw.split(",") if m.strip()]
    for m in names:
        if not all(part.isidentifier() for part in m.split(".")):
            raise ConfigError(ENV, raw, "comma-separated importable module names, e.g. my_methods,lab.fednova")
    return names


def load_plugins(modules: Iterable[str] = (), *, paths: Iterable[str] = ()) -> list[str]:
    """Import each module of ``modules`` (registering its algorithms) and remember it for worker processes.
    ``paths``: folders added to ``sys.path`` first (where a worker finds the caller's modules). A module that
    cannot be imported raises :class:`ConfigError` naming it and the reason."""
    for p in paths:
        if p and p not in sys.path:
            sys.path.insert(0, p)
    done = []
    for name in modules:
        name = name.strip()
        if not name:
            continue
        if not all(part.isidentifier() for part in name.split(".")):
            raise ConfigError("plugin", name, "an importable module name, e.g. my_methods or lab.fednova")
        try:
            module = importlib.import_module(name)
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever a plugin's import raises, named in one line
            raise ConfigError("plugin", name, "an importable module (its folder on PYTHONPATH, or the current "
                              "folder)", f"importing it raised {type(err).__name__}: {err}") from None
        _LOADED.setdefault(name, _root_of(module))
        done.append(name)
    return done


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
            except Exception as err:  # noqa: BLE001 - one broken plugin must not take the others down
                warnings.warn(f"plugin {ep.name} ({ep.value}, entry point group {GROUP}) was not loaded: "
                              f"{type(err).__name__}: {err}", stacklevel=2)
        for name in env_modules():
            try:
                load_plugins([name])
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


def check_importable(specs: Iterable, where: str) -> None:
    """Refuse, in one line, an algorithm of ``specs`` that other processes cannot import (defined in
    ``__main__``) for a path that needs them (``where``: e.g. "a sweep with 2 worker processes")."""
    for spec in specs:
        if getattr(spec.build, "__module__", None) == "__main__":
            raise FedalaError(f"{where} cannot run {spec.name}: it is defined in __main__ (your script or notebook), "
                              "which other processes cannot import; move its class and register_algorithm call "
                              f"into a module (e.g. my_methods.py) and import that, or pass --plugin my_methods "
                              f"or set {ENV}=my_methods")


__all__ = ["ENV", "GROUP", "autoload", "check_importable", "env_modules", "load_plugins", "plugin_modules"]
