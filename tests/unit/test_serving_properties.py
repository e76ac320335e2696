"""Properties of the closed-form serving model that must hold on any GPU, including ones never fitted."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.costs import Parallelism
from planner.engines import find_engine
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog
from planner.serving.evaluate import evaluate
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length, lognormal_lengths

CATALOG = load_catalog()
MODELS = load_model_catalog()
LLAMA_8B = MODELS.get("meta-llama/Llama-3.1-8B")


def _problem(gpu: str, arrival: Arrival, *, chunked: bool = True, replicas: int = 1,
             lengths: tuple = (None, None)) -> ServingProblem:
    inp = lengths[0] or lognormal_lengths(median=1000, p90=3000)
    out = lengths[1] or lognormal_lengths(median=200, p90=600)
    dep = AggregatedDeployment(gpu=find_gpu(CATALOG, gpu), parallelism=Parallelism(tp=1), replicas=replicas,
                               token_budget=8192 if chunked else 32768, chunked_prefill=chunked)
    return ServingProblem(model=LLAMA_8B, engine=find_engine("vllm"), weight_dtype="bf16", kv_dtype="bf16",
                          deployment=dep, workload=Workload(input_tokens=inp, output_tokens=out, arrival=arrival))


def _finite(ev) -> bool:  # noqa: ANN001
    stats = [ev.ttft_s, ev.itl_s, ev.tpot_s, ev.e2e_latency_s]
    values = [v for s in stats for v in (s.mean, s.p50, s.p90, s.p99)]
    values += [ev.requests_per_s, ev.throughput_output_tokens_per_s, *ev.utilization.values()]
    return bool(np.all(np.isfinite(values)))


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm", "b200", "gb200", "mi300x", "l40s"])
def test_every_gpu_gives_finite_ordered_answers(gpu: str) -> None:
    ev = evaluate(_problem(gpu, Arrival(kind="poisson", rate_per_s=2.0)))
    assert _finite(ev)
    for s in (ev.ttft_s, ev.itl_s, ev.e2e_latency_s):
        assert s.p50 <= s.p90 <= s.p99
    assert ev.e2e_latency_s.mean >= ev.ttft_s.mean


def test_light_load_tpot_follows_hbm_bandwidth_across_generations() -> None:
    """At a light load decode is memory-bound: H200 (4.8 TB/s) must beat H100 (3.35 TB/s) by close to the
    bandwidth ratio, B200 (7.7 TB/s) by more; host overhead (same engine) keeps the ratio below 1:1."""
    tpot = {g: evaluate(_problem(g, Arrival(kind="poisson", rate_per_s=0.2))).tpot_s.mean
            for g in ("h100-sxm", "h200-sxm", "b200")}
    bw = {g: find_gpu(CATALOG, g).hbm_bandwidth_bytes_per_s for g in tpot}
    assert tpot["b200"] < tpot["h200-sxm"] < tpot["h100-sxm"]
    speedup = tpot["h100-sxm"] / tpot["h200-sxm"]
    assert 1.0 < speedup <= bw["h200-sxm"] / bw["h100-sxm"] + 1e-9


def test_more_load_never_lowers_ttft_or_itl() -> None:
    rates = (0.5, 2.0, 6.0, 12.0)
    evs = [evaluate(_problem("h100-sxm", Arrival(kind="poisson", rate_per_s=r))) for r in rates]
    assert all(e.feasible for e in evs)
    ttft = [e.ttft_s.mean for e in evs]
    itl = [e.itl_s.mean for e in evs]
    assert ttft == sorted(ttft) and itl == sorted(itl)


def test_bursty_arrivals_wait_longer_than_poisson() -> None:
    poisson = evaluate(_problem("h100-sxm", Arrival(kind="poisson", rate_per_s=8.0)))
    bursty = evaluate(_problem("h100-sxm", Arrival(kind="gamma", rate_per_s=8.0, cv=3.0)))
    assert bursty.ttft_s.mean > poisson.ttft_s.mean
    assert bursty.ttft_breakdown_s.queue > poisson.ttft_breakdown_s.queue


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("concurrency", [1, 2, 8, 64])
def test_a_closed_loop_obeys_littles_law(concurrency: int, chunked: bool) -> None:
    # the cycle the throughput is solved on and the end-to-end latency reported are one law: a stream's gaps
    # weigh the mixed (or stalled) iterations by the other N − 1 clients' share, in both
    ev = evaluate(_problem("h100-sxm", Arrival(kind="closed_loop", concurrency=concurrency), chunked=chunked))
    assert ev.requests_per_s * ev.e2e_latency_s.mean == pytest.approx(concurrency, rel=0.02)


def test_replicas_split_the_load() -> None:
    one = evaluate(_problem("h100-sxm", Arrival(kind="poisson", rate_per_s=4.0)))
    two = evaluate(_problem("h100-sxm", Arrival(kind="poisson", rate_per_s=8.0), replicas=2))
    assert two.ttft_s.mean == pytest.approx(one.ttft_s.mean, rel=1e-6)
    assert two.requests_per_s == pytest.approx(2 * one.requests_per_s)


def test_chunking_trades_ttft_for_a_lower_itl_tail() -> None:
    """Sarathi-Serve's trade-off: chunks stall running streams less but the new request waits longer."""
    arr = Arrival(kind="poisson", rate_per_s=8.0)
    chunked = evaluate(_problem("h100-sxm", arr, chunked=True))
    whole = evaluate(_problem("h100-sxm", arr, chunked=False))
    assert chunked.itl_s.p99 < whole.itl_s.p99
    assert chunked.ttft_s.mean > whole.ttft_s.mean


def test_an_overloaded_open_loop_is_flagged_and_served_at_saturation() -> None:
    ev = evaluate(_problem("h100-sxm", Arrival(kind="poisson", rate_per_s=1e4)))
    assert not ev.feasible and ev.warnings
    assert ev.requests_per_s < 1e3


def test_disaggregation_removes_prefill_interference_from_itl() -> None:
    gpu = find_gpu(CATALOG, "h100-sxm")
    arr = Arrival(kind="poisson", rate_per_s=6.0)
    wl = Workload(input_tokens=fixed_length(3000), output_tokens=fixed_length(300), arrival=arr)
    base = dict(model=LLAMA_8B, engine=find_engine("vllm"), weight_dtype="bf16", kv_dtype="bf16", workload=wl)
    agg = evaluate(ServingProblem(**base, deployment=AggregatedDeployment(gpu=gpu, replicas=2)))
    dis = evaluate(ServingProblem(**base, deployment=DisaggregatedDeployment(
        prefill=PoolSpec(gpu=gpu, workers=1, max_batch_size=1), decode=PoolSpec(gpu=gpu, workers=1))))
    assert dis.itl_s.p99 < agg.itl_s.p99
    assert dis.ttft_breakdown_s.kv_transfer > 0 and agg.ttft_breakdown_s.kv_transfer == 0
    assert dis.num_gpus == agg.num_gpus == 2


def test_kv_transfer_over_the_nic_is_slower_than_over_nvlink() -> None:
    gpu = find_gpu(CATALOG, "h100-sxm")
    wl = Workload(input_tokens=fixed_length(8000), output_tokens=fixed_length(100),
                  arrival=Arrival(kind="poisson", rate_per_s=0.5))
    pools = dict(prefill=PoolSpec(gpu=gpu, workers=1, max_batch_size=1), decode=PoolSpec(gpu=gpu, workers=1))
    base = dict(model=LLAMA_8B, engine=find_engine("vllm"), weight_dtype="bf16", kv_dtype="bf16", workload=wl)
    nv = evaluate(ServingProblem(**base, deployment=DisaggregatedDeployment(**pools, kv_link="nvlink")))
    nic = evaluate(ServingProblem(**base, deployment=DisaggregatedDeployment(**pools, kv_link="rdma")))
    assert nic.kv_transfer["transfer_s_mean"] > nv.kv_transfer["transfer_s_mean"]
    assert dataclasses.asdict(nic.ttft_breakdown_s)["kv_transfer"] >= dataclasses.asdict(nv.ttft_breakdown_s)[
        "kv_transfer"]


def _disagg_closed_loop(clients: int, coherence: float, *, lognormal: bool = False,
                        prompt_tokens: int = 2000, output_tokens: int = 512) -> ServingProblem:
    gpu = find_gpu(CATALOG, "h100-sxm")
    inp = lognormal_lengths(median=prompt_tokens, p90=3 * prompt_tokens) if lognormal else fixed_length(prompt_tokens)
    wl = Workload(input_tokens=inp, output_tokens=fixed_length(output_tokens),
                  arrival=Arrival(kind="closed_loop", concurrency=clients))
    engine = dataclasses.replace(find_engine("vllm"), closed_loop_coherence=coherence)
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, workers=1, max_batch_size=1),
                                  decode=PoolSpec(gpu=gpu, workers=2))
    return ServingProblem(model=LLAMA_8B, engine=engine, weight_dtype="bf16", kv_dtype="bf16", deployment=dep,
                          workload=wl)


def test_a_locked_fixed_length_disaggregated_loop_spaces_itself() -> None:
    """Fixed lengths, every client locked (coherence 1), the prefill pool keeping up: no prompt waits, so
    TTFT is one constant, the front end plus the prefill plus the exposed transfer, at every percentile."""
    ev = evaluate(_disagg_closed_loop(16, 1.0))
    b = ev.ttft_breakdown_s
    assert b.queue == 0.0
    constant = b.overheads + b.prefill + b.kv_transfer
    for value in (ev.ttft_s.mean, ev.ttft_s.p50, ev.ttft_s.p90, ev.ttft_s.p99):
        assert value == pytest.approx(constant, rel=1e-6)
    # random phases (coherence 0) queue behind the others; a share in between mixes the two laws
    free = evaluate(_disagg_closed_loop(16, 0.0))
    half = evaluate(_disagg_closed_loop(16, 0.5))
    assert free.ttft_s.p99 > free.ttft_s.mean > constant
    assert half.ttft_s.mean == pytest.approx(0.5 * (free.ttft_s.mean + constant), rel=1e-9)
    assert half.ttft_breakdown_s.queue == pytest.approx(0.5 * free.ttft_breakdown_s.queue, rel=1e-9)
    assert free.ttft_s.p99 >= half.ttft_s.p99 >= constant


def test_a_saturated_locked_loop_waits_its_turn_and_varying_lengths_never_lock() -> None:
    from planner.serving.disaggregated import DisaggregatedModel

    problem = _disagg_closed_loop(64, 1.0, prompt_tokens=16000, output_tokens=64)
    model = DisaggregatedModel(problem)
    service = float(np.dot(model.in_weights, model.prefill_s))
    # N·S / c − S − Z when the pool is the bottleneck, zero when it keeps up
    assert model.locked_prefill_wait_s(64.0, 0.5) == pytest.approx(64 * service - service - 0.5)
    assert model.locked_prefill_wait_s(64.0, 1e3) == 0.0
    assert model.locked_prefill_wait_s(1.0, 0.0) is None
    assert DisaggregatedModel(_disagg_closed_loop(64, 1.0, lognormal=True)).locked_prefill_wait_s(64.0, 0.5) is None
    # with varying lengths the coherence changes nothing
    a = evaluate(_disagg_closed_loop(16, 0.0, lognormal=True))
    b = evaluate(_disagg_closed_loop(16, 1.0, lognormal=True))
    assert a.ttft_s == b.ttft_s


def _chunked_fixed_loop(clients: int, *, engine: str = "vllm", coherence: float = 1.0,
                        overhead_s: float | None = None, jitter_s: float | None = 0.0) -> ServingProblem:
    gpu = find_gpu(CATALOG, "h100-sxm")
    eng = dataclasses.replace(find_engine(engine), closed_loop_coherence=coherence,
                              request_overhead_jitter_s=jitter_s)
    if overhead_s is not None:
        eng = dataclasses.replace(eng, request_overhead_s=overhead_s)
    wl = Workload(input_tokens=fixed_length(512), output_tokens=fixed_length(256),
                  arrival=Arrival(kind="closed_loop", concurrency=clients))
    dep = AggregatedDeployment(gpu=gpu, token_budget=2048, chunked_prefill=True)
    return ServingProblem(model=LLAMA_8B, engine=eng, weight_dtype="bf16", kv_dtype="bf16", deployment=dep,
                          workload=wl)


def test_a_locked_chunked_loop_runs_as_a_train() -> None:
    """The orbit's streams see a mixed iteration only while they decode through a train: few per life, so
    the ITL p90 is a decode-only iteration where the random-phase law (coherence 0) puts mixed ones; the
    orbit is a closed loop (Little's law over its cycle) and coherence mixes the two laws."""
    from planner.serving.aggregated import AggregatedModel

    problem = _chunked_fixed_loop(64)
    model = AggregatedModel(problem)
    orbit = model._chunked_train(64.0)
    tau = float(model.tables.decode(np.array([64.0]))[0])
    mixed_share = float(orbit.gap_weight[orbit.gap_s > 2.0 * tau].sum())
    assert 0.0 < mixed_share < 0.1
    # N = X·E[e2e]: a request's e2e is its TTFT and its 255 gaps
    e2e = float(np.mean(orbit.ttft_s)) + 255.0 * float(np.dot(orbit.gap_s, orbit.gap_weight))
    assert orbit.requests_per_s * e2e == pytest.approx(64.0, rel=0.01)
    ev, free = evaluate(problem), evaluate(_chunked_fixed_loop(64, coherence=0.0))
    assert ev.itl_s.p90 < free.itl_s.p90
    assert ev.requests_per_s == pytest.approx(orbit.requests_per_s, rel=0.01)
    half = evaluate(_chunked_fixed_loop(64, coherence=0.5))
    assert min(ev.ttft_s.mean, free.ttft_s.mean) < half.ttft_s.mean < max(ev.ttft_s.mean, free.ttft_s.mean)


def test_a_train_shorter_than_the_front_end_idles_and_a_non_mixing_engine_keeps_its_cohort() -> None:
    from planner.serving import train as T
    from planner.serving.aggregated import AggregatedModel

    # a long front end: every request has finished before the first returns; the first one is prefilled
    # alone as it arrives at the idle engine, the others (arriving with it) in the iterations after it
    problem = _chunked_fixed_loop(8, overhead_s=0.5)
    model = AggregatedModel(problem)
    ttft = model._chunked_train(8.0).ttft_s
    alone = 0.5 + float(model.tables.mixed(np.array([[0.0]]), np.array([[512.0]]))[0, 0])
    assert float(np.min(ttft)) == pytest.approx(alone, rel=1e-9)
    assert np.mean(np.isclose(ttft, alone, rtol=1e-9)) == pytest.approx(1 / 8)  # one client per cycle
    # SGLang runs its prefill batches apart from the decodes, and a front end of unmeasured (or large) spread
    # shuffles the groups' returns together: either way the loop stays one cohort; so does a loop whose orbit
    # would take too long to step
    big = _chunked_fixed_loop(4096)
    assert T.orbit_steps(4096, 512, 2048) > T.MAX_ORBIT_STEPS
    for cohort, n in ((_chunked_fixed_loop(64, engine="sglang"), 64.0), (_chunked_fixed_loop(64, jitter_s=None), 64.0),
                      (_chunked_fixed_loop(64, jitter_s=0.05), 64.0), (big, 4096.0)):
        sg = AggregatedModel(cohort)
        phi, mean = sg.lockstep(np.array([60.0]), n)
        iterations, t_iter = sg._chunked_cohort(np.array([60.0]), n)
        assert mean[0] == pytest.approx(sg.problem.engine.request_overhead_s + t_iter[0] * (iterations[0] + 1) / 2)
        assert sg.lockstep_itl(60.0, n) is None
    assert not find_engine("sglang").mixes_prefill_with_decode and find_engine("vllm").mixes_prefill_with_decode
    assert find_engine("vllm").request_overhead_jitter_s is None


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "l40s"])
def test_the_mixed_iteration_law_has_the_balance_equations_mean(gpu: str) -> None:
    # the ITL law's mixed kinds (full chunks; each prompt's last chunk alone, or topped up with the next
    # prompt's first tokens when one waits) average to the mixed iteration time the steady state stands on:
    # the prefill lane's time share over its iteration rate
    from planner.serving.aggregated import AggregatedModel

    model = AggregatedModel(_problem(gpu, Arrival(kind="poisson", rate_per_s=1.0), chunked=True))
    st = model.states_at_batch(np.array([1.0, 8.0, 32.0, 96.0]))
    ok = st.stable & (st.prefill_utilization < 0.99)
    assert np.sum(ok) >= 3
    mean_kind = np.sum(st.mixed_kind_s * st.mixed_kind_weight, axis=1)
    assert np.allclose(np.sum(st.mixed_kind_weight, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(mean_kind[ok], (st.prefill_utilization / st.mixed_iteration_rate_per_s)[ok],
                               rtol=1e-9)
    # the short chunk alone is a kind of its own: the shortest mixed iteration is the cost model's iteration
    # of the decodes and the shortest prompt (one chunk), not a mean that counts the next prompt's tokens in
    from planner.costs.passes import mixed_step_latency_s

    i = int(np.flatnonzero(ok)[-1])
    alone = mixed_step_latency_s(model.ctx, decode_batch=st.batch[i] + 1.0, decode_context_tokens=model.decode_context,
                                 prefill_tokens=float(model.prompt_compute.min()))
    assert st.prefill_utilization[i] > 0.3
    # (within the tables' interpolation: the chunk is a small fraction of the budget, on its first segment)
    assert float(np.min(st.mixed_kind_s[i])) == pytest.approx(float(alone), rel=0.06)
