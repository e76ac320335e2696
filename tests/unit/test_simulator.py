"""The discrete-event simulator of the scheduler (planner.validation.simulator).

Most tests inject a synthetic, linear step time so that the expected figures are exact by hand:
``base + per_sequence × decode_batch + per_token × prefill_tokens`` seconds per iteration.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.costs.passes import mixed_step_latency_s
from planner.costs.types import CostContext
from planner.engines import find_engine
from planner.errors import InvalidInput, ModelDoesNotFit
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length, lognormal_lengths
from planner.units import DTYPE_BYTES
from planner.validation import simulator
from planner.validation.simulator import CostModelStepTime, SimulationResult, simulate

BASE_S = 0.01
PER_SEQUENCE_S = 1e-4
PER_TOKEN_S = 1e-5
FRONT_END_S = 0.003


def linear_step(base_s: float = BASE_S, per_sequence_s: float = PER_SEQUENCE_S,
                per_token_s: float = PER_TOKEN_S):
    def step(*, decode_batch, decode_context_tokens, prefill_tokens, prefill_cached_tokens,
             prefill_sequences):
        return base_s + per_sequence_s * decode_batch + per_token_s * prefill_tokens

    return step


@pytest.fixture(scope="module")
def model():
    return load_model_catalog().get("meta-llama/Llama-3.1-8B")


@pytest.fixture(scope="module")
def gpu():
    return load_catalog()["h100-sxm"]


@pytest.fixture(scope="module")
def engine():
    return dataclasses.replace(find_engine("vllm"), request_overhead_s=FRONT_END_S)


@pytest.fixture
def make(model, gpu, engine):
    def build(*, arrival: Arrival, input_tokens=None, output_tokens=None, hit: float = 0.0,
              deployment=None) -> ServingProblem:
        workload = Workload(
            input_tokens=input_tokens or fixed_length(1000), output_tokens=output_tokens or fixed_length(10),
            arrival=arrival, prefix_cache_hit_fraction=hit,
        )
        return ServingProblem(model=model, engine=engine, weight_dtype="bf16", kv_dtype="bf16",
                              deployment=deployment or AggregatedDeployment(gpu=gpu), workload=workload)

    return build


def poisson(rate_per_s: float) -> Arrival:
    return Arrival(kind="poisson", rate_per_s=rate_per_s)


def closed(concurrency: int) -> Arrival:
    return Arrival(kind="closed_loop", concurrency=concurrency)


def lognormal_workload() -> dict:
    return {"input_tokens": lognormal_lengths(median=500, p90=1500),
            "output_tokens": lognormal_lengths(median=100, p90=300)}


def assert_tokens_accounted(res: SimulationResult) -> None:
    """Every measured request emitted exactly its output tokens, and TTFT + its gaps = its e2e latency."""
    assert res.itl_s.size == int(np.sum(res.output_tokens - 1))
    assert np.sum(res.ttft_s) + np.sum(res.itl_s) == pytest.approx(np.sum(res.e2e_s), rel=1e-9)
    assert np.all(res.itl_s > 0) and np.all(res.ttft_s > 0)


# --------------------------------------------------------------------------------------------------
# latencies that can be computed by hand
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [True, False])
def test_light_load_ttft_is_one_prefill_pass_plus_front_end(make, gpu, chunked):
    dep = AggregatedDeployment(gpu=gpu, chunked_prefill=chunked)
    res = simulate(make(arrival=poisson(0.05), deployment=dep), num_requests=300, warmup_requests=10,
                   step_time=linear_step())
    prefill_s = BASE_S + PER_TOKEN_S * 1000
    ttft = res.stats("ttft_s")
    # a request arriving to an empty replica waits for nothing but its own prefill pass
    assert ttft.p50 == pytest.approx(FRONT_END_S + prefill_s, rel=1e-9)
    assert np.min(res.ttft_s) == pytest.approx(FRONT_END_S + prefill_s, rel=1e-9)
    decode_s = BASE_S + PER_SEQUENCE_S
    assert res.stats("e2e_s").p50 == pytest.approx(FRONT_END_S + prefill_s + 9 * decode_s, rel=1e-9)


def test_single_closed_loop_client_decodes_at_the_step_time(make):
    res = simulate(make(arrival=closed(1), output_tokens=fixed_length(50)), num_requests=40,
                   warmup_requests=2, step_time=linear_step())
    decode_s = BASE_S + PER_SEQUENCE_S * 1
    np.testing.assert_allclose(res.tpot_s, decode_s, rtol=1e-9)
    np.testing.assert_allclose(res.itl_s, decode_s, rtol=1e-9)
    # one request at a time: the cycle is the e2e latency
    assert res.requests_per_s == pytest.approx(1.0 / res.stats("e2e_s").mean, rel=1e-9)
    assert res.mean_decode_batch == pytest.approx(1.0)


def test_prefix_cache_hits_skip_prefill_compute_but_not_kv(make):
    calls = []
    step = linear_step()

    def recording(**kw):
        calls.append(kw)
        return step(**kw)

    res = simulate(make(arrival=poisson(0.05), hit=0.25), num_requests=50, warmup_requests=5,
                   step_time=recording)
    prefills = [c for c in calls if c["prefill_tokens"] > 0]
    assert all(c["prefill_tokens"] == 750 and c["prefill_cached_tokens"] == 250 for c in prefills)
    assert res.stats("ttft_s").p50 == pytest.approx(FRONT_END_S + BASE_S + PER_TOKEN_S * 750, rel=1e-9)
    # the cached prompt tokens still sit in the KV cache: the decodes see the whole prompt as context
    decodes = [c for c in calls if c["prefill_tokens"] == 0]
    assert min(c["decode_context_tokens"] for c in decodes) == 1000


# --------------------------------------------------------------------------------------------------
# queueing laws
# --------------------------------------------------------------------------------------------------


def test_littles_law_open_loop(make):
    rate = 8.0
    res = simulate(make(arrival=poisson(rate), **lognormal_workload()), num_requests=3000,
                   warmup_requests=300, step_time=linear_step(per_sequence_s=2e-4, per_token_s=2e-5))
    assert_tokens_accounted(res)
    assert res.requests_per_s == pytest.approx(rate, rel=0.05)
    # time-average number of (measured) requests in the system over a window inside the run
    start, end = res.arrival_s[200], res.arrival_s[-1]
    done = res.arrival_s + res.e2e_s
    overlap_s = np.clip(np.minimum(done, end) - np.maximum(res.arrival_s, start), 0.0, None)
    in_system = overlap_s.sum() / (end - start)
    assert in_system == pytest.approx(res.requests_per_s * res.stats("e2e_s").mean, rel=0.03)


def test_littles_law_closed_loop(make):
    clients = 24
    res = simulate(make(arrival=closed(clients), **lognormal_workload()), num_requests=3000,
                   warmup_requests=300, step_time=linear_step(per_sequence_s=2e-4, per_token_s=2e-5))
    assert_tokens_accounted(res)
    # no think time: every client always has exactly one request in the system
    assert res.requests_per_s * res.stats("e2e_s").mean == pytest.approx(clients, rel=0.02)


def test_closed_loop_throughput_saturates(make, gpu):
    dep = AggregatedDeployment(gpu=gpu, max_batch_size=16)
    rps = {}
    e2e = {}
    for clients in (1, 4, 16, 64):
        res = simulate(make(arrival=closed(clients), output_tokens=fixed_length(100), deployment=dep),
                       num_requests=1500, warmup_requests=200, step_time=linear_step())
        rps[clients], e2e[clients] = res.requests_per_s, res.stats("e2e_s").mean
    assert rps[1] < rps[4] < rps[16]
    assert rps[4] > 3.0 * rps[1]
    # beyond the batch limit more clients only queue: the same throughput, a proportionally longer wait
    assert rps[64] == pytest.approx(rps[16], rel=0.03)
    assert e2e[64] == pytest.approx(4.0 * e2e[16], rel=0.1)


def test_replicas_share_the_clients(make, gpu):
    one = simulate(make(arrival=closed(8)), num_requests=2000, warmup_requests=200, step_time=linear_step())
    two = simulate(make(arrival=closed(16), deployment=AggregatedDeployment(gpu=gpu, replicas=2)),
                   num_requests=4000, warmup_requests=400, step_time=linear_step())
    assert two.requests_per_s == pytest.approx(2.0 * one.requests_per_s, rel=0.01)
    assert two.stats("e2e_s").mean == pytest.approx(one.stats("e2e_s").mean, rel=0.01)


def test_bursty_arrivals_wait_longer(make):
    kw = {"num_requests": 3000, "warmup_requests": 300, "step_time": linear_step(per_token_s=2e-5)}
    smooth = simulate(make(arrival=poisson(10.0), **lognormal_workload()), **kw)
    gamma = Arrival(kind="gamma", rate_per_s=10.0, cv=3.0)
    bursty = simulate(make(arrival=gamma, **lognormal_workload()), **kw)
    assert bursty.requests_per_s == pytest.approx(10.0, rel=0.15)
    assert bursty.stats("ttft_s").mean > 1.5 * smooth.stats("ttft_s").mean
    assert bursty.stats("ttft_s").p99 > smooth.stats("ttft_s").p99


# --------------------------------------------------------------------------------------------------
# scheduler policies
# --------------------------------------------------------------------------------------------------


def test_chunked_prefill_cuts_the_itl_tail(make, gpu):
    results = {}
    for chunked in (True, False):
        dep = AggregatedDeployment(gpu=gpu, token_budget=512, chunked_prefill=chunked)
        problem = make(arrival=poisson(2.0), input_tokens=fixed_length(4096),
                       output_tokens=fixed_length(200), deployment=dep)
        res = simulate(problem, num_requests=800, warmup_requests=100,
                       step_time=linear_step(base_s=0.005, per_token_s=2e-5))
        assert_tokens_accounted(res)
        results[chunked] = res
    chunked_p99, unchunked_p99 = results[True].stats("itl_s").p99, results[False].stats("itl_s").p99
    # a 4096-token prefill-only iteration stalls every stream; a chunk holds at most 512 tokens
    assert unchunked_p99 >= 0.005 + 2e-5 * 4096
    assert chunked_p99 <= 0.005 + PER_SEQUENCE_S * 256 + 2e-5 * 512
    assert chunked_p99 < 0.5 * unchunked_p99


def test_kv_exhaustion_preempts_and_recomputes(make):
    problem = make(arrival=closed(32), input_tokens=fixed_length(500), output_tokens=fixed_length(200))
    ample = simulate(problem, num_requests=600, warmup_requests=50, step_time=linear_step())
    assert ample.num_preemptions == 0 and ample.recomputed_tokens == 0
    tiny = simulate(problem, num_requests=600, warmup_requests=50, step_time=linear_step(),
                    kv_capacity_tokens=3000)
    assert tiny.num_preemptions > 0
    # each re-admission recomputes the prompt and whatever the request had generated
    assert tiny.recomputed_tokens >= 500 * tiny.num_preemptions
    assert_tokens_accounted(tiny)
    assert tiny.requests_per_s < ample.requests_per_s


def test_a_kv_watermark_keeps_growing_requests_from_being_preempted(make):
    """Admissions that leave KV free (vLLM V0's block-manager watermark) give the running requests room to
    grow: fewer preemptions, the same requests served; either way prompts wait for KV some of the time."""
    problem = make(arrival=closed(32), input_tokens=fixed_length(500), output_tokens=fixed_length(200))
    runs = {wm: simulate(problem, num_requests=600, warmup_requests=50, step_time=linear_step(),
                         kv_capacity_tokens=3000, kv_watermark=wm) for wm in (0.0, 0.25)}
    assert runs[0.25].num_preemptions < runs[0.0].num_preemptions
    for res in runs.values():
        assert_tokens_accounted(res)
        assert 0.0 < res.admission_blocked_share <= 1.0
    ample = simulate(problem, num_requests=600, warmup_requests=50, step_time=linear_step())
    assert ample.admission_blocked_share == 0.0
    for bad in (-0.1, 1.0):
        with pytest.raises(InvalidInput):
            simulate(problem, num_requests=10, warmup_requests=1, step_time=linear_step(), kv_watermark=bad)
    # the watermark counts against the longest request's fit
    with pytest.raises(ModelDoesNotFit):
        simulate(problem, num_requests=10, warmup_requests=1, step_time=linear_step(), kv_capacity_tokens=800,
                 kv_watermark=0.2)


def test_kv_cache_too_small_for_one_request_is_refused(make):
    with pytest.raises(ModelDoesNotFit):
        simulate(make(arrival=closed(1)), num_requests=10, warmup_requests=1, step_time=linear_step(),
                 kv_capacity_tokens=1000)


def test_warmup_must_leave_requests_to_measure(make):
    with pytest.raises(InvalidInput):
        simulate(make(arrival=closed(1)), num_requests=10, warmup_requests=10, step_time=linear_step())


# --------------------------------------------------------------------------------------------------
# disaggregated pools
# --------------------------------------------------------------------------------------------------


def test_disaggregated_ttft_includes_the_kv_transfer(make, gpu):
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, workers=1), decode=PoolSpec(gpu=gpu, workers=2))
    problem = make(arrival=poisson(0.05), deployment=dep)
    kw = {"num_requests": 200, "warmup_requests": 10, "step_time": linear_step()}
    instant = simulate(problem, kv_transfer_s=lambda tokens: 0.0, **kw)
    slow = simulate(problem, kv_transfer_s=lambda tokens: 2e-5 * tokens, **kw)
    prefill_s = BASE_S + PER_TOKEN_S * 1000
    assert instant.stats("ttft_s").p50 == pytest.approx(FRONT_END_S + prefill_s, rel=1e-9)
    assert slow.stats("ttft_s").p50 == pytest.approx(FRONT_END_S + prefill_s + 0.02, rel=1e-9)
    np.testing.assert_allclose(slow.kv_transfer_s, 0.02)
    # the decode pool then streams at its own step time
    assert slow.stats("tpot_s").p50 == pytest.approx(BASE_S + PER_SEQUENCE_S, rel=1e-9)
    assert_tokens_accounted(slow)


def test_disaggregated_default_transfer_is_kv_bytes_over_the_nic(make, gpu, model):
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu), decode=PoolSpec(gpu=gpu))
    res = simulate(make(arrival=poisson(0.05), deployment=dep), num_requests=20, warmup_requests=2,
                   step_time=linear_step())
    kv_bytes = 1000 * model.kv_cache_bytes_per_token(DTYPE_BYTES["bf16"])
    np.testing.assert_allclose(res.kv_transfer_s, kv_bytes / gpu.scale_out_bandwidth_bytes_per_s)


def test_prefill_pool_of_one_prompt_per_pass_is_an_md1_queue(make, gpu):
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, max_batch_size=1), decode=PoolSpec(gpu=gpu))
    res = simulate(make(arrival=poisson(25.0), output_tokens=fixed_length(2), deployment=dep),
                   num_requests=8000, warmup_requests=400, step_time=linear_step(),
                   kv_transfer_s=lambda tokens: 0.0)
    service_s = BASE_S + PER_TOKEN_S * 1000
    rho = res.utilization["prefill_pool"]
    assert rho == pytest.approx(25.0 * service_s, rel=0.03)
    # Pollaczek-Khinchine mean wait of M/D/1, at the utilization the run realized
    wait_s = rho * service_s / (2.0 * (1.0 - rho))
    assert res.stats("ttft_s").mean - FRONT_END_S - service_s == pytest.approx(wait_s, rel=0.08)


def test_decode_pool_balances_and_queues(make, gpu):
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, workers=2),
                                  decode=PoolSpec(gpu=gpu, workers=2, max_batch_size=8))
    res = simulate(make(arrival=closed(40), output_tokens=fixed_length(100), deployment=dep),
                   num_requests=1500, warmup_requests=200, step_time=linear_step(),
                   kv_transfer_s=lambda tokens: 0.001)
    assert_tokens_accounted(res)
    # 16 decode slots for 40 clients: both decode workers run full batches
    assert res.mean_decode_batch == pytest.approx(8.0, rel=0.02)
    assert res.utilization["decode_pool"] == pytest.approx(1.0, abs=0.01)
    decode_s = BASE_S + PER_SEQUENCE_S * 8
    assert res.requests_per_s == pytest.approx(16 / (99 * decode_s), rel=0.01)


def test_round_robin_deals_requests_to_the_decode_workers_in_turn(make, gpu):
    """One prefill worker of one prompt per pass and a constant transfer keep the KV arrivals in request
    order, so the round-robin router sends request i to decode worker i mod 3, and it decodes there."""
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, max_batch_size=1),
                                  decode=PoolSpec(gpu=gpu, workers=3, max_batch_size=4))
    problem = make(arrival=poisson(20.0), deployment=dep, **lognormal_workload())
    sim = simulator._Simulation(problem, num_requests=600, warmup_requests=50, seed=3,
                                step_time=linear_step(), kv_transfer_s=lambda tokens: 0.002,
                                kv_capacity_tokens=None, decode_routing="round_robin")
    sim.run()
    decoded = [r for r in sim.requests if r.n_out > 1]
    assert [r.route for r in decoded] == [r.rid % 3 for r in decoded]
    # every decode run of a request is on its routed worker (index after the one prefill worker)
    assert all(seg[1] == 1 + r.route for r in decoded for seg in r.segments if seg[1] >= 0)
    # max_batch_size 4 at ~20 requests/s of ~150 tokens: workers fill up, and requests wait for their own
    assert_tokens_accounted(sim.result())


@pytest.mark.parametrize("routing", ["least_loaded", "round_robin"])
def test_decode_routing_keeps_full_pools_full(make, gpu, routing):
    """40 clients on 2 decode workers of 8 slots: whichever the router, both run full batches."""
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, workers=2),
                                  decode=PoolSpec(gpu=gpu, workers=2, max_batch_size=8))
    res = simulate(make(arrival=closed(40), output_tokens=fixed_length(100), deployment=dep),
                   num_requests=1500, warmup_requests=200, step_time=linear_step(),
                   kv_transfer_s=lambda tokens: 0.001, decode_routing=routing)
    assert_tokens_accounted(res)
    assert res.mean_decode_batch == pytest.approx(8.0, rel=0.02)


def test_round_robin_spreads_the_decode_batch_more_than_least_loaded(make, gpu):
    """A router blind to load lets the workers' batches drift apart: the per-worker batch's variance over
    its mean is larger than with the least-loaded router, at the same mean."""
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, workers=2), decode=PoolSpec(gpu=gpu, workers=3))
    problem = make(arrival=poisson(30.0), deployment=dep, **lognormal_workload())
    runs = {routing: simulate(problem, num_requests=4000, warmup_requests=400, step_time=linear_step(),
                              kv_transfer_s=lambda tokens: 0.001, decode_routing=routing)
            for routing in ("least_loaded", "round_robin")}
    ll, rr = runs["least_loaded"], runs["round_robin"]
    assert rr.decode_batch_time_mean == pytest.approx(ll.decode_batch_time_mean, rel=0.05)
    assert rr.decode_batch_dispersion > 1.3 * ll.decode_batch_dispersion


def test_unknown_decode_routing_is_refused(make, gpu):
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu), decode=PoolSpec(gpu=gpu, workers=2))
    with pytest.raises(InvalidInput, match="decode_routing"):
        simulate(make(arrival=poisson(1.0), deployment=dep), num_requests=10, warmup_requests=1,
                 step_time=linear_step(), decode_routing="random")


# --------------------------------------------------------------------------------------------------
# the simulator itself
# --------------------------------------------------------------------------------------------------


def test_same_seed_same_result(make):
    problem = make(arrival=Arrival(kind="gamma", rate_per_s=8.0, cv=2.0), **lognormal_workload())
    a, b, c = (simulate(problem, num_requests=500, warmup_requests=50, seed=s, step_time=linear_step())
               for s in (7, 7, 8))
    for name in ("arrival_s", "ttft_s", "e2e_s", "itl_s", "output_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.ttft_s, c.ttft_s)


@pytest.mark.parametrize("case", ["chunked", "unchunked_preempting", "disaggregated_preempting",
                                  "disaggregated_round_robin"])
def test_runs_of_decode_iterations_equal_single_iterations(make, gpu, monkeypatch, case):
    """The fast path (a run of identical decode-only iterations in one event, cut short by arrivals)
    reproduces the iteration-by-iteration simulation, which a one-token context bucket forces."""
    deployment = {
        "chunked": AggregatedDeployment(gpu=gpu, token_budget=1024),
        "unchunked_preempting": AggregatedDeployment(gpu=gpu, chunked_prefill=False, replicas=2),
        "disaggregated_preempting": DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu),
                                                            decode=PoolSpec(gpu=gpu, workers=2)),
        "disaggregated_round_robin": DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu),
                                                             decode=PoolSpec(gpu=gpu, workers=2)),
    }[case]
    capacity = None if case == "chunked" else 6000
    problem = make(arrival=poisson(6.0), deployment=deployment, hit=0.2, **lognormal_workload())
    kw = {"num_requests": 800, "warmup_requests": 50, "step_time": linear_step(),
          "kv_capacity_tokens": capacity,
          "decode_routing": "round_robin" if case == "disaggregated_round_robin" else "least_loaded"}
    fast = simulate(problem, **kw)
    monkeypatch.setattr(simulator, "_bucket_upper_edge", lambda x: x + 0.5)
    slow = simulate(problem, **kw)
    if capacity is not None:
        assert slow.num_preemptions > 0
    assert fast.num_preemptions == slow.num_preemptions
    for name in ("ttft_s", "e2e_s", "itl_s"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9, atol=1e-12)


def test_stats_match_numpy_percentiles(make):
    res = simulate(make(arrival=poisson(5.0), **lognormal_workload()), num_requests=400, warmup_requests=40,
                   step_time=linear_step())
    s = res.stats("itl_s")
    assert (s.mean, s.p50, s.p90, s.p99) == pytest.approx(
        (res.itl_s.mean(), *np.percentile(res.itl_s, [50, 90, 99])), rel=1e-12)
    with pytest.raises(InvalidInput):
        res.stats("latency")


# --------------------------------------------------------------------------------------------------
# with the real cost model
# --------------------------------------------------------------------------------------------------


def test_real_cost_model_llama_8b_on_h100(make, gpu):
    problems = {
        "aggregated": make(arrival=poisson(4.0), **lognormal_workload()),
        "disaggregated": make(arrival=poisson(4.0), deployment=DisaggregatedDeployment(
            prefill=PoolSpec(gpu=gpu), decode=PoolSpec(gpu=gpu)), **lognormal_workload()),
    }
    for kind, problem in problems.items():
        res = simulate(problem, num_requests=200, warmup_requests=20)
        assert_tokens_accounted(res)
        for name in simulator.METRICS:
            s = res.stats(name)
            assert 0.0 < s.p50 <= s.p90 <= s.p99 < 10.0, (kind, name, s)
            assert np.isfinite(s.mean) and s.mean > 0.0
        assert 0.0 < res.requests_per_s < 10.0 and res.output_tokens_per_s > 0.0
        assert res.mean_decode_batch >= 1.0
        assert all(0.0 < u <= 1.0 for u in res.utilization.values())


def test_cost_model_memo_follows_the_cost_model(model, gpu, engine):
    ctx = CostContext(model=model, gpu=gpu, engine=engine)
    memo = CostModelStepTime(ctx, max_batch_size=128, token_budget=4096)
    on_grid = 1.05**140  # a bucket's centre: only the token counts decide, and they are kept exact
    cases = [(64, on_grid, 0, 0), (65, on_grid, 0, 0), (12, on_grid, 2048, 1), (12, on_grid, 2049, 1),
             (0, 0.0, 1000, 1), (0, 0.0, 3000, 3), (0, 0.0, 9000, 1)]
    for batch, context, tokens, sequences in cases:
        kw = {"decode_batch": batch, "decode_context_tokens": context, "prefill_tokens": tokens,
              "prefill_cached_tokens": 0.0, "prefill_sequences": sequences}
        assert memo(**kw) == pytest.approx(float(mixed_step_latency_s(ctx, **kw)), rel=1e-12)
    # off the grid the mean context moves by at most 2.5 %, and the step time by less
    for batch, context in ((1, 900.0), (40, 1530.0), (128, 3333.0)):
        kw = {"decode_batch": batch, "decode_context_tokens": context, "prefill_tokens": 0,
              "prefill_cached_tokens": 0.0, "prefill_sequences": 0}
        assert memo(**kw) == pytest.approx(float(mixed_step_latency_s(ctx, **kw)), rel=0.025)
