"""Horizon independence, enforced: round t of a run depends on the earlier rounds only, never on the run's total
``rounds``, so the run store may continue a stored 3-round run to 5 rounds. For every registered algorithm and
every variant (``+ala``, ``-c``) the continued run equals a fresh 5-round run exactly: every recorded number
but wall-clock seconds, every recorded array, and the final engine state (models, buffers, the algorithm's
state). An algorithm that declares ``horizon_free=False`` is never continued (its 5-round run starts afresh)."""

import warnings

import pytest
from conftest import assert_same_stored_run, small_cfg

import fedala_lab as fl
from fedala_lab.algorithms import registry
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore


def _get(cfg, store, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ragged data's client without a batch is announced
        return get_or_run(cfg, store, data=data, progress=False)


def _every_algorithm() -> list[str]:
    import fedala_lab.algorithms  # noqa: F401 - the built-ins are registered on import

    return [n for n in registry.names() if registry.resolve(n).base.builtin]


@pytest.mark.parametrize("algo", _every_algorithm())
def test_a_continued_run_equals_a_fresh_run_of_its_length(algo, ragged, tmp_path):
    cfg = small_cfg(algo=algo, shuffle=True, join_ratio=0.6)
    assert registry.resolve(algo).horizon_free, f"{algo} declares that it reads the run's total rounds"
    continued, fresh = RunStore(tmp_path / "continued"), RunStore(tmp_path / "fresh")
    _get(cfg.replace(rounds=3), continued, ragged)
    longer = _get(cfg.replace(rounds=5), continued, ragged)
    assert longer.meta["branched_from"]["round"] == 3, "the 5-round run did not continue the stored 3 rounds"
    assert_same_stored_run(longer, _get(cfg.replace(rounds=5), fresh, ragged), continued, fresh)


class ToTheEnd(fl.Algorithm):
    """FedAvg whose server step shrinks towards the run's end: it reads ``cfg.rounds``, so it says so."""

    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        w = rnd.t / self.cfg.rounds
        return fl.Aggregated({n: g + w * (mean.params[n] - g) for n, g in rnd.global_params.items()}, mean.bytes)


def test_an_algorithm_that_reads_the_horizon_is_never_continued(ragged, tmp_path):
    fl.register_algorithm("to-the-end", ToTheEnd, horizon_free=False, modifiers=())
    cfg = small_cfg(algo="to-the-end")
    store, fresh = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    _get(cfg.replace(rounds=3), store, ragged)
    longer = _get(cfg.replace(rounds=5), store, ragged)
    assert "branched_from" not in longer.meta
    assert_same_stored_run(longer, _get(cfg.replace(rounds=5), fresh, ragged), store, fresh)


class ReadsRoundsLate(fl.Algorithm):
    """FedAvg that reads ``rnd.cfg.rounds`` only from round 4 on: a 3-round run never read it."""

    def aggregate(self, rnd, senders):
        mean = rnd.weighted_mean(senders)
        w = rnd.t / rnd.cfg.rounds if rnd.t >= 4 else 1.0
        return fl.Aggregated({n: g + w * (mean.params[n] - g) for n, g in rnd.global_params.items()}, mean.bytes)


@pytest.mark.parametrize("undeclared", [ToTheEnd, ReadsRoundsLate])
def test_an_undeclared_read_of_the_horizon_is_noticed(undeclared, ragged, tmp_path):
    """A plugin that reads ``cfg.rounds`` without saying so (horizon_free left True): the store sees the read.
    Read from round 1 (ToTheEnd), its stored run is never continued: the longer run is computed afresh and equals
    a fresh one. Read only after the stored rounds (ReadsRoundsLate), the stored rounds never depended on it:
    continued, and still equal to a fresh run."""
    fl.register_algorithm("undeclared-horizon", undeclared, modifiers=())
    cfg = small_cfg(algo="undeclared-horizon")
    store, fresh = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    short = _get(cfg.replace(rounds=3), store, ragged)
    assert short.meta["reads_horizon"] is (undeclared is ToTheEnd)
    longer = _get(cfg.replace(rounds=5), store, ragged)
    assert ("branched_from" in longer.meta) is (undeclared is ReadsRoundsLate)
    assert longer.meta["reads_horizon"]
    assert_same_stored_run(longer, _get(cfg.replace(rounds=5), fresh, ragged), store, fresh)
