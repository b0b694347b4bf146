"""The lecture app's click, server against server: ``python app.py`` of several checkouts (or settings) side by
side, their clicks interleaved, medians and paired ratios.

    python benchmarks/app_click_ab.py --server before=/path/to/old --server now=. --repeats 5
    python benchmarks/app_click_ab.py --server one=.::--processes=1 --server auto=. --algos fedavg,fedala

``--server LABEL=PATH[::ARG ...]`` starts ``python app.py`` of the checkout PATH (imported from there:
``PYTHONPATH``) with its own empty run store, and the app's ARGs (``--processes=1``…). All servers start first
and stay up; then each repeat clicks Train & compare on each server in turn (the order reversed every other
repeat: A B, B A, …), each click after deleting that server's stored runs of the click, so every click computes
them again in a warm server (the store emptied: its runs are keyed by that checkout's code). Timed: from the request to the answer, figures and table included, through
gradio_client (what the page sends), with the page's default settings (the embedded MNIST subset, 20 clients,
Dir(0.1), MLP, 50 rounds) and ``--algos`` ticked (default FedAvg and FedALA: the lecture's click). Printed:
the first click of each fresh server, the median of the repeats, each server's paired ratio to the first
(repeat by repeat, then the median), every run's final accuracy (servers that compute the same must agree), and
the load average before and after. On the shared 2-core machines only ratios taken side by side mean anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_click import click, start_server  # benchmarks/ is not a package: imported from beside this file


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", required=True, help="LABEL=PATH[::ARG ...] (repeat: 2 or more)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--algos", default="fedavg,fedala")
    args = ap.parse_args(argv)
    servers = []
    for spec in args.server:
        label, _, rest = spec.partition("=")
        path, _, extra = rest.partition("::")
        servers.append((label, Path(path).resolve(), tuple(a for a in extra.split() if a)))
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]

    from gradio_client import Client

    from fedala_lab.record.store import RunStore
    from fedala_lab.webapp.ui import DATA_FIELDS, DEFAULTS, TRAIN_FIELDS

    settings = {k: DEFAULTS[k] for k in DATA_FIELDS + TRAIN_FIELDS}
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="fedala_app_ab_"))
    up = []
    try:
        for i, (label, root, extra) in enumerate(servers):
            store = tmp / f"runs{i}"
            proc, url, startup = start_server(store, 1, root=root, extra=extra, log_name=f"server{i}.log")
            up.append((label, proc, Client(url, verbose=False), RunStore(store), startup))
            print(f"{label}: started in {startup:.1f} s ({root} {' '.join(extra)})", file=sys.stderr)
        first, walls, finals = {}, {label: [] for label, *_ in up}, {}
        for label, proc, client, store, _ in up:
            sec, _, rows, status = click(client, algos, settings, proc.pid)
            first[label] = sec
            finals[label] = [next(v for k, v in r.items() if k.startswith("final acc %")) for r in rows]
            print(f"{label}: first click {sec:.2f} s: {status}", file=sys.stderr)
        for rep in range(args.repeats):
            order = up if rep % 2 == 0 else up[::-1]
            for label, proc, client, store, _ in order:
                for entry in store.root.iterdir():  # every run of the click (keyed by that checkout's code)
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                sec, _, rows, _ = click(client, algos, settings, proc.pid)
                assert {r["source"] for r in rows} == {"computed"}, rows
                walls[label].append(sec)
            print(f"repeat {rep + 1}: " + "  ".join(f"{lb} {walls[lb][-1]:.2f}" for lb, *_ in up), file=sys.stderr)
    finally:
        for _, proc, *_ in up:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()

    base = up[0][0]
    print(f"app click ({', '.join(algos)}), {args.repeats} interleaved repeats; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'server':<12} {'start s':>8} {'first s':>8} {'median s':>9} {'÷ ' + base:>10}  final acc %")
    for label, *_, startup in up:
        ratios = [w / b for w, b in zip(walls[label], walls[base], strict=True)]
        print(f"{label:<12} {startup:>8.1f} {first[label]:>8.2f} {statistics.median(walls[label]):>9.2f} "
              f"{statistics.median(ratios):>10.2f}  {finals[label]}")
    print("repeats: " + "; ".join(f"{lb} " + " ".join(f"{w:.2f}" for w in walls[lb]) for lb, *_ in up))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
