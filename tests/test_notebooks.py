"""The lecture notebooks (issue 5): committed clean, shaped for students, and executed headless.

Each notebook in notebooks/ is executed with nbclient on the venv's kernel under ``FEDALA_LAB_SMOKE=1``
(its ``parameters`` cell then picks tiny settings), with runs cached in a temporary store
(``FEDALA_LAB_RUNS``) so nothing is written into the repository. A notebook fails the test when any
cell raises, when it shows no figure, or when an ``interact`` callback (which ipywidgets runs once
with the default values, its output kept in the widget state rather than in the cell) failed or drew
nothing. ``MPLBACKEND`` is removed from the kernel's environment: set to Agg it would leak into the
kernel (the notebooks' ``%matplotlib inline`` guards against that too).

How long they take is measured, not asserted: ``python benchmarks/notebook_times.py`` prints each notebook's
median (about 10 s each in smoke mode on a 2-core CPU, kernel start-up included).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]

EXPECTED = ["01_fedavg", "02_heterogeneity", "03_fedprox", "04_ala_module", "05_update_direction",
            "06_ablations"]
PFL = ["08_pfl_methods"]
HAS_FEDLAMA = (ROOT / "fedala_lab/algorithms/fedlama.py").is_file() and (ROOT / "fedala_lab/figures/fedlama.py").is_file()

CELL_TIMEOUT = 150  # s, one cell (nbclient): a hung cell fails the test rather than the whole suite
SMOKE_MAX_ROUNDS = 6  # the largest ROUNDS any parameters cell picks in smoke mode

# Notebooks call the library; they do not train or draw by themselves.
FORBIDDEN = {
    r"\.backward\(": "a training loop of its own",
    r"torch\.optim": "an optimiser of its own",
    r"matplotlib\.pyplot|\bplt\.": "pyplot drawing of its own (use the Displays in fedala_lab.figures)",
    r"nn\.Module|nn\.Linear": "a model of its own",
}


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_lecture_notebooks_are_there():
    expected = EXPECTED + (["07_fedlama"] if HAS_FEDLAMA else []) + PFL
    assert IDS == expected


def test_readme_lists_every_notebook():
    text = (NB_DIR / "README.md").read_text()
    missing = [name for name in IDS if name not in text]
    assert not missing, f"notebooks/README.md does not mention {missing}"
    assert "make lab" in text and "FEDALA_LAB_SMOKE" in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_without_outputs(path):
    raw = json.loads(path.read_text())
    nb = _read(path)
    nbformat.validate(nb)
    assert raw["nbformat"] == 4
    for i, cell in enumerate(_code(nb)):
        assert cell.outputs == [], f"code cell {i} of {path.name} was committed with outputs"
        assert cell.execution_count is None, f"code cell {i} of {path.name} has an execution count"
    assert "widgets" not in nb.metadata, f"{path.name} carries saved widget state"
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_shape_for_students(path):
    nb = _read(path)
    first, last = nb.cells[0], nb.cells[-1]
    # opens with a title and what the student will learn
    assert first.cell_type == "markdown" and first.source.lstrip().startswith("# ")
    assert "what you will learn" in first.source.lower()
    # ends with two or three questions to try
    assert last.cell_type == "markdown" and "questions to try" in last.source.lower()
    questions = re.findall(r"^\d+\.\s", last.source, flags=re.MULTILINE)
    assert 2 <= len(questions) <= 3, f"{path.name}: {len(questions)} numbered questions"
    # the first code cell is the parameters cell and reads the smoke switch
    code = _code(nb)
    params = code[0]
    assert "parameters" in params.metadata.get("tags", [])
    assert 'SMOKE = os.environ.get("FEDALA_LAB_SMOKE") == "1"' in params.source
    assert "FEDALA_LAB_RUNS" in params.source
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    # sliders, and figures that also render headless
    source = "\n".join(c.source for c in code)
    assert "interact(" in source, f"{path.name} has no slider"
    assert "%matplotlib inline" in source


# Numbers a markdown cell may state: the settings it describes, never a result (results are written by code
# from the values printed above them, so the text agrees with the numbers at any settings). Paragraphs that
# cite a paper (its reported numbers, its arXiv id) are exempt.
SETTING_NUMBERS = {"75 %", "25 %", "0.1", "1.0", "90 %", "50 %", "0 %", "20.0"}
NUMBER = re.compile(r"[−+-]?\d+(?:[.,]\d+)*\s?%|[−+-]?\d+\.\d+")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_prose_states_no_typed_results(path):
    """What a notebook measured is written by a code cell (IPython.display.Markdown) from the numbers it computed;
    a markdown cell carries no result of its own (issue: typed numbers drifted from the printed ones)."""
    nb = _read(path)
    typed = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        assert "What we measured" not in cell.source, f"{path.name}, cell {i}: a typed 'What we measured'"
        for para in re.sub(r"\$[^$]*\$", "", cell.source).split("\n\n"):
            if re.search(r"paper|arXiv", para):
                continue
            typed += [(i, n) for n in NUMBER.findall(para) if n.strip() not in SETTING_NUMBERS]
    assert not typed, f"{path.name}: numbers typed into markdown (compute them in a cell instead): {typed}"
    measured = [c for c in _code(nb) if "What we measured" in c.source]
    assert measured and all("display(Markdown(" in c.source for c in measured), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_only_calls_the_library(path):
    for i, cell in enumerate(_code(_read(path))):
        for pattern, what in FORBIDDEN.items():
            assert not re.search(pattern, cell.source), f"{path.name}, code cell {i}: {what}"


def test_kernel_runs_the_venv_python():
    """``make lab`` starts JupyterLab from the venv: its default kernel must run this Python."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.language == "python"
    cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert Path(cmd[0]).resolve() == Path(sys.executable).resolve()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab: \$\(STAMP\)\n\t\$\(BIN\)/jupyter lab notebooks/?( .*)?$", makefile, flags=re.MULTILINE)


def _widget_outputs(nb) -> list[dict]:
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return [o for m in state.values() if m.get("model_name") == "OutputModel"
            for o in m.get("state", {}).get("outputs", [])]


def _has_image(outputs) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs)


@pytest.fixture(scope="module")
def smoke_store(tmp_path_factory):
    # one store for all notebooks: runs shared between them are computed once, as for a student
    return tmp_path_factory.mktemp("notebook_runs")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_executes_headless(path, smoke_store, monkeypatch):
    from fedala_lab.record.store import RunStore

    monkeypatch.setenv("FEDALA_LAB_SMOKE", "1")
    monkeypatch.setenv("FEDALA_LAB_RUNS", str(smoke_store))
    # smoke runs take a fraction of a second: spawning processes for them (get_or_run_many) would cost more
    # than it saves; tests/test_app_processes.py checks that path
    monkeypatch.setenv("FEDALA_LAB_PROCESSES", "1")
    # the kernel is a process of its own: one torch thread, as this test process (tests/conftest.py); two threads
    # beside the other test worker on a 2-core machine slow torch many-fold (7 notebooks took 157-176 s each)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = _read(path)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB_DIR)}})
    client.execute()  # raises CellExecutionError on the first failing cell, with its traceback
    outputs = [o for c in _code(nb) for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # every "What we measured" is written from this run's numbers, at these (smoke) settings too
    written = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    wanted = sum("What we measured" in c.source for c in _code(nb))
    assert sum(t.startswith("**What we measured**") for t in written) == wanted, path.name
    assert _has_image(outputs), f"{path.name} drew no figure"
    # progress bars are kept as they ended (an executed notebook kept a widget's first text: "0%|")
    bars = [m for o in outputs for m in re.findall(r"(\d+)%\|", o.get("data", {}).get("text/plain", ""))]
    assert all(b == "100" for b in bars), f"{path.name}: progress bars kept unfinished: {bars}"
    # what each interact drew with its default values
    widget = _widget_outputs(nb)
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in widget if o.get("output_type") == "error"]
    assert not errors, f"an interact callback of {path.name} failed: {errors}"
    assert _has_image(widget), f"the interact callbacks of {path.name} drew no figure"
    # the runs went to the temporary store, at smoke size
    runs = RunStore(smoke_store).list()
    assert len(runs) > 0
    assert runs["rounds"].max() <= SMOKE_MAX_ROUNDS
