"""Collects what a simulation records, round by round, and turns it into a :class:`Run`.

Its parts are the Run's: per-client and per-round rows (the loop), model snapshots, and whatever an
algorithm records through its round (``Round.record``: a tidy table, e.g. ALA's weight-learning passes
``ala`` or FedLAMA's ``lama_layers``; ``Round.record_series``: per-client tensors stacked over rounds, e.g.
ALA's weights ``ala_w``). The recorder knows no algorithm.

Everything is kept as plain Python lists and CPU tensors so that a checkpoint is a ``torch.save`` of
tensors and primitives (loadable with ``weights_only=True``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import torch

CLIENT_COLS = ["round", "client", "selected", "test_acc", "test_loss", "test_correct", "test_num",
               "train_loss", "init_loss", "trained_loss", "seconds", "straggler", "local_steps", "bytes_up",
               "bytes_down", "test_auc"]
ROUND_COLS = ["round", "acc", "acc_std", "test_loss", "train_loss", "init_loss", "trained_loss", "best_acc",
              "num_selected", "stragglers", "dropped", "bytes_up", "bytes_down", "seconds", "init_seconds",
              "eval_seconds", "train_seconds", "aggregate_seconds", "auc"]


class Recorder:
    def __init__(self, tracked: list[int], snapshot: list[int], snapshot_from: int):
        self.tracked = set(tracked)
        self.snapshot = set(snapshot)
        self.snapshot_from = snapshot_from
        self.clients: dict[str, list] = {c: [] for c in CLIENT_COLS}
        self.rounds: dict[str, list] = {c: [] for c in ROUND_COLS}
        self.series: dict[str, list[torch.Tensor]] = {}  # "name/client/key" -> per-round tensors
        self.series_rounds: dict[str, list[int]] = {}  # "name_rounds/client" -> rounds
        self.snaps: dict[str, list[torch.Tensor]] = {}  # "start/client", "end/client"
        self.snap_rounds: dict[str, list[int]] = {}
        # the algorithms' tidy tables: name -> column -> values. Run saves each as table_<name>.csv.
        self.tables: dict[str, dict[str, list]] = {}

    # -- per round ---------------------------------------------------------------------------------

    def client_rows(self, rows: dict[str, np.ndarray]) -> None:
        for c, values in self.clients.items():
            values.extend(np.asarray(rows[c]).tolist())

    def round_row(self, row: dict) -> None:
        for c in ROUND_COLS:
            v = row[c]
            self.rounds[c].append(v.item() if hasattr(v, "item") else v)

    def take(self, t: int, records: list) -> None:
        """File what an algorithm recorded through round ``t`` (``Round.records``), in order."""
        for kind, name, payload in records:
            if kind == "table":
                self.table_rows(name, payload)
            else:
                clients, tensors = payload
                self.series_rows(name, t, clients, tensors)

    def table_rows(self, name: str, rows: dict) -> None:
        """Append rows to the tidy table ``name`` (created on first use).

        ``rows`` maps every column to one value or to equal-length values (numpy arrays, lists). The
        first call fixes the columns; later calls must give the same ones.
        """
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"table name {name!r}: use letters, digits and _ only (it names a file)")
        cols = {c: np.atleast_1d(np.asarray(v)).tolist() for c, v in rows.items()}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"table {name!r}: columns of different lengths {sorted(lengths)}")
        table = self.tables.setdefault(name, {c: [] for c in cols})
        if set(table) != set(cols):
            raise ValueError(f"table {name!r}: columns {sorted(cols)} differ from the first rows' {sorted(table)}")
        for c, v in cols.items():
            table[c].extend(v)

    def series_rows(self, name: str, t: int, clients, tensors: dict[str, torch.Tensor]) -> None:
        """Round ``t``'s row of each tracked client among ``clients`` (the tensors' rows, in that order)."""
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"series name {name!r}: use letters, digits and _ only")
        for j, c in enumerate(clients):
            if c not in self.tracked:
                continue
            self.series_rounds.setdefault(f"{name}_rounds/{c}", []).append(t)
            for k, v in tensors.items():
                self.series.setdefault(f"{name}/{c}/{k}", []).append(v[j].detach().to("cpu", torch.float32).clone())

    def snapshot_rows(self, t: int, which: str, flats: dict[int, torch.Tensor]) -> None:
        """Round ``t``'s models of the snapshot clients ("start": after initialisation, "end": after training),
        flattened: client → tensor."""
        for c in sorted(flats):
            self.snaps.setdefault(f"{which}/{c}", []).append(flats[c])
            if which == "start":
                self.snap_rounds.setdefault(str(c), []).append(t)

    # -- output ------------------------------------------------------------------------------------

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        clients = pd.DataFrame(self.clients, columns=list(self.clients))
        rounds = pd.DataFrame(self.rounds, columns=ROUND_COLS)
        for df, ints in ((clients, ["round", "client"]), (rounds, ["round"])):
            for c in ints:
                df[c] = df[c].astype("int64")
        return clients, rounds

    def table_frames(self) -> dict[str, pd.DataFrame]:
        """The algorithms' tables as DataFrames (columns in the order of the first rows)."""
        return {name: pd.DataFrame(cols) for name, cols in self.tables.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for key, ws in self.series.items():
            out[key] = torch.stack(ws).numpy()
        for key, rs in self.series_rounds.items():
            out[key] = np.asarray(rs, dtype=np.int64)
        for key, ss in self.snaps.items():
            which, c = key.split("/")
            out[f"snap_{which}/{c}"] = torch.stack(ss).numpy()
        for c, rs in self.snap_rounds.items():
            out[f"snap_rounds/{c}"] = np.asarray(rs, dtype=np.int64)
        return out

    # -- checkpoints -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"clients": self.clients, "rounds": self.rounds, "series": self.series,
                "series_rounds": self.series_rounds, "snaps": self.snaps, "snap_rounds": self.snap_rounds,
                "tables": self.tables}

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, v)

    # -- a branch's first rounds -------------------------------------------------------------------

    def load_prefix(self, run, t: int, *, train_loss: bool) -> None:
        """Take ``run``'s records of rounds ≤ ``t`` as this run's own (a branch, docs/design.md#run-store),
        keeping only what this recorder records: its tracked clients' rows of per-client tables and their
        series, its snapshot clients from its ``snapshot_from``, and the train-split losses only when
        ``train_loss``.

        The caller has checked that ``run`` recorded all of that (experiments/prefix.py)."""
        def rows(df, cols, keep=None):
            df = df[df["round"] <= t]
            if keep is not None:
                df = df[keep(df)]
            out = {c: df[c].tolist() for c in cols}
            if not train_loss:
                for c in ("init_loss", "trained_loss"):
                    if c in out:
                        out[c] = [float("nan")] * len(df)
            return out

        def tracked(df):
            return df["client"].isin(self.tracked) if "client" in df else np.ones(len(df), dtype=bool)

        missing = sorted(set(self.clients) - set(run.clients.columns))
        if missing:
            raise ValueError(f"the stored run has no client column(s) {missing}")
        self.clients = rows(run.clients, list(self.clients))
        self.rounds = rows(run.rounds, ROUND_COLS)
        self.tables = {name: rows(df, list(df.columns), tracked) for name, df in run.tables.items() if len(df.columns)}
        self.series, self.series_rounds, self.snaps, self.snap_rounds = {}, {}, {}, {}
        arrays = run.arrays
        for key, rounds in arrays.items():
            name, _, c = key.rpartition("/")
            if not name.endswith("_rounds") or name == "snap_rounds" or int(c) not in self.tracked:
                continue
            keep = np.flatnonzero(rounds <= t)
            if not len(keep):
                continue
            self.series_rounds[key] = rounds[keep].tolist()
            prefix = f"{name[:-len('_rounds')]}/{c}/"
            for k, v in arrays.items():
                if k.startswith(prefix):
                    self.series[k] = [torch.from_numpy(v[i].copy()) for i in keep]
        for c in sorted(self.snapshot):
            rounds = arrays.get(f"snap_rounds/{c}")
            if rounds is None:
                continue
            keep = np.flatnonzero((rounds >= self.snapshot_from) & (rounds <= t))
            if len(keep):
                self.snap_rounds[str(c)] = rounds[keep].tolist()
                for which in ("start", "end"):
                    s = arrays[f"snap_{which}/{c}"]
                    self.snaps[f"{which}/{c}"] = [torch.from_numpy(s[i].copy()) for i in keep]
