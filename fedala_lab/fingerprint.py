"""Fingerprints of code: what, besides the config and the data, names a run (docs/design.md#run-identity).

- :func:`package_fingerprint`: fedala_lab's own computing code (:data:`COMPUTING`), the embedded data file, and
  the versions of Python, torch and numpy. Python files are hashed as their syntax tree without docstrings, so
  an edit to a comment or a docstring keeps every stored run, and any edit to what runs does not.
- :func:`code_fingerprint`: a user's class or function (a registered algorithm, a modifier, a custom model's
  classes) and everything its code can reach: nested code, the values and functions its names reach in any
  module, your modules and packages whole, installed packages by version and file record (see its docstring;
  docs/design.md#run-identity says exactly what is and is not hashed). Sound before precise: an edit anywhere
  it could reach is a new key, and so are some edits it could not.

Both are independent of ``PYTHONHASHSEED`` (sets are hashed sorted, objects never named by ``id``), so every
process computes the same value.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import dataclasses
import enum
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
             "numerics.py", "experiments/prefix.py")


def _files() -> list[Path]:
    out = []
    for name in COMPUTING:
        p = _ROOT / name
        out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".py", ".npz")) if p.is_dir() else [p])
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


# ------------------------------------------------------------------------------------------- your code

# Where a module's code comes from decides how it is named (see :func:`code_fingerprint`).
OURS, INSTALLED, USER, MAIN = "ours", "installed", "user", "main"
# module attributes that say where it was loaded from, not what it computes
_MODULE_SKIP = {"__builtins__", "__loader__", "__spec__", "__cached__", "__file__", "__doc__", "__path__",
                "__package__", "__name__", "__annotations__"}
_SKIP = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
         "__dataclass_fields__", "__dataclass_params__", "__match_args__", "__firstlineno__",
         "__static_attributes__", "__parameters__", "__orig_bases__", "__abstractmethods__", "_abc_impl"}
_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """The folders of the standard library and of installed packages (site-packages): what pip or Python put
    there is named by version, not hashed."""
    import site
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(getattr(site, "getsitepackages", list)())
    roots.add(getattr(site, "getusersitepackages", str)())
    return tuple(sorted(str(Path(r).resolve()) + "/" for r in roots if r))


def _where(name: str | None) -> str:
    """Where module ``name``'s code comes from: fedala_lab (:data:`OURS`: its package fingerprint covers it),
    Python or an installed package (:data:`INSTALLED`: named by version and pip's record of its files), your
    files (:data:`USER`: hashed whole), or ``__main__`` and modules without a file (:data:`MAIN`: a script's or a
    notebook's code, hashed by what it reaches)."""
    name = name or ""
    top = name.split(".")[0]
    if top == "fedala_lab":
        return OURS
    if name == "__main__":
        return MAIN
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return INSTALLED
    mod = sys.modules.get(name) or sys.modules.get(top)
    file = getattr(mod, "__file__", None)
    if file:
        return INSTALLED if _installed_file(file) else USER
    paths = [str(p) for p in getattr(mod, "__path__", None) or []]  # a namespace package
    if paths:
        return INSTALLED if all(_installed_file(str(Path(p) / "x")) for p in paths) else USER
    return MAIN


def _installed_file(file: str) -> bool:
    try:
        f = str(Path(file).resolve())
    except OSError:
        return False
    return f.startswith(_installed_roots())


def _version(name: str) -> str:
    """How an installed module is named: for the standard library nothing (Python's version is in every key),
    else its distributions' versions and a digest of pip's record of their files (RECORD: each file's hash),
    so a package reinstalled with other files under the same version is another package."""
    top = name.split(".")[0]
    if not top or top in sys.builtin_module_names or top in sys.stdlib_module_names or top == "fedala_lab":
        return ""
    return _installed_digest(top)


@functools.cache
def _installed_digest(top: str) -> str:
    import importlib.metadata as md

    parts = []
    for dist_name in sorted(_distributions().get(top, ())):
        try:
            dist = md.distribution(dist_name)
            record = dist.read_text("RECORD") or ""
        except (md.PackageNotFoundError, OSError):
            parts.append(dist_name)
            continue
        parts.append(f"{dist_name}=={dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}")
    return ";".join(parts) or str(getattr(sys.modules.get(top), "__version__", ""))


@functools.cache
def _distributions() -> dict:
    import importlib.metadata as md

    return md.packages_distributions()


class _Walk:
    """One hash of everything a piece of your code can reach (see :func:`code_fingerprint`). Objects met twice
    are hashed once and named by the order they were met (never by ``id``: every process must agree)."""

    def __init__(self):
        self.h = hashlib.sha256()
        self.seen: dict[int, tuple[object, int]] = {}  # id -> (object, kept alive; its order)
        self.modules: dict[str, object] = {}  # your modules met, hashed whole at the end
        self.packages: dict[str, list[str]] = {}  # your top-level packages met: their folders
        self.done: set[str] = set()

    def put(self, *parts) -> None:
        for p in parts:
            self.h.update(str(p).encode() + b"\0")

    def first(self, obj) -> bool:
        """Whether ``obj`` is met for the first time (else its order is hashed in its place)."""
        hit = self.seen.get(id(obj))
        if hit is not None:
            self.put("<again>", hit[1])
            return False
        self.seen[id(obj)] = (obj, len(self.seen))
        return True

    # -- values -----------------------------------------------------------------------------------

    def value(self, v) -> None:
        if isinstance(v, _SIMPLE):
            self.put(type(v).__name__, repr(v))
        elif isinstance(v, types.ModuleType):
            self.module_ref(v)
        elif not self.first(v):
            return
        elif isinstance(v, (list, tuple)):
            self.put(type(v).__name__, len(v))
            for x in v:
                self.value(x)
        elif isinstance(v, (set, frozenset)):
            self.put(type(v).__name__, len(v))
            for d in sorted(_alone(x) for x in v):  # an order every process agrees on
                self.put(d)
        elif isinstance(v, dict):
            self.put(type(v).__name__, len(v))
            for k, x in v.items():
                self.value(k)
                self.value(x)
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, type):
            self.klass(v)
        elif isinstance(v, (staticmethod, classmethod)):
            self.put(type(v).__name__)
            self.value(v.__func__)
        elif isinstance(v, property):
            self.put("property")
            for f in (v.fget, v.fset, v.fdel):
                self.value(f)
        elif isinstance(v, functools.partial):
            self.put("partial")
            for part in (v.func, v.args, v.keywords):
                self.value(part)
        elif isinstance(v, types.MethodType):
            self.put("method")
            self.value(v.__func__)
            self.value(v.__self__)
        elif isinstance(v, types.CodeType):
            self.code(v, None)
        elif isinstance(v, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                            types.MethodWrapperType, types.GetSetDescriptorType, types.MemberDescriptorType)):
            self.put("builtin", getattr(v, "__module__", None) or "", getattr(v, "__qualname__", repr(type(v))))
        else:
            self.instance(v)

    def instance(self, v) -> None:
        t = type(v)
        data = _array_bytes(v)
        if data is not None:
            self.put(f"{t.__module__}.{t.__qualname__}", *data[:2])
            self.h.update(hashlib.sha256(data[2]).digest())
            return
        self.value(t)
        if isinstance(v, enum.Enum):
            self.put(v.name)
            return
        if dataclasses.is_dataclass(v) or _where(t.__module__) in (USER, MAIN):
            state = getattr(v, "__dict__", None)
            if state is not None:
                self.value(dict(state))
            for name in _slots(t):
                self.put(name)
                self.value(getattr(v, name, "<unset>"))

    # -- code -------------------------------------------------------------------------------------

    def function(self, fn) -> None:
        where = _where(fn.__module__)
        self.put("function", fn.__module__ if where in (OURS, INSTALLED) else "", fn.__qualname__)
        if where in (OURS, INSTALLED):
            self.put(_version(fn.__module__ or ""))
            return
        if where == USER:
            self.want(fn.__module__)
        self.code(fn.__code__, fn.__globals__)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell
                self.put("<empty cell>")
        self.value(dict(getattr(fn, "__dict__", {})))  # attributes set on it, __wrapped__ among them

    def code(self, co: types.CodeType, glb: dict | None) -> None:
        """The bytecode, names and constants of ``co`` and of the code inside it (comprehensions, lambdas,
        nested functions), and what its names reach in ``glb``, its module's globals."""
        self.h.update(co.co_code)
        self.put(co.co_names, co.co_freevars, co.co_cellvars)
        for c in co.co_consts:
            if isinstance(c, types.CodeType):
                self.code(c, glb)
            else:
                self.value(c)
        if glb is None:
            return
        for name in co.co_names:  # a global, an attribute or an imported module: look each up
            if name in glb:
                self.put("global", name)
                self.value(glb[name])
        for name in _imported(co, glb):  # `import x` inside a function: x as it is loaded, or its file
            mod = sys.modules.get(name)
            if mod is not None:
                self.module_ref(mod)
            else:
                self.unloaded(name)

    def klass(self, k: type) -> None:
        where = _where(k.__module__)
        self.put("class", k.__module__ if where in (OURS, INSTALLED) else "", k.__qualname__)
        if where in (OURS, INSTALLED):
            self.put(_version(k.__module__))
            return
        if where == USER:
            self.want(k.__module__)
        self.value(type(k))  # its metaclass
        for base in k.__bases__:
            self.value(base)
        for name in sorted(vars(k)):
            if name not in _SKIP:
                self.put(name)
                self.value(vars(k)[name])

    # -- modules ----------------------------------------------------------------------------------

    def module_ref(self, m) -> None:
        where = _where(m.__name__)
        self.put("module", m.__name__, _version(m.__name__) if where in (OURS, INSTALLED) else "")
        if where == USER:
            self.want(m.__name__)

    def want(self, name: str) -> None:
        """Module ``name`` (yours) is hashed whole, and every file of its top-level package from disk."""
        if name in self.modules or name not in sys.modules:
            return
        self.modules[name] = sys.modules[name]
        top = sys.modules.get(name.split(".")[0])
        paths = getattr(top, "__path__", None)
        if paths and top.__name__ not in self.packages:
            self.packages[top.__name__] = sorted(str(p) for p in paths)

    def unloaded(self, name: str) -> None:
        """A module your code imports as it runs, not loaded yet. Yours (a file outside site-packages): loaded now,
        so that whether it had been loaded never changes the key (a module that fails to load: its file);
        anything else: by name."""
        import importlib
        import importlib.util

        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
        if not (origin and Path(origin).is_file() and not _installed_file(origin)) or name.startswith("fedala_lab"):
            self.put("import", name)
            return
        try:
            self.module_ref(importlib.import_module(name))
        except Exception:  # noqa: BLE001 - its own import error comes when the code runs; hash what is there
            self.put("file", name)
            self.h.update(hashlib.sha256(_source_digest(Path(origin))).digest())

    def whole(self, name: str, m) -> None:
        """Every function, class and value of your module ``m`` as loaded (a compiled one: its file)."""
        self.put("whole", name)
        file = getattr(m, "__file__", None)
        if file and not file.endswith(".py") and Path(file).is_file():
            self.h.update(hashlib.sha256(Path(file).read_bytes()).digest())
        for key in sorted(vars(m)):
            if key not in _MODULE_SKIP:
                self.put(key)
                self.value(vars(m)[key])

    def package_files(self, top: str, folders: list[str]) -> None:
        """Every Python file of your package ``top`` as it is on disk, loaded or not (what an import by a name
        made at run time would load)."""
        for folder in folders:
            base = Path(folder)
            for f in sorted(base.rglob("*.py")):
                self.put("file", top, f.relative_to(base).as_posix())
                self.h.update(hashlib.sha256(_source_digest(f)).digest())

    def finish(self) -> str:
        while True:
            todo = sorted(set(self.modules) - self.done)
            if not todo:
                break
            for name in todo:
                self.done.add(name)
                self.whole(name, self.modules[name])
        for top in sorted(self.packages):
            self.package_files(top, self.packages[top])
        return self.h.hexdigest()[:16]


def _alone(value) -> str:
    """The hash of one value on its own (a set's member: sets are hashed sorted by it)."""
    w = _Walk()
    w.value(value)
    return w.h.hexdigest()


def _slots(t: type) -> list[str]:
    return [s for k in t.__mro__ for s in getattr(k, "__slots__", ()) if s not in ("__dict__", "__weakref__")]


def _array_bytes(v):
    """(dtype, shape, bytes) of a numpy array or a torch tensor, else None."""
    mod = type(v).__module__.split(".")[0]
    if mod == "numpy" and hasattr(v, "tobytes") and hasattr(v, "dtype") and hasattr(v, "shape"):
        import numpy

        return str(v.dtype), tuple(v.shape), numpy.ascontiguousarray(v).tobytes()
    if mod == "torch" and "torch" in sys.modules and isinstance(v, sys.modules["torch"].Tensor):
        import torch

        t = v.detach().cpu().contiguous()
        return str(t.dtype), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return None


def _imported(co: types.CodeType, glb: dict) -> list[str]:
    """The modules ``co`` imports as it runs (``import x``, ``from . import y`` inside a body), by full name."""
    import dis
    import importlib.util

    out = []
    ins = list(dis.get_instructions(co))
    for i, instr in enumerate(ins):
        if instr.opname != "IMPORT_NAME":
            continue
        level = ins[i - 2].argval if i >= 2 and ins[i - 2].opname == "LOAD_CONST" else 0
        fromlist = ins[i - 1].argval if i >= 1 and ins[i - 1].opname == "LOAD_CONST" else None
        try:
            base = importlib.util.resolve_name("." * level + instr.argval, glb.get("__package__") or "") if level \
                else instr.argval
        except (ImportError, ValueError):
            continue
        out.append(base)
        for sub in fromlist or ():  # `from pkg import mod`: mod may be a module
            if isinstance(sub, str) and sub != "*" and f"{base}.{sub}" in sys.modules:
                out.append(f"{base}.{sub}")
    return out


def code_fingerprint(obj) -> str:
    """16 hex digits naming the code of a class or function of yours (a registered algorithm, a modifier, a
    custom model's class) and everything it can reach, so that an edit anywhere in it is another run; "" for
    fedala_lab's own (its package fingerprint covers them) and for what is not code.

    Hashed: the object (for a class, every class along its MRO that is yours: every member), the bytecode,
    constants and names of all its code including the code nested in it (comprehensions, lambdas, nested
    functions), defaults and closures, and what its names reach, recursively: values by content (numbers,
    strings, containers of them, arrays, tensors, your objects' attributes), functions and classes by their
    code. A module of yours that is reached (a file outside the standard library and site-packages: your
    package, a sibling module) is hashed whole, with every other module of its top-level package, loaded or
    not (those not loaded by their files on disk); ``__main__`` (a script, a notebook) by what the code
    reaches; installed packages and Python's by name and version. Not hashed: the state inside objects of
    installed packages (a generator, a DataFrame: named by type), files your code reads, environment
    variables, and names looked up by a string made at run time in ``__main__``. Computed afresh at every
    call (once per :func:`hashed_once_per_call` block), never cached on the object."""
    obj = getattr(obj, "__func__", obj)
    if isinstance(obj, functools.partial):
        inner = code_fingerprint(obj.func)
        if not inner and not obj.args and not obj.keywords:
            return ""
    elif not isinstance(obj, (type, types.FunctionType)) or _where(obj.__module__) in (OURS, INSTALLED):
        return ""
    return content_hash(obj, "code", lambda: _walk(obj))


def value_fingerprint(value) -> str:
    """16 hex digits of a value as :func:`code_fingerprint` hashes what code reaches (e.g. a model's own
    attributes besides its weights)."""
    return _walk(value)


def _walk(value) -> str:
    w = _Walk()
    w.value(value)
    return w.finish()


__all__ = ["COMPUTING", "code_fingerprint", "content_hash", "hashed_once_per_call", "package_fingerprint",
           "value_fingerprint"]
