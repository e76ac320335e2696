"""The searches call their checkpoint between stages (so a deadline can stop them) and never otherwise read
the clock: a checkpoint that raises stops each search at the stage it names."""

from __future__ import annotations

import dataclasses

import pytest

from planner.optimize.chunked import ChunkedSearch, plan_chunked
from planner.optimize.disaggregated import DisaggregatedSearch, PoolCandidate, plan_disaggregated
from planner.optimize.plan import PlanSearch, plan
from planner.serving.types import Slo
from planner.serving.workload import Arrival


class Stop(Exception):
    pass


def _recorder(stop_at: int | None = None):
    stages: list[str] = []

    def checkpoint(stage: str) -> None:
        stages.append(stage)
        if stop_at is not None and len(stages) >= stop_at:
            raise Stop(stage)

    return stages, checkpoint


@pytest.fixture
def searches(llama_8b_on_h100):
    problem = llama_8b_on_h100(Arrival(kind="poisson", rate_per_s=1.0))
    gpu = problem.deployment.gpu
    slo = Slo(ttft_s=1.0, itl_s=0.05)
    cand = (PoolCandidate(gpu=gpu, parallelism=problem.deployment.parallelism),)
    return {
        "chunked": (plan_chunked, ChunkedSearch(problem=problem, slo=slo)),
        "disaggregated": (plan_disaggregated, DisaggregatedSearch(
            problem=problem, slo=slo, prefill_candidates=cand, decode_candidates=cand, total_gpus=4)),
        "plan": (plan, PlanSearch(problem=problem, slo=slo, gpus=(gpu,), tensor_parallel=(1, 2), total_gpus=8)),
    }


@pytest.mark.parametrize("name", ["chunked", "disaggregated", "plan"])
def test_every_search_calls_its_checkpoint_and_answers_the_same(searches, name):
    run, search = searches[name]
    stages, checkpoint = _recorder()
    with_checkpoint = run(dataclasses.replace(search, checkpoint=checkpoint))
    assert stages, "the search never called its checkpoint"
    assert "verification" in stages
    assert with_checkpoint == run(search)  # the checkpoint changes nothing but who may stop the search


@pytest.mark.parametrize("name", ["chunked", "disaggregated", "plan"])
def test_a_raising_checkpoint_stops_the_search(searches, name):
    run, search = searches[name]
    stages, checkpoint = _recorder(stop_at=1)
    with pytest.raises(Stop):
        run(dataclasses.replace(search, checkpoint=checkpoint))
    assert len(stages) == 1


def test_an_infeasible_plan_checks_in_during_its_nearest_slo_search(searches):
    run, search = searches["chunked"]
    stages, checkpoint = _recorder()
    out = run(dataclasses.replace(search, slo=Slo(ttft_s=1e-4, itl_s=1e-4), checkpoint=checkpoint))
    assert out.status == "infeasible"
    assert "nearest feasible SLO" in stages
