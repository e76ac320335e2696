"""``evaluate_many`` shares cost grids and λ(B) curves between scenarios: it must answer exactly what
``evaluate`` answers for each of them, in order, with a refused scenario's error in its place."""

from __future__ import annotations

from dataclasses import replace

from planner.errors import PlannerError
from planner.serving.evaluate import evaluate, evaluate_many
from planner.serving.types import DisaggregatedDeployment, PoolSpec
from planner.serving.workload import Arrival, fixed_length, lognormal_lengths


def test_shared_grids_change_nothing(llama_8b_on_h100):
    base = llama_8b_on_h100(Arrival(kind="poisson", rate_per_s=2.0))
    wl = base.workload
    dep = base.deployment
    problems = [
        *(replace(base, workload=replace(wl, arrival=Arrival(kind="poisson", rate_per_s=r))) for r in (0.5, 2.0, 9.0)),
        *(replace(base, workload=replace(wl, arrival=Arrival(kind="closed_loop", concurrency=c))) for c in (1, 16, 64)),
        replace(base, workload=replace(wl, arrival=Arrival(kind="gamma", rate_per_s=3.0, cv=2.0))),
        replace(base, workload=replace(wl, output_tokens=fixed_length(50))),  # same grid, other curve
        replace(base, workload=replace(wl, input_tokens=lognormal_lengths(median=1500, p90=4000))),
        replace(base, deployment=replace(dep, replicas=3)),
        replace(base, deployment=replace(dep, chunked_prefill=False, token_budget=2048)),
        replace(base, deployment=replace(dep, chunked_prefill=False, token_budget=1024)),  # refused: prompt > budget
        replace(base, deployment=DisaggregatedDeployment(prefill=PoolSpec(gpu=dep.gpu), decode=PoolSpec(gpu=dep.gpu))),
        replace(base, workload=replace(wl, arrival=Arrival(kind="poisson", rate_per_s=2.0))),  # a repeat
    ]
    many = evaluate_many(problems)
    assert len(many) == len(problems)
    for problem, got in zip(problems, many, strict=True):
        try:
            alone = evaluate(problem)
        except PlannerError as error:
            assert isinstance(got, type(error)) and got.detail == error.detail
            continue
        assert got == alone
    assert isinstance(many[-3], PlannerError)
