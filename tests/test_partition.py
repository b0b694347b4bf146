"""Partition functions: PFLlib's pat/dir generators as pure functions (fedala_lab.data.partition)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedala_lab.data import partition as P
from fedala_lab.errors import ConfigError, DataError

FAST = settings(max_examples=25, deadline=None)

# 10 classes with uneven sizes (like real datasets), 1,000 samples; fixed so seed tests are meaningful
LABELS = np.repeat(np.arange(10), [120, 80, 100, 90, 110, 95, 105, 100, 85, 115])


def _check_disjoint_complete(parts, n):
    assert all(p.dtype == np.int64 for p in parts)
    allidx = np.concatenate(parts)
    assert len(allidx) == n  # nothing twice …
    assert np.array_equal(np.sort(allidx), np.arange(n))  # … and nothing missing


@st.composite
def label_arrays(draw, min_classes=2, max_classes=8, min_per_class=1, max_per_class=40):
    k = draw(st.integers(min_classes, max_classes))
    sizes = draw(st.lists(st.integers(min_per_class, max_per_class), min_size=k, max_size=k))
    seed = draw(st.integers(0, 2**16))
    y = np.repeat(np.arange(k), sizes)
    return np.random.default_rng(seed).permutation(y)


# ------------------------------------------------------------------------------------------ iid


@FAST
@given(y=label_arrays(), clients=st.integers(1, 12), seed=st.integers(0, 1000))
def test_iid_disjoint_complete_balanced(y, clients, seed):
    clients = min(clients, len(y))
    parts = P.iid(y, clients, np.random.default_rng(seed))
    assert len(parts) == clients
    _check_disjoint_complete(parts, len(y))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_iid_exact_sizes():
    parts = P.iid(LABELS, 3, np.random.default_rng(0))
    assert [len(p) for p in parts] == [334, 333, 333]


# --------------------------------------------------------------------------------- pathological


def _slot_plan(n, k, cpc):
    """PFLlib's candidate choice depends only on the slots, not on randomness: replay it.

    Returns None if some class finds no candidate, else the set of clients that receive a class.
    """
    slots, served = [cpc] * n, set()
    for _ in range(k):
        cand = [c for c in range(n) if slots[c] > 0][:math.ceil(n / k * cpc)]
        if not cand:
            return None
        for c in cand:
            slots[c] -= 1
        served.update(cand)
    return served


@FAST
@given(y=label_arrays(min_per_class=30, max_per_class=60), cpc=st.integers(1, 3),
       clients=st.integers(2, 10), balance=st.booleans(), seed=st.integers(0, 1000))
def test_pathological_properties(y, cpc, clients, balance, seed):
    k = len(np.unique(y))
    cpc = min(cpc, k)
    rng = np.random.default_rng(seed)
    if clients * cpc < k:
        with pytest.raises(ConfigError, match="classes_per_client"):
            P.pathological(y, clients, cpc, rng, balance=balance)
        return
    plan = _slot_plan(clients, k, cpc)
    if plan is None or len(plan) < clients:
        # ≥ 30 samples per class: every chunk is non-empty, so only the slot plan can fail
        with pytest.raises(DataError):
            P.pathological(y, clients, cpc, rng, balance=balance)
        return
    parts = P.pathological(y, clients, cpc, rng, balance=balance)
    assert len(parts) == clients
    _check_disjoint_complete(parts, len(y))
    for p in parts:
        assert len(p) > 0
        assert len(np.unique(y[p])) <= cpc


def test_pathological_paper_setting_two_classes_each():
    # 20 clients x 2 classes over 10 classes: PFLlib gives each class to 4 clients (ceil(20/10*2))
    for balance in (False, True):
        parts = P.pathological(LABELS, 20, 2, np.random.default_rng(1), balance=balance)
        _check_disjoint_complete(parts, len(LABELS))
        label_sets = [tuple(np.unique(LABELS[p])) for p in parts]
        assert all(len(s) == 2 for s in label_sets)
        # client order of PFLlib: class 0 and 1 go to clients 0-3, classes 2 and 3 to clients 4-7, …
        assert label_sets == [(2 * (c // 4), 2 * (c // 4) + 1) for c in range(20)]
        holders = [sum(lab in s for s in label_sets) for lab in range(10)]
        assert holders == [4] * 10


def test_pathological_balanced_equal_shares():
    parts = P.pathological(LABELS, 20, 2, np.random.default_rng(0), balance=True)
    # class 0 (120 samples) is split 30/30/30/30 among clients 0..3, class 1 (80) 20/20/20/20
    for c in range(4):
        counts = np.bincount(LABELS[parts[c]], minlength=10)
        assert counts[0] == 30 and counts[1] == 20
    # class 2 has 100 samples → 25 each for clients 4..7; class 3 (90) → 22, 22, 22, 24
    assert [np.count_nonzero(LABELS[parts[c]] == 3) for c in range(4, 8)] == [22, 22, 22, 24]


def test_pathological_unbalanced_random_sizes_within_pfllib_range():
    parts = P.pathological(LABELS, 20, 2, np.random.default_rng(3))
    # class 0: 120 samples over 4 clients, num_per=30; least_samples defaults to min(40, 1000/20/2)=25,
    # so the first three draw from [max(30/10, 25/10), 30) = [3, 30), the last takes the rest
    sizes = [np.count_nonzero(LABELS[parts[c]] == 0) for c in range(4)]
    assert sum(sizes) == 120
    assert all(3 <= s < 30 for s in sizes[:3])
    assert sizes[3] == 120 - sum(sizes[:3]) > 30


def test_pathological_all_classes_each_is_full_coverage():
    parts = P.pathological(LABELS, 5, 10, np.random.default_rng(0))
    _check_disjoint_complete(parts, len(LABELS))
    assert all(len(np.unique(LABELS[p])) == 10 for p in parts)


def test_pathological_bad_requests():
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="classes_per_client"):
        P.pathological(LABELS, 5, 11, rng)  # more classes per client than classes
    with pytest.raises(ConfigError, match="classes_per_client"):
        P.pathological(LABELS, 3, 2, rng)  # 3 x 2 = 6 slots < 10 classes
    with pytest.raises(ConfigError, match="num_clients"):
        P.pathological(LABELS, 0, 2, rng)
    with pytest.raises(ConfigError, match="num_clients"):
        P.pathological(LABELS, 1001, 2, rng)
    # 5 clients x 1 class over 4 classes: 5 slots >= 4 classes, but PFLlib gives each class to
    # ceil(5/4) = 2 clients, so classes 0, 1, 2 use all five clients and class 3 finds none
    with pytest.raises(DataError, match="no client has a class slot left for label 3"):
        P.pathological(np.repeat(np.arange(4), 50), 5, 1, rng)
    # 25 x 1 over 10 classes: 3 clients per class, classes 0..7 use clients 0..23, class 8 client 24
    with pytest.raises(DataError, match="label 9"):
        P.pathological(LABELS, 25, 1, rng)
    # 30 x 1: exactly 3 clients per class, all served
    parts = P.pathological(LABELS, 30, 1, rng)
    assert all(len(np.unique(LABELS[p])) == 1 for p in parts)


def test_pathological_reports_clients_left_empty():
    # 3 classes of 1 sample each, 3 clients x 3 slots: ceil(3/3*3)=3 candidates per class, but each
    # class has 1 sample, so two clients get nothing
    y = np.array([0, 1, 2])
    with pytest.raises(DataError, match="without samples"):
        P.pathological(y, 3, 3, np.random.default_rng(0))


# ------------------------------------------------------------------------------------ dirichlet


@FAST
@given(y=label_arrays(min_per_class=10, max_per_class=60), clients=st.integers(1, 8),
       beta=st.sampled_from([0.1, 0.5, 1.0, 10.0]), seed=st.integers(0, 1000))
def test_dirichlet_properties(y, clients, beta, seed):
    least = P.default_least_samples(len(y), clients)
    try:
        parts = P.dirichlet(y, clients, beta, np.random.default_rng(seed), max_tries=200)
    except DataError as err:
        # a few skewed draws on tiny pools cannot reach the minimum: then the error says so
        msg = str(err)
        assert "after 200 draws" in msg and f"least_samples={least}" in msg
        best = int(msg.split("at best ")[1].split()[0])
        assert best < least
        return
    assert len(parts) == clients
    _check_disjoint_complete(parts, len(y))
    assert min(len(p) for p in parts) >= least


@FAST
@given(y=label_arrays(min_classes=5, max_classes=8, min_per_class=40, max_per_class=60),
       clients=st.integers(1, 4), seed=st.integers(0, 1000))
def test_dirichlet_moderate_beta_always_succeeds(y, clients, seed):
    parts = P.dirichlet(y, clients, 1.0, np.random.default_rng(seed))
    _check_disjoint_complete(parts, len(y))
    assert min(len(p) for p in parts) >= P.default_least_samples(len(y), clients)


@FAST
@given(seed=st.integers(0, 2**31), least=st.integers(1, 25))
def test_dirichlet_least_samples_respected(seed, least):
    parts = P.dirichlet(LABELS, 20, 0.5, np.random.default_rng(seed), least_samples=least)
    _check_disjoint_complete(parts, len(LABELS))
    assert min(len(p) for p in parts) >= least


def test_dirichlet_small_beta_is_skewed():
    parts = P.dirichlet(LABELS, 10, 0.1, np.random.default_rng(1))
    n_labels = [len(np.unique(LABELS[p])) for p in parts]
    # Dir(0.1) concentrates each class on few clients: clients see far fewer than 10 labels on average
    assert np.mean(n_labels) < 6
    # Dir(100) is close to IID: clients see (nearly) all 10 labels; only the capacity rule (a full
    # client gets no more) can keep the last class from a client
    parts = P.dirichlet(LABELS, 20, 100.0, np.random.default_rng(1))
    assert min(len(np.unique(LABELS[p])) for p in parts) >= 9
    assert np.mean([len(np.unique(LABELS[p])) for p in parts]) > 9.5


def test_dirichlet_capacity_rule():
    # a client that already holds >= N/num_clients gets no more: nobody exceeds cap + one class
    parts = P.dirichlet(LABELS, 10, 0.1, np.random.default_rng(7))
    cap = len(LABELS) / 10
    assert max(len(p) for p in parts) <= cap + max(np.bincount(LABELS))


def test_dirichlet_impossible_request_fails_fast():
    digits_like = np.repeat(np.arange(10), 180)[:1797]
    with pytest.raises(DataError) as e:
        P.dirichlet(digits_like, 500, 0.1, np.random.default_rng(0), least_samples=40)
    msg = str(e.value)
    assert "500 clients" in msg and "least_samples=40" in msg and "1797" in msg
    assert "fewer clients" in msg


def test_dirichlet_unreachable_request_bounded_by_max_tries():
    with pytest.raises(DataError) as e:
        P.dirichlet(LABELS, 20, 0.01, np.random.default_rng(0), least_samples=49, max_tries=50)
    msg = str(e.value)
    assert "after 50 draws" in msg and "least_samples=49" in msg
    assert "larger beta" in msg and "smaller least_samples" in msg
    assert "at best" in msg


def test_dirichlet_bad_input():
    rng = np.random.default_rng(0)
    for beta in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="beta"):
            P.dirichlet(LABELS, 5, beta, rng)
    with pytest.raises(ConfigError, match="num_clients"):
        P.dirichlet(LABELS, 0, 0.1, rng)
    with pytest.raises(ConfigError, match="num_clients"):
        P.dirichlet(LABELS, 1001, 0.1, rng)
    with pytest.raises(ConfigError, match="least_samples"):
        P.dirichlet(LABELS, 5, 0.1, rng, least_samples=0)
    with pytest.raises(ConfigError, match="max_tries"):
        P.dirichlet(LABELS, 5, 0.1, rng, max_tries=0)
    with pytest.raises(ConfigError, match="labels"):
        P.dirichlet(np.zeros((3, 3), np.int64), 2, 0.1, rng)


def test_default_least_samples():
    assert P.default_least_samples(70_000, 20) == 40
    assert P.default_least_samples(1797, 20) == 40  # 1797/20/2 = 44.9
    assert P.default_least_samples(1797, 50) == 17  # 1797/50/2 = 17.97 → 17
    assert P.default_least_samples(10, 20) == 1
    with pytest.raises(ConfigError, match="num_clients"):
        P.default_least_samples(10, 0)


# ------------------------------------------------------------------------------- reproducibility


@pytest.mark.parametrize("make", [
    lambda rng: P.iid(LABELS, 7, rng),
    lambda rng: P.pathological(LABELS, 20, 2, rng),
    lambda rng: P.pathological(LABELS, 20, 2, rng, balance=True),
    lambda rng: P.dirichlet(LABELS, 10, 0.1, rng),
    lambda rng: P.split_train_test(P.iid(LABELS, 4, rng), 0.75, rng)[0],
], ids=["iid", "pat", "pat-balanced", "dir", "train-test"])
def test_same_seed_same_split_other_seed_other_split(make):
    a = make(np.random.default_rng(42))
    b = make(np.random.default_rng(42))
    c = make(np.random.default_rng(43))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@settings(max_examples=10, deadline=None)
@given(a=st.integers(0, 2**32 - 1), b=st.integers(0, 2**32 - 1),
       kind=st.sampled_from(["iid", "pat", "dir"]))
def test_seed_property(a, b, kind):
    make = {
        "iid": lambda rng: P.iid(LABELS, 5, rng),
        "pat": lambda rng: P.pathological(LABELS, 10, 2, rng),
        "dir": lambda rng: P.dirichlet(LABELS, 5, 0.3, rng),
    }[kind]
    first, again = make(np.random.default_rng(a)), make(np.random.default_rng(a))
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    if a != b:
        other = make(np.random.default_rng(b))
        assert not all(np.array_equal(x, y) for x, y in zip(first, other))


def test_int_seed_accepted_and_equal_to_generator():
    a = P.dirichlet(LABELS, 10, 0.5, 5)
    b = P.dirichlet(LABELS, 10, 0.5, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ConfigError, match="rng"):
        P.iid(LABELS, 2, np.random.RandomState(0))


# ------------------------------------------------------------------------------- train/test split


@FAST
@given(sizes=st.lists(st.integers(1, 200), min_size=1, max_size=10),
       ratio=st.floats(0.05, 0.95), seed=st.integers(0, 1000))
def test_split_train_test_properties(sizes, ratio, seed):
    offsets = np.cumsum([0] + sizes)
    parts = [np.arange(offsets[i], offsets[i + 1]) for i in range(len(sizes))]
    train, test = P.split_train_test(parts, ratio, np.random.default_rng(seed))
    for part, tr, te in zip(parts, train, test):
        assert tr.dtype == np.int64 and te.dtype == np.int64
        assert np.array_equal(np.sort(np.concatenate([tr, te])), part)
        n = len(part)
        if n >= 2:
            assert len(tr) >= 1 and len(te) >= 1
            assert len(tr) == min(max(math.floor(ratio * n), 1), n - 1)
        else:
            assert len(tr) == 1 and len(te) == 0


def test_split_train_test_matches_sklearn_counts():
    # PFLlib's sklearn train_test_split(train_size=0.75): floor(0.75 n) train (as in the shared data:
    # client 16 of the MNIST partition holds 3,628 samples → 2,721 train / 907 test)
    parts = [np.arange(3628), np.arange(499), np.arange(5), np.arange(2)]
    train, test = P.split_train_test(parts, 0.75, np.random.default_rng(0))
    assert [len(t) for t in train] == [2721, 374, 3, 1]
    assert [len(t) for t in test] == [907, 125, 2, 1]
    # shuffled, not a prefix
    assert not np.array_equal(np.sort(train[0]), np.arange(2721))


def test_split_train_test_bad_ratio():
    for ratio in (0, 1, 1.5, -0.1, True):
        with pytest.raises(ConfigError, match="train_ratio"):
            P.split_train_test([np.arange(10)], ratio, np.random.default_rng(0))
