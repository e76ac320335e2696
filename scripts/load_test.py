"""Load test, run by hand: `planner serve` with several workers, a separate process firing mixed requests.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/load_test.py [--requests 20000] [--in-flight 64] [--workers 2] [--write]

Starts ``planner serve --workers W`` on a free loopback port, waits for it to answer, measures the resident
memory of the server's processes, fires ``--requests`` requests (a fixed mix: catalog reads, estimates,
evaluations, a chunk-budget plan, and requests that must be refused with a 4xx) from this process with
``--in-flight`` of them outstanding at any time (httpx, asyncio), measures the memory again, and stops the
server. Reports throughput, latency percentiles per kind, the status counts, errors (5xx answers,
connection failures, timeouts, or a refused request answered 2xx: must be 0) and the memory before and
after. ``--write`` writes ``docs/load_test.md``, which ``scripts/benchmark.py`` copies into
``docs/benchmarks.md``. Not a test: the figures describe this machine on this day.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "load_test.md"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/load_test.py --write"

_EVAL = {"model": "meta-llama/Llama-3.1-8B", "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
         "workload": {"input_tokens": {"distribution": "lognormal", "median": 1500, "p90": 4000},
                      "output_tokens": 300, "arrival": {"kind": "poisson", "rate_per_s": 4.0}}}
#: (kind, share of the requests, method, path, body, whether a 4xx is the right answer)
MIX = (
    ("list gpus", 0.10, "GET", "/v1/gpus", None, False),
    ("get model", 0.10, "GET", "/v1/models/meta-llama/Llama-3.1-70B", None, False),
    ("estimate prefill", 0.20, "POST", "/v1/estimate/prefill",
     {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "prompt_tokens": 4096}, False),
    ("estimate decode", 0.20, "POST", "/v1/estimate/decode",
     {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "batch_size": 32,
      "context_tokens": 4096}, False),
    ("evaluate", 0.20, "POST", "/v1/evaluate", _EVAL, False),
    ("plan chunked", 0.05, "POST", "/v1/plan/chunked",
     {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "workload": {"input_tokens": 1000, "output_tokens": 200},
      "slo": {"ttft_s": 1.0, "itl_s": 0.05}}, False),
    ("refused: unknown gpu", 0.05, "POST", "/v1/estimate/prefill",
     {"model": "meta-llama/Llama-3.1-8B", "gpu": "no-such-gpu", "prompt_tokens": 100}, True),
    ("refused: invalid body", 0.05, "POST", "/v1/evaluate", {"model": "meta-llama/Llama-3.1-8B"}, True),
    ("refused: too large", 0.05, "POST", "/v1/evaluate", {"padding": "x" * (5 * 2**18)}, True),
)


#: parts of the run after each of which the server's memory is read
PHASES = 5


def _non_default(args: argparse.Namespace, ap: argparse.ArgumentParser) -> str:
    """The options of this run that differ from their defaults, as they are written on the command line."""
    return "".join(f" --{name.replace('_', '-')} {value}" for name, value in vars(args).items()
                   if name != "write" and value != ap.get_default(name))


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    """``planner serve --workers N`` on a free loopback port, without the ``PLANNER_*`` environment and with
    the access log off, once it answers; (the process, its base URL)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANNER_")} | {"PLANNER_ACCESS_LOG": "false"}
    planner = Path(sys.executable).parent / "planner"
    server = subprocess.Popen([str(planner), "serve", "--port", str(port), "--workers", str(workers)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/v1/gpus", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.terminate()
            raise SystemExit("the server did not come up")
        time.sleep(0.3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants [bytes] (Linux /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                stack.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


#: the requests of the last run that got no answer: kind, exception and how long it took
failures: list[str] = []


async def _fire(url: str, n: int, in_flight: int, timeout_s: float, seed: int = 0) -> tuple[list, float]:
    rng = np.random.default_rng(seed)
    shares = np.array([m[1] for m in MIX])
    picks = rng.choice(len(MIX), size=n, p=shares / shares.sum())
    sem = asyncio.Semaphore(in_flight)
    out: list[tuple[str, int, float, bool]] = []
    failures.clear()
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        async def one(k: int) -> None:
            kind, _, method, path, body, refused = MIX[k]
            async with sem:
                start = time.perf_counter()
                try:
                    r = await client.request(method, path, json=body)
                    status = r.status_code
                except httpx.HTTPError as error:
                    status = -1
                    failures.append(f"{kind}: {type(error).__name__} after {time.perf_counter() - start:.1f} s "
                                    f"({error!s:.120})")
                out.append((kind, status, time.perf_counter() - start, refused))

        start = time.perf_counter()
        await asyncio.gather(*(one(int(k)) for k in picks))
        return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="per request [s]")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    server, url = start_server(args.workers)
    try:
        # warm every worker's catalogs and code paths, then the first memory reading
        asyncio.run(_fire(url, 400, args.in_flight, args.timeout))
        rss_before = _rss_bytes(server.pid)
        # the requests in PHASES equal parts, the memory read after each: growth shows as a rising series
        results, wall, rss_series = [], 0.0, []
        for part in np.array_split(np.arange(args.requests), PHASES):
            got, took = asyncio.run(_fire(url, part.size, args.in_flight, args.timeout, seed=int(part[0])))
            results += got
            wall += took
            rss_series.append(_rss_bytes(server.pid))
        rss_after = rss_series[-1]
    finally:
        server.terminate()
        server.wait(timeout=30)
    statuses = Counter(s for _, s, _, _ in results)
    errors = sum(1 for _, s, _, refused in results
                 if s < 0 or s >= 500 or (refused and s < 400) or (not refused and s >= 400))
    by_kind: dict[str, list[float]] = defaultdict(list)
    for kind, _, t, _ in results:
        by_kind[kind].append(t)
    lat = np.array([t for _, _, t, _ in results])
    lines = [
        "## Load test",
        "",
        f"Generated by `{COMMAND}{_non_default(args, ap)}` (do not edit by hand; run by hand, not in CI). `planner serve --workers "
        f"{args.workers}` on loopback; {args.requests} requests from a separate process, {args.in_flight} in "
        f"flight, a fixed mix (shares below); machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, on {time.strftime('%Y-%m-%d')}.",
        "",
        f"- throughput: **{len(results) / wall:,.0f} requests/s** ({wall:.1f} s)",
        f"- latency, all requests: p50 {1e3 * np.percentile(lat, 50):.1f} ms, p99 {1e3 * np.percentile(lat, 99):.1f} ms",
        f"- errors (5xx, connection failures, timeouts, or a wrong 2xx/4xx): **{errors}**",
        f"- statuses: {', '.join(f'{s}: {c}' for s, c in sorted(statuses.items()))}"
        + (" (-1: no answer)" if -1 in statuses else ""),
        *(f"  - no answer: {f}" for f in failures[:10]),
        f"- resident memory of the server's processes: {rss_before / 2**20:.0f} MiB before, "
        f"{rss_after / 2**20:.0f} MiB after ({(rss_after - rss_before) / 2**20:+.0f} MiB)",
        f"- memory after each fifth of the requests [MiB]: {', '.join(f'{r / 2**20:.0f}' for r in rss_series)}; "
        f"over the last three fifths: {(rss_series[-1] - rss_series[-3]) / 2**20:+.1f} MiB",
        "- resident memory also moves with the allocator's free lists and fragmentation; what a leak would be "
        "made of, the Python objects still allocated, is measured in process by "
        "`tests/api/test_api_memory.py` (this mix, `tracemalloc`, after a warm-up): it levels off, "
        "+49, +61, +65, +67 KiB after 405, 810, 1215 and 1620 more requests, and the test fails above "
        "192 KiB over 405",
        "",
        "| request | share | count | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, share, *_ in MIX:
        t = np.array(by_kind.get(kind, [np.nan]))
        lines.append(f"| {kind} | {100 * share:.0f} % | {len(by_kind.get(kind, []))} | "
                     f"{1e3 * np.nanpercentile(t, 50):.1f} | {1e3 * np.nanpercentile(t, 99):.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC}")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
