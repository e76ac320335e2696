"""Measure the cost model against published step times and held-out kernel timings.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/accuracy_report.py [--shared DIR] [--max-rows 3000]

Writes ``docs/accuracy.md`` (per source, per slice: n, median and p90 absolute relative error, PASS/MISS
against the targets) and ``docs/accuracy_published_rows.csv`` (one line per published row: measured,
predicted, error). The explanations section is copied from the hand-written ``docs/accuracy_notes.md``, and
the serving sections at the end from ``docs/accuracy_serving.md`` (written by ``scripts/serving_accuracy.py``),
``docs/accuracy_crosscheck.md`` (written by ``scripts/serving_crosscheck.py``),
``docs/accuracy_decisions.md`` (written by ``scripts/plan_decisions.py``) and
``docs/accuracy_calibration.md`` (written by ``scripts/calibration_accuracy.py``).
The shared data directory defaults to ``$PLANNER_SHARED_DIR`` or the ``shared/`` sibling of the checkout.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.errors import PlannerError  # noqa: E402
from planner.units import SECONDS_PER_MS  # noqa: E402
from planner.validation.datasets import (  # noqa: E402
    StepRow,
    holdout_mask,
    kernel_tables,
    load_kernel_table,
    published_step_rows,
    select_rows,
)
from planner.validation.metrics import (  # noqa: E402
    ErrorSummary,
    Target,
    relative_error,
    summarize,
    summarize_by,
    token_bin,
    verdict,
)
from planner.validation.predict import (  # noqa: E402
    PUBLISHED_ENGINE,
    TOKEN_COLUMN,
    predict_kernel_s,
    predict_step_s,
    tolerance_fraction,
)

DOCS = ROOT / "docs"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/accuracy_report.py"
STEP_TARGET = Target(median_fraction=0.15, p90_fraction=0.30)
KERNEL_TARGET = Target(median_fraction=0.10)
KERNEL_TARGET_KINDS = ("gemm", "context_attention", "generation_attention")
MAX_KERNEL_ROWS = 3000


def default_shared_dir() -> Path:
    env = os.environ.get("PLANNER_SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


# --------------------------------------------------------------------------------------------------
# predictions


def predict_published(rows: Sequence[StepRow]) -> list[dict[str, object]]:
    """One record per row: measured, predicted (NaN when skipped or when the model refused) and why."""
    from planner.engines import find_engine
    from planner.hardware import find_gpu, load_catalog
    from planner.models import load_model_catalog

    gpus = load_catalog()
    models = load_model_catalog()
    engine = find_engine(PUBLISHED_ENGINE)
    records = []
    for row in rows:
        predicted, note = float("nan"), row.skip_reason or ""
        if row.predictable:
            try:
                model = models.get(row.model_id) if row.model_id else None
                predicted = predict_step_s(row, model=model, gpu=find_gpu(gpus, row.gpu_id), engine=engine)
            except PlannerError as error:
                note = f"cost model refused: {type(error).__name__}: {error.detail}"
        records.append({"row": row, "predicted_s": predicted, "note": note})
    return records


def kernel_sample(mask: np.ndarray, max_rows: int) -> np.ndarray:
    """Indices of at most ``max_rows`` held-out rows, evenly spaced through the (shape-sorted) file."""
    index = np.flatnonzero(mask)
    if index.size > max_rows:
        index = index[np.linspace(0, index.size - 1, max_rows).astype(int)]
    return index


def kernel_slices(kind: str, table: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Slice labels of each row: the token dimension's bin plus the kind's own qualifiers."""

    n = len(table["latency_ms"])
    slices: dict[str, np.ndarray] = {}
    if kind in TOKEN_COLUMN:
        slices["tokens"] = np.char.add(f"{TOKEN_COLUMN[kind]} ", token_bin(table[TOKEN_COLUMN[kind]]))
    if "message_bytes" in table:
        slices["message"] = np.char.add("bytes ", token_bin(table["message_bytes"], edges=(65536, 4 * 2**20)))
        slices["gpus"] = np.char.add("gpus=", table["num_gpus"].astype(int).astype(str))
    for column in ("kv_cache_dtype", "distribution", "backend"):
        if column in table:
            slices[column] = np.char.add(f"{column}=", table[column].astype(str))
    if "backend" not in table and len(set(table["kernel_source"])) > 1:
        slices["kernel"] = table["kernel_source"].astype(str)
    return slices or {"all": np.full(n, "all")}


def score_kernel_tables(shared_dir: Path, max_rows: int) -> list[dict[str, object]]:
    from planner.engines import find_engine
    from planner.hardware import find_gpu, load_catalog

    gpu = find_gpu(load_catalog(), "h100-sxm")
    loaded: dict[Path, dict[str, np.ndarray]] = {}
    results = []
    for key, path in sorted(kernel_tables(shared_dir).items()):
        if path not in loaded:
            loaded[path] = load_kernel_table(path)
        table = select_rows(loaded[path], key)
        held_out = kernel_sample(holdout_mask(table), max_rows)
        sample = {name: column[held_out] for name, column in table.items()}
        measured_s = sample["latency_ms"] * SECONDS_PER_MS
        engine = None if key[0] == "nccl" else find_engine(key[0])
        result: dict[str, object] = {
            "key": key,
            "num_rows": len(table["latency_ms"]),
            "num_scored": held_out.size,
        }
        try:
            predicted_s = predict_kernel_s(gpu, key, sample, engine)
        except (NotImplementedError, AttributeError, KeyError) as error:
            result["unavailable"] = f"not available ({type(error).__name__}: {error})"
            results.append(result)
            continue
        errors = relative_error(predicted_s, measured_s)
        result["overall"] = summarize(errors)
        result["slices"] = {
            name: summarize_by(errors, list(labels)) for name, labels in kernel_slices(key[1], sample).items()
        }
        results.append(result)
    return results


# --------------------------------------------------------------------------------------------------
# markdown


def _pct(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{100 * value:.1f}"


def _summary_line(label: str, summary: ErrorSummary, target: Target | None) -> str:
    return (
        f"| {label} | {summary.num_rows} | {_pct(summary.median_fraction)} | {_pct(summary.p90_fraction)} | "
        f"{_pct(summary.median_signed_fraction)} | {_pct(summary.max_fraction)} | "
        f"{verdict(summary, target)} |"
    )


_TABLE_HEAD = (
    "| slice | n | median APE % | p90 APE % | median signed % | max APE % | target |\n"
    "|---|---:|---:|---:|---:|---:|---|"
)


def _step_target(phase: object) -> Target | None:
    return STEP_TARGET if phase in ("prefill", "decode") else None


def published_section(records: Sequence[dict[str, object]]) -> list[str]:
    scored = [r for r in records if np.isfinite(r["predicted_s"])]  # type: ignore[arg-type]
    rows = [r["row"] for r in scored]
    errors = relative_error([r["predicted_s"] for r in scored], [row.value_s for row in rows])
    clean = np.asarray([not row.flags for row in rows])
    lines = [
        "## Published single-pass measurements",
        "",
        f"{len(scored)} of {len(records)} step rows predicted (the others are listed under *Skipped rows*). "
        "Target for prefill and decode slices: median APE ≤ 15 %, p90 ≤ 30 %. Operator (Vidur linear ops per "
        "layer) and all-reduce rows have no target; they locate errors. *signed* > 0: the model "
        "over-predicts. "
        "Rows with quality flags (secondary, questionable, approximate, implied/derived) are included; the "
        "*clean* lines leave them out.",
        "",
        "### Per source and phase",
        "",
        _TABLE_HEAD,
    ]
    phase_keys: list[Hashable] = [(row.source, row.phase) for row in rows]
    for key, summary in summarize_by(errors, phase_keys).items():
        lines.append(_summary_line(f"{key[0]} · {key[1]}", summary, _step_target(key[1])))
    for phase in ("prefill", "decode"):
        select = np.asarray([row.phase == phase for row in rows])
        lines.append(_summary_line(f"**all sources · {phase}**", summarize(errors[select]), STEP_TARGET))
        lines.append(
            _summary_line(
                f"**all sources · {phase} · clean**", summarize(errors[select & clean]), STEP_TARGET
            )
        )
    lines += ["", "### Per slice (source · phase · gpu · tp)", "", _TABLE_HEAD]
    slice_keys: list[Hashable] = [(row.source, row.phase, row.gpu_id, row.tp) for row in rows]
    for key, summary in summarize_by(errors, slice_keys).items():
        lines.append(
            _summary_line(f"{key[0]} · {key[1]} · {key[2]} · tp{key[3]}", summary, _step_target(key[1]))
        )
    lines += [
        "",
        "### Rows outside their tolerance",
        "",
        "Tolerance per row as in `tests/reference/test_published_steps.py` (30 %, widened by quality flags); "
        "these rows should be that test's `KNOWN_MISSES` (strict xfail), no more and no fewer.",
        "",
        "| row | phase | model | gpu | tp·pp | batch | tokens | measured ms | predicted ms | error % | "
        "tolerance % | flags |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    tolerances = np.asarray([tolerance_fraction(row) for row in rows])
    outside = np.flatnonzero(np.abs(errors) > tolerances)
    for i in outside:
        row = rows[i]
        tokens = row.prompt_tokens or row.context_tokens or row.num_tokens or f"{row.message_bytes:.0f} B"
        lines.append(
            f"| {row.row_id} | {row.phase} | {row.model_id} | {row.gpu_id} | {row.tp}·{row.pp} | "
            f"{row.batch_size} | {tokens} | {row.value_s / SECONDS_PER_MS:.4g} | "
            f"{scored[i]['predicted_s'] / SECONDS_PER_MS:.4g} | {100 * errors[i]:+.1f} | "
            f"{100 * tolerances[i]:.0f} | {', '.join(row.flags)} |"
        )
    lines += ["", f"{outside.size} of {len(rows)} predicted rows are outside their tolerance."]
    return lines


def kernel_section(results: Sequence[dict[str, object]], max_rows: int) -> list[str]:
    lines = [
        "## Kernel tables (H100 SXM, held-out rows)",
        "",
        f"Rows with `holdout_mask` set (the fit script fits on the others), at most {max_rows} per table, "
        "evenly spaced through the file. Target for GEMM and attention tables: median APE ≤ 10 %.",
        "",
        "| table (engine · kind · dtype) | rows | scored | median APE % | p90 APE % | median signed % "
        "| max APE % | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for result in results:
        engine, kind, dtype = result["key"]  # type: ignore[misc]
        label = f"{engine} · {kind} · {dtype}"
        if "unavailable" in result:
            lines.append(f"| {label} | {result['num_rows']} | 0 | {result['unavailable']} | | | | n/a |")
            continue
        summary: ErrorSummary = result["overall"]  # type: ignore[assignment]
        target = KERNEL_TARGET if kind in KERNEL_TARGET_KINDS else None
        lines.append(
            f"| {label} | {result['num_rows']} | {result['num_scored']} | {_pct(summary.median_fraction)} "
            f"| {_pct(summary.p90_fraction)} | {_pct(summary.median_signed_fraction)} | "
            f"{_pct(summary.max_fraction)} | {verdict(summary, target)} |"
        )
    lines += ["", "### Kernel slices", "", _TABLE_HEAD]
    for result in results:
        if "unavailable" in result:
            continue
        engine, kind, dtype = result["key"]  # type: ignore[misc]
        target = KERNEL_TARGET if kind in KERNEL_TARGET_KINDS else None
        for by_label in result["slices"].values():  # type: ignore[union-attr]
            for label, summary in by_label.items():
                lines.append(_summary_line(f"{engine} · {kind} · {dtype} · {label}", summary, target))
    return lines


def skipped_section(records: Sequence[dict[str, object]]) -> list[str]:
    lines = ["## Skipped rows", "", "| row | source | phase | reason |", "|---|---|---|---|"]
    for record in records:
        if not np.isfinite(record["predicted_s"]):  # type: ignore[arg-type]
            row: StepRow = record["row"]  # type: ignore[assignment]
            lines.append(f"| {row.row_id} | {row.source} | {row.phase} | {record['note']} |")
    return lines


def assumptions_section(records: Sequence[dict[str, object]]) -> list[str]:
    by_text: dict[str, list[str]] = {}
    for record in records:
        row: StepRow = record["row"]  # type: ignore[assignment]
        if row.assumption:
            by_text.setdefault(row.assumption, []).append(row.row_id)
    lines = [
        "## Readings of the published text",
        "",
        "How rows were parsed where the text is not literal (from `StepRow.assumption`).",
        "",
    ]
    for text, ids in by_text.items():
        span = ", ".join(ids) if len(ids) <= 6 else f"{ids[0]} … {ids[-1]} ({len(ids)} rows)"
        lines.append(f"- **{span}**: {text}")
    return lines


def demote_headings(markdown: str) -> str:
    """Drop the notes' title and push their headings one level down, under the report's section."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join("#" + line if line.startswith("#") else line for line in lines).strip()


CSV_FIELDS = (
    "row_id source phase model_id gpu_id tp pp batch_size prompt_tokens context_tokens num_tokens "
    "message_bytes measured_s predicted_s error_fraction tolerance_fraction flags note"
).split()


def write_rows_csv(records: Sequence[dict[str, object]], path: Path) -> None:

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        row: StepRow = record["row"]  # type: ignore[assignment]
        predicted = float(record["predicted_s"])  # type: ignore[arg-type]
        fields = {name: getattr(row, name) for name in CSV_FIELDS if hasattr(row, name)}
        fields |= {
            "model_id": row.model_id or "",
            "gpu_id": row.gpu_id or "",
            "message_bytes": f"{row.message_bytes:.0f}",
            "measured_s": f"{row.value_s:.6g}",
            "predicted_s": f"{predicted:.6g}" if np.isfinite(predicted) else "",
            "error_fraction": f"{predicted / row.value_s - 1.0:+.4f}" if np.isfinite(predicted) else "",
            "tolerance_fraction": f"{tolerance_fraction(row):.2f}",
            "flags": ";".join(row.flags),
            "note": record["note"],
        }
        writer.writerow(fields)
    path.write_text(buffer.getvalue())


def _copied(docs: Path, name: str, script: str) -> str:
    """The generated section ``docs/<name>``, or a line saying which script writes it."""
    path = docs / name
    return path.read_text().strip() if path.exists() else f"(docs/{name} is missing: run scripts/{script})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared_dir())
    parser.add_argument(
        "--max-rows", type=int, default=MAX_KERNEL_ROWS, help="held-out rows scored per table"
    )
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    records = predict_published(published_step_rows(args.shared))
    kernels = score_kernel_tables(args.shared, args.max_rows)
    notes_path = args.docs / "accuracy_notes.md"
    notes = notes_path.read_text().strip() if notes_path.exists() else "(docs/accuracy_notes.md is missing)"
    serving, crosscheck, decisions, calibration = (
        _copied(args.docs, name, script) for name, script in (
            ("accuracy_serving.md", "serving_accuracy.py"), ("accuracy_crosscheck.md", "serving_crosscheck.py"),
            ("accuracy_decisions.md", "plan_decisions.py"), ("accuracy_calibration.md", "calibration_accuracy.py")))
    command = COMMAND + ("" if args.max_rows == MAX_KERNEL_ROWS else f" --max-rows {args.max_rows}")
    lines = [
        "# Accuracy of the cost model",
        "",
        f"Generated by `{command}` (do not edit by hand; rerun after changing the cost model or its "
        "calibration). Per-row predictions of the published rows: `docs/accuracy_published_rows.csv`. "
        "APE = |predicted − measured| / measured.",
        "",
        *published_section(records),
        "",
        *kernel_section(kernels, args.max_rows),
        "",
        *skipped_section(records),
        "",
        *assumptions_section(records),
        "",
        "## Explanations",
        "",
        "Copied from `docs/accuracy_notes.md` (hand-written).",
        "",
        demote_headings(notes),
        "",
        "## Serving benchmarks (evaluate)",
        "",
        "Copied from `docs/accuracy_serving.md` (generated by `scripts/serving_accuracy.py`).",
        "",
        demote_headings(serving),
        "",
        "## Closed form against the reference simulation",
        "",
        "Copied from `docs/accuracy_crosscheck.md` (generated by `scripts/serving_crosscheck.py`).",
        "",
        demote_headings(crosscheck),
        "",
        "## Published deployment decisions (the plans)",
        "",
        "Copied from `docs/accuracy_decisions.md` (generated by `scripts/plan_decisions.py`).",
        "",
        demote_headings(decisions),
        "",
        "## Calibrating on a few rows (calibrate)",
        "",
        "Copied from `docs/accuracy_calibration.md` (generated by `scripts/calibration_accuracy.py`).",
        "",
        demote_headings(calibration),
        "",
    ]
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "accuracy.md").write_text("\n".join(lines))
    write_rows_csv(records, args.docs / "accuracy_published_rows.csv")
    print(
        f"wrote {args.docs / 'accuracy.md'} and accuracy_published_rows.csv "
        f"in {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
