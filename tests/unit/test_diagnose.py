"""The diagnosis names the injected fault: measurements made from the model itself, with one fault added.

Each test builds what a deployment would measure if the model were exactly right, injects one fault (extra
queueing, a slow decode, a slow KV link, slow prefill, front-end delay, prefill interference), and checks
that the diagnosis blames that phase and no other. The clean measurements must come out as "none".
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.diagnose.expected import (
    calibrated_problem,
    decode_step_s,
    iteration_s,
    kv_transfer,
    prefill_time_s,
)
from planner.diagnose.findings import diagnose
from planner.diagnose.measurements import (
    DecodeSample,
    IterationRecord,
    KvTransferRecord,
    Measurements,
    TtftSample,
)
from planner.diagnose.profile import CalibrationProfile
from planner.serving.evaluate import evaluate
from planner.serving.types import (
    DisaggregatedDeployment,
    PoolSpec,
    ServingProblem,
)
from planner.serving.workload import Arrival

PROMPTS = np.array([500.0, 1000.0, 2000.0, 4000.0, 8000.0])
CONTEXTS = np.array([500.0, 2000.0, 8000.0, 16000.0])


@pytest.fixture(scope="module")
def problem(llama_8b_on_h100) -> ServingProblem:
    return llama_8b_on_h100(Arrival(kind="poisson", rate_per_s=5.0))


@pytest.fixture(scope="module")
def disagg(problem: ServingProblem) -> ServingProblem:
    gpu = problem.deployment.gpu
    return replace(
        problem,
        deployment=DisaggregatedDeployment(
            prefill=PoolSpec(gpu=gpu, workers=2), decode=PoolSpec(gpu=gpu, workers=1), kv_link="rdma"
        ),
    )


def _ttft_parts(problem: ServingProblem) -> tuple[float, np.ndarray, float]:
    """(expected queue, expected prefill per prompt at load, front-end) — the model's own TTFT split."""
    ev = evaluate(problem)
    ctx = 2000.0 + 150.0
    pre = prefill_time_s(problem, PROMPTS, decode_batch=ev.mean_decode_batch, decode_context_tokens=ctx)
    return ev.ttft_breakdown_s.queue, pre, problem.engine.request_overhead_s


def _ttft(
    problem: ServingProblem,
    *,
    extra_queue: float = 0.0,
    prefill_factor: float = 1.0,
    extra_front: float = 0.0,
    with_queue: bool = True,
    with_prefill: bool = True,
) -> Measurements:
    q, pre, front = _ttft_parts(problem)
    return Measurements(
        ttft=tuple(
            TtftSample(
                input_tokens=p,
                ttft_s=q + extra_queue + prefill_factor * t + front + extra_front,
                queue_s=q + extra_queue if with_queue else None,
                prefill_s=prefill_factor * t if with_prefill else None,
            )
            for p, t in zip(PROMPTS, pre, strict=True)
        )
    )


def test_clean_ttft_measurements_agree(problem: ServingProblem) -> None:
    d = diagnose(problem, _ttft(problem))
    assert d.slowest_phase == "none"
    assert all(f.severity == "ok" for f in d.findings)


@pytest.mark.parametrize("with_queue", [True, False])
def test_extra_queueing_is_queueing_not_prefill(problem: ServingProblem, with_queue: bool) -> None:
    # a high TTFT whose prefill is normal: with or without a measured queue time, never blamed on prefill
    d = diagnose(problem, _ttft(problem, extra_queue=0.8, with_queue=with_queue, with_prefill=False))
    assert d.slowest_phase == "queueing"
    f = d.findings[0]
    assert f.symptom == "first_token_later_for_longer_prompts"
    assert f.measured["ttft_s"] > 2 * f.expected["ttft_s"]
    if not with_queue:  # the slope of TTFT against prompt length matches the model's prefill
        ratio = f.measured["ttft_slope_s_per_token"] / f.expected["prefill_slope_s_per_token"]
        assert ratio == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("with_prefill", [True, False])
def test_slow_prefill_is_prefill(problem: ServingProblem, with_prefill: bool) -> None:
    d = diagnose(
        problem, _ttft(problem, prefill_factor=2.5, with_prefill=with_prefill, with_queue=with_prefill)
    )
    assert d.slowest_phase == "prefill"
    f = d.findings[0]
    if with_prefill:  # the engine's own prefill time against the model's
        ratio = f.measured["prefill_s"] / f.expected["prefill_s"]
    else:  # read off the growth of TTFT with the prompt
        ratio = f.measured["ttft_slope_s_per_token"] / f.expected["prefill_slope_s_per_token"]
    assert ratio == pytest.approx(2.5, rel=0.05)


def test_front_end_delay_is_outside_the_model(problem: ServingProblem) -> None:
    d = diagnose(problem, _ttft(problem, extra_front=0.5))
    assert d.slowest_phase == "outside_model"
    assert d.findings[0].measured["rest_s"] == pytest.approx(
        0.5 + problem.engine.request_overhead_s, rel=0.02
    )


def _decode(
    problem: ServingProblem, profile: CalibrationProfile | None = None, factor: float = 1.0
) -> Measurements:
    b = np.full(CONTEXTS.shape, 16.0)
    t = decode_step_s(calibrated_problem(problem, profile), CONTEXTS, b) * factor
    return Measurements(
        decode=tuple(
            DecodeSample(context_tokens=c, itl_s=x, batch_size=16.0) for c, x in zip(CONTEXTS, t, strict=True)
        )
    )


def test_clean_decode_agrees(problem: ServingProblem) -> None:
    assert diagnose(problem, _decode(problem)).slowest_phase == "none"


def test_slow_decode_is_decode(problem: ServingProblem) -> None:
    d = diagnose(problem, _decode(problem, factor=1.6))
    assert d.slowest_phase == "decode"
    assert d.findings[0].deviation_fraction == pytest.approx(0.6, abs=0.01)


def test_slow_kv_reads_show_in_the_slope(problem: ServingProblem) -> None:
    # decode attention at a third of its bandwidth: the gap grows faster with history than the model's
    slow = CalibrationProfile(memory_efficiency_scale=0.3)
    d = diagnose(problem, _decode(problem, slow))
    f = d.findings[0]
    assert d.slowest_phase == "decode"
    assert f.measured["itl_slope_s_per_token"] > 2.0 * f.expected["decode_slope_s_per_token"]


def _iterations(problem: ServingProblem, budget: int, decodes: int = 16) -> Measurements:
    """A scheduler log of decode-only iterations and iterations carrying a ``budget``-token prompt chunk."""
    d = np.array([decodes] * 6, dtype=float)
    p = np.array([0, 0, budget, budget, 0, budget], dtype=float)
    t = iteration_s(
        problem, decode_tokens=d, prefill_tokens=p, num_prefill=(p > 0).astype(float), context_tokens=2150.0
    )
    return Measurements(
        iterations=tuple(
            IterationRecord(
                duration_s=float(x), decode_tokens=int(a), prefill_tokens=int(b), num_prefill=int(b > 0)
            )
            for x, a, b in zip(t, d, p, strict=True)
        )
    )


def test_long_prefill_iterations_stall_the_streams(problem: ServingProblem) -> None:
    # iterations carrying 8000 prompt tokens last many decode steps: scheduling interference
    d = diagnose(problem, _iterations(problem, 8000))
    f = next(f for f in d.findings if f.symptom == "long_prompt_interrupts_streams")
    assert f.phase == "scheduling_interference"
    assert f.measured["prefill_iteration_s"] > 2.0 * f.measured["decode_only_iteration_s"]
    assert "token budget" in f.next_step


def test_small_chunks_do_not_stall(problem: ServingProblem) -> None:
    d = diagnose(problem, _iterations(problem, 64))
    f = next(f for f in d.findings if f.symptom == "long_prompt_interrupts_streams")
    assert f.phase == "none"


def _kv(problem: ServingProblem, *, bandwidth_factor: float = 1.0) -> Measurements:
    kv, whole, exposed, bw = kv_transfer(problem, 2000.0)
    slow_whole = float(kv[0]) / (bw * bandwidth_factor)
    wait = float(exposed[0]) + max(0.0, slow_whole - float(whole[0]))
    return Measurements(
        kv_transfer=KvTransferRecord(
            bytes_per_request=float(kv[0]),
            bandwidth_bytes_per_s=bw * bandwidth_factor,
            wait_s=wait,
            transfer_s=slow_whole,
        )
    )


def test_clean_kv_transfer_agrees(disagg: ServingProblem) -> None:
    assert diagnose(disagg, _kv(disagg)).slowest_phase == "none"


def test_slow_link_is_kv_transfer(disagg: ServingProblem) -> None:
    d = diagnose(disagg, _kv(disagg, bandwidth_factor=0.2))
    assert d.slowest_phase == "kv_transfer"
    assert "bandwidth" in d.findings[0].summary or "wait" in d.findings[0].summary


def test_several_symptoms_rank_the_problem_first(problem: ServingProblem) -> None:
    m = _ttft(problem).merged(_decode(problem, factor=2.0))
    d = diagnose(problem, m)
    assert [f.symptom for f in d.findings][0] == "later_tokens_slower_as_histories_grow"
    assert {f.symptom for f in d.findings} == {
        "later_tokens_slower_as_histories_grow",
        "first_token_later_for_longer_prompts",
    }
