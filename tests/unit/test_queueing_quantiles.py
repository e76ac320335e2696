"""Quantiles of ``W + S`` (a discrete shift plus an exponential wait that a share of the points has).

The closed forms are checked against the CDF itself (the quantile is the first point where it reaches q),
against scipy's root finder where the CDF is continuous, and the recurrence behind them against a direct
sum. A row's answer must not depend on the rows computed beside it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from planner.serving import queueing as Q


def _cdf(t: float, s: np.ndarray, w: np.ndarray, p: np.ndarray, theta: np.ndarray) -> float:
    w = w / w.sum()
    return float(np.sum(w * (t >= s) * (1.0 - p * np.exp(-np.maximum(t - s, 0.0) / theta))))


def _law(rng: np.random.Generator, m: int, share_waiting: float) -> tuple[np.ndarray, ...]:
    s = rng.lognormal(-2.0, 1.2, m) * rng.choice([1.0, 10.0])
    if rng.uniform() < 0.3:
        s = np.round(s, 2)  # ties
    w = rng.uniform(0.01, 1.0, m)
    waits = rng.uniform(size=m) < share_waiting
    p = np.where(waits, rng.uniform(0.01, 0.995), 0.0)
    mean = np.where(waits, rng.lognormal(-3.0, 2.0), 0.0)
    return s, w, p, mean


def _check_is_quantile(x: float, q: float, s: np.ndarray, w: np.ndarray, p: np.ndarray, theta: np.ndarray,
                       resolution: float) -> None:
    assert _cdf(x * (1 + 1e-12) + 1e-15, s, w, p, theta) >= q - 1e-9
    assert _cdf(x - resolution, s, w, p, theta) < q + 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_one_waiting_regime_is_solved_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        s, w, p, mean = _law(rng, int(rng.integers(1, 90)), rng.uniform(0.2, 1.0))
        theta = np.where(p > 0, mean / np.where(p > 0, p, 1.0), 1.0)
        q = np.array([0.5, 0.9, 0.99, rng.uniform(0.01, 0.999)])
        x = Q.quantiles_of_shifted_wait(s, w, p_wait=p, mean_wait_s=mean, quantiles=q)
        span = float(np.ptp(s) + theta.max() * 10.0)
        for xi, qi in zip(x, q, strict=True):
            # exact to rounding: a millionth of the range below it, the CDF is short of q
            _check_is_quantile(float(xi), float(qi), s, w, p, theta, 1e-7 * span)
            if xi not in s:  # inside a continuous piece: the root of F(t) = q
                law = (s, w, p, theta)
                root = brentq(lambda t, qi=qi, law=law: _cdf(t, *law) - qi, float(s.min()), float(s.max()) + span)
                assert xi == pytest.approx(root, rel=1e-9, abs=1e-12 * span)
        assert np.all(np.diff(x[np.argsort(q)]) >= 0)


def test_two_waiting_regimes_keep_the_grid_search_within_its_resolution() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        m = int(rng.integers(4, 60))
        s, w, _, _ = _law(rng, m, 1.0)
        half = np.arange(m) < m // 2
        p = np.where(half, 0.4, 0.8)
        mean = np.where(half, 0.02, 0.3)  # two tails: 0.05 s and 0.375 s
        theta = mean / p
        q = np.array([0.5, 0.9, 0.99])
        x = Q.quantiles_of_shifted_wait(s, w, p_wait=p, mean_wait_s=mean, quantiles=q)
        span = float(np.ptp(s) + theta.max() * (np.log(100.0) + 1.0))
        for xi, qi in zip(x, q, strict=True):
            _check_is_quantile(float(xi), float(qi), s, w, p, theta, 1e-5 * span)


def test_the_recurrence_matches_a_direct_sum_and_does_not_depend_on_the_rows_beside_it() -> None:
    rng = np.random.default_rng(3)
    m = 40
    w = rng.uniform(0.0, 1.0, (20, m))
    decay = np.exp(-rng.exponential(0.5, (20, m - 1)))
    wide = Q._decayed_mass(w, decay)  # more rows than SCALAR_RECURRENCE_ROWS: the column loop
    assert w.shape[0] > Q.SCALAR_RECURRENCE_ROWS
    for r in range(3):
        alone = Q._decayed_mass(w[r:r + 1], decay[r:r + 1])  # one row: the scalar loop
        assert np.array_equal(alone[0], wide[r])  # bit for bit
        log_decay = np.concatenate([[0.0], np.cumsum(np.log(decay[r]))])
        direct = [np.sum(w[r, :k + 1] * np.exp(log_decay[k] - log_decay[:k + 1])) for k in range(m)]
        assert np.allclose(wide[r], direct, rtol=1e-12, atol=0.0)


def test_rows_are_answered_the_same_alone_and_in_a_batch() -> None:
    rng = np.random.default_rng(11)
    n, m = 16, 64
    s = rng.lognormal(-2.0, 1.0, (n, m))
    w = rng.uniform(0.1, 1.0, m)
    p = rng.uniform(0.0, 0.99, n)
    mean = rng.lognormal(-3.0, 1.0, n) * p
    q = [0.5, 0.9, 0.99]
    batch = Q.shifted_wait_quantiles_rows(s, w, p, mean, q)
    for r in (0, 5, 15):
        alone = Q.shifted_wait_quantiles_rows(s[r:r + 1], w, p[r:r + 1], mean[r:r + 1], q)
        assert np.array_equal(alone[0], batch[r])
