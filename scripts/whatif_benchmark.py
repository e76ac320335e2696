"""What-if throughput: scenarios per second of the columnar evaluation, of the whole what-if pipeline
in-process, and over HTTP to ``planner serve`` on loopback.

Run by hand (not in CI): ``PYTHONPATH=. .venv/bin/python scripts/whatif_benchmark.py --write`` rewrites
``docs/whatif_throughput.md``, which ``scripts/benchmark.py`` copies into ``docs/benchmarks.md``. Each figure is
the median of ``--repeats`` runs (wall time, ``time.perf_counter``); the machine may be shared, so the figures
are for comparing changes on one machine, never a pass/fail criterion.

The sweep: ``--rows`` scenarios over four deployments (dense models on Hopper, Blackwell and Ampere GPUs,
tensor-parallel 1–4), 1–8 replicas, open-loop Poisson rates from 0.1 to 40 requests/s and TTFT / ITL targets
drawn from short lists; fixed lengths, then lognormal prompts (64 prompt points a scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.api import create_app  # noqa: E402
from planner.api.catalogs import Catalogs  # noqa: E402
from planner.api.routers import whatif as W  # noqa: E402
from planner.api.routers.evaluate import build_problem  # noqa: E402
from planner.api.serving_schemas import EvaluateRequest  # noqa: E402
from planner.api.settings import Settings  # noqa: E402
from planner.api.whatif_columns import evaluate_sweep  # noqa: E402
from planner.serving.batch import evaluate_open_loop_rows  # noqa: E402
from planner.serving.evaluate import replica_model  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from load_test import start_server  # noqa: E402

DOC = ROOT / "docs" / "whatif_throughput.md"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/whatif_benchmark.py --write"
DEPLOYMENTS = (("meta-llama/Llama-3.1-8B", "h100-sxm", 1), ("meta-llama/Llama-3.1-70B", "h200-sxm", 4),
               ("Qwen/Qwen3-32B", "b200", 2), ("meta-llama/Llama-3.1-8B", "a100-80gb-sxm", 1))
COLUMNS = ("model,deployment.mode,deployment.gpu,deployment.parallelism.tp,deployment.replicas,"
           "workload.input_tokens,workload.output_tokens,workload.arrival.kind,workload.arrival.rate_per_s,"
           "slo.ttft_s,slo.itl_s")
LOGNORMAL_PROMPTS = '"{""distribution"": ""lognormal"", ""mean"": 2000, ""p90"": 3500}"'


def sweep(rows: int, prompts: str, seed: int = 0) -> str:
    """The CSV of the sweep (one scenario a line)."""
    rng = np.random.default_rng(seed)
    rate = rng.uniform(0.1, 40.0, rows)
    ttft = rng.choice([0.3, 0.5, 1.0], rows)
    itl = rng.choice([0.03, 0.05], rows)
    lines = [COLUMNS]
    for i in range(rows):
        model, gpu, tp = DEPLOYMENTS[i % len(DEPLOYMENTS)]
        lines.append(f"{model},aggregated,{gpu},{tp},{1 + i % 8},{prompts},300,poisson,{rate[i]:.4f},{ttft[i]},"
                     f"{itl[i]}")
    return "\n".join(lines) + "\n"


def median_time(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up: catalogs, code paths
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def core(text: str, catalogs: Catalogs) -> Callable[[], object]:
    """The columnar evaluation alone: one replica model per deployment (shared through the memo, as the API
    shares it), then ``evaluate_open_loop_rows`` over each deployment's rates, replicas and SLOs."""
    columns, inputs = W._parse_csv(text)
    rows = W._LazyRows(inputs)
    splits = W.split_csv_rows(columns, inputs, W._cell)
    groups: dict[object, list[int]] = {}
    for i, split in enumerate(splits):
        groups.setdefault(split[0], []).append(i)  # type: ignore[index]
    prepared = []
    for members in groups.values():
        problem, _ = build_problem(EvaluateRequest.model_validate(rows[members[0]]), catalogs)
        values = [splits[i][1] for i in members]  # type: ignore[index]
        prepared.append((problem, np.array([v["workload.arrival.rate_per_s"] for v in values]),
                         np.array([v["deployment.replicas"] for v in values]),
                         np.array([v["slo.ttft_s"] for v in values]), np.array([v["slo.itl_s"] for v in values])))

    def run() -> None:
        memo: dict = {}
        for problem, rate, replicas, ttft, itl in prepared:
            evaluate_open_loop_rows(problem, replica_model(problem, memo), rate, replicas, ttft_target_s=ttft,
                                    ttft_percentile=np.full(rate.size, 90.0), itl_target_s=itl,
                                    itl_percentile=np.full(rate.size, 99.0))

    return run


def sweep_api(text: str, catalogs: Catalogs) -> Callable[[], object]:
    """The in-process Python API, ``whatif_columns.evaluate_sweep``: one call per deployment with its columns
    of rates, replicas and SLO targets (request validation, the replica model, the columnar evaluation and
    the output columns)."""
    columns, inputs = W._parse_csv(text)
    rows = W._LazyRows(inputs)
    splits = W.split_csv_rows(columns, inputs, W._cell)
    by_deployment: dict[object, list[int]] = {}
    for i, split in enumerate(splits):
        by_deployment.setdefault(split[0][0][:4], []).append(i)  # type: ignore[index]
    calls = []
    for members in by_deployment.values():
        values = [splits[i][1] for i in members]  # type: ignore[index]
        calls.append((rows[members[0]], {
            "rate_per_s": np.array([v["workload.arrival.rate_per_s"] for v in values]),
            "replicas": np.array([v["deployment.replicas"] for v in values]),
            "ttft_s": np.array([v["slo.ttft_s"] for v in values]),
            "itl_s": np.array([v["slo.itl_s"] for v in values])}))

    def run() -> None:
        for request, cols in calls:
            evaluate_sweep(request, catalogs, **cols)

    return run


def pipeline(text: str, catalogs: Catalogs, output: str) -> Callable[[], object]:
    """The what-if route's work without HTTP: parse the CSV, group, validate, evaluate, and (``output``
    "csv") write the CSV answer or (``output`` "columns") stop at the answers as columns."""
    def run() -> object:
        columns, inputs = W._parse_csv(text)
        rows = W._LazyRows(inputs)
        splits = W.split_csv_rows(columns, inputs, W._cell)
        answers = W._answer_all(len(rows), rows.__getitem__, splits, catalogs, "/v1/whatif", lambda _: None)
        if output == "csv":
            return W._csv_answer(columns, inputs, answers)
        return answers

    return run


def over_http(text: str, workers: int, accept: str, repeats: int) -> float:
    """Median seconds for all the sweep's scenarios over loopback to ``planner serve --workers N``: the sweep
    split in ``workers`` requests sent together."""
    server, base = start_server(workers)
    url = f"{base}/v1/whatif"
    header, *lines = text.splitlines()
    parts = [(header + "\n" + "\n".join(chunk) + "\n").encode()
             for chunk in np.array_split(np.array(lines, dtype=object), workers)]
    headers = {"content-type": "text/csv", "accept": accept}
    try:
        async def once() -> None:
            async with httpx.AsyncClient(timeout=600) as client:
                got = await asyncio.gather(*(client.post(url, content=p, headers=headers) for p in parts))
                for r in got:
                    r.raise_for_status()

        for _ in range(2 * workers):  # every worker warm
            asyncio.run(once())
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            asyncio.run(once())
            times.append(time.perf_counter() - start)
        return float(np.median(times))
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    catalogs = create_app(Settings(hardware_dir=None)).state.catalog_cache.get(None)
    n = args.rows
    table = ["| what | sweep | scenarios | median s | scenarios/s |", "|---|---|---:|---:|---:|"]

    def row(what: str, which: str, seconds: float) -> None:
        table.append(f"| {what} | {which} | {n:,} | {seconds:.2f} | {n / seconds:,.0f} |")
        print(table[-1], flush=True)

    for which, prompts in (("fixed lengths", "2000"), ("lognormal prompts", LOGNORMAL_PROMPTS)):
        text = sweep(n, prompts)
        row("columnar evaluation (`evaluate_open_loop_rows`), in-process", which,
            median_time(core(text, catalogs), args.repeats))
        row("in-process Python API (`evaluate_sweep`, one call per deployment, columns in and out)", which,
            median_time(sweep_api(text, catalogs), args.repeats))
        row("what-if in-process: CSV parsed, grouped, validated, evaluated (answers as columns)", which,
            median_time(pipeline(text, catalogs, "columns"), args.repeats))
        row("what-if in-process, CSV answer written", which, median_time(pipeline(text, catalogs, "csv"), args.repeats))
        if which == "fixed lengths":
            for workers in (1, 2):
                for accept, label in (("text/csv", "CSV"), ("application/json", "JSON")):
                    row(f"over HTTP: `planner serve --workers {workers}`, {workers} request(s) at once, CSV in, "
                        f"{label} out", which, over_http(text, workers, accept, args.repeats))
    lines = [
        "## What-if throughput",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand; run by hand, not in CI). Median of {args.repeats} runs; "
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, on "
        f"{time.strftime('%Y-%m-%d')}. The sweep: {n:,} scenarios over 4 deployments (Llama-3.1-8B on h100-sxm "
        "and a100-80gb-sxm, Llama-3.1-70B tp4 on h200-sxm, Qwen3-32B tp2 on b200), 1–8 replicas, Poisson rates "
        "0.1–40 requests/s, TTFT and ITL targets from short lists; 300-token outputs. Scenarios that differ "
        "only in rate, replicas and SLO are one group, evaluated as columns; every row equals `/v1/evaluate`'s "
        "answer for it (`tests/api/test_api_whatif_columns.py`).",
        "",
        *table,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
