"""Validation data and accuracy metrics: how the team measures the cost model.

Used only by ``scripts/`` and ``tests/`` (never by the API). Every loader takes the shared data
directory as an argument; nothing here reads environment variables.
"""

from planner.validation.datasets import (
    StepRow,
    holdout_mask,
    kernel_table,
    kernel_tables,
    load_kernel_table,
    published_step_rows,
    serving_benchmarks,
)
from planner.validation.metrics import (
    ErrorSummary,
    Target,
    relative_error,
    step_tolerance_fraction,
    summarize,
    summarize_by,
    token_bin,
    verdict,
)

__all__ = [
    "ErrorSummary",
    "StepRow",
    "Target",
    "holdout_mask",
    "kernel_table",
    "kernel_tables",
    "load_kernel_table",
    "published_step_rows",
    "relative_error",
    "serving_benchmarks",
    "summarize",
    "summarize_by",
    "token_bin",
    "step_tolerance_fraction",
    "verdict",
]
