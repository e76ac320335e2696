"""Score ``evaluate`` against the measured H100 serving benchmarks (mean TTFT and mean TPOT per row).

Usage::

    PYTHONPATH=. .venv/bin/python scripts/serving_accuracy.py [--shared DIR] [--docs DIR]

Writes ``docs/accuracy_serving.md`` (the mapping's assumptions, per-slice tables with median / p90 / signed
APE and PASS/MISS against the targets, the refused rows with their reasons, observations) and
``docs/accuracy_serving_rows.csv`` (one line per row: measured, predicted, error, TTFT breakdown, or the
refusal). ``scripts/accuracy_report.py`` copies the markdown to the end of ``docs/accuracy.md``.
The row -> problem mapping and the scoring live in ``planner.validation.serving``; runs single-process
and prints the time per evaluation.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.engines import load_engine_profiles  # noqa: E402
from planner.hardware import find_gpu, load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402
from planner.serving.types import AggregatedDeployment  # noqa: E402
from planner.units import SECONDS_PER_MS  # noqa: E402
from planner.validation.datasets import serving_benchmarks  # noqa: E402
from planner.validation.metrics import summarize  # noqa: E402
from planner.validation.serving import (  # noqa: E402
    BENCHMARK_GPU,
    DIMENSIONS,
    TPOT_TARGET,
    TTFT_TARGET,
    BenchmarkResult,
    SliceScore,
    concurrency_bucket,
    dense_aggregated,
    evaluate_row,
    group_of,
    isl_bucket,
    kv_demand_fraction,
    score,
)

DOCS = ROOT / "docs"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/serving_accuracy.py"


def default_shared_dir() -> Path:
    env = os.environ.get("PLANNER_SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


def run(rows: Sequence[dict[str, object]]) -> tuple[list[BenchmarkResult], list[float]]:
    """Every row's result and the wall time of each (mapping + ``evaluate``) [s]."""
    models = load_model_catalog()
    gpu = find_gpu(load_catalog(), BENCHMARK_GPU)
    engines = load_engine_profiles()
    results, times = [], []
    for row in rows:
        start = time.perf_counter()
        results.append(evaluate_row(row, models=models, gpu=gpu, engines=engines))
        times.append(time.perf_counter() - start)
    return results, times


# --------------------------------------------------------------------------------------------------
# markdown


def _pct(value: float, signed: bool = False) -> str:
    if not np.isfinite(value):
        return "—"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


_HEAD = (
    "| slice | n | refused | TTFT median APE % | TTFT p90 % | TTFT signed % | TPOT median APE % | TPOT p90 % "
    "| TPOT signed % | TTFT ≤ 20 % | TPOT ≤ 10 % |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
)


def _line(s: SliceScore) -> str:
    return (
        f"| {s.label} | {s.ttft.num_rows} | {s.num_refused} | {_pct(s.ttft.median_fraction)} | "
        f"{_pct(s.ttft.p90_fraction)} | {_pct(s.ttft.median_signed_fraction, True)} | "
        f"{_pct(s.tpot.median_fraction)} | {_pct(s.tpot.p90_fraction)} | "
        f"{_pct(s.tpot.median_signed_fraction, True)} | {s.ttft_verdict} | {s.tpot_verdict} |"
    )


def tables_section(results: Sequence[BenchmarkResult]) -> list[str]:
    scores = score(results)
    lines: list[str] = []
    for dimension in DIMENSIONS:
        lines += ["", f"### By {dimension}", "", _HEAD]
        lines += [_line(s) for s in scores if s.dimension == dimension]
    return lines


def refused_section(results: Sequence[BenchmarkResult]) -> list[str]:
    refused = [r for r in results if not r.answered]
    by_reason = Counter(r.refusal for r in refused)
    lines = [
        "## Refused rows",
        "",
        f"{len(refused)} of {len(results)} rows are refused. Counts by reason:",
        "",
        "| rows | reason |",
        "|---:|---|",
    ]
    lines += [f"| {n} | {reason} |" for reason, n in by_reason.most_common()]
    lines += ["", "| row | backend | mode | model | isl×osl | c | reason |", "|---|---|---|---|---|---:|---|"]
    for r in refused:
        lines.append(f"| {r.row_id} | {r.backend} | {r.mode} | {r.model} | {r.isl}×{r.osl} | "
                     f"{r.concurrency if r.concurrency is not None else ''} | {r.refusal} |")
    return lines


def _med(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.median(arr)) if arr.size else float("nan")


def _signed_by(rows: Sequence[BenchmarkResult], key: Callable[[BenchmarkResult], str],
               metric: str = "ttft") -> str:
    """``label: signed median % (n)`` per key value, in the key's natural order."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(getattr(r, f"{metric}_error_fraction"))
    return ", ".join(f"{k} {_pct(_med(v), True)} % (n={len(v)})" for k, v in groups.items())


def _ordered(rows: Sequence[BenchmarkResult], field: str) -> list[BenchmarkResult]:
    return sorted(rows, key=lambda r: (getattr(r, field) or 0))


def observations_section(results: Sequence[BenchmarkResult]) -> list[str]:
    """Facts about the errors, each figure computed from this run (no fixes)."""
    answered = [r for r in results if r.answered]
    dense = dense_aggregated(results)
    moe_agg = [r for r in answered if r.mode == "agg" and r.is_moe]
    disagg = [r for r in answered if r.mode == "disagg"]
    lines = ["## Observations", "", "Signed errors: (predicted − measured) / measured, medians over the rows named.", ""]
    if dense:
        lines.append(
            "- **Dense aggregated TTFT by concurrency**: "
            + _signed_by(_ordered(dense, "concurrency"), lambda r: f"c {concurrency_bucket(r.concurrency)}") + ".")
        lines.append(
            "- **Dense aggregated TTFT by ISL**: " + _signed_by(_ordered(dense, "isl"), lambda r: f"isl {isl_bucket(r.isl)}")
            + ".")
        lines.append("- **Dense aggregated TTFT by backend**: "
                     + _signed_by(sorted(dense, key=lambda r: r.backend), lambda r: r.backend) + "; TPOT: "
                     + _signed_by(sorted(dense, key=lambda r: r.backend), lambda r: r.backend, "tpot") + ".")
        # where the predicted TTFT sits against the measured one: the share of the measured TTFT it explains
        share = np.array([r.predicted_ttft_s / r.measured_ttft_s for r in dense])
        pre = np.array([r.evaluation.ttft_breakdown_s.prefill / r.measured_ttft_s for r in dense  # type: ignore[union-attr]
                        ])
        lines.append(
            f"- **What the predicted TTFT is made of** (dense aggregated): median predicted/measured "
            f"{np.median(share):.2f}; the predicted prefill alone is a median {100 * np.median(pre):.0f} % of the "
            f"measured TTFT; {int(np.sum(share < 0.5))} of {len(dense)} rows are predicted below half their "
            "measured TTFT.")
        lines += _excess_fact(dense, results)
        lines.append(
            "- **Dense aggregated TPOT by concurrency**: "
            + _signed_by(_ordered(dense, "concurrency"), lambda r: f"c {concurrency_bucket(r.concurrency)}", "tpot")
            + "; by ISL: " + _signed_by(_ordered(dense, "isl"), lambda r: f"isl {isl_bucket(r.isl)}", "tpot") + ".")
    if moe_agg:
        lines.append("- **MoE aggregated** by model: TTFT "
                     + _signed_by(sorted(moe_agg, key=lambda r: r.model), lambda r: r.model) + "; TPOT "
                     + _signed_by(sorted(moe_agg, key=lambda r: r.model), lambda r: r.model, "tpot") + ".")
    if disagg:
        lines.append("- **Disaggregated** by backend: TTFT "
                     + _signed_by(sorted(disagg, key=lambda r: r.backend), lambda r: r.backend) + "; TPOT "
                     + _signed_by(sorted(disagg, key=lambda r: r.backend), lambda r: r.backend, "tpot") + ".")
    lines += _largest_misses(answered)
    lines += _duplicate_fact(results)
    return lines


def _excess_fact(dense: Sequence[BenchmarkResult], results: Sequence[BenchmarkResult]) -> list[str]:
    """Absolute TTFT shortfall at low concurrency, and the rows whose full-length KV exceeds the cache."""
    lines = []
    low = [r for r in dense if (r.concurrency or 0) <= 8]
    if low:
        by_backend: dict[str, list[float]] = {}
        for r in sorted(low, key=lambda r: r.backend):
            by_backend.setdefault(r.backend, []).append((r.measured_ttft_s - r.predicted_ttft_s) / SECONDS_PER_MS)
        overheads = {e: p.request_overhead_s / SECONDS_PER_MS for e, p in load_engine_profiles().items()}
        lines.append(
            "- **Absolute TTFT shortfall at c ≤ 8** (dense aggregated, measured − predicted, median): "
            + ", ".join(f"{b} {np.median(v):.0f} ms (n={len(v)})" for b, v in by_backend.items())
            + "; the engine profiles' front-end `request_overhead_s` is "
            + ", ".join(f"{e} {v:g} ms" for e, v in sorted(overheads.items())) + ".")
    agg = [r for r in results if r.answered and r.mode == "agg"]
    demand = np.array([kv_demand_fraction(r) for r in agg])
    over = demand > 1.0
    if over.any():
        err = np.array([r.ttft_error_fraction for r in agg])
        worst = [agg[i] for i in np.flatnonzero(over)]
        worst.sort(key=lambda r: -r.measured_ttft_s)
        lines.append(
            f"- **KV cache at full length**: in {int(over.sum())} aggregated rows c·(isl + osl) exceeds the "
            "replica's KV capacity although the mean occupancy c·(isl + osl/2) that `evaluate` uses may not; "
            f"their TTFT signed median is {_pct(float(np.median(err[over])), True)} % (measured median "
            f"{np.median([r.measured_ttft_s for r in worst]):.3g} s) against {_pct(float(np.median(err[~over])), True)} % "
            "for the other aggregated rows; e.g. "
            + ", ".join(f"`{r.row_id}` (demand {kv_demand_fraction(r):.2f}, measured {r.measured_ttft_s:.3g} s, "
                        f"predicted {r.predicted_ttft_s:.3g} s)" for r in worst[:3]) + ".")
    return lines


def _largest_misses(answered: Sequence[BenchmarkResult], k: int = 5) -> list[str]:
    lines = []
    for metric in ("ttft", "tpot"):
        worst = sorted(answered, key=lambda r: -abs(getattr(r, f"{metric}_error_fraction")))[:k]
        items = ", ".join(
            f"`{r.row_id}` ({r.backend} {r.mode} {r.isl}×{r.osl} c{r.concurrency}: measured "
            f"{getattr(r, f'measured_{metric}_s') / SECONDS_PER_MS:.4g} ms, predicted "
            f"{getattr(r, f'predicted_{metric}_s') / SECONDS_PER_MS:.4g} ms)" for r in worst)
        lines.append(f"- **Largest {metric.upper()} errors**: {items}.")
    return lines


def _duplicate_fact(results: Sequence[BenchmarkResult]) -> list[str]:
    """Rows that repeat another row's measurement (same backend, isl, osl, concurrency, TTFT and TPOT)."""
    seen: dict[tuple[object, ...], list[BenchmarkResult]] = {}
    for r in results:
        key = (r.backend, r.mode, r.isl, r.osl, r.concurrency, r.measured_ttft_s, r.measured_tpot_s)
        seen.setdefault(key, []).append(r)
    groups = [g for g in seen.values() if len(g) > 1]
    if not groups:
        return []
    extra = sum(len(g) - 1 for g in groups)
    example = groups[0]
    return [f"- **Repeated measurements**: {extra} rows repeat the measured TTFT and TPOT of another row with the "
            f"same backend, mode, isl, osl and concurrency ({len(groups)} groups; e.g. "
            + ", ".join(f"`{r.row_id}` ({r.model})" for r in example) + "); slices count each copy."]


def headline(results: Sequence[BenchmarkResult]) -> list[str]:
    dense = dense_aggregated(results)
    ttft = summarize(np.array([r.ttft_error_fraction for r in dense]))
    tpot = summarize(np.array([r.tpot_error_fraction for r in dense]))
    answered = sum(r.answered for r in results)
    return [
        f"{answered} of {len(results)} rows answered, {len(results) - answered} refused (listed under *Refused "
        "rows*). **Dense aggregated rows** (the targets: median APE of mean TTFT ≤ "
        f"{100 * TTFT_TARGET.median_fraction:.0f} %, of mean TPOT ≤ {100 * TPOT_TARGET.median_fraction:.0f} %): "
        f"n = {ttft.num_rows}, TTFT median APE {_pct(ttft.median_fraction)} % (signed "
        f"{_pct(ttft.median_signed_fraction, True)} %) **{'PASS' if ttft.median_fraction <= TTFT_TARGET.median_fraction else 'MISS'}**, "
        f"TPOT median APE {_pct(tpot.median_fraction)} % (signed {_pct(tpot.median_signed_fraction, True)} %) "
        f"**{'PASS' if tpot.median_fraction <= TPOT_TARGET.median_fraction else 'MISS'}**. MoE and disaggregated "
        "rows have no target; they are reported per slice.",
    ]


MAPPING = [
    "Each row is posed as a `ServingProblem` by `planner.validation.serving.benchmark_problem` and answered by "
    "`planner.serving.evaluate.evaluate`; the predicted figures are `ttft_s.mean` and `tpot_s.mean`.",
    "",
    "- GPU `h100-sxm`; model from the catalog; engine profile = `backend`; weight dtype from `gemm_quant_mode` "
    "(else `precision`): fp8\\* → fp8, \\*fp4\\* → fp4, empty → bf16.",
    "- **KV dtype assumed** `model.default_kv_dtype(weight)` (fp8 with fp8 weights): the CSV does not record it, "
    "and vLLM's / SGLang's `kv_cache_dtype=auto` would keep bf16 unless the checkpoint carries KV scales.",
    "- Parallelism: `tp_size`, `pp_size`, `attention_dp_size` → dp, `moe_ep_size` → ep (empty or 0 → 1).",
    "- Aggregated: one replica, `max_batch_size = max(batch_size, concurrency)` (rows with `batch_size` < "
    "`concurrency` record one attention-DP rank's batch), token budget 8192. Chunked prefill for vLLM and SGLang; "
    "TensorRT-LLM's default is `enable_chunked_prefill=False`, but its in-flight batching runs a whole context "
    "inside the same iteration as the generations, so it is posed as a mixed iteration whose budget holds the whole "
    "prompt plus the decodes (`max(8192, isl + concurrency)`), not as the planner's unchunked mode (prefill-only "
    "iterations the streams wait through). On these rows the unchunked mode gives TPOT signed medians of "
    "+3 % (dense) and +13 % (MoE) against −1 % and +1 % for the mixed iteration; TTFT is under-predicted either way.",
    "- Disaggregated: prefill and decode pools from the `prefill_*` / `decode_*` columns (workers, tp, pp, dp, ep); "
    "decode batch cap `max(decode_batch_size·dp, ⌈c / decode workers⌉)`; KV link `auto`.",
    "- Workload: fixed `isl` and `osl`, closed loop of `concurrency` clients.",
    "- Refused: rows without concurrency, disaggregated rows without worker counts, and whatever the planner "
    "refuses (its error and message).",
]


CSV_FIELDS = (
    "id backend mode model moe isl osl concurrency weight_dtype kv_dtype layout measured_ttft_ms "
    "predicted_ttft_ms ttft_error_fraction measured_tpot_ms predicted_tpot_ms tpot_error_fraction "
    "ttft_queue_ms ttft_prefill_ms ttft_kv_transfer_ms ttft_overheads_ms mean_decode_batch kv_demand_fraction limiting_resource "
    "feasible warnings refusal"
).split()


def _layout(result: BenchmarkResult) -> str:
    if result.problem is None:
        return ""
    dep = result.problem.deployment
    if isinstance(dep, AggregatedDeployment):
        p = dep.parallelism
        return (f"tp{p.tp} pp{p.pp} dp{p.dp} ep{p.ep} batch{dep.max_batch_size} budget{dep.token_budget}"
                f"{'' if dep.chunked_prefill else ' unchunked'}")
    parts = []
    for name, pool in (("P", dep.prefill), ("D", dep.decode)):
        p = pool.parallelism
        parts.append(f"{name}{pool.workers}x(tp{p.tp} pp{p.pp} dp{p.dp} ep{p.ep}) batch{pool.max_batch_size}")
    return " + ".join(parts)


def write_rows_csv(results: Sequence[BenchmarkResult], path: Path) -> None:
    def ms(value: float) -> str:
        return f"{value / SECONDS_PER_MS:.6g}" if np.isfinite(value) else ""

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in results:
        ev, pr = r.evaluation, r.problem
        fields: dict[str, object] = {
            "id": r.row_id, "backend": r.backend, "mode": r.mode, "model": r.model,
            "moe": "" if r.is_moe is None else int(r.is_moe), "isl": r.isl, "osl": r.osl,
            "concurrency": "" if r.concurrency is None else r.concurrency,
            "weight_dtype": pr.weight_dtype if pr else "", "kv_dtype": pr.kv_dtype if pr else "",
            "layout": _layout(r), "measured_ttft_ms": ms(r.measured_ttft_s), "measured_tpot_ms": ms(r.measured_tpot_s),
            "predicted_ttft_ms": ms(r.predicted_ttft_s), "predicted_tpot_ms": ms(r.predicted_tpot_s),
            "ttft_error_fraction": f"{r.ttft_error_fraction:+.4f}" if r.answered else "",
            "tpot_error_fraction": f"{r.tpot_error_fraction:+.4f}" if r.answered else "",
            "refusal": r.refusal or "",
        }
        if ev is not None:
            b = ev.ttft_breakdown_s
            fields |= {
                "ttft_queue_ms": ms(b.queue), "ttft_prefill_ms": ms(b.prefill), "ttft_kv_transfer_ms": ms(b.kv_transfer),
                "ttft_overheads_ms": ms(b.overheads), "mean_decode_batch": f"{ev.mean_decode_batch:.4g}",
                "kv_demand_fraction": f"{kv_demand_fraction(r):.3g}", "limiting_resource": ev.limiting_resource, "feasible": int(ev.feasible),
                "warnings": " | ".join(ev.warnings),
            }
        writer.writerow(fields)
    path.write_text(buffer.getvalue())


def markdown(results: Sequence[BenchmarkResult]) -> str:
    groups = Counter(group_of(r) for r in results)
    lines = [
        "# Serving benchmarks: evaluate against measured mean TTFT and TPOT",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand). Data: `shared/data/serving_benchmarks_h100.csv` "
        f"({len(results)} rows: " + ", ".join(f"{n} {g}" for g, n in sorted(groups.items())) + "). Per-row "
        "predictions, TTFT breakdown and refusals: `docs/accuracy_serving_rows.csv`. APE = |predicted − measured| "
        "/ measured; *signed* > 0: the model over-predicts. Targets (PASS/MISS) apply to slices of dense "
        "aggregated rows only.",
        "",
        *headline(results),
        "",
        "## Mapping",
        "",
        *MAPPING,
        "",
        "## Per slice",
        *tables_section(results),
        "",
        *observations_section(results),
        "",
        *refused_section(results),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared_dir())
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = serving_benchmarks(args.shared)
    results, times = run(rows)
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "accuracy_serving.md").write_text(markdown(results))
    write_rows_csv(results, args.docs / "accuracy_serving_rows.csv")
    t = np.array(times)
    answered = np.array([r.answered for r in results])
    print(f"wrote {args.docs / 'accuracy_serving.md'} and accuracy_serving_rows.csv in "
          f"{time.perf_counter() - start:.1f} s; {len(rows)} rows, {int(answered.sum())} answered; per row "
          f"(mapping + evaluate) mean {1e3 * t.mean():.1f} ms, median {1e3 * np.median(t):.1f} ms, max "
          f"{1e3 * t.max():.0f} ms, total {t.sum():.1f} s")


if __name__ == "__main__":
    main()
