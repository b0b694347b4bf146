"""Split a pool among clients: IID, pathological ("pat") and Dirichlet ("dir") partitions.

Pure functions over a label array and a ``numpy.random.Generator``: each returns one int64 index array
per client (indices into ``labels``, shuffled within the client); together the arrays are disjoint and
cover every index exactly once. Same generator state ⇒ same split.

They follow PFLlib's generator (``dataset/utils/dataset_utils.py: separate_data`` and ``split_data``),
which produced the paper's partitions (docs/design.md#data). Departures, all deliberate:

- Randomness comes from the ``Generator`` passed in, not from numpy's global state, so the project's
  splits are reproducible but not bit-identical to PFLlib's files (those are loaded as they are with
  :func:`fedala_lab.data.pfllib.load_pfllib`).
- PFLlib's IID split is its pathological split with every class per client; :func:`iid` is a plain
  shuffle-and-split into near-equal parts.
- Within a class PFLlib hands out samples in dataset order; here a class's indices are shuffled first.
- PFLlib's Dirichlet redraw loop has no bound (it can loop forever); here it stops after ``max_tries``
  with a :class:`~fedala_lab.errors.DataError`, and requests that can never succeed fail at once.
- Requests PFLlib would crash on (a class with no candidate client, a random-size range that is empty,
  a one-sample client in the train/test split) get a clear error or a documented fallback instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError, DataError, SplitFailed

# Dirichlet tries simulated at once (vectorised), capped so a batch's cut table stays a few tens of MB.
# Depends only on the request, so a seed always gives the same split.
_TRIES_PER_BATCH = 256
_BATCH_CELLS = 4_000_000
# A request is given up after its first batch of draws when, had the number of clients a draw leaves short been
# Poisson with a mean as small as the fewest seen (k), all max_tries draws would find a split with a chance below
# this (max_tries · e^-k): such a request would draw for minutes and fail (thousands of clients for 3,000 images).
HOPELESS = 1e-9

# ---------------------------------------------------------------------------------------- helpers


def default_least_samples(n_samples: int, num_clients: int) -> int:
    """The minimum client size the Dirichlet redraws aim for: ``min(40, n/num_clients/2)``, at least 1.

    40 is the FedALA repository's ``batch_size / (1 − train_ratio)`` = 10 / 0.25 (enough for one test
    batch); the ``n/num_clients/2`` cap keeps small pools such as the 1,797 digits satisfiable
    (docs/design.md#data).
    """
    if num_clients < 1:
        raise ConfigError("num_clients", num_clients, "an integer >= 1")
    return max(1, int(min(40.0, n_samples / num_clients / 2)))


def _labels(labels) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or y.size == 0):
        raise ConfigError("labels", f"array of {y.dtype} with shape {y.shape}", "a 1-d integer array")
    if y.size == 0:
        raise ConfigError("labels", "an empty array", "at least one sample")
    return y


def _num_clients(num_clients, n: int) -> int:
    if not isinstance(num_clients, (int, np.integer)) or isinstance(num_clients, bool) or num_clients < 1:
        raise ConfigError("num_clients", num_clients, "an integer >= 1")
    if num_clients > n:
        raise ConfigError("num_clients", int(num_clients), f"at most the number of samples ({n})",
                          "every client needs at least one sample")
    return int(num_clients)


def _generator(rng) -> np.random.Generator:
    # An int seed is accepted for convenience; a legacy RandomState is not (different streams).
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ConfigError("rng", rng, "a numpy.random.Generator (np.random.default_rng(seed)) or an int seed")


def _positive_int(name: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ConfigError(name, value, "an integer >= 1")
    return int(value)


def _finish(chunks: list[list[np.ndarray]], rng: np.random.Generator) -> list[np.ndarray]:
    """Concatenate each client's chunks and shuffle the client's order."""
    out = []
    for parts in chunks:
        idx = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
        out.append(rng.permutation(idx))
    return out


# ------------------------------------------------------------------------------------------- IID


def iid(labels, num_clients: int, rng) -> list[np.ndarray]:
    """Shuffle all samples and cut them into ``num_clients`` parts whose sizes differ by at most one.

    (PFLlib's IID is its pathological split with all classes per client; this is the textbook one.)
    """
    y = _labels(labels)
    n = _num_clients(num_clients, len(y))
    rng = _generator(rng)
    return [part.astype(np.int64) for part in np.array_split(rng.permutation(len(y)), n)]


# ---------------------------------------------------------------------------------- pathological


def pathological(labels, num_clients: int, classes_per_client: int, rng, *, balance: bool = False,
                 least_samples: int | None = None) -> list[np.ndarray]:
    """PFLlib's "pat" partition: each client holds samples of at most ``classes_per_client`` labels.

    Every client starts with ``classes_per_client`` slots. For each class in ascending label order, the
    candidates are the clients that still have a slot, in client order, truncated to the first
    ``ceil(num_clients / num_classes · classes_per_client)``; the class is split among them and each loses
    a slot. ``balance=True``: equal integer shares (the last candidate takes the remainder). Otherwise
    all but the last get a random size drawn uniformly from ``[max(num_per/10, least_samples/num_classes),
    num_per)`` (integer bounds, as numpy's ``randint`` truncates them), ``num_per = class size /
    candidates``, and the last gets the rest. ``least_samples=None`` uses :func:`default_least_samples`.

    All samples are assigned. Departures: if the random range is empty (a class smaller than about
    ``least_samples`` per candidate, where PFLlib's ``randint`` raises), its lower bound is lowered to fit;
    a class without a candidate or a client left with no sample is a :class:`DataError` naming the request
    (PFLlib divides by zero or writes an empty client).
    """
    y = _labels(labels)
    n = _num_clients(num_clients, len(y))
    rng = _generator(rng)
    classes = np.unique(y)
    k = len(classes)
    if not isinstance(classes_per_client, (int, np.integer)) or isinstance(classes_per_client, bool) \
            or not 1 <= classes_per_client <= k:
        raise ConfigError("classes_per_client", classes_per_client,
                          f"an integer from 1 to the number of classes ({k})")
    cpc = int(classes_per_client)
    if n * cpc < k:
        raise ConfigError("classes_per_client", cpc,
                          f"at least {math.ceil(k / n)} so that {n} clients can hold all {k} classes")
    least = default_least_samples(len(y), n) if least_samples is None else _positive_int(
        "least_samples", least_samples)

    slots = [cpc] * n
    limit = math.ceil(n / k * cpc)  # same float expression as PFLlib
    chunks: list[list[np.ndarray]] = [[] for _ in range(n)]
    for label in classes:
        idx = rng.permutation(np.flatnonzero(y == label))
        cand = [c for c in range(n) if slots[c] > 0][:limit]
        if not cand:
            raise DataError(
                f"pathological split: no client has a class slot left for label {label} "
                f"({n} clients x {cpc} classes each, {k} classes, at most {limit} clients per class). "
                "Use more clients or a larger classes_per_client"
            )
        m, total = len(cand), len(idx)
        num_per = total / m
        if balance:
            sizes = [int(num_per)] * (m - 1)
        else:
            hi = int(num_per)
            lo = max(0, min(int(max(num_per / 10, least / k)), hi - 1))
            sizes = rng.integers(lo, hi, m - 1).tolist() if hi > 0 else [0] * (m - 1)
        sizes.append(total - sum(sizes))
        start = 0
        for c, size in zip(cand, sizes):
            chunks[c].append(idx[start:start + size])
            start += size
            slots[c] -= 1

    out = _finish(chunks, rng)
    empty = [c for c, part in enumerate(out) if len(part) == 0]
    if empty:
        raise DataError(
            f"pathological split left clients {empty[:10]}{'…' if len(empty) > 10 else ''} without "
            f"samples ({n} clients, {cpc} classes each, {k} classes, {len(y)} samples). "
            "Use fewer clients or a larger classes_per_client"
        )
    return out


# ------------------------------------------------------------------------------------- Dirichlet


def dirichlet(labels, num_clients: int, beta: float, rng, *, least_samples: int | None = None,
              max_tries: int = 1000) -> list[np.ndarray]:
    """PFLlib's "dir" partition (after Yurochkin et al.'s PFNM code): label skew by Dir(β).

    For each class in ascending label order: draw client proportions ~ Dir(β·1); a client that already
    holds ≥ N/num_clients samples gets proportion 0; renormalise and cut the class at
    ``int(cumsum(p) · class size)``. Redraw the whole split until every client has ≥ ``least_samples``
    (default :func:`default_least_samples`).

    Departures: at most ``max_tries`` draws, then a :class:`DataError` with the best minimum reached;
    ``num_clients · least_samples > N`` fails at once, and so does a request whose first batch of draws leaves
    so many clients short in every draw that the rest would not succeed either (:data:`HOPELESS`). Tries are
    simulated on counts only, up to 256 side by side, and the indices are shuffled and cut once, for the first
    accepted try (same distribution as PFLlib's loop, thousands of tries per second). If every open client draws exactly 0 (possible with
    tiny β), the class is spread evenly over them.
    """
    y = _labels(labels)
    n = _num_clients(num_clients, len(y))
    rng = _generator(rng)
    if not isinstance(beta, (int, float, np.floating, np.integer)) or isinstance(beta, bool) \
            or not math.isfinite(beta) or beta <= 0:
        raise ConfigError("beta", beta, "a finite number > 0")
    least = default_least_samples(len(y), n) if least_samples is None else _positive_int(
        "least_samples", least_samples)
    max_tries = _positive_int("max_tries", max_tries)
    total = len(y)
    if n * least > total:
        raise DataError(
            f"dirichlet split impossible: {n} clients x least_samples={least} needs {n * least} samples, "
            f"the pool has {total}. Use fewer clients (at most {total // least}) or a smaller least_samples"
        )

    classes = np.unique(y)
    counts = [int(np.count_nonzero(y == c)) for c in classes]
    alpha = np.full(n, float(beta))
    cap = total / n
    best = -1
    per_batch = max(1, min(_TRIES_PER_BATCH, _BATCH_CELLS // (n * len(classes))))
    for start in range(0, max_tries, per_batch):
        b = min(per_batch, max_tries - start)
        # b independent tries side by side, one row each, on counts only
        sizes = np.zeros((b, n), np.int64)
        cuts_per_class = []
        for count in counts:
            p = rng.dirichlet(alpha, size=b) * (sizes < cap)
            s = p.sum(axis=1, keepdims=True)
            dead = ~(s[:, 0] > 0)
            if dead.any():  # all open clients drew 0 (underflow at tiny beta): spread evenly over them
                p[dead] = (sizes[dead] < cap)
                s = p.sum(axis=1, keepdims=True)
            cuts = (np.cumsum(p / s, axis=1) * count).astype(np.int64)[:, :-1]
            sizes += np.diff(cuts, axis=1, prepend=np.zeros((b, 1), np.int64),
                             append=np.full((b, 1), count, np.int64))
            cuts_per_class.append(cuts)
        smallest = sizes.min(axis=1)
        best = max(best, int(smallest.max()))
        good = np.flatnonzero(smallest >= least)
        short = int((sizes < least).sum(axis=1).min())  # the fewest clients a draw of this batch left short
        if not good.size and start == 0 and max_tries * math.exp(-short) < HOPELESS:
            raise SplitFailed(
                f"dirichlet split failed: every one of the first {b} draws (beta={beta}, {n} clients, {total} "
                f"samples, {len(classes)} classes) left at least {short} clients below least_samples={least}, "
                f"so that {max_tries} draws would not find a split either. Use fewer clients or a larger beta"
                + (" or a smaller least_samples" if least > 1 else ""), beta=float(beta), clients=n, samples=total,
                least=least, best=best, tries=b)
        if good.size:
            row = int(good[0])  # the first accepted try, as a sequential redraw loop would take
            chunks: list[list[np.ndarray]] = [[] for _ in range(n)]
            for label, cuts in zip(classes, cuts_per_class):
                idx = rng.permutation(np.flatnonzero(y == label))
                for c, part in enumerate(np.split(idx, cuts[row])):
                    chunks[c].append(part)
            return _finish(chunks, rng)
    raise SplitFailed(
        f"dirichlet split failed: after {max_tries} draws (beta={beta}, {n} clients, {total} samples, "
        f"{len(classes)} classes) the smallest client had at best {best} samples, below "
        f"least_samples={least}. Use fewer clients, a larger beta, a smaller least_samples, "
        "or more max_tries", beta=float(beta), clients=n, samples=total, least=least, best=best, tries=max_tries
    )


# ------------------------------------------------------------------------------------ train/test


def split_train_test(parts: Sequence[np.ndarray], train_ratio: float, rng
                     ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's indices into train and test, like PFLlib's ``split_data``.

    PFLlib calls ``sklearn.model_selection.train_test_split(train_size=ratio, shuffle=True)``, which
    keeps ``floor(ratio · n)`` samples for training and the rest for test (checked on the shared MNIST
    partition: every client has exactly ``floor(0.75 · n)`` train samples). Same here, after a shuffle.
    Departures: a client with ≥ 2 samples always gets ≥ 1 of each (sklearn raises on an empty train
    split), and a one-sample client keeps its sample for training with an empty test split.
    """
    if not isinstance(train_ratio, (int, float, np.floating)) or isinstance(train_ratio, bool) \
            or not 0 < train_ratio < 1:
        raise ConfigError("train_ratio", train_ratio, "a number strictly between 0 and 1")
    rng = _generator(rng)
    train, test = [], []
    for part in parts:
        idx = rng.permutation(np.asarray(part, dtype=np.int64))
        n = len(idx)
        n_train = math.floor(train_ratio * n)
        n_train = min(max(n_train, 1), n - 1) if n >= 2 else n
        train.append(idx[:n_train])
        test.append(idx[n_train:])
    return train, test
