"""The package's layers, read from its own imports (docs/design.md#layers).

Every module of fedala_lab stands on a floor (:data:`LAYERS`: the longest matching module prefix names its
floor and its unit). A module imports from its own unit, from lower floors, and from another unit of its
own floor only where :data:`SIDEWAYS` says so; never from a floor above. No modules import each other in a
circle. Imports are read with ``ast``: at the top and inside functions, absolute and relative, and
``importlib.import_module`` / ``__import__`` of a literal name (any other name is refused: it would hide a
dependency). No module takes another module's underscore-private names.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedala_lab"

# The architecture, bottom up: module prefix -> floor.
LAYERS = {
    # 1: what everything may name: errors, declared parameters (a setting's default, range and meaning), the
    # environment variables, the version
    "fedala_lab.errors": 1,
    "fedala_lab.params": 1,
    "fedala_lab.environ": 1,
    "fedala_lab._version": 1,
    "fedala_lab.fingerprint": 1,
    "fedala_lab.progress": 1,  # progress bars (tqdm's) that a notebook keeps as they ended
    "fedala_lab.numerics": 1,  # which CPU kernels compute (torch imported only inside its functions)  # what names code in a run key: reads files and code objects, imports no module of ours
    # 2: data (with its config) and models; and compute/, the primitives the algorithms build on (derived random
    # generators, batch plans, the per-client step functions and the backends that run them over clients)
    "fedala_lab.data": 2,
    "fedala_lab.models": 2,
    "fedala_lab.compute": 2,
    # 3: the algorithms: the round interface, one module per paper, the registry of their specs
    "fedala_lab.algorithms": 3,
    # 4: the run's config, which names an algorithm from the registry and checks its hyper-parameters
    "fedala_lab.config": 4,
    # 5: the federated loop, and beside it the record of a run and the run store (which keeps runs and never
    # makes them: record imports no engine)
    "fedala_lab.engine": 5,
    "fedala_lab.record": 5,
    # 6: which runs (presets, plans, sweeps) and how to get them (get_or_run, the sweep executors)
    "fedala_lab.experiments": 6,
    # 7: analysis of recorded runs, compute only
    "fedala_lab.analysis": 7,
    # 8: Displays, draw only
    "fedala_lab.figures": 8,
    # 9: the driver: plans → runs → analysis → Displays → files and their index
    "fedala_lab.reproduce": 9,
    # 10: the faces: the command line and the lecture app
    "fedala_lab.cli": 10,
    "fedala_lab.webapp": 10,
    "fedala_lab.flower": 10,  # fedala_lab as a Flower app: runs the engine's pieces split, a face like the CLI
    # 11: the package root, which hands on the few names a user starts from
    "fedala_lab": 11,
}

# Imports between two units of one floor: (importer's unit, imported unit) -> why.
SIDEWAYS = {
    ("fedala_lab.params", "fedala_lab.errors"): "a bad setting is a ConfigError",
    ("fedala_lab.environ", "fedala_lab.errors"): "a bad environment variable is a ConfigError",
    ("fedala_lab.numerics", "fedala_lab.errors"): "a numerics mode that cannot hold is a ConfigError",
    ("fedala_lab.engine", "fedala_lab.record"): "a simulation returns a Run",
    ("fedala_lab.cli", "fedala_lab.webapp"): "`fedala-lab app` starts the app",
}

def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _unit(module: str) -> str:
    return max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default="")


def _floor(module: str) -> int | None:
    unit = _unit(module)
    return LAYERS[unit] if unit else None


def _is_package(module: str) -> bool:
    return _modules()[module].name == "__init__.py"


def _known(name: str) -> str:
    """``name`` if it is a module of the package, else its longest prefix that is."""
    while name not in _modules() and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _resolve(module: str, target: str, level: int) -> str:
    """The absolute name of ``from <level dots><target>`` written in ``module``."""
    if level == 0:
        return target
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


@cache
def _imports() -> dict[str, tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]]:
    """module -> (the package modules it imports, dynamic imports it cannot be read from, private names it
    takes from other modules)."""
    out = {}
    for module, path in _modules().items():
        edges, dynamic, private = set(), [], []
        aliases = {}  # local name -> package module bound to it
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "fedala_lab":
                        edges.add(_known(a.name))
                        aliases[a.asname or a.name.split(".")[0]] = _known(a.name if a.asname else "fedala_lab")
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node.module or "", node.level)
                if target.split(".")[0] != "fedala_lab":
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in _modules():  # a module: `from . import ala`
                        edges.add(sub)
                        aliases[a.asname or a.name] = sub
                    else:
                        edges.add(_known(target))
                        if a.name.startswith("_") and not a.name.startswith("__") and _known(target) != module:
                            private.append(f"from {target} import {a.name}")
            elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    name = arg.value
                    if name.startswith("."):
                        dots = len(name) - len(name.lstrip("."))
                        name = _resolve(module, name[dots:], dots)
                    if name.split(".")[0] == "fedala_lab":
                        edges.add(_known(name))
                else:
                    dynamic.append(f"line {node.lineno}: {ast.unparse(node)}")
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.append(f"{node.value.id}.{node.attr} ({aliases[node.value.id]})")
        edges.discard(module)
        out[module] = (frozenset(edges), tuple(dynamic), tuple(private))
    return out


def _is_dynamic_import(func) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("import_module", "__import__")


def _circles() -> list[frozenset[str]]:
    """The strongly connected components of the import graph with more than one module (Tarjan)."""
    graph = {m: edges for m, (edges, _, _) in _imports().items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_floor():
    assert len(_modules()) > 40  # the walk found the package
    assert [m for m in _modules() if _floor(m) is None] == []


def test_no_import_reaches_up_or_sideways():
    wrong = []
    for module, (edges, _, _) in sorted(_imports().items()):
        for target in sorted(edges):
            src, dst = _unit(module), _unit(target)
            if LAYERS[dst] > LAYERS[src]:
                wrong.append(f"{module} (floor {LAYERS[src]}) imports {target} (floor {LAYERS[dst]})")
            elif LAYERS[dst] == LAYERS[src] and src != dst and (src, dst) not in SIDEWAYS:
                wrong.append(f"{module} imports {target}: another unit of floor {LAYERS[src]}")
    assert wrong == []


def test_record_analysis_and_figures_never_run_anything():
    """The store keeps runs; analysis computes and figures draw from runs they are given."""
    reach = {"fedala_lab.record": ("fedala_lab.engine",),
             "fedala_lab.analysis": ("fedala_lab.engine", "fedala_lab.record.store", "fedala_lab.experiments"),
             "fedala_lab.figures": ("fedala_lab.engine", "fedala_lab.record.store", "fedala_lab.experiments")}
    wrong = [f"{m} imports {t}" for m, (edges, _, _) in sorted(_imports().items()) for t in sorted(edges)
             for unit, banned in reach.items() if _unit(m) == unit and t.startswith(banned)]
    assert wrong == []


# Modules that import by a name known only at run time, and why that hides no dependency of the package.
DYNAMIC = {
    "fedala_lab.algorithms.plugins": "imports the user's plugin modules (--plugin, $FEDALA_LAB_PLUGINS): "
                                     "outside the package",
    "fedala_lab.fingerprint": "loads a module of the user's that their code imports inside a function, to hash it "
                              "(a run key): outside the package",
}


def test_every_import_can_be_read():
    assert {m: d for m, (_, d, _) in _imports().items() if d and m not in DYNAMIC} == {}
    assert all(_imports()[m][1] for m in DYNAMIC)  # an exemption that is no longer needed goes


def test_no_module_takes_another_modules_private_names():
    assert {m: p for m, (_, _, p) in _imports().items() if p} == {}


def test_no_circles_outside_the_algorithms():
    assert [sorted(c) for c in _circles()] == []
