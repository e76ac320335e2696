"""The validation data layer: parsing of the published rows, kernel tables, the holdout split, metrics."""

from __future__ import annotations

import csv
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from planner.validation.datasets import (
    StepRow,
    holdout_mask,
    kernel_table,
    kernel_tables,
    load_kernel_table,
    published_step_rows,
    serving_benchmarks,
)
from planner.validation.metrics import Target, relative_error, summarize, summarize_by, token_bin, verdict

SHARED = Path(os.environ.get("PLANNER_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))
pytestmark = pytest.mark.skipif(not (SHARED / "data").is_dir(), reason=f"shared data not found at {SHARED}")


def _accept_all(_: str) -> str:
    return "stub-model"


@pytest.fixture(scope="module")
def rows() -> list[StepRow]:
    """Parsed with permissive stub catalogs, so parsing is tested apart from the catalogs' contents."""
    return published_step_rows(SHARED, resolve_model=_accept_all, gpu_in_catalog=lambda _: True)


@pytest.fixture(scope="module")
def raw() -> dict[str, dict[str, str]]:
    with open(SHARED / "data" / "published_measurements.csv", newline="", encoding="utf-8") as handle:
        return {record["id"]: record for record in csv.DictReader(handle)}


def by_id(rows: list[StepRow]) -> dict[str, StepRow]:
    return {row.row_id: row for row in rows}


# ---------------------------------------------------------------------------------------------- published


def test_splitwisesim_is_eight_configs_of_seven_prompts_and_seven_batches(rows: list[StepRow]) -> None:
    """perf_model.csv: BLOOM-176B TP8, Llama-2-70B TP2/4/8 on DGX-A100/H100; ISL 128..8192, batch 1..64."""
    sws = [row for row in rows if row.source == "SplitwiseSim"]
    configs = Counter((row.model_name, row.gpu_id, row.tp, row.phase) for row in sws)
    assert len({key[:3] for key in configs}) == 8
    assert set(configs.values()) == {7}
    prefill = {row.prompt_tokens for row in sws if row.phase == "prefill"}
    decode = {row.batch_size for row in sws if row.phase == "decode"}
    assert prefill == {128, 256, 512, 1024, 2048, 4096, 8192}
    assert decode == {1, 2, 4, 8, 16, 32, 64}


def test_rows_per_source_and_phase(rows: list[StepRow]) -> None:
    """Counts read off the CSV by hand: every single-pass, operator and all-reduce row, nothing else."""
    counts = Counter((row.source, row.phase) for row in rows)
    assert counts == {
        ("SplitwiseSim", "prefill"): 56,
        ("SplitwiseSim", "decode"): 56,
        ("Vidur", "operator"): 30,  # (7B TP1, 70B TP4, 70B TP8) x (A100, H100) x 5 token counts
        ("Vidur", "allreduce"): 24,  # 2 GPUs x 3 group sizes x 4 message sizes
        ("Splitwise", "prefill"): 4,
        ("Splitwise", "decode"): 4,  # Table IV TTFT/TBT, 2 traces x 2 GPUs
        ("Sarathi-Serve", "decode"): 5,
        ("Sarathi-Serve", "prefill"): 1,  # SS-001..006
        ("SARATHI", "prefill"): 3,
        ("SARATHI", "decode"): 1,  # SAR-007..009, SAR-001
        ("vLLM", "decode"): 3,  # VLLM-001, 002 (implied from e2e), 005
        ("SGLang", "decode"): 2,
        ("SGLang", "prefill"): 1,  # SGL-004, 006, 007 (implied from throughput)
    }


def test_values_are_seconds(rows: list[StepRow], raw: dict[str, dict[str, str]]) -> None:
    """Rows copied as-is convert ms -> s exactly; derived rows apply the stated arithmetic."""
    rows_by_id = by_id(rows)
    for row in rows:
        if row.source in ("SplitwiseSim", "Vidur", "Splitwise"):
            assert row.value_s == pytest.approx(float(raw[row.row_id]["value"]) * 1e-3, rel=1e-12), row.row_id
    assert rows_by_id["SWS-001"].value_s == pytest.approx(0.0797)
    assert rows_by_id["SS-001"].value_s == pytest.approx(0.1 / 5)  # strict SLO = 5 x decode iteration
    assert rows_by_id["SS-005"].value_s == pytest.approx(1.150)  # unit "ms", value 1150
    assert rows_by_id["SAR-001"].value_s == pytest.approx(4 * 12.49e-3)  # per token at batch 4
    assert rows_by_id["VLLM-001"].value_s == pytest.approx(2.07753 / 128)
    assert rows_by_id["SGL-007"].value_s == pytest.approx(128 * 8 / 18598)
    assert all(1e-6 < row.value_s < 10.0 for row in rows)


def test_vidur_components_add_up_to_the_stated_sum(rows: list[StepRow]) -> None:
    """The compiler's 'sum of 5 stated medians' agrees with the medians it lists (to its rounding)."""
    for row in rows:
        if row.phase == "operator":
            assert len(row.components_s) == 5
            assert sum(value for _, value in row.components_s) == pytest.approx(row.value_s, abs=1e-6), (
                row.row_id
            )


def test_token_fields_follow_the_workload_text(rows: list[StepRow]) -> None:
    rows_by_id = by_id(rows)
    assert (rows_by_id["SWS-013"].prompt_tokens, rows_by_id["SWS-013"].batch_size) == (4096, 1)
    # decode TBT is the mean over 128 output tokens after a 512-token prompt
    assert (rows_by_id["SWS-010"].batch_size, rows_by_id["SWS-010"].context_tokens) == (64, 576)
    assert rows_by_id["VID-005"].num_tokens == 4096
    assert (rows_by_id["VID-054"].message_bytes, rows_by_id["VID-054"].num_gpus) == (67108864, 8)
    assert rows_by_id["SS-004"].tp == 4 and rows_by_id["SS-004"].pp == 2
    assert rows_by_id["SS-005"].per_stage and not rows_by_id["SS-004"].per_stage
    assert rows_by_id["SW-001"].prompt_tokens == 1500 and rows_by_id["SW-001"].tp == 8


def test_quality_flags_come_from_the_notes(rows: list[StepRow]) -> None:
    rows_by_id = by_id(rows)
    assert "questionable" in rows_by_id["SWS-038"].flags  # TP2 batch-64 anomaly
    assert "questionable" in rows_by_id["VID-031"].flags  # A100 DGX all-reduce caveat
    assert "questionable" not in rows_by_id["VID-043"].flags
    assert "implied/derived" in rows_by_id["SS-002"].flags
    assert "approximate" in rows_by_id["SS-006"].flags
    assert rows_by_id["SWS-037"].flags == ()


def test_every_non_literal_reading_is_recorded(rows: list[StepRow]) -> None:
    rows_by_id = by_id(rows)
    for row_id in ("SWS-010", "SS-001", "SS-005", "SS-006", "SW-002", "SAR-001", "VLLM-005", "VID-031"):
        assert rows_by_id[row_id].assumption, row_id
    assert "pcie" in rows_by_id["SS-001"].gpu_id


def test_unknown_hardware_is_skipped_not_guessed(rows: list[StepRow]) -> None:
    rows_by_id = by_id(rows)
    assert rows_by_id["SS-003"].gpu_id is None and "A40" in rows_by_id["SS-003"].skip_reason
    assert all(rows_by_id[f"SAR-00{i}"].skip_reason for i in (1, 7, 8, 9))


def test_every_row_has_a_catalog_id_or_a_skip_reason() -> None:
    """Against the real catalogs: a predictable row names a model (except all-reduce) and a GPU."""
    rows = published_step_rows(SHARED)
    for row in rows:
        if row.skip_reason is None:
            assert row.gpu_id is not None, row.row_id
            assert row.model_id is not None or row.phase == "allreduce", row.row_id
    assert sum(row.predictable for row in rows) >= 150


def test_empty_catalogs_skip_every_row() -> None:
    rows = published_step_rows(SHARED, resolve_model=lambda _: None, gpu_in_catalog=lambda _: False)
    assert rows and all(row.skip_reason for row in rows)


# ---------------------------------------------------------------------------------------------- kernels


def test_kernel_tables_name_every_file() -> None:
    tables = kernel_tables(SHARED)
    files = set((SHARED / "data" / "kernels" / "h100_sxm").glob("*.csv.gz"))
    assert set(tables.values()) == files
    for key in (
        ("vllm", "gemm", "bf16"),
        ("trtllm", "context_attention", "bf16"),
        ("nccl", "all_reduce", "fp16"),
        ("trtllm", "moe", "fp8-block"),
        ("sglang", "custom_allreduce", "bf16"),
    ):
        assert key in tables


def test_load_kernel_table_types_columns() -> None:
    table = load_kernel_table(kernel_tables(SHARED)[("vllm", "gemm", "bf16")])
    assert table["m"].dtype == np.float64 and table["latency_ms"].dtype == np.float64
    assert table["kernel_source"].dtype.kind == "U"
    assert len({len(column) for column in table.values()}) == 1


def test_kernel_table_keeps_only_its_key() -> None:
    table = kernel_table(SHARED, ("nccl", "all_reduce", "fp16"))
    assert set(table["collective"]) == {"all_reduce"} and set(table["nccl_dtype"]) == {"half"}
    fp8 = kernel_table(SHARED, ("trtllm", "context_attention", "fp8"))
    assert set(fp8["attn_dtype"]) == {"fp8"}


@pytest.mark.parametrize(
    "key",
    [("vllm", "gemm", "bf16"), ("trtllm", "generation_attention", "bf16"), ("nccl", "all_reduce", "fp16")],
)
def test_holdout_is_deterministic_order_free_and_near_half(key: tuple[str, str, str]) -> None:
    table = kernel_table(SHARED, key)
    mask = holdout_mask(table)
    assert 0.45 < mask.mean() < 0.55
    np.testing.assert_array_equal(mask, holdout_mask(table))
    order = np.random.default_rng(0).permutation(mask.size)
    shuffled = {name: column[order] for name, column in table.items()}
    np.testing.assert_array_equal(holdout_mask(shuffled), mask[order])


def test_holdout_ignores_the_measurement_and_the_kernel_name() -> None:
    table = {name: column[:200] for name, column in kernel_table(SHARED, ("vllm", "gemm", "bf16")).items()}
    changed = dict(table, latency_ms=table["latency_ms"] * 2, kernel_source=np.full(200, "other"))
    np.testing.assert_array_equal(holdout_mask(changed), holdout_mask(table))
    reshaped = dict(table, n=table["n"] + 1)
    assert not np.array_equal(holdout_mask(reshaped), holdout_mask(table))


# ---------------------------------------------------------------------------------------------- serving


def test_serving_benchmarks_are_typed() -> None:
    benchmarks = serving_benchmarks(SHARED)
    assert len(benchmarks) == 917  # as the shared README states
    first = benchmarks[0]
    assert isinstance(first["isl"], int) and isinstance(first["backend"], str)
    for row in benchmarks:
        if row["measured_ttft_ms"] is not None:
            assert row["measured_ttft_s"] == pytest.approx(row["measured_ttft_ms"] * 1e-3)


# ---------------------------------------------------------------------------------------------- metrics


def test_summary_statistics_by_hand() -> None:
    errors = relative_error(np.array([1.1, 0.8, 1.3]), np.ones(3))
    np.testing.assert_allclose(errors, [0.1, -0.2, 0.3])
    summary = summarize(np.append(errors, np.nan))
    assert summary.num_rows == 3
    assert summary.median_fraction == pytest.approx(0.2)
    assert summary.p90_fraction == pytest.approx(0.2 + 0.8 * 0.1)  # linear interpolation at rank 1.8
    assert summary.max_fraction == pytest.approx(0.3)
    assert summary.median_signed_fraction == pytest.approx(0.1)


def test_slicing_and_verdicts() -> None:
    groups = summarize_by(np.array([0.05, 0.5, -0.05]), ["a", "b", "a"])
    assert groups["a"].num_rows == 2 and groups["b"].median_fraction == pytest.approx(0.5)
    target = Target(median_fraction=0.15, p90_fraction=0.30)
    assert verdict(groups["a"], target) == "PASS" and verdict(groups["b"], target) == "MISS"
    assert verdict(groups["a"], None) == "n/a"
    assert list(token_bin(np.array([1, 64, 65, 1024, 1025]))) == [
        "<=64",
        "<=64",
        "65-1024",
        "65-1024",
        ">1024",
    ]
