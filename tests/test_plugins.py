"""A method registered in an importable module runs wherever a built-in does (docs/extending.md#plugins):
``--plugin``, ``$FEDALA_LAB_PLUGINS`` and installed entry points; sweeps' worker processes import it. One defined
in ``__main__`` is refused by any path that needs other processes; a sweep with failed runs never looks complete."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import fedala_lab as fl
from fedala_lab.errors import FedalaError, SweepFailed
from fedala_lab.experiments import SweepSpec, run_sweep

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
REPO = Path(__file__).resolve().parents[1]


def _doc_plugin() -> tuple[str, list[str]]:
    """docs/extending.md's plugin module and the commands shown with it."""
    text = DOC.read_text()
    module = next(b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if b.startswith("# my_methods.py"))
    bash = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "--plugin my_methods" in b)
    return module, [ln for ln in bash.strip().splitlines() if ln.startswith("fedala-lab ")]


def _cli(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 900):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "fedala_lab.cli", *args], check=False, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_guides_plugin_commands_run_as_written(tmp_path):
    module, commands = _doc_plugin()
    (tmp_path / "my_methods.py").write_text(module)
    assert [c.split()[1] for c in commands] == ["run", "sweep"]
    run = _cli([*commands[0].split()[1:], "--store", "runs", "--json", "--no-progress"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(ln) for ln in run.stdout.splitlines()]
    assert [r["algo"] for r in rows] == ["fedavg", "fedavgm"] and all(r["best_acc"] > 20 for r in rows)
    sweep = _cli([*commands[1].split()[1:], "--store", "runs", "--out", "out", "--no-progress"], tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    table = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert len(table) == 4 and set(table["server_beta"]) == {0.0, 0.9} and table["best_acc"].gt(20).all()
    assert not (tmp_path / "out" / "runs.partial.csv").exists()


def test_the_environment_variable_loads_a_plugin_everywhere(tmp_path):
    module, _ = _doc_plugin()
    (tmp_path / "my_methods.py").write_text(module)
    env = {"FEDALA_LAB_PLUGINS": "my_methods", "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    out = _cli(["methods", "--json"], tmp_path, env)
    assert out.returncode == 0, out.stderr
    assert "fedavgm" in [json.loads(ln)["name"] for ln in out.stdout.splitlines()]


def test_an_installed_entry_point_is_loaded(tmp_path):
    pkg = tmp_path / "labplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import fedala_lab as fl

        class Halfway(fl.Algorithm):
            def aggregate(self, rnd, senders):
                mean = rnd.weighted_mean(senders)
                return fl.Aggregated({n: (g + mean.params[n]) / 2 for n, g in rnd.global_params.items()},
                                     mean.bytes)

        def register():
            fl.register_algorithm("halfway", Halfway, label="Halfway")
    """))
    dist = tmp_path / "labplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: labplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedala_lab.algorithms]\nhalfway = labplug:register\n")
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    out = _cli(["run", "--preset", "teach-digits", "--algos", "halfway", "--rounds", "2", "--store", "runs",
                "--json", "--no-progress"], tmp_path, env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["algo"] == "halfway"


def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path):
    out = _cli(["run", "--plugin", "no_such_module", "--algos", "fedavg"], tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "plugin='no_such_module' is not allowed" in out.stderr and "ModuleNotFoundError" in out.stderr


def test_a_method_defined_in_main_is_refused_by_worker_processes_in_one_line(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(textwrap.dedent("""
        import fedala_lab as fl
        from fedala_lab.errors import FedalaError
        from fedala_lab.experiments import SweepSpec, run_sweep

        class Mine(fl.Algorithm):
            pass

        fl.register_algorithm("mine", Mine)
        spec = SweepSpec(fl.preset("teach-digits", algo="mine", rounds=2), grid={"seed": [0, 1]})
        try:
            run_sweep(spec, store="runs", workers=2, progress=False)
        except FedalaError as err:
            print(err)
        print(run_sweep(spec, store="runs", workers=1, progress=False).frame["algo"].tolist())
    """))
    out = subprocess.run([sys.executable, str(script)], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    refusal, ran = out.stdout.strip().splitlines()
    assert refusal.startswith("a sweep with 2 worker processes cannot run mine: it is defined in __main__")
    assert "move its class and register_algorithm call into a module" in refusal
    assert not (tmp_path / "runs").exists() or ran == "['mine', 'mine']"  # in this process it runs
    assert ran == "['mine', 'mine']"


class Broken(fl.Algorithm):
    """Fails in its second round: what a bug in a user's hook looks like."""

    def aggregate(self, rnd, senders):
        if rnd.t == 2:
            raise RuntimeError("my bug")
        return super().aggregate(rnd, senders)


def test_a_sweep_with_a_failed_run_raises_and_keeps_what_finished(tmp_path):
    fl.register_algorithm("broken", Broken, modifiers=())
    spec = SweepSpec(fl.preset("teach-digits", rounds=2), grid={"algo": ["fedavg", "broken"]})
    with pytest.raises(SweepFailed, match=(r"1 of 2 runs of sweep .* failed; the first, broken-.*: broken's aggregate "
                                          r"hook raised RuntimeError: my bug \(test_plugins.py, line \d+\)")):
        run_sweep(spec, store=tmp_path, workers=1, progress=False)
    try:
        run_sweep(spec, store=tmp_path, workers=1, progress=False)
    except SweepFailed as err:
        assert err.result.frame["algo"].tolist() == ["fedavg"] and len(err.result.failed) == 1
        from fedala_lab.reproduce import save_sweep

        paths = save_sweep(err.result, tmp_path / "out")
        assert [p.name for p in paths] == ["runs.partial.csv", "table.partial.csv", "table.partial.md",
                                           "table.partial.tex", "stats.partial.csv"]
        assert paths[2].read_text().startswith("**Incomplete: 1 run(s) failed**")


def test_the_cli_sweep_with_a_failed_run_exits_non_zero_and_writes_partial_files(tmp_path):
    (tmp_path / "buggy.py").write_text(textwrap.dedent("""
        import fedala_lab as fl

        class Buggy(fl.Algorithm):
            def aggregate(self, rnd, senders):
                raise RuntimeError("my bug")

        fl.register_algorithm("buggy", Buggy, modifiers=())
    """))
    out = _cli(["sweep", "--plugin", "buggy", "--preset", "teach-digits", "--algos", "fedavg,buggy", "--rounds",
                "2", "--workers", "2", "--store", "runs", "--out", "out", "--no-progress"], tmp_path)
    assert out.returncode == 2
    assert re.search((r"fedala-lab: error: run buggy-\S+ failed: buggy's aggregate hook raised "
                      r"RuntimeError: my bug \(buggy.py, line 6\)"), out.stderr)
    assert "INCOMPLETE: 1 run(s) failed" in out.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["runs.partial.csv", "stats.partial.csv",
                                                                     "table.partial.csv", "table.partial.md",
                                                                     "table.partial.tex"]
    assert pd.read_csv(tmp_path / "out" / "runs.partial.csv")["algo"].tolist() == ["fedavg"]


@pytest.mark.slow
def test_a_ray_sweep_runs_a_plugin(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    module, _ = _doc_plugin()
    (tmp_path / "ray_methods.py").write_text(module.replace('"fedavgm"', '"fedavgm-ray"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    import ray_methods  # noqa: F401 - registers fedavgm-ray

    spec = SweepSpec(fl.preset("teach-digits", algo="fedavgm-ray", rounds=2), grid={"seed": [0, 1]})
    result = run_sweep(spec, store=tmp_path / "runs", ray=True, workers=2, progress=False)
    assert result.frame["algo"].tolist() == ["fedavgm-ray", "fedavgm-ray"] and not result.failed


def test_a_failure_in_every_run_is_a_clear_error_too(tmp_path):
    fl.register_algorithm("broken", Broken, modifiers=())
    spec = SweepSpec(fl.preset("teach-digits", algo="broken", rounds=2), grid={"seed": [0, 1]})
    with pytest.raises(FedalaError, match="2 of 2 runs"):
        run_sweep(spec, store=tmp_path, workers=1, progress=False)
