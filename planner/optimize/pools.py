"""SLO capacity of disaggregated pools, for every worker count at once.

- Prefill pool of ``c`` workers: the M/G/c queue of ``serving.disaggregated`` (Allen–Cunneen wait with the
  Erlang-C probability of waiting), TTFT = front-end overhead + wait + the prompt's prefill + its exposed
  KV transfer. Its capacity is the largest rate whose TTFT percentile meets the target (bisection on the
  rate, vectorized over pool variants and worker counts; TTFT only grows with the rate), also bounded by
  the prefill pool's stability and by the KV link (``c`` senders).
- Decode pool of ``D`` workers: Little's law per worker, ``λ/D = B / ((E[O] − 1)·τ(B + 1))``, and the ITL
  distribution over the pool's batch fluctuation as ``evaluate`` reports it; the capacity is the rate at
  the largest per-worker batch whose ITL percentile meets the target (grid, then two refinements).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from planner.serving.batch import decode_elasticity
from planner.serving.disaggregated import MAX_UTILIZATION, batched_prefill_wait
from planner.serving.evaluate import FLUCTUATION_Z
from planner.serving.queueing import erlang_c_servers, log_factorial, renewal_wait_factors

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
#: halvings of the rate bracket [0, stability limit]: to 2⁻¹⁴ (6e-5) of it, far below the 0.3 % verification margin
BISECTION_STEPS = 14
#: points of the tabulated exponential-tail integral G(θ), six decades either side of the target
THETA_POINTS = 120
DECODE_CURVE_POINTS = 32
#: refinements of each decode bracket (the rate to ~1/289 of a curve cell)
DECODE_REFINE_POINTS = 16


@dataclass(frozen=True, kw_only=True)
class PrefillVariant:
    """One prefill pool configuration as the search sees it: per prompt point, the prefill pass and the
    KV transfer (whole and exposed) over one link [s]."""

    prefill_s: FloatArray  # (ni,)
    transfer_full_s: FloatArray  # (ni,)
    transfer_exposed_s: FloatArray  # (ni,)
    gpus_per_worker: int = 1
    #: a worker that prefills every waiting prompt in one pass: the pass's setup [s] and the most prompts
    #: it takes (``serving.disaggregated.setup_from_passes``, ``pass_prompt_cap``); None: one prompt per pass
    pass_setup_s: float | None = None
    pass_prompts: float = 1.0


def prefill_capacity(
    variants: list[PrefillVariant],
    weights: FloatArray,
    workers: IntArray,
    *,
    overhead_s: float,
    ttft_s: float | None,
    ttft_percentile: float,
    arrival_scv: float = 1.0,
    max_workers: IntArray | None = None,
) -> FloatArray:
    """Largest arrival rate [requests/s] per (variant, worker count) whose TTFT percentile meets ``ttft_s``
    (shape (nv, nc); 0 where not even a lone request does). ``max_workers`` (per variant) skips the counts
    a search cannot use (reported as 0)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    c = np.asarray(workers, dtype=np.float64)[None, :]
    pre = np.stack([v.prefill_s for v in variants])  # (nv, ni)
    mean_s = pre @ w
    scv_s = np.maximum(((pre**2) @ w) / mean_s**2 - 1.0, 0.0)
    full = np.stack([v.transfer_full_s for v in variants]) @ w
    shifts = overhead_s + pre + np.stack([v.transfer_exposed_s for v in variants])  # (nv, ni)
    # workers that batch their prompts (``serving.disaggregated.batched_prefill_wait``): their setup a and
    # most prompts K, and the capacity of passes of K back to back
    batching = np.array([v.pass_setup_s is not None for v in variants])
    setup = np.array([v.pass_setup_s or 0.0 for v in variants])
    k_pass = np.array([v.pass_prompts for v in variants])
    per_prompt = np.where(batching, (k_pass * mean_s - (k_pass - 1.0) * setup) / k_pass, mean_s)
    top = np.minimum(MAX_UTILIZATION * c / per_prompt[:, None], c / full[:, None] * (1.0 - 1e-9))  # (nv, nc)
    if ttft_s is None:
        return top
    q = ttft_percentile / 100.0
    nv, nc = top.shape
    # F(T) = A − p·G(θ): the wait is an atom (1 − p) plus an exponential of mean θ = (c_a² + c_s²)/2 /
    # (c/E[S] − λ) (Allen–Cunneen), so with T fixed only p and θ move with λ; G(θ) = Σ_{s_i ≤ T} w_i
    # exp(−(T − s_i)/θ) is tabulated per variant on a geometric θ grid (ratio 1.12 between points,
    # interpolated in log θ) and each bisection step costs O(rows), not O(rows × prompt points)
    reach = shifts <= ttft_s  # (nv, ni)
    a_mass = np.sum(w * reach, axis=1)
    theta_grid = np.geomspace(1e-3 * ttft_s, 1e3 * ttft_s, THETA_POINTS)
    gap = np.maximum(ttft_s - shifts, 0.0)
    # exp(−gap/θ) over (variant, prompt point, θ) is the largest array of the search (~4 MB for 66 variants):
    # built in one buffer, in place (a fresh multi-MB temporary per step cost more than the arithmetic)
    decay = gap[:, :, None] / -theta_grid[None, None, :]
    np.exp(decay, out=decay)
    g_table = np.einsum("vi,vig->vg", w * reach, decay)
    log_grid = np.log(theta_grid)
    step = log_grid[1] - log_grid[0]
    use = np.ones((nv, nc), dtype=bool) if max_workers is None else c <= np.asarray(max_workers)[:, None]
    rows = np.repeat(np.arange(nv), nc)[use.ravel()]
    cc = np.broadcast_to(c, (nv, nc))[use]
    ms = mean_s[rows]
    k_var = (arrival_scv + scv_s[rows]) / 2.0
    renewal = abs(arrival_scv - 1.0) > 1e-12
    g_flat = g_table.ravel()

    def target_met(sel: NDArray[np.intp] | slice) -> Callable[[FloatArray], NDArray[np.bool_]]:
        """``met(λ)`` of the rows ``sel``: TTFT percentile within target at rate ``λ`` [requests/s]. What does
        not move with the rate (the servers' log-factorials, service rates, table rows) is gathered once."""
        c_s, ms_s, kv_s = cc[sel], ms[sel], k_var[sel]
        log_fact = log_factorial(c_s)
        rate_s = c_s / ms_s  # the pool's service rate [requests/s]
        first = rows[sel] * THETA_POINTS  # each row's G(θ) in g_flat
        mass = a_mass[rows[sel]]
        v_s = rows[sel]
        gated = np.flatnonzero(batching[v_s])  # the rows whose workers batch
        g_pre, g_setup, g_k = pre[v_s[gated]], setup[v_s[gated]], k_pass[v_s[gated]]
        g_scv = scv_s[v_s[gated]]

        def met(lam: FloatArray) -> NDArray[np.bool_]:
            p_wait = erlang_c_servers(c_s, lam * ms_s, log_factorial=log_fact)
            spare = rate_s - lam
            theta = np.where(spare > 0, kv_s / np.where(spare > 0, spare, 1.0), np.inf)
            if renewal:
                # gamma arrivals: the GI/M/1 factors at the per-worker utilization, as evaluate's
                # ``DisaggregatedModel.steady_state`` takes them (wait and waiting probability)
                rho_w = np.minimum(lam * ms_s / c_s, MAX_UTILIZATION)
                f_wait, f_p = renewal_wait_factors(rho_w, arrival_scv)
                f_wait, f_p = np.nan_to_num(f_wait, nan=1.0), np.nan_to_num(f_p, nan=1.0)
                p_new = np.minimum(p_wait * f_p, 1.0)
                theta = theta * f_wait * np.divide(p_wait, p_new, out=np.ones_like(p_new), where=p_new > 0)
                p_wait = p_new
            if gated.size:
                # as ``DisaggregatedModel.steady_state``: the worker's gated wait at its share of the rate,
                # times the pool's one-per-pass wait over one worker's FIFO wait at the one-per-pass load
                # capped at its limit (the pooling, and the GI/M/1 factors of gamma arrivals); the waiting
                # probability by the busy shares' ratio
                c_g, ms_g, lam_g = c_s[gated], ms_s[gated], lam[gated]
                lam_q = np.minimum(lam_g, MAX_UTILIZATION * c_g / ms_g)
                rho_q = lam_q * ms_g / c_g
                p_q = erlang_c_servers(c_g, lam_q * ms_g, log_factorial=log_fact[gated])
                th_q = kv_s[gated] / np.maximum(c_g / ms_g - lam_q, 1e-300)
                if renewal:
                    fw, fp = renewal_wait_factors(rho_q, arrival_scv)
                    fw, fp = np.nan_to_num(fw, nan=1.0), np.nan_to_num(fp, nan=1.0)
                    p_new = np.minimum(p_q * fp, 1.0)
                    th_q = th_q * fw * np.divide(p_q, p_new, out=np.ones_like(p_new), where=p_new > 0)
                    p_q = p_new
                fifo_q = rho_q * ms_g * (1.0 + g_scv) / 2.0 / np.maximum(1.0 - rho_q, 1e-300)
                scale = np.divide(p_q * th_q, fifo_q, out=np.ones_like(fifo_q), where=fifo_q > 0)
                wq_g, busy_g, ok_g = batched_prefill_wait(lam_g / c_g, g_pre, w, g_setup, g_k)
                p_g = np.minimum(np.divide(p_q * busy_g, rho_q, out=np.zeros_like(rho_q), where=rho_q > 0), 1.0)
                th_g = np.divide(wq_g * scale, p_g, out=th_q.copy(), where=p_g > 0)
                p_wait = p_wait.copy()
                theta = theta.copy()
                p_wait[gated] = np.where(ok_g, p_g, 1.0)
                theta[gated] = np.where(ok_g, th_g, np.inf)
            x = np.clip(
                (np.log(np.minimum(theta, theta_grid[-1])) - log_grid[0]) / step, 0.0, THETA_POINTS - 1.000001
            )
            i0 = x.astype(np.intp)
            f = x - i0
            g = g_flat[first + i0] * (1.0 - f) + g_flat[first + i0 + 1] * f
            g = np.where(theta >= theta_grid[-1], mass, g)
            return mass - np.where(lam > 0, p_wait, 0.0) * g >= q - 1e-12

        return met

    everywhere = target_met(slice(None))
    top_use = top[use]
    ok_top = everywhere(top_use)
    ok_zero = everywhere(np.zeros(rows.size))
    # only the rows that meet the target unloaded but not at the stability limit have an edge to bisect for
    edge = np.flatnonzero(ok_zero & ~ok_top)
    met = target_met(edge)
    lo = np.zeros(edge.size)
    hi = top_use[edge]
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        good = met(mid)
        lo = np.where(good, mid, lo)
        hi = np.where(good, hi, mid)
    rate = np.where(ok_zero & ok_top, top_use, 0.0)
    rate[edge] = lo
    out = np.zeros((nv, nc))
    out[use] = rate
    return out


@dataclass(frozen=True, kw_only=True)
class DecodeVariant:
    """One decode pool configuration: its step time over a batch grid and its batch cap."""

    batch_grid: FloatArray
    step_s: FloatArray
    batch_cap: float


def _decode_itl_ok(
    v: DecodeVariant, b: FloatArray, workers: FloatArray, itl_s: float, q: float
) -> NDArray[np.bool_]:
    """ITL percentile within target at per-worker batch ``b`` with ``workers`` workers (broadcast), as
    evaluate's law has it: each worker's batch (a stream counts in its own worker's), fluctuating as a
    processor-sharing station's (``batch.batch_dispersion``), size-biased, its mean kept at the iteration
    time of the batch a request runs in, ``τ(b + 1)``. The worker count only broadcasts."""
    b, _ = np.broadcast_arrays(np.asarray(b, dtype=np.float64), np.asarray(workers, dtype=np.float64))
    eps = decode_elasticity(lambda x: np.interp(x + 1.0, v.batch_grid, v.step_s), b)
    sd = np.sqrt(np.maximum(b, 0.0) / (1.0 - eps))
    pts = np.clip(np.round(b[..., None] + sd[..., None] * FLUCTUATION_Z), 1.0, max(v.batch_cap, 1.0))
    wts = pts / np.sum(pts, axis=-1, keepdims=True)
    itl = np.interp(pts, v.batch_grid, v.step_s)
    tau = np.interp(np.maximum(b, 0.0) + 1.0, v.batch_grid, v.step_s)
    itl = np.maximum(itl + (tau - np.sum(wts * itl, axis=-1))[..., None], 0.0)
    return np.sum(wts * (itl <= itl_s * (1.0 + 1e-12)), axis=-1) >= q - 1e-12


def decode_capacity(
    variants: list[DecodeVariant],
    workers: IntArray,
    *,
    mean_decode_steps: float,
    itl_s: float | None,
    itl_percentile: float,
    max_workers: IntArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """(largest rate [requests/s], per-worker batch there) per (variant, worker count), shapes (nv, nc).
    ``max_workers`` (per variant) skips the counts a search cannot use (reported as 0)."""
    nv = len(variants)
    all_d = np.asarray(workers, dtype=np.float64)
    nc_all = all_d.size
    rate = np.zeros((nv, nc_all))
    batch = np.zeros((nv, nc_all))
    q = itl_percentile / 100.0
    frac = np.linspace(0.0, 1.0, DECODE_REFINE_POINTS + 2)[1:-1]
    # the per-worker batches walked, by the top of the batch grid (variants of one batch cap share them)
    curves: dict[float, FloatArray] = {}
    for i, v in enumerate(variants):
        use = all_d <= (np.inf if max_workers is None else max_workers[i])
        d = all_d[use]
        nc = d.size
        if nc == 0:
            continue
        top = max(v.batch_grid[-1] - 1.0, 1e-3)
        if top not in curves:
            curves[top] = np.concatenate([[0.0], np.geomspace(1e-3, top, DECODE_CURVE_POINTS)])
        b = curves[top]
        if mean_decode_steps <= 0:
            rate[i, use] = np.inf
            continue
        if itl_s is None:
            b_star = np.full(nc, top)
        else:
            ok = np.cumprod(_decode_itl_ok(v, b[None, :], d[:, None], itl_s, q), axis=1).astype(bool)
            last = np.sum(ok, axis=1) - 1
            lo = np.where(last >= 0, b[np.maximum(last, 0)], 0.0)
            hi = np.where(last < b.size - 1, b[np.minimum(last + 1, b.size - 1)], lo)
            for _ in range(2):
                sub = lo[:, None] + (hi - lo)[:, None] * frac[None, :]
                g = np.cumprod(_decode_itl_ok(v, sub, d[:, None], itl_s, q), axis=1).astype(bool)
                width = (hi - lo) / (DECODE_REFINE_POINTS + 1)
                lo = lo + width * np.sum(g, axis=1)
                hi = np.minimum(lo + width, hi)
            b_star = np.where(last >= 0, lo, -1.0)
        tau = np.interp(np.maximum(b_star, 0.0) + 1.0, v.batch_grid, v.step_s)
        rate[i, use] = np.where(b_star > 0, d * np.maximum(b_star, 0.0) / (mean_decode_steps * tau), 0.0)
        batch[i, use] = np.maximum(b_star, 0.0)
    return rate, batch
