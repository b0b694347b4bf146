"""A sound run key, by a generated set of edits (docs/design.md#run-identity).

A researcher's plugin of several modules — a package ``fedmy`` (the method, helpers, constants, a helper of a
helper, a module nothing imports), a sibling module ``helpers`` beside it, a custom model — is stored once. Then
each kind of edit below is made to the files (one value changed), the modules are imported afresh (as a new
process or a kernel restart would), and the run is asked for again: it must be recomputed (a new key, never the
stored run) and equal the run computed with ``cache="off"``. Code defined in ``__main__`` (a notebook's cells)
is edited the same way. Unedited code is served (the key is not random).
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import warnings

import pytest
import torch

import fedala_lab as fl
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore

BASE = {  # every value 1.0 leaves the method FedAvg-like with a server step of 0.9
    "util_f": 1.0, "util_scale": 1.0, "deep_g": 1.0, "consts_x": 1.0, "table_a": 1.0, "step": 1.0, "step2": 1.0,
    "comp_helper": 1.0, "same_helper": 1.0, "list0": 1.0, "dict_k": 1.0, "class_attr": 1.0, "lam": 1.0,
    "nested": 1.0, "helpers_h": 1.0, "aggregate": 0.9, "param_default": 1.0, "other": 1.0,
    "model_util": 1.0, "model_local": 1.0, "model_class_attr": 1.0, "model_init": 1.0, "model_deep": 1.0,
}
# the kind of edit -> the value it changes (to 0.6); "model" kinds run FedAvg on fedmy's model
EDITS = {
    "helper in another module of the package (from fedmy.util import f)": "util_f",
    "helper in another module, called as util.scale()": "util_scale",
    "helper of a helper, in a third module": "deep_g",
    "constant of another module, read as consts.X": "consts_x",
    "dict constant of another module (consts.TABLE)": "table_a",
    "float constant of the same module": "step",
    "float constant of the same module, read only inside a dict comprehension": "step2",
    "helper of the same module, called inside a dict comprehension": "comp_helper",
    "helper of the same module, outside a comprehension": "same_helper",
    "list constant of the same module": "list0",
    "dict constant of the same module": "dict_k",
    "class attribute": "class_attr",
    "lambda inside the hook": "lam",
    "nested function inside the hook": "nested",
    "sibling module on the path, imported inside a function": "helpers_h",
    "the hook itself (aggregate)": "aggregate",
    "a Param's default": "param_default",
    "a module of the package nothing imports (hashed too: sound before precise)": "other",
    "model: forward calls a helper in another module": "model_util",
    "model: forward calls a helper of its own module": "model_local",
    "model: helper of a helper, in a third module": "model_deep",
    "model: class attribute": "model_class_attr",
    "model: an attribute set in __init__ (not a weight)": "model_init",
}

FILES = {
    "fedmy/__init__.py": "",
    "fedmy/consts.py": """
        X = {consts_x}
        TABLE = {{"a": {table_a}, "b": 2.0}}
    """,
    "fedmy/deep.py": """
        def g():
            return {deep_g}


        def model_deep():
            return {model_deep}
    """,
    "fedmy/util.py": """
        from fedmy import deep


        def f(x):
            return x * {util_f} * deep.g()


        def scale():
            return {util_scale}


        def model_scale():
            return {model_util} * deep.model_deep()
    """,
    "fedmy/other.py": """
        VALUE = {other}
    """,
    "helpers.py": """
        def h():
            return {helpers_h}
    """,
    "fedmy/method.py": """
        import fedala_lab as fl

        from fedmy import consts, util
        from fedmy.util import f

        STEP = {step}
        LIST = [{list0}, 1.0]
        DICT = {{"k": {dict_k}}}


        def same_helper(x):
            return x * {same_helper}


        def comp_helper(x):
            return x * {comp_helper}


        class Mixing(fl.Algorithm):
            BOOST = {class_attr}

            def aggregate(self, rnd, senders):
                mean = rnd.weighted_mean(senders)
                inner = lambda v: v * {lam}  # noqa: E731

                def nested(v):
                    return v * {nested}

                def local_import():
                    import helpers

                    return helpers.h()

                factor = (f(1.0) * util.scale() * consts.X * consts.TABLE["a"] * same_helper(1.0) * STEP * LIST[0]
                          * DICT["k"] * self.BOOST * inner(1.0) * nested(1.0) * local_import() * self.cfg.mix_w
                          * {aggregate})
                factors = {{n: comp_helper(factor) * STEP2 for n in rnd.global_params}}
                return fl.Aggregated({{n: g + factors[n] * (mean.params[n] - g)
                                      for n, g in rnd.global_params.items()}}, mean.bytes)


        STEP2 = {step2}
        fl.register_algorithm("fedmy-mix", Mixing, params=[
            fl.Param("mix_w", {param_default}, fl.Float(0, 1), "the server step's weight")])
    """,
    "fedmy/model.py": """
        import torch

        from fedmy import util


        def own_helper():
            return {model_local}


        class Net(torch.nn.Module):
            SHIFT = {model_class_attr}

            def __init__(self, scale={model_init}):
                super().__init__()
                self.lin = torch.nn.Linear(64, 10)
                self.scale = scale

            def forward(self, x):
                return self.lin(x.flatten(1) * self.scale * util.model_scale() * own_helper() * self.SHIFT)
    """,
}


def _cfg(algo: str) -> fl.RunConfig:
    return fl.preset("teach-digits", algo=algo, num_clients=4, rounds=3)


class Plugin:
    """The plugin's files in a folder on sys.path; :meth:`load` writes them with some values and imports them
    afresh (nothing of the earlier import is kept, as in a new process)."""

    def __init__(self, root):
        self.root = root

    def load(self, values: dict):
        for rel, text in FILES.items():
            f = self.root / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(textwrap.dedent(text).format(**values))
        shutil.rmtree(self.root / "fedmy" / "__pycache__", ignore_errors=True)
        for name in [m for m in sys.modules if m in ("fedmy", "helpers") or m.startswith("fedmy.")]:
            del sys.modules[name]
        import importlib

        importlib.invalidate_caches()
        method = importlib.import_module("fedmy.method")
        model = importlib.import_module("fedmy.model")
        return method, model

    def run(self, kind: str, store, cache: str = "use"):
        _, model = sys.modules["fedmy.method"], sys.modules["fedmy.model"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "model":
                torch.manual_seed(0)
                return get_or_run(_cfg("fedavg"), store, model=model.Net(), progress=False, cache=cache)
            return get_or_run(_cfg("fedmy-mix"), store, progress=False, cache=cache)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # an edit within the same second must never load an old .pyc
    sys.path.insert(0, str(root))
    try:
        yield Plugin(root)
    finally:
        sys.path.remove(str(root))
        sys.dont_write_bytecode = dont_write
        for name in [m for m in sys.modules if m in ("fedmy", "helpers") or m.startswith("fedmy.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def stored(plugin, tmp_path_factory):
    """The store holding the unedited plugin's runs (the method's and the model's)."""
    store = RunStore(tmp_path_factory.mktemp("store"))
    plugin.load(BASE)
    return store, {kind: plugin.run(kind, store) for kind in ("method", "model")}


@pytest.mark.parametrize("edit", list(EDITS))
def test_every_edit_is_recomputed_and_equals_an_uncached_run(edit, plugin, stored):
    store, before = stored
    kind = "model" if edit.startswith("model:") else "method"
    plugin.load({**BASE, EDITS[edit]: 0.6})
    got = plugin.run(kind, store)
    assert not got.served and got.path != before[kind].path, f"{edit}: the stored run was served"
    fresh = plugin.run(kind, None, cache="off")
    assert got.rounds["acc"].tolist() == fresh.rounds["acc"].tolist()
    if EDITS[edit] != "other":  # every other edit changes what is computed: the old run would have been stale
        assert got.rounds["acc"].tolist() != before[kind].rounds["acc"].tolist(), f"{edit} changed nothing"


def test_unedited_code_is_served(plugin, stored):
    store, before = stored
    plugin.load(BASE)
    for kind in ("method", "model"):
        again = plugin.run(kind, store)
        assert again.served and again.path == before[kind].path


NOTEBOOK = """
import fedala_lab as fl

W = {w}
SCALES = {{"s": {s}}}


def helper(v):
    return v * {k}


class Cell(fl.Algorithm):
    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        steps = {{n: helper(W) * SCALES["s"] for n in rnd.global_params}}
        return fl.Aggregated({{n: g + steps[n] * (mean.params[n] - g) for n, g in rnd.global_params.items()}},
                             mean.bytes)
"""


@pytest.mark.parametrize("edit", ["w", "s", "k", None])
def test_notebook_cells_run_again_with_an_edit(edit, tmp_path):
    """Code in ``__main__`` (a notebook's cells run again): hashed by what its code reaches, comprehensions
    included."""
    store = RunStore(tmp_path)

    def cell(values):
        ns = {"__name__": "__main__"}
        exec(compile(NOTEBOOK.format(**values), "<cell>", "exec"), ns)  # noqa: S102 - the test's own code
        fl.register_algorithm("notebook-cell", ns["Cell"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return get_or_run(_cfg("notebook-cell"), store, progress=False)

    base = {"w": 0.9, "s": 1.0, "k": 1.0}
    first = cell(base)
    second = cell({**base, edit: 0.5} if edit else base)
    assert second.served is (edit is None)
    assert (second.rounds["acc"].tolist() == first.rounds["acc"].tolist()) is (edit is None)
