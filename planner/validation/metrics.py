"""Error metrics of the accuracy report: relative error, its median and 90th percentile, slicing.

Errors are fractions (0.1 = 10 %); the report prints them as percent.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Verdict = Literal["PASS", "MISS", "n/a"]


@dataclass(frozen=True, kw_only=True)
class ErrorSummary:
    """Absolute relative errors of one group of rows."""

    num_rows: int
    median_fraction: float
    p90_fraction: float
    max_fraction: float
    #: median of (predicted - measured) / measured: > 0 means the model over-predicts
    median_signed_fraction: float


@dataclass(frozen=True, kw_only=True)
class Target:
    """Accuracy target of a group: median and (optionally) 90th-percentile absolute relative error."""

    median_fraction: float
    p90_fraction: float | None = None


def relative_error(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Signed relative error ``(predicted - measured) / measured`` [fraction].

    Parameters
    ----------
    predicted, measured : array_like
        Same units; broadcast against each other. ``measured`` must be positive.

    Returns
    -------
    numpy.ndarray
        NaN where either input is NaN.
    """
    predicted = np.asarray(predicted, dtype=float)
    measured = np.asarray(measured, dtype=float)
    return (predicted - measured) / measured


def summarize(signed_errors: np.ndarray) -> ErrorSummary:
    """Median, 90th percentile (linear interpolation) and max of ``|error|``, ignoring NaN."""
    errors = np.asarray(signed_errors, dtype=float)
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        nan = float("nan")
        return ErrorSummary(
            num_rows=0, median_fraction=nan, p90_fraction=nan, max_fraction=nan, median_signed_fraction=nan
        )
    absolute = np.abs(errors)
    return ErrorSummary(
        num_rows=int(errors.size),
        median_fraction=float(np.median(absolute)),
        p90_fraction=float(np.percentile(absolute, 90.0)),
        max_fraction=float(absolute.max()),
        median_signed_fraction=float(np.median(errors)),
    )


def summarize_by(signed_errors: np.ndarray, keys: Sequence[Hashable]) -> dict[Hashable, ErrorSummary]:
    """One :func:`summarize` per distinct key, keys in sorted order of their string form.

    Parameters
    ----------
    signed_errors : array_like
        One error per row.
    keys : sequence
        One hashable slice key per row (e.g. a tuple ``(source, phase, gpu, tp)``).
    """
    errors = np.asarray(signed_errors, dtype=float)
    if len(keys) != errors.size:
        raise ValueError(f"{len(keys)} keys for {errors.size} errors")
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return {key: summarize(errors[groups[key]]) for key in sorted(groups, key=str)}


def token_bin(num_tokens: np.ndarray, edges: Sequence[int] = (64, 1024)) -> np.ndarray:
    """Label each token count with its bin: ``"<=64"``, ``"65-1024"``, ``">1024"`` for the default edges."""
    tokens = np.asarray(num_tokens, dtype=float)
    labels = [f"<={edges[0]}"]
    labels += [f"{lo + 1}-{hi}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    labels.append(f">{edges[-1]}")
    index = np.searchsorted(np.asarray(edges, dtype=float), tokens, side="left")
    return np.asarray(labels, dtype=object)[index].astype(str)


def verdict(summary: ErrorSummary, target: Target | None) -> Verdict:
    """``PASS`` when the summary meets every bound of the target, ``MISS`` otherwise, ``n/a`` without one."""
    if target is None or summary.num_rows == 0:
        return "n/a"
    if summary.median_fraction > target.median_fraction:
        return "MISS"
    if target.p90_fraction is not None and summary.p90_fraction > target.p90_fraction:
        return "MISS"
    return "PASS"


#: per-row tolerance of a published row measured exactly (medians of repeated runs, exact table values):
#: the p90 target of the prefill/decode slices, so a row outside it is a tail miss of the model
BASE_TOLERANCE_FRACTION = 0.30
#: widening for rows whose measured value is itself imprecise (added to the base)
FLAG_WIDENING_FRACTION = {
    # "~1150 ms", "about ~200 ms", trace medians: two significant figures or a distribution's median
    "approximate": 0.15,
    # SLO round numbers (0.1 / 0.2 / 1 s = 5 x the step): one significant figure, ±25 %
    "implied/derived": 0.25,
    # quoted by a summary, not read in the paper
    "secondary": 0.20,
    # the compiler or the paper doubts the value itself (anomalies, caveats)
    "questionable": 0.50,
}


def step_tolerance_fraction(flags: Sequence[str], *, lossy_derivation: bool = True) -> float:
    """Allowed ``|predicted / measured - 1|`` of one published row, from its quality flags.

    Parameters
    ----------
    flags : sequence of str
        ``StepRow.flags``.
    lossy_derivation : bool
        False where "implied/derived" means an exact sum of stated values (Vidur's operator rows), which
        adds no uncertainty.
    """
    widening = sum(
        FLAG_WIDENING_FRACTION.get(flag, 0.0)
        for flag in flags
        if lossy_derivation or flag != "implied/derived"
    )
    return BASE_TOLERANCE_FRACTION + widening
