"""``evaluate``: what a benchmark of a deployment would measure, from the closed-form serving models.

Percentiles:

- TTFT = front-end overhead + queue wait + (residual iteration) + the prompt's own prefill (+ exposed KV
  transfer when disaggregated). The wait is an atom at zero plus an exponential tail (see
  ``queueing.quantiles_of_shifted_wait``), the rest is a discrete distribution over prompt lengths; the
  quantiles of the sum are exact for that model.
- ITL: the distribution of iteration times a decoding stream sees (decode-only iterations and mixed
  iterations carrying prefill chunks, or prefill iterations it waits through when chunking is off), each
  shifted by the decode batch's fluctuation around its mean: an open loop's batch has the variance of
  ``batch.batch_dispersion`` (arrival bursts while prefill stretches the iterations, a Galton–Watson total
  progeny; a processor-sharing station's negative binomial, Kelly 1979), a decode pool's the latter alone,
  a closed loop's is binomial over its clients.
- TPOT (per request, the mean of its ``O − 1`` gaps): normal with the ITL mean and variance / (O − 1)
  (central limit over the gaps), mixed over output lengths.
- E2E = TTFT + (O − 1) · TPOT, over prompt × output lengths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from planner.costs.passes import mixed_step_latency_many
from planner.errors import InvalidInput, PlannerError
from planner.serving import queueing as Q
from planner.serving.aggregated import AggregatedModel, stream_mixed_share, unchunked_closed_wait_points
from planner.serving.batch import (  # noqa: F401 (QUANTILES, TPOT_POINTS, FLUCTUATION_Z: part of this module's API)
    CAP_WARNING_SHARE,
    E2E_POINTS,
    E2E_PROMPT_GROUPS,
    FLUCTUATION_Z,
    QUANTILES,
    SHARED_PASS_WARNING,
    TPOT_POINTS,
    TPOT_Z,
    batch_cap_share,
    cap_warning,
    evaluate_open_loop_rows,
    group_shifts,
    lane_busy,
    row_evaluation,
    shared_pass_warning,
    slo_columns,
)
from planner.serving.disaggregated import DisaggregatedModel
from planner.serving.grids import broadcast_view
from planner.serving.types import (
    AggregatedDeployment,
    DisaggregatedDeployment,
    Evaluation,
    LatencyStats,
    ServingProblem,
    TtftBreakdown,
)
from planner.serving.workload import tail_refined_targets

FloatArray = NDArray[np.float64]
_TPOT_Z = TPOT_Z[None, :]
MAX_POINTS = 256


def _stats(mean: float, q: FloatArray) -> LatencyStats:
    return LatencyStats(mean=float(mean), p50=float(q[0]), p90=float(q[1]), p99=float(q[2]))


def compress_points(values: FloatArray, weights: FloatArray, k: int = MAX_POINTS) -> tuple[FloatArray, FloatArray]:
    """Re-bin a discrete distribution into ``k`` points (keeps quantile solves cheap): its values at the
    mid-probabilities of ``workload.tail_refined_targets``, with their masses, finer towards the long end.
    Until 2026-12-05 the points had equal masses of 1/k, which lose a tail rarer than 1/(2k): a 300-sample
    trace with one 1.36M-token prompt had a TTFT p99 of 604 s and an end-to-end p99 of 475 s."""
    v, w = values.ravel(), weights.ravel()
    if v.size <= k:
        return v, w / w.sum()
    # a stable sort: the callers' grids are outer sums of sorted points, runs that it merges rather than sorts
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order] / w.sum()
    cdf = np.cumsum(w)
    targets, masses = tail_refined_targets(k)
    idx = np.minimum(np.searchsorted(cdf, targets), v.size - 1)
    return v[idx], masses.copy()


def _shifted_cdf(t: float, shifts: FloatArray, weights: FloatArray, p_wait: FloatArray | float,
                 mean_wait: FloatArray | float) -> float:
    gap = t - shifts
    p = broadcast_view(np.asarray(p_wait, dtype=np.float64), shifts.shape)
    m = broadcast_view(np.asarray(mean_wait, dtype=np.float64), shifts.shape)
    waits = (p > 0) & (m > 0)
    theta = np.where(waits, m / np.where(waits, p, 1.0), 1.0)
    tail = np.where(waits, p * np.exp(-np.maximum(gap, 0.0) / theta), 0.0)
    return float(np.sum(weights * (gap >= 0) * (1.0 - tail)) / np.sum(weights))


def _tpot_distribution(itl_values: FloatArray, itl_weights: FloatArray, out_values: FloatArray,
                       out_weights: FloatArray) -> tuple[float, FloatArray]:
    w = itl_weights / itl_weights.sum()
    mean = float(np.dot(w, itl_values))
    var = float(np.dot(w, (itl_values - mean) ** 2))
    steps = np.maximum(out_values - 1.0, 1.0)
    sd = np.sqrt(var / steps)[:, None]
    pts = np.maximum(mean + sd * _TPOT_Z, 0.0)
    wts = (out_weights[:, None] * np.full(len(TPOT_POINTS), 1.0 / len(TPOT_POINTS))[None, :])
    multi = out_values > 1
    if not np.any(multi):
        return mean, np.full(3, mean)
    return mean, Q.weighted_quantiles(pts[multi], wts[multi], QUANTILES)


def batch_fluctuation(mean_batch: float, cap: float, clients: float | None, dispersion: float = 1.0
                      ) -> tuple[FloatArray, FloatArray]:
    """Support points and token weights of the running decode batch around its mean.

    Open loop: variance ``dispersion`` × mean (1: Poisson, the M/G/∞ occupancy theorem; the laws that widen
    it are in ``batch.batch_dispersion``); closed loop of N clients: binomial(N, B̄/N). Truncated at the batch
    cap. Weights are size-biased (∝ B·pmf): an iteration with more sequences yields more inter-token gaps.
    """
    if mean_batch <= 0:
        return np.array([0.0]), np.array([1.0])
    # the two laws by their normal approximations (mean and variance matched), rounded to whole sequences
    if clients is not None and clients >= 1:
        p = min(mean_batch / clients, 1.0)
        sd = np.sqrt(clients * p * (1.0 - p))
    else:
        sd = np.sqrt(mean_batch * dispersion)
    pts = np.clip(np.round(mean_batch + sd * FLUCTUATION_Z), 1.0, max(cap, 1.0))
    probs = FLUCTUATION_Z
    w = np.full(len(probs), 1.0 / len(probs)) * pts
    return pts, w / w.sum()


def evaluate(problem: ServingProblem, *, table_memo: TableMemo | None = None) -> Evaluation:
    """Predict TTFT, ITL, TPOT and end-to-end latency (mean and percentiles), throughput and utilization.

    ``table_memo``: a dict a caller evaluating many problems keeps between calls (``evaluate_many``): an
    aggregated deployment's cost-model grid and λ(B) curve are computed once per distinct deployment and
    lengths and reused, which gives the same numbers as computing them again."""
    if isinstance(problem.deployment, AggregatedDeployment):
        return _evaluate_aggregated(problem, table_memo)
    return _evaluate_disaggregated(problem)


#: cost-model grids by what determines them (the cost context's parts and the grid's inputs), and λ(B)
#: curves by what determines them beyond the grid
TableMemo = dict[tuple, object]


def _table_key(model: AggregatedModel, inputs: tuple[dict, dict]) -> tuple:
    ctx = model.ctx
    # identities are safe keys while the caller holds the problems (catalog objects are shared between them)
    parts: list[object] = [id(ctx.model), id(ctx.gpu), id(ctx.engine), ctx.weight_dtype, ctx.kv_dtype, ctx.parallelism]
    for group in inputs:
        for name in sorted(group):
            a = np.asarray(group[name], dtype=np.float64)
            parts += [name, a.shape, a.tobytes()]
    return tuple(parts)


def _state_key(problem: ServingProblem, table_key: tuple) -> tuple:
    """What a replica's steady states depend on beyond the cost grid: every length, the prefix-cache hit
    and the scheduler limits (not the arrival process, the replica count or the SLO)."""
    w, dep = problem.workload, problem.deployment
    parts: list[object] = ["curves", table_key, w.prefix_cache_hit_fraction, dep.max_batch_size, dep.token_budget,
                           dep.chunked_prefill]
    for dist in (w.input_tokens, w.output_tokens):
        parts += [dist.values.tobytes(), dist.weights.tobytes()]
    return tuple(parts)


def replica_model(problem: ServingProblem, memo: TableMemo) -> AggregatedModel:
    """The replica model ``evaluate`` builds for an aggregated ``problem``, shared through ``memo`` with every
    problem that differs from it only in load, replicas or SLO (what-if batches evaluate those as columns)."""
    return _tabulated_model(problem, memo)


def _tabulated_model(problem: ServingProblem, memo: TableMemo | None) -> AggregatedModel:
    if memo is None:
        return AggregatedModel(problem)
    # a replica's model reads the arrival process only for its kind (the lock-step share of closed loops):
    # problems that differ in nothing else (rate, clients, replicas, SLO) share one model
    model_key = _model_key(problem)
    if model_key in memo:
        return memo[model_key]  # type: ignore[return-value]
    model = AggregatedModel(problem, tabulate=False)
    inputs = model.table_inputs()
    key = _table_key(model, inputs)
    if key not in memo:
        memo[key] = tuple(mixed_step_latency_many(model.ctx, inputs))
    model.set_tables(*memo[key])  # type: ignore[misc]
    # the λ(B) curve (per queue-thinning factor) is the same for every arrival process: share it too
    model.__dict__["_curve_cache"] = memo.setdefault(_state_key(problem, key), {})
    memo[model_key] = model
    return model


def _model_key(problem: ServingProblem) -> tuple:
    """Everything an aggregated replica's model is built from, with the arrival reduced to its kind."""
    dep, w = problem.deployment, problem.workload
    assert isinstance(dep, AggregatedDeployment)
    parts: list[object] = ["model", id(problem.model), id(problem.engine), problem.weight_dtype, problem.kv_dtype,
                           id(dep.gpu), dep.parallelism, dep.max_batch_size, dep.token_budget, dep.chunked_prefill,
                           w.arrival.kind, w.prefix_cache_hit_fraction]
    for dist in (w.input_tokens, w.output_tokens):
        parts += [dist.values.tobytes(), dist.weights.tobytes()]
    return tuple(parts)


def evaluate_many(problems: Sequence[ServingProblem]) -> list[Evaluation | PlannerError]:
    """``evaluate`` of each problem, in order, sharing the cost-model grids of equal deployments; a problem the
    planner refuses gives its error in its place instead of stopping the others."""
    memo: TableMemo = {}
    out: list[Evaluation | PlannerError] = []
    for problem in problems:
        try:
            out.append(evaluate(problem, table_memo=memo))
        except PlannerError as error:
            out.append(error)
    return out


def active_replicas(problem: ServingProblem, replicas: int) -> int:
    """Replicas that receive traffic: a closed loop of fewer clients than replicas keeps only as many busy."""
    arr = problem.workload.arrival
    if arr.kind == "closed_loop" and arr.concurrency is not None:
        return max(1, min(replicas, int(arr.concurrency)))
    return replicas


def _closed_loop_arrivals(clients: float) -> tuple[float, float]:
    """(arrival scv, queue-wait scale) of ``clients`` closed-loop clients: a lone client's arrivals are
    deterministic, many clients' superpose towards Poisson (the superposition theorem, Palm–Khintchine):
    c_a² ≈ 1 − 1/N; an arrival queues behind the other N − 1."""
    scv = max(0.0, 1.0 - 1.0 / clients) if clients > 0 else 1.0
    return scv, max(clients - 1.0, 0.0) / clients


def _operating_rate(model: AggregatedModel | DisaggregatedModel, problem: ServingProblem, replicas: int
                    ) -> tuple[float, float, float, float, bool, object]:
    """(per-replica served rate, arrival scv, queue-wait scale, extra closed-loop queueing when saturated [s],
    overloaded?). An open loop offered more than the deployment sustains is evaluated at its saturation
    rate (what it serves), and flagged."""
    arr = problem.workload.arrival
    if arr.kind == "closed_loop":
        clients = float(arr.concurrency) / replicas
        scv, scale = _closed_loop_arrivals(clients)
        if isinstance(model, AggregatedModel):
            lam, st = model.closed_loop_state(clients, scv)
        else:
            lam = model.closed_loop_rate_per_s(clients, scv)
            st = model.steady_state(np.array([lam]), scv, scale)
        e2e = float(model.mean_e2e_s(st, clients)[0]) if isinstance(model, AggregatedModel) else float(
            model.mean_e2e_s(st)[0])
        extra = max(0.0, clients / lam - e2e) if lam > 0 else 0.0
        if extra <= 0.01 * e2e:
            return lam, scv, scale, 0.0, False, st
        if isinstance(model, AggregatedModel):
            # saturated: the TTFT reported is the queue's, without lock-step groups (see the caller), so the
            # wait that closes Little's law over the cycle, N = λ·E[e2e], is counted against that TTFT
            gap = float(model.stream_gap_s(st, clients, lockstep=False)[0])
            e2e = float(model.mean_ttft_s(st)[0]) + model.mean_decode_steps * gap
            extra = max(0.0, clients / lam - e2e)
        return lam, scv, scale, extra, False, st
    scv = arr.arrival_cv**2
    offered = float(arr.rate_per_s) / replicas
    sat = model.saturation_rate_per_s(scv)
    if offered > sat:
        return sat, scv, 1.0, 0.0, True, None
    return offered, scv, 1.0, 0.0, False, None


def _evaluate_aggregated(problem: ServingProblem, table_memo: TableMemo | None = None) -> Evaluation:
    dep = problem.deployment
    assert isinstance(dep, AggregatedDeployment)
    w = problem.workload
    if not dep.chunked_prefill and dep.token_budget < w.input_tokens.max:
        raise InvalidInput(
            f"without chunked prefill the token budget ({dep.token_budget}) must hold the longest prompt "
            f"({int(w.input_tokens.max)} tokens), as vLLM requires", field="deployment.token_budget")
    model = _tabulated_model(problem, table_memo)
    if w.arrival.kind != "closed_loop":  # open loop: the batch evaluation, a batch of one
        rows = evaluate_open_loop_rows(problem, model, np.array([float(w.arrival.rate_per_s)]),
                                       np.array([dep.replicas]), **slo_columns(problem.slo, 1))
        return row_evaluation(rows, 0, problem.slo)
    replicas = active_replicas(problem, dep.replicas)
    lam, scv, scale, extra, overloaded, st = _operating_rate(model, problem, replicas)
    saturated = extra > 0
    if st is None:
        st = model.steady_state(np.array([lam]), scv, scale)
    i = 0
    feasible = bool(st.stable[i]) and not overloaded
    warnings: list[str] = []
    overhead = problem.engine.request_overhead_s
    wq = float(st.queue_wait_s[i]) + extra
    # the probability of waiting: the lane's busy share of the time (Poisson-like arrivals), or, chunked in a
    # closed loop (arrivals per iteration end), of the iterations: as the queue model
    if model.closed_loop and dep.chunked_prefill:
        busy_share = float(st.mixed_iteration_rate_per_s[i] / st.iteration_rate_per_s[i]) * scale
    elif model.closed_loop:  # unchunked: someone else arrived in the same decode iteration
        busy_share = -math.expm1(-float(st.rate_per_s[i] / st.iteration_rate_per_s[i]) * scale)
    else:
        busy_share = float(st.prefill_utilization[i])
    p_wait = min(busy_share, 0.995) if extra == 0 else 1.0
    if not feasible:
        warnings.append("the offered load exceeds what the deployment serves in steady state: queues grow "
                        "without bound; throughput is what it serves at saturation and latencies are lower "
                        "bounds, evaluated at the stability limit")
    if saturated:
        warnings.append(f"the closed loop saturates the deployment: {extra:.3g} s of each request's TTFT is "
                        "waiting for a batch slot or the prefill lane")
    residual = float(st.residual_s[i])
    own = st.own_prefill_s[i]
    shifts = overhead + residual + own
    in_w = model.in_weights
    ttft_mean = overhead + residual + float(np.dot(in_w, own)) + (wq if np.isfinite(wq) else 0.0)
    wq_f = wq if np.isfinite(wq) else 0.0
    p_w = np.full(shifts.shape, p_wait if wq_f > 0 else 0.0)
    m_w = np.full(shifts.shape, wq_f)
    wait_as_points = model.closed_loop and not dep.chunked_prefill and extra == 0 and wq_f > 0
    if wait_as_points:
        # unchunked, a prompt waits for the prefills it shares a pass with and the rest of a stall it lands
        # in: a bounded law as points (TTFT = shift + wait, weights multiplied), not an exponential
        wait_v, wait_w = unchunked_closed_wait_points(st, i, model.in_weights, overhead, scale)
        shifts = (shifts[:, None] + wait_v[None, :]).ravel()
        in_w = (in_w[:, None] * wait_w[None, :]).ravel()
        p_w, m_w = np.zeros(shifts.shape), np.zeros(shifts.shape)
    clients_rep = float(w.arrival.concurrency) / replicas if w.arrival.kind == "closed_loop" else None
    # (a saturated loop queues for batch slots: its TTFT is the queue, not lock-step groups)
    lock = (model.lockstep_points(float(st.batch[i]), clients_rep) if clients_rep is not None and extra == 0
            else None)
    if lock is not None and np.all(np.isfinite(lock[1])):
        phi, t_lock, lock_w = lock
        ttft_mean = (1.0 - phi) * ttft_mean + phi * float(np.dot(t_lock, lock_w))
        shifts = np.concatenate([shifts, t_lock])
        in_w = np.concatenate([(1.0 - phi) * in_w, phi * lock_w])
        p_w, m_w = np.concatenate([p_w, np.zeros(t_lock.size)]), np.concatenate([m_w, np.zeros(t_lock.size)])
    ttft_q = Q.quantiles_of_shifted_wait(shifts, in_w, p_wait=p_w, mean_wait_s=m_w, quantiles=QUANTILES)
    # ITL: decode-only iterations and mixed (or prefill) ones, as a stream sees them
    p_mixed = float(min(st.mixed_iteration_rate_per_s[i] / st.iteration_rate_per_s[i], 1.0))
    # weighed by the streams that see them: in a closed loop a mixed iteration carries N − 1 clients' share
    p_mixed = float(stream_mixed_share(p_mixed, clients_rep))
    if dep.chunked_prefill:
        itl_v = np.concatenate([[st.decode_iteration_s[i]], st.mixed_kind_s[i]])
        itl_w = np.concatenate([[1.0 - p_mixed], p_mixed * st.mixed_kind_weight[i]])
        train = (model.lockstep_itl(float(st.batch[i]), clients_rep) if lock is not None
                 and np.all(np.isfinite(lock[1])) else None)
        if train is not None:
            # a train's streams see its mixed iterations only as they decode through them
            itl_v = np.concatenate([itl_v, train[1]])
            itl_w = np.concatenate([(1.0 - train[0]) * itl_w, train[0] * train[2]])
    else:
        itl_v = np.concatenate([[st.decode_iteration_s[i]], st.mixed_kind_s[i]])
        itl_w = np.concatenate([[1.0 - p_mixed], p_mixed * st.mixed_kind_weight[i] / st.mixed_kind_weight[i].sum()])
        if lock is not None and np.all(np.isfinite(lock[1])):
            # an unchunked cohort is prefilled while none of its streams decodes (they all finished together)
            # and decodes together afterwards: decode-only iterations at its batch, and the wait for the
            # cohort's later passes after a stream's first token (``AggregatedModel.cohort_gaps``)
            assert clients_rep is not None
            gap_v, gap_w = model.cohort_gaps(clients_rep)
            itl_v = np.concatenate([itl_v, gap_v])
            itl_w = np.concatenate([(1.0 - lock[0]) * itl_w, lock[0] * gap_w])
    # the decode batch fluctuates around its mean: shift every iteration kind by the decode-time change
    clients = (w.arrival.concurrency / replicas) if w.arrival.kind == "closed_loop" else None
    b_pts, b_w = batch_fluctuation(float(st.batch[i]), model.batch_cap, clients)
    shift = model.tables.decode(b_pts) - float(st.decode_iteration_s[i])
    shift -= float(np.dot(shift, b_w))  # keep the steady state's mean iteration time
    itl_v = (itl_v[:, None] + shift[None, :]).ravel()
    itl_w = (itl_w[:, None] * b_w[None, :]).ravel()
    itl_mean = float(np.dot(itl_w, itl_v) / itl_w.sum())
    itl_q = Q.weighted_quantiles(itl_v, itl_w, QUANTILES)
    out_v, out_w = w.output_tokens.values, w.output_tokens.weights
    tpot_mean, tpot_q = _tpot_distribution(itl_v, itl_w, out_v, out_w)
    # e2e over prompt × output points, re-binned per waiting regime (queued, lock-step) to keep it cheap
    pts, wts, pws, mws = [], [], [], []
    # (p, mean) pairs, sorted; cheaper than a row-wise unique. Most calls have a single one, and numpy's
    # unique of complex numbers hashes them (~0.5 M instructions at a few thousand points)
    keys = p_w + 1j * m_w
    for regime in keys[:1] if keys.size and bool(np.all(keys == keys[0])) else np.unique(keys):
        # (points of no weight left out: a lock-step share of 1 leaves the queued points at 0, and a group of
        # such points alone had a mean of 0 / 0, 2026-12-06)
        sel = (p_w == regime.real) & (m_w == regime.imag) & (in_w > 0)
        if float(np.sum(in_w[sel])) <= 0.0:
            continue
        share = float(np.sum(in_w[sel]))
        s_v, s_w = shifts[sel], in_w[sel]
        # prompt × wait points: re-binned first; prompt points alone: grouped beyond E2E_PROMPT_GROUPS
        if wait_as_points and s_v.size > E2E_POINTS:
            s_v, s_w = compress_points(s_v, s_w, E2E_POINTS)
        elif s_v.size > E2E_PROMPT_GROUPS:
            grouped, s_w = group_shifts(s_v[None, :], s_w, np.argsort(s_v, kind="stable"), E2E_PROMPT_GROUPS)
            s_v = grouped[0]
        grid = s_v[:, None] + np.maximum(out_v - 1.0, 0.0)[None, :] * itl_mean
        v, wt = compress_points(grid, s_w[:, None] * out_w[None, :], E2E_POINTS)
        pts.append(v)
        wts.append(wt * share)
        pws.append(np.full(v.shape, regime.real))
        mws.append(np.full(v.shape, regime.imag))
    e2e_q = np.maximum(ttft_q, Q.quantiles_of_shifted_wait(np.concatenate(pts), np.concatenate(wts),
                                                           p_wait=np.concatenate(pws),
                                                           mean_wait_s=np.concatenate(mws), quantiles=QUANTILES))
    e2e_mean = ttft_mean + model.mean_decode_steps * itl_mean
    rps = lam * replicas
    gpus = dep.parallelism.num_gpus * dep.replicas
    if replicas < dep.replicas:
        warnings.append(f"only {replicas} of {dep.replicas} replicas receive requests from {w.arrival.concurrency} "
                        "closed-loop clients")
    out_tps = rps * w.output_tokens.mean
    batch = float(st.batch[i])
    if lock is not None and np.all(np.isfinite(lock[1])) and not dep.chunked_prefill:
        # an unchunked cohort's decode iterations carry all its clients (the random-phase balance's batch
        # can exceed them: 72.9 for 64 clients of Llama-3.1-8B at 512/256 tokens)
        assert clients_rep is not None
        batch = (1.0 - lock[0]) * batch + lock[0] * min(clients_rep, max(model.batch_cap, 1.0))
    kv_frac = batch * model.decode_context / max(
        model.plan.kv_capacity_tokens, 1)
    util = {
        "prefill_lane": float(min(st.prefill_utilization[i], 1.0)),
        "decode_batch": float(batch / max(dep.max_batch_size, 1)),
        "kv_cache": float(min(kv_frac, 1.0)),
    }
    limiting = {"prefill_lane": "prefill", "decode_batch": "decode", "kv_cache": "kv_capacity"}[
        max(util, key=lambda k: util[k])]
    busy = bool(lane_busy(np.array([not feasible or saturated]), np.array([util["prefill_lane"]]))[0])
    if not dep.chunked_prefill and model.closed_loop and busy:
        ratio = model.shared_pass_ratio()
        if ratio < SHARED_PASS_WARNING:
            warnings.append(shared_pass_warning(ratio))
    own_mean = float(np.dot(model.in_weights, own))
    # the parts add up to the mean TTFT: a lock-step loop's prompts can be prefilled beside fewer decodes than
    # the mean batch's, faster than ``own_mean`` (until 2026-12-05 the parts of an unchunked 2-client loop,
    # Llama-3.1-8B 1/512 tokens, summed to 52.4 ms against a TTFT of 46.1 ms)
    prefill_part = min(own_mean, max(ttft_mean - overhead, 0.0))
    breakdown = TtftBreakdown(queue=max(ttft_mean - prefill_part - overhead, 0.0), prefill=prefill_part,
                              kv_transfer=0.0, overheads=overhead)
    ev = dict(
        ttft_s=_stats(ttft_mean, ttft_q), itl_s=_stats(itl_mean, itl_q), tpot_s=_stats(tpot_mean, tpot_q),
        e2e_latency_s=_stats(e2e_mean, e2e_q), ttft_breakdown_s=breakdown, requests_per_s=rps,
        throughput_output_tokens_per_s=out_tps, throughput_output_tokens_per_s_per_gpu=out_tps / gpus,
        output_tokens_per_s_per_user=1.0 / tpot_mean if tpot_mean > 0 else 0.0, utilization=util,
        mean_decode_batch=batch, num_gpus=gpus, feasible=feasible, limiting_resource=limiting,
    )
    return _finish(problem, ev, shifts, in_w, p_w, m_w, itl_q, itl_v, itl_w, rps, warnings)


def _evaluate_disaggregated(problem: ServingProblem) -> Evaluation:
    dep = problem.deployment
    assert isinstance(dep, DisaggregatedDeployment)
    model = DisaggregatedModel(problem)
    w = problem.workload
    # a closed loop's prefill queue: mean-value analysis over its clients, when the prefill pool limits
    mva = None
    if w.arrival.kind == "closed_loop":
        scv, scale = _closed_loop_arrivals(float(w.arrival.concurrency))
        mva = model.closed_loop_prefill(float(w.arrival.concurrency), scv)
        locked = None if mva is None else model.locked_prefill_wait_s(float(w.arrival.concurrency), mva[5])
        phi = float(np.clip(problem.engine.closed_loop_coherence, 0.0, 1.0)) if locked is not None else 0.0
        if mva is not None and phi > 0.0:
            # the locked share (below) waits less: the throughput that closes Little's law over the blend
            mva, _ = model.locked_closed_loop(float(w.arrival.concurrency), scv, phi, mva)
    if mva is not None:
        lam, extra, overloaded, st = mva[0], 0.0, False, mva[6]
    else:  # open loops, and closed loops the decode pool or the KV link limits: the open prefill queue
        lam, scv, scale, extra, overloaded, st = _operating_rate(model, problem, 1)
    saturated = extra > 0
    if st is None:
        st = model.steady_state(np.array([lam]), scv, scale)
    feasible = bool(st.stable[0]) and not overloaded
    warnings: list[str] = []
    in_w = model.in_weights
    overhead = problem.engine.request_overhead_s
    wq = float(st.prefill_wait_s[0]) + extra if mva is None else mva[1]
    if not feasible:
        warnings.append("the offered load exceeds what the pools serve in steady state: queues grow without "
                        "bound; throughput is what they serve at saturation and latencies are lower bounds, "
                        "evaluated at the stability limit")
    if saturated:
        warnings.append(f"the closed loop saturates the deployment: {extra:.3g} s of each request's latency is queueing")
    p_wait = (float(st.prefill_p_wait[0]) if extra == 0 else 1.0) if mva is None else mva[2]
    shifts = overhead + model.prefill_s + model.transfer_s
    ttft_mean = overhead + wq + float(np.dot(in_w, model.prefill_s + model.transfer_s))
    # the law of TTFT: the prompt's own times plus the wait, an open queue's exponential tail, or a closed
    # loop's bounded law (points: TTFT = shift + wait, their weights multiplied)
    law_shifts, law_w, law_p, law_wq = shifts, in_w, (p_wait if wq > 0 else 0.0), wq
    if mva is not None:
        law_shifts = (shifts[:, None] + mva[3][None, :]).ravel()
        law_w = (in_w[:, None] * mva[4][None, :]).ravel()
        law_p, law_wq = 0.0, 0.0
    # a fixed-length closed loop spaces itself (``locked_prefill_wait_s``): the engine's coherence is the share
    # of requests that keep that schedule, the others see the random phases of the mean-value analysis
    locked = None
    if w.arrival.kind == "closed_loop" and not saturated:
        # the rest of a client's cycle: the mean-value analysis's delay, or (another pool limits) what the
        # steady state gives besides the prefill wait and service
        think = (mva[5] if mva is not None else float(model.mean_e2e_s(st)[0]) - float(st.prefill_wait_s[0])
                 - float(np.dot(in_w, model.prefill_s)))
        locked = model.locked_prefill_wait_s(float(w.arrival.concurrency), max(think, 0.0))
    phi = float(np.clip(problem.engine.closed_loop_coherence, 0.0, 1.0)) if locked is not None else 0.0
    queued_p, queued_wq = law_p, law_wq  # the random-phase regime's wait (scalars)
    if locked is not None and phi > 0.0:
        ttft_mean = (1.0 - phi) * ttft_mean + phi * (ttft_mean - wq + locked)
        wq = (1.0 - phi) * wq + phi * locked
        n = law_shifts.size
        law_p = np.concatenate([np.full(n, law_p), np.zeros(shifts.size)])
        law_wq = np.concatenate([np.full(n, law_wq), np.zeros(shifts.size)])
        law_shifts = np.concatenate([law_shifts, shifts + locked])
        law_w = np.concatenate([(1.0 - phi) * law_w, phi * in_w])
    ttft_q = Q.quantiles_of_shifted_wait(law_shifts, law_w, p_wait=law_p, mean_wait_s=law_wq,
                                         quantiles=QUANTILES)
    clients = float(w.arrival.concurrency) if w.arrival.kind == "closed_loop" else None
    # a decode pool's iterations are decode-only: its batch widens only as a processor-sharing station's does.
    # A stream sees its own worker's batch, which holds the stream itself (size-biased points): the law is
    # per worker, and its mean is kept at the steady state's iteration time, as the aggregated law's is.
    # Until 2026-12-05 it was the pool's law divided by the workers, where the stream counts 1/W: eight
    # decode workers under 16 clients (Mixtral-8x7B on B200) gave an ITL of 6.6 ms against the 7.7 ms the
    # throughput was solved with, and X·E[e2e] = 0.88 N
    per_worker = float(st.decode_batch[0])
    dispersion = model.decode_batch_dispersion(per_worker, float(st.prefill_utilization[0]))
    b_pts, b_w = batch_fluctuation(per_worker, model.batch_cap, clients, dispersion)
    itl_v = np.interp(b_pts, model.batch_grid, model.decode_table)
    tau = float(st.decode_iteration_s[0])
    # how often a decode worker's batch is at its cap (the aggregated rows' warning; 2026-12-05: 256 clients
    # of the crosscheck's lognormal lengths on one Llama-3.1-8B H100 decode worker hold 87 % of its KV cache
    # on average and the reference simulation preempted 0, 9 and 18 requests in three runs, unannounced).
    # A closed loop's batch cannot outgrow its clients, so only the KV cache caps it below max_batch_size
    slot_cap, count_dispersion = float(dep.decode.max_batch_size), dispersion
    if clients is not None:  # (its count binomial over the worker's clients, as ``batch_fluctuation``'s)
        n_w = clients / dep.decode.workers
        count_dispersion = max(1.0 - per_worker / max(n_w, 1e-300), 0.0)
        slot_cap = math.inf if n_w <= slot_cap else slot_cap
    b_row, d_row = np.array([per_worker]), np.array([count_dispersion])
    by_slots = float(batch_cap_share(b_row, d_row, slot_cap)[0]) if feasible else 0.0
    by_kv = float(batch_cap_share(b_row, d_row + model.kv_scv, model.kv_batch_cap)[0]) if feasible else 0.0
    if max(by_slots, by_kv) >= CAP_WARNING_SHARE:
        warnings.append(cap_warning(by_kv, model.kv_batch_cap, True, decode_pool=True) if by_kv >= by_slots
                        else cap_warning(by_slots, slot_cap, False, decode_pool=True))
    itl_v = np.maximum(itl_v + (tau - float(np.dot(itl_v, b_w))), 0.0)
    itl_w = b_w
    out_v, out_w = w.output_tokens.values, w.output_tokens.weights
    tpot_mean, tpot_q = _tpot_distribution(itl_v, itl_w, out_v, out_w)
    itl_q = Q.weighted_quantiles(itl_v, itl_w, QUANTILES)
    slot = float(st.decode_slot_wait_s[0]) if np.isfinite(st.decode_slot_wait_s[0]) else 0.0
    e2e_shift, e2e_w = compress_points(shifts[:, None] + slot + np.maximum(out_v - 1.0, 0.0)[None, :] * tau,
                                 in_w[:, None] * out_w[None, :])
    e2e_p, e2e_wq = law_p, law_wq
    if mva is not None or (locked is not None and phi > 0.0):
        base_shift, base_w = e2e_shift, e2e_w
        if mva is not None:
            e2e_shift = (e2e_shift[:, None] + mva[3][None, :]).ravel()
            e2e_w = (e2e_w[:, None] * mva[4][None, :]).ravel()
        if locked is not None and phi > 0.0:
            # the same two regimes as the TTFT law: random phases (queued), the locked schedule (not)
            e2e_p = np.concatenate([np.full(e2e_shift.size, queued_p), np.zeros(base_shift.size)])
            e2e_wq = np.concatenate([np.full(e2e_shift.size, queued_wq), np.zeros(base_shift.size)])
            e2e_shift = np.concatenate([e2e_shift, base_shift + locked])
            e2e_w = np.concatenate([(1.0 - phi) * e2e_w, phi * base_w])
    e2e_q = np.maximum(ttft_q, Q.quantiles_of_shifted_wait(e2e_shift, e2e_w, p_wait=e2e_p, mean_wait_s=e2e_wq,
                                                           quantiles=QUANTILES))  # at least TTFT's (``batch``)
    e2e_mean = ttft_mean + slot + model.mean_decode_steps * tau
    gpus = dep.prefill.parallelism.num_gpus * dep.prefill.workers + dep.decode.parallelism.num_gpus * dep.decode.workers
    out_tps = lam * w.output_tokens.mean
    util = {
        "prefill_pool": float(min(st.prefill_utilization[0], 1.0)),
        "decode_pool": float(st.decode_batch[0] / max(dep.decode.max_batch_size, 1)),
        "kv_link": float(min(st.link_utilization[0], 1.0)),
    }
    limiting = {"prefill_pool": "prefill", "decode_pool": "decode", "kv_link": "kv_link"}[
        max(util, key=lambda k: util[k])]
    kv_bytes_mean = float(np.dot(in_w, model.kv_bytes))
    kv = {
        "bytes_per_request": kv_bytes_mean,
        "bytes_per_s": kv_bytes_mean * lam,
        "link_bandwidth_bytes_per_s": model.link.bandwidth_bytes_per_s * dep.prefill.workers,
        "transfer_s_mean": float(np.dot(in_w, model.transfer_full_s)),
        "exposed_s_mean": float(np.dot(in_w, model.transfer_s)),
    }
    warnings.append(f"KV transfer over {model.link.reason}")
    breakdown = TtftBreakdown(queue=wq, prefill=float(np.dot(in_w, model.prefill_s)),
                              kv_transfer=float(np.dot(in_w, model.transfer_s)), overheads=overhead)
    ev = dict(
        ttft_s=_stats(ttft_mean, ttft_q), itl_s=_stats(tau, itl_q), tpot_s=_stats(tpot_mean, tpot_q),
        e2e_latency_s=_stats(e2e_mean, e2e_q), ttft_breakdown_s=breakdown, requests_per_s=lam,
        throughput_output_tokens_per_s=out_tps, throughput_output_tokens_per_s_per_gpu=out_tps / gpus,
        output_tokens_per_s_per_user=1.0 / tau if tau > 0 else 0.0, utilization=util,
        mean_decode_batch=float(st.decode_batch[0]), num_gpus=gpus, feasible=feasible, limiting_resource=limiting,
        kv_transfer=kv,
    )
    return _finish(problem, ev, law_shifts, law_w, law_p, law_wq, itl_q, itl_v, itl_w, lam, warnings)


def _finish(problem: ServingProblem, ev: dict, shifts: FloatArray, weights: FloatArray,
            p_wait: FloatArray | float, wq: FloatArray | float,
            itl_q: FloatArray, itl_v: FloatArray, itl_w: FloatArray, rps: float, warnings: list[str]) -> Evaluation:
    slo = problem.slo
    if slo is not None and (slo.ttft_s is not None or slo.itl_s is not None):
        frac = 1.0
        if slo.ttft_s is not None:
            frac *= _shifted_cdf(slo.ttft_s, shifts, weights, p_wait, wq)
        if slo.itl_s is not None:
            itl_at = float(Q.weighted_quantiles(itl_v, itl_w, [slo.itl_percentile / 100.0])[0])
            if itl_at > slo.itl_s:
                frac = 0.0
                warnings.append(f"ITL p{slo.itl_percentile:g} is {itl_at:.3g} s, above the {slo.itl_s:g} s target")
        ev["slo_attainment_fraction"] = frac
        ev["goodput_requests_per_s"] = frac * rps
    arrival = problem.workload.arrival
    if arrival.kind == "closed_loop" and ev["feasible"]:
        # a closed loop's answer must close Little's law over its clients, N = X·E[e2e]; where it does not,
        # it says so
        ratio = ev["requests_per_s"] * ev["e2e_latency_s"].mean / float(arrival.concurrency)
        if abs(ratio - 1.0) > LITTLE_WARNING:
            warnings.append(little_warning(ratio, int(arrival.concurrency),
                                           problem.engine.closed_loop_coherence))
    return Evaluation(**ev, warnings=tuple(warnings))


#: a closed loop's answer whose X·E[e2e] is further than this from N, relatively, carries ``little_warning``
LITTLE_WARNING = 0.02


def little_warning(ratio: float, clients: int, coherence: float) -> str:
    """The warning of a closed loop whose throughput and mean end-to-end latency miss Little's law."""
    return (f"throughput × mean end-to-end latency is {ratio:.2f} × the {clients} clients, not 1 (Little's "
            "law): this answer is not self-consistent. Known where a fixed-length closed loop keeps its "
            f"clients in lock step (the engine's closed_loop_coherence, {coherence:g}) and its throughput is "
            "the random-phase one; treat the throughput and the latencies as approximate "
            "(docs/accuracy_notes.md)")
