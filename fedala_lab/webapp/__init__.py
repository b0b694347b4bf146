"""The lecture app: a Gradio page to click through FedAvg, FedProx, FedALA and FedLAMA in front of a class.

    python app.py                     # from a checkout (or: make app)
    fedala-lab app --port 7861        # from an installed package

It listens on 127.0.0.1:7860 by default, creates no public link unless ``--share`` is given, sends no
analytics and fetches nothing from the network: the defaults run on the embedded MNIST subset (3,000 digits).
Runs are cached in a run store of the app's own (``$FEDALA_LAB_APP_RUNS`` or ``./runs/app``), so the same
settings again are instant; the Runs tab reads only that store.

This module stays light (the CLI imports it for ``--help``): Gradio is imported by the page's modules
(:mod:`.ui`, :mod:`.tabs`…) only when the app is built, and any of them is imported after this package,
which sets :func:`~.env.offline_env` first.
"""

from __future__ import annotations

import argparse
import time

from .. import numerics
from ..environ import check_environment
from .env import default_store_root, offline_env

offline_env()  # before any module of the app imports gradio: it reads these at import time

__all__ = ["add_arguments", "add_lecture_arguments", "app_processes", "cmd_app", "cmd_lecture", "default_store_root",
           "launch", "main", "offline_env"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
# Clicks are served one at a time by default; more clicks wait in the queue. A click's runs are computed side
# by side in worker processes (--processes, experiments/pool.py), not threads: on a laptop CPU a second thread
# gains little (docs/design.md#performance measures it), as small models are bound by Python's per-step
# overhead. `--concurrency 2` is safe (model
# construction is serialised in models.build_model).
DEFAULT_CONCURRENCY = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The app's flags, for ``fedala-lab app`` (fedala_lab/cli.py) and ``python app.py`` (:func:`main`)."""
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; any other only when given in full, "
        "e.g. 0.0.0.0 for every interface)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--share",
        action="store_true",
        help="also create a public gradio.live link (off by default; needs the network)",
    )
    p.add_argument(
        "--store",
        default=None,
        help="run store folder of the app (default: $FEDALA_LAB_APP_RUNS or ./runs/app)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"clicks served at once; further clicks wait in the queue (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--projector",
        action="store_true",
        help="start in projector mode: figure text of 14 px or more at 1280×800, thick lines, high contrast "
        "(a toggle on the page; each browser session may change its own)",
    )
    p.add_argument(
        "--processes",
        default="auto",
        help="processes computing a click's runs side by side (default auto: one per CPU core, at most 4, "
        "or 1 with a GPU; 1: all in the app's own process)",
    )


def cmd_app(args) -> int:
    launch(host=args.host, port=args.port, share=args.share, store=args.store, concurrency=args.concurrency,
           processes=args.processes, projector=args.projector)
    return 0


def add_lecture_arguments(p: argparse.ArgumentParser) -> None:
    """``fedala-lab lecture prepare`` and ``fedala-lab lecture export DIR`` (fedala_lab/cli.py)."""
    p.add_argument("action", choices=["prepare", "export"],
                   help="prepare: compute every tab's defaults and scenarios into the app's run store, so that every "
                        "default click is instant; export: write every tab's figures at projector size (PNG, SVG) "
                        "and a one-page handout per view (Markdown, HTML) into DIR")
    p.add_argument("dir", nargs="?", default=None, help="export: the folder to write into")
    p.add_argument("--store", default=None,
                   help="the app's run store folder (default: $FEDALA_LAB_APP_RUNS or ./runs/app, as the app's)")
    p.add_argument("--processes", default="auto",
                   help="processes computing runs side by side (default auto, as the app's --processes)")
    p.add_argument("--notebooks", default=None, metavar="FOLDER",
                   help="prepare: also execute the lecture notebooks in FOLDER once (e.g. notebooks/), so that in "
                        "class each reads its runs from its run store ($FEDALA_LAB_RUNS or the runs/ beside FOLDER)")
    p.add_argument("--dpi", type=int, default=200, help="export: PNG resolution (default 200)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_lecture(args) -> int:
    """Prepare the lecture, or export its figures and handouts (see :mod:`.lecture`)."""
    from pathlib import Path

    from ..errors import ConfigError

    if args.action == "export" and not args.dir:
        raise ConfigError("dir", None, "a folder to write the figures and handouts into (fedala-lab lecture export DIR)")
    if args.action == "prepare" and args.dir:
        raise ConfigError("dir", args.dir, "nothing: prepare writes into the app's run store (--store)")
    if args.notebooks is not None and (args.action != "prepare" or not Path(args.notebooks).is_dir()):
        raise ConfigError("notebooks", args.notebooks, "a folder of lecture notebooks, with prepare")
    if not 50 <= args.dpi <= 600:
        raise ConfigError("dpi", args.dpi, "a whole number from 50 to 600")
    if args.dir and Path(args.dir).exists() and not Path(args.dir).is_dir():
        raise ConfigError("dir", args.dir, "a folder (this is a file)")
    processes = app_processes(args.processes)
    import torch  # the environment and numerics: checked and applied by the command line before this
    from tqdm.auto import tqdm

    torch.set_num_threads(1)  # as the app: one thread per simulation, processes for more
    from . import lecture
    from .ui import LectureApp

    app = LectureApp(args.store, processes, projector=args.action == "export")
    bar = tqdm(total=1000, desc=f"lecture {args.action}", disable=args.no_progress, dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {elapsed} {postfix}")

    def report(fraction, text):
        bar.update(round(1000 * fraction) - bar.n)
        bar.set_postfix_str(text[:90], refresh=True)

    try:
        if args.action == "prepare":
            done = lecture.prepare(app, report)
            bar.write(done.summary())
            if args.notebooks:
                bar.reset()
                bar.set_description("lecture notebooks")
                tic = time.perf_counter()
                ran = lecture.run_notebooks(args.notebooks, report)
                bar.close()
                print(f"{len(ran)} notebooks executed in {time.perf_counter() - tic:.0f} s: their runs are in "
                      f"{lecture.notebooks_store(args.notebooks)}, and each now reads them instead of training.")
        else:
            tic = time.perf_counter()
            files = lecture.export(app, args.dir, report, dpi=args.dpi)
            bar.close()
            print(f"{len(files)} files in {time.perf_counter() - tic:.0f} s → {Path(args.dir) / 'index.html'}")
    finally:
        bar.close()
        if app.pool is not None:
            app.pool.close()
    return 0


def launch(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    share: bool = False,
    store=None,
    concurrency: int = DEFAULT_CONCURRENCY,
    processes: int | str = "auto",
    projector: bool = False,
    prevent_thread_lock: bool = False,
    quiet: bool = False,
):
    """Build the app and serve it (blocks until Ctrl-C unless ``prevent_thread_lock``). ``processes``: how many
    processes compute a click's runs side by side ("auto": :func:`app_processes`; 1: in this process).
    ``projector``: figures in projector mode until a session turns it off (:mod:`fedala_lab.figures.style`)."""
    from ..algorithms.plugins import env_modules
    from ..errors import ConfigError

    # an empty host would let Gradio fall back to $GRADIO_SERVER_NAME (0.0.0.0: every interface): only an
    # address given in full listens beyond this machine
    if not isinstance(host, str) or not host.strip() or host != host.strip():
        raise ConfigError("host", host, f"an address to listen on: {DEFAULT_HOST} (this machine only, the default) "
                          "or one given in full, e.g. 0.0.0.0 for every interface")
    if not 1 <= port <= 65535:
        raise ConfigError("port", port, "an integer from 1 to 65535")
    if concurrency < 1:
        raise ConfigError("concurrency", concurrency, "an integer >= 1")
    processes = app_processes(processes)
    check_environment()
    numerics.apply()
    env_modules()  # $FEDALA_LAB_PLUGINS: module names, or refused here rather than skipped
    _check_free(host, port)  # before building the page and warming up: seconds a taken port would waste
    import torch

    # Small models and several users at once: one thread per simulation is fastest and does not
    # oversubscribe the cores (docs/design.md#performance: a busy neighbour makes multi-threaded steps many
    # times slower).
    torch.set_num_threads(1)
    from .ui import build_app, launch_kwargs, warm_up

    demo = build_app(store=store, concurrency=concurrency, processes=processes, projector=bool(projector))
    # Before serving: partition the default data and trace the engine's first steps, so the lecturer's
    # first click does not pay for them (seconds on a laptop CPU). Nothing is stored. Not in a background
    # thread: it would build a model while a first click may build another (see DEFAULT_CONCURRENCY).
    warm_up()
    try:
        demo.launch(
            server_name=host,
            server_port=port,
            share=share,
            prevent_thread_lock=prevent_thread_lock,
            quiet=quiet,
            **launch_kwargs(),
        )
    except OSError as err:  # taken between the check and now
        raise ConfigError("port", port, f"a free port ({' '.join(str(err).split())[:200]})") from None
    return demo


def app_processes(value) -> int:
    """The ``processes`` setting as a number: a whole number >= 1, or "auto" (one per CPU core this process may
    use, at most 4; 1 where a GPU is present: its runs are the GPU's, not the cores'). Anything else is a
    ConfigError naming the setting."""
    from ..experiments.pool import processes_setting

    return processes_setting(value)


def _check_free(host: str, port: int) -> None:
    """Refuse a port something else listens on (or a host this machine cannot listen on), as Gradio would
    find out only after building the page, with a traceback. Bound as Gradio's server binds (SO_REUSEADDR)."""
    import socket

    from ..errors import ConfigError

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as err:
        raise ConfigError("port", port, f"a port that is free on {host} ({err.strerror or err}); "
                          "choose another with --port") from None


def main(argv: list[str] | None = None) -> int:
    """``python app.py [--host H] [--port P] [--share]``: the same as ``fedala-lab app``."""
    import sys

    from ..errors import FedalaError

    parser = argparse.ArgumentParser(prog="app.py", description="The fedala_lab lecture app (Gradio).")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_app(args)
    except FedalaError as err:
        sys.stderr.write(f"app.py: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        return 130
