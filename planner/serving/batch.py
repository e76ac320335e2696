"""Open-loop evaluation of many operating points of one aggregated deployment at once, as columns.

Scenarios that differ only in their open-loop rate, replica count and SLO share one replica model (its cost
grid and λ(B) curve); this module evaluates all of them with array operations, one row per scenario, and is
what ``evaluate`` itself runs for an open-loop aggregated problem (a batch of one), so a what-if row and an
evaluate call give the same numbers. The laws are those of ``planner.serving.evaluate`` (its docstring):

- TTFT: front-end overhead + residual iteration + the prompt's own prefill, plus a wait with an atom at zero
  and an exponential tail; its quantiles in closed form (``queueing.shifted_wait_quantiles_rows``).
- ITL: the iteration kinds a stream sees, shifted by the decode batch's fluctuation (variance from
  ``batch_dispersion``: bursts of arrivals while prefill stretches the iterations, processor sharing).
- TPOT: normal over the ``O − 1`` gaps of a request (central limit), mixed over output lengths.
- E2E: TTFT's law with the decode time of each output length added, re-binned to ``E2E_POINTS`` points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special, stats

from planner.errors import InvalidInput
from planner.serving import queueing as Q
from planner.serving.aggregated import MAX_UTILIZATION, AggregatedModel, SteadyState, iteration_kinds
from planner.serving.grids import broadcast_view
from planner.serving.types import (
    AggregatedDeployment,
    Evaluation,
    LatencyStats,
    ServingProblem,
    Slo,
    TtftBreakdown,
)
from planner.serving.workload import Arrival, tail_refined_groups, tail_refined_targets

FloatArray = NDArray[np.float64]
#: the quantiles every latency reports (p50, p90, p99)
QUANTILES = np.array([0.5, 0.9, 0.99])
#: points per output length for the TPOT normal approximation, and their standard-normal quantiles
TPOT_POINTS = np.array([0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98])
#: standard-normal points (equal mass) representing the decode-batch fluctuation
FLUCTUATION_POINTS = 7
#: points the E2E law is re-binned to, at tail-refined probabilities (``workload.tail_refined_targets``;
#: ``evaluate.compress_points``, ``_discrete_rebin``). 64 equal masses until 2026-12-05: against the law
#: without re-binning, over 164 evaluations (traces of 300-1500 prompts with σ = 0.8-2.2 and one with a
#: 400k-token outlier, three output laws, chunked, unchunked and disaggregated, Poisson and closed loops),
#: the e2e p99 was off by a median 0.02 % but 53 % at the 90th percentile of cases (trace outputs: a tail
#: rarer than 1/128 fell out); 128 tail-refined points: p50 / p90 / p99 within 2.5 / 2.2 / 4.5 %, 90 % of
#: cases within 0.8 / 1.2 / 3.0 %, at no measurable cost (``tests/unit/test_e2e_compression.py``)
E2E_POINTS = 128
#: most prompt points the end-to-end prompt × output grid is formed from: beyond it the TTFT shifts are
#: grouped (``group_shifts``, finer towards the long end) first. A prompt's own time is a small part of its
#: end-to-end latency, and a 256-point trace's grid (65,536 points a row to sort) took ~4.7 ms of a ~14 ms
#: call. 64 groups until 2026-12-06; 32 take the re-binning of a 247-point output law from 0.55 to 0.29 ms,
#: and against every prompt point kept (28 evaluations: the benchmark's 2000-sample trace at 4 loads, open
#: and closed, and the heavy-tailed traces of ``tests/unit/test_e2e_compression.py``) move the e2e p50 /
#: p90 / p99 by at most 0.05 / 0.08 / 0.02 % (64 groups: 0.02 / 0.01 / 0.01 %), against the few per cent
#: of the re-binning itself
E2E_PROMPT_GROUPS = 32
#: the decodes' time share lost to prefill and the decode iteration's elasticity in the batch are capped
#: below 1 in ``batch_dispersion`` (both laws diverge there, at the stability limit), and the relative step
#: of the elasticity's central difference
MAX_DILATION = 0.95
MAX_ELASTICITY = 0.9
ELASTICITY_STEP = 0.05
_ELASTICITY_POINTS = np.array([1.0 - ELASTICITY_STEP, 1.0 + ELASTICITY_STEP])
#: the share of time at the batch cap above which a row warns (``batch_cap_share``)
CAP_WARNING_SHARE = 1e-3
#: the resources whose busy fraction names the limiting one, in the order ties are broken
UTILIZATIONS = ("prefill_lane", "decode_batch", "kv_cache")
LIMITING = ("prefill", "decode", "kv_capacity")


#: their standard-normal quantiles, and the fluctuation's equal-mass standard-normal points (computed once:
#: scipy's ppf costs more than the rest of the laws)
TPOT_Z = stats.norm.ppf(TPOT_POINTS)
FLUCTUATION_Z = stats.norm.ppf((np.arange(FLUCTUATION_POINTS) + 0.5) / FLUCTUATION_POINTS)


def life_overlap(out_values: FloatArray, out_weights: FloatArray) -> float:
    """θ = E[min(D₁, D₂)] / E[D] over two independent decode lives D = O − 1 [iterations] of the output law
    (``out_values`` with probabilities ``out_weights``): 1 for a fixed output length, ½ for exponential ones;
    the share of a burst's decodes still running together."""
    d = np.maximum(np.asarray(out_values, dtype=np.float64) - 1.0, 0.0)
    w = np.asarray(out_weights, dtype=np.float64)
    mean = float(np.dot(w, d))
    # E[min(D₁, D₂)] = Σ_i w_i·d_i·(w_i + 2·Σ_{j after i} w_j) over the points in increasing order (a pair's
    # minimum is its earlier point): O(n log n), where the pairwise matrix is n² (256² for a trace)
    order = np.argsort(d, kind="stable")
    ds, ws = d[order], w[order]
    after = np.cumsum(ws[::-1])[::-1] - ws
    return float(np.dot(ws * ds, ws + 2.0 * after)) / mean if mean > 0 else 1.0


def decode_life_overlap(model: AggregatedModel) -> float:
    """:func:`life_overlap` of ``model``'s output law (computed once per model)."""
    cached = model.__dict__.get("_life_overlap")
    if cached is None:
        cached = life_overlap(model.out_values, model.out_weights)
        model.__dict__["_life_overlap"] = cached
    return cached


def renewal_peakedness(arrival: Arrival, overlap: float, upstream_utilization: float = 0.0) -> float:
    """The factor by which open renewal (gamma) arrivals of squared CV c² widen the decode batch's
    variance/mean against Poisson ones: 1 + θ·(c² − 1), θ = :func:`life_overlap` (the peakedness of the
    GI/G/∞ occupancy in heavy traffic, Whitt, "On the heavy-traffic limit theorem for GI/G/∞ queues", Adv.
    Appl. Prob. 14, 1982: c² for fixed lives, (1 + c²) / 2 for exponential ones). 1 for Poisson arrivals and
    closed loops; at least c² > 0. ``upstream_utilization`` ρ: the streams come out of a queue that smooths
    them, and c² is its departures' 1 + (1 − ρ²)·(c² − 1) (the arrival part of the QNA linking equation,
    Whitt, "The Queueing Network Analyzer", Bell Syst. Tech. J. 62, 1983; its service part, ρ²·(c_s² − 1),
    is left out, so that Poisson answers do not move)."""
    if arrival.kind != "gamma":
        return 1.0
    rho = min(max(float(upstream_utilization), 0.0), 1.0)
    return 1.0 + overlap * (1.0 - rho * rho) * (float(arrival.arrival_cv) ** 2 - 1.0)


def decode_elasticity(decode_s: Callable[[FloatArray], FloatArray], b: FloatArray) -> FloatArray:
    """ε = d ln τ_d / d ln B of the decode iteration ``decode_s`` at batch ``b`` (a central difference of
    relative step ``ELASTICITY_STEP``), capped at ``MAX_ELASTICITY``."""
    b = np.maximum(np.asarray(b, dtype=np.float64), 0.0)
    t = decode_s(b[..., None] * _ELASTICITY_POINTS)  # one look-up of both points
    t_lo, t_hi = t[..., 0], t[..., 1]
    ratio = np.log((1.0 + ELASTICITY_STEP) / (1.0 - ELASTICITY_STEP))
    eps = np.log(np.maximum(t_hi, 1e-300) / np.maximum(t_lo, 1e-300)) / ratio
    return np.clip(eps, 0.0, MAX_ELASTICITY)


def batch_dispersion(model: AggregatedModel, st: SteadyState, rows: NDArray[np.intp] | int = 0) -> FloatArray:
    """Variance over mean of the open-loop decode batch, per state (1 for the M/G/∞ occupancy).

    Two things widen it beyond Poisson. (i) A stream's decode life is counted in iterations, and each prompt
    that arrives stretches the iterations of every running stream by its prefill: arrivals during that
    stretch join the same burst, a branching process with offspring Poisson(λ·P) of mean u (the decodes'
    time share lost to prefill, 1 − τ_d / τ̄). A burst has E[K(K − 1)] / E[K] = σ² / (1 − u)² + u / (1 − u)
    with σ² = u + u²·scv(P) the offspring's variance (total progeny of a Galton–Watson tree), and a batch
    of decode lives fed by bursts has variance/mean 1 + θ·E[K(K − 1)] / E[K], θ = ``decode_life_overlap``
    (the M^X/G/∞ occupancy). (ii) More decodes make every iteration longer, so each stays longer: a
    processor-sharing station whose rate grows sub-linearly with the batch, whose occupancy is negative
    binomial with variance/mean 1 / (1 − ε) and insensitive to the life's distribution (Kelly, "Reversibility
    and Stochastic Networks", 1979, ch. 3), ε = d ln τ_d / d ln B the decode iteration's elasticity.
    Checked against the reference simulation's time-weighted batch (``docs/accuracy_crosscheck.md``).
    """
    b = np.maximum(st.batch, 0.0)
    u = np.clip(1.0 - st.decode_iteration_s / np.maximum(st.mean_iteration_s, 1e-300), 0.0, MAX_DILATION)
    own = st.own_prefill_s
    w = model.in_weights
    m1 = own @ w
    scv = np.maximum((own**2 @ w) / np.maximum(m1, 1e-300) ** 2 - 1.0, 0.0)
    burst = (u + u * u * scv) / (1.0 - u) ** 2 + u / (1.0 - u)
    eps = decode_elasticity(lambda x: model.tables.decode(x + 1.0, rows), b)
    # (iii) gamma arrivals: their own peakedness on top (``renewal_peakedness``)
    theta = decode_life_overlap(model)
    peaked = renewal_peakedness(model.problem.workload.arrival, theta) - 1.0
    return np.where(b > 0, (1.0 + theta * burst + peaked) / (1.0 - eps), 1.0)


def batch_cap_share(batch: FloatArray, dispersion: FloatArray, cap: float) -> FloatArray:
    """The share of time the decode batch spends at its cap (``max_batch_size`` or the KV cache's sequences):
    P(B ≥ cap) for a batch of mean ``batch`` and variance ``dispersion · batch``, as a gamma law of those
    two moments (the continuous form of the negative binomial, whose variance/mean is the dispersion; a
    Poisson batch, dispersion 1, has the gamma of shape B). A closed form of a reflected process would
    need the batch's dynamics at the cap; this is its free tail, checked against the reference simulation's
    share of time with a prompt kept out for want of KV cache or a batch slot
    (``SimulationResult.admission_blocked_share``; ``tests/unit/test_batch_cap.py``)."""
    b = np.asarray(batch, dtype=np.float64)
    d = np.maximum(np.asarray(dispersion, dtype=np.float64), 1e-9)
    ok = b > 0
    return np.where(ok, special.gammaincc(np.where(ok, b, 1.0) / d, cap / d), 0.0)


def slot_wait(model: AggregatedModel, st: SteadyState, arrival_scv: float) -> tuple[FloatArray, FloatArray]:
    """(mean wait [s], probability of waiting) of a new request for a place in the decode batch, per state:
    the batch holds at most its cap (``max_batch_size``, or the KV cache's sequences of the mean context)
    and a request holds its place from admission to its last token, its own prefill then its decode steps
    at the mean iteration time. A G/G/c queue over those places, Allen–Cunneen's approximation
    ``C(c, a)/(c/S − λ) · (c_a² + c_s²)/2`` (``queueing.ggc_wait_array``; the disaggregated decode pool's
    slot wait), c_s² the decode steps' spread. The offered places are capped at ``MAX_UTILIZATION`` of
    the cap, as the decode pool's are: the batch law's stable branch ends at the cap itself.

    Without it the TTFT ignored the wait (a warning said so). Llama-3.1-8B on one H100, 2000-token prompts,
    300-token outputs, ``max_batch_size`` 32, against the reference simulation (four 12000-request
    replications, 2026-12-02), TTFT mean / p90 / p99 [ms]:

    ======  =============  ================  ====================  ===========
    req/s   mean batch     closed form       simulation            without it
    ======  =============  ================  ====================  ===========
    5.5     22             96 / 145 / 287    129 / 151 / 1092      87 / 110
    6.0     26             192 / 452 / 1012  269 / 828 / 2000      89 / 116
    6.2     28             377 / 967 / 2106  414 / 1285 / 2656     90 / 119
    6.4     30             1184 / 2951 / 6132  730 / 2080 / 3776   92 / 121
    ======  =============  ================  ====================  ===========

    P(wait) is 0.24 and 0.43 at 6.0 and 6.2 where the simulation keeps a prompt out 23 and 34 % of the time
    (``tests/unit/test_slot_wait.py``). Its p99 below the cap's neighbourhood stays short (the simulation's
    long episodes of a full batch are not in a stationary queue's tail)."""
    n = st.batch.size
    rows = st.budget_index if st.budget_index.size == n else np.zeros(n, dtype=np.intp)
    lam = np.asarray(st.rate_per_s, dtype=np.float64)
    residence = place_holding_s(model, st)
    steps = np.maximum(model.out_values - 1.0, 0.0)
    mean_steps = max(float(steps @ model.out_weights), 1e-300)
    scv_s = max(float((steps**2) @ model.out_weights) / mean_steps**2 - 1.0, 0.0)
    cap = np.maximum(np.round(model.cap_k[rows]), 1.0)
    wait, p_wait = np.zeros(lam.size), np.zeros(lam.size)
    # a place is scarce only within a few standard deviations of the cap: below c − 6√c − 1 busy places (the
    # Poisson occupancy's deviation) Erlang C is under 1e-11 and its wait under a nanosecond, and the
    # searches' many states far from their caps skip its O(c) sum
    near = (lam > 0) & (residence > 0) & (lam * residence > cap - 6.0 * np.sqrt(cap) - 1.0)
    for c in (np.unique(cap[near]) if near.any() else ()):
        sel = np.flatnonzero(near & (cap == c))
        s = residence[sel]
        wait[sel], p_wait[sel] = Q.ggc_wait_array(
            arrival_rate_per_s=np.minimum(lam[sel], MAX_UTILIZATION * c / s), servers=c, service_mean_s=s,
            service_scv=scv_s, arrival_scv=arrival_scv)
    return wait, p_wait


def place_holding_s(model: AggregatedModel, st: SteadyState) -> FloatArray:
    """How long a request holds its place in the decode batch [s], per state: its own prefill, then its
    decode steps at the mean iteration time (``slot_wait``; λ times it is the places in use)."""
    return st.own_prefill_s @ model.in_weights + model.mean_decode_steps * st.mean_iteration_s


def with_slot_wait(p_wait: FloatArray, mean_wait_s: FloatArray, slot_mean_s: FloatArray, slot_p: FloatArray
                   ) -> tuple[FloatArray, FloatArray]:
    """The TTFT's wait law (an atom at zero and an exponential tail, ``queueing``) when a request waits for
    a batch slot and then for the prefill lane: the two waits' sum, as the one law with its probability of
    any wait, 1 − (1 − p₁)(1 − p₂), and its mean, m₁ + m₂ (moments matched; the slot's wait dominates
    where it matters, near the cap), the probability capped at 0.995 as the lane's is."""
    p = np.minimum(1.0 - (1.0 - np.asarray(p_wait)) * (1.0 - np.asarray(slot_p)), 0.995)
    return np.where(np.asarray(mean_wait_s) + slot_mean_s > 0, p, 0.0), np.asarray(mean_wait_s) + slot_mean_s


def cap_share(model: AggregatedModel, batch: FloatArray, dispersion: FloatArray) -> FloatArray:
    """The share of time the decode batch is at one of its caps: ``max_batch_size`` on the sequence count,
    or the KV cache on the KV the running sequences hold. That KV, in units of the mean sequence's, has the
    batch's variance plus the spread of what each holds: a compound sum, dispersion + ``model.kv_scv``.

    For the crosscheck's lognormal lengths (``kv_scv`` 0.71) that raises the KV cap's share at ρ = 0.9 of
    Qwen3-32B from the count's law: chunked 0.40 → 0.56 %, unchunked 0.58 → 0.75 %, where the reference
    simulation keeps a prompt out for want of KV 1.17 % and 0.62 % of the time (2026-12-02,
    ``tests/unit/test_batch_cap.py``)."""
    slots = batch_cap_share(batch, dispersion, float(model.dep.max_batch_size))
    kv = batch_cap_share(batch, dispersion + model.kv_scv, model.kv_batch_cap)
    return np.maximum(slots, kv)


@dataclass(frozen=True, kw_only=True)
class OpenLoopRows:
    """One row per scenario. Latencies are (n, 4) arrays: mean, p50, p90, p99 [s]."""

    ttft_s: FloatArray
    itl_s: FloatArray
    tpot_s: FloatArray
    e2e_latency_s: FloatArray
    #: (n, 4): queue, prefill, kv_transfer, overheads [s]
    ttft_breakdown_s: FloatArray
    requests_per_s: FloatArray
    throughput_output_tokens_per_s: FloatArray
    throughput_output_tokens_per_s_per_gpu: FloatArray
    output_tokens_per_s_per_user: FloatArray
    #: (n, 3) in the order of ``UTILIZATIONS``
    utilization: FloatArray
    mean_decode_batch: FloatArray
    num_gpus: NDArray[np.int64]
    feasible: NDArray[np.bool_]
    #: index into ``LIMITING``
    limiting: NDArray[np.intp]
    #: NaN where the row has no SLO
    slo_attainment_fraction: FloatArray
    goodput_requests_per_s: FloatArray
    #: the ITL at the SLO's percentile [s], NaN without an ITL target (for the row's warning)
    itl_at_slo_s: FloatArray
    #: the share of time the decode batch is at its cap (``batch_cap_share``; for the row's warning)
    cap_share: FloatArray
    #: the cap [sequences], and whether the KV cache (not ``max_batch_size``) sets it
    batch_cap: float
    kv_limited: bool


def group_shifts(shifts: FloatArray, weights: FloatArray, order: NDArray[np.intp], k: int
                 ) -> tuple[FloatArray, FloatArray]:
    """TTFT shifts (n, m) of the prompt points (weights (m,), ``order`` sorting them by length) in at most
    ``k`` groups (``workload.tail_refined_groups``), each at its weighted mean shift in every row: (n, g)
    means and (g,) masses summing to 1. Returned as they are when m ≤ k."""
    if weights.size <= k:
        return shifts, weights
    ws = weights[order] / weights.sum()
    group = tail_refined_groups(ws, k)
    starts = np.flatnonzero(np.diff(group, prepend=-1))
    mass = np.add.reduceat(ws, starts)
    return np.add.reduceat(shifts[:, order] * ws, starts, axis=1) / mass, mass


def _discrete_rebin(values: FloatArray, weights: FloatArray, k: int) -> tuple[FloatArray, FloatArray]:
    """Each row of ``values`` (n, M) with ``weights`` (M,) as ``k`` points at the tail-refined
    mid-probabilities of ``workload.tail_refined_targets`` (rows of M ≤ k are returned whole, normalized),
    as ``evaluate.compress_points`` does for one row."""
    n, size = values.shape
    w = broadcast_view(weights / weights.sum(), values.shape)
    if size <= k:
        return values, np.array(w)
    order = np.argsort(values, axis=1, kind="stable")
    v = Q.take_rows(values, order)
    cdf = np.cumsum(Q.take_rows(w, order), axis=1)
    targets, masses = tail_refined_targets(k)
    idx = np.empty((n, k), dtype=np.intp)
    for r in range(n):  # one searchsorted a row: cheaper than an (n, k, M) comparison for large M
        idx[r] = np.searchsorted(cdf[r], targets)
    return Q.take_rows(v, np.minimum(idx, size - 1)), np.broadcast_to(masses, (n, k)).copy()


def evaluate_open_loop_rows(problem: ServingProblem, model: AggregatedModel, rate_per_s: FloatArray,
                            replicas: NDArray[np.int64], *, ttft_target_s: FloatArray | None = None,
                            ttft_percentile: FloatArray | None = None, itl_target_s: FloatArray | None = None,
                            itl_percentile: FloatArray | None = None) -> OpenLoopRows:
    """Evaluate ``problem``'s deployment at each (open-loop rate over all replicas, replica count) row.

    ``problem`` gives everything but the rate and the replica count (its arrival kind and cv, lengths,
    scheduler limits); ``model`` is its replica model. The SLO arrays are NaN where a row has no such target
    (all None: no SLO). The arrival's cv comes from ``problem``.
    """
    dep = problem.deployment
    assert isinstance(dep, AggregatedDeployment)
    w = problem.workload
    if w.arrival.kind not in ("poisson", "gamma"):
        raise InvalidInput("the batch evaluation is open-loop only", field="workload.arrival.kind")
    rate = np.asarray(rate_per_s, dtype=np.float64).ravel()
    reps = np.asarray(replicas, dtype=np.int64).ravel()
    n = rate.size
    scv = w.arrival.arrival_cv**2
    offered = rate / reps
    sat = model.saturation_rate_per_s(scv)
    overloaded = offered > sat
    lam = np.where(overloaded, sat, offered)
    st = model.steady_state(lam, scv, 1.0)
    feasible = st.stable & ~overloaded
    overhead = problem.engine.request_overhead_s
    wq = st.queue_wait_s
    finite = np.isfinite(wq)
    wq_f = np.where(finite, wq, 0.0)
    busy = st.prefill_utilization
    if (scv > 1.0 + 1e-12 or (dep.chunked_prefill and scv < 1.0 - 1e-12)) and not model.closed_loop:
        # gamma arrivals find the lane busy with the GI/M/1 probability σ, not its time share, as the lane's
        # wait has it (``aggregated._kingman_wait``; unchunked, bursty arrivals only: ``_unchunked``)
        busy = Q.busy_seen_by_arrivals(np.minimum(busy, 0.995), scv)
    p_row = np.where(wq_f > 0, np.minimum(busy, 0.995), 0.0)
    # then (first, in fact: admission comes before the prefill lane) the wait for a place in the batch
    p_row, wq_f = with_slot_wait(p_row, wq_f, *slot_wait(model, st, scv))
    in_w = model.in_weights
    own = st.own_prefill_s  # (n, m)
    shifts = overhead + st.residual_s[:, None] + own
    own_mean = np.sum(own * in_w, axis=1)  # row by row: the same bits whatever the batch size
    ttft_mean = overhead + st.residual_s + own_mean + wq_f
    ttft_q = Q.shifted_wait_quantiles_rows(shifts, in_w, p_row, wq_f, QUANTILES)

    # ITL: decode-only iterations and mixed (or prefill) ones, as a stream sees them
    itl_v, itl_w = iteration_kinds(model, st)
    # the decode batch fluctuates around its mean (batch_dispersion, size-biased weights): every iteration
    # kind moves by the decode-time change, the steady state's mean iteration time kept
    b = st.batch
    dispersion = batch_dispersion(model, st)
    b_sd = np.sqrt(np.maximum(b, 0.0) * dispersion)
    b_pts = np.clip(np.round(b[:, None] + b_sd[:, None] * FLUCTUATION_Z[None, :]), 1.0,
                    max(model.batch_cap, 1.0))
    b_pts = np.where((b > 0)[:, None], b_pts, 0.0)
    b_w = np.where((b > 0)[:, None], b_pts, 1.0)
    b_w = b_w / np.sum(b_w, axis=1, keepdims=True)
    shift = model.tables.decode(b_pts) - st.decode_iteration_s[:, None]
    shift -= np.sum(shift * b_w, axis=1, keepdims=True)
    itl_v = (itl_v[:, :, None] + shift[:, None, :]).reshape(n, -1)
    itl_w = (itl_w[:, :, None] * b_w[:, None, :]).reshape(n, -1)
    itl_total = np.sum(itl_w, axis=1)
    itl_mean = np.sum(itl_w * itl_v, axis=1) / itl_total
    # the three reported quantiles and, with an ITL target, the one at its percentile: one sort of the rows
    has_itl = np.zeros(n, dtype=bool) if itl_target_s is None else np.isfinite(itl_target_s)
    itl_pct = np.where(has_itl, itl_percentile, 50.0) / 100.0 if np.any(has_itl) else None
    wanted = np.broadcast_to(QUANTILES, (n, 3)) if itl_pct is None else np.column_stack(
        [np.broadcast_to(QUANTILES, (n, 3)), itl_pct])
    itl_all = Q.weighted_quantiles_rows(itl_v, itl_w, wanted)
    itl_q = itl_all[:, :3]

    # TPOT: the mean of a request's O − 1 gaps, normal by the central limit
    out_v, out_w = w.output_tokens.values, w.output_tokens.weights
    var = np.sum(itl_w * (itl_v - itl_mean[:, None]) ** 2, axis=1) / itl_total
    multi = out_v > 1
    if np.any(multi):
        steps = np.maximum(out_v[multi] - 1.0, 1.0)
        sd = np.sqrt(var[:, None] / steps[None, :])  # (n, n_out)
        # (n, z, n_out): along the outputs each z's points are monotone (sd falls with the steps), runs the
        # stable sort of the quantiles merges rather than sorts (the 2000-sample trace: ~0.1 ms less)
        pts = np.maximum(itl_mean[:, None, None] + sd[:, None, :] * TPOT_Z[None, :, None], 0.0).reshape(n, -1)
        wts = np.tile(out_w[multi] / len(TPOT_POINTS), len(TPOT_POINTS))
        tpot_q = Q.weighted_quantiles_rows(pts, wts, QUANTILES)
    else:
        tpot_q = np.repeat(itl_mean[:, None], 3, axis=1)

    # E2E over prompt × output points (the prompts grouped beyond E2E_PROMPT_GROUPS), re-binned
    decode_s = np.maximum(out_v - 1.0, 0.0)
    e2e_shifts, e2e_in_w = group_shifts(shifts, in_w, model.prompt_order, E2E_PROMPT_GROUPS)
    grid = (e2e_shifts[:, :, None] + decode_s[None, None, :] * itl_mean[:, None, None]).reshape(n, -1)
    e2e_v, e2e_w = _discrete_rebin(grid, np.outer(e2e_in_w, out_w).ravel(), E2E_POINTS)
    # every request's e2e is at least its TTFT, so each e2e percentile is at least TTFT's; the re-binned law
    # can fall short of it by its resolution (up to ~3 % at p99 on heavy-tailed traces)
    e2e_q = np.maximum(Q.shifted_wait_quantiles_rows(e2e_v, e2e_w, p_row, wq_f, QUANTILES), ttft_q)
    e2e_mean = ttft_mean + model.mean_decode_steps * itl_mean

    rps = lam * reps
    gpus = dep.parallelism.num_gpus * reps
    out_tps = rps * w.output_tokens.mean
    kv_frac = b * model.decode_context / max(model.plan.kv_capacity_tokens, 1)
    util = np.stack([np.minimum(st.prefill_utilization, 1.0), b / max(dep.max_batch_size, 1),
                     np.minimum(kv_frac, 1.0)], axis=1)
    breakdown = np.stack([np.maximum(ttft_mean - own_mean - overhead, 0.0), own_mean, np.zeros(n),
                          np.full(n, overhead)], axis=1)

    frac = np.full(n, np.nan)
    itl_at = np.full(n, np.nan)
    has_ttft = np.zeros(n, dtype=bool) if ttft_target_s is None else np.isfinite(ttft_target_s)
    any_slo = has_ttft | has_itl
    if np.any(any_slo):
        frac = np.where(any_slo, 1.0, np.nan)
        if np.any(has_ttft):
            assert ttft_target_s is not None
            t = np.where(has_ttft, ttft_target_s, 0.0)
            f = Q.shifted_wait_cdf_rows(t, shifts, in_w, p_row, wq_f)
            frac = np.where(has_ttft, frac * f, frac)
        if np.any(has_itl):
            assert itl_target_s is not None and itl_percentile is not None
            itl_at = np.where(has_itl, itl_all[:, 3], np.nan)
            frac = np.where(has_itl & (itl_at > np.where(has_itl, itl_target_s, np.inf)), 0.0, frac)

    def stats(mean: FloatArray, q: FloatArray) -> FloatArray:
        return np.concatenate([mean[:, None], q], axis=1)

    return OpenLoopRows(
        ttft_s=stats(ttft_mean, ttft_q), itl_s=stats(itl_mean, itl_q), tpot_s=stats(itl_mean, tpot_q),
        e2e_latency_s=stats(e2e_mean, e2e_q), ttft_breakdown_s=breakdown, requests_per_s=rps,
        throughput_output_tokens_per_s=out_tps, throughput_output_tokens_per_s_per_gpu=out_tps / gpus,
        output_tokens_per_s_per_user=np.where(itl_mean > 0, 1.0 / np.where(itl_mean > 0, itl_mean, 1.0), 0.0),
        utilization=util, mean_decode_batch=b.copy(), num_gpus=gpus, feasible=feasible,
        limiting=np.argmax(util, axis=1), slo_attainment_fraction=frac, goodput_requests_per_s=frac * rps,
        itl_at_slo_s=itl_at,
        cap_share=np.where(feasible, cap_share(model, b, dispersion), 0.0),
        batch_cap=model.batch_cap, kv_limited=bool(model.kv_batch_cap < dep.max_batch_size),
    )


#: the warning of a row whose offered load exceeds what the deployment serves
OVERLOAD_WARNING = ("the offered load exceeds what the deployment serves in steady state: queues grow without "
                    "bound; throughput is what it serves at saturation and latencies are lower bounds, evaluated "
                    "at the stability limit")


#: a closed loop's unchunked prefill lane at least this busy (or overloaded) is warned about when two
#: prompts' shared pass costs less than ``SHARED_PASS_WARNING`` of their two passes (``shared_pass_warning``;
#: an open loop's lane shares its passes in the closed form, ``aggregated._shared_lane``)
SHARED_PASS_BUSY, SHARED_PASS_WARNING = 0.5, 0.9


def lane_busy(overloaded: NDArray[np.bool_], prefill_utilization: FloatArray) -> NDArray[np.bool_]:
    """Rows whose unchunked prefill lane is busy enough for ``shared_pass_warning``."""
    return overloaded | (prefill_utilization >= SHARED_PASS_BUSY)


def shared_pass_warning(ratio: float) -> str:
    """The warning of a closed loop's busy unchunked lane whose prompts share passes well
    (``shared_pass_ratio``)."""
    return ("without chunked prefill the engine prefills the prompts that wait in one pass, which the "
            f"closed form costs one pass each in a closed loop: at this prompt length a pass of two costs "
            f"{ratio:.2f} of two passes, so with a busy prefill lane the closed form overstates its load and "
            "understates the throughput it sustains (open loops share their passes in the closed form; "
            "docs/accuracy_notes.md)")


def cap_warning(share: float, cap: float, kv_limited: bool, decode_pool: bool = False) -> str:
    """The warning of a row whose decode batch reaches its cap for a share ``share`` of the time (of a
    disaggregated deployment's decode pool: ``decode_pool``)."""
    what = (f"the KV cache's capacity (~{cap:.0f} sequences of the mean context)" if kv_limited
            else f"max_batch_size ({cap:.0f})")
    if decode_pool:
        preempted = ("; where admissions leave no KV headroom, running requests are preempted and recompute: "
                     "not modelled, those episodes make the latency tail")
        then = ("transferred requests wait for a place (counted in the end-to-end latency, a queue over the "
                "batch's places)" + (preempted if kv_limited else ""))
        return f"the decode pool's batch is at {what} about {share:.1%} of the time; then {then}"
    then = ("new prompts wait for KV space (counted in the TTFT as a wait for a place in the batch; where "
            "admissions leave no KV headroom, running requests are preempted and recompute: not modelled, "
            "those episodes make the TTFT tail, the reference simulation's p99 is up to twice this one's "
            "there)" if kv_limited else
            "new prompts wait for a batch slot (counted in the TTFT, a queue over the batch's places)")
    return f"the decode batch is at {what} about {share:.1%} of the time; then {then}"


def rows_warnings(rows: OpenLoopRows, prefix: list[str], itl_percentile: FloatArray | None,
                  itl_target_s: FloatArray | None) -> list[list[str]]:
    """The warnings of every row, as ``evaluate`` gives them: ``prefix`` (the request's notes), then an
    overload, then a missed ITL target at its percentile. Rows without a warning of their own share the
    ``prefix`` list; only the others build text."""
    n = rows.feasible.size
    out = [prefix] * n
    at = rows.itl_at_slo_s
    missed = np.zeros(n, dtype=bool) if itl_target_s is None else np.isfinite(at) & (
        at > np.where(np.isfinite(itl_target_s), itl_target_s, np.inf))
    overloaded = (~rows.feasible).tolist()
    capped = rows.cap_share >= CAP_WARNING_SHARE
    texts: dict[tuple[float, float], tuple[str, str]] = {}
    for j in np.flatnonzero(~rows.feasible | missed | capped).tolist():
        extra = [OVERLOAD_WARNING] if overloaded[j] else []
        if capped[j]:
            extra.append(cap_warning(float(rows.cap_share[j]), rows.batch_cap, rows.kv_limited))
        if missed[j]:
            assert itl_target_s is not None and itl_percentile is not None
            key = (float(itl_percentile[j]), float(itl_target_s[j]))
            if key not in texts:
                texts[key] = (f"ITL p{key[0]:g} is ", f" s, above the {key[1]:g} s target")
            head, tail = texts[key]
            extra.append(f"{head}{float(at[j]):.3g}{tail}")
        out[j] = prefix + extra
    return out


def slo_columns(slo: Slo | None, n: int) -> dict[str, FloatArray]:
    """The SLO of ``n`` rows as the keyword arrays of :func:`evaluate_open_loop_rows` (NaN: no target)."""
    def col(value: float | None) -> FloatArray:
        return np.full(n, np.nan if value is None else float(value))

    if slo is None:
        return {}
    return {"ttft_target_s": col(slo.ttft_s), "ttft_percentile": col(slo.ttft_percentile),
            "itl_target_s": col(slo.itl_s), "itl_percentile": col(slo.itl_percentile)}


def _row(rows: OpenLoopRows, i: int) -> OpenLoopRows:
    """Row ``i`` alone (what the warnings of one evaluation read)."""
    return dataclasses.replace(rows, feasible=rows.feasible[i:i + 1], itl_at_slo_s=rows.itl_at_slo_s[i:i + 1],
                               cap_share=rows.cap_share[i:i + 1], utilization=rows.utilization[i:i + 1])


def row_evaluation(rows: OpenLoopRows, i: int, slo: Slo | None) -> Evaluation:
    """Row ``i`` as an ``Evaluation`` (what ``evaluate`` answers for that scenario)."""
    def lat(a: FloatArray) -> LatencyStats:
        return LatencyStats(mean=float(a[i, 0]), p50=float(a[i, 1]), p90=float(a[i, 2]), p99=float(a[i, 3]))

    q, pre, kv, ovh = (float(x) for x in rows.ttft_breakdown_s[i])
    slo_kw = slo_columns(slo, 1)
    frac = float(rows.slo_attainment_fraction[i])
    return Evaluation(
        ttft_s=lat(rows.ttft_s), itl_s=lat(rows.itl_s), tpot_s=lat(rows.tpot_s), e2e_latency_s=lat(rows.e2e_latency_s),
        ttft_breakdown_s=TtftBreakdown(queue=q, prefill=pre, kv_transfer=kv, overheads=ovh),
        requests_per_s=float(rows.requests_per_s[i]),
        throughput_output_tokens_per_s=float(rows.throughput_output_tokens_per_s[i]),
        throughput_output_tokens_per_s_per_gpu=float(rows.throughput_output_tokens_per_s_per_gpu[i]),
        output_tokens_per_s_per_user=float(rows.output_tokens_per_s_per_user[i]),
        utilization={name: float(rows.utilization[i, k]) for k, name in enumerate(UTILIZATIONS)},
        mean_decode_batch=float(rows.mean_decode_batch[i]), num_gpus=int(rows.num_gpus[i]),
        feasible=bool(rows.feasible[i]), limiting_resource=LIMITING[int(rows.limiting[i])],
        slo_attainment_fraction=None if np.isnan(frac) else frac,
        goodput_requests_per_s=None if np.isnan(frac) else float(rows.goodput_requests_per_s[i]),
        warnings=tuple(rows_warnings(_row(rows, i), [], slo_kw.get("itl_percentile"), slo_kw.get("itl_target_s"))[0]),
    )
