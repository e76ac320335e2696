"""SLO capacity: the largest arrival rate a configuration serves while meeting a TTFT and an ITL target.

The searches of this package all stand on one question, asked of many configurations at once: how much
load can this (GPU, parallelism, scheduler) serve before the TTFT or ITL percentile of the SLO is missed?
Each answer is read off the closed-form steady states of :mod:`planner.serving`, with the same
distributions ``evaluate`` reports (so a chosen configuration meets its SLO when evaluated):

- TTFT: an atom-plus-exponential queue wait added to a discrete prompt-length distribution; its CDF at
  the target is a closed form (``queueing.quantiles_of_shifted_wait``), so "the p-th percentile is within
  target" is tested as ``F(target) ≥ p`` without solving for the percentile.
- ITL: the discrete distribution of iteration times a decoding stream sees, spread by the decode batch's
  fluctuation (``evaluate.batch_fluctuation``); "within target" is ``P(ITL ≤ target) ≥ p``.

Load only makes latency worse along the stable branch of a steady-state curve, so the capacity is where
the curve first leaves the SLO: found on the curve's grid, then refined on two nested sub-grids (each 16
points; the bracket ends ~1/256 of a grid cell wide, < 0.1 % of the rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from planner.serving import queueing as Q
from planner.serving.aggregated import (
    MAX_UTILIZATION,
    AggregatedModel,
    SteadyState,
    iteration_kinds,
    take_states,
)
from planner.serving.batch import batch_dispersion, slot_wait, with_slot_wait
from planner.serving.evaluate import FLUCTUATION_Z
from planner.serving.types import Slo

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
#: curve points per budget (the stable branch of λ(B)); refinement sub-grid points
CURVE_POINTS = 12
REFINE_POINTS = 8
REFINE_ROUNDS = 3


# --------------------------------------------------------------------------- distributions, vectorized


def shifted_wait_cdf(
    t: FloatArray | float,
    shifts: FloatArray,
    weights: FloatArray,
    p_wait: FloatArray,
    mean_wait_s: FloatArray,
) -> FloatArray:
    """``P(W + S ≤ t)`` per row: ``shifts`` (n, m) with ``weights`` (m,) or (n, m), ``W`` an atom at zero of mass
    ``1 − p_wait`` (n,) plus an exponential tail of mean ``mean_wait_s / p_wait`` (the queueing module's law)."""
    t = np.asarray(t, dtype=np.float64)
    w = np.broadcast_to(weights, shifts.shape)
    p = np.asarray(p_wait, dtype=np.float64)[:, None]
    m = np.asarray(mean_wait_s, dtype=np.float64)[:, None]
    waits = (p > 0) & (m > 0) & np.isfinite(m)
    theta = np.where(waits, m / np.where(waits, p, 1.0), 1.0)
    gap = (t[..., None] if t.ndim else t) - shifts
    tail = np.where(waits, p * np.exp(-np.maximum(gap, 0.0) / theta), 0.0)
    cdf = np.sum(w * (gap >= 0) * (1.0 - tail), axis=-1) / np.sum(w, axis=-1)
    return np.where(np.isfinite(np.asarray(mean_wait_s)), cdf, 0.0)


def shifted_wait_quantile(
    q: float,
    shifts: FloatArray,
    weights: FloatArray,
    p_wait: FloatArray,
    mean_wait_s: FloatArray,
) -> FloatArray:
    """The ``q`` quantile of each row's ``W + S`` (see :func:`shifted_wait_cdf`), exact to rounding
    (``queueing.shifted_wait_quantiles_rows``, the closed form evaluate reports); ``inf`` where the wait is
    unbounded."""
    finite = np.isfinite(mean_wait_s)
    m = np.where(finite, mean_wait_s, 0.0)
    p = np.where(finite, p_wait, 0.0)
    out = Q.shifted_wait_quantiles_rows(shifts, weights, p, m, [q])[:, 0]
    return np.where(finite, out, np.inf)


def discrete_cdf(t: float, values: FloatArray, weights: FloatArray) -> FloatArray:
    """``P(X ≤ t)`` per row of a discrete distribution (``values``, ``weights`` of shape (n, m))."""
    return np.sum(weights * (values <= t * (1.0 + 1e-12)), axis=-1) / np.sum(weights, axis=-1)


def discrete_quantile(q: float, values: FloatArray, weights: FloatArray) -> FloatArray:
    """The ``q`` quantile of each row (the smallest value whose CDF reaches ``q``, as
    ``queueing.weighted_quantiles``)."""
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    cdf = np.cumsum(np.take_along_axis(weights, order, axis=1), axis=1)
    cdf /= cdf[:, -1:]
    idx = np.minimum(np.sum(cdf < q - 1e-12, axis=1), values.shape[1] - 1)
    return v[np.arange(values.shape[0]), idx]


# --------------------------------------------------------------------------- aggregated serving


@dataclass(frozen=True, kw_only=True)
class AggregatedLatency:
    """Per steady state: the TTFT and ITL distributions in the compact form the SLO tests need."""

    ttft_shifts_s: FloatArray  # (n, ni)
    ttft_weights: FloatArray  # (ni,)
    p_wait: FloatArray  # (n,)
    mean_wait_s: FloatArray  # (n,)
    #: ITL = an iteration kind (``base``, (n, k)) shifted by the batch fluctuation (``shift``, (n, f))
    base_s: FloatArray
    base_weights: FloatArray
    shift_s: FloatArray
    shift_weights: FloatArray

    @property
    def itl_values_s(self) -> FloatArray:
        return (self.base_s[:, :, None] + self.shift_s[:, None, :]).reshape(self.base_s.shape[0], -1)

    @property
    def itl_weights(self) -> FloatArray:
        return (self.base_weights[:, :, None] * self.shift_weights[:, None, :]).reshape(self.base_s.shape[0], -1)

    def itl_cdf(self, t: float) -> FloatArray:
        """``P(ITL ≤ t)`` per state: ``Σ_j w_j · F_base(t − shift_j)``, with ``F_base`` read off each row's
        sorted kinds (one sort and one search instead of the full kind × shift product)."""
        n, k = self.base_s.shape
        first = np.arange(n)[:, None]  # row r's first element in the flattened (n, k) arrays is r·k
        # flat indices, sorted within each row (a stable sort: the rows come nearly sorted, where it is fastest)
        order = np.argsort(self.base_s, axis=1, kind="stable") + first * k
        v = self.base_s.ravel()[order]
        cum = np.zeros((n, k + 1))
        np.cumsum(self.base_weights.ravel()[order], axis=1, out=cum[:, 1:])
        total = cum[:, -1:]
        # one searchsorted over all rows: row r's values are offset by r·span, so rows never interleave
        # (each row is sorted: its extremes are its first and last values, NaN sorting last)
        v_min = np.min(v[:, 0])
        span = float(np.max(v[:, -1]) - v_min) + float(np.max(np.abs(self.shift_s))) * 2.0 + abs(t) + 1.0
        offset = first * span
        flat = (v - v_min + offset).ravel()
        x = t * (1.0 + 1e-12) - self.shift_s - v_min + offset  # (n, f)
        pos = np.searchsorted(flat, x.ravel(), side="right").reshape(x.shape) - first * k
        pos = np.minimum(np.maximum(pos, 0), k)
        f_base = cum.ravel()[pos + first * (k + 1)] / total
        return np.sum(self.shift_weights * f_base, axis=1) / np.sum(self.shift_weights, axis=1)


def aggregated_latency(model: AggregatedModel, st: SteadyState, arrival_scv: float = 1.0
                       ) -> AggregatedLatency:
    """The distributions ``evaluate`` builds for an open loop, for every state of ``st`` at once (the TTFT's
    wait: the prefill lane's and the one for a place in the batch, ``batch.slot_wait``)."""
    overhead = model.problem.engine.request_overhead_s
    u = np.minimum(st.prefill_utilization, MAX_UTILIZATION)
    wq = st.queue_wait_s
    shifts = overhead + st.residual_s[:, None] + st.own_prefill_s
    # ITL kinds: the decode-only iteration, then the mixed kinds (``aggregated.iteration_kinds``)
    base_v, base_w = iteration_kinds(model, st)
    # the decode batch's fluctuation (size-biased, its variance from batch_dispersion), as the open-loop rows
    b = st.batch[:, None]
    rows = st.budget_index if st.budget_index.size == st.batch.size else np.zeros(st.batch.size, dtype=np.intp)
    top = np.maximum(model.cap_k[rows], 1.0)[:, None]
    sd = np.sqrt(np.maximum(st.batch, 0.0) * batch_dispersion(model, st, rows))[:, None]
    pts = np.clip(np.round(b + sd * FLUCTUATION_Z[None, :]), 1.0, top)
    bw = pts / np.sum(pts, axis=1, keepdims=True)
    shift = model.tables.decode(pts, rows) - st.decode_iteration_s[:, None]
    shift -= np.sum(shift * bw, axis=1, keepdims=True)
    idle = st.batch <= 0
    shift[idle] = 0.0
    bw[idle] = 1.0 / bw.shape[1]
    p_wait, mean_wait = with_slot_wait(np.where(wq > 0, u, 0.0), wq, *slot_wait(model, st, arrival_scv))
    return AggregatedLatency(
        ttft_shifts_s=shifts,
        ttft_weights=model.in_weights,
        p_wait=p_wait,
        mean_wait_s=mean_wait,
        base_s=base_v,
        base_weights=base_w,
        shift_s=shift,
        shift_weights=bw,
    )


def slo_checks(lat: AggregatedLatency, slo: Slo) -> tuple[BoolArray, BoolArray]:
    """(TTFT target met, ITL target met) per state; a target the SLO does not set is always met."""
    n = lat.p_wait.shape[0]
    ttft_ok = np.ones(n, dtype=bool)
    itl_ok = np.ones(n, dtype=bool)
    if slo.ttft_s is not None:
        f = shifted_wait_cdf(slo.ttft_s, lat.ttft_shifts_s, lat.ttft_weights, lat.p_wait, lat.mean_wait_s)
        ttft_ok = f >= slo.ttft_percentile / 100.0 - 1e-12
    if slo.itl_s is not None:
        itl_ok = (
            lat.itl_cdf(slo.itl_s) >= slo.itl_percentile / 100.0 - 1e-12
        )
    return ttft_ok, itl_ok


@dataclass(frozen=True, kw_only=True)
class AggregatedCapacity:
    """Per token budget (the model's ``budgets``): the SLO capacity of one replica and where it stops."""

    budgets: FloatArray  # (nk,)
    #: largest per-replica rate within the SLO [requests/s] (0 when not even a lone request meets it)
    rate_per_s: FloatArray
    #: the decode batch at that rate
    batch: FloatArray
    #: what stops more load: "ttft", "itl", "prefill_saturation" or "batch_capacity" (the KV cache or the
    #: largest max_batch_size searched); "ttft_at_zero_load" / "itl_at_zero_load" when nothing meets it
    binding: tuple[str, ...]
    #: the state at the capacity, one per budget
    state: SteadyState
    #: the stable branch of each budget's curve: batch, rate and SLO flags, shapes (nk, CURVE_POINTS + 1)
    curve_batch: FloatArray
    curve_rate_per_s: FloatArray
    curve_ok: BoolArray
    curve_mean_itl_s: FloatArray


def curve_batches(model: AggregatedModel) -> FloatArray:
    """The decode batches each budget row's curve is walked on, shape (nk, CURVE_POINTS + 1): zero, then
    geometric from 1e-3 up to the row's batch cap."""
    cap = np.maximum(model.cap_k, 1e-3)[:, None]
    frac = np.linspace(0.0, 1.0, CURVE_POINTS)[None, :]
    lo = np.minimum(1e-3, cap)
    return np.concatenate([np.zeros_like(cap), lo * (cap / lo) ** frac], axis=1)


def aggregated_capacity(model: AggregatedModel, slo: Slo, arrival_scv: float = 1.0, *,
                        choose_in: NDArray[np.intp] | None = None, tie_fraction: float = 0.0,
                        batch_top: float = np.inf) -> AggregatedCapacity:
    """SLO capacity of one replica for each of ``model.budgets`` (one vectorized pass per refinement).

    ``choose_in``: when only the best row of each group matters (the whole plan keeps one budget per
    configuration: the first within ``tie_fraction`` of its group's largest capacity at batch limits up to
    ``batch_top``), a row stops refining once it provably cannot be that one. Along the stable branch λ
    grows with B, so a row's capacity lies between the rates at its bracket's ends; when even the upper
    end is below ``(1 − tie_fraction)`` times a lower end the group has reached, the row is neither chosen
    nor the group's largest, and its rate stays the one at its bracket's lower end (a lower bound). The
    chosen rows' results are those of the full search; the other rows' are not exact."""
    nk = model.budgets.size
    b_rows = curve_batches(model)
    nb = b_rows.shape[1]
    kk = np.repeat(np.arange(nk), nb)
    st = model.states_at_batch(b_rows.ravel(), kk, arrival_scv)
    lam = st.rate_per_s.reshape(nk, nb)
    ok = (st.stable & np.isfinite(st.rate_per_s)).reshape(nk, nb)
    ok &= lam >= np.maximum.accumulate(np.where(ok, lam, -np.inf), axis=1)
    ttft_ok, itl_ok = slo_checks(aggregated_latency(model, st, arrival_scv), slo)
    ttft_ok, itl_ok = ttft_ok.reshape(nk, nb), itl_ok.reshape(nk, nb)
    good = np.cumprod(ok & ttft_ok & itl_ok, axis=1).astype(bool)
    mean_itl = st.mean_iteration_s.reshape(nk, nb)
    last = np.sum(good, axis=1) - 1  # last good curve index, −1 when none
    rows = np.arange(nk)
    b_lo = np.where(last >= 0, b_rows[rows, np.maximum(last, 0)], 0.0)
    inside = (last >= 0) & (last < nb - 1)
    b_hi = np.where(inside, b_rows[rows, np.minimum(last + 1, nb - 1)], b_lo)
    # why the first bad point is bad (the first of prefill saturation, TTFT, ITL, in that order)
    nxt = np.minimum(last + 1, nb - 1)
    why = np.where(~ok[rows, nxt], 0, np.where(~ttft_ok[rows, nxt], 1, 2))
    # for choose_in: the rates at the bracket's ends (the upper one unknown past the branch's end)
    lam_lo = np.where(last >= 0, lam[rows, np.maximum(last, 0)], 0.0)
    lam_hi = np.where(ok[rows, nxt], lam[rows, nxt], np.inf)
    refining = inside.copy()
    for _ in range(REFINE_ROUNDS):
        if choose_in is not None:
            refining &= ~_cannot_be_chosen(choose_in, lam_lo, np.where(inside, lam_hi, lam_lo),
                                           b_lo <= batch_top, tie_fraction)
        sel = np.flatnonzero(refining)
        if sel.size == 0:
            break
        frac = np.linspace(0.0, 1.0, REFINE_POINTS + 2)[1:-1]
        bs = (b_lo[sel, None] + (b_hi[sel, None] - b_lo[sel, None]) * frac[None, :]).ravel()
        ks = np.repeat(sel, frac.size)
        sub = model.states_at_batch(bs, ks, arrival_scv)
        t_ok, i_ok = slo_checks(aggregated_latency(model, sub, arrival_scv), slo)
        s_ok = sub.stable & np.isfinite(sub.rate_per_s)
        g = np.cumprod((s_ok & t_ok & i_ok).reshape(sel.size, -1), axis=1).astype(bool)
        n_good = np.sum(g, axis=1)
        width = (b_hi[sel] - b_lo[sel]) / (REFINE_POINTS + 1)
        new_lo = b_lo[sel] + width * n_good
        bad = np.minimum(n_good, frac.size - 1)
        pick = bad + np.arange(sel.size) * frac.size
        why_sub = np.where(~s_ok[pick], 0, np.where(~t_ok[pick], 1, 2))
        why[sel] = np.where(n_good < frac.size, why_sub, why[sel])
        if choose_in is not None:
            lam_sub = sub.rate_per_s.reshape(sel.size, -1)
            lam_lo[sel] = np.where(n_good > 0, lam_sub[np.arange(sel.size), np.maximum(n_good - 1, 0)], lam_lo[sel])
            # the new upper end: the first point past the good run, or the old end when all were good
            hi_ok = s_ok[pick] & (sub.rate_per_s[pick] >= lam_lo[sel])
            lam_hi[sel] = np.where(n_good < frac.size, np.where(hi_ok, sub.rate_per_s[pick], np.inf), lam_hi[sel])
        b_hi[sel] = new_lo + width
        b_lo[sel] = new_lo
    final = model.states_at_batch(b_lo, rows, arrival_scv)
    rate = np.where(last >= 0, final.rate_per_s, 0.0)
    binding = []
    for k in range(nk):
        if last[k] < 0:
            binding.append("ttft_at_zero_load" if not ttft_ok[k, 0] else "itl_at_zero_load")
        elif not inside[k]:
            binding.append("batch_capacity")
        else:
            binding.append(("prefill_saturation", "ttft", "itl")[int(why[k])])
    return AggregatedCapacity(
        budgets=model.budgets.copy(),
        rate_per_s=rate,
        batch=np.where(last >= 0, b_lo, 0.0),
        binding=tuple(binding),
        state=final,
        curve_batch=b_rows,
        curve_rate_per_s=np.where(ok, lam, np.nan),
        curve_ok=good,
        curve_mean_itl_s=mean_itl,
    )


def _cannot_be_chosen(group: NDArray[np.intp], lam_lo: FloatArray, lam_hi: FloatArray, lo_counts: BoolArray,
                      tie_fraction: float) -> BoolArray:
    """Rows whose largest possible rate ``lam_hi`` is below ``1 − tie_fraction`` of a rate their group has
    surely reached (``lam_lo`` where ``lo_counts``): neither the group's first near-best row nor its best."""
    reached = np.full(int(group.max()) + 1, 0.0)
    np.maximum.at(reached, group, np.where(lo_counts, lam_lo, 0.0))
    return lam_hi < reached[group] * (1.0 - tie_fraction) * (1.0 - 1e-9)


def slice_capacity(cap: AggregatedCapacity, rows: NDArray[np.intp]) -> AggregatedCapacity:
    """The capacity table of some budget rows (one configuration's rows of a stacked search)."""
    return AggregatedCapacity(
        budgets=cap.budgets[rows], rate_per_s=cap.rate_per_s[rows], batch=cap.batch[rows],
        binding=tuple(cap.binding[k] for k in rows), state=take_states(cap.state, rows),
        curve_batch=cap.curve_batch[rows], curve_rate_per_s=cap.curve_rate_per_s[rows], curve_ok=cap.curve_ok[rows],
        curve_mean_itl_s=cap.curve_mean_itl_s[rows],
    )


def capacity_at_batch_limits(
    model: AggregatedModel, cap: AggregatedCapacity, batch_limits: FloatArray, arrival_scv: float = 1.0
) -> FloatArray:
    """SLO capacity [requests/s] per (budget, max batch size): the budget's capacity, or the rate at which the
    mean decode batch reaches the limit when that comes first. Shape (nk, len(batch_limits))."""
    lim = np.minimum(np.asarray(batch_limits, dtype=np.float64)[None, :], model.cap_k[:, None])  # (nk, nm)
    nk = cap.budgets.size
    b = np.minimum(cap.batch[:, None], lim)
    need = (lim < cap.batch[:, None]) & (cap.rate_per_s[:, None] > 0)
    out = np.broadcast_to(cap.rate_per_s[:, None], b.shape).copy()
    if np.any(need):
        ki, li = np.nonzero(need)
        st = model.states_at_batch(b[ki, li], ki, arrival_scv)
        out[ki, li] = st.rate_per_s
    return out.reshape(nk, lim.shape[1])


def aggregated_quantiles(model: AggregatedModel, st: SteadyState, slo: Slo, arrival_scv: float = 1.0
                         ) -> tuple[FloatArray, FloatArray]:
    """(TTFT at the SLO's TTFT percentile, ITL at its ITL percentile) [s] per state."""
    lat = aggregated_latency(model, st, arrival_scv)
    ttft = shifted_wait_quantile(
        slo.ttft_percentile / 100.0,
        lat.ttft_shifts_s,
        np.broadcast_to(lat.ttft_weights, lat.ttft_shifts_s.shape),
        lat.p_wait,
        lat.mean_wait_s,
    )
    itl = discrete_quantile(slo.itl_percentile / 100.0, lat.itl_values_s, lat.itl_weights)
    return ttft, itl


def states_at_rate(
    model: AggregatedModel, rate_per_s: float, arrival_scv: float = 1.0
) -> tuple[SteadyState, BoolArray]:
    """The state of every budget at one per-replica rate (as ``steady_state`` does for one budget), and
    whether each budget sustains it.

    The end of a budget's stable branch lies between two points of its coarse curve (``CURVE_POINTS``,
    ~×3 apart in B): where the rate is beyond the last stable point, the step past it is refined as
    ``aggregated_capacity`` refines its brackets (``REFINE_ROUNDS`` rounds of ``REFINE_POINTS``), on
    stability alone, so that a budget is not called overloaded below the rate its branch reaches (before
    2026-12-02 the coarse point was the top: Llama-3.1-8B, 2000-token prompts, budget 512 sustained
    8.4 requests/s by it and 10.7 by ``evaluate``). Every stable point of each round is kept, since the
    batch at the rate is interpolated on them: ``AggregatedModel._refined_edge`` keeps one per round, which
    finds the same edge but put that budget's batch at 10 requests/s at 35.8 against ``evaluate``'s 33.6
    (these points: 33.5)."""
    nk = model.budgets.size
    b_rows = curve_batches(model)
    nb = b_rows.shape[1]
    st = model.states_at_batch(b_rows.ravel(), np.repeat(np.arange(nk), nb), arrival_scv)
    lam = st.rate_per_s.reshape(nk, nb)
    ok = (st.stable & np.isfinite(st.rate_per_s)).reshape(nk, nb)
    ok &= lam >= np.maximum.accumulate(np.where(ok, lam, -np.inf), axis=1)
    rows = np.arange(nk)
    last = np.where(np.any(ok, axis=1), nb - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
    top = np.where(last >= 0, lam[rows, np.maximum(last, 0)], 0.0)
    extra_b: list[list[float]] = [[] for _ in range(nk)]
    extra_lam: list[list[float]] = [[] for _ in range(nk)]
    b_lo = b_rows[rows, np.maximum(last, 0)]
    b_hi = b_rows[rows, np.minimum(last + 1, nb - 1)]
    refining = (last >= 0) & (last < nb - 1) & (rate_per_s > top)
    frac = np.linspace(0.0, 1.0, REFINE_POINTS + 2)[1:-1]
    for _ in range(REFINE_ROUNDS):
        sel = np.flatnonzero(refining)
        if sel.size == 0:
            break
        bs = b_lo[sel, None] + (b_hi[sel, None] - b_lo[sel, None]) * frac[None, :]
        sub = model.states_at_batch(bs.ravel(), np.repeat(sel, frac.size), arrival_scv)
        lam_sub = sub.rate_per_s.reshape(sel.size, -1)
        s_ok = (sub.stable & np.isfinite(sub.rate_per_s)).reshape(sel.size, -1)
        running = np.maximum(top[sel, None], np.maximum.accumulate(np.where(s_ok, lam_sub, -np.inf), axis=1))
        good = np.cumprod(s_ok & (lam_sub >= running), axis=1).astype(bool)
        n_good = np.sum(good, axis=1)
        for i, k in enumerate(sel.tolist()):
            extra_b[k] += bs[i, :n_good[i]].tolist()
            extra_lam[k] += lam_sub[i, :n_good[i]].tolist()
            if n_good[i] > 0:
                top[k] = lam_sub[i, n_good[i] - 1]
        width = (b_hi[sel] - b_lo[sel]) / (REFINE_POINTS + 1)
        b_lo[sel] = b_lo[sel] + width * n_good
        b_hi[sel] = b_lo[sel] + width
        refining[sel] = rate_per_s > top[sel]
    b = np.empty(nk)
    for k in range(nk):
        lk = np.concatenate([lam[k][ok[k]], extra_lam[k]])
        bk = np.concatenate([b_rows[k][ok[k]], extra_b[k]])
        b[k] = np.interp(min(rate_per_s, top[k]), lk, bk) if lk.size else 0.0
    at = model._at_batch(b, arrival_scv, 1.0, np.full(nk, float(rate_per_s)), np.arange(nk))
    return at, at.stable & (rate_per_s <= top * (1.0 + 1e-9))
