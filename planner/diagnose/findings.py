"""Which phase is slow: the user's measurements against the model's expectation, one finding per symptom.

Every finding names a phase (``queueing``, ``prefill``, ``decode``, ``scheduling_interference``,
``kv_transfer``, or ``outside_model``: tokenization, network, the client), the measured and expected
figures it rests on, how far apart they are, and what to measure or change next.

The rule the diagnosis is built around: a high TTFT alone does not prove that prefill is slow. TTFT is
split into queue + prefill + the rest (front-end: HTTP, tokenization, scheduling, first-token delivery).
When the engine reports its prefill time, that is compared with the model's prefill directly; when it does
not, the growth of TTFT with the prompt length (its slope) stands in for prefill, because queueing and
front-end overheads do not grow with the prompt the way prefill does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.diagnose.expected import (
    decode_step_s,
    iteration_s,
    kv_bytes_per_token,
    kv_transfer,
    prefill_time_s,
)
from planner.diagnose.measurements import Measurements
from planner.errors import PlannerError
from planner.serving.evaluate import evaluate
from planner.serving.types import DisaggregatedDeployment, Evaluation, ServingProblem

#: a measured figure this far above the model's is a deviation worth a finding
DEVIATION = 0.25
#: and it must also exceed this much time to matter [s] (a few ms are noise at these scales)
MIN_EXCESS_S = 0.02
#: an iteration that carries prefill and lasts this many times a decode-only one stalls the streams in it
STALL_RATIO = 2.0

PHASES = ("queueing", "prefill", "decode", "scheduling_interference", "kv_transfer", "outside_model")


@dataclass(frozen=True, kw_only=True)
class Finding:
    symptom: str
    #: the phase the finding blames, or "none" when the measurements agree with the model
    phase: str
    #: "ok", "warning" (a deviation worth a look) or "problem" (the main cause of the symptom)
    severity: str
    summary: str
    measured: dict[str, float]
    expected: dict[str, float]
    #: measured / expected − 1 of the figure the finding rests on
    deviation_fraction: float
    evidence: tuple[str, ...]
    next_step: str


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    #: the phase of the most severe finding with the largest excess time ("none" when all agree)
    slowest_phase: str
    summary: str
    expected: Evaluation | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _ms(x: float) -> str:
    return f"{1e3 * x:.1f} ms"


def _slope(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """(slope, intercept) of the weighted least-squares line through (x, y)."""
    w = np.ones_like(x) if w is None else w
    if x.size < 2 or np.ptp(x) <= 0:
        return float("nan"), float(np.average(y, weights=w))
    a = np.vstack([x, np.ones_like(x)]).T * np.sqrt(w)[:, None]
    coef, *_ = np.linalg.lstsq(a, y * np.sqrt(w), rcond=None)
    return float(coef[0]), float(coef[1])


def _excess(measured: float, expected: float) -> bool:
    return measured > expected * (1.0 + DEVIATION) and measured - expected > MIN_EXCESS_S


# ---------------------------------------------------------------------------------------------- TTFT
def _ttft_points(problem: ServingProblem, m: Measurements) -> dict[str, np.ndarray] | None:
    """Per prompt length (or one aggregate point from histograms / a benchmark summary): TTFT, and queue and
    prefill where measured (NaN where not), with request counts as weights."""
    if m.ttft:
        return {
            "input_tokens": np.array([s.input_tokens for s in m.ttft], dtype=float),
            "ttft_s": np.array([s.ttft_s for s in m.ttft], dtype=float),
            "queue_s": np.array([np.nan if s.queue_s is None else s.queue_s for s in m.ttft], dtype=float),
            "prefill_s": np.array([np.nan if s.prefill_s is None else s.prefill_s for s in m.ttft], dtype=float),
            "count": np.array([max(s.count, 1) for s in m.ttft], dtype=float),
        }
    h, s = m.histograms, m.summary
    ttft = h["ttft_s"].mean if "ttft_s" in h else s.get("mean_ttft_s")
    if ttft is None:
        return None
    prompt = h["prompt_tokens"].mean if "prompt_tokens" in h else s.get("mean_input_tokens")
    if prompt is None:
        prompt = float(problem.workload.input_tokens.mean)

    def mean_of(key: str) -> float:
        v = h[key].mean if key in h else None
        return np.nan if v is None else float(v)

    return {"input_tokens": np.array([float(prompt)]), "ttft_s": np.array([float(ttft)]),
            "queue_s": np.array([mean_of("queue_s")]), "prefill_s": np.array([mean_of("prefill_s")]),
            "count": np.array([1.0])}


def _ttft_finding(problem: ServingProblem, m: Measurements, ev: Evaluation | None) -> Finding | None:
    pts = _ttft_points(problem, m)
    if pts is None:
        return None
    p, ttft, queue, prefill, w = pts["input_tokens"], pts["ttft_s"], pts["queue_s"], pts["prefill_s"], pts["count"]
    hit = problem.workload.prefix_cache_hit_fraction * p
    # at load, a prompt's chunks share their iterations with the running decodes (the model's mean batch)
    batch = float(ev.mean_decode_batch) if ev is not None and not isinstance(
        problem.deployment, DisaggregatedDeployment) else 0.0
    ctx = float(problem.workload.input_tokens.mean + problem.workload.output_tokens.mean / 2.0)
    exp_prefill = prefill_time_s(problem, p, hit, decode_batch=batch, decode_context_tokens=ctx)
    exp_overhead = problem.engine.request_overhead_s
    exp_queue = float(ev.ttft_breakdown_s.queue) if ev is not None else 0.0
    if isinstance(problem.deployment, DisaggregatedDeployment) and ev is not None:
        exp_kv = float(ev.ttft_breakdown_s.kv_transfer)
    else:
        exp_kv = 0.0

    def avg(x: np.ndarray) -> float:
        ok = np.isfinite(x)
        return float(np.average(x[ok], weights=w[ok])) if np.any(ok) else float("nan")

    m_ttft, m_queue, m_prefill = avg(ttft), avg(queue), avg(prefill)
    e_prefill = avg(exp_prefill)
    e_ttft = exp_queue + e_prefill + exp_overhead + exp_kv
    measured = {"ttft_s": m_ttft, "mean_input_tokens": avg(p)}
    expected = {"ttft_s": e_ttft, "queue_s": exp_queue, "prefill_s": e_prefill, "overheads_s": exp_overhead}
    if exp_kv:
        expected["kv_transfer_s"] = exp_kv
    evidence = [f"mean TTFT {_ms(m_ttft)} measured against {_ms(e_ttft)} expected (queue {_ms(exp_queue)}, "
                f"prefill {_ms(e_prefill)}, front-end {_ms(exp_overhead)}"
                + (f", KV transfer {_ms(exp_kv)}" if exp_kv else "") + ")"]
    # the prefill: measured directly, or read off the slope of TTFT against the prompt length
    prefill_known = np.isfinite(m_prefill)
    prefill_ratio = float("nan")
    if prefill_known:
        measured["prefill_s"] = m_prefill
        prefill_ratio = m_prefill / max(e_prefill, 1e-12)
        evidence.append(f"engine-reported prefill {_ms(m_prefill)} against {_ms(e_prefill)} from the cost model")
    elif p.size >= 2 and np.ptp(p) > 0:
        s_meas, _ = _slope(p, ttft, w)
        s_exp, _ = _slope(p, exp_prefill, w)
        measured["ttft_slope_s_per_token"] = s_meas
        expected["prefill_slope_s_per_token"] = s_exp
        prefill_ratio = s_meas / max(s_exp, 1e-15)
        evidence.append(f"TTFT grows by {1e6 * s_meas:.1f} µs per prompt token; the model's prefill by "
                        f"{1e6 * s_exp:.1f} µs: queueing and front-end time do not grow with the prompt")
    queue_known = np.isfinite(m_queue)
    if queue_known:
        measured["queue_s"] = m_queue
        evidence.append(f"queue time {_ms(m_queue)} against {_ms(exp_queue)} expected at this load")
    # excess time per component (what is left unexplained goes to the front-end)
    excess = {}
    if prefill_known:
        excess["prefill"] = m_prefill - e_prefill
    elif np.isfinite(prefill_ratio):
        excess["prefill"] = (prefill_ratio - 1.0) * e_prefill
    if queue_known:
        excess["queueing"] = m_queue - exp_queue
    rest = m_ttft - (m_queue if queue_known else exp_queue) - (m_prefill if prefill_known else e_prefill) - exp_kv
    if prefill_known or np.isfinite(prefill_ratio):
        rest_prefill = m_prefill if prefill_known else e_prefill * prefill_ratio
        rest = m_ttft - (m_queue if queue_known else exp_queue) - rest_prefill - exp_kv
    measured["rest_s"] = rest
    if queue_known:
        excess["outside_model"] = rest - exp_overhead
    else:
        # without a queue time the rest is queueing and front-end together
        excess["queueing_or_outside"] = rest - exp_overhead
    deviation = m_ttft / max(e_ttft, 1e-12) - 1.0
    if not _excess(m_ttft, e_ttft):
        return Finding(symptom="first_token_later_for_longer_prompts", phase="none", severity="ok",
                       summary=f"TTFT agrees with the model ({100 * deviation:+.0f} %)", measured=measured,
                       expected=expected, deviation_fraction=deviation, evidence=tuple(evidence),
                       next_step="nothing to do for TTFT")
    phase = max(excess, key=lambda k: excess[k])
    if phase == "prefill" and not (np.isfinite(prefill_ratio) and prefill_ratio > 1.0 + DEVIATION):
        phase = "queueing_or_outside" if "queueing_or_outside" in excess else max(
            (k for k in excess if k != "prefill"), key=lambda k: excess[k])
    if phase == "prefill":
        summary = (f"prefill is {prefill_ratio:.2f}× the model's: the first token is late because the prompt "
                   "pass itself is slow")
        step = ("compare the engine's prefill kernels with the model (POST /v1/estimate/prefill per length); "
                "check the chunk budget (small chunks re-read earlier KV), the attention backend and whether "
                "prefix caching is off; then /v1/calibrate with these samples")
    elif phase == "queueing":
        summary = (f"requests wait {_ms(m_queue)} in the queue against {_ms(exp_queue)} expected: the first "
                   "token is late because of queueing, not prefill")
        step = ("the deployment is more loaded than the workload says (or the batch/KV cache is smaller): check "
                "the arrival rate and vllm:num_requests_waiting, add replicas, or raise max_num_seqs if the KV "
                "cache allows")
    elif phase == "outside_model":
        summary = (f"{_ms(rest)} of each TTFT is neither queue nor prefill (expected {_ms(exp_overhead)}): "
                   "the delay is outside the engine's iterations (tokenization, HTTP, network, client)")
        step = ("measure on the server (vllm:time_to_first_token_seconds) and at the client: a gap between them "
                "is network or client time; large prompts spend time in tokenization and detokenization")
    else:
        phase = "queueing"
        summary = (f"TTFT is {_ms(m_ttft - e_ttft)} above the model while prefill is as expected: the excess is "
                   "queueing or front-end time, not prefill")
        step = ("measure the queue time (vllm:request_queue_time_seconds) to split queueing from tokenization "
                "and network time")
    return Finding(symptom="first_token_later_for_longer_prompts", phase=phase, severity="problem",
                   summary=summary, measured=measured, expected=expected, deviation_fraction=deviation,
                   evidence=tuple(evidence), next_step=step)


# -------------------------------------------------------------------------------------------- decode
def _decode_finding(problem: ServingProblem, m: Measurements, ev: Evaluation | None) -> Finding | None:
    if m.decode:
        c = np.array([s.context_tokens for s in m.decode], dtype=float)
        itl = np.array([s.itl_s for s in m.decode], dtype=float)
        w = np.array([max(s.count, 1) for s in m.decode], dtype=float)
        default_b = ev.mean_decode_batch if ev is not None else 1.0
        b = np.array([default_b if s.batch_size is None else s.batch_size for s in m.decode], dtype=float)
        exp = decode_step_s(problem, c, np.maximum(b, 1.0))
        m_itl = float(np.average(itl, weights=w))
        e_itl = float(np.average(exp, weights=w))
        measured = {"itl_s": m_itl, "mean_context_tokens": float(np.average(c, weights=w))}
        expected = {"decode_step_s": e_itl}
        evidence = [f"mean gap between tokens {_ms(m_itl)} against a {_ms(e_itl)} decode step expected"]
        s_m, i_m = _slope(c, itl, w)
        s_e, i_e = _slope(c, exp, w)
        if np.isfinite(s_m) and np.isfinite(s_e):
            measured |= {"itl_slope_s_per_token": s_m, "itl_intercept_s": i_m}
            expected |= {"decode_slope_s_per_token": s_e, "decode_intercept_s": i_e}
            evidence.append(f"per 1000 tokens of history the gap grows {_ms(1e3 * s_m)} (model {_ms(1e3 * s_e)}): "
                            "the KV-cache reads")
    else:
        h, s = m.histograms, m.summary
        val = h["itl_s"].mean if "itl_s" in h else s.get("mean_itl_s", s.get("mean_tpot_s"))
        if val is None or ev is None:
            return None
        m_itl, e_itl = float(val), float(ev.itl_s.mean)
        measured, expected = {"itl_s": m_itl}, {"itl_s": e_itl}
        evidence = [f"mean inter-token latency {_ms(m_itl)} against {_ms(e_itl)} expected at this load"]
        s_m = s_e = i_m = i_e = float("nan")
        p99 = h["itl_s"].quantile(0.99) if "itl_s" in h else s.get("p99_itl_s")
        if p99 is not None:
            measured["itl_p99_s"] = float(p99)
            expected["itl_p99_s"] = float(ev.itl_s.p99)
    deviation = m_itl / max(e_itl, 1e-12) - 1.0
    if not (m_itl > e_itl * (1.0 + DEVIATION) and m_itl - e_itl > 1e-3):
        return Finding(symptom="later_tokens_slower_as_histories_grow", phase="none", severity="ok",
                       summary=f"decode agrees with the model ({100 * deviation:+.0f} %)", measured=measured,
                       expected=expected, deviation_fraction=deviation, evidence=tuple(evidence),
                       next_step="nothing to do for decode")
    if np.isfinite(s_m) and np.isfinite(s_e) and s_e > 0 and s_m / s_e > 1.0 + DEVIATION and (
            (s_m - s_e) * float(np.mean(c)) > 0.5 * (m_itl - e_itl)):
        summary = (f"decode slows {s_m / s_e:.1f}× faster with history than the model: the KV-cache reads are "
                   "slower than expected")
        step = ("check the KV-cache dtype and the attention backend (paged-attention block size, split-KV); "
                "fit memory_efficiency_scale with /v1/calibrate")
    else:
        summary = f"decode steps take {1.0 + deviation:.2f}× the model's, at every context length"
        step = ("a fixed per-step cost: host overhead (CUDA graphs off, sampling, detokenization), or weight reads "
                "slower than the datasheet; check that the batch is what you think, then /v1/calibrate")
    return Finding(symptom="later_tokens_slower_as_histories_grow", phase="decode", severity="problem",
                   summary=summary, measured=measured, expected=expected, deviation_fraction=deviation,
                   evidence=tuple(evidence), next_step=step)


# ----------------------------------------------------------------------------------------- iterations
def _iteration_finding(problem: ServingProblem, m: Measurements) -> Finding | None:
    if not m.iterations or isinstance(problem.deployment, DisaggregatedDeployment):
        return None
    it = m.iterations
    dur = np.array([r.duration_s for r in it], dtype=float)
    d = np.array([r.decode_tokens for r in it], dtype=float)
    pt = np.array([r.prefill_tokens for r in it], dtype=float)
    npf = np.array([max(r.num_prefill, 1 if r.prefill_tokens else 0) for r in it], dtype=float)
    ctx = float(problem.workload.input_tokens.mean + problem.workload.output_tokens.mean / 2.0)
    exp = iteration_s(problem, decode_tokens=d, prefill_tokens=pt, num_prefill=npf, context_tokens=ctx)
    with_p = pt > 0
    measured: dict[str, float] = {"iterations": float(len(it))}
    expected: dict[str, float] = {}
    evidence = []
    dec_only = float(np.median(dur[~with_p])) if np.any(~with_p) else float("nan")
    dec_exp = float(np.median(exp[~with_p])) if np.any(~with_p) else float(np.median(
        iteration_s(problem, decode_tokens=d, prefill_tokens=0.0, num_prefill=0.0, context_tokens=ctx)))
    measured["decode_only_iteration_s"] = dec_only
    expected["decode_only_iteration_s"] = dec_exp
    if np.any(with_p):
        mixed = float(np.median(dur[with_p]))
        mixed_exp = float(np.median(exp[with_p]))
        longest = float(np.max(dur[with_p]))
        measured |= {"prefill_iteration_s": mixed, "longest_iteration_s": longest,
                     "prefill_iteration_fraction": float(np.mean(with_p)),
                     "prefill_tokens_per_iteration": float(np.median(pt[with_p]))}
        expected["prefill_iteration_s"] = mixed_exp
        evidence.append(f"{int(np.sum(with_p))} of {len(it)} iterations carried prompt tokens (median "
                        f"{int(np.median(pt[with_p]))}); they took {_ms(mixed)} (model {_ms(mixed_exp)}) against "
                        f"{_ms(dec_only if np.isfinite(dec_only) else dec_exp)} for decode-only iterations")
        evidence.append(f"the longest iteration, {_ms(longest)}, is the longest gap every running stream saw")
    ratio_model = float(np.median(dur / exp))
    measured["measured_over_model"] = ratio_model
    deviation = ratio_model - 1.0
    base = dec_only if np.isfinite(dec_only) else dec_exp
    if np.any(with_p) and measured["prefill_iteration_s"] > STALL_RATIO * base:
        stall = measured["longest_iteration_s"] - base
        cost_ok = abs(deviation) <= DEVIATION
        summary = (f"iterations that carry prompt tokens last {measured['prefill_iteration_s'] / base:.1f}× a "
                   f"decode-only one: every running stream stalls up to {_ms(stall)} while a long prompt is "
                   "prefilled" + ("" if cost_ok else f" (and iterations run {ratio_model:.2f}× the model)"))
        step = ("lower the token budget (max_num_batched_tokens) so each prompt is split into smaller chunks "
                "(POST /v1/plan/chunked finds the budget that meets the ITL SLO), turn chunked prefill on if "
                "it is off, or move prefill to its own pool (POST /v1/plan/disaggregated)")
        return Finding(symptom="long_prompt_interrupts_streams", phase="scheduling_interference",
                       severity="problem", summary=summary, measured=measured, expected=expected,
                       deviation_fraction=measured["prefill_iteration_s"] / base - 1.0, evidence=tuple(evidence),
                       next_step=step)
    if abs(deviation) > DEVIATION:
        phase = "prefill" if np.any(with_p) and np.median(dur[with_p] / exp[with_p]) > 1 + DEVIATION else "decode"
        return Finding(symptom="long_prompt_interrupts_streams", phase=phase, severity="warning",
                       summary=f"iterations run {ratio_model:.2f}× the model's cost", measured=measured,
                       expected=expected, deviation_fraction=deviation, evidence=tuple(evidence),
                       next_step="fit the kernel efficiencies to these records with /v1/calibrate")
    return Finding(symptom="long_prompt_interrupts_streams", phase="none", severity="ok",
                   summary="prompt chunks do not stretch the iterations much; no stream stalls",
                   measured=measured, expected=expected, deviation_fraction=deviation, evidence=tuple(evidence),
                   next_step="nothing to do for scheduling")


# --------------------------------------------------------------------------------------- KV transfer
def _kv_finding(problem: ServingProblem, m: Measurements, ev: Evaluation | None) -> Finding | None:
    kv = m.kv_transfer
    if kv is None:
        return None
    if not isinstance(problem.deployment, DisaggregatedDeployment):
        return Finding(symptom="pools_spend_time_moving_state", phase="none", severity="warning",
                       summary="KV-transfer measurements given for an aggregated deployment: nothing moves",
                       measured={}, expected={}, deviation_fraction=0.0, evidence=(),
                       next_step="describe the deployment as disaggregated to diagnose its KV transfer")
    prompt = float(problem.workload.input_tokens.mean) * (1.0 - problem.workload.prefix_cache_hit_fraction)
    e_bytes, e_whole, e_exposed, bw = (float(np.asarray(v).ravel()[0]) for v in kv_transfer(problem, prompt))
    measured: dict[str, float] = {}
    expected = {"bytes_per_request": e_bytes, "bandwidth_bytes_per_s": bw, "transfer_s": e_whole,
                "wait_s": e_exposed}
    evidence = [f"the model moves {e_bytes / 1e6:.1f} MB per request ({kv_bytes_per_token(problem):.0f} bytes per "
                f"token) over {bw / 1e9:.1f} GB/s: {_ms(e_whole)} in all, {_ms(e_exposed)} not hidden by prefill"]
    worst: tuple[float, str, str] = (0.0, "", "")
    if kv.bytes_per_request:
        measured["bytes_per_request"] = kv.bytes_per_request
        r = kv.bytes_per_request / e_bytes
        evidence.append(f"measured {kv.bytes_per_request / 1e6:.1f} MB per request ({r:.2f}× the model)")
        if r > 1 + DEVIATION:
            worst = max(worst, (r - 1.0, f"each request moves {r:.1f}× the KV bytes the model expects",
                                "check the KV dtype on both sides and whether whole blocks (padding) or the "
                                "prefix-cached part are sent"))
    if kv.bandwidth_bytes_per_s:
        measured["bandwidth_bytes_per_s"] = kv.bandwidth_bytes_per_s
        r = bw / kv.bandwidth_bytes_per_s
        evidence.append(f"achieved {kv.bandwidth_bytes_per_s / 1e9:.1f} GB/s against {bw / 1e9:.1f} GB/s for the link")
        if r > 1 + DEVIATION:
            worst = max(worst, (r - 1.0, f"the link delivers 1/{r:.1f} of its bandwidth",
                                "check that the transfer uses the RDMA NIC / NVLink (not TCP or a host bounce), "
                                "GPUDirect, and how many GPUs send in parallel"))
    wait = kv.wait_s if kv.wait_s is not None else None
    if wait is not None:
        measured["wait_s"] = wait
        evidence.append(f"requests waited {_ms(wait)} for their KV against {_ms(e_exposed)} expected")
        if _excess(wait, e_exposed):
            worst = max(worst, (wait / max(e_exposed, 1e-9) - 1.0,
                                f"requests wait {_ms(wait)} for their KV cache against {_ms(e_exposed)} expected",
                                "the transfer is not overlapped with prefill layer by layer, or the decode pool "
                                "admits late; check the connector's layer-wise mode"))
    if kv.transfer_s is not None:
        measured["transfer_s"] = kv.transfer_s
    if worst[0] <= 0:
        return Finding(symptom="pools_spend_time_moving_state", phase="none", severity="ok",
                       summary="KV transfer agrees with the model", measured=measured, expected=expected,
                       deviation_fraction=0.0, evidence=tuple(evidence), next_step="nothing to do for KV transfer")
    return Finding(symptom="pools_spend_time_moving_state", phase="kv_transfer", severity="problem",
                   summary=worst[1], measured=measured, expected=expected, deviation_fraction=worst[0],
                   evidence=tuple(evidence), next_step=worst[2])


# ---------------------------------------------------------------------------------------------- entry
def diagnose(problem: ServingProblem, measurements: Measurements) -> Diagnosis:
    """One finding per symptom the measurements cover, and the slowest phase."""
    notes = []
    try:
        ev = evaluate(problem)
    except PlannerError as error:  # a deployment that cannot be evaluated still has per-phase expectations
        ev = None
        notes.append(f"the deployment could not be evaluated at this workload ({error}); queueing is expected "
                     "to be zero")
    if ev is not None and not ev.feasible:
        notes.append("the workload overloads the deployment in the model: queues grow without bound")
    findings = [f for f in (_ttft_finding(problem, measurements, ev), _decode_finding(problem, measurements, ev),
                            _iteration_finding(problem, measurements), _kv_finding(problem, measurements, ev))
                if f is not None]
    rank = {"problem": 2, "warning": 1, "ok": 0}
    findings.sort(key=lambda f: (-rank[f.severity], -f.deviation_fraction))
    top = findings[0] if findings else None
    slowest = top.phase if top is not None and top.severity != "ok" else "none"
    if top is None:
        summary = "no measurements to compare"
    elif slowest == "none":
        summary = "the measurements agree with the model in every phase they cover"
    else:
        summary = f"{slowest.replace('_', ' ')}: {top.summary}"
    return Diagnosis(findings=tuple(findings), slowest_phase=slowest, summary=summary, expected=ev,
                     notes=tuple(notes))
