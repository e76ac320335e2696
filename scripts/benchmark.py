"""Time the cost model and the HTTP service in-process: scalar passes, vectorized grids, API requests.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/benchmark.py            # print the results
    PYTHONPATH=. .venv/bin/python scripts/benchmark.py --write    # also rewrite docs/benchmarks.md

Every figure is a set of ``time.perf_counter`` timings after a warm-up, summarized by its median and 90th
percentile. Nothing here is pass/fail: the numbers describe the machine they ran on, which is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.costs import (  # noqa: E402
    CostContext,
    Parallelism,
    decode_cost,
    decode_latency_s,
    prefill_cost,
    prefill_latency_s,
)
from planner.engines import find_engine  # noqa: E402
from planner.hardware import load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/benchmark.py --write"
GRID_SIDE = 100  # 100 × 100 = 10,000 scenarios per vectorized call
API_REQUESTS = 200


@dataclass(frozen=True, kw_only=True)
class Deployment:
    label: str
    model: str
    gpu: str
    weight_dtype: str
    parallelism: Parallelism


DEPLOYMENTS = (
    Deployment(label="Llama-3.1-70B bf16, tp4 × h100-sxm", model="meta-llama/Llama-3.1-70B", gpu="h100-sxm",
               weight_dtype="bf16", parallelism=Parallelism(tp=4)),
    Deployment(label="DeepSeek-V3 fp8, tp8 × h200-sxm", model="deepseek-ai/DeepSeek-V3", gpu="h200-sxm",
               weight_dtype="fp8", parallelism=Parallelism(tp=8)),
)
PROMPT_TOKENS, DECODE_BATCH, CONTEXT_TOKENS = 4096, 32, 4096


@dataclass(frozen=True, kw_only=True)
class Result:
    """One benchmark: what was timed, how often, and the median and p90 of one call [s]."""

    name: str
    calls: int
    median_s: float
    p90_s: float
    #: work items one call covers (scenarios of a grid, 1 for a single pass or request), and their name
    items_per_call: int = 1
    unit: str = "calls/s"
    #: median of ``REFERENCE_CALLS`` reference calls timed right after this benchmark [s] (``reference_s``)
    reference_s: float = float("nan")

    @property
    def items_per_s(self) -> float:
        return self.items_per_call / self.median_s


def time_calls(call: Callable[[], object], *, repeats: int, warmup: int = 3) -> np.ndarray:
    """Wall time of ``repeats`` calls of ``call`` after ``warmup`` untimed ones [s]."""
    for _ in range(warmup):
        call()
    out = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        call()
        out[i] = time.perf_counter() - start
    return out


#: calls of the reference timed after each benchmark
REFERENCE_CALLS = 30
_REFERENCE_CTX: list[CostContext] = []


def reference_s() -> float:
    """Median wall time of ``REFERENCE_CALLS`` calls of the first deployment's scalar ``prefill_cost`` [s].

    The same code every time (nobody tunes it for speed), timed right after each benchmark: this shared VM
    runs the same call 0.6 to 1.4 ms from one minute to the next, and a benchmark's row with a high
    reference was measured in a slow phase."""
    if not _REFERENCE_CTX:
        _REFERENCE_CTX.append(_context(DEPLOYMENTS[0]))
    ctx = _REFERENCE_CTX[0]
    return float(np.median(time_calls(lambda: prefill_cost(ctx, prompt_tokens=PROMPT_TOKENS),
                                      repeats=REFERENCE_CALLS, warmup=1)))


def summarize(name: str, timings: np.ndarray, items_per_call: int = 1, unit: str = "calls/s") -> Result:
    """The row of a benchmark just timed, with the reference timed now."""
    return Result(name=name, calls=timings.size, median_s=float(np.median(timings)),
                  p90_s=float(np.percentile(timings, 90.0)), items_per_call=items_per_call, unit=unit,
                  reference_s=reference_s())


def _context(d: Deployment) -> CostContext:
    return CostContext(model=load_model_catalog().get(d.model), gpu=load_catalog()[d.gpu],
                       engine=find_engine("vllm"), weight_dtype=d.weight_dtype,
                       kv_dtype="fp8" if d.weight_dtype == "fp8" else "bf16", parallelism=d.parallelism)


def core_benchmarks(repeats: int) -> list[Result]:
    """(a) scalar passes with their breakdown, (b) vectorized latencies over 10,000-point grids."""
    results = []
    prompt, batch = np.meshgrid(np.linspace(1, 32_768, GRID_SIDE).round(), np.arange(1, GRID_SIDE + 1))
    for d in DEPLOYMENTS:
        ctx = _context(d)
        scalar = {
            f"prefill_cost · {d.label} · {PROMPT_TOKENS} tokens":
                lambda ctx=ctx: prefill_cost(ctx, prompt_tokens=PROMPT_TOKENS),
            f"decode_cost · {d.label} · batch {DECODE_BATCH} × {CONTEXT_TOKENS}":
                lambda ctx=ctx: decode_cost(ctx, batch_size=DECODE_BATCH, context_tokens=CONTEXT_TOKENS),
        }
        for name, call in scalar.items():
            results.append(summarize(name, time_calls(call, repeats=repeats)))
        grids = {
            f"prefill_latency_s · {d.label} · prompt 1-32768 × batch 1-100":
                lambda ctx=ctx: prefill_latency_s(ctx, prompt_tokens=prompt, batch_size=batch),
            f"decode_latency_s · {d.label} · context 1-32768 × batch 1-100":
                lambda ctx=ctx: decode_latency_s(ctx, batch_size=batch, context_tokens=prompt),
        }
        for name, call in grids.items():
            timings = time_calls(call, repeats=max(5, repeats // 10))
            results.append(summarize(name, timings, items_per_call=prompt.size, unit="scenarios/s"))
    return results


#: a trace-like workload (lognormal samples, seed 0): what a user's request log gives
_TRACE_RNG = np.random.default_rng(0)
TRACE_PROMPTS = np.clip(_TRACE_RNG.lognormal(7.0, 0.9, 2000), 4, 16000).astype(int).tolist()
TRACE_OUTPUTS = np.clip(_TRACE_RNG.lognormal(5.3, 0.8, 2000), 4, 4000).astype(int).tolist()


def _disaggregated_70b(arrival: dict) -> dict:
    """Llama-3.1-70B on 2 × tp2 prefill and 1 × tp4 decode workers (H100), lognormal prompts, 415 outputs."""
    return {
        "model": "meta-llama/Llama-3.1-70B",
        "deployment": {"mode": "disaggregated",
                       "prefill": {"gpu": "h100-sxm", "parallelism": {"tp": 2}, "workers": 2},
                       "decode": {"gpu": "h100-sxm", "parallelism": {"tp": 4}, "workers": 1}},
        "workload": {"input_tokens": {"distribution": "lognormal", "median": 1730, "p90": 5696},
                     "output_tokens": 415, "arrival": arrival},
    }


def _unchunked_32b(arrival: dict) -> dict:
    """Qwen3-32B tp2 on an H100 pair without chunked prefill (budget 8192), lognormal lengths."""
    return {
        "model": "Qwen/Qwen3-32B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 2},
                       "chunked_prefill": False, "token_budget": 8192},
        "workload": {"input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000},
                     "output_tokens": {"distribution": "lognormal", "median": 150, "p90": 450},
                     "arrival": arrival},
    }


EVALUATE_BODIES = {
    "aggregated, closed loop 64, fixed 4000/500, Llama-3.1-8B tp1": {
        "model": "meta-llama/Llama-3.1-8B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}},
        "workload": {"input_tokens": 4000, "output_tokens": 500,
                     "arrival": {"kind": "closed_loop", "concurrency": 64}},
    },
    "aggregated, Poisson 8/s, lognormal lengths, Llama-3.1-70B tp4": {
        "model": "meta-llama/Llama-3.1-70B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 4}},
        "workload": {"input_tokens": {"distribution": "lognormal", "median": 1730, "p90": 5696},
                     "output_tokens": {"distribution": "lognormal", "median": 300, "p90": 900},
                     "arrival": {"kind": "poisson", "rate_per_s": 8.0}},
    },
    "aggregated unchunked, closed loop 64, lognormal lengths, Qwen3-32B tp2":
        _unchunked_32b({"kind": "closed_loop", "concurrency": 64}),
    "disaggregated 2×tp2 + 1×tp4, Poisson 4/s, Llama-3.1-70B":
        _disaggregated_70b({"kind": "poisson", "rate_per_s": 4.0}),
    "disaggregated 2×tp2 + 1×tp4, closed loop 64, lognormal lengths, Llama-3.1-70B":
        _disaggregated_70b({"kind": "closed_loop", "concurrency": 64}),
    "aggregated, Poisson 3/s, a trace of 2000 samples (1465 distinct prompt, 649 output lengths), "
    "Llama-3.1-8B tp1": {
        "model": "meta-llama/Llama-3.1-8B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}},
        "workload": {"input_tokens": {"samples": TRACE_PROMPTS}, "output_tokens": {"samples": TRACE_OUTPUTS},
                     "arrival": {"kind": "poisson", "rate_per_s": 3.0}},
    },
    "aggregated unchunked, Poisson 4/s, lognormal lengths, Qwen3-32B tp2":
        _unchunked_32b({"kind": "poisson", "rate_per_s": 4.0}),
}


_PLAN_WORKLOAD = {"input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000}, "output_tokens": 300}
_PLAN_SLO = {"ttft_s": 1.0, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99}
#: (label, path, bodies): a benchmark cycles through its bodies, one per request
PLAN_BODIES = (
    ("chunk-budget search, Llama-3.1-70B tp4 × h100-sxm, 9 budgets × 8 batch limits", "/v1/plan/chunked",
     [{"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "replicas": 2,
       "workload": _PLAN_WORKLOAD, "slo": _PLAN_SLO}]),
    ("pool split, Llama-3.1-70B, {h100-sxm, h200-sxm} × TP {1,2,4,8} per pool, 16 GPUs", "/v1/plan/disaggregated",
     [{"model": "meta-llama/Llama-3.1-70B", "gpus": ["h100-sxm", "h200-sxm"], "total_gpus": 16,
       "workload": _PLAN_WORKLOAD, "slo": _PLAN_SLO}]),
    ("whole plan, Llama-3.1-70B, 3 modes × TP {1,2,4,8} × 4 GPU types, budgets of 8, 16, 32 and 64 GPUs",
     "/v1/plan",
     [{"model": "meta-llama/Llama-3.1-70B", "gpus": ["h100-sxm", "h200-sxm", "a100-80gb-sxm", "b200"],
       "total_gpus": g, "workload": _PLAN_WORKLOAD, "slo": _PLAN_SLO} for g in (8, 16, 32, 64)]),
)
PLAN_REQUESTS = 40

#: the what-if batch: one CSV of WHATIF_ROWS scenarios, a sweep of rates over three deployments and two
#: prompt lengths (what a capacity spreadsheet holds), answered as CSV
WHATIF_ROWS = 600
WHATIF_REQUESTS = 5
_WHATIF_HEADER = ("model,deployment.mode,deployment.gpu,deployment.parallelism.tp,workload.input_tokens,"
                  "workload.output_tokens,workload.arrival.kind,workload.arrival.rate_per_s")
_WHATIF_CSV = _WHATIF_HEADER + "\n" + "".join(
    f"{model},aggregated,{gpu},{tp},{isl},300,poisson,{0.5 + 0.1 * (i % 100):.1f}\n"
    for i, (model, gpu, tp, isl) in enumerate(
        (m, g, t, n)
        for m, g, t in (("meta-llama/Llama-3.1-8B", "h100-sxm", 1), ("meta-llama/Llama-3.1-8B", "h200-sxm", 1),
                        ("meta-llama/Llama-3.1-70B", "h100-sxm", 4))
        for n in (1000, 4000) for _ in range(WHATIF_ROWS // 6)))
#: the other issue-5 endpoints, by their request examples
EXAMPLE_ENDPOINTS = (("/v1/diagnose", "DiagnoseRequest"), ("/v1/calibrate", "CalibrateRequest"),
                     ("/v1/timeline", "TimelineRequest"))
EXAMPLE_REQUESTS = 10


async def _api_benchmarks(requests: int) -> list[Result]:
    # httpx's in-process transport tries to import sniffio on every request (to detect trio); it is not
    # installed, and the failed import's path search costs ~0.3 ms a request on the client side, which is
    # not the service's time: mark it missing so that the import fails at once
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]
    import httpx

    from planner.api import create_app
    from planner.api.settings import Settings

    app = create_app(Settings(hardware_dir=None))
    base = {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}}
    bodies = {
        "/v1/estimate/prefill": base | {"prompt_tokens": PROMPT_TOKENS},
        "/v1/estimate/decode": base | {"batch_size": DECODE_BATCH, "context_tokens": CONTEXT_TOKENS},
    }
    results = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://planner.bench") as client:

        async def timed(path: str, requests_: list[dict], n: int, warmup: int = 1) -> np.ndarray:
            """Wall time of ``n`` POSTs to ``path``, cycling through the keyword sets of ``requests_``
            (``json=`` or ``content=`` and ``headers=``), after ``warmup`` untimed rounds of them [s]."""
            for _ in range(warmup):  # catalogs load on first use
                for kwargs in requests_:
                    (await client.post(path, **kwargs)).raise_for_status()
            out = np.empty(n)
            for i in range(n):
                start = time.perf_counter()
                response = await client.post(path, **requests_[i % len(requests_)])
                out[i] = time.perf_counter() - start
                response.raise_for_status()
            return out

        for path, body in bodies.items():
            name = f"POST {path} · Llama-3.1-70B tp4 h100-sxm (httpx.ASGITransport)"
            results.append(summarize(name, await timed(path, [{"json": body}], requests, 5), unit="requests/s"))
        for label, body in EVALUATE_BODIES.items():
            results.append(summarize(f"POST /v1/evaluate · {label} (httpx.ASGITransport)",
                                     await timed("/v1/evaluate", [{"json": body}], requests, 5), unit="requests/s"))
        for label, path, plan_bodies in PLAN_BODIES:
            timings = await timed(path, [{"json": b} for b in plan_bodies], max(PLAN_REQUESTS, len(plan_bodies)))
            results.append(summarize(f"POST {path} · {label} (httpx.ASGITransport)", timings, unit="requests/s"))
        csv_request = {"content": _WHATIF_CSV, "headers": {"content-type": "text/csv", "accept": "text/csv"}}
        results.append(summarize(f"POST /v1/whatif · {WHATIF_ROWS} CSV scenarios (3 deployments × 2 prompt lengths "
                                 "× rates), CSV out (httpx.ASGITransport)",
                                 await timed("/v1/whatif", [csv_request], WHATIF_REQUESTS),
                                 items_per_call=WHATIF_ROWS, unit="scenarios/s"))
        from planner.api import diagnose_schemas, timeline_schemas

        for path, name in EXAMPLE_ENDPOINTS:
            model = getattr(diagnose_schemas, name, None) or getattr(timeline_schemas, name)
            body = model.model_config["json_schema_extra"]["examples"][0]
            results.append(summarize(f"POST {path} · the request example of {name} (httpx.ASGITransport)",
                                     await timed(path, [{"json": body}], EXAMPLE_REQUESTS), unit="requests/s"))
    return results


def evaluate_benchmarks(repeats: int) -> list[Result]:
    """(c) one evaluate call in-process, without HTTP: the request body validated, the problem built, the
    closed form evaluated and the response model built (what the endpoint's handler does)."""
    from planner.api.catalogs import Catalogs
    from planner.api.routers.evaluate import build_problem, evaluation_response
    from planner.api.serving_schemas import EvaluateRequest
    from planner.serving.evaluate import evaluate

    catalogs = Catalogs(None)
    results = []
    for label, body in EVALUATE_BODIES.items():
        def call(body: dict = body) -> object:
            problem, notes = build_problem(EvaluateRequest.model_validate(body), catalogs)
            return evaluation_response(problem, evaluate(problem), notes)

        results.append(summarize(f"evaluate in-process · {label}", time_calls(call, repeats=repeats, warmup=5)))
    return results


def api_benchmarks(requests: int) -> list[Result]:
    """(c) in-process requests through the ASGI app, one at a time."""
    return asyncio.run(_api_benchmarks(requests))


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = {name: metadata.version(name) for name in ("numpy", "scipy", "fastapi", "httpx")}
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": _commit(),
        "nproc": f"{usable} usable of {os.cpu_count()}",
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        **versions,
    }


def _commit() -> str:
    """The checkout's commit, marked when the working tree differs from it (read-only git calls)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + uncommitted changes" if dirty else head


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def render(results: Sequence[Result], info: dict[str, str], command: str) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` (do not edit by hand). Wall time of single calls with "
        "`time.perf_counter`, after a warm-up; median and 90th percentile over the calls. The figures "
        "describe this machine on this day (possibly shared with other jobs): they are for comparing "
        "changes on one machine, never a pass/fail criterion.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in info.items()),
        "",
        "## Results",
        "",
        f"Scalar calls build the per-operator breakdown and the memory plan; vectorized calls evaluate a "
        f"{GRID_SIDE} × {GRID_SIDE} grid of scenarios in one numpy pass; \"evaluate in-process\" is the evaluate "
        "handler's work without HTTP (body validated, problem built, closed form evaluated, response model "
        "built); API requests go through the whole FastAPI stack (validation, catalogs, serialization) "
        "in-process (`httpx.ASGITransport`), one at a time. *reference ms*: the median of "
        f"{REFERENCE_CALLS} calls of the first row's `prefill_cost` timed right after the row (the same code "
        "every time): this shared VM runs it 0.6–1.4 ms from one minute to the next, and a row with a high "
        "reference was measured in a slow phase.",
        "",
        "| benchmark | calls | median ms | p90 ms | throughput | reference ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rate = f"{r.items_per_s:,.0f} {r.unit}" if r.items_per_s >= 10 else f"{r.items_per_s:.2g} {r.unit}"
        lines.append(f"| {r.name} | {r.calls} | {_ms(r.median_s)} | {_ms(r.p90_s)} | {rate} | "
                     f"{_ms(r.reference_s)} |")
    for name, title, script in (("whatif_throughput.md", "What-if throughput", "whatif_benchmark.py"),
                                ("load_test.md", "Load test", "load_test.py")):
        part = ROOT / "docs" / name
        lines += ["", part.read_text().strip() if part.exists() else
                  f"## {title}\n\n(docs/{name} is missing: run scripts/{script} --write)"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC.relative_to(ROOT)}")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls of each scalar benchmark")
    parser.add_argument("--requests", type=int, default=API_REQUESTS, help="timed requests per endpoint")
    args = parser.parse_args(argv)
    results = core_benchmarks(args.repeats) + evaluate_benchmarks(args.repeats) + api_benchmarks(args.requests)
    options = (("repeats", args.repeats, 200), ("requests", args.requests, API_REQUESTS))
    extra = "".join(f" --{name} {value}" for name, value, default in options if value != default)
    text = render(results, machine(), COMMAND + extra)
    print(text)
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
