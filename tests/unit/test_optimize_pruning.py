"""The whole plan's stacked capacity search (``chunked.capacity_options``) stops refining the budget rows that
cannot be their configuration's choice. Its choices must be those of the exhaustive search of each
configuration alone (``aggregated_option``, every budget refined to the end), and the fast paths of the
steady-state tables must give what their plain definitions give."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.costs import Parallelism
from planner.costs.passes import mixed_step_latency_many
from planner.engines import find_engine
from planner.errors import PlannerError
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.optimize.chunked import aggregated_option, capacity_options, prepare_aggregated
from planner.serving.aggregated import CHUNK_FRACTIONS, _Tables, _unchunked_stalls
from planner.serving.types import AggregatedDeployment, ServingProblem, Slo
from planner.serving.workload import Arrival, Workload, fixed_length, lognormal_lengths

GPUS = ("h100-sxm", "a100-80gb-sxm", "l40s", "b200")
TPS = (1, 2, 4)
WORKLOADS = {
    "lognormal": (lognormal_lengths(median=1000, p90=3000, max_tokens=16000), fixed_length(300)),
    "fixed-long": (fixed_length(4000), fixed_length(200)),
}
SLOS = {
    "p90-ttft": Slo(ttft_s=1.0, ttft_percentile=90, itl_s=0.05, itl_percentile=99),
    "strict": Slo(ttft_s=0.4, ttft_percentile=99, itl_s=0.03, itl_percentile=90),
    "itl-only": Slo(ttft_s=None, itl_s=0.04, itl_percentile=95),
}


def _prepared(model_id: str, workload: str) -> list:
    gpus, models, engine = load_catalog(), load_model_catalog(), find_engine("vllm")
    inp, out = WORKLOADS[workload]
    base = ServingProblem(
        model=models.get(model_id), engine=engine, weight_dtype="bf16", kv_dtype="bf16",
        deployment=AggregatedDeployment(gpu=gpus["h100-sxm"]),
        workload=Workload(input_tokens=inp, output_tokens=out, arrival=Arrival(kind="poisson", rate_per_s=1.0)))
    preps = []
    for gpu in GPUS:
        for tp in TPS:
            for chunked in (True, False):
                dep = AggregatedDeployment(gpu=gpus[gpu], parallelism=Parallelism(tp=tp), chunked_prefill=chunked,
                                           token_budget=16384)
                try:
                    preps.append(prepare_aggregated(dataclasses.replace(base, deployment=dep), chunk_overhead=False))
                except PlannerError:
                    continue  # does not fit
    return preps


@pytest.mark.parametrize("slo_name", list(SLOS))
@pytest.mark.parametrize(("model_id", "workload"), [("meta-llama/Llama-3.1-8B", "lognormal"),
                                                    ("meta-llama/Llama-3.1-70B", "lognormal"),
                                                    ("meta-llama/Llama-3.1-8B", "fixed-long")])
def test_stacked_search_chooses_as_the_exhaustive_one(model_id: str, workload: str, slo_name: str) -> None:
    slo = SLOS[slo_name]
    preps = _prepared(model_id, workload)
    times = [mixed_step_latency_many(p.model.ctx, p.requests) for p in preps]
    stacked = capacity_options(preps, times, slo)
    assert len(stacked) == len(preps) >= 8
    lowered = 0
    for prep, t, got in zip(preps, times, stacked, strict=True):
        alone = _prepared_again(prep)
        ref = aggregated_option(prep.problem, slo, prepared=alone, times=t, quantiles="none", own_limits=True)
        label = f"{prep.problem.deployment.gpu.id} tp{prep.problem.deployment.parallelism.tp}"
        assert got.token_budget == ref.token_budget, label
        assert got.max_batch_size == ref.max_batch_size, label
        assert got.binding_constraint == ref.binding_constraint, label
        np.testing.assert_allclose(got.capacity_per_replica_per_s, ref.capacity_per_replica_per_s, rtol=1e-9,
                                   err_msg=label)
        for a, b in zip(got.points, ref.points, strict=True):
            # a row that stopped early keeps a rate it surely reaches: never above the exhaustive one
            assert a.max_rate_per_s <= b.max_rate_per_s * (1.0 + 1e-9), label
            lowered += a.max_rate_per_s < b.max_rate_per_s * (1.0 - 1e-6)
            if a.token_budget == got.token_budget:
                assert a.max_rate_per_s == pytest.approx(b.max_rate_per_s, rel=1e-9), label
                assert a.mean_itl_s == pytest.approx(b.mean_itl_s, rel=1e-9), label
        np.testing.assert_allclose(np.array(got.frontier), np.array(ref.frontier), rtol=1e-9, err_msg=label)
    if slo_name == "p90-ttft":
        assert lowered > 0  # the early stop took place (chunked rows far below their best budget)


def _prepared_again(prep):
    """A fresh copy of a configuration's search model (the stacked search set its tables)."""
    return prepare_aggregated(prep.problem, chunk_overhead=False)


# --------------------------------------------------------------------------- the tables' fast paths


def test_chunk_segment_from_the_binary_exponent_is_the_searched_one() -> None:
    rng = np.random.default_rng(3)
    nf = CHUNK_FRACTIONS.size
    frac = np.concatenate([rng.uniform(0.0, 1.0, 4000), rng.uniform(0.0, 1e-3, 200), CHUNK_FRACTIONS,
                           np.nextafter(CHUNK_FRACTIONS, 2.0), np.nextafter(CHUNK_FRACTIONS[1:], -1.0), [0.0]])
    n = frac.size
    offset, slope = rng.uniform(size=(n, nf - 1)), rng.uniform(size=(n, nf - 1))
    inv_c = np.full((n, 1), 1.0 / 1000.0)
    got = _Tables.at_segments((offset, slope, inv_c), (np.minimum(frac, 1.0) * 1000.0)[:, None])
    f = np.minimum(frac * 1000.0 * inv_c[:, 0], 1.0)
    j = np.searchsorted(CHUNK_FRACTIONS[1:-1], f, side="right")
    ref = offset[np.arange(n), j] + slope[np.arange(n), j] * f
    np.testing.assert_array_equal(got[:, 0], ref)


def test_merged_grid_cells_are_those_of_comparing_with_every_point() -> None:
    rng = np.random.default_rng(5)
    rows = []
    for cap in (0.5, 3.0, 40.0, 255.9, 1000.0):
        g = np.unique(np.concatenate([[0.0, 1.0], np.geomspace(1.0, max(cap, 1.0), 20)]))
        rows.append(np.concatenate([g, np.repeat(g[-1:], 22 - g.size)]))  # padded as a stack pads
    batch = np.array(rows)
    nk, nb = batch.shape
    grid, count = _Tables.merged(batch)
    z = np.zeros((nk, nb, CHUNK_FRACTIONS.size))
    plain = _Tables(batch=batch, budget_left=z[:, :, 0], mixed_s=z, prompt_prefill_s=z[:, :1, 0],
                    pass_saving_s=z[:, :1, 0])
    fast = dataclasses.replace(plain, merged_grid=grid, merged_count=count)
    b = np.concatenate([rng.uniform(0.0, 1100.0, 3000), batch.ravel(), np.nextafter(batch.ravel(), -1.0),
                        [-1.0, np.nan, 2000.0]])
    k = rng.integers(0, nk, b.size)
    for got, ref in zip(fast._locate(b, k), plain._locate(b, k), strict=True):
        np.testing.assert_array_equal(got, ref)


def test_stall_groups_of_all_rows_at_once_are_each_row_alone() -> None:
    rng = np.random.default_rng(11)
    ni = 40
    w = rng.uniform(0.1, 1.0, ni)
    w /= w.sum()
    order = np.argsort(rng.uniform(size=ni))
    t_pre = rng.lognormal(-2.0, 0.7, size=(9, ni))
    lam, u, tau_d = rng.uniform(0.5, 5.0, 9), rng.uniform(0.0, 0.9, 9), rng.uniform(0.01, 0.05, 9)
    together = _unchunked_stalls(lam, u, tau_d, t_pre, w, order)
    for r in range(9):
        alone = _unchunked_stalls(lam[r:r + 1], u[r:r + 1], tau_d[r:r + 1], t_pre[r:r + 1], w, order)
        for a, b in zip(together, alone, strict=True):
            np.testing.assert_array_equal(a[r], b[0])

