"""The residual iteration a closed loop's request waits for when its front end has a known, small spread
(``aggregated._phase_residual``): it lands a front-end time after the iteration end that completed its
client's previous request, at a fixed phase of the decode iterations, not a uniform one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.aggregated import AggregatedModel, _phase_residual
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import Arrival, Workload, lognormal_lengths


@pytest.mark.parametrize("front_end", [0.004, 0.0105, 0.023])
def test_decode_only_iterations_leave_the_rest_of_the_one_in_progress(front_end):
    tau = 0.01
    got = float(_phase_residual(np.array([0.0]), np.array([0.05]), np.array([tau]), front_end)[0])
    assert got == pytest.approx(tau - front_end % tau)


def test_a_request_landing_in_a_mixed_iteration_waits_behind_the_lane_instead():
    # every iteration mixed: the lane's queue counts the wait, not this residual
    assert float(_phase_residual(np.array([1.0]), np.array([0.05]), np.array([0.01]), 0.024)[0]) == 0.0
    # half the iterations mixed, all longer than the front end: it lands in the first iteration after the
    # completion (decode-only with probability 1/2: rest 0.01 − 0.004) or, after a decode-only one, the
    # second (probability 1/4 decode-only: rest 0.02 − 0.012)
    got = float(_phase_residual(np.array([0.5]), np.array([0.05]), np.array([0.01]), 0.012)[0])
    assert got == pytest.approx(0.25 * 0.008)
    got = float(_phase_residual(np.array([0.5]), np.array([0.05]), np.array([0.01]), 0.004)[0])
    assert got == pytest.approx(0.5 * 0.006)


def closed_loop_problem(jitter):
    catalog = load_catalog()
    engine = dataclasses.replace(find_engine("vllm"), request_overhead_jitter_s=jitter)
    workload = Workload(input_tokens=lognormal_lengths(median=1000, p90=3000),
                        output_tokens=lognormal_lengths(median=150, p90=450),
                        arrival=Arrival(kind="closed_loop", concurrency=16))
    return ServingProblem(model=load_model_catalog().get("meta-llama/Llama-3.1-8B"), engine=engine,
                          weight_dtype="bf16", kv_dtype="bf16",
                          deployment=AggregatedDeployment(gpu=catalog["h100-sxm"], token_budget=2048),
                          workload=workload)


def test_only_a_front_end_of_known_small_spread_fixes_the_phase():
    b = np.array([4.0, 12.0])
    unknown = AggregatedModel(closed_loop_problem(None)).states_at_batch(b)
    known = AggregatedModel(closed_loop_problem(0.0)).states_at_batch(b)
    wide = AggregatedModel(closed_loop_problem(1.0)).states_at_batch(b)
    # the uniform phase: half a decode iteration for the lane's idle share of the time
    expected = unknown.decode_iteration_s / 2.0 * (1.0 - np.clip(unknown.prefill_utilization, 0, 1))
    assert unknown.residual_s == pytest.approx(expected)
    assert wide.residual_s == pytest.approx(unknown.residual_s)
    assert not np.allclose(known.residual_s, unknown.residual_s)
    assert np.all(known.residual_s >= 0.0) and np.all(known.residual_s < known.decode_iteration_s)
