"""Test AUC as the FedALA reference code reports it beside accuracy, for many clients at once.

The official FedALA code (``clientALA.test_metrics``) scores each client with scikit-learn's
``roc_auc_score(one_hot(y), softmax(logits), average="micro")``: every (row, class) pair of the client's test
split is one binary example, positive where the class is the row's label, scored by its softmax probability.
The server averages the clients' AUCs weighted by their test samples. The micro-averaged AUC is the
Mann–Whitney statistic of those pairs, which :func:`micro_auc` computes from ranks (ties share their mean
rank, as the trapezoidal ROC area counts a tie one half): one sort for every client together, instead of a
scikit-learn call per client per round. It equals scikit-learn's value to float64 rounding (tested).
"""

from __future__ import annotations

import numpy as np


def micro_auc(probs: np.ndarray, labels: np.ndarray, groups: np.ndarray, num_groups: int) -> np.ndarray:
    """Each group's micro-averaged ROC AUC (a fraction in [0, 1]; NaN for a group without rows, or with one
    class only).

    ``probs`` (n, C): the rows' class scores; ``labels`` (n,): their classes in 0 … C − 1; ``groups`` (n,): the
    group (client) each row belongs to, in 0 … ``num_groups`` − 1."""
    probs = np.asarray(probs, dtype=np.float64)
    n, c = probs.shape
    out = np.full(num_groups, np.nan)
    if not n or c < 2:
        return out
    score = probs.reshape(-1)
    group = np.repeat(np.asarray(groups, dtype=np.int64), c)
    positive = np.zeros((n, c), dtype=bool)
    positive[np.arange(n), np.asarray(labels, dtype=np.int64)] = True
    positive = positive.reshape(-1)
    order = np.lexsort((score, group))  # by group, then by score
    s, g, pos = score[order], group[order], positive[order]
    # runs of equal (group, score): each element's rank within its group is its run's mean position
    new_run = np.ones(len(s), dtype=bool)
    new_run[1:] = (s[1:] != s[:-1]) | (g[1:] != g[:-1])
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.append(starts[1:], len(s))
    group_start = np.searchsorted(g, np.arange(num_groups))
    mean_rank = (starts + ends - 1) / 2.0 + 1.0 - group_start[g[starts]]  # 1-based, within the group
    rank = mean_rank[run_id]
    pos_count = np.bincount(g, weights=pos, minlength=num_groups)
    total = np.bincount(g, minlength=num_groups).astype(np.float64)
    neg_count = total - pos_count
    rank_sum = np.bincount(g, weights=np.where(pos, rank, 0.0), minlength=num_groups)
    ok = (pos_count > 0) & (neg_count > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - pos_count * (pos_count + 1) / 2.0) / (pos_count * neg_count)
    out[ok] = auc[ok]
    return out


__all__ = ["micro_auc"]
