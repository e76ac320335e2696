"""A disaggregated closed loop's throughput is the root of λ = X(Z(λ)): X the mean-value analysis of the
prefill queue at the rest of a client's cycle Z, which grows with λ
(``DisaggregatedModel.closed_loop_prefill``).
Near the prefill pool's capacity X falls by ~2 req/s per req/s of λ, where iterating λ ← X diverged: until
2026-12-04 Llama-3.1-70B, 2 × tp2 prefill + 1 × tp4 decode, fixed 2000/415 tokens and 128 clients stopped
after 60 rounds at 7.13 req/s, where X is 9.40 (the root: 8.34)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs import Parallelism
from planner.engines import find_engine
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog
from planner.serving import queueing as Q
from planner.serving.disaggregated import DisaggregatedModel
from planner.serving.evaluate import evaluate
from planner.serving.types import DisaggregatedDeployment, PoolSpec, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length, lognormal_lengths


def _problem(clients: int, fixed: bool, prefill_batch: int = 256) -> ServingProblem:
    gpu = find_gpu(load_catalog(), "h100-sxm")
    dep = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, parallelism=Parallelism(tp=2), workers=2,
                                                   max_batch_size=prefill_batch),
                                  decode=PoolSpec(gpu=gpu, parallelism=Parallelism(tp=4), workers=1))
    prompts = fixed_length(2000) if fixed else lognormal_lengths(median=1730, p90=5696)
    work = Workload(input_tokens=prompts, output_tokens=fixed_length(415),
                    arrival=Arrival(kind="closed_loop", concurrency=clients))
    return ServingProblem(model=load_model_catalog().get("meta-llama/Llama-3.1-70B"),
                          engine=find_engine("vllm"), weight_dtype="bf16", kv_dtype="bf16", deployment=dep,
                          workload=work)


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "lognormal"])
@pytest.mark.parametrize("clients", [16, 64, 128, 256])
def test_the_closed_loops_rate_is_a_fixed_point(clients: int, fixed: bool) -> None:
    """One prompt per pass: the mean-value analysis of the prefill queue."""
    model = DisaggregatedModel(_problem(clients, fixed, prefill_batch=1))
    solved = model.closed_loop_prefill(float(clients), 1.0)
    assert solved is not None  # the prefill pool limits here
    lam, think = solved[0], solved[5]
    w = model.in_weights
    mean_s = float(np.dot(w, model.prefill_s))
    scv = max(float(np.dot(w, model.prefill_s**2)) / mean_s**2 - 1.0, 0.0)
    st = model.steady_state(np.array([lam]), 1.0, (clients - 1.0) / clients)
    rest = float(model.mean_e2e_s(st)[0]) - float(st.prefill_wait_s[0]) - mean_s
    assert think == pytest.approx(rest, rel=1e-12)
    x, _, _ = Q.closed_queue_mva(clients=float(clients), service_mean_s=mean_s, service_scv=scv,
                                 servers=model.dep.prefill.workers, think_s=rest)
    assert x == pytest.approx(lam, rel=1e-8)


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "lognormal"])
@pytest.mark.parametrize("clients", [16, 64, 128, 256])
def test_a_batching_pools_loop_closes_its_cycle(clients: int, fixed: bool) -> None:
    """Workers that batch their prompts (the default max_batch_size): the rate closes the cycle over the
    gated queue's wait, N = λ·(Z + E[t] + W), or is the pool's capacity with Little's law for the wait."""
    model = DisaggregatedModel(_problem(clients, fixed))
    assert model.pass_setup_s is not None
    solved = model.closed_loop_prefill(float(clients), 1.0)
    if clients == 256:
        # past the population curve's top the loop saturates: evaluate's open queue at the saturated rate,
        # its extra queueing closing Little's law
        assert solved is None
        ev = evaluate(_problem(clients, fixed))
        assert ev.requests_per_s * ev.e2e_latency_s.mean == pytest.approx(clients, rel=1e-3)
        return
    assert solved is not None
    lam, wait, think = solved[0], solved[1], solved[5]
    st = model.steady_state(np.array([lam]), 1.0, (clients - 1.0) / clients)
    rest = float(model.mean_e2e_s(st)[0]) - float(st.prefill_wait_s[0]) - model.prefill_mean_s
    assert lam * (think + model.prefill_mean_s + wait) == pytest.approx(clients, rel=1e-6)
    cap = model.batched_capacity_per_s()
    assert lam <= cap * (1.0 + 1e-9)
    if lam < cap * (1.0 - 1e-6):  # (the state is the last secant step's, within 1e-6 of λ)
        assert think == pytest.approx(rest, rel=1e-4)
        assert wait == pytest.approx(float(st.prefill_wait_s[0]), rel=1e-4)


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "lognormal"])
def test_more_clients_never_serve_less(fixed: bool) -> None:
    rates = [evaluate(_problem(n, fixed)).requests_per_s for n in (32, 64, 96, 128, 160, 256, 512)]
    assert all(b >= a * (1.0 - 1e-9) for a, b in zip(rates, rates[1:], strict=False))
