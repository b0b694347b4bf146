"""Fingerprints of code: what, besides the config and the data, names a run (docs/design.md#run-identity).

- :func:`package_fingerprint`: fedala_lab's own computing code (:data:`COMPUTING`), the embedded data file, and
  the versions of Python, torch and numpy. Python files are hashed as their syntax tree without docstrings, so
  an edit to a comment or a docstring keeps every stored run, and any edit to what runs does not.
- :func:`code_fingerprint`: a user's class or function (a registered algorithm, a custom model): the bytecode
  and constants of every method along its MRO outside fedala_lab and torch, the simple values (numbers,
  strings) those methods read from their module's globals, and the functions and classes of the same module
  that they call — recursively. Hashed at every call, never cached on the object: an edited and re-registered
  class, or a method replaced on the class, gives a new fingerprint.

Both are independent of ``PYTHONHASHSEED`` (sets are hashed sorted), so every process computes the same value.
What is not covered: values read from other modules' globals or from files at run time, and C extensions.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import hashlib
import sys
import types
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parent
# What computes a run: the algorithms, their numerical kernels, the data and how it is split, the round loop,
# what a run records, the models, the settings, and which stored runs a run may continue. The faces (CLI,
# app, figures, analysis, Flower's transport) and the experiment plans (which configs exist) are not.
COMPUTING = ("algorithms", "compute", "data", "engine", "record", "models.py", "config.py", "params.py",
             "experiments/prefix.py")
# Modules whose code the package fingerprint (or a library version) already covers.
_COVERED = ("fedala_lab", "torch", "numpy", "builtins", "abc", "typing", "dataclasses", "collections",
            "functools", "enum")


def _files() -> list[Path]:
    out = []
    for name in COMPUTING:
        p = _ROOT / name
        out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".py", ".npz")) if p.is_dir()
                   else [p])
    return out


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _source_digest(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix != ".py":
        return data
    try:
        tree = _strip_docstrings(ast.parse(data, filename=str(path)))
    except SyntaxError:
        return data
    return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()


@functools.lru_cache(maxsize=1)
def package_fingerprint() -> str:
    """16 hex digits naming fedala_lab's computing code as this process runs it (computed once per process:
    an edit to the files takes effect, as code does, in the next process) and the library versions."""
    import numpy
    import torch

    h = hashlib.sha256()
    h.update(f"python {sys.version_info[0]}.{sys.version_info[1]}|torch {torch.__version__}|"
             f"numpy {numpy.__version__}|".encode())
    for f in _files():
        h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(_source_digest(f)).digest())
    return h.hexdigest()[:16]


# Content hashes taken within one call that gets a run: (id, kind) -> (the object, kept alive so its id is not
# reused; its hash). None outside such a call.
_ONE_CALL: contextvars.ContextVar[dict | None] = contextvars.ContextVar("fedala_lab_one_call", default=None)


@contextlib.contextmanager
def hashed_once_per_call():
    """Within this block, :func:`content_hash` hashes each object once: a call that gets a run binds its data and
    model at several layers (the run cache, get_or_run, the simulation), and nothing edits them in between. A
    block inside another uses the outer one's hashes; each new call hashes afresh (an edit between calls
    counts)."""
    if _ONE_CALL.get() is not None:
        yield
        return
    token = _ONE_CALL.set({})
    try:
        yield
    finally:
        _ONE_CALL.reset(token)


def content_hash(obj, kind: str, compute: Callable[[], str]) -> str:
    """``compute()``, the content hash of ``obj``, taken once per :func:`hashed_once_per_call` block."""
    memo = _ONE_CALL.get()
    if memo is None:
        return compute()
    hit = memo.get((id(obj), kind))
    if hit is None:
        hit = memo[id(obj), kind] = (obj, compute())
    return hit[1]


def _covered(obj) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod.split(".")[0] in _COVERED


def _const(h, value, seen) -> None:
    if isinstance(value, types.CodeType):
        _code(h, value, None, seen)
    elif isinstance(value, (frozenset, set)):
        h.update(b"{")
        for r in sorted(repr(v) for v in value):
            h.update(r.encode() + b",")
        h.update(b"}")
    elif isinstance(value, tuple):
        h.update(b"(")
        for v in value:
            _const(h, v, seen)
        h.update(b")")
    else:
        h.update(f"{type(value).__name__}:{value!r}|".encode())


_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def _code(h, code: types.CodeType, glb: dict | None, seen: set) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        _const(h, c, seen)
    if glb is None:
        return
    for name in code.co_names:  # what the code reads from its module: simple values, same-module code
        if name not in glb:
            continue
        v = glb[name]
        if isinstance(v, _SIMPLE) or (isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v)):
            h.update(f"{name}={v!r}|".encode())
        elif isinstance(v, (types.FunctionType, type)) and not _covered(v) \
                and getattr(v, "__module__", None) == glb.get("__name__"):
            _object(h, v, seen)


def _function(h, fn, seen: set) -> None:
    fn = getattr(fn, "__func__", fn)
    fn = getattr(fn, "__wrapped__", fn)
    if not isinstance(fn, types.FunctionType):
        h.update(f"<{type(fn).__name__}>".encode())
        return
    _code(h, fn.__code__, fn.__globals__, seen)
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(v, _SIMPLE):
            h.update(f"cell={v!r}|".encode())
        elif isinstance(v, (types.FunctionType, type)) and not _covered(v):
            _object(h, v, seen)
    if fn.__defaults__:
        _const(h, tuple(repr(d) for d in fn.__defaults__), seen)


def _member(h, value, seen: set) -> None:
    if isinstance(value, (staticmethod, classmethod)):
        _function(h, value.__func__, seen)
    elif isinstance(value, property):
        for f in (value.fget, value.fset, value.fdel):
            if f is not None:
                _function(h, f, seen)
    elif isinstance(value, types.FunctionType):
        _function(h, value, seen)
    elif isinstance(value, type):
        if not _covered(value):
            _object(h, value, seen)
    elif isinstance(value, (_SIMPLE, tuple, frozenset)):
        _const(h, value, seen)
    else:
        h.update(f"<{type(value).__name__}>".encode())


_SKIP = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
         "__dataclass_fields__", "__dataclass_params__", "__match_args__", "__firstlineno__",
         "__static_attributes__", "__parameters__", "__orig_bases__", "__abstractmethods__", "_abc_impl"}


def _object(h, obj, seen: set) -> None:
    if id(obj) in seen:
        h.update(f"<seen {getattr(obj, '__qualname__', '')}>".encode())
        return
    seen.add(id(obj))
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if klass is object or _covered(klass):
                h.update(f"<base {klass.__module__}.{klass.__qualname__}>".encode())
                continue
            h.update(f"class {klass.__qualname__}|".encode())
            for name in sorted(vars(klass)):
                if name not in _SKIP:
                    h.update(name.encode() + b"=")
                    _member(h, vars(klass)[name], seen)
    else:
        _function(h, obj, seen)


def code_fingerprint(obj) -> str:
    """16 hex digits naming the code of a class or function defined outside fedala_lab (see the module's
    docstring); "" for fedala_lab's own (its package fingerprint covers it) or for what is not code."""
    obj = getattr(obj, "__func__", obj)
    h = hashlib.sha256()
    if isinstance(obj, functools.partial):
        inner = code_fingerprint(obj.func)
        if not inner and not obj.args and not obj.keywords:
            return ""
        h.update(inner.encode())
        _const(h, tuple(repr(a) for a in obj.args), set())
        _const(h, tuple(sorted(f"{k}={v!r}" for k, v in obj.keywords.items())), set())
    elif _covered(obj) or not isinstance(obj, (type, types.FunctionType)):
        return ""
    else:
        _object(h, obj, set())
    return h.hexdigest()[:16]


__all__ = ["COMPUTING", "code_fingerprint", "content_hash", "hashed_once_per_call", "package_fingerprint"]
