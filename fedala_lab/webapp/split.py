"""Which numbers of clients a split can serve, so that no number a student picks ends in an error.

A Dirichlet split redraws until every client holds at least ``least_samples`` images and gives up after
``max_tries`` draws, so past some number of clients it fails (well under 100 for Dir(0.1) on the 3,000-image
subset). A pathological split hands each label to the first ⌈N·c/L⌉ clients that still have a free slot (PFLlib's
rule; c labels per client, L labels), which leaves a label without a client for some N: with 2 labels per
client of 10, N = 5, 9, 10, 13… work and 6, 7, 8, 11, 12 do not.

The app finds the numbers by trying the split itself, on the labels only (one scan per data setting, cached;
under a second for the embedded data): every N from 2 to 100 for pathological splits (a try takes
milliseconds; an IID split serves them all, untried), and for a Dirichlet split N = 2, 3, … up to the first it
cannot serve (a failed try draws :data:`PROBE_TRIES` times, the slowest try). The probe draws a multiple of the
partitioner's batch of draws, so a split found here is the very split the run makes with its own, larger
``max_tries``: every N offered is served. It is conservative: an N above the first failure may succeed after
more draws, and is not offered.

The rule on the page: the clients slider spans the smallest to the largest N served; a number in between that
the split cannot serve is moved to the nearest one it can, and the Data tab says so (from what, to what, why).
A job sent such a number by a script is refused at once, naming the numbers served.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..data.config import DataConfig
from ..errors import ConfigError, FedalaError, SplitFailed

LOWEST, HIGHEST = 2, 100  # the clients slider's own bounds
PROBE_TRIES = 8192  # 32 batches of the partitioner's 256 draws


@dataclass(frozen=True)
class Served:
    """The numbers of clients a data setting serves (``ns``, ascending), and what limits them."""

    ns: tuple[int, ...]
    why: str  # a sentence: what limits the numbers (empty when every number of the slider is served)

    @property
    def lo(self) -> int:
        return self.ns[0]

    @property
    def hi(self) -> int:
        return self.ns[-1]

    def nearest(self, n: int) -> int:
        """``n`` if served, else the served number closest to it (the smaller of two as close)."""
        return min(self.ns, key=lambda m: (abs(m - n), m))

    def check(self, n) -> None:
        """Refuse ``n`` clients the split cannot serve, naming the field and the numbers (no split drawn)."""
        if isinstance(n, int) and not isinstance(n, bool) and n not in self.ns:
            raise ConfigError("num_clients", n, f"a number of clients this split serves: {spans(self.ns)}"
                              + (f" ({self.why})" if self.why else ""))


def spans(ns) -> str:
    """``5, 9, 10, 13–100``: runs of consecutive numbers as ranges."""
    ns, out, i = list(ns), [], 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        out.append(str(ns[i]) if j == i else f"{ns[i]}, {ns[j]}" if j == i + 1 else f"{ns[i]}–{ns[j]}")
        i = j + 1
    return ", ".join(out)


def served(data: DataConfig) -> Served:
    """The numbers of clients ``data``'s split serves (its ``num_clients`` ignored); see the module's note.
    Not for data that comes partitioned (a PFLlib directory): its clients are given, there is no split."""
    y, num_classes = _labels(data.dataset, data.root, data.content)
    top = min(HIGHEST, len(y))
    if data.partition == "iid":  # equal shares: every N up to the number of images is served, nothing to try
        return Served(tuple(range(LOWEST, top + 1)), "")
    # keyed on what decides the split: a field it ignores (β of a pathological split, N, resize) scans nothing
    key = json.dumps({k: v for k, v in data.canonical().items() if k not in ("num_clients", "resize")},
                     sort_keys=True, default=str)
    with _LOCK:
        hit = _SCANS.get(key)
    if hit is None:
        hit = _scan(data, y, num_classes, top)
        with _LOCK:
            _SCANS[key] = hit
            while len(_SCANS) > 64:
                _SCANS.popitem(last=False)
    return hit


_SCANS: OrderedDict[str, Served] = OrderedDict()
_LOCK = threading.Lock()  # the app's handlers run in threads


@functools.lru_cache(maxsize=8)
def _labels(dataset: str, root: str | None, content: str | None) -> tuple[np.ndarray, int]:
    """The pool's labels and number of classes, all a scan uses: the pool is loaded once, its images dropped."""
    from ..data.sources import load_pool

    pool = load_pool(dataset, root=root, download=False, resize=None)
    return pool.y, pool.num_classes


def _scan(data: DataConfig, y: np.ndarray, num_classes: int, top: int) -> Served:
    from ..data.federated import split_indices

    probe = data.replace(max_tries=min(data.max_tries, PROBE_TRIES))
    ok, failed, last = [], [], None
    for n in range(LOWEST, top + 1):
        try:
            split_indices(probe.replace(num_clients=n), y)
        except FedalaError as err:
            failed.append(n)
            last = err
            if ok and data.partition == "dirichlet":  # every further failure costs a whole probe
                break
            continue
        ok.append(n)
    if not ok:  # no N works: the split's own reason (e.g. more labels per client than the data has)
        raise last
    why = []
    if data.partition == "pathological" and failed:
        why.append(f"PFLlib's pathological split gives each label to the first ⌈N·{data.classes_per_client}/"
                   f"{num_classes}⌉ clients with a free slot, which leaves a label without a client for "
                   f"N = {spans(n for n in failed if n < ok[-1]) or spans(failed)}")
    elif data.partition == "dirichlet" and ok[-1] < top and isinstance(last, SplitFailed):  # failed at ok[-1] + 1
        why.append(f"Dir({data.beta:g}) cannot give {last.clients} clients at least {last.least} of the "
                   f"{last.samples:,} images each in {last.tries:,} draws")
    elif failed:
        why.append(f"{spans(failed)} clients would leave some without images")
    return Served(tuple(ok), "; ".join(why))
