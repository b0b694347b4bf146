"""The lecture app end to end: ``python app.py`` on a free localhost port, driven by gradio_client (the named
API endpoints) and by headless Debian Chromium through Playwright (a slider, the Run button, the plot).

The server is one subprocess for the whole module (Gradio takes ~6 s to import), with a run store in a
temporary folder. The browser test skips only when /usr/bin/chromium is absent (`.ci/run` installs it);
``FEDALA_LAB_APP_SCREENSHOT=docs/app.png`` makes it also save the README's screenshot there.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import APP_SMALL

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ENDPOINTS = {"/partition", "/train", "/ala", "/trajectory", "/ablation", "/fedlama", "/runs"}
# the in-process tests' small settings (10 clients of the embedded digits), 8 rounds: seconds per run
SMALL = {**APP_SMALL, "rounds": 8}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PLUGIN = """
import fedala_lab as fl


class Halfway(fl.Algorithm):
    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        return fl.Aggregated({n: (g + mean.params[n]) / 2 for n, g in rnd.global_params.items()}, mean.bytes)


fl.register_algorithm("halfway", Halfway, label="Halfway")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``python app.py --port <free>`` with its own run store; yields (url, store folder)."""
    store = tmp_path_factory.mktemp("app_runs")
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "app_methods.py").write_text(PLUGIN)
    port = _free_port()
    env = {
        **os.environ,
        "FEDALA_LAB_PLUGINS": "app_methods",  # your own method, offered and run like a built-in
        "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log = open(store / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--store", str(store)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:  # readiness probe: the API description answers once the app is up
            try:
                with urllib.request.urlopen(f"{url}/gradio_api/info", timeout=2) as r:
                    info = json.loads(r.read())
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the app did not start: {(store / 'server.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield url, store, info
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server[0], verbose=False)


def test_a_plugin_method_is_offered_and_trains_through_the_api(server, client):
    """A method registered by a plugin ($FEDALA_LAB_PLUGINS here) is on the Train tab's list, with its +ALA
    variant, and /train runs it into the app's store like a built-in."""
    from fedala_lab.record.store import RunStore

    info = client.view_api(return_format="dict", print_info=False)
    algos = next(p for p in info["named_endpoints"]["/train"]["parameters"] if p["parameter_name"] == "algos")
    assert {"halfway", "halfway+ala"} <= _choices(algos), algos
    *_, summary, status = client.predict(["halfway"], 1, **SMALL, api_name="/train")
    assert _rows(summary)[0]["algorithm"] == "Halfway" and "1 run(s)" in status, status
    assert RunStore(server[1]).list()["algo"].eq("halfway").any()


def _choices(param: dict) -> set[str]:
    """The values a multiselect Dropdown parameter of the API description takes."""
    t = param.get("type", {})
    items = t.get("items", {}) if isinstance(t, dict) else {}
    return set(items.get("enum", []))


def _rows(table: dict) -> list[dict]:
    """A Dataframe output as gradio_client returns it ({headers, data}) → list of row dicts."""
    return [dict(zip(table["headers"], row, strict=True)) for row in table["data"]]


def test_listens_on_localhost_with_named_endpoints(server):
    url, _, info = server
    assert url.startswith("http://127.0.0.1:")
    assert ENDPOINTS <= set(info["named_endpoints"])
    train = {p["parameter_name"] for p in info["named_endpoints"]["/train"]["parameters"]}
    assert {
        "algos",
        "num_clients",
        "beta",
        "rounds",
        "join_ratio",
        "lr",
        "mu",
        "eta",
        "s",
        "p",
        "seed",
    } <= train


def test_partition_and_train_through_the_api(server, client):
    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import make_config

    plot, table, clients, note = client.predict(
        **{k: SMALL[k] for k in ("dataset", "partition", "num_clients", "beta", "classes_per_client")},
        api_name="/partition",
    )
    assert plot["type"] == "matplotlib" and plot["plot"].startswith("data:image/")
    rows = _rows(table)
    assert [r["client"] for r in rows] == list(range(10)) and "serves" in note
    from fedala_lab.webapp.split import served

    ok = served(make_config(**{k: SMALL[k] for k in ("dataset", "partition", "beta", "classes_per_client")}).data)
    assert (clients["value"], clients["minimum"], clients["maximum"]) == (10, ok.lo, ok.hi)  # the slider's range

    acc, verdict, loss, ranked, _, summary, status = client.predict(["fedavg", "fedala"], 1, **SMALL, api_name="/train")
    assert all(f["plot"].startswith("data:image/") for f in (acc, loss, ranked)) and "FedALA" in verdict
    rows = {r["algorithm"]: r for r in _rows(summary)}
    assert set(rows) == {"FedAvg", "FedALA"}
    store = RunStore(server[1])
    for algo, row in zip(("fedavg", "fedala"), rows.values(), strict=True):
        run = store.find(make_config(algo=algo, **SMALL))  # what the app reports is what the store holds
        assert run is not None and row["run"] == run.path.name
        assert row["best acc % (pooled)"] == pytest.approx(run.summary()["best_acc"], abs=0.01)
        assert row["rounds"] == SMALL["rounds"]
    assert "2 run(s)" in status

    # the same settings again: served from the run store
    *_, summary2, status2 = client.predict(["fedavg", "fedala"], 1, **SMALL, api_name="/train")
    assert {r["source"] for r in _rows(summary2)} == {"run store"}
    assert "2 served from the run store" in status2

    # and the Runs tab lists and reloads them, by name only
    table, _, fig, details, _, _ = client.predict("", api_name="/runs")
    names = {r["name"] for r in _rows(table)}
    assert {r["run"] for r in rows.values()} <= names
    name = rows["FedALA"]["run"]
    _, _, fig, details, _, _ = client.predict(name, api_name="/runs")
    assert fig["plot"].startswith("data:image/")
    assert details["config"]["algo"] == "fedala" and details["summary"]["rounds"] == SMALL["rounds"]
    # several at once: one plot, a table comparing them, and a line over seeds (one seed each: no interval)
    both = [rows["FedAvg"]["run"], name]
    _, _, fig, details, compared, said = client.predict(both, api_name="/runs")
    assert [r["run"] for r in _rows(compared)] == both and details["name"] == name
    assert "FedALA − FedAvg = " in said and "one seed: no interval" in said
    # filtered: FedALA's runs only
    table, *_ = client.predict("", algorithm="fedala", api_name="/runs")
    assert {r["algorithm"] for r in _rows(table)} == {"FedALA"} and name in {r["name"] for r in _rows(table)}


def test_bad_inputs_show_the_library_message_and_the_app_stays_usable(server, client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=r"beta=0\.0 is not allowed"):
        client.predict(**{**SMALL, "beta": 0.0}, algos=["fedala"], seeds=1, api_name="/train")
    with pytest.raises(AppError, match=r"p=4 is not allowed"):  # the MLP has 3 blocks
        client.predict(["fedala"], 1, **{**SMALL, "p": 4}, api_name="/train")
    with pytest.raises(AppError, match="not a run name|no finished run"):
        client.predict("../../etc", api_name="/runs")
    _, table, *_ = client.predict(api_name="/partition")  # still answering
    assert len(table["data"]) == 20


def _raw_call(url: str, api: str, data: list) -> tuple[str, str]:
    """One call over plain HTTP as a script without gradio_client would make it: (event, data) of the
    result stream's last event. NaN is sent as the bare token Python's json writes."""
    req = urllib.request.Request(f"{url}/gradio_api/call/{api}", data=json.dumps({"data": data}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        event_id = json.loads(r.read())["event_id"]
    with urllib.request.urlopen(f"{url}/gradio_api/call/{api}/{event_id}", timeout=120) as r:
        text = r.read().decode()
    events = re.findall(r"event: (\w+)\ndata: (.*)", text)
    return events[-1]


def test_raw_http_bad_numbers_get_a_message_and_no_traceback(server):
    """2.5 rounds, true, NaN in integer fields: refused (never rounded) with the message naming the field;
    the server log gets one line per refusal, not a traceback."""
    from fedala_lab.webapp.ui import DATA_FIELDS, TRAIN_FIELDS

    url, store, _ = server
    log = store / "server.log"
    before = log.read_text()
    for field, value, pattern in [("rounds", 2.5, r"rounds=2\.5 is not allowed: a whole number from 1 to 300"),
                                  ("rounds", True, r"rounds=True is not allowed"),
                                  ("num_clients", float("nan"), r"num_clients=nan is not allowed"),
                                  ("batch_size", 0, r"batch_size=0 is not allowed: a whole number from 1 to 64"),
                                  ("seed", 1.5, r"seed=1\.5 is not allowed")]:
        values = {**SMALL, field: value}
        event, data = _raw_call(url, "train", [["fedavg"], 1, *[values[k] for k in DATA_FIELDS + TRAIN_FIELDS]])
        assert event == "error", (field, value, data)
        assert re.search(pattern, json.loads(data)["error"]), data
    deadline = time.monotonic() + 30  # the log is written by another process: wait for its five lines
    while (added := log.read_text()[len(before):]).count("refused:") < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Traceback" not in added, added
    assert added.count("refused:") == 5, added


def test_concurrent_users_get_their_own_results(server):
    """Three sessions at once (the benchmark does eight), each with its own seed: distinct, correct runs."""
    from gradio_client import Client

    from fedala_lab.engine.simulate import simulate
    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import make_config

    seeds = [11, 12, 13]

    def one(seed):
        c = Client(server[0], verbose=False)
        *_, summary, _ = c.predict(["fedala"], 1, **{**SMALL, "seed": seed, "rounds": 6}, api_name="/train")
        return _rows(summary)[0]

    with ThreadPoolExecutor(len(seeds)) as pool:
        rows = list(pool.map(one, seeds))
    store = RunStore(server[1])
    for seed, row in zip(seeds, rows, strict=True):
        cfg = make_config(algo="fedala", **{**SMALL, "seed": seed, "rounds": 6})
        run = store.find(cfg)
        assert run is not None and row["run"] == run.path.name and row["run"].endswith(cfg.key())
        # correct: what this user got is what an independent simulation of their settings gives
        reference = simulate(cfg, progress=False)
        np.testing.assert_array_equal(run.rounds["acc"], reference.rounds["acc"])  # the same run, bit for bit
        assert row["final acc % (pooled)"] == pytest.approx(reference.final_acc, abs=0.006)
    assert len({r["run"] for r in rows}) == len(seeds)


def test_stop_endpoint_stops_the_sessions_run(server):
    """Stop ends the running simulation after its current round and answers, once it has, with the job's own
    final line; the same settings again resume it."""
    from gradio_client import Client

    c = Client(server[0], verbose=False)
    cfg = {**SMALL, "rounds": 300, "num_clients": 20, "seed": 21}
    job = c.submit(["fedavg"], 1, **cfg, api_name="/train")
    deadline = time.monotonic() + 60
    while not job.status().progress_data:  # wait until rounds are being reported
        assert time.monotonic() < deadline and not job.done(), "the run never reported progress"
        time.sleep(0.1)
    answer = c.predict(api_name="/stop")  # the status line (the button's label is the page's only)
    answer = answer[0] if isinstance(answer, (tuple, list)) else answer
    acc, _, _, _, _, summary, status = job.result(timeout=120)
    k = int(re.fullmatch(r"Stopped after round (\d+) of 300 \(checkpoint kept: Run again resumes\)\.", status)[1])
    assert answer == status  # Stop's answer is the job's own line, whichever reaches a page last
    # what was done so far comes back: the curve of its k rounds and its row
    assert acc["plot"].startswith("data:image/")
    assert [(r["status"], r["rounds"]) for r in _rows(summary)] == [(f"stopped at round {k}", k)]
    assert (server[1] / ".checkpoints").is_dir() and any((server[1] / ".checkpoints").iterdir())


def _raw_error(url: str, api: str, data: list) -> str:
    event, payload = _raw_call(url, api, data)
    assert event == "error", payload
    return json.loads(payload)["error"]


def test_api_refuses_what_the_page_would_not_send(server):
    """Issue 33's app cases over plain HTTP: an out-of-range seed, a path as FedLAMA's rule, 100 clients at
    Dir(0.01) (refused at once, not after 100,000 draws); one bad run folder never breaks the Runs tab."""
    from fedala_lab.webapp.settings import SEED_MAX
    from fedala_lab.webapp.ui import DATA_FIELDS, TRAIN_FIELDS

    url = server[0]

    def train(**changes):
        values = {**SMALL, **changes}
        return _raw_error(url, "train", [["fedavg"], 1, *[values[k] for k in DATA_FIELDS + TRAIN_FIELDS]])

    assert re.search(rf"seed=18446744073709551616 is not allowed: a whole number from 0 to {SEED_MAX}",
                     train(seed=2**64))
    tic = time.monotonic()
    assert re.search(r"num_clients=100 is not allowed: a number of clients this split serves: 2–\d+",
                     train(dataset="mnist_mini", num_clients=100, beta=0.01))
    assert time.monotonic() - tic < 10  # 11 s before, on a quiet machine
    values = [SMALL[k] for k in DATA_FIELDS + TRAIN_FIELDS]
    assert re.search(r"rule='\.\./x' is not allowed: one of authors, spec",
                     _raw_error(url, "fedlama", [5, 2, False, "../x", 6, *values]))
    # a run a script stored with a seed beyond 64 bits: the Runs tab still lists the store, that run included
    from fedala_lab.experiments.runs import get_or_run
    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import make_config

    get_or_run(make_config(algo="fedavg", **{**SMALL, "rounds": 2, "seed": 2**64}), RunStore(server[1]), progress=False)
    event, payload = _raw_call(url, "runs", ["", "", "", "", "", ""])
    assert event == "complete" and str(2**64) in payload, payload


def _img_src(page, selector: str):
    """The source of the figure drawn in ``selector`` (None while none is)."""
    img = page.locator(f"{selector} img")
    return img.first.get_attribute("src") if img.count() else None


def _wait_img(page, selector: str, old, timeout: int = 60_000) -> None:
    """Wait until ``selector`` shows a loaded figure other than ``old``."""
    page.wait_for_function(
        "([s, old]) => { const i = document.querySelector(s + ' img');"
        " return i && i.src !== old && i.complete && i.naturalWidth > 0; }",
        arg=[selector, old],
        timeout=timeout,
    )


@pytest.mark.browser
def test_browser_moves_a_slider_runs_and_shows_the_plot(server, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian Chromium is not installed at /usr/bin/chromium (apt-get install -y chromium; "
            ".ci/run does it)"
        )
    from playwright.sync_api import expect, sync_playwright

    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import DATA_FIELDS, DEFAULTS, TRAIN_FIELDS, make_config

    page_defaults = {k: DEFAULTS[k] for k in DATA_FIELDS + TRAIN_FIELDS}
    url = server[0]
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1150})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url)
            # the Data tab draws the default partition on load
            expect(page.locator("#data-plot img")).to_be_visible(timeout=30_000)

            page.get_by_role("tab", name="Train & compare").click()
            slider = page.locator("#rounds input[type='range']")
            expect(slider).to_be_visible()
            slider.fill("12")
            expect(page.locator("#rounds input[type='number']")).to_have_value("12")
            page.locator("#train-run").click()
            page.wait_for_function(
                "() => { const i = document.querySelector('#train-acc-plot img');"
                " return i && i.complete && i.naturalWidth > 0; }",
                timeout=90_000,
            )
            expect(page.locator("#train-summary")).to_contain_text("FedALA", timeout=30_000)
            expect(page.locator("#train-summary")).to_contain_text("Local")  # ticked by default
            # the verdict on federating, beside the curves, over the default 3 seeds, in the numbers of these runs
            verdict = page.locator("#train-verdict")
            expect(verdict).to_contain_text(re.compile(r"Federating pays here|federating does not pay|"
                                                       r"Does federating pay\? Not measurably here"))
            expect(verdict).to_contain_text(re.compile(r"− FedAvg = [+-]\d+\.\d\d points.* over 3 seeds"))
            expect(page.locator("#train-status")).to_contain_text("run(s)")
            # the per-client plots of these runs, drawn after the curves
            page.wait_for_function(
                "() => { const i = document.querySelector('#train-clients-plot img');"
                " return i && i.complete && i.naturalWidth > 0; }",
                timeout=60_000,
            )
            shot = tmp_path / "app.png"
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
            extra = os.environ.get("FEDALA_LAB_APP_SCREENSHOT")
            if extra:
                page.screenshot(path=extra, full_page=False)

            # Stop: a long run reports its rounds, stops after the current one, keeps its checkpoint and shows
            # what it did: the partial curve and its row (never a blank page)
            slider.fill("300")
            expect(page.locator("#rounds input[type='number']")).to_have_value("300")
            _set(page, "train-seeds", 1)  # one run a method: the status names the one Stop interrupted
            before = _img_src(page, "#train-acc-plot")
            clients_before = _img_src(page, "#train-clients-plot")
            spread_before = _img_src(page, "#train-spread-plot")
            page.locator("#train-run").click()
            progress = page.get_by_text(re.compile(r"round \d+/300 · accuracy")).first
            expect(progress).to_be_visible(timeout=60_000)
            page.locator("#train-stop").click()
            summary = page.locator("#train-summary")
            expect(summary).to_contain_text(re.compile(r"stopped at round \d+"), timeout=60_000)
            k = int(re.search(r"stopped at round (\d+)", summary.inner_text())[1])
            # the job's own line, which Stop's answer repeats: whichever arrives last, the page says what was kept
            expect(page.locator("#train-status")).to_contain_text(
                re.compile(rf"Stopped after round {k} of 300 \(FedAvg \(1/3\); checkpoint kept: Run again "
                           r"resumes\)\. No run of this job had finished before it\."))
            _wait_img(page, "#train-acc-plot", before)  # redrawn: FedAvg's k rounds so far
            # the per-client plots are redrawn too, from the stopped run: no longer the 12-round runs' (stale)
            _wait_img(page, "#train-clients-plot", clients_before)
            _wait_img(page, "#train-spread-plot", spread_before)
            long_run = make_config(algo="fedavg", **{**page_defaults, "rounds": 300})
            store = RunStore(server[1])
            assert store.checkpoint_for(long_run).is_file() and store.find(long_run) is None  # stopped, kept

            # a refused value: the message names the field, the value stays as typed (never clamped to 1),
            # and what the page showed stays
            shown = _img_src(page, "#train-acc-plot")
            batch = page.locator("#batch-size input[type='number']")
            batch.fill("0")
            page.locator("#train-run").click()
            errors = page.locator("[data-testid='toast-body'].error")
            expect(errors.filter(has_text="batch_size=0 is not allowed: a whole number from 1 to 64").first
                   ).to_be_visible(timeout=15_000)
            expect(batch).to_have_value("0")
            assert _img_src(page, "#train-acc-plot") == shown
            expect(page.locator("#train-acc-plot img")).to_be_visible()
            expect(summary).to_contain_text(f"stopped at round {k}")
            batch.fill("10")

            # a bad value shows the library's message in a visible error, and the page stays usable
            page.locator("#beta input").fill("0")
            page.locator("#beta input").press("Enter")
            expect(errors.filter(has_text="beta=0.0 is not allowed: a finite number > 0").first).to_be_visible(
                timeout=15_000)
            page.get_by_role("tab", name="Data").click()
            before = _img_src(page, "#data-plot")  # still the β = 0.1 partition
            page.locator("#beta input").fill("0.5")
            page.locator("#beta input").press("Enter")
            _wait_img(page, "#data-plot", before)  # redrawn for β = 0.5: the app kept working after the errors

            # the Runs tab: the stopped run is listed; two runs picked are compared on one plot
            page.get_by_role("tab", name="Runs").click()
            listing = page.locator("#runs-table")
            expect(listing).to_contain_text(f"stopped at round {k}", timeout=30_000)
            page.locator("#runs-text input, #runs-text textarea").first.fill("r12-s0-")  # this test's 12-round runs, seed 0
            page.locator("#runs-text input, #runs-text textarea").first.press("Enter")
            expect(listing.locator("[data-testid='cell-2-0']")).to_be_visible(timeout=30_000)  # FedAvg, FedALA, Local
            expect(listing.locator("[data-testid='cell-3-0']")).to_have_count(0)
            plot = _img_src(page, "#run-plot")
            for row in (0, 1, 2):
                listing.locator(f"[data-testid='cell-{row}-1']").click()
                expect(page.locator("#runs-compared").locator(f"[data-testid='cell-{row}-0']")).to_be_visible(
                    timeout=30_000)
            compared = page.locator("#runs-compared")
            expect(compared).to_contain_text("FedAvg")
            expect(compared).to_contain_text("FedALA")
            expect(compared).to_contain_text("Local")
            _wait_img(page, "#run-plot", plot)
            # issue 48, item 4: the legend of the runs compared is neither cut off nor drawn over the y label or
            # the curves: the figure the page shows, drawn again here from the same store (the same runs)
            from fedala_lab.experiments.runs import stored_runs

            names = [n for n in stored_runs(RunStore(server[1]))["name"] if "-r12-s0-" in n]  # the three compared
            assert len(names) == 3
            _legend_clear(_runs_figure(server[1], names))

            # a scenario changes the shared settings of every tab, and says so above the tabs, never silently
            page.get_by_role("tab", name="Train & compare").click()
            notice = page.locator("#scenario-notice")
            expect(notice).not_to_contain_text("Scenario")
            page.locator("#scenario").get_by_text("FedProx's setting").click()
            expect(notice).to_contain_text("every tab", timeout=15_000)
            expect(notice).to_contain_text("pathological")
            expect(notice).to_contain_text("stragglers 0 → 0.9")
            page.get_by_role("tab", name="Data").click()
            expect(notice).to_be_visible()  # above the tabs: seen on the Data tab too
            expect(page.locator("#partition input[value='pathological']")).to_be_checked()
            page.get_by_role("tab", name="FedLAMA").click()
            expect(notice).to_be_visible()
            page.get_by_role("tab", name="Train & compare").click()
            page.locator("#scenario").get_by_text("the lecture's default").click()
            expect(notice).to_contain_text("pathological → Dirichlet", timeout=15_000)
            expect(page.locator("#partition input[value='dirichlet']")).to_be_checked()
        finally:
            browser.close()
    # no request left this machine (fonts, scripts, analytics: all local)
    outside = [u for u in requests if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    assert not outside, outside[:5]
    # the run it made: 12 rounds, as set by the slider
    listed = RunStore(server[1]).list()
    assert ((listed["algo"] == "fedala") & (listed["rounds"] == 12) & (listed["clients"] == 20)).any()


def _runs_figure(store, names):
    """The Runs tab's comparison figure of ``names``, as the server draws it (same handler, same store)."""
    from fedala_lab.webapp import ui

    _, _, fig, *_ = ui.LectureApp(store).runs(names)
    return fig


def _legend_clear(fig) -> None:
    """The figure's legend lies inside the figure and overlaps neither the plotting area nor the axis labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.draw_without_rendering()
    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and fig.bbox.y0 <= legend.y0, legend
    for part in (ax.bbox, ax.yaxis.label.get_window_extent(renderer), ax.xaxis.label.get_window_extent(renderer)):
        assert not legend.overlaps(part), (legend, part)


# ---------------------------------------------------------------------------------------------------------
# the lecture at a projector's 1280×800: layout, Stop on every tab, one message per refusal, the clients slider

BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# tab → (prefix of its Run/Stop/status ids, its main figure)
TABS = {"Heterogeneity": ("ladder", "#ladder-plot"), "Train & compare": ("train", "#train-acc-plot"),
        "ALA inside": ("ala", "#ala-weights-plot"), "Trajectory": ("traj", "#traj-plot"),
        "Ablation": ("abl", "#abl-plot"), "FedLAMA": ("lama", "#lama-plot")}


@pytest.fixture
def projector(server):
    """A fresh page of the app at 1280×800 (a projector), in headless Chromium."""
    yield from _page(server[0])


@pytest.fixture
def slow_link(server):
    """The projector's page on a slow link: 250 ms added to every request (a busy laptop, a hall's network)."""
    yield from _page(server[0], latency_ms=250)


def _page(url: str, latency_ms: int = 0):
    if not CHROMIUM.exists():
        pytest.skip("Debian Chromium is not installed at /usr/bin/chromium (apt-get install -y chromium)")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            if latency_ms:
                cdp = page.context.new_cdp_session(page)
                cdp.send("Network.enable")
                cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": latency_ms,
                                                               "downloadThroughput": -1, "uploadThroughput": -1})
            page.goto(url)
            expect(page.locator("#data-plot img")).to_be_visible(timeout=60_000)
            yield page
        finally:
            browser.close()


def _set(page, elem_id: str, value) -> None:
    """Type ``value`` into a slider's or number's box and commit it (Enter, then leaving the box), as a lecturer
    does; a slider announces its new value ("release") as the box loses focus."""
    box = page.locator(f"#{elem_id} input[type='number']").first
    box.fill(str(value))
    box.press("Enter")
    box.blur()


def _loaded(page, selector: str, timeout: int = 300_000) -> None:
    page.wait_for_function("(s) => { const i = document.querySelector(s + ' img');"
                           " return i && i.complete && i.naturalWidth > 0; }", arg=selector, timeout=timeout)


def _in_view(page, selector: str) -> dict:
    """The element's box with the page scrolled to its top: it must lie inside 1280×800."""
    page.evaluate("() => window.scrollTo(0, 0)")
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    assert box["y"] >= 0 and box["y"] + box["height"] <= 800 and box["x"] + box["width"] <= 1280, (selector, box)
    return box


@pytest.mark.browser
def test_browser_every_tabs_run_and_main_figure_fit_1280x800(server, projector):
    """At 1280×800, without scrolling, each tab's Run button and, after a run, its main figure are in view; in
    projector mode too, where the main figures' text is 14 px or more."""
    from playwright.sync_api import expect

    page = projector
    _in_view(page, "#data-plot img")  # the Data tab draws on load; its main result is the partition
    page.get_by_role("tab", name="Train & compare").click()
    # the tallest header: a scenario's notice stands above the tabs
    page.locator("#scenario").get_by_text("FedProx's setting").click()
    expect(page.locator("#scenario-notice")).to_contain_text("every tab", timeout=30_000)
    _set(page, "rounds", 5)  # short runs: the layout is the point here
    for tab, (prefix, figure) in TABS.items():
        page.get_by_role("tab", name=tab).click()
        if prefix == "ala":
            _set(page, "ala-round", 5)
        if prefix == "traj":
            _set(page, "traj-k", 3)
            _set(page, "traj-before", 2)
        if prefix == "lama":
            _set(page, "lama-rounds", 6)
        if prefix in ("abl", "train"):  # one seed: the layout is the point here
            _set(page, f"{prefix}-seeds", 1)
        _in_view(page, f"#{prefix}-run")
        page.locator(f"#{prefix}-run").click()
        _loaded(page, figure)
        expect(page.locator(f"#{prefix}-status")).not_to_be_empty(timeout=60_000)
        _in_view(page, f"{figure} img")
        _in_view(page, f"#{prefix}-run")
        if prefix == "traj":  # the claim stands above the figure, in view with it
            _in_view(page, "#traj-claim")
            expect(page.locator("#traj-claim")).to_contain_text("client 7")
    _projector_text_sizes(page, server[1])
    page.get_by_role("tab", name="Train & compare").click()
    verdict = page.locator("#train-verdict")
    _in_view(page, "#train-verdict")  # the verdict on federating, beside the curves
    # FedProx's setting (this test's): why FedProx wins or not, in the runs' numbers, beside the curves
    expect(verdict).to_contain_text("clients straggle")
    expect(verdict).to_contain_text(re.compile(r"(Why FedProx wins here|Here FedProx does not beat FedAvg)"))
    # the scenario where federating pays is one click away: it sets Dir(0.5), says so, and runs
    said = verdict.inner_text()
    _in_view(page, "#train-collab")
    page.locator("#train-collab").click()
    expect(page.locator("#scenario-notice")).to_contain_text("Dirichlet β 0.1 → 0.5", timeout=30_000)
    expect(verdict).not_to_have_text(said, timeout=300_000)
    expect(page.locator("#train-status")).to_contain_text("run(s)", timeout=300_000)
    expect(page.locator("#beta input")).to_have_value("0.5")
    page.get_by_role("tab", name="Runs").click()
    expect(page.locator("#runs-table")).to_contain_text("FedALA", timeout=30_000)
    _in_view(page, "#runs-table")


# what each tab's Run sent in the test above (the FedProx scenario, 5 rounds): its own inputs, by handler
SENT = {"ladder": {"seeds": 3}, "train": {"algos": ["fedavg", "fedprox"], "seeds": 1}, "ala": {"client": 0, "round_": 5},
        "trajectory": {"client": 7, "K": 3, "before": 2, "grid": 21, "setting": "paper"},
        "ablation": {"param": "s", "values": "5,20,50,80,100", "seeds": 1},
        "fedlama": {"tau0": 5, "phi": 2, "with_ala": False, "rule": "authors", "lama_rounds": 6}}
HANDLERS = {"ladder": "ladder", "train": "train", "ala": "ala", "traj": "trajectory", "abl": "ablation",
            "lama": "fedlama"}


def _projector_text_sizes(page, store) -> None:
    """Projector mode on, every tab run again (its runs are stored: served), and each main figure's smallest text
    measured as shown: its size in points (the figure the server drew, drawn again here from the same store with
    the same values) × CSS px per point on the page (the image's displayed width / its natural width × the
    figure's dpi / 72). Gradio sends a matplotlib figure as a PNG of its full size at its own dpi: the image's
    natural width is the figure's width in inches × dpi, checked. The size is the text's em size, as CSS gives a
    font's size: it must be 14 px or more. The figures stay in view."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from playwright.sync_api import expect

    from fedala_lab.webapp import ui
    from fedala_lab.webapp.settings import SCENARIO_FIELDS, scenario_values

    page.locator("#projector input").check()
    values, _ = scenario_values("fedprox")
    settings = {**{k: ui.DEFAULTS[k] for k in ui.DATA_FIELDS + ui.TRAIN_FIELDS},
                **dict(zip(SCENARIO_FIELDS, values)), "rounds": 5}
    app = ui.LectureApp(store, projector=True)
    shown = {"data": (app.partition(**{k: settings[k] for k in ui.DATA_FIELDS})[0], "#data-plot")}
    page.get_by_role("tab", name="Data").click()
    before = _img_src(page, "#data-plot")
    page.locator("#data-kind").get_by_text("heatmap").click()
    _wait_img(page, "#data-plot", before)
    before = _img_src(page, "#data-plot")
    page.locator("#data-kind").get_by_text("bubbles").click()
    _wait_img(page, "#data-plot", before)
    for tab, (prefix, figure) in TABS.items():
        page.get_by_role("tab", name=tab).click()
        before = _img_src(page, figure)
        page.locator(f"#{prefix}-run").click()
        _wait_img(page, figure, before, timeout=120_000)
        expect(page.locator(f"#{prefix}-status")).to_contain_text("served from the run store", timeout=60_000)
        name = HANDLERS[prefix]
        out = getattr(app, name)(**SENT[name], **settings)
        shown[prefix] = (next(o for o in out if isinstance(o, Figure)), figure)
        shown[prefix] += (page.evaluate("(s) => { const i = document.querySelector(s + ' img');"
                                        " return [i.clientWidth, i.naturalWidth]; }", figure),)
        _in_view(page, f"{figure} img")
    page.get_by_role("tab", name="Data").click()
    shown["data"] += (page.evaluate("() => { const i = document.querySelector('#data-plot img');"
                                    " return [i.clientWidth, i.naturalWidth]; }"),)
    for key, (fig, selector, (width, natural)) in shown.items():
        dpi = fig.dpi
        assert natural == round(fig.get_size_inches()[0] * dpi), (key, natural, fig.get_size_inches())
        points = min(t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip())
        px = points * width / natural * dpi / 72
        assert px >= 14, f"{key}: smallest text {points:g} pt shown at {px:.1f} px ({width} of {natural} px)"


def _checkpoints(store: Path) -> dict[Path, int]:
    """The store's checkpoints of stopped runs and their times (ns); engine states kept beside them are none."""
    from fedala_lab.record.store import RunStore

    return {f: f.stat().st_mtime_ns for f in RunStore(store).checkpoints().values()}


@pytest.mark.browser
def test_browser_stop_ends_with_what_was_kept_on_every_tab(server, projector):
    """Stop in every long action: the status line ends saying what was kept (the round its new checkpoint holds),
    and stays so (Stop's own answer never overwrites it with a stale "Stopping…")."""
    from playwright.sync_api import expect

    from fedala_lab.engine.simulate import read_checkpoint

    page, store = projector, server[1]
    page.get_by_role("tab", name="Train & compare").click()
    _set(page, "rounds", 300)
    _set(page, "seed", 7)  # runs no other test made
    for tab, (prefix, _) in TABS.items():
        page.get_by_role("tab", name=tab).click()
        if prefix == "lama":
            _set(page, "lama-rounds", 400)
        if prefix in ("abl", "train"):  # one seed: the layout is the point here
            _set(page, f"{prefix}-seeds", 1)
        status = page.locator(f"#{prefix}-status")
        before = _checkpoints(store)
        page.locator(f"#{prefix}-run").click()
        expect(page.get_by_text(re.compile(r"round \d+/\d+")).first).to_be_visible(timeout=120_000)
        page.locator(f"#{prefix}-stop").click()
        expect(page.locator(f"#{prefix}-stop")).to_have_text("Stop", timeout=120_000)  # Stop has answered
        page.wait_for_function("(s) => /Stopped after round \\d+ of \\d+/.test(document.querySelector(s).innerText)",
                               arg=f"#{prefix}-status", polling=50, timeout=120_000)
        line = status.inner_text()
        new = [f for f, t in _checkpoints(store).items() if before.get(f, 0) < t]
        assert new, f"{tab}: no checkpoint was kept"
        kept = {read_checkpoint(f).summary()["rounds"] for f in new}  # a job computing side by side stops each run
        said = int(re.search(r"Stopped after round (\d+) of", line).group(1))
        assert said in kept, (tab, kept, line)
        assert "checkpoint kept" in line and "Stopping" not in line, (tab, line)
        page.wait_for_timeout(2500)
        assert status.inner_text() == line, f"{tab}: the final line was overwritten"


@pytest.mark.browser
def test_browser_a_refusal_is_shown_once(projector):
    """β = 0 (Enter, then the box loses focus) and 2.5 rounds (Run): one message each, naming the field."""
    from playwright.sync_api import expect

    page = projector
    toasts = page.locator("[data-testid='toast-body']")

    def shown_once(text):  # the message comes (a busy machine answers late), and no second one after it
        expect(toasts.filter(has_text=text)).to_have_count(1, timeout=30_000)
        _settled(page)
        assert toasts.filter(has_text=text).count() == 1

    beta = page.locator("#beta input")
    beta.fill("0")
    beta.press("Enter")
    page.locator("#app-title").click()  # focus leaves the box
    shown_once("beta=0.0 is not allowed")
    beta.fill("0.1")
    beta.press("Enter")
    page.get_by_role("tab", name="Train & compare").click()
    _set(page, "rounds", 2.5)
    page.locator("#train-run").click()
    shown_once("rounds=2.5 is not allowed")


@pytest.mark.browser
def test_browser_clients_slider_offers_only_what_the_split_serves(projector):
    """The default split (the embedded subset, Dir(0.1)) serves fewer than 100 clients: the slider ends there,
    its largest value draws; a number a pathological split cannot serve moves to the nearest one, said why."""
    from playwright.sync_api import expect

    from fedala_lab.webapp.split import served
    from fedala_lab.webapp.ui import DEFAULTS, make_config

    page = projector
    ok = served(make_config(**{k: DEFAULTS[k] for k in ("dataset", "partition", "beta", "classes_per_client")}).data)
    slider = page.locator("#clients input[type='range']")
    expect(slider).to_have_attribute("max", str(ok.hi), timeout=30_000)
    before = _img_src(page, "#data-plot")
    _set(page, "clients", ok.hi)
    _wait_img(page, "#data-plot", before)
    expect(page.locator("#data-notice")).to_contain_text(f"{ok.lo}–{ok.hi} clients")
    page.locator("#partition").get_by_text("pathological").click()
    expect(page.locator("#data-notice")).to_contain_text("leaves a label without a client", timeout=30_000)
    _set(page, "clients", 6)
    expect(page.locator("#data-notice")).to_contain_text("clients N 6 → 5", timeout=30_000)
    expect(page.locator("#clients input[type='number']")).to_have_value("5")
    page.wait_for_timeout(1000)
    assert page.locator("[data-testid='toast-body'].error").count() == 0  # no error, anywhere


def _drag(page, elem_id: str, to: float, steps: int = 30) -> None:
    """Drag a slider's handle with the mouse from its value to ``to`` (past the end when ``to`` is an end)."""
    slider = page.locator(f"#{elem_id} input[type='range']")
    box = slider.bounding_box()
    lo, hi = float(slider.get_attribute("min")), float(slider.get_attribute("max"))
    value = float(page.locator(f"#{elem_id} input[type='number']").input_value())

    def x(v):
        return box["x"] + box["width"] * (v - lo) / (hi - lo)

    y = box["y"] + box["height"] / 2
    page.mouse.move(x(value), y)
    page.mouse.down()
    for i in range(1, steps + 1):
        page.mouse.move(x(value) + (x(to) - x(value)) * i / steps + (8 if to >= hi else -8 if to <= lo else 0) *
                        (i == steps), y)
        page.wait_for_timeout(20)
    page.mouse.up()


def _settled(page, quiet_ms: int = 1500, timeout_ms: int = 120_000) -> None:
    """Wait until the page has sent the app nothing for ``quiet_ms``: what earlier steps set off (a drag's
    "change" events, answered one at a time, drain for seconds on a busy machine) is over before a step
    whose requests are counted. A page that never settles (an event feeding itself) fails here."""
    last = [time.monotonic()]

    def seen(r):
        if _to_the_app(r):
            last[0] = time.monotonic()

    page.on("request", seen)
    try:
        start = time.monotonic()
        while time.monotonic() - last[0] < quiet_ms / 1000:
            assert time.monotonic() - start < timeout_ms / 1000, f"the page kept sending for {timeout_ms} ms"
            page.wait_for_timeout(100)
    finally:
        page.remove_listener("request", seen)


def _to_the_app(request) -> bool:
    """A request to the app's API (a queued job or a direct call), not a file or the event stream."""
    return "/gradio_api/" in request.url and request.method == "POST"


def _requests(page) -> list[str]:
    """Every request the page sends to the app's API from now on, as sent."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if _to_the_app(r) else None)
    return sent


@pytest.mark.browser
def test_browser_clients_box_and_slider_do_what_is_typed_and_dragged(server, projector):
    """Issue 48, items 1, 2 and 5. Dragging the clients slider from 20 to 2 and back to its end: no warning flood
    and no traceback in the server log, the Trajectory tab's client slider follows (its range, its value inside
    it); typing 5 + Enter into the clients box redraws the partition with 5 clients, and a click into the box
    neither redraws nor resets it; a click into the ALA tab's round box starts nothing. (And a figure's download
    button downloads it.)"""
    from playwright.sync_api import expect

    page, log = projector, server[1] / "server.log"
    logged = len(log.read_text())
    # the download button under a figure gives the figure shown, as a PNG file
    with page.expect_download() as got:
        page.locator("#data-plot-download").click()
    with open(got.value.path(), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and got.value.suggested_filename.endswith(".png")
    toasts = page.locator("[data-testid='toast-body']")
    page.get_by_role("tab", name="Trajectory").click()
    _set(page, "traj-client", 15)
    page.get_by_role("tab", name="Data").click()
    top = int(page.locator("#clients input[type='range']").get_attribute("max"))
    _drag(page, "clients", 2)
    expect(page.locator("#clients input[type='number']")).to_have_value("2")
    page.wait_for_timeout(2000)
    assert toasts.count() == 0, toasts.all_inner_texts()
    page.get_by_role("tab", name="Trajectory").click()
    client = page.locator("#traj-client")
    expect(client.locator("input[type='range']")).to_have_attribute("max", "1", timeout=15_000)
    expect(client.locator("input[type='number']")).to_have_value("1")  # 15 moved into 0 … 1
    page.get_by_role("tab", name="Data").click()
    _drag(page, "clients", top)
    expect(page.locator("#clients input[type='number']")).to_have_value(str(top))
    page.wait_for_timeout(2000)
    assert toasts.count() == 0, toasts.all_inner_texts()
    page.get_by_role("tab", name="Trajectory").click()
    expect(client.locator("input[type='range']")).to_have_attribute("max", str(top - 1), timeout=15_000)
    page.get_by_role("tab", name="Data").click()
    _set(page, "clients", 1)  # below the slider's range: kept as typed (a Run refuses it), nothing follows it
    page.wait_for_timeout(2000)
    expect(page.locator("#clients input[type='number']")).to_have_value("1")
    added = log.read_text()[logged:]
    assert "Traceback" not in added and "minimum must be less than maximum" not in added, added[-2000:]
    _set(page, "clients", top)
    page.wait_for_timeout(1500)

    # typing into the clients box: a click only focuses it (nothing sent, nothing reset), Enter commits
    page.get_by_role("tab", name="Data").click()
    _settled(page)
    sent = _requests(page)
    box = page.locator("#clients input[type='number']")
    box.click()
    page.wait_for_timeout(1500)
    assert sent == [] and box.input_value() == str(top)
    box.press("Control+a")
    page.keyboard.type("5")
    page.wait_for_timeout(1500)
    expect(box).to_have_value("5")  # not reset by an answer to the click
    before = _img_src(page, "#data-plot")
    box.press("Enter")
    _wait_img(page, "#data-plot", before)
    expect(page.locator("#data-table [data-testid='cell-4-0']")).to_be_visible(timeout=15_000)  # clients 0–4
    expect(page.locator("#data-table [data-testid='cell-5-0']")).to_have_count(0)
    expect(box).to_have_value("5")

    # the ALA tab's round box: a click into it is no "release" of the slider, so no FedALA run starts
    page.get_by_role("tab", name="ALA inside").click()
    _settled(page)
    sent.clear()
    page.locator("#ala-round input[type='number']").click()
    page.wait_for_timeout(2000)
    assert sent == [] and page.locator("#ala-status").inner_text().strip() == ""


@pytest.mark.browser
def test_browser_followers_settle_on_a_slow_link(slow_link):
    """On a slow link (250 ms added to every request) a drag of the clients slider and a change of model end
    soon: a few requests, then quiet (with a handler per follower, the two client sliders' handlers restarted
    each other: 28 to 45 requests in 12 s after one drag, still sending after 5 s in 3 runs of 3), and every
    slider that follows ends where it should."""
    from playwright.sync_api import expect

    page = slow_link
    sent = _requests(page)
    _drag(page, "clients", 2, steps=5)
    expect(page.locator("#clients input[type='number']")).to_have_value("2")
    _settled(page, timeout_ms=10_000)
    # the redraw, its two figures' PNGs, one or two runs of the followers (the drag's last value deferred)
    assert len(sent) <= 8, sent
    page.get_by_role("tab", name="Train & compare").click()  # the model is among its training settings
    _settled(page, timeout_ms=10_000)
    sent.clear()
    page.locator("#model input").click()
    page.get_by_role("option", name="small CNN (slower)", exact=True).click()
    _settled(page, timeout_ms=10_000)
    assert len(sent) <= 2, [r[:100] for r in sent]
    expect(page.locator("#p input[type='range']")).to_have_attribute("max", "4")  # the CNN's 4 blocks
    page.get_by_role("tab", name="Trajectory").click()
    expect(page.locator("#traj-client input[type='range']")).to_have_attribute("max", "1")
    page.get_by_role("tab", name="ALA inside").click()
    expect(page.locator("#ala-client input[type='range']")).to_have_attribute("max", "1")
    page.locator("#ala-settings").click()  # the accordion holding ALA's own p
    expect(page.locator("#ala-p input[type='range']")).to_have_attribute("max", "4")


@pytest.mark.browser
def test_browser_many_methods_and_what_the_page_reads(server, client, projector):
    """Issue 48, item 7: with every method ticked the Run button stays above the fold; FedALA and FedAvg+ALA (one
    computation) are computed once; the progress line shows the time spent, not an estimate from earlier jobs
    ("6.9/2.9s"); bold text is set in one font (the page's fonts hold every letter: "FedAᴠg" mixed in a fallback)."""
    import io
    import urllib.parse

    from fontTools.ttLib import TTFont
    from playwright.sync_api import expect

    from fedala_lab.webapp.settings import TRAIN_ALGOS

    page, url = projector, server[0]
    # every font face the page declares holds the letters and digits (weight 600 held "A", "B" and the space)
    faces = page.evaluate("""() => { const out = []; for (const sheet of document.styleSheets) {
        let rules; try { rules = sheet.cssRules; } catch (e) { continue; }
        for (const r of rules) if (r instanceof CSSFontFaceRule)
          out.push([r.style.getPropertyValue('font-family'), r.style.getPropertyValue('font-weight'),
                    (r.style.getPropertyValue('src').match(/url\\("?([^")]+)"?\\)/) || [])[1]]); }
        return out; }""")
    assert any("Source Sans Pro" in family for family, _, _ in faces), faces
    for family, weight, src in faces:
        if "Source Sans Pro" not in family:
            continue
        with urllib.request.urlopen(urllib.parse.urljoin(url + "/", src), timeout=10) as r:
            cmap = TTFont(io.BytesIO(r.read())).getBestCmap()
        missing = [c for c in "FedAvgALAMProx0123456789" if ord(c) not in cmap]
        assert not missing, (family, weight, src, missing)

    # every method ticked: the Run button still in view at 1280×800
    page.get_by_role("tab", name="Train & compare").click()
    page.locator("#algos input").click()
    for label, _ in TRAIN_ALGOS:
        option = page.get_by_role("option", name=label, exact=True)
        if not option.count():
            page.locator("#algos input").click()
        if option.get_attribute("aria-selected") != "true":
            option.click()
    page.keyboard.press("Escape")
    expect(page.locator("#algos")).to_contain_text("PartialFed+ALA")
    _in_view(page, "#train-run")

    # the progress line: rounds and the time spent, never "spent/expected s" from earlier jobs' mean
    _set(page, "rounds", 3)
    _set(page, "seed", 31)
    _set(page, "train-seeds", 1)  # the progress line is the point here: a run a method
    page.locator("#scenario").get_by_text("when federating pays").click()  # a scenario ticks its few methods
    expect(page.locator("#beta input")).to_have_value("0.5", timeout=15_000)
    page.locator("#scenario").get_by_text("the lecture's default").click()
    expect(page.locator("#algos")).not_to_contain_text("PartialFed", timeout=15_000)
    page.locator("#train-run").click()
    expect(page.locator("#train-status")).to_contain_text("run(s) in", timeout=120_000)
    _set(page, "seed", 32)
    _set(page, "rounds", 25)  # longer than the job before: Gradio's estimate from it would be exceeded
    page.locator("#train-run").click()
    status = page.locator("#train-status")
    expect(status).to_contain_text(re.compile(r"\d+/\d+ rounds \|\s+\d+\.\ds"), timeout=120_000)
    seen, shown = [], set()
    while "run(s) in" not in (text := status.inner_text()) or "rounds |" in text:
        seen.append(text)
        shown.update(re.findall(r"\d+\.\d/\d+\.\ds", page.inner_text("body")))  # any status on the page
        page.wait_for_timeout(100)
    for _ in range(20):  # and while the clients' plots are drawn after the runs
        shown.update(re.findall(r"\d+\.\d/\d+\.\ds", page.inner_text("body")))
        page.wait_for_timeout(100)
    assert seen and not shown, shown

    # one computation, one run: FedAvg+ALA is FedALA (through the API, on the small settings)
    from fedala_lab.record.store import RunStore

    *_, summary, said = client.predict(["fedala", "fedavg+ala"], 1, **{**SMALL, "seed": 41}, api_name="/train")
    assert [r["algorithm"] for r in _rows(summary)] == ["FedALA"] and said.startswith("1 run(s) in")
    assert "Computed once: FedAvg+ALA is FedALA" in said
    listed = RunStore(server[1]).list()
    assert not (listed["algo"] == "fedavg+ala").any()
