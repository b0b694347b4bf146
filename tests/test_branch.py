"""Branch instead of re-running: a run that equals a stored one through round K starts from its state at K
(docs/design.md#run-store). Every branched run must equal the same run computed from scratch: the tables
(all columns but wall-clock seconds), the recorded arrays and the final models, bit for bit."""

import pytest
from conftest import assert_same_stored_run, small_cfg

from fedala_lab.errors import RunCancelled
from fedala_lab.experiments.prefix import base_through, prefix_key, refusal
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore


def _get(cfg, store, data, **kw):
    return get_or_run(cfg, store, data=data, progress=False, **kw)


@pytest.fixture
def stores(tmp_path):
    return RunStore(tmp_path / "branched"), RunStore(tmp_path / "scratch")


def test_extending_a_run_continues_from_its_last_round(ragged, stores):
    st, scratch = stores
    cfg = small_cfg(algo="fedala", shuffle=True, join_ratio=0.6, s=60, snapshot_clients="1", track_clients="0,2")
    _get(cfg.replace(rounds=3), st, ragged)
    rounds_run = []
    longer = _get(cfg.replace(rounds=6), st, ragged, callback=lambda sim, row: rounds_run.append(row["round"]))
    assert rounds_run == [4, 5, 6] and longer.meta["branched_from"]["round"] == 3
    assert longer.meta["branched_from"]["run"] == st.dir_for(cfg.replace(rounds=3)).name
    assert_same_stored_run(longer, _get(cfg.replace(rounds=6), scratch, ragged), st, scratch)


@pytest.mark.parametrize("base", ["fedavg", "fedprox"])
def test_fig4_ala_after_k_branches_from_the_base_run_at_k(base, ragged, stores):
    """FedALA(ala_after=K) is FedAvg through round K (FedProx+ALA is FedProx): it starts from the base run's
    state kept at K, and ALA's start phase happens in round K + 1 as from scratch."""
    st, scratch = stores
    algo = "fedala" if base == "fedavg" else "fedprox+ala"
    plain = small_cfg(algo=base, rounds=5, keep_states="2", snapshot_clients="3", snapshot_from=2)
    _get(plain, st, ragged)
    ala = plain.replace(algo=algo, ala_after=2, rounds=6, snapshot_from=2, keep_states="last")
    run = _get(ala, st, ragged)
    assert run.meta["branched_from"] == {"run": st.dir_for(plain).name, "round": 2,
                                         "seconds": run.meta["branched_from"]["seconds"]}
    assert run.ala["round"].min() == 3 and run.ala.groupby("client")["start_phase"].sum().min() > 1
    assert_same_stored_run(run, _get(ala, scratch, ragged), st, scratch)


def test_ala_after_sweep_shares_the_rounds_before_the_smaller_k(ragged, stores):
    """FedALA(ala_after=K1) and FedALA(ala_after=K2), any s, equal FedAvg through min(K1, K2)."""
    st, scratch = stores
    first = small_cfg(algo="fedala", ala_after=3, rounds=5, keep_states="2,3")
    _get(first, st, ragged)
    for k2, s, t in ((2, 60.0, 2), (4, 80.0, 3)):
        other = first.replace(ala_after=k2, s=s, rounds=6, keep_states="last")
        assert base_through(other) == k2
        run = _get(other, st, ragged)
        assert run.meta["branched_from"]["round"] == t
        assert_same_stored_run(run, _get(other, scratch, ragged), st, scratch)


def test_a_branched_run_resumes_from_its_own_checkpoint(ragged, stores):
    st, scratch = stores
    cfg = small_cfg(algo="fedala", shuffle=True, checkpoint_every=1, keep_states="2,5")
    _get(cfg.replace(rounds=3), st, ragged)

    def stop_after_4(sim, row):
        return row["round"] < 4

    with pytest.raises(RunCancelled):
        _get(cfg.replace(rounds=6), st, ragged, callback=stop_after_4)
    assert st.checkpoint_for(cfg.replace(rounds=6)).is_file()
    seen = []
    resumed = _get(cfg.replace(rounds=6), st, ragged, callback=lambda sim, row: seen.append(row["round"]))
    assert seen == [5, 6] and resumed.meta["branched_from"]["round"] == 3  # the checkpoint (round 4) won
    assert_same_stored_run(resumed, _get(cfg.replace(rounds=6), scratch, ragged), st, scratch)
    # kept states: round 2 inherited from the 3-round run it extends, round 5 its own, round 6 the last
    assert sorted(st.states(resumed.path)) == [2, 5, 6]
    assert not list((st.root / ".checkpoints").glob("*.pt"))


def test_what_may_not_be_branched_from_is_computed_from_scratch(ragged, stores):
    st, _ = stores
    plain = small_cfg(algo="fedavg", rounds=4, keep_states="2,3", eval_every=2, record_train_loss=False)
    stored = _get(plain, st, ragged)
    # snapshots asked for before the branch round, never recorded: refused
    snap = plain.replace(algo="fedala", ala_after=2, rounds=5, snapshot_clients="1")
    assert "snapshot" in refusal(plain, 2, snap)
    # train-split losses asked for, not recorded: refused
    assert "record_train_loss" in refusal(plain, 2, plain.replace(rounds=6, record_train_loss=True))
    # round 4 is the stored run's last (evaluated) but not on the grid 1, 3, 5 of a 6-round run
    longer = plain.replace(rounds=6)
    assert "evaluated" in refusal(plain, 4, longer) and not refusal(plain, 3, longer)
    assert _get(longer, st, ragged).meta["branched_from"]["round"] == 3
    # ALA has run by round 3 of FedALA(ala_after=2): not FedAvg's any more
    assert prefix_key(plain, 3) != prefix_key(plain.replace(algo="fedala", ala_after=2), 3)
    assert prefix_key(plain, 2) == prefix_key(plain.replace(algo="fedala", ala_after=2, s=5.0, p=1), 2)
    # ALA only for the selected clients, half of them selected: the others keep their models, unlike FedAvg
    assert base_through(plain.replace(algo="fedala", ala_all_clients=False, join_ratio=0.6)) == 0
    run = _get(snap, st, ragged)
    assert "branched_from" not in run.meta
    # force recomputes from round 1
    assert "branched_from" not in _get(longer, st, ragged, force=True).meta
    assert stored.path.is_dir()


def test_a_damaged_kept_state_is_skipped(ragged, stores):
    st, scratch = stores
    cfg = small_cfg(algo="fedavg", rounds=3)
    run = _get(cfg, st, ragged)
    state = st.states(run.path)[3]
    state.write_bytes(state.read_bytes()[:-10] + b"0123456789")
    with pytest.warns(UserWarning, match="cannot branch"):
        longer = _get(cfg.replace(rounds=4), st, ragged)
    assert "branched_from" not in longer.meta and st.has(cfg)  # the run itself is intact
    assert_same_stored_run(longer, _get(cfg.replace(rounds=4), scratch, ragged), st, scratch)


def _ala_bases():
    from fedala_lab.experiments.plans import PAPER_METHODS, with_ala

    pairs = with_ala(PAPER_METHODS)
    return [(a, b) for a, b in zip(pairs[::2], pairs[1::2]) if a not in ("fedavg", "fedprox")]


@pytest.mark.parametrize(("base", "algo"), _ala_bases())
def test_each_pfl_method_with_ala_branches_from_its_round_1(base, algo, ragged, stores):
    """X+ALA is X through round 1 for every method of the paper's Table 4 (the mnist-pfl plan keeps X's
    round 1 so that X+ALA starts there, in PFLlib's data order): the branched run equals X+ALA computed from
    scratch, bit for bit."""
    st, scratch = stores
    plain = small_cfg(algo=base, rounds=3, keep_states="1", shuffle=True)
    _get(plain, st, ragged)
    ala = plain.replace(algo=algo, keep_states="last")
    run = _get(ala, st, ragged)
    assert run.meta["branched_from"]["round"] == 1
    assert_same_stored_run(run, _get(ala, scratch, ragged), st, scratch)
