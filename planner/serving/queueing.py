"""Queueing approximations used by the serving model, each with its reference.

- G/G/1 mean wait, Kingman's formula: ``Wq ≈ ρ/(1−ρ) · (c_a² + c_s²)/2 · E[S]`` (Kingman, "The single
  server queue in heavy traffic", Proc. Camb. Phil. Soc. 57, 1961); exact (Pollaczek–Khinchine) for M/G/1.
- G/G/c mean wait, Allen–Cunneen: ``Wq ≈ C(c, a)/(cμ − λ) · (c_a² + c_s²)/2`` with ``C`` the Erlang-C
  probability of waiting (Allen, "Probability, Statistics and Queueing Theory", 1990, Sec. 6.5).
- Closed loops: mean-value analysis of one FCFS queue and a delay station (Reiser and Lavenberg, J. ACM
  27(2), 1980), with the residual-service correction for general service times (Reiser, "A queueing
  network analysis of computer communication networks with window flow control", IEEE Trans. Commun.
  27(8), 1979) and c servers as one c-times faster server plus a delay of (c − 1)/c of a service
  (Seidmann, Schweitzer and Shalev-Oren, Performance Evaluation 7(4), 1987).
- Wait-time distribution: an atom at zero (no wait) and an exponential tail, ``P(W > t) = P_w ·
  exp(−t · P_w / Wq)`` — exact for M/M/c, the heavy-traffic limit for G/G/1 (Kingman 1961), and the
  standard two-moment approximation otherwise (Whitt, "Approximations for the GI/G/m queue", 1993).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, special

from planner.serving.grids import broadcast_view

FloatArray = NDArray[np.float64]


#: Brent's tolerances on a closed loop's throughput (``scipy.optimize.brentq``: absolute, as a share of the
#: bracket's top, and relative), for every closed-loop root of the serving models
ROOT_XTOL, ROOT_RTOL = 1e-12, 1e-11


def root_on_curve(excess: Callable[[float], float], rates: FloatArray, levels: FloatArray, target: float,
                  guess: float, raw: FloatArray | None = None) -> float:
    """The rate where a closed loop's population λ·E[e2e](λ) reaches ``target`` clients, by Brent's method:
    ``excess(λ)`` is that population less the target at one rate; ``levels`` its running maximum over the
    increasing ``rates`` of a curve already computed (``raw``: the curve itself, when ``excess`` at a curve
    rate is exactly ``raw − target``, which saves evaluating it there). The bracket is the two curve rates
    around the target, widened along the curve until ``excess`` itself straddles zero; ``guess`` when it
    never does (a curve whose population falls back, which the running maximum hides)."""
    if raw is not None:
        def excess_at(j: int) -> float:
            return float(raw[j]) - target
    else:
        def excess_at(j: int) -> float:
            return excess(float(rates[j]))
    i = int(np.searchsorted(levels, target))
    lo_i, hi_i = max(i - 1, 0), min(i, rates.size - 1)
    lo, hi = (float(rates[lo_i]) if i > 0 else 0.0), float(rates[hi_i])
    f_lo = excess_at(lo_i) if lo > 0 else -target
    f_hi = excess_at(hi_i)
    while f_lo > 0 and lo_i > 0:
        lo_i -= 1
        lo = float(rates[lo_i])
        f_lo = excess_at(lo_i)
    while f_hi < 0 and hi_i < rates.size - 1:
        hi_i += 1
        hi = float(rates[hi_i])
        f_hi = excess_at(hi_i)
    if not (f_lo <= 0.0 <= f_hi) or lo >= hi:
        return guess
    return float(optimize.brentq(excess, lo, hi, xtol=ROOT_XTOL * hi, rtol=ROOT_RTOL))


def erlang_c_servers(
    servers: NDArray[np.intp] | FloatArray,
    offered_load: ArrayLike,
    *,
    log_factorial: FloatArray | float | None = None,
) -> FloatArray:
    """Erlang-C probability of waiting for arrays of server counts ``c`` and offered loads ``a = λ/μ``
    (broadcast): 0 where ``a ≤ 0``, 1 where ``a ≥ c``.

    Through Erlang B, which is a ratio of Poisson terms: ``B(c, a) = pmf(c; a) / cdf(c; a)`` (Jagerman,
    "Some properties of the Erlang loss function", Bell Syst. Tech. J. 53, 1974), and
    ``C = B / (1 − (a/c)(1 − B))`` (the standard Erlang B–C relation): one special-function call per
    element instead of a sum over ``c`` terms (a decode pool's slot queue has hundreds of servers).
    ``log_factorial``: ``log c!`` (:func:`log_factorial`) of the broadcast server counts, from a caller that
    asks about the same servers many times."""
    c, a = np.broadcast_arrays(np.asarray(servers, dtype=np.float64),
                               np.asarray(offered_load, dtype=np.float64))
    a_safe = np.maximum(a, 1e-300)
    log_c_factorial = special.gammaln(c + 1.0) if log_factorial is None else log_factorial
    log_pmf = c * np.log(a_safe) - a_safe - log_c_factorial
    b = np.minimum(np.exp(log_pmf) / np.maximum(special.pdtr(c, a_safe), 1e-300), 1.0)
    out = b / np.maximum(1.0 - a_safe / np.maximum(c, 1e-300) * (1.0 - b), 1e-300)
    return np.where(a <= 0, 0.0, np.where(a >= c, 1.0, np.minimum(out, 1.0)))


def log_factorial(servers: NDArray[np.intp] | FloatArray) -> FloatArray:
    """``log c!`` of server counts, as :func:`erlang_c_servers` computes it (``gammaln(c + 1)``)."""
    return special.gammaln(np.asarray(servers, dtype=np.float64) + 1.0)


def erlang_c(servers: float, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``a = λ/μ`` offered load (``servers``
    rounded to a whole count of at least 1): :func:`erlang_c_servers` for one queue."""
    c = max(1, int(round(servers)))
    a = float(offered_load)
    if a <= 0.0:
        return 0.0
    if a >= c:
        return 1.0
    pmf = math.exp(c * math.log(a) - a - math.lgamma(c + 1.0))
    b = min(pmf / max(float(special.pdtr(c, a)), 1e-300), 1.0)
    return min(b / max(1.0 - a / c * (1.0 - b), 1e-300), 1.0)


def ggc_wait(
    *, arrival_rate_per_s: float, servers: float, service_mean_s: float, service_scv: float, arrival_scv: float = 1.0
) -> tuple[float, float, float]:
    """Allen–Cunneen G/G/c: (mean wait [s], probability of waiting, utilization ρ = λE[S]/c).

    Returns an infinite wait and probability 1 when ρ ≥ 1 (the queue grows without bound).
    """
    lam, c, s = float(arrival_rate_per_s), float(servers), float(service_mean_s)
    rho = lam * s / c if c > 0 else np.inf
    if lam <= 0 or s <= 0:
        return 0.0, 0.0, 0.0 if lam <= 0 else rho
    if rho >= 1.0:
        return float("inf"), 1.0, rho
    p_wait = erlang_c(c, lam * s)
    wq = p_wait / (c / s - lam) * (arrival_scv + service_scv) / 2.0
    return float(wq), float(p_wait), float(rho)


#: Newton steps of :func:`gamma_arrival_root` at most (from below it climbs monotonically; ~8 at ρ = 0.5,
#: more near ρ = 1 where the root nears the second one at σ = 1)
GIM1_NEWTON_STEPS = 60


def gamma_arrival_root(rho: ArrayLike, arrival_scv: float) -> FloatArray:
    """σ of a GI/M/1 queue with gamma inter-arrival times (squared CV ``arrival_scv``, shape k = 1/c²) at
    utilization ``rho``: the root in (0, 1) of σ = A*(μ(1 − σ)), A*(s) = (1 + s/(kλ))^(−k) the arrival law's
    Laplace transform (Kleinrock, "Queueing Systems" Vol. 1, 1975, Sec. 6.4). An arrival waits with
    probability σ, and then for an exponential time of mean E[S]/(1 − σ). σ = ρ for Poisson arrivals; the
    root is found by Newton's method from A*(μ), below it, where the steps rise monotonically (σ − A*
    is concave). NaN where ρ is not in (0, 1)."""
    r = np.asarray(rho, dtype=np.float64)
    if abs(arrival_scv - 1.0) <= 1e-12:
        return np.where((r > 0) & (r < 1), r, np.nan)
    k = 1.0 / max(arrival_scv, 1e-6)
    ok = (r > 0) & (r < 1)
    kr = k * np.where(ok, r, 0.5)
    sigma = np.zeros_like(kr)
    for _ in range(GIM1_NEWTON_STEPS):
        base = 1.0 + (1.0 - sigma) / kr
        a = base ** (-k)
        step = (sigma - a) / (1.0 - a / (base * kr) * k)
        sigma = np.minimum(sigma - step, 1.0 - 1e-15)
        if np.all(np.abs(step) <= 1e-13):
            break
    return np.where(ok, sigma, np.nan)


def busy_seen_by_arrivals(rho: ArrayLike, arrival_scv: float) -> FloatArray:
    """The share of arrivals that find a server of utilization ``rho`` busy: the GI/M/1 σ of
    :func:`gamma_arrival_root` for gamma arrivals of squared CV ``arrival_scv`` (PASTA's ρ for Poisson
    ones, and where σ is not defined, ρ ∉ (0, 1))."""
    r = np.asarray(rho, dtype=np.float64)
    sigma = gamma_arrival_root(r, arrival_scv)
    return np.where(np.isnan(sigma), r, sigma)


def renewal_wait_factors(rho: ArrayLike, arrival_scv: float) -> tuple[FloatArray, FloatArray]:
    """(wait factor, waiting-probability factor) that take a Kingman / Allen–Cunneen wait at utilization
    ``rho`` under renewal (gamma) arrivals of squared CV ``arrival_scv`` to the GI/M/1 interpolation

        W = σ / (1 − σ) · (c_a² + c_s²) / (c_a² + 1) · E[S],    P(wait) = σ

    (σ of :func:`gamma_arrival_root`), which is exact for M/G/1 (σ = ρ: Pollaczek–Khinchine) and for GI/M/1
    (c_s² = 1), where Kingman's heavy-traffic form, ρ / (1 − ρ) · (c_a² + c_s²) / 2 · E[S], is exact only as
    ρ → 1. Gamma arrivals of c = 2 at ρ = 0.5 wait 3.35 E[S] in GI/M/1, Kingman's 2.5; of c = 0.5, 0.43 and
    0.63. Both factors are 1 for Poisson arrivals; NaN outside 0 < ρ < 1."""
    r = np.asarray(rho, dtype=np.float64)
    if abs(arrival_scv - 1.0) <= 1e-12:
        one = np.ones_like(r)
        return one, one
    sigma = gamma_arrival_root(r, arrival_scv)
    with np.errstate(divide="ignore", invalid="ignore"):
        kingman = r / (1.0 - r) * (arrival_scv + 1.0) / 2.0
        return sigma / (1.0 - sigma) / kingman, sigma / r


def erlang_c_array(servers: float, offered_load: ArrayLike) -> FloatArray:
    """Vectorized :func:`erlang_c` over offered loads (one server count)."""
    c = max(1, int(round(servers)))
    return erlang_c_servers(np.float64(c), np.atleast_1d(np.asarray(offered_load, dtype=np.float64)),
                            log_factorial=math.lgamma(c + 1.0))


def ggc_wait_array(
    *, arrival_rate_per_s: ArrayLike, servers: float, service_mean_s: ArrayLike, service_scv: float,
    arrival_scv: float = 1.0,
) -> tuple[FloatArray, FloatArray]:
    """Vectorized Allen–Cunneen over arrival rates (and service means, one per rate or one for all): (mean
    wait [s], probability of waiting); inf at ρ ≥ 1, nothing where the service takes no time."""
    lam = np.atleast_1d(np.asarray(arrival_rate_per_s, dtype=np.float64))
    if lam.size == 1 and np.size(service_mean_s) == 1:
        # one queue: the scalar formulas (~10 µs; the array path's handling costs ~80 µs, and a closed
        # loop's root asks for a dozen of these one at a time), the same values to the last few bits
        wq1, p1, _ = ggc_wait(arrival_rate_per_s=float(lam.flat[0]), servers=max(1, int(round(servers))),
                              service_mean_s=float(np.asarray(service_mean_s).flat[0]),
                              service_scv=service_scv, arrival_scv=arrival_scv)
        return np.full(lam.shape, wq1), np.full(lam.shape, p1)
    c = float(max(1, int(round(servers))))
    s = np.broadcast_to(np.asarray(service_mean_s, dtype=np.float64), lam.shape)
    serves = s > 0
    s_safe = np.where(serves, s, 1.0)
    p_wait = np.where(serves, erlang_c_array(c, lam * np.where(serves, s, 0.0)), 0.0)
    spare = c / s_safe - lam
    wq = np.where(spare > 0, p_wait / np.where(spare > 0, spare, 1.0) * (arrival_scv + service_scv) / 2.0, np.inf)
    return np.where((lam > 0) & serves, wq, 0.0), p_wait


def quantiles_of_shifted_wait(
    shifts_s: ArrayLike, weights: ArrayLike, *, p_wait: ArrayLike, mean_wait_s: ArrayLike, quantiles: ArrayLike
) -> FloatArray:
    """Quantiles of ``W + S`` where ``S`` takes value ``shifts_s[i]`` with probability ``weights[i]`` and ``W``
    (independent) is 0 with probability ``1 − p_wait`` and otherwise exponential with mean ``mean_wait_s/p_wait``
    (``p_wait`` and ``mean_wait_s`` may differ per point: a mixture of such components).

    The CDF is a closed form, ``F(t) = Σ_i w_i · 1{t ≥ s_i} · (1 − p_i · exp(−(t − s_i)/θ_i))``; each quantile is
    found on a grid, then refined on two nested 32-point grids of its cell (below 4e-6 of the range).
    """
    s = np.asarray(shifts_s, dtype=np.float64).ravel()
    w = np.asarray(weights, dtype=np.float64).ravel()
    w = w / w.sum()
    p = broadcast_view(np.asarray(p_wait, dtype=np.float64), s.shape)
    m = broadcast_view(np.asarray(mean_wait_s, dtype=np.float64), s.shape)
    waits = (p > 0) & (m > 0)
    p = np.where(waits, p, 0.0)
    theta = np.where(waits, m / np.where(waits, p, 1.0), 1.0)
    q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if not np.any(waits):
        return weighted_quantiles(s, w, q)
    if np.all(theta[waits] == theta[waits][0]):
        # one waiting regime (the other points do not wait): the closed form, exact to rounding
        return _one_regime_quantiles(s, w, p, float(theta[waits][0]), q)
    top = float(np.max(np.where(waits, theta * (np.log(np.maximum(p, 1e-300)) + 1.0), 0.0)))
    upper = float(s.max()) + float(np.max(theta[waits])) * (
        float(np.max(np.maximum(np.log(1.0 / np.maximum(1e-12, 1.0 - q)), 0.0))) + 1.0) + max(top, 0.0)

    def cdf(t: FloatArray) -> FloatArray:
        gap = t[:, None] - s[None, :]
        tail = np.exp(-np.maximum(gap, 0.0) / theta[None, :])
        return np.sum(w[None, :] * (gap >= 0) * (1.0 - p[None, :] * tail), axis=1)

    # bracket every quantile on one grid (the shifts, where the CDF jumps, and 256 even points), then narrow
    # each bracket on two nested grids of 32 points (to 1/1024 of a cell, below 4e-6 of the range)
    grid = np.unique(np.concatenate([s, np.linspace(float(s.min()), upper, 256)]))
    f = cdf(grid)
    idx = np.clip(np.searchsorted(f, q - 1e-15), 0, len(grid) - 1)
    hi = grid[idx]
    lo = np.where(idx > 0, grid[np.maximum(idx - 1, 0)], hi)
    frac = np.linspace(0.0, 1.0, 33)[1:]
    for _ in range(2):
        pts = lo[:, None] + (hi - lo)[:, None] * frac[None, :]  # (nq, 32)
        below = (cdf(pts.ravel()) < q.repeat(frac.size)).reshape(pts.shape)
        n_below = np.sum(below, axis=1)
        new_hi = pts[np.arange(q.size), np.minimum(n_below, frac.size - 1)]
        lo = np.where(n_below > 0, pts[np.arange(q.size), np.maximum(n_below - 1, 0)], lo)
        hi = np.where(n_below < frac.size, new_hi, hi)
    # quantiles of increasing probabilities never decrease (the bisection's last bit could say otherwise)
    order = np.argsort(q)
    hi[order] = np.maximum.accumulate(hi[order])
    return hi


def _one_regime_quantiles(s: FloatArray, w: FloatArray, p: FloatArray, theta: float, q: FloatArray) -> FloatArray:
    """Quantiles of the law of :func:`quantiles_of_shifted_wait` when every waiting point has the same
    exponential tail ``theta`` (``p`` may differ per point, 0 for those that do not wait). Between two sorted
    shifts ``F(t) = W_k − G_k·exp(−(t − s_k)/θ)``, ``G_k = Σ_{i≤k} w_i·p_i·exp(−(s_k − s_i)/θ)``: as
    :func:`shifted_wait_quantiles_rows`, a quantile is a shift or ``s_k + θ·ln(G_k / (W_k − q))``."""
    order = np.argsort(s, kind="stable")
    s, w, p = s[order], w[order], p[order]
    m = s.size
    mass = np.cumsum(w)
    decay = np.exp(-np.diff(s) / theta)
    g = _decayed_mass((w * p)[None, :], decay[None, :])[0]
    at = mass - g  # F(s_k), just past the jump at s_k
    before_next = np.concatenate([mass[:-1] - g[:-1] * decay, [1.0]])
    target = q - 1e-15
    k = np.minimum(np.sum(before_next[None, :] < target[:, None], axis=1), m - 1)
    left = mass[k] - q
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = s[k] + theta * np.log(g[k] / np.maximum(left, 1e-300))
    # never past the next shift: where the segment's asymptote W_k is not above q (F reaches q only at the
    # next jump, within the target's 1e-15) the logarithm has no root and ran off (until 2026-12-05: a TTFT
    # p50 of 29 s for prompts of 15 and 6245 tokens, half each, whose prefills take 0.07 and 0.73 s)
    inside = np.minimum(inside, np.append(s[1:], np.inf)[k])
    out = np.where((at[k] >= target) | (g[k] <= 0), s[k], np.maximum(inside, s[k]))
    rank = np.argsort(q)
    out[rank] = np.maximum.accumulate(out[rank])
    return out


def take_rows(a: NDArray[np.generic], idx: NDArray[np.intp]) -> NDArray[np.generic]:
    """``np.take_along_axis(a, idx, axis=1)`` of 2-D arrays (the same gather, without numpy's general index
    building, which costs more than the gather at these sizes)."""
    return a[np.arange(a.shape[0])[:, None], idx]


def weighted_quantiles(values: ArrayLike, weights: ArrayLike, quantiles: ArrayLike) -> FloatArray:
    """Quantiles of a discrete distribution (values with probabilities)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    w = np.asarray(weights, dtype=np.float64).ravel()
    order = np.argsort(v)
    cdf = np.cumsum(w[order]) / w.sum()
    idx = np.minimum(np.searchsorted(cdf, np.asarray(quantiles) - 1e-12), len(v) - 1)
    return v[order][idx]


def weighted_quantiles_rows(values: FloatArray, weights: FloatArray, quantiles: ArrayLike) -> FloatArray:
    """:func:`weighted_quantiles` of each row of ``values`` (n, M) with ``weights`` (n, M) or (M,);
    ``quantiles`` (nq,) for every row, or (n, nq). Returns (n, nq)."""
    v = np.asarray(values, dtype=np.float64)
    w = broadcast_view(np.asarray(weights, dtype=np.float64), v.shape)
    q = np.asarray(quantiles, dtype=np.float64)
    q = broadcast_view(q if q.ndim == 2 else q[None, :], (v.shape[0], q.shape[-1]))
    order = np.argsort(v, axis=1, kind="stable")
    flat = (order + (np.arange(v.shape[0]) * v.shape[1])[:, None]).ravel()  # one gather for each array
    vs = v.ravel()[flat].reshape(v.shape)
    cdf = np.cumsum(np.ascontiguousarray(w).ravel()[flat].reshape(v.shape), axis=1) / np.sum(w, axis=1,
                                                                                             keepdims=True)
    # searchsorted per row (side "left"): how many of the row's CDF values lie below the target
    idx = np.sum(cdf[:, None, :] < (q - 1e-12)[:, :, None], axis=2)
    return take_rows(vs, np.minimum(idx, v.shape[1] - 1))


#: rows up to which :func:`_decayed_mass` runs its recurrence on Python floats, row by row (each column of a
#: numpy loop costs a few microseconds of call overhead, each Python step a tenth of one)
SCALAR_RECURRENCE_ROWS = 8


def _decayed_mass(w: FloatArray, decay: FloatArray) -> FloatArray:
    """``G_k = G_{k−1}·decay_{k−1} + w_k`` along each row (``G_0 = w_0``). The same two roundings per step
    either way: a multiply, then an add (numpy runs them as two ufuncs, without fusing them), so the result
    does not depend on the path, and a row's value does not depend on the rows beside it."""
    n, m = w.shape
    if n <= SCALAR_RECURRENCE_ROWS:
        out = []
        for w_row, d_row in zip(w.tolist(), decay.tolist(), strict=True):
            acc = w_row[0]
            row = [acc]
            for d, x in zip(d_row, w_row[1:], strict=True):
                acc = acc * d + x
                row.append(acc)
            out.append(row)
        return np.array(out, dtype=np.float64).reshape(n, m)
    g = np.empty_like(w)
    g[:, 0] = w[:, 0]
    for k in range(1, m):
        g[:, k] = g[:, k - 1] * decay[:, k - 1] + w[:, k]
    return g


def shifted_wait_quantiles_rows(shifts_s: FloatArray, weights: FloatArray, p_wait: FloatArray,
                                mean_wait_s: FloatArray, quantiles: ArrayLike) -> FloatArray:
    """Exact quantiles of ``W + S`` per row (the law of :func:`quantiles_of_shifted_wait` with one waiting
    regime a row): ``S`` takes ``shifts_s[r, i]`` with probability ``weights[i]`` (or ``weights[r, i]``),
    ``W`` is 0 with probability ``1 − p_wait[r]`` and otherwise exponential with mean
    ``mean_wait_s[r] / p_wait[r]``. Returns (n, nq).

    With the shifts sorted, between two of them the CDF is ``F(t) = W_k − p·G_k·exp(−(t − s_k)/θ)`` (``W_k``
    the mass of the shifts up to ``s_k``, ``G_k = Σ_{i≤k} w_i·exp(−(s_k − s_i)/θ)``, a stable recurrence), so
    each quantile is either a shift (where the CDF jumps past it) or ``s_k + θ·ln(p·G_k / (W_k − q))``: a
    closed form, exact to rounding.
    """
    s = np.asarray(shifts_s, dtype=np.float64)
    n, m = s.shape
    w = broadcast_view(np.asarray(weights, dtype=np.float64), s.shape)
    q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    p = np.asarray(p_wait, dtype=np.float64).reshape(n)
    mw = np.asarray(mean_wait_s, dtype=np.float64).reshape(n)
    waits = (p > 0) & (mw > 0)
    p = np.where(waits, p, 0.0)
    theta = np.where(waits, mw / np.where(waits, p, 1.0), 1.0)
    order = np.argsort(s, axis=1, kind="stable")
    s = take_rows(s, order)
    w = take_rows(w, order)
    w = w / np.sum(w, axis=1, keepdims=True)
    mass = np.cumsum(w, axis=1)
    decay = np.exp(-np.diff(s, axis=1) / theta[:, None])  # (n, m − 1), each ≤ 1
    g = _decayed_mass(w, decay)
    at = mass - p[:, None] * g  # F(s_k), just past the jump at s_k
    # F just before the next shift (F(∞) = 1 after the last one)
    before_next = np.concatenate([mass[:, :-1] - p[:, None] * g[:, :-1] * decay, np.ones((n, 1))], axis=1)
    target = q[None, :] - 1e-15
    k = np.minimum(np.sum(before_next[:, None, :] < target[:, :, None], axis=2), m - 1)  # (n, nq)
    s_k = take_rows(s, k)
    g_k = take_rows(g, k)
    left = take_rows(mass, k) - q[None, :]
    jump = take_rows(at, k) >= target
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = s_k + theta[:, None] * np.log(p[:, None] * g_k / np.maximum(left, 1e-300))
    # never past the next shift (``_one_regime_quantiles``)
    inside = np.minimum(inside, take_rows(np.concatenate([s[:, 1:], np.full((n, 1), np.inf)], axis=1), k))
    out = np.where(jump | (p[:, None] <= 0), s_k, np.maximum(inside, s_k))
    return np.maximum.accumulate(out[:, np.argsort(q)], axis=1)[:, np.argsort(np.argsort(q))]


def shifted_wait_cdf_rows(t: FloatArray, shifts_s: FloatArray, weights: FloatArray, p_wait: FloatArray,
                          mean_wait_s: FloatArray) -> FloatArray:
    """``P(W + S ≤ t[r])`` per row, for the law of :func:`shifted_wait_quantiles_rows`. Returns (n,)."""
    s = np.asarray(shifts_s, dtype=np.float64)
    w = broadcast_view(np.asarray(weights, dtype=np.float64), s.shape)
    p = np.asarray(p_wait, dtype=np.float64)[:, None]
    m = np.asarray(mean_wait_s, dtype=np.float64)[:, None]
    waits = (p > 0) & (m > 0)
    theta = np.where(waits, m / np.where(waits, p, 1.0), 1.0)
    gap = np.asarray(t, dtype=np.float64)[:, None] - s
    tail = np.where(waits, p * np.exp(-np.maximum(gap, 0.0) / theta), 0.0)
    return np.sum(w * (gap >= 0) * (1.0 - tail), axis=1) / np.sum(w, axis=1)


#: populations up to this are solved by the exact MVA recursion; larger ones by Schweitzer's fixed point
MVA_EXACT_CLIENTS = 1024


def closed_queue_mva(*, clients: float, service_mean_s: float, service_scv: float, servers: float,
                     think_s: float) -> tuple[float, float, float]:
    """Mean-value analysis of ``clients`` circulating between a FCFS queue of ``servers`` servers (mean
    service ``service_mean_s`` [s], squared coefficient of variation ``service_scv``) and a delay of
    ``think_s`` [s]: (throughput [1/s], mean wait in the queue [s], probability that an arrival waits).

    Per population n = 1 … N, an arrival sees the queue of population n − 1 (the arrival theorem): its wait
    is the work of those queued, one service each, and the residual of the one in service,
    ``E[S]·(1 + c_s²)/2``, with the probability that the server is busy. c servers are one server of
    ``E[S]/c`` plus a delay of ``E[S]·(c − 1)/c``. A fractional ``clients`` (clients spread over replicas)
    interpolates between the neighbouring whole populations. The probability of waiting is Erlang C at the
    load an arrival sees."""
    n_max = max(float(clients), 1.0)
    c = max(1, int(round(servers)))
    s = float(service_mean_s) / c
    extra_delay = float(service_mean_s) * (c - 1) / c
    residual = s * (1.0 + max(float(service_scv), 0.0)) / 2.0
    if n_max > MVA_EXACT_CLIENTS:
        return _schweitzer_mva(n_max, s, extra_delay + float(think_s), residual, c)
    q = u = 0.0
    think, capacity = float(think_s), 1.0 / s
    count = int(np.ceil(n_max))
    # (throughput, wait, utilization seen) at the last two populations: a plain loop, with conditional
    # expressions for max and min (the same values; ~1 µs a population, 1024 of them a call at most)
    previous = last = (0.0, 0.0, 0.0)
    for n in range(1, count + 1):
        resp = s + s * (q - u if q > u else 0.0) + u * residual
        x = n / (resp + extra_delay + think)
        if x > capacity:
            # the residual term assumes an arrival at a random moment of the service in progress; saturated,
            # arrivals come at service completions: the server's capacity bounds the throughput, and Little's
            # law over the cycle gives the response
            x = capacity
            resp = n * s - extra_delay - think
        seen_u = u
        busy = x * s
        q, u = x * resp, (busy if busy < 1.0 else 1.0)
        previous, last = last, (x, resp - s, seen_u)
    if count >= 2 and n_max < count:
        frac = n_max - (count - 1)
        (x0, w0, u0), (x1, w1, u1) = previous, last
        x, wait, seen_u = x0 + frac * (x1 - x0), w0 + frac * (w1 - w0), u0 + frac * (u1 - u0)
    else:
        x, wait, seen_u = last
    p_wait = erlang_c(c, min(seen_u, 0.995) * c) if wait > 0 else 0.0
    return float(x), float(max(wait, 0.0)), float(p_wait)


def _schweitzer_mva(clients: float, s: float, delay: float, residual: float, c: int) -> tuple[float, float, float]:
    """Schweitzer's approximation of MVA (Schweitzer, "Approximate analysis of multiclass closed networks of
    queues", 1979) for a large population: an arrival sees (N − 1)/N of the queue and utilization at N.
    With a = (N − 1)/N the response is explicit in the throughput x, R(x) = s·(1 − a·x·s + a·x·residual)
    / (1 − a·x·s), and x = N / (R(x) + delay) has one root, found by bisection below the server's capacity
    1/s (saturated when there is none below it)."""
    a = (clients - 1.0) / clients

    def resp(x: float) -> float:
        return s * (1.0 - a * x * s + a * x * residual) / max(1.0 - a * x * s, 1e-300)

    cap = min(1.0 / s, clients / (s + delay))
    if clients / (resp(cap) + delay) >= cap:  # saturated: the server's capacity, Little's law over the cycle
        wait = max(clients / cap - delay - s, 0.0) if cap == 1.0 / s else 0.0
        return float(cap), float(wait), float(erlang_c(c, min(a * cap * s, 0.995) * c)) if wait > 0 else 0.0
    lo, hi = 0.0, cap
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if clients / (resp(mid) + delay) > mid:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    x = 0.5 * (lo + hi)
    wait = max(resp(x) - s, 0.0)
    seen_u = min(a * x * s, 0.995)
    return float(x), float(wait), float(erlang_c(c, seen_u * c)) if wait > 0 else 0.0


#: edges of the probability bins the waiting part of a closed loop's wait is represented by (one point at
#: each bin's middle; finer in the tail, where the p99 is read)
CLOSED_WAIT_EDGES = np.concatenate([np.linspace(0.0, 0.9, 19), [0.93, 0.96, 0.98, 0.99, 0.995, 0.998, 0.999, 1.0]])
#: most populations k of the arrival theorem's law kept as separate terms (the rest merged in bins)
CLOSED_WAIT_TERMS = 256


def closed_queue_wait_points(*, clients: float, service_mean_s: float, service_scv: float, servers: float,
                             think_s: float, mean_wait_s: float) -> tuple[FloatArray, FloatArray]:
    """The wait law of a closed loop's queue as (values [s], weights) points, an atom at 0 first, with the
    mean ``mean_wait_s`` (from :func:`closed_queue_mva`).

    An arrival sees the queue of the other N − 1 clients (the arrival theorem): k of them in the system with
    the machine-repair law p_k ∝ (N − 1)! / (N − 1 − k)! · (s / Z)^k, s the service of one (fast, Seidmann)
    server and Z the delay (Kleinrock, "Queueing Systems" vol. 1, 1975, Sec. 3.8; exact for exponential
    service). With k ≥ 1 it waits for k − 1 services and the residual of the one in progress, a gamma of
    mean s·(k − 1 + (1 + c_s²)/2) and variance s²·(c_s²·(k − 1) + ((1 + c_s²)/2)²). Unlike the
    exponential tail of an open queue, this law ends near N − 1 services: the population caps the queue.
    The points are rescaled so their mean is ``mean_wait_s``."""
    n = max(int(np.ceil(clients)) - 1, 0)
    c = max(1, int(round(servers)))
    s = float(service_mean_s) / c
    delay = float(think_s) + float(service_mean_s) * (c - 1) / c
    if n == 0 or s <= 0 or mean_wait_s <= 0:
        return np.zeros(1), np.ones(1)
    k = np.arange(n + 1, dtype=np.float64)
    ratio = s / max(delay, 1e-12 * s)
    log_p = special.gammaln(n + 1.0) - special.gammaln(n - k + 1.0) + k * np.log(ratio)
    p = np.exp(log_p - np.max(log_p))
    p /= np.sum(p)
    p0 = float(p[0])
    kk, pk = k[1:], p[1:]
    keep = pk >= 1e-12 * np.max(pk)
    kk, pk = kk[keep], pk[keep]
    if kk.size > CLOSED_WAIT_TERMS:  # merge neighbouring populations into bins of equal count
        bins = np.minimum(np.arange(kk.size) * CLOSED_WAIT_TERMS // kk.size, CLOSED_WAIT_TERMS - 1)
        mass = np.bincount(bins, weights=pk)
        kk, pk = np.bincount(bins, weights=pk * kk) / mass, mass
    cs2 = max(float(service_scv), 0.0)
    mean_k = s * (kk - 1.0 + (1.0 + cs2) / 2.0)
    var_k = s * s * (cs2 * (kk - 1.0) + ((1.0 + cs2) / 2.0) ** 2)
    shape, scale = mean_k**2 / var_k, var_k / mean_k
    busy = float(np.sum(pk))
    mid = (CLOSED_WAIT_EDGES[:-1] + CLOSED_WAIT_EDGES[1:]) / 2.0
    values = _gamma_mixture_quantiles(pk / busy, shape, scale, mid,
                                      float(np.max(mean_k + 8.0 * np.sqrt(var_k))))
    weights = np.diff(CLOSED_WAIT_EDGES) * busy
    mean = float(np.dot(values, weights))
    values = values * (mean_wait_s / mean) if mean > 0 else values
    return np.concatenate([[0.0], values]), np.concatenate([[p0], weights])


#: points of the coarse grid that brackets each quantile of a gamma mixture, the most safeguarded Newton
#: steps that refine it, and the error of the CDF at which they stop (``_gamma_mixture_quantiles``)
MIXTURE_BRACKET_POINTS, MIXTURE_NEWTON_STEPS, MIXTURE_TOLERANCE = 64, 8, 1e-12
#: a mixture term of at least this shape counts as 0 or 1 in the CDF (and 0 in the density) at a point more
#: than ``MIXTURE_FAR_SD`` of its standard deviations from its mean: its tail beyond is below 2e-17 (shape
#: 50: 1.6e-17 above, 0 below; larger shapes less), so the sum over a mixture's ≤ 256 terms moves the CDF by
#: under 1e-14, against the refinement's tolerance of 1e-12. Deterministic service makes every term of a
#: large loop that narrow (shape 4·(k − ½)² for k ahead), and a point then needs the gamma functions of the
#: few terms around it only
MIXTURE_FAR_SHAPE, MIXTURE_FAR_SD = 50.0, 12.0


class _GammaMixture:
    """Σ p_k·Gamma(shape_k, scale_k): its CDF and density at points, skipping the terms that are 0 or 1 there
    (``MIXTURE_FAR_SHAPE``, ``MIXTURE_FAR_SD``)."""

    def __init__(self, p: FloatArray, shape: FloatArray, scale: FloatArray) -> None:
        self.pc, self.a, self.th = p[:, None], shape[:, None], scale[:, None]
        self.log_norm = special.gammaln(self.a) + self.a * np.log(self.th)
        narrow = shape >= MIXTURE_FAR_SHAPE
        self.skips = bool(np.any(narrow))
        if self.skips:  # the terms' means and the half-widths beyond which a narrow term is 0 or 1
            self.mean = (shape * scale)[:, None]
            self.reach = np.where(narrow, MIXTURE_FAR_SD * np.sqrt(shape) * scale, np.inf)[:, None]

    def _near(self, x: FloatArray) -> NDArray[np.bool_] | None:
        """(terms, points) mask of the terms computed at ``x`` (None: all of them)."""
        if not self.skips:
            return None
        near = np.abs(x[None, :] - self.mean) <= self.reach
        return None if near.all() else near

    def cdf(self, x: FloatArray) -> FloatArray:
        near = self._near(x)
        if near is None:
            return np.add.reduce(self.pc * special.gammainc(self.a, x[None, :] / self.th), axis=0)
        rows, cols = np.nonzero(near)
        terms = (x[None, :] > self.mean).astype(np.float64)  # a far term is all below or all above x
        terms[rows, cols] = special.gammainc(self.a[rows, 0], x[cols] / self.th[rows, 0])
        return np.add.reduce(self.pc * terms, axis=0)

    def pdf(self, x: FloatArray) -> FloatArray:
        near = self._near(x)
        if near is None:
            log_pdf = special.xlogy(self.a - 1.0, x[None, :]) - x[None, :] / self.th - self.log_norm
            return np.add.reduce(self.pc * np.exp(log_pdf), axis=0)
        rows, cols = np.nonzero(near)
        terms = np.zeros(near.shape)
        xr = x[cols]
        terms[rows, cols] = np.exp(special.xlogy(self.a[rows, 0] - 1.0, xr) - xr / self.th[rows, 0]
                                   - self.log_norm[rows, 0])
        return np.add.reduce(self.pc * terms, axis=0)


def _gamma_mixture_quantiles(p: FloatArray, shape: FloatArray, scale: FloatArray, probs: FloatArray,
                             span: float) -> FloatArray:
    """Quantiles at ``probs`` of the mixture Σ p_k·Gamma(shape_k, scale_k) (``p`` sums to 1), whose mass
    lies within [0, ``span``]. Each is bracketed on a grid of ``MIXTURE_BRACKET_POINTS`` points, then refined
    by Newton's method on the mixture's CDF with its density (a step that would leave the bracket bisects it
    instead) until the CDF is within ``MIXTURE_TOLERANCE`` of every target. Where the mixture has a density
    that takes 2-4 steps; where it is nearly a staircase (deterministic service, few clients) the
    bisections end at the step's edge. The 2048-point grid and linear interpolation it replaces (until
    2026-12-04) took 127,000 gamma functions, 20 ms, for 128 clients at s/Z = 0.05 (62 terms) and missed the
    targets by up to 1e-4 of probability where the mixture is smooth (4e-2 on staircases); this takes
    ~12,000, 2.2 ms, and misses by under 1e-10 (4e-4). Narrow terms are evaluated only near their mean
    (``_GammaMixture``): for the benchmark's disaggregated deployment with fixed 2000-token prompts, 256 and
    1024 clients (175 and 191 terms) took 27,800 and 34,800 gamma functions, 4.1 and 10 ms, and take 2,500
    and 1,600, 1.6 and 2.6 ms, the same quantiles to the last bit (2026-12-05)."""
    mix = _GammaMixture(p, shape, scale)
    grid = np.linspace(0.0, span, MIXTURE_BRACKET_POINTS)
    cdf = np.maximum.accumulate(mix.cdf(grid))
    hi_i = np.minimum(np.searchsorted(cdf, probs), grid.size - 1)
    lo_i = np.maximum(hi_i - 1, 0)
    lo, hi = grid[lo_i], grid[hi_i]
    gap = cdf[hi_i] - cdf[lo_i]
    x = np.where(gap > 0, lo + (probs - cdf[lo_i]) / np.where(gap > 0, gap, 1.0) * (hi - lo), hi)
    x = np.clip(x, lo, hi)
    # only the quantiles not yet within the tolerance are refined (a staircase's take every step)
    active = np.arange(probs.size)
    for _ in range(MIXTURE_NEWTON_STEPS):
        f_x = mix.cdf(x[active]) - probs[active]
        open_ = np.abs(f_x) > MIXTURE_TOLERANCE
        active, f_x = active[open_], f_x[open_]
        if active.size == 0:
            break
        xv = x[active]
        pdf = mix.pdf(xv)
        lo_a, hi_a = np.where(f_x < 0, xv, lo[active]), np.where(f_x > 0, xv, hi[active])
        step = xv - f_x / np.where(pdf > 0, pdf, np.inf)
        inside = (step >= lo_a) & (step <= hi_a) & (pdf > 0)
        x[active] = np.where(inside, step, 0.5 * (lo_a + hi_a))
        lo[active], hi[active] = lo_a, hi_a
    return x


def _binned_sorted(v: FloatArray, p: FloatArray, total: float, edges: FloatArray
                   ) -> tuple[FloatArray, FloatArray]:
    """:func:`binned_points` of points already sorted by value, with probabilities ``p`` (positive, summing
    to 1) and total mass ``total``: the points whose mid-probabilities fall in a bin are a contiguous run, so
    each nonempty bin is one ``reduceat`` segment."""
    mid = np.cumsum(p) - 0.5 * p
    # the first point of each bin: the first whose mid-probability reaches its lower edge (the first bin also
    # takes anything below 0, the last anything above 1, as a clipped bin index would)
    starts = np.searchsorted(mid, edges[:-1], side="left")
    starts[0] = 0
    ends = np.append(starts[1:], mid.size)
    idx = starts[starts < ends]
    mass = np.add.reduceat(p, idx)
    return np.add.reduceat(p * v, idx) / mass, mass * total


def binned_points(values: ArrayLike, weights: ArrayLike, edges: FloatArray = CLOSED_WAIT_EDGES
                  ) -> tuple[FloatArray, FloatArray]:
    """A discrete law (values, weights) re-binned at the probability ``edges``: each point joins the bin its
    mid-probability falls in, and a bin is its points' mean with their mass. The mean and the total mass are
    kept; the tail keeps the resolution of the edges (``CLOSED_WAIT_EDGES``: finer where a p99 is read)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    w = np.asarray(weights, dtype=np.float64).ravel()
    keep = w > 0
    v, w = v[keep], w[keep]
    total = float(np.sum(w))
    if v.size == 0 or total <= 0:
        return np.zeros(1), np.zeros(1)
    order = np.argsort(v, kind="stable")
    return _binned_sorted(v[order], w[order] / total, total, edges)


#: points of the lattice a compound Poisson law is computed on (``compound_poisson_points``), and the mass
#: its span may leave beyond its end (folded back onto the lattice by the FFT's wrap-around)
COMPOUND_LATTICE, COMPOUND_REST = 1024, 1e-9
#: below this mass beyond the atom at 0 the law is the atom alone (the transform's rounding, ~1e-16 of the
#: atom, would be all there is of the rest)
COMPOUND_NEGLIGIBLE = 1e-12
#: θ·max(X) of the Chernoff bounds the span is the least of (``compound_poisson_points``)
_CHERNOFF_THETA = np.geomspace(0.05, 60.0, 24)


def _lattice_masses(values: FloatArray, probs: FloatArray, step: float, size: int) -> FloatArray:
    """A discrete law on the lattice 0, h, 2h, …: each point's mass split between the two lattice points
    around it in inverse proportion to the distances, which keeps the mass and the mean of every point."""
    pos = values / step
    lo = np.floor(pos).astype(np.intp)
    up = pos - lo
    return (np.bincount(lo, weights=probs * (1.0 - up), minlength=size)[:size]
            + np.bincount(lo + 1, weights=probs * up, minlength=size)[:size])


def _clamped_top(v: FloatArray, p: FloatArray, rare: float) -> FloatArray:
    """``v`` with the points above the smallest value whose upper tail P(V > v) is at most ``rare`` moved down
    to it."""
    order = np.argsort(v, kind="stable")
    above = 1.0 - np.cumsum(p[order])  # P(V > v) at each sorted point (ties: at the last of them)
    k = int(np.argmax(above <= rare)) if np.any(above <= rare) else v.size - 1
    return np.minimum(v, v[order][k])


def compound_poisson_points(mean_count: float, values: ArrayLike, weights: ArrayLike,
                            plus: tuple[ArrayLike, ArrayLike] | None = None) -> tuple[FloatArray, FloatArray]:
    """The law of ``X_1 + … + X_K (+ Y)`` with ``K`` Poisson of mean ``mean_count``, the ``X_j``
    independent with the discrete law (``values``, ``weights``) and ``Y`` (``plus``, as (values, weights);
    none by default) independent of them, as points: the atom at 0, then the rest re-binned as
    :func:`binned_points` does (``CLOSED_WAIT_EDGES``). The mean, ``mean_count·E[X] + E[Y]``, is kept.

    Computed on a lattice of ``COMPOUND_LATTICE`` points by the discrete Fourier transform of the
    compound law's generating function, exp(a·(φ_X − 1))·φ_Y (Embrechts and Frei, "Panjer recursion versus
    FFT for compound distributions", Math. Methods Oper. Res. 69, 2009): each point's mass split between its
    two lattice neighbours (which keeps the mean), and the lattice's span the least Chernoff bound
    (θ·s − log E[e^{θS}] ≥ log(1 / ``COMPOUND_REST``)) over a grid of θ, so that the mass beyond the span,
    which the transform folds back to the start, is below ``COMPOUND_REST``."""
    a = max(float(mean_count), 0.0)
    x = np.asarray(values, dtype=np.float64).ravel()
    px = np.asarray(weights, dtype=np.float64).ravel()
    px = px / np.sum(px)
    if plus is None:
        y, py = np.zeros(1), np.ones(1)
    else:
        y = np.maximum(np.asarray(plus[0], dtype=np.float64).ravel(), 0.0)
        py = np.asarray(plus[1], dtype=np.float64).ravel()
        py = py / np.sum(py)
    # the atom at 0, P(K = 0)·P(Y = 0), and the mass of the rest, 1 − atom, without the cancellation
    q0 = float(np.sum(py[y <= 0.0]))
    rest_mass = (1.0 - q0) - q0 * math.expm1(-a)
    target = a * float(np.dot(x, px)) + float(np.dot(y, py))
    if target <= 0.0 or rest_mass < COMPOUND_NEGLIGIBLE:
        return np.zeros(1), np.ones(1)
    # points so rare that their expected number is below COMPOUND_REST (a·P(X > x), P(Y > y)) are moved down
    # to the largest point that is not (the mean is restored at the end): one of them would otherwise set
    # the span, and leave the lattice's step too coarse for the rest of the law
    x = _clamped_top(x, px, COMPOUND_REST / max(a, 1e-300))
    y = _clamped_top(y, py, COMPOUND_REST)
    top = max(float(np.max(x)) if a > 0 else 0.0, float(np.max(y)))
    # the span s: P(S > s) ≤ E[e^{θS}]·e^{−θs} for every θ > 0, with log E[e^{θS}] = a·(E[e^{θX}] − 1) +
    # log E[e^{θY}]
    theta = _CHERNOFF_THETA / top
    log_mgf = np.log(np.exp(np.outer(theta, y)) @ py)
    if a > 0.0:  # (θ·x ≤ 60 here: x ≤ top)
        log_mgf += a * (np.exp(np.outer(theta, x)) @ px - 1.0)
    span = float(np.min((log_mgf - math.log(COMPOUND_REST)) / theta))
    # rounded up to a power of 2^(1/8): the lattice then stays put while the law changes a little, so its
    # points move between the bins only as their masses change (as the law's own points would), not with
    # the step
    span = 2.0 ** (math.ceil(8.0 * math.log2(span)) / 8.0)
    n = COMPOUND_LATTICE
    step = span / (n - 2)
    lat_x = _lattice_masses(np.minimum(x, span), px, step, n)
    lat_y = _lattice_masses(np.minimum(y, span), py, step, n)
    s = np.fft.irfft(np.exp(a * (np.fft.rfft(lat_x) - 1.0)) * np.fft.rfft(lat_y), n)
    s = np.maximum(s, 0.0)  # the transform's rounding: ~1e-17 either side of 0
    s[0] = max(float(s[0]) - (1.0 - rest_mass), 0.0)
    rest = float(np.sum(s))
    if rest <= 0.0:
        return np.zeros(1), np.ones(1)
    held = np.flatnonzero(s > 0.0)  # the lattice points with mass (a bin of massless ones has no mean)
    bv, bw = _binned_sorted(held * step, s[held] / rest, rest_mass, CLOSED_WAIT_EDGES)
    bv = bv * ((target / float(np.dot(bv, bw))) if np.dot(bv, bw) > 0 else 1.0)
    return np.concatenate([[0.0], bv]), np.concatenate([[1.0 - rest_mass], bw])
