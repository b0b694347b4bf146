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
    *_, summary, status = client.predict(["halfway"], **SMALL, api_name="/train")
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

    acc, verdict, loss, ranked, _, summary, status = client.predict(["fedavg", "fedala"], **SMALL, api_name="/train")
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
    *_, summary2, status2 = client.predict(["fedavg", "fedala"], **SMALL, api_name="/train")
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
        client.predict(**{**SMALL, "beta": 0.0}, algos=["fedala"], api_name="/train")
    with pytest.raises(AppError, match=r"p=4 is not allowed"):  # the MLP has 3 blocks
        client.predict(["fedala"], **{**SMALL, "p": 4}, api_name="/train")
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
        event, data = _raw_call(url, "train", [["fedavg"], *[values[k] for k in DATA_FIELDS + TRAIN_FIELDS]])
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
        *_, summary, _ = c.predict(["fedala"], **{**SMALL, "seed": seed, "rounds": 6}, api_name="/train")
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
    job = c.submit(["fedavg"], **cfg, api_name="/train")
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
        return _raw_error(url, "train", [["fedavg"], *[values[k] for k in DATA_FIELDS + TRAIN_FIELDS]])

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
            # the verdict on federating, beside the curves, in the numbers of these runs
            expect(page.locator("#train-verdict")).to_contain_text(re.compile("federating (does not pay|pays)"))
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
            page.locator("#runs-text input, #runs-text textarea").first.fill("r12-")  # this test's 12-round runs
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
    if not CHROMIUM.exists():
        pytest.skip("Debian Chromium is not installed at /usr/bin/chromium (apt-get install -y chromium)")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(server[0])
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
def test_browser_every_tabs_run_and_main_figure_fit_1280x800(projector):
    """At 1280×800, without scrolling, each tab's Run button and, after a run, its main figure are in view."""
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
        if prefix == "abl":
            _set(page, "abl-seeds", 1)
        _in_view(page, f"#{prefix}-run")
        page.locator(f"#{prefix}-run").click()
        _loaded(page, figure)
        expect(page.locator(f"#{prefix}-status")).not_to_be_empty(timeout=60_000)
        _in_view(page, f"{figure} img")
        _in_view(page, f"#{prefix}-run")
    page.get_by_role("tab", name="Train & compare").click()
    verdict = page.locator("#train-verdict")
    _in_view(page, "#train-verdict")  # the verdict on federating, beside the curves
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


def _newest_checkpoint(store: Path) -> float:
    files = list((store / ".checkpoints").glob("*"))
    return max(f.stat().st_mtime for f in files) if files else 0.0


@pytest.mark.browser
def test_browser_stop_ends_with_what_was_kept_on_every_tab(server, projector):
    """Stop in every long action: the status line ends saying what was kept, within 2 s of the job stopping (its
    checkpoint's time), and stays so (Stop's own answer never overwrites it with a stale "Stopping…")."""
    from playwright.sync_api import expect

    page, store = projector, server[1]
    page.get_by_role("tab", name="Train & compare").click()
    _set(page, "rounds", 300)
    _set(page, "seed", 7)  # runs no other test made
    for tab, (prefix, _) in TABS.items():
        page.get_by_role("tab", name=tab).click()
        if prefix == "lama":
            _set(page, "lama-rounds", 400)
        if prefix == "abl":
            _set(page, "abl-seeds", 1)
        status = page.locator(f"#{prefix}-status")
        before = _newest_checkpoint(store)
        page.locator(f"#{prefix}-run").click()
        expect(page.get_by_text(re.compile(r"round \d+/\d+")).first).to_be_visible(timeout=120_000)
        page.locator(f"#{prefix}-stop").click()
        expect(page.locator(f"#{prefix}-stop")).to_have_text("Stop", timeout=120_000)  # Stop has answered
        page.wait_for_function("(s) => /Stopped after round \\d+ of \\d+/.test(document.querySelector(s).innerText)",
                               arg=f"#{prefix}-status", polling=50, timeout=120_000)
        shown = time.time()
        stopped = _newest_checkpoint(store)
        assert stopped > before, f"{tab}: no checkpoint was kept"
        assert shown - stopped < 2.0, f"{tab}: the status said what was kept {shown - stopped:.1f} s after the stop"
        line = status.inner_text()
        assert "checkpoint kept" in line and "Stopping" not in line, (tab, line)
        page.wait_for_timeout(2500)
        assert status.inner_text() == line, f"{tab}: the final line was overwritten"


@pytest.mark.browser
def test_browser_a_refusal_is_shown_once(projector):
    """β = 0 (Enter, then the box loses focus) and 2.5 rounds (Run): one message each, naming the field."""
    page = projector
    toasts = page.locator("[data-testid='toast-body']")
    beta = page.locator("#beta input")
    beta.fill("0")
    beta.press("Enter")
    page.locator("#app-title").click()  # focus leaves the box
    page.wait_for_timeout(3000)
    assert toasts.filter(has_text="beta=0.0 is not allowed").count() == 1
    beta.fill("0.1")
    beta.press("Enter")
    page.get_by_role("tab", name="Train & compare").click()
    _set(page, "rounds", 2.5)
    page.locator("#train-run").click()
    page.wait_for_timeout(3000)
    assert toasts.filter(has_text="rounds=2.5 is not allowed").count() == 1


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
