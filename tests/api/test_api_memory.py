"""Memory does not grow with requests (issue 7: "memory before and after (no growth)").

The load test (``scripts/load_test.py``) reads the server's resident memory, which also moves with the
allocator's fragmentation and the interpreter's free lists. This test measures what a leak would be made
of: the Python objects still allocated (``tracemalloc``) after the load test's mix of requests, in process,
once after a warm-up and again after several times as many requests. Anything kept per request (a cache
keyed by the request, a list of answers, a growing log) shows up as growth proportional to the requests.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

pytestmark = pytest.mark.anyio

_EVAL = {"model": "meta-llama/Llama-3.1-8B", "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
         "workload": {"input_tokens": {"distribution": "lognormal", "median": 1500, "p90": 4000},
                      "output_tokens": 300, "arrival": {"kind": "poisson", "rate_per_s": 4.0}}}
#: (method, path, body, expected status): the load test's mix, its plan made small
MIX = (
    ("GET", "/v1/gpus", None, 200),
    ("GET", "/v1/models/meta-llama/Llama-3.1-70B", None, 200),
    ("POST", "/v1/estimate/prefill",
     {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "prompt_tokens": 4096}, 200),
    ("POST", "/v1/estimate/decode",
     {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "batch_size": 32,
      "context_tokens": 4096}, 200),
    ("POST", "/v1/evaluate", _EVAL, 200),
    ("POST", "/v1/evaluate", {**_EVAL, "workload": {**_EVAL["workload"],
                                                     "arrival": {"kind": "closed_loop", "concurrency": 16}}}, 200),
    ("POST", "/v1/whatif", [_EVAL, {**_EVAL, "model": "no/such-model"}], 200),
    ("POST", "/v1/estimate/prefill", {"model": "meta-llama/Llama-3.1-8B", "gpu": "no-such-gpu",
                                      "prompt_tokens": 100}, 404),
    ("POST", "/v1/evaluate", {"model": "meta-llama/Llama-3.1-8B"}, 422),
)
WARMUP_ROUNDS = 15
MEASURED_ROUNDS = 45
#: growth allowed over the measured rounds [bytes]: interpreter noise (type caches, interned strings,
#: free-list high-water marks), far below one kept answer per request (405 requests, ~1-30 KB each)
MAX_GROWTH_BYTES = 192 * 1024


async def _round(client) -> None:  # noqa: ANN001
    for method, path, body, status in MIX:
        response = await client.request(method, path, json=body)
        assert response.status_code == status, (path, response.text[:300])


async def test_traced_memory_does_not_grow_with_requests(app, client_for) -> None:  # noqa: ANN001
    async with client_for(app) as client:
        for _ in range(WARMUP_ROUNDS):
            await _round(client)
        gc.collect()
        tracemalloc.start()
        try:
            for _ in range(3):  # allocations that settle after the first traced requests
                await _round(client)
            gc.collect()
            before, _ = tracemalloc.get_traced_memory()
            snapshot = tracemalloc.take_snapshot()
            for _ in range(MEASURED_ROUNDS):
                await _round(client)
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
            growth = after - before
            top = tracemalloc.take_snapshot().compare_to(snapshot, "lineno")[:5]
        finally:
            tracemalloc.stop()
    detail = "\n".join(str(stat) for stat in top)
    assert growth < MAX_GROWTH_BYTES, (
        f"{growth / 1024:.0f} KiB more traced memory after {MEASURED_ROUNDS * len(MIX)} requests:\n{detail}")
