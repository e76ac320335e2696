"""``evaluate`` against the 917 measured H100 serving benchmarks (``serving_benchmarks_h100.csv``).

Each row is a closed-loop benchmark at fixed concurrency (mean TTFT and mean TPOT in ms; vLLM, SGLang,
TensorRT-LLM; dense and MoE; aggregated and disaggregated). The row -> problem mapping and the scoring are
``planner.validation.serving`` (the same code writes ``docs/accuracy_serving.md``).

Targets (issue 3, section 6) on the dense aggregated rows: median APE of mean TTFT ≤ 20 %, of mean TPOT
≤ 10 %. The benchmark means are over hundreds of requests; their run-to-run spread is a few percent, far
inside these bounds, so the bounds are the targets themselves. A target the current model misses is a
strict xfail carrying the figures measured when it was written: it XPASSes (and fails) once the model
meets it, and must then become a plain assert.

All rows are evaluated once per session (about 10 to 15 s single-process on the 2 shared cores).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from planner.costs.types import Parallelism
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment
from planner.validation.datasets import serving_benchmarks
from planner.validation.metrics import summarize
from planner.validation.serving import (
    BENCHMARK_GPU,
    TOKEN_BUDGET,
    TPOT_TARGET,
    TTFT_TARGET,
    BenchmarkResult,
    aggregated_deployment,
    dense_aggregated,
    disaggregated_deployment,
    evaluate_rows,
    score,
    weight_dtype_of,
)

NUM_ROWS = 917


@pytest.fixture(scope="module")
def rows(shared_dir: Path) -> list[dict[str, object]]:
    return serving_benchmarks(shared_dir)


@pytest.fixture(scope="module")
def results(rows: list[dict[str, object]]) -> list[BenchmarkResult]:
    return evaluate_rows(rows)


def _row(rows: list[dict[str, object]], row_id: str) -> dict[str, object]:
    return next(r for r in rows if r["id"] == row_id)


# --------------------------------------------------------------------------------------------------
# every row is answered or refused


def test_every_row_is_answered_or_refused_with_a_reason(rows, results) -> None:
    assert len(rows) == NUM_ROWS
    assert [r.row_id for r in results] == [row["id"] for row in rows]
    for r in results:
        assert (r.evaluation is None) != (r.refusal is None), r.row_id
        if r.refusal is not None:
            assert r.refusal.strip() and ":" in r.refusal, r.row_id


def test_predictions_are_finite_and_positive(results) -> None:
    answered = [r for r in results if r.answered]
    assert len(answered) > 0.8 * NUM_ROWS
    bad = [r.row_id for r in answered
           if not (np.isfinite(r.predicted_ttft_s) and r.predicted_ttft_s > 0
                   and np.isfinite(r.predicted_tpot_s) and r.predicted_tpot_s > 0)]
    assert bad == []


def test_refusals_name_what_is_missing(results) -> None:
    """Rows without concurrency, and disaggregated rows without pool sizes, are refused for that reason."""
    for r in results:
        if r.concurrency is None:
            assert r.refusal is not None and "concurrency" in r.refusal, r.row_id
    by_reason = Counter(r.refusal for r in results if r.refusal)
    no_workers = [reason for reason in by_reason if "prefill_num_workers" in reason]
    assert no_workers, "the 92 disaggregated rows without worker counts should be refused"
    assert all("decode_num_workers" in reason for reason in no_workers)


def test_slices_partition_the_rows(results) -> None:
    """Per backend × mode × dense/MoE, answered + refused rows add up to the whole file."""
    slices = [s for s in score(results) if s.dimension == "backend · mode · dense/MoE"]
    assert sum(s.ttft.num_rows + s.num_refused for s in slices) == NUM_ROWS
    labels = {s.label for s in slices}
    assert {"vllm · agg · dense", "trtllm · agg · MoE", "trtllm · disagg · MoE"} <= labels


# --------------------------------------------------------------------------------------------------
# the mapping


def test_weight_dtype_of_reads_the_quant_mode() -> None:
    assert weight_dtype_of({"gemm_quant_mode": "fp8_block", "precision": "fp8"}) == "fp8"
    assert weight_dtype_of({"gemm_quant_mode": "nvfp4", "precision": "fp4"}) == "fp4"
    assert weight_dtype_of({"gemm_quant_mode": "", "precision": ""}) == "bf16"
    assert weight_dtype_of({"gemm_quant_mode": None, "precision": "fp8"}) == "fp8"


def test_attention_dp_row_keeps_the_whole_closed_loop_in_one_worker(rows) -> None:
    """MiniMax-M2.5 on vLLM, tp4 × dp4 with ep16: 16 GPUs; batch_size is one DP rank's (c / 4)."""
    row = _row(rows, "2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322")
    model = load_model_catalog().get(str(row["model"]))
    dep = aggregated_deployment(row, model=model, gpu=find_gpu(load_catalog(), BENCHMARK_GPU))
    assert dep.parallelism == Parallelism(tp=4, pp=1, dp=4, ep=16)
    assert dep.parallelism.num_gpus == 16
    assert row["batch_size"] == 8 and dep.max_batch_size == 32
    assert dep.chunked_prefill and dep.token_budget == TOKEN_BUDGET


def test_trtllm_prompt_rides_whole_in_one_iteration(rows) -> None:
    """TensorRT-LLM does not chunk contexts by default: the budget holds a whole prompt plus the decodes.

    (No TensorRT-LLM row of the file has isl + concurrency above 8192, so a row is lengthened here.)"""
    base = next(r for r in rows if r["backend"] == "trtllm" and r["mode"] == "agg" and r["concurrency"] == 64)
    model = load_model_catalog().get(str(base["model"]))
    gpu = find_gpu(load_catalog(), BENCHMARK_GPU)
    assert aggregated_deployment(base, model=model, gpu=gpu).token_budget == TOKEN_BUDGET
    long_row = dict(base, isl=TOKEN_BUDGET)
    dep = aggregated_deployment(long_row, model=model, gpu=gpu)
    assert dep.chunked_prefill and dep.token_budget == TOKEN_BUDGET + 64
    vllm_row = dict(long_row, backend="vllm")
    assert aggregated_deployment(vllm_row, model=model, gpu=gpu).token_budget == TOKEN_BUDGET


def test_disaggregated_row_builds_both_pools(rows) -> None:
    """DeepSeek-V3 on TensorRT-LLM: 1 prefill worker (tp1·dp16, ep16), 3 decode workers (tp16, ep16)."""
    row = _row(rows, "dsr1_h100_trtllm_fp8_disagg_1024x1024_c30_cfg494")
    model = load_model_catalog().get(str(row["model"]))
    dep = disaggregated_deployment(row, model=model, gpu=find_gpu(load_catalog(), BENCHMARK_GPU))
    assert isinstance(dep, DisaggregatedDeployment)
    assert dep.prefill.workers == 1 and dep.prefill.parallelism == Parallelism(tp=1, pp=1, dp=16, ep=16)
    assert dep.decode.workers == 3 and dep.decode.parallelism == Parallelism(tp=16, pp=1, dp=1, ep=16)
    assert dep.decode.max_batch_size == 10  # decode_batch_size; = 30 clients / 3 workers


def test_answered_aggregated_rows_use_the_benchmark_gpu(results) -> None:
    for r in results:
        if r.answered and r.mode == "agg":
            assert isinstance(r.problem.deployment, AggregatedDeployment)
            assert r.problem.deployment.gpu.id == BENCHMARK_GPU


# --------------------------------------------------------------------------------------------------
# the targets on dense aggregated rows


def test_dense_aggregated_tpot_median_within_target(results) -> None:
    dense = dense_aggregated(results)
    summary = summarize(np.array([r.tpot_error_fraction for r in dense]))
    assert summary.num_rows > 500
    assert summary.median_fraction <= TPOT_TARGET.median_fraction, summary


def test_dense_aggregated_ttft_median_within_target(results) -> None:
    dense = dense_aggregated(results)
    summary = summarize(np.array([r.ttft_error_fraction for r in dense]))
    assert summary.num_rows > 500
    assert summary.median_fraction <= TTFT_TARGET.median_fraction, summary
