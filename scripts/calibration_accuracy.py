"""Does calibrating on a few benchmark rows cut the error on the rest of their slice?

Usage::

    PYTHONPATH=. .venv/bin/python scripts/calibration_accuracy.py [--shared DIR] [--docs DIR] [--fit-rows 5]

For each slice of ``serving_benchmarks_h100.csv`` (backend × model × aggregated × TP × precision, dense,
with enough rows), ``planner.diagnose.calibrate`` fits a profile to ``--fit-rows`` rows (the same bounded
least squares ``POST /v1/calibrate`` runs, on the rows' mean TTFT and TPOT), chosen deterministically to
spread over the slice's concurrencies and prompt lengths; the profile is then applied to every other row
of the slice and the errors before and after are compared (median and p90 |error|, TTFT and TPOT).
Writes ``docs/accuracy_calibration.md``; ``scripts/accuracy_report.py`` copies it into ``docs/accuracy.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.diagnose.calibrate import BenchmarkPoint, calibrate  # noqa: E402
from planner.diagnose.expected import calibrated_problem  # noqa: E402
from planner.diagnose.measurements import Measurements  # noqa: E402
from planner.engines import load_engine_profiles  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.hardware import find_gpu, load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402
from planner.serving.evaluate import evaluate  # noqa: E402
from planner.validation.datasets import serving_benchmarks  # noqa: E402
from planner.validation.serving import BENCHMARK_GPU, RowRefused, benchmark_problem  # noqa: E402

COMMAND = "PYTHONPATH=. .venv/bin/python scripts/calibration_accuracy.py"
#: slices need this many rows beyond the fitted ones to score
MIN_HELD_OUT = 8


def default_shared_dir() -> Path:
    return ROOT.parent / "shared"


def _slice_key(row: dict) -> tuple[str, str, str, str]:
    return (str(row["backend"]), str(row["model"]), f"tp{row.get('tp_size') or 1}", str(row.get("precision") or "-"))


def _pick(rows: list[dict], k: int) -> list[int]:
    """``k`` row indices spread over the slice: sorted by (prompt length, concurrency), evenly spaced."""
    order = sorted(range(len(rows)), key=lambda i: (int(rows[i]["isl"]), int(rows[i]["concurrency"]),
                                                      int(rows[i]["osl"])))
    pos = np.linspace(0, len(order) - 1, k).round().astype(int)
    return sorted({order[p] for p in pos})


def _errors(problems: list, measured: list[tuple[float, float]], profile) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    ttft, tpot = [], []
    for pr, (t_meas, p_meas) in zip(problems, measured, strict=True):
        ev = evaluate(calibrated_problem(pr, profile))
        ttft.append(abs(ev.ttft_s.mean / t_meas - 1.0))
        tpot.append(abs(ev.tpot_s.mean / p_meas - 1.0))
    return np.array(ttft), np.array(tpot)


def _pct(x: np.ndarray, q: float) -> str:
    return f"{100 * float(np.percentile(x, q)):.1f} %"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=default_shared_dir())
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    ap.add_argument("--fit-rows", type=int, default=5)
    args = ap.parse_args(argv)
    models = load_model_catalog()
    gpu = find_gpu(load_catalog(), BENCHMARK_GPU)
    engines = load_engine_profiles()
    slices: dict[tuple, list[tuple[dict, object]]] = defaultdict(list)
    for row in serving_benchmarks(args.shared):
        if row["mode"] == "disagg" or not row.get("measured_ttft_s") or not row.get("measured_tpot_s"):
            continue
        try:
            model = models.get(str(row["model"]))
            if model.is_moe:
                continue
            problem = benchmark_problem(row, model=model, gpu=gpu, engines=engines)
            evaluate(problem)
        except (RowRefused, PlannerError):
            continue
        slices[_slice_key(row)].append((row, problem))
    lines = []
    totals = {"before_ttft": [], "after_ttft": [], "before_tpot": [], "after_tpot": []}
    start = time.perf_counter()
    for key, members in sorted(slices.items()):
        if len(members) < args.fit_rows + MIN_HELD_OUT:
            continue
        rows = [r for r, _ in members]
        fit_idx = set(_pick(rows, args.fit_rows))
        fit = [members[i] for i in sorted(fit_idx)]
        rest = [members[i] for i in range(len(members)) if i not in fit_idx]
        points = tuple(BenchmarkPoint(input_tokens=float(r["isl"]), output_tokens=float(r["osl"]),
                                      concurrency=int(r["concurrency"]), measured_ttft_s=float(r["measured_ttft_s"]),
                                      measured_tpot_s=float(r["measured_tpot_s"]), label=str(r["id"]), problem=pr)
                      for r, pr in fit)
        result = calibrate(fit[0][1], Measurements(), points, fitted_on=f"{', '.join(r['id'] for r, _ in fit)}")
        measured = [(float(r["measured_ttft_s"]), float(r["measured_tpot_s"])) for r, _ in rest]
        problems = [pr for _, pr in rest]
        b_ttft, b_tpot = _errors(problems, measured, None)
        a_ttft, a_tpot = _errors(problems, measured, result.profile)
        for name, v in (("before_ttft", b_ttft), ("after_ttft", a_ttft), ("before_tpot", b_tpot), ("after_tpot", a_tpot)):
            totals[name].append(v)
        prof = result.profile
        pinned = [p.name for p in result.parameters if p.pinned_down]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(rest)} | {_pct(b_ttft, 50)} → {_pct(a_ttft, 50)} | "
            f"{_pct(b_ttft, 90)} → {_pct(a_ttft, 90)} | {_pct(b_tpot, 50)} → {_pct(a_tpot, 50)} | "
            f"{_pct(b_tpot, 90)} → {_pct(a_tpot, 90)} | gemm ×{prof.gemm_efficiency_scale:.2f}, "
            f"mem ×{prof.memory_efficiency_scale:.2f}, step "
            f"{'–' if prof.step_overhead_s is None else f'{1e3 * prof.step_overhead_s:.1f} ms'}, front-end "
            f"{'–' if prof.request_overhead_s is None else f'{1e3 * prof.request_overhead_s:.0f} ms'} | "
            f"{', '.join(pinned) or 'none'} |")
        print(key, f"{time.perf_counter() - start:.1f} s", flush=True)
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in totals.items()}
    out = [
        "## Calibration on 5 rows of a slice",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand). For every dense aggregated slice of "
        "`serving_benchmarks_h100.csv` with at least "
        f"{args.fit_rows + MIN_HELD_OUT} answered rows, `planner.diagnose.calibrate` (what `POST /v1/calibrate` "
        f"runs) fits a profile to {args.fit_rows} rows of the slice (evenly spread over prompt length and "
        "concurrency) on their mean TTFT and TPOT; the table scores the *other* rows of the slice with the "
        "catalog's parameters (before) and with the profile (after). |error| is |predicted / measured − 1| per row.",
        "",
        "| backend | model | TP | precision | held-out rows | TTFT median | TTFT p90 | TPOT median | TPOT p90 | "
        "profile | pinned down |",
        "|---|---|---|---|---:|---|---|---|---|---|---|",
        *lines,
        "",
    ]
    if cat["before_ttft"].size:
        out += [f"All held-out rows ({cat['before_ttft'].size}): TTFT median {_pct(cat['before_ttft'], 50)} → "
                f"{_pct(cat['after_ttft'], 50)}, p90 {_pct(cat['before_ttft'], 90)} → {_pct(cat['after_ttft'], 90)}; "
                f"TPOT median {_pct(cat['before_tpot'], 50)} → {_pct(cat['after_tpot'], 50)}, p90 "
                f"{_pct(cat['before_tpot'], 90)} → {_pct(cat['after_tpot'], 90)}.", ""]
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "accuracy_calibration.md").write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
