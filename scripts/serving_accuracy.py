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

from planner.costs import CostContext, prefill_latency_s  # noqa: E402
from planner.engines import load_engine_profiles  # noqa: E402
from planner.hardware import find_gpu, load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402
from planner.serving.types import AggregatedDeployment  # noqa: E402
from planner.units import SECONDS_PER_MS  # noqa: E402
from planner.validation.datasets import serving_benchmarks  # noqa: E402
from planner.validation.metrics import summarize  # noqa: E402
from planner.validation.serving import (  # noqa: E402
    BENCHMARK_GPU,
    CHUNKED_PREFILL,
    DIMENSIONS,
    TPOT_TARGET,
    TTFT_TARGET,
    BenchmarkResult,
    SliceScore,
    concurrency_bucket,
    dense_aggregated,
    evaluate_row,
    evaluate_rows,
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
    lines += ["", "| row | backend | mode | model | isl×osl | c | reason |",
              "|---|---|---|---|---|---:|---|"]
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


def _by_concurrency(rows: Sequence[BenchmarkResult], metric: str = "ttft") -> str:
    return _signed_by(_ordered(rows, "concurrency"), lambda r: f"c {concurrency_bucket(r.concurrency)}",
                      metric)


def _by_isl(rows: Sequence[BenchmarkResult], metric: str = "ttft") -> str:
    return _signed_by(_ordered(rows, "isl"), lambda r: f"isl {isl_bucket(r.isl)}", metric)


def _by_field(rows: Sequence[BenchmarkResult], field: str, metric: str = "ttft") -> str:
    def label(r: BenchmarkResult) -> str:
        return str(getattr(r, field))

    return _signed_by(sorted(rows, key=label), label, metric)


def single_prompt_prefill_s(result: BenchmarkResult) -> float:
    """The cost model's prefill pass of one prompt of the row's ISL alone on its (prefill) worker [s]."""
    problem = result.problem
    if problem is None or result.isl is None:
        return float("nan")
    dep = problem.deployment
    pool = dep if isinstance(dep, AggregatedDeployment) else dep.prefill
    ctx = CostContext(model=problem.model, gpu=pool.gpu, engine=problem.engine,
                      weight_dtype=problem.weight_dtype, kv_dtype=problem.kv_dtype,
                      parallelism=pool.parallelism)
    return float(prefill_latency_s(ctx, prompt_tokens=result.isl, batch_size=1))


def observations_section(results: Sequence[BenchmarkResult]) -> list[str]:
    """Facts about the errors, each figure computed from this run (no fixes)."""
    answered = [r for r in results if r.answered]
    dense = dense_aggregated(results)
    moe_agg = [r for r in answered if r.mode == "agg" and r.is_moe]
    disagg = [r for r in answered if r.mode == "disagg"]
    lines = ["## Observations", "",
             "Signed errors: (predicted − measured) / measured, medians over the rows named.", ""]
    if dense:
        lines.append(f"- **Dense aggregated TTFT by concurrency**: {_by_concurrency(dense)}.")
        lines.append(f"- **Dense aggregated TTFT by ISL**: {_by_isl(dense)}.")
        lines.append(f"- **Dense aggregated by backend**: TTFT {_by_field(dense, 'backend')}; "
                     f"TPOT {_by_field(dense, 'backend', 'tpot')}.")
        share = np.array([r.predicted_ttft_s / r.measured_ttft_s for r in dense])
        pre = np.array([r.evaluation.ttft_breakdown_s.prefill / r.measured_ttft_s  # type: ignore[union-attr]
                        for r in dense])
        lines.append(
            "- **What the predicted TTFT is made of** (dense aggregated): median predicted/measured "
            f"{np.median(share):.2f}; the predicted prefill alone is a median {100 * np.median(pre):.0f} % "
            f"of the measured TTFT; {int(np.sum(share < 0.5))} of {len(dense)} rows are predicted below half "
            "their measured TTFT.")
        lines += _shortfall_facts(dense, results)
        lines.append(f"- **Dense aggregated TPOT by concurrency**: {_by_concurrency(dense, 'tpot')}; "
                     f"by ISL: {_by_isl(dense, 'tpot')}.")
    if moe_agg:
        lines.append(f"- **MoE aggregated** by model: TTFT {_by_field(moe_agg, 'model')}; "
                     f"TPOT {_by_field(moe_agg, 'model', 'tpot')}.")
    if disagg:
        lines.append(f"- **Disaggregated** by backend: TTFT {_by_field(disagg, 'backend')}; "
                     f"TPOT {_by_field(disagg, 'backend', 'tpot')}.")
    lines += _largest_misses(answered)
    lines += _duplicate_fact(results)
    return lines


def _shortfall_facts(dense: Sequence[BenchmarkResult], results: Sequence[BenchmarkResult]) -> list[str]:
    """TTFT shortfall in ms at low concurrency and in units of c single-prompt prefills; full-length KV."""
    lines = []
    low = [r for r in dense if (r.concurrency or 0) <= 8]
    if low:
        by_backend: dict[str, list[float]] = {}
        for r in sorted(low, key=lambda r: r.backend):
            shortfall_ms = (r.measured_ttft_s - r.predicted_ttft_s) / SECONDS_PER_MS
            by_backend.setdefault(r.backend, []).append(shortfall_ms)
        overheads = {e: p.request_overhead_s / SECONDS_PER_MS for e, p in load_engine_profiles().items()}
        lines.append(
            "- **Absolute TTFT shortfall at c ≤ 8** (dense aggregated, measured − predicted, median): "
            + ", ".join(f"{b} {np.median(v):.0f} ms (n={len(v)})" for b, v in by_backend.items())
            + "; the engine profiles' front-end `request_overhead_s` is "
            + ", ".join(f"{e} {v:g} ms" for e, v in sorted(overheads.items())) + ".")
    units: dict[str, list[float]] = {}
    for r in sorted(dense, key=lambda r: r.backend):
        t_one = single_prompt_prefill_s(r)
        shortfall_s = r.measured_ttft_s - r.predicted_ttft_s
        units.setdefault(r.backend, []).append(shortfall_s / (float(r.concurrency or 1) * t_one))
    lines.append(
        "- **TTFT shortfall in units of c single-prompt prefills** (dense aggregated, (measured − "
        "predicted) / (c · t_prefill(isl)), median and interquartile range): "
        + ", ".join(f"{b} {np.median(v):.2f} ({np.percentile(v, 25):.2f}–{np.percentile(v, 75):.2f}, "
                    f"n={len(v)})" for b, v in units.items())
        + ". A value near 0.5 is what a closed loop whose c clients stay in phase (fixed lengths) would show "
        "if each wave of c prompts were prefilled one after another.")
    agg = [r for r in results if r.answered and r.mode == "agg"]
    demand = np.array([kv_demand_fraction(r) for r in agg])
    over = demand > 1.0
    if over.any():
        err = np.array([r.ttft_error_fraction for r in agg])
        worst = sorted((agg[i] for i in np.flatnonzero(over)), key=lambda r: -r.measured_ttft_s)
        examples = ", ".join(
            f"`{r.row_id}` (demand {kv_demand_fraction(r):.2f}, measured {r.measured_ttft_s:.3g} s, "
            f"predicted {r.predicted_ttft_s:.3g} s)" for r in worst[:3])
        lines.append(
            f"- **KV cache at full length**: in {int(over.sum())} aggregated rows c·(isl + osl) exceeds the "
            "replica's KV capacity (the mean occupancy c·(isl + osl/2) that `evaluate` uses may not); their "
            f"TTFT signed median is {_pct(float(np.median(err[over])), True)} % (measured median "
            f"{np.median([r.measured_ttft_s for r in worst]):.3g} s) against "
            f"{_pct(float(np.median(err[~over])), True)} % for the other aggregated rows; e.g. {examples}.")
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
    names = ", ".join(f"`{r.row_id}` ({r.model})" for r in example)
    return [f"- **Repeated measurements**: {extra} rows repeat the measured TTFT and TPOT of another row "
            f"with the same backend, mode, isl, osl and concurrency ({len(groups)} groups; e.g. {names}); "
            "slices count each copy."]


def headline(results: Sequence[BenchmarkResult]) -> list[str]:
    dense = dense_aggregated(results)
    ttft = summarize(np.array([r.ttft_error_fraction for r in dense]))
    tpot = summarize(np.array([r.tpot_error_fraction for r in dense]))
    answered = sum(r.answered for r in results)
    ttft_ok = "PASS" if ttft.median_fraction <= TTFT_TARGET.median_fraction else "MISS"
    tpot_ok = "PASS" if tpot.median_fraction <= TPOT_TARGET.median_fraction else "MISS"
    return [
        f"{answered} of {len(results)} rows answered, {len(results) - answered} refused (listed under "
        "*Refused rows*). **Dense aggregated rows** (the targets: median APE of mean TTFT ≤ "
        f"{100 * TTFT_TARGET.median_fraction:.0f} %, of mean TPOT ≤ "
        f"{100 * TPOT_TARGET.median_fraction:.0f} %): "
        f"n = {ttft.num_rows}, TTFT median APE {_pct(ttft.median_fraction)} % (signed "
        f"{_pct(ttft.median_signed_fraction, True)} %) **{ttft_ok}**, TPOT median APE "
        f"{_pct(tpot.median_fraction)} % (signed {_pct(tpot.median_signed_fraction, True)} %) **{tpot_ok}**. "
        "MoE and disaggregated rows have no target; they are reported per slice.",
    ]


MAPPING = [
    "Each row is posed as a `ServingProblem` by `planner.validation.serving.benchmark_problem` and "
    "answered by `planner.serving.evaluate.evaluate`; the predicted figures are `ttft_s.mean` and "
    "`tpot_s.mean`.",
    "",
    "- GPU `h100-sxm`; model from the catalog; engine profile = `backend`; weight dtype from "
    "`gemm_quant_mode` (else `precision`): fp8\\* → fp8, \\*fp4\\* → fp4, empty → bf16.",
    "- **KV dtype assumed** `model.default_kv_dtype(weight)` (fp8 with fp8 weights): the CSV does not "
    "record it, and vLLM's / SGLang's `kv_cache_dtype=auto` would keep bf16 unless the checkpoint carries "
    "KV scales.",
    "- Parallelism: `tp_size`, `pp_size`, `attention_dp_size` → dp, `moe_ep_size` → ep "
    "(empty or 0 → 1).",
    "- Aggregated: one replica, `max_batch_size = max(batch_size, concurrency)` (rows with `batch_size` < "
    "`concurrency` record one attention-DP rank's batch), token budget 8192. Chunked prefill for vLLM and "
    "SGLang; TensorRT-LLM's default is `enable_chunked_prefill=False`, but its in-flight batching runs a "
    "whole context inside the same iteration as the generations, so it is posed as a mixed iteration whose "
    "budget holds the whole prompt plus the decodes (`max(8192, isl + concurrency)`), not as the planner's "
    "unchunked mode (prefill-only iterations the streams wait through); the comparison of the two on the "
    "TensorRT-LLM rows is below.",
    "- Disaggregated: prefill and decode pools from the `prefill_*` / `decode_*` columns (workers, tp, pp, "
    "dp, ep); decode batch cap `max(decode_batch_size·dp, ⌈c / decode workers⌉)`; KV link `auto`.",
    "- Workload: fixed `isl` and `osl`, closed loop of `concurrency` clients.",
    "- Refused: rows without concurrency, disaggregated rows without worker counts, and whatever the "
    "planner refuses (its error and message).",
]


CSV_FIELDS = (
    "id backend mode model moe isl osl concurrency weight_dtype kv_dtype layout measured_ttft_ms "
    "predicted_ttft_ms ttft_error_fraction measured_tpot_ms predicted_tpot_ms tpot_error_fraction "
    "ttft_queue_ms ttft_prefill_ms ttft_kv_transfer_ms ttft_overheads_ms mean_decode_batch "
    "kv_demand_fraction limiting_resource feasible warnings refusal"
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
            "layout": _layout(r), "measured_ttft_ms": ms(r.measured_ttft_s),
            "measured_tpot_ms": ms(r.measured_tpot_s),
            "predicted_ttft_ms": ms(r.predicted_ttft_s), "predicted_tpot_ms": ms(r.predicted_tpot_s),
            "ttft_error_fraction": f"{r.ttft_error_fraction:+.4f}" if r.answered else "",
            "tpot_error_fraction": f"{r.tpot_error_fraction:+.4f}" if r.answered else "",
            "refusal": r.refusal or "",
        }
        if ev is not None:
            b = ev.ttft_breakdown_s
            fields |= {
                "ttft_queue_ms": ms(b.queue), "ttft_prefill_ms": ms(b.prefill),
                "ttft_kv_transfer_ms": ms(b.kv_transfer),
                "ttft_overheads_ms": ms(b.overheads), "mean_decode_batch": f"{ev.mean_decode_batch:.4g}",
                "kv_demand_fraction": f"{kv_demand_fraction(r):.3g}",
                "limiting_resource": ev.limiting_resource, "feasible": int(ev.feasible),
                "warnings": " | ".join(ev.warnings),
            }
        writer.writerow(fields)
    path.write_text(buffer.getvalue())


def trtllm_modes_section(rows: Sequence[dict[str, object]], results: Sequence[BenchmarkResult]) -> list[str]:
    """TensorRT-LLM aggregated rows posed as mixed iterations (the choice) and in the unchunked mode."""
    selected = [row for row in rows if row["backend"] == "trtllm" and row["mode"] == "agg"]
    unchunked = evaluate_rows(selected, chunked_prefill={**CHUNKED_PREFILL, "trtllm": False})
    chosen = {r.row_id: r for r in results}
    lines = ["", "TensorRT-LLM aggregated rows, signed median error (n) of the two readings:", "",
             "| reading | density | n | TTFT signed % | TPOT signed % | TPOT median APE % |",
             "|---|---|---:|---:|---:|---:|"]
    for label, group in (("mixed iteration (used)", [chosen[str(row["id"])] for row in selected]),
                         ("unchunked mode", unchunked)):
        for density in ("dense", "MoE"):
            members = [r for r in group if r.answered and r.density == density]
            ttft = summarize(np.array([r.ttft_error_fraction for r in members]))
            tpot = summarize(np.array([r.tpot_error_fraction for r in members]))
            lines.append(f"| {label} | {density} | {ttft.num_rows} | "
                         f"{_pct(ttft.median_signed_fraction, True)} | "
                         f"{_pct(tpot.median_signed_fraction, True)} | {_pct(tpot.median_fraction)} |")
    return lines


def markdown(rows: Sequence[dict[str, object]], results: Sequence[BenchmarkResult]) -> str:
    groups = Counter(group_of(r) for r in results)
    lines = [
        "# Serving benchmarks: evaluate against measured mean TTFT and TPOT",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand). Data: `shared/data/serving_benchmarks_h100.csv` "
        f"({len(results)} rows: " + ", ".join(f"{n} {g}" for g, n in sorted(groups.items())) + "). Per-row "
        "predictions, TTFT breakdown and refusals: `docs/accuracy_serving_rows.csv`. APE = |predicted − "
        "measured| / measured; *signed* > 0: the model over-predicts. Targets (PASS/MISS) apply to slices of "
        "dense aggregated rows only.",
        "",
        *headline(results),
        "",
        "## Mapping",
        "",
        *MAPPING,
        *trtllm_modes_section(rows, results),
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
    (args.docs / "accuracy_serving.md").write_text(markdown(rows, results))
    write_rows_csv(results, args.docs / "accuracy_serving_rows.csv")
    t = np.array(times)
    answered = np.array([r.answered for r in results])
    print(f"wrote {args.docs / 'accuracy_serving.md'} and accuracy_serving_rows.csv in "
          f"{time.perf_counter() - start:.1f} s; {len(rows)} rows, {int(answered.sum())} answered; per row "
          f"(mapping + evaluate) mean {1e3 * t.mean():.1f} ms, median {1e3 * np.median(t):.1f} ms, max "
          f"{1e3 * t.max():.0f} ms, total {t.sum():.1f} s")


if __name__ == "__main__":
    main()
