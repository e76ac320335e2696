"""Held-out H100 SXM kernel timings against the kernel cost functions, one test per table and statistic.

Source: ``shared/data/kernels/h100_sxm`` — TensorRT-LLM 1.3.0rc20 and vLLM 0.24.0 GEMM, prefill (context)
and decode (generation) attention timings, each the mean of CUDA-graph replays. Rows: those with
``holdout_mask`` set (``scripts/fit_kernels.py`` fits on the others), at most ``MAX_ROWS`` per table
evenly spaced through the file, predicted by ``planner.validation.predict.predict_kernel_s`` with the
table's engine profile — the same sample and predictors as ``scripts/accuracy_report.py``, so the figures
below are the report's.

Bounds on the absolute relative error (APE):

- median ≤ 10 %: the target for GEMM and attention tables (``KERNEL_TARGET`` of the accuracy report).
  Replayed CUDA graphs time a kernel to a few percent, so the bound is the model's, not the data's.
- p90 ≤ 30 %: were the errors normal with their median APE at the 10 % target, the p90 APE would be
  1.645 / 0.674 × 10 % = 24 %; 30 % (also the p90 target of published prefill and decode steps) allows that
  plus some tail, while still failing a table where one shape in ten is off by a third.

Tables that miss are strict xfails carrying the figure measured when they were listed and the mechanism
(``docs/accuracy_notes.md`` and the report's slices); when the model improves they XPASS and the entry must
go. ``MISSES`` lists every scored table, passing or not, so a new GEMM or attention table fails
``test_every_gemm_and_attention_table_is_scored`` until it is added.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.units import SECONDS_PER_MS
from planner.validation import (
    ErrorSummary,
    holdout_mask,
    kernel_tables,
    load_kernel_table,
    relative_error,
    summarize,
)
from planner.validation.datasets import TableKey, select_rows
from planner.validation.predict import predict_kernel_s

MAX_ROWS = 3000
MEDIAN_BOUND = 0.10
P90_BOUND = 0.30
TARGET_KINDS = ("gemm", "context_attention", "generation_attention")

#: table -> (median APE, p90 APE) measured when listed (None: within its bound), and why it misses
MISSES: dict[TableKey, tuple[float | None, float | None, str]] = {
    ("trtllm", "gemm", "bf16"): (
        None, 0.312, "tiny GEMMs (n·k < 1e5) replayed from L2 and the largest (> 1e12 FLOP), 10-20 % slower "
        "under sustained load (clock), are outside the tile/wave model"),
    ("vllm", "gemm", "bf16"): (
        0.101, 0.315, "as TensorRT-LLM's, plus 69 rows above 900 TFLOP/s (97 % of the dense peak) that no "
        "fitted fraction reaches"),
    ("trtllm", "gemm", "fp8"): (
        0.292, 0.488, "the per-tensor path never runs below 12 µs (quantization and scale handling around a "
        "2.5 µs GEMM); the model adds one quantization kernel (signed -28 %)"),
    ("trtllm", "gemm", "fp8-block"): (
        0.120, 0.393, "block-scaled fp8 is costed as per-tensor fp8 (not in the fit); m <= 1024 misses by "
        "13-18 %"),
    ("vllm", "gemm", "fp8"): (
        0.183, 0.517, "vLLM's fp8 kernels are not in the fit (TensorRT-LLM's are); m > 1024 runs 25 % "
        "slower than the model"),
    ("vllm", "gemm", "fp8-block"): (
        0.776, 0.930, "the timings never go below 55-151 µs whatever the shape: they include activation "
        "quantization and host work, not only the GEMM"),
    ("trtllm", "context_attention", "bf16"): (
        0.203, 0.516, "window-128 rows run ~0.6x the block-skipping model's speed and head-dim-64 kernels "
        "are slower than the softmax term explains"),
    ("trtllm", "context_attention", "fp8"): (
        0.356, 0.667, "no fp8 attention efficiency is fitted: the bf16 fraction is applied to the "
        "twice-as-high fp8 peak (signed -34 %)"),
    ("vllm", "context_attention", "bf16"): (
        0.173, 0.464, "prompts > 1024 tokens run 24 % slower than the model, FA4 rows 45 %"),
    ("trtllm", "generation_attention", "bf16"): (
        0.307, 1.007, "over-predicts (signed +25 %, fp8 KV +34 %): the per-(sequence, query head) work-unit "
        "floor and the KV stream overestimate these kernels; the tail is the kernel switch at GQA groups "
        ">= 48 (2-5x slower)"),
    ("vllm", "generation_attention", "bf16"): (
        0.135, 0.334, "bf16-KV rows pass (9.7 %); fp8-KV rows do not reach twice the bf16 speed (signed "
        "-14 %, not in the fit), FA4 rows miss by 47 %"),
}
TABLES = sorted(MISSES)


def _param(key: TableKey, statistic: str):  # noqa: ANN202
    median, p90, why = MISSES[key]
    measured = median if statistic == "median" else p90
    marks = () if measured is None else pytest.mark.xfail(strict=True, reason=f"{measured:.1%} — {why}")
    return pytest.param(key, id="-".join(key), marks=marks)


@pytest.fixture(scope="module")
def scores(shared_dir: Path) -> dict[TableKey, ErrorSummary]:
    """Summary of the held-out sample of every table in ``TABLES`` (each file read once)."""
    gpu = load_catalog()["h100-sxm"]
    paths = kernel_tables(shared_dir)
    loaded: dict[Path, dict[str, np.ndarray]] = {}
    out = {}
    for key in TABLES:
        if key not in paths:
            continue
        table = select_rows(loaded.setdefault(paths[key], load_kernel_table(paths[key])), key)
        held_out = np.flatnonzero(holdout_mask(table))
        if held_out.size > MAX_ROWS:  # evenly spaced through the shape-sorted file, as the report does
            held_out = held_out[np.linspace(0, held_out.size - 1, MAX_ROWS).astype(int)]
        sample = {name: column[held_out] for name, column in table.items()}
        predicted_s = predict_kernel_s(gpu, key, sample, find_engine(key[0]))
        out[key] = summarize(relative_error(predicted_s, sample["latency_ms"] * SECONDS_PER_MS))
    return out


def test_every_gemm_and_attention_table_is_scored(shared_dir: Path) -> None:
    present = {key for key in kernel_tables(shared_dir) if key[1] in TARGET_KINDS}
    assert present == set(TABLES)


@pytest.mark.parametrize("key", [_param(key, "median") for key in TABLES])
def test_held_out_median_error(key: TableKey, scores: dict[TableKey, ErrorSummary]) -> None:
    summary = scores[key]
    assert summary.num_rows >= 1000  # every table holds > 2000 held-out rows
    assert summary.median_fraction <= MEDIAN_BOUND, (
        f"{key}: median APE {summary.median_fraction:.1%} over {summary.num_rows} held-out rows "
        f"(signed {summary.median_signed_fraction:+.1%})"
    )


@pytest.mark.parametrize("key", [_param(key, "p90") for key in TABLES])
def test_held_out_p90_error(key: TableKey, scores: dict[TableKey, ErrorSummary]) -> None:
    summary = scores[key]
    assert summary.p90_fraction <= P90_BOUND, (
        f"{key}: p90 APE {summary.p90_fraction:.1%} over {summary.num_rows} held-out rows"
    )
