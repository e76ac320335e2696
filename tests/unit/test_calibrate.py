"""The calibration recovers a known profile from measurements the model made with it, reports what the data
cannot pin down, and a profile moves the cost model the way its name says."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs.passes import decode_latency_s, prefill_latency_s
from planner.costs.types import CostContext
from planner.diagnose.calibrate import BenchmarkPoint, calibrate
from planner.diagnose.expected import calibrated_problem, decode_step_s, prefill_time_s
from planner.diagnose.measurements import DecodeSample, Measurements, TtftSample
from planner.diagnose.profile import CalibrationProfile, calibrated_engine, calibrated_gpu
from planner.errors import InvalidInput
from planner.serving.evaluate import evaluate
from planner.serving.types import ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length

TRUE = CalibrationProfile(
    gemm_efficiency_scale=0.85, memory_efficiency_scale=0.8, step_overhead_s=0.008, request_overhead_s=0.05
)


@pytest.fixture(scope="module")
def problem(llama_8b_on_h100) -> ServingProblem:
    return llama_8b_on_h100(Arrival(kind="closed_loop", concurrency=8))


def _synthetic(problem: ServingProblem, profile: CalibrationProfile) -> Measurements:
    truth = calibrated_problem(problem, profile)
    p = np.array([256.0, 1000.0, 2000.0, 4000.0, 8000.0])
    pre = prefill_time_s(truth, p)
    c = np.array([500.0, 2000.0, 8000.0, 16000.0])
    b = np.array([1.0, 8.0, 32.0, 64.0])
    dec = decode_step_s(truth, c, b)
    return Measurements(
        ttft=tuple(
            TtftSample(input_tokens=x, ttft_s=t + truth.engine.request_overhead_s, queue_s=0.0, prefill_s=t)
            for x, t in zip(p, pre, strict=True)
        ),
        decode=tuple(
            DecodeSample(context_tokens=x, itl_s=t, batch_size=y) for x, t, y in zip(c, dec, b, strict=True)
        ),
    )


def test_recovers_a_known_profile(problem: ServingProblem) -> None:
    r = calibrate(problem, _synthetic(problem, TRUE))
    assert r.status == "fitted"
    assert r.profile.gemm_efficiency_scale == pytest.approx(0.85, rel=0.03)
    assert r.profile.memory_efficiency_scale == pytest.approx(0.8, rel=0.03)
    assert r.profile.step_overhead_s == pytest.approx(0.008, rel=0.05)
    assert r.profile.request_overhead_s == pytest.approx(0.05, rel=0.05)
    assert r.median_abs_error_after_fraction < 0.01 < r.median_abs_error_before_fraction
    by_name = {p.name: p for p in r.parameters}
    assert by_name["memory_efficiency_scale"].pinned_down
    # a single GPU (tp 1) has no collectives: nothing in the data depends on them
    coll = by_name["collective_efficiency_scale"]
    assert not coll.pinned_down and coll.standard_error is None and coll.value == 1.0


def test_decode_alone_cannot_pin_down_the_gemm_peak(problem: ServingProblem) -> None:
    # small-batch decode is bandwidth-bound: the GEMM peak fraction barely moves it
    m = _synthetic(problem, TRUE)
    r = calibrate(problem, Measurements(decode=m.decode))
    by_name = {p.name: p for p in r.parameters}
    assert not by_name["gemm_efficiency_scale"].pinned_down
    assert not by_name["request_overhead_s"].pinned_down
    assert r.profile.request_overhead_s is None  # not informed: the engine's own value stays


def test_benchmark_points_fit_and_improve(problem: ServingProblem) -> None:
    truth = calibrated_problem(problem, TRUE)
    points = []
    for isl, osl, conc in ((1000, 300, 1), (2000, 300, 16), (8000, 200, 4)):
        wl = Workload(
            input_tokens=fixed_length(isl),
            output_tokens=fixed_length(osl),
            arrival=Arrival(kind="closed_loop", concurrency=conc),
        )
        ev = evaluate(ServingProblem(**{**truth.__dict__, "workload": wl}))
        points.append(
            BenchmarkPoint(
                input_tokens=isl,
                output_tokens=osl,
                concurrency=conc,
                measured_ttft_s=ev.ttft_s.mean,
                measured_tpot_s=ev.tpot_s.mean,
            )
        )
    r = calibrate(problem, Measurements(), tuple(points))
    assert r.median_abs_error_after_fraction < 0.25 * r.median_abs_error_before_fraction
    assert {o.kind for o in r.observations} == {"benchmark_ttft", "benchmark_tpot"}


def test_nothing_to_fit_is_invalid(problem: ServingProblem) -> None:
    with pytest.raises(InvalidInput):
        calibrate(problem, Measurements())


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_profile_moves_the_cost_model_its_way(problem: ServingProblem, scale: float) -> None:
    gpu, eng = problem.deployment.gpu, problem.engine
    base = CostContext(model=problem.model, gpu=gpu, engine=eng)
    mem = CostContext(
        model=problem.model,
        gpu=calibrated_gpu(gpu, CalibrationProfile(memory_efficiency_scale=scale)),
        engine=eng,
    )
    gemm = CostContext(
        model=problem.model,
        gpu=calibrated_gpu(gpu, CalibrationProfile(gemm_efficiency_scale=scale)),
        engine=eng,
    )
    d0 = float(decode_latency_s(base, batch_size=1, context_tokens=4000))
    p0 = float(prefill_latency_s(base, prompt_tokens=8000, batch_size=1))
    # more memory efficiency never makes decode slower; more GEMM efficiency never makes prefill slower
    d1 = float(decode_latency_s(mem, batch_size=1, context_tokens=4000))
    p1 = float(prefill_latency_s(gemm, prompt_tokens=8000, batch_size=1))
    assert (d1 < d0) if scale > 1 else (d1 > d0)
    assert (p1 < p0) if scale > 1 else (p1 > p0)
    # fractions never exceed the datasheet peak
    assert all(
        v <= 1.0
        for v in calibrated_gpu(
            gpu, CalibrationProfile(gemm_efficiency_scale=4.0)
        ).efficiency.gemm_peak_fraction.values()
    )


def test_overheads_replace_the_engine_s(problem: ServingProblem) -> None:
    eng = calibrated_engine(problem.engine, CalibrationProfile(step_overhead_s=0.01))
    assert eng.step_overhead_s == 0.01 and eng.request_overhead_s == problem.engine.request_overhead_s
    assert calibrated_engine(problem.engine, CalibrationProfile()) is problem.engine
