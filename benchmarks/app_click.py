"""The lecture app's default click, and eight users at once, measured against a real server (issue 6).

    python benchmarks/app_click.py                       # 3 repeats, 8 users; appends to results.md
    python benchmarks/app_click.py --users 8 --repeats 5 --no-append

1. Starts ``python app.py --port <free> --store <temporary folder>`` (a fresh process and an empty run store)
   and waits for ``/gradio_api/info``.
2. The default Train & compare click through gradio_client, exactly what the page sends: the algorithms the
   page ticks by default (FedAvg, FedALA and Local) on the teach settings (the embedded MNIST subset, 20
   clients, Dir(0.1), MLP, lr 0.1, 50 rounds), over ``--seeds`` seeds (the tab's seeds slider: the page's
   default is 3, a run per method and seed; the benchmark's default 1 keeps it comparable with its earlier
   sections). Timed: the first click of the fresh server; ``--repeats`` more
   after deleting the stored runs (so they are computed again, in a warm process); one more with the runs in
   the store (cached).
3. ``--users`` gradio_client sessions submit the click at the same moment, user i with seed i (so every
   answer must differ). Timed: until all have answered, and each user's latency (the queue runs
   ``--concurrency`` simulations at a time). Checked: every answer names the store's run of that user's
   config, all run names are distinct, and each reported best/final accuracy equals an independent
   in-process ``simulate()`` of the same config.
4. Appends a section to benchmarks/results.md (machine, load average, versions, numbers).

Timings on the shared 2-core machines depend on what else runs: the load average is reported with them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# before gradio_client is imported: no hub calls, no telemetry
_OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
for k, v in _OFFLINE.items():
    os.environ.setdefault(k, v)

DEFAULT_ALGOS = ["fedavg", "fedala", "local"]  # the page's default ticks (webapp/settings.py, SCENARIOS["teach"])


def asked(algos: list[str], seed: int, seeds: int) -> list[tuple[str, int]]:
    """(algorithm, seed) of each run a click asks for, in the summary's order: a method's seeds together."""
    return [(a, seed + k) for a in algos for k in range(seeds)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store: Path, concurrency: int, root: Path = ROOT, extra: tuple[str, ...] = (),
                 log_name: str = "server.log") -> tuple[subprocess.Popen, str, float]:
    """``python app.py`` of the checkout ``root`` (imported from there: ``PYTHONPATH``) on a free port with its
    own ``store``; returns (process, url, seconds until it answered)."""
    port = free_port()
    log_path = store.parent / log_name
    log = open(log_path, "w")  # noqa: SIM115 - lives as long as the server
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(root / "app.py"),
            "--port",
            str(port),
            "--store",
            str(store),
            "--concurrency",
            str(concurrency),
            *extra,
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(root)},
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/gradio_api/info", timeout=2):
                return proc, url, time.perf_counter() - t0
        except OSError:
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                tail = log_path.read_text()[-2000:]
                raise SystemExit(f"app did not start: {tail}") from None
            time.sleep(0.2)


def rows(table: dict) -> list[dict]:
    return [dict(zip(table["headers"], r, strict=True)) for r in table["data"]]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and of its living descendants (the app's worker processes:
    ``--processes``), Linux /proc; NaN elsewhere."""
    stats = {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            stats[int(p.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        except (OSError, ValueError, IndexError):
            continue
    if pid not in stats:
        return float("nan")
    tree, grew = {pid}, True
    while grew:
        more = {q for q, (ppid, _) in stats.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[q][1] for q in tree) / os.sysconf("SC_CLK_TCK")


def click(client, algos: list[str], settings: dict, pid: int, seeds: int | None = None
          ) -> tuple[float, float, list[dict], str]:
    """One Train & compare click: (wall seconds, server CPU seconds, summary rows, status line). ``seeds``: the
    tab's seeds slider (None: the server's default, for servers of any version).

    The server's CPU seconds are what the click costs on an idle machine (a simulation uses one thread),
    whatever else is running; the wall time is what the user waited on this machine, at this load."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    *_, summary, status = client.predict(algos, **settings, **({} if seeds is None else {"seeds": seeds}),
                                         api_name="/train")
    return time.perf_counter() - t0, cpu_seconds(pid) - c0, rows(summary), status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm clicks computed again (default 3)")
    ap.add_argument("--users", type=int, default=8, help="simultaneous gradio_client sessions (default 8)")
    ap.add_argument("--concurrency", type=int, default=1, help="the app's --concurrency (default 1)")
    ap.add_argument("--processes", default=None, help="the app's --processes (default: the app's own default)")
    ap.add_argument("--algos", default=",".join(DEFAULT_ALGOS),
                    help=f"the algorithms ticked, comma-separated (default the page's: {','.join(DEFAULT_ALGOS)})")
    ap.add_argument("--seeds", type=int, default=1,
                    help="the tab's seeds slider: a run per method and seed (default 1; the page's default is 3)")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--no-append", action="store_true", help="print the section, do not append it")
    args = ap.parse_args(argv)
    from fedala_lab.config import algo_label

    algos = [a.strip() for a in args.algos.split(",") if a.strip()]  # the click's ticks
    labels = [algo_label(a) for a in algos]  # as the summary table names them

    import gradio
    import torch
    from gradio_client import Client

    from fedala_lab.engine.simulate import simulate
    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import DATA_FIELDS, DEFAULTS, TRAIN_FIELDS, make_config

    torch.set_num_threads(1)
    settings = {k: DEFAULTS[k] for k in DATA_FIELDS + TRAIN_FIELDS}  # the page's defaults
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="fedala_app_bench_"))
    store_dir = tmp / "runs"
    extra = ("--processes", args.processes) if args.processes else ()
    proc, url, startup = start_server(store_dir, args.concurrency, extra=extra)
    store = RunStore(store_dir)
    out: dict = {"startup": startup}
    try:
        client = Client(url, verbose=False)
        first, first_cpu, first_rows, first_status = click(client, algos, settings, proc.pid, args.seeds)
        print(
            f"first click (fresh server): {first:.2f} s, {first_cpu:.2f} CPU s — {first_status}",
            file=sys.stderr,
        )
        warm, warm_cpu, r = [], [], first_rows
        for i in range(args.repeats):
            for algo, seed in asked(algos, settings["seed"], args.seeds):
                shutil.rmtree(store.dir_for(make_config(algo=algo, **{**settings, "seed": seed})))
            sec, cpu, r, status = click(client, algos, settings, proc.pid, args.seeds)
            assert {x["source"] for x in r} == {"computed"}, r
            warm.append(sec)
            warm_cpu.append(cpu)
            print(
                f"click {i + 1}/{args.repeats}, computed again: {sec:.2f} s, {cpu:.2f} CPU s — {status}",
                file=sys.stderr,
            )
        out["sim_seconds"] = {x["algorithm"]: x["seconds"] for x in r}
        cached, _, r, _ = click(client, algos, settings, proc.pid, args.seeds)
        assert {x["source"] for x in r} == {"run store"}, r
        out["cached"] = cached
        print(f"same settings again (run store): {cached:.3f} s", file=sys.stderr)

        # N users at once, user i from seed 1 + i·seeds (the default's seeds are cached: start after them)
        seeds = [args.seeds * (i + 1) for i in range(args.users)]
        clients = [Client(url, verbose=False) for _ in seeds]

        def user(i):
            c, seed = clients[i], seeds[i]
            t0 = time.perf_counter()
            job = c.submit(algos, **{**settings, "seed": seed}, seeds=args.seeds, api_name="/train")
            *_, summary, _ = job.result(timeout=600)
            return time.perf_counter() - t0, rows(summary)

        c0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        with ThreadPoolExecutor(len(seeds)) as pool:
            answers = list(pool.map(user, range(len(seeds))))
        out["users_wall"] = time.perf_counter() - t0
        out["users_cpu"] = cpu_seconds(proc.pid) - c0
        out["users_latency"] = sorted(a[0] for a in answers)
        print(f"{args.users} users at once: {out['users_wall']:.2f} s", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    load1 = os.getloadavg()

    # correctness: each answer is its own config's run, equal to an independent simulate()
    names, checked, wrong = set(), 0, []
    for seed, (_, answer) in zip(seeds, answers, strict=True):
        for (algo, s), row in zip(asked(algos, seed, args.seeds), answer, strict=True):
            cfg = make_config(algo=algo, **{**settings, "seed": s})
            run = store.find(cfg)
            ref = simulate(cfg, progress=False).summary()
            ok = (
                run is not None
                and row["run"] == run.path.name
                and abs(row["best acc % (pooled)"] - round(ref["best_acc"], 2)) < 1e-6
                and abs(row["final acc % (pooled)"] - round(ref["final_acc"], 2)) < 1e-6
            )
            checked += 1
            names.add(row["run"])
            if not ok:
                wrong.append((seed, algo, row, ref))
    distinct_acc = len({tuple(x["final acc % (pooled)"] for x in a) for _, a in answers})
    shutil.rmtree(tmp, ignore_errors=True)

    runs = len(algos) * args.seeds
    med = statistics.median(warm)
    lat = out["users_latency"]
    sims = out["sim_seconds"]
    cpu_med = statistics.median(warm_cpu)
    na = "–"
    lines = [
        "",
        f"## App: default Train & compare click and {args.users} simultaneous users (`app_click.py`)",
        "",
        (
            f"{dt.date.today().isoformat()} · {platform.platform()} · {os.cpu_count()} CPUs · torch "
            f"{torch.__version__} · gradio {gradio.__version__} · app `--concurrency "
            f"{args.concurrency}` `--processes {args.processes or 'auto'}`, one torch thread per simulation · "
            f"load average {load0[0]:.2f} at the "
            f"start, {load1[0]:.2f} at the end (other jobs shared the machine)."
        ),
        "",
        (
            f"{', '.join(labels)} ({'the page' if algos == DEFAULT_ALGOS else 'not the page'}'s default ticks), "
            f"{args.seeds} seed(s) each (`--seeds`; the page's default is 3), with its defaults (the embedded MNIST subset, 20 clients, Dir(0.1), MLP, lr 0.1, "
            "50 rounds), through gradio_client against `python app.py` on localhost. Wall: from the request "
            "to the answer (figures and table included), at this load. Server CPU: user + system seconds "
            "the app's process and its worker processes spent on it — what the click costs whatever the load "
            "(the wall time can be less: the workers compute a click's runs side by side)."
        ),
        "",
        "| measurement | wall s | server CPU s |",
        "|---|---:|---:|",
        f"| server start until `/gradio_api/info` answers (warm-up included) | {startup:.1f} | {na} |",
        f"| first click of the fresh server ({runs} runs computed) | {first:.2f} | {first_cpu:.2f} |",
        (
            f"| click, the {runs} runs computed again: median of {len(warm)} (wall min–max "
            f"{min(warm):.2f}–{max(warm):.2f}) | {med:.2f} | {cpu_med:.2f} |"
        ),
        (
            f"| … simulation seconds recorded in the last one: {' / '.join(labels)} | "
            f"{' / '.join(f'{sims.get(a, math.nan):.2f}' for a in labels)} | {na} |"
        ),
        f"| same settings again (served from the run store) | {cached:.3f} | {na} |",
        (
            f"| {args.users} users click at once (first seeds {seeds[0]}–{seeds[-1]}; {runs} runs each): all answered | "
            f"{out['users_wall']:.2f} | {out['users_cpu']:.2f} |"
        ),
        (
            f"| … per-user latency min / median / max | {lat[0]:.1f} / {statistics.median(lat):.1f} / "
            f"{lat[-1]:.1f} | {na} |"
        ),
        "",
        (
            f"Correct and distinct: {checked - len(wrong)}/{checked} answers name their own config's stored "
            "run and report the best and final accuracy of an independent in-process `simulate()` of that "
            f"config; {len(names)} distinct run names, {distinct_acc} distinct accuracy pairs among "
            f"{args.users} users. Target (issue 6), default click ≤ 10 s on the 2-core CPU: wall median "
            f"{med:.2f} s at load {load0[0]:.1f} ({'met' if med <= 10 else 'not met'}), server CPU median "
            f"{cpu_med:.2f} s ({'met' if cpu_med <= 10 else 'not met'} on an idle machine)."
            + (f" Target (issue 24), FedAvg + FedALA click ≤ 4 s end to end: wall median {med:.2f} s "
               f"({'met' if med <= 4 else 'not met'}), simulation {sum(sims.values()):.2f} s (≤ 3 s: "
               f"{'met' if sum(sims.values()) <= 3 else 'not met'})." if algos == ["fedavg", "fedala"] else "")
        ),
    ]
    if wrong:
        lines.append(f"MISMATCHES: {json.dumps(wrong, default=str)[:2000]}")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_append:
        with open(args.out, "a") as fh:
            fh.write(text)
        print(f"appended to {args.out}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
