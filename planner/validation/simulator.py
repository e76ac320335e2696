"""Discrete-event simulation of the serving scheduler: the check the closed form is held against.

Used only by tests and by ``docs/accuracy.md`` (issue 3, section 5); the planner's answers come from
``planner.serving``. It replays, request by request, the scheduler the closed form approximates:

Aggregated (per replica, vLLM's scheduler, ``chunked_prefill=True``)
    Each iteration first schedules every running decode (one token each), then spends what is left of
    ``token_budget`` on prefill in FCFS order: the partly prefilled request first, then waiting ones, each
    getting ``min(remaining prompt, remaining budget)`` tokens; at most ``max_batch_size`` sequences
    (decoding + prefilling) run. A waiting request is admitted only if its whole prompt plus the KV
    already held fits the worker's KV capacity, less ``kv_watermark`` of it kept free. When a decode
    step would overflow the KV cache, the most recently admitted running request is preempted: it frees
    its KV, returns to the head of the waiting queue and recomputes its prompt and the tokens it had
    generated (vLLM's recompute preemption).
    Without chunked prefill (vLLM's default policy): if the head of the queue can be admitted, the
    iteration is prefill-only with as many waiting prompts (FCFS) as fit ``token_budget`` and
    ``max_batch_size`` (a longer prompt alone); otherwise it is a decode-only iteration of all running
    sequences.
Disaggregated (Splitwise, DistServe)
    A prefill pool of ``workers`` workers takes prompts from one FCFS queue: an idle worker runs one
    prefill pass over up to ``max_batch_size`` waiting prompts whose tokens fit ``token_budget`` (or one
    longer prompt). The first token appears when the pass ends; the prompt's KV cache then moves to the
    decode pool (``kv_transfer_s``), and TTFT ends when the transfer does. The request joins the decode
    worker with the fewest running sequences (ties: lowest index) whose batch and KV cache have room,
    else waits in a FCFS decode-admission queue (``decode_routing="least_loaded"``); or, with
    ``decode_routing="round_robin"`` (a proxy that deals requests out in turn, blind to load), the next
    decode worker in turn, where it waits, FCFS, until that worker has room. Decode workers run
    decode-only iterations (and, after a preemption, recompute the victim's KV there with chunked
    prefill).

A request's first token appears at the end of the iteration that completes its prefill; then it emits one
token per iteration it decodes in until it has ``output_tokens`` tokens. Prompt tokens found in the prefix
cache (``round(prefix_cache_hit_fraction × input)``, at most ``input − 1``) need no prefill compute but
occupy KV. ``engine.request_overhead_s`` (front end: HTTP, tokenization) delays each request's entry into
the scheduler, so it is counted once in TTFT and in the end-to-end latency. A request holds
``prompt + tokens decoded`` KV slots; each decode step writes one more.

Iteration times come from :func:`planner.costs.passes.mixed_step_latency_s`, memoized
(:class:`CostModelStepTime`): token counts exact, the mean decode context and the chunks' token-weighted
mean offset in ~5 % buckets; a caller's ``step_time`` is called with exact values. A run of decode-only
iterations during which nothing can change (no completion, no admission, KV room, the mean decode
context in one bucket, whose value at the run's start is used throughout) is advanced in one event and
cut short by any arrival, so light loads cost a few events per request.

References: Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention" (vLLM, SOSP
2023), Sec. 4.5 (scheduling and recompute preemption); Agrawal et al., "Sarathi-Serve" (OSDI 2024),
Sec. 4 (stall-free batching, chunked prefill); Patel et al., "Splitwise" (ISCA 2024) and Zhong et al.,
"DistServe" (OSDI 2024) for the disaggregated pools.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from planner.costs.memory import memory_plan
from planner.costs.passes import mixed_step_latency_s
from planner.costs.types import CostContext, Parallelism
from planner.errors import InvalidInput, ModelDoesNotFit
from planner.hardware import GpuSpec
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, LatencyStats, ServingProblem
from planner.serving.workload import LengthDistribution
from planner.units import DTYPE_BYTES

FloatArray = NDArray[np.float64]
#: ``step_time(*, decode_batch, decode_context_tokens, prefill_tokens, prefill_cached_tokens,
#: prefill_sequences) -> seconds``, the keywords of :func:`mixed_step_latency_s`
StepTime = Callable[..., float]
#: ``kv_transfer_s(prompt_tokens) -> seconds``
KvTransfer = Callable[[int], float]

#: geometric bucket ratio of the step-time memo
BUCKET_RATIO = 1.05
#: contexts and offsets below this are memoized exactly (rounded to an integer)
EXACT_BELOW = 16.5
_LOG = math.log(BUCKET_RATIO)
_INV_LOG = 1.0 / _LOG

_NEXT_ARRIVAL, _ARRIVAL, _ITER_END, _PREFILL_END, _TRANSFER_END = 0, 1, 2, 3, 4
METRICS = ("ttft_s", "e2e_s", "tpot_s", "itl_s")
#: how a disaggregated request picks its decode worker (``simulate(decode_routing=...)``)
DECODE_ROUTINGS = ("least_loaded", "round_robin")


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)
class SimulationResult:
    """What a benchmark of the simulated deployment measures, after the warm-up requests.

    Per-request arrays are in issue order. ``requests_per_s``, ``output_tokens_per_s``,
    ``mean_decode_batch`` and ``utilization`` count completions, emitted tokens, decode iterations and
    busy time (of any request) from the issue of the first measured request to the issue of the last
    one, the span in which the offered load is steady.
    """

    #: time each measured request was issued (arrival at the front end) [s]
    arrival_s: FloatArray
    ttft_s: FloatArray
    e2e_s: FloatArray
    #: (last token − first token) / (output tokens − 1); NaN for one-token outputs [s]
    tpot_s: FloatArray
    output_tokens: NDArray[np.int64]
    input_tokens: NDArray[np.int64]
    #: KV-transfer time of each request, prefill end to TTFT (zero when aggregated) [s]
    kv_transfer_s: FloatArray
    #: every gap between consecutive tokens of the measured requests [s]
    itl_s: FloatArray
    #: mean batch of the decode iterations in the window (per worker; decode workers when disaggregated)
    mean_decode_batch: float
    requests_per_s: float
    output_tokens_per_s: float
    #: busy fraction of the workers in the window: "gpu" and "prefill_lane" (iterations carrying prefill
    #: tokens) when aggregated; "prefill_pool" and "decode_pool" when disaggregated
    utilization: dict[str, float]
    #: preemptions over the whole run, and the prefill tokens recomputed because of them
    num_preemptions: int
    recomputed_tokens: int
    #: length of the measurement window [s]
    window_s: float
    #: sequences decoding per (decode) worker, averaged over the window's time (idle time counts as none;
    #: a prefill-only iteration counts the streams it stalls), and their variance over that mean
    decode_batch_time_mean: float
    decode_batch_dispersion: float
    #: share of the window's time (per decode worker) whose iterations left the head of the waiting queue
    #: out for want of KV cache or a batch slot (``max_batch_size``), not of token budget (aggregated; a
    #: decode pool's admission queue is not counted: 0)
    admission_blocked_share: float = 0.0

    def stats(self, name: str) -> LatencyStats:
        """Mean, p50, p90 and p99 of ``ttft_s``, ``e2e_s``, ``tpot_s`` or ``itl_s`` [s] (NaNs dropped)."""
        if name not in METRICS:
            raise InvalidInput(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}", field="name")
        values = np.asarray(getattr(self, name), dtype=np.float64)
        values = values[np.isfinite(values)]
        if values.size == 0:
            nan = float("nan")
            return LatencyStats(mean=nan, p50=nan, p90=nan, p99=nan)
        p50, p90, p99 = np.percentile(values, [50.0, 90.0, 99.0])
        return LatencyStats(mean=float(values.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


# --------------------------------------------------------------------------------------------------
# step time
# --------------------------------------------------------------------------------------------------


def _bucket(x: float) -> int:
    """Memo key of a context or offset [tokens]: itself below 16.5, else minus its nearest 5 % geometric
    index (so each bucket spans ±2.5 % around ``1.05**index``)."""
    if x < EXACT_BELOW:
        return int(x + 0.5)
    return -int(math.log(x) * _INV_LOG + 0.5)


def _bucket_value(key: int) -> float:
    return float(key) if key >= 0 else math.exp(-key * _LOG)


def _bucket_upper_edge(x: float) -> float:
    """The smallest value above ``x`` whose bucket differs from that of ``x``."""
    if x < EXACT_BELOW:
        return min(float(int(x + 0.5)) + 0.5, EXACT_BELOW)
    return math.exp((int(math.log(x) * _INV_LOG + 0.5) + 0.5) * _LOG)


class CostModelStepTime:
    """:func:`mixed_step_latency_s` of one worker, memoized.

    Token counts are exact, because the cost model's tile and wave quantization make the step time a
    staircase in them (a batch of 65 costs a GEMM tile more than one of 64); the mean decode context and
    the chunks' mean offset, on which the time depends smoothly, are rounded to ~5 % buckets. A miss
    fills a whole row in one vectorized call (~1 ms): every batch size up to ``max_batch_size`` for
    the iteration's prefill shape, or, for a prefill-only iteration, every token count up to
    ``token_budget``. Pass one instance as ``step_time`` to several :func:`simulate` runs of the same
    worker to share its memo.
    """

    def __init__(self, ctx: CostContext, *, max_batch_size: int, token_budget: int) -> None:
        self.ctx = ctx
        self.max_batch_size = max_batch_size
        self.token_budget = token_budget
        self._rows: dict[tuple[int, int, int, int], list[float]] = {}
        self._prefill_rows: dict[tuple[int, int], list[float]] = {}
        self._long_prefills: dict[tuple[int, int, int], float] = {}

    def __call__(self, *, decode_batch: int, decode_context_tokens: float, prefill_tokens: int,
                 prefill_cached_tokens: float = 0.0, prefill_sequences: int = 1) -> float:
        """Iteration time [s], with the keywords of :func:`mixed_step_latency_s` (scalars)."""
        empty = decode_batch + prefill_tokens < 1
        if not 0 <= decode_batch <= self.max_batch_size or prefill_tokens < 0 or empty:
            raise InvalidInput(f"need 0 <= decode_batch <= {self.max_batch_size}, prefill_tokens >= 0 and "
                               "something to compute", field="decode_batch")
        return self.lookup(int(decode_batch), float(decode_context_tokens), int(prefill_tokens),
                           float(prefill_cached_tokens), int(prefill_sequences))

    def lookup(self, batch: int, context: float, tokens: int, offset: float, sequences: int) -> float:
        if batch:
            key = (_bucket(context), tokens, _bucket(offset) if tokens else 0, sequences if tokens else 0)
            row = self._rows.get(key)
            if row is None:
                row = self._fill_batch_row(key)
            return row[batch]
        o = _bucket(offset)
        if tokens > self.token_budget:
            t = self._long_prefills.get((tokens, o, sequences))
            if t is None:
                t = float(mixed_step_latency_s(self.ctx, decode_batch=0, decode_context_tokens=0.0,
                                               prefill_tokens=tokens, prefill_cached_tokens=_bucket_value(o),
                                               prefill_sequences=sequences))
                self._long_prefills[(tokens, o, sequences)] = t
            return t
        prow = self._prefill_rows.get((o, sequences))
        if prow is None:
            prow = self._fill_prefill_row(o, sequences)
        return prow[tokens]

    def _fill_batch_row(self, key: tuple[int, int, int, int]) -> list[float]:
        c, p, o, s = key
        batch = np.arange(1, self.max_batch_size + 1, dtype=np.float64)
        times = mixed_step_latency_s(
            self.ctx, decode_batch=batch, decode_context_tokens=_bucket_value(c), prefill_tokens=p,
            prefill_cached_tokens=_bucket_value(o), prefill_sequences=s,
        )
        row = [math.nan] + [float(t) for t in np.broadcast_to(times, batch.shape)]
        self._rows[key] = row
        return row

    def _fill_prefill_row(self, o: int, s: int) -> list[float]:
        # only counts of at least one token per chunk are ever looked up
        tokens = np.arange(max(s, 1), self.token_budget + 1, dtype=np.float64)
        times = mixed_step_latency_s(
            self.ctx, decode_batch=0, decode_context_tokens=0.0, prefill_tokens=tokens,
            prefill_cached_tokens=_bucket_value(o), prefill_sequences=s,
        )
        row = [math.nan] * max(s, 1) + [float(t) for t in np.broadcast_to(times, tokens.shape)]
        self._prefill_rows[(o, s)] = row
        return row


def _worker_step(step_time: StepTime | None, ctx: CostContext, max_batch: int, budget: int
                 ) -> Callable[[int, float, int, float, int], float]:
    """The positional step-time function a worker calls: memoized cost model, or the caller's."""
    if step_time is None:
        return CostModelStepTime(ctx, max_batch_size=max_batch, token_budget=budget).lookup
    if isinstance(step_time, CostModelStepTime):
        if step_time.max_batch_size < max_batch:
            raise InvalidInput(f"the step_time memo covers batches up to {step_time.max_batch_size}, the "
                               f"deployment runs {max_batch}", field="step_time")
        return step_time.lookup
    return _injected_step(step_time)


def _injected_step(step_time: StepTime) -> Callable[[int, float, int, float, int], float]:
    def step(batch: int, context: float, tokens: int, offset: float, sequences: int) -> float:
        t = float(step_time(decode_batch=batch, decode_context_tokens=context, prefill_tokens=tokens,
                            prefill_cached_tokens=offset, prefill_sequences=sequences))
        if not (t > 0.0 and math.isfinite(t)):
            raise InvalidInput(f"step_time must return a positive, finite time, got {t!r}", field="step_time")
        return t

    return step


# --------------------------------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------------------------------


class _Request:
    __slots__ = ("rid", "client", "issue_s", "n_in", "n_cached", "n_out", "emitted", "target", "done",
                 "decoding", "held0", "j0", "epoch", "segments", "first_token_s", "finish_s", "transfer_s",
                 "preempted", "route")

    def __init__(self, rid: int, client: int, issue_s: float, n_in: int, n_cached: int, n_out: int) -> None:
        self.rid = rid
        self.client = client
        self.issue_s = issue_s
        self.n_in = n_in
        self.n_cached = n_cached
        self.n_out = n_out
        self.emitted = 0  # tokens emitted so far (exact while not decoding)
        self.target = n_in  # tokens whose KV the next prefill must hold: prompt + tokens emitted
        self.done = n_cached  # of them, already in the KV cache
        self.decoding = False
        self.held0 = 0  # KV held when the current decode run began
        self.j0 = 0  # decode-iteration index of the worker where it began
        self.epoch = 0  # bumped on preemption: invalidates finish-heap entries
        #: [explicit token time, worker, first decode iteration, last decode iteration] per decode run
        self.segments: list[list[Any]] = []
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.transfer_s = 0.0
        self.preempted = False
        self.route = -1  # the decode worker a round-robin router sent it to (-1: least loaded)


class _Worker:
    """One worker running continuous batching (an aggregated replica or a decode worker)."""

    __slots__ = ("index", "chunked", "max_batch", "budget", "capacity", "step", "waiting", "running",
                 "pending", "num_decoding", "context_sum", "used", "next_decode", "finish_heap", "partial",
                 "busy", "bulk", "epoch", "run", "tokens", "blocked", "admit_limit")

    def __init__(self, index: int, *, chunked: bool, max_batch: int, budget: int, capacity: int,
                 step: Callable[[int, float, int, float, int], float], watermark_tokens: int = 0) -> None:
        self.index = index
        self.chunked = chunked
        self.max_batch = max_batch
        self.budget = budget
        self.capacity = capacity
        self.admit_limit = capacity - watermark_tokens  # admissions keep this much KV free
        self.step = step
        self.waiting: deque[_Request] = deque()
        self.running: dict[int, _Request] = {}  # in admission order
        self.pending: list[_Request] = []  # joined from the decode-admission queue, merged at next start
        self.num_decoding = 0
        self.context_sum = 0  # KV tokens held by the decoding sequences
        self.used = 0  # KV tokens held or reserved
        self.next_decode = 0  # index of the next decode iteration
        self.finish_heap: list[tuple[int, int, int, _Request]] = []
        self.partial: _Request | None = None
        self.busy = False
        self.bulk = False  # the iteration in flight is a run of several decode-only iterations
        self.epoch = 0
        self.run: tuple[float, float, int, int, list[tuple[_Request, int]]] = (0.0, 0.0, 0, 0, [])
        self.tokens = 0  # prefill tokens of the iteration in flight
        self.blocked = False  # the iteration in flight left a prompt waiting for KV cache or a batch slot


class _PrefillWorker:
    __slots__ = ("index", "batch")

    def __init__(self, index: int) -> None:
        self.index = index
        self.batch: list[_Request] = []  # the prompts of the pass in flight


# --------------------------------------------------------------------------------------------------
# the simulation
# --------------------------------------------------------------------------------------------------


def _draw_lengths(rng: np.random.Generator, dist: LengthDistribution, n: int) -> NDArray[np.int64]:
    values = np.maximum(np.rint(np.asarray(dist.values, dtype=np.float64)), 1.0).astype(np.int64)
    weights = np.asarray(dist.weights, dtype=np.float64)
    return values[rng.choice(values.size, size=n, p=weights / weights.sum())]


def _context(problem: ServingProblem, gpu: GpuSpec, parallelism: Parallelism) -> CostContext:
    return CostContext(model=problem.model, gpu=gpu, engine=problem.engine, weight_dtype=problem.weight_dtype,
                       kv_dtype=problem.kv_dtype, parallelism=parallelism)


def _kv_capacity(ctx: CostContext, typical_context: int, pool: str) -> int:
    plan = memory_plan(ctx, max_context_tokens=typical_context)
    if not plan.fits:
        raise ModelDoesNotFit(
            f"{ctx.model.id} ({ctx.weight_dtype}) does not fit on the {pool}'s {ctx.gpu.id} with "
            f"tp={ctx.parallelism.tp}, pp={ctx.parallelism.pp}", pool=pool,
            weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
            usable_bytes_per_gpu=plan.memory_bytes - plan.reserved_bytes_per_gpu,
        )
    return int(plan.kv_capacity_tokens)


class _Simulation:
    def __init__(self, problem: ServingProblem, *, num_requests: int, warmup_requests: int, seed: int,
                 step_time: StepTime | None, kv_transfer_s: KvTransfer | None,
                 kv_capacity_tokens: int | None, kv_watermark: float = 0.0,
                 decode_routing: str = "least_loaded") -> None:
        if num_requests < 1 or not 0 <= warmup_requests < num_requests:
            raise InvalidInput(f"need 0 <= warmup_requests < num_requests, got {warmup_requests} and "
                               f"{num_requests}", field="warmup_requests")
        self.problem = problem
        self.kv_watermark = kv_watermark
        self.round_robin = decode_routing == "round_robin"
        self.next_route = 0
        self.num_requests = num_requests
        self.warmup = warmup_requests
        w = problem.workload
        rng = np.random.default_rng(seed)
        self.n_in = _draw_lengths(rng, w.input_tokens, num_requests)
        self.n_out = _draw_lengths(rng, w.output_tokens, num_requests)
        hits = np.rint(w.prefix_cache_hit_fraction * self.n_in)
        self.n_cached = np.minimum(hits, self.n_in - 1).astype(np.int64)
        arr = w.arrival
        self.closed = arr.kind == "closed_loop"
        gaps = np.zeros(0)
        if arr.kind == "poisson":
            gaps = rng.exponential(1.0 / float(arr.rate_per_s or 0.0), size=num_requests)
        elif arr.kind == "gamma":
            cv2 = arr.cv**2
            gaps = rng.gamma(1.0 / cv2, cv2 / float(arr.rate_per_s or 0.0), size=num_requests)
        self.arrival_times = np.cumsum(gaps).tolist()
        self.overhead_s = float(problem.engine.request_overhead_s)
        self.requests: list[_Request] = []
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.seq = 0
        self.num_preemptions = 0
        self.recomputed_tokens = 0
        # one record per iteration (or run of identical decode-only iterations), in the order they end
        self.rec_worker: list[int] = []
        self.rec_start_s: list[float] = []
        self.rec_duration_s: list[float] = []
        self.rec_iterations: list[int] = []
        self.rec_decode_batch: list[int] = []
        self.rec_prefill_tokens: list[int] = []
        #: sequences decoding on the worker during the record (for a prefill-only iteration: those it stalls)
        self.rec_decoding: list[int] = []
        self.rec_blocked: list[bool] = []
        # the memory plan sees the context the longest input and output reach (as the closed form does)
        self.typical_context = max(int(w.input_tokens.max + w.output_tokens.max), 1)
        self.longest_request = int(self.n_in.max() + self.n_out.max()) - 1
        self.workers: list[_Worker] = []
        self.prefill_workers: list[_PrefillWorker] = []
        dep = problem.deployment
        if isinstance(dep, AggregatedDeployment):
            self.disaggregated = False
            self._setup_aggregated(dep, step_time, kv_capacity_tokens)
        elif isinstance(dep, DisaggregatedDeployment):
            self.disaggregated = True
            self._setup_disaggregated(dep, step_time, kv_transfer_s, kv_capacity_tokens)
        else:
            raise InvalidInput("unknown deployment kind", field="deployment")

    def _setup_aggregated(self, dep: AggregatedDeployment, step_time: StepTime | None,
                          kv_capacity_tokens: int | None) -> None:
        if dep.replicas < 1 or dep.max_batch_size < 1 or dep.token_budget < 1:
            raise InvalidInput("replicas, max_batch_size and token_budget must be >= 1", field="deployment")
        ctx = _context(self.problem, dep.gpu, dep.parallelism)
        capacity = kv_capacity_tokens
        if capacity is None:
            capacity = _kv_capacity(ctx, self.typical_context, "replica")
        # an admission leaves the watermark free: the longest request must fit what is left
        self._check_fits(capacity - int(self.kv_watermark * capacity), self.longest_request, "replica")
        step = _worker_step(step_time, ctx, dep.max_batch_size, dep.token_budget)
        for i in range(dep.replicas):
            self.workers.append(_Worker(i, chunked=dep.chunked_prefill, max_batch=dep.max_batch_size,
                                        budget=dep.token_budget, capacity=capacity, step=step,
                                        watermark_tokens=int(self.kv_watermark * capacity)))
        self.pools = {"gpu": list(range(dep.replicas))}

    def _setup_disaggregated(self, dep: DisaggregatedDeployment, step_time: StepTime | None,
                             kv_transfer_s: KvTransfer | None, kv_capacity_tokens: int | None) -> None:
        pre, dec = dep.prefill, dep.decode
        if min(pre.workers, dec.workers, pre.max_batch_size, dec.max_batch_size, pre.token_budget,
               dec.token_budget) < 1:
            raise InvalidInput("pool workers, max_batch_size and token_budget must be >= 1",
                               field="deployment")
        pre_ctx = _context(self.problem, pre.gpu, pre.parallelism)
        dec_ctx = _context(self.problem, dec.gpu, dec.parallelism)
        capacity = kv_capacity_tokens
        if capacity is None:
            pre_capacity = _kv_capacity(pre_ctx, self.typical_context, "prefill pool")
            self._check_fits(pre_capacity, int(self.n_in.max()), "prefill worker")
            capacity = _kv_capacity(dec_ctx, self.typical_context, "decode pool")
        self._check_fits(capacity, self.longest_request, "decode worker")
        self.pre_step = _worker_step(step_time, pre_ctx, 0, pre.token_budget)
        self.pre_budget, self.pre_max_batch = pre.token_budget, pre.max_batch_size
        self.prefill_workers = [_PrefillWorker(i) for i in range(pre.workers)]
        self.idle_prefill = list(range(pre.workers))  # a heap: the lowest index is taken first
        step = _worker_step(step_time, dec_ctx, dec.max_batch_size, dec.token_budget)
        for i in range(dec.workers):
            self.workers.append(_Worker(pre.workers + i, chunked=True, max_batch=dec.max_batch_size,
                                        budget=dec.token_budget, capacity=capacity, step=step))
        self.prefill_queue: deque[_Request] = deque()
        self.decode_queue: deque[_Request] = deque()
        if kv_transfer_s is None:
            model, kv_dtype = self.problem.model, self.problem.kv_dtype
            kv_bytes_per_token = model.kv_cache_bytes_per_token(DTYPE_BYTES[kv_dtype])
            bandwidth_bytes_per_s = pre.gpu.scale_out_bandwidth_bytes_per_s

            def kv_transfer_s(prompt_tokens: int) -> float:
                return prompt_tokens * kv_bytes_per_token / bandwidth_bytes_per_s

        self.kv_transfer = kv_transfer_s
        self.pools = {"prefill_pool": list(range(pre.workers)),
                      "decode_pool": [pre.workers + i for i in range(dec.workers)]}

    @staticmethod
    def _check_fits(capacity: int, longest: int, where: str) -> None:
        if capacity < longest:
            raise ModelDoesNotFit(
                f"the KV cache of one {where} holds {capacity} tokens, less than the longest request "
                f"(prompt + output − 1 = {longest} tokens), which could never finish",
                kv_capacity_tokens=capacity, needed_kv_tokens=longest,
            )

    # ---- events ----------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, obj: Any, epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, epoch))

    def _issue(self, client: int, now: float) -> _Request:
        rid = len(self.requests)
        r = _Request(rid, client, now, int(self.n_in[rid]), int(self.n_cached[rid]), int(self.n_out[rid]))
        self.requests.append(r)
        return r

    def _issue_and_enter(self, client: int, now: float) -> None:
        r = self._issue(client, now)
        if self.overhead_s > 0.0:
            self._push(now + self.overhead_s, _ARRIVAL, [r])
        else:
            self._enter([r], now)

    def _enter(self, reqs: list[_Request], now: float) -> None:
        """Requests reach the scheduler (after the front end): queue them, then wake what must run."""
        if self.disaggregated:
            self.prefill_queue.extend(reqs)
            while self.idle_prefill and self.prefill_queue:
                self._dispatch_prefill(self.prefill_workers[heapq.heappop(self.idle_prefill)], now)
            return
        workers = self.workers
        touched: list[_Worker] = []
        for r in reqs:
            w = workers[r.client % len(workers)]
            w.waiting.append(r)
            if w not in touched:
                touched.append(w)
        for w in touched:
            if not w.busy:
                self._start(w, now)
            elif w.bulk:
                self._interrupt(w, now)

    def run(self) -> None:
        if self.closed:
            # every client's first request at t = 0, all seen by the first iteration
            concurrency = int(self.problem.workload.arrival.concurrency or 1)
            burst = [self._issue(c, 0.0) for c in range(min(concurrency, self.num_requests))]
            if self.overhead_s > 0.0:
                self._push(self.overhead_s, _ARRIVAL, burst)
            else:
                self._enter(burst, 0.0)
        else:
            self._push(self.arrival_times[0], _NEXT_ARRIVAL, None)
        heap = self.heap
        pop = heapq.heappop
        while heap:
            t, _, kind, obj, epoch = pop(heap)
            if kind == _ITER_END:
                if epoch == obj.epoch:
                    self._end(obj, t)
            elif kind == _ARRIVAL:
                self._enter(obj, t)
            elif kind == _TRANSFER_END:
                self._transfer_end(obj, t)
            elif kind == _PREFILL_END:
                self._prefill_end(obj, t)
            else:  # the next open-loop arrival; requests go to replicas round-robin
                rid = len(self.requests)
                self._issue_and_enter(rid, t)
                if rid + 1 < self.num_requests:
                    self._push(self.arrival_times[rid + 1], _NEXT_ARRIVAL, None)

    def _record(self, worker: int, start_s: float, duration_s: float, iterations: int, decode_batch: int,
                prefill_tokens: int, decoding: int = 0, blocked: bool = False) -> None:
        self.rec_worker.append(worker)
        self.rec_start_s.append(start_s)
        self.rec_duration_s.append(duration_s)
        self.rec_iterations.append(iterations)
        self.rec_decode_batch.append(decode_batch)
        self.rec_prefill_tokens.append(prefill_tokens)
        self.rec_decoding.append(decoding)
        self.rec_blocked.append(blocked)

    # ---- a continuous-batching worker --------------------------------------------------------------

    def _begin_decode(self, w: _Worker, r: _Request, held: int) -> None:
        r.decoding = True
        r.held0 = held
        r.j0 = w.next_decode
        seg = r.segments[-1]
        seg[1] = w.index
        seg[2] = w.next_decode
        w.num_decoding += 1
        w.context_sum += held
        heapq.heappush(w.finish_heap, (w.next_decode + r.n_out - r.emitted - 1, r.rid, r.epoch, r))

    def _preempt(self, w: _Worker) -> None:
        _, v = w.running.popitem()  # the most recently admitted
        if v.decoding:
            steps = w.next_decode - v.j0
            held = v.held0 + steps
            v.emitted += steps
            v.segments[-1][3] = w.next_decode - 1
            v.decoding = False
            w.num_decoding -= 1
            w.context_sum -= held
            w.used -= held
        else:
            w.used -= v.target
            if w.partial is v:
                w.partial = None
        v.epoch += 1
        v.target = v.n_in + v.emitted
        v.done = v.n_cached
        v.preempted = True
        w.waiting.appendleft(v)
        self.num_preemptions += 1

    def _admit(self, w: _Worker, r: _Request) -> None:
        w.waiting.popleft()
        w.running[r.rid] = r
        w.used += r.target
        r.done = r.n_cached
        if r.preempted:
            self.recomputed_tokens += r.target - r.n_cached

    def _start(self, w: _Worker, now: float) -> None:
        """Plan and launch the next iteration (or a run of identical decode-only ones); idle if none.

        ``w.used`` counts, besides the KV held, the slots the iterations in flight will write.
        """
        if w.pending:
            for r in w.pending:
                w.running[r.rid] = r
                self._begin_decode(w, r, r.n_in)
            w.pending.clear()
        chunks: list[tuple[_Request, int]] = []
        tokens = 0
        offset_sum = 0
        running, waiting = w.running, w.waiting
        batch = 0
        if w.chunked:
            while w.num_decoding and w.used + w.num_decoding > w.capacity:
                self._preempt(w)
            batch = w.num_decoding
            w.used += batch
            left = w.budget - batch
            p = w.partial
            if p is not None and left > 0:
                n = min(p.target - p.done, left)
                chunks.append((p, n))
                tokens += n
                offset_sum += n * p.done
                left -= n
            while left > 0 and waiting and len(running) < w.max_batch:
                r = waiting[0]
                if w.used + r.target > w.admit_limit:
                    break
                self._admit(w, r)
                n = min(r.target - r.done, left)
                chunks.append((r, n))
                tokens += n
                offset_sum += n * r.done
                left -= n
        else:
            while True:
                if waiting and len(running) < w.max_batch and w.used + waiting[0].target <= w.admit_limit:
                    while waiting and len(running) < w.max_batch:  # a prefill-only iteration
                        r = waiting[0]
                        n = r.target - r.n_cached
                        if (chunks and tokens + n > w.budget) or w.used + r.target > w.admit_limit:
                            break
                        self._admit(w, r)
                        chunks.append((r, n))
                        tokens += n
                        offset_sum += n * r.done
                    break
                if not w.num_decoding:
                    break
                while w.num_decoding and w.used + w.num_decoding > w.capacity:
                    self._preempt(w)
                if w.num_decoding:  # a decode-only iteration
                    batch = w.num_decoding
                    w.used += batch
                    break
        if not batch and not chunks:
            w.busy = False
            return
        # the head of the queue stays out for want of KV cache or a batch slot (not of token budget)
        w.blocked = bool(waiting) and (len(running) >= w.max_batch
                                       or w.used + waiting[0].target > w.admit_limit)
        context = w.context_sum / batch if batch else 0.0
        k = 1
        if chunks:
            dur = w.step(batch, context, tokens, offset_sum / tokens, len(chunks))
        else:
            dur = w.step(batch, context, 0, 0.0, 0)
            # nothing changes until the first completion, an arrival (which interrupts), the KV cache
            # filling up or the mean context leaving its bucket
            fh = w.finish_heap
            while fh[0][2] != fh[0][3].epoch:
                heapq.heappop(fh)
            k = min(fh[0][0] - w.next_decode + 1, 1 + (w.capacity - w.used) // batch,
                    math.ceil(_bucket_upper_edge(context) - context))
            if k > 1 and not (self.disaggregated and self.decode_queue):
                w.used += batch * (k - 1)
            else:
                k = 1
        w.busy = True
        w.bulk = k > 1
        w.run = (now, dur, k, batch, chunks)
        w.tokens = tokens
        self._push(now + k * dur, _ITER_END, w, w.epoch)

    @staticmethod
    def _iterations_by(w: _Worker, now: float) -> int:
        """Iterations of the run in flight that will have ended once the one running at ``now`` ends."""
        start, dur, k, _, _ = w.run
        return min(k, int((now - start) / dur) + 1)

    def _interrupt(self, w: _Worker, now: float) -> None:
        """Something arrived during a run of decode-only iterations: stop it after the one in flight."""
        start, dur, k, batch, chunks = w.run
        w.bulk = False
        k_new = self._iterations_by(w, now)
        if k_new < k:
            w.epoch += 1
            w.used -= batch * (k - k_new)
            w.run = (start, dur, k_new, batch, chunks)
            self._push(max(start + k_new * dur, now), _ITER_END, w, w.epoch)

    def _end(self, w: _Worker, now: float) -> None:
        start, dur, k, batch, chunks = w.run
        w.bulk = False
        self._record(w.index, start, dur, k, batch, w.tokens, w.num_decoding, w.blocked)
        finished: list[_Request] = []
        if batch:
            w.next_decode += k
            w.context_sum += batch * k
            fh = w.finish_heap
            last = w.next_decode
            while fh and fh[0][0] < last:
                _, _, epoch, r = heapq.heappop(fh)
                if epoch != r.epoch:
                    continue
                held = r.held0 + (last - r.j0)
                r.emitted += last - r.j0
                r.segments[-1][3] = last - 1
                r.decoding = False
                w.num_decoding -= 1
                w.context_sum -= held
                w.used -= held
                del w.running[r.rid]
                finished.append(r)
        for r, n in chunks:
            r.done += n
            if r.done < r.target:
                w.partial = r
                continue
            if w.partial is r:
                w.partial = None
            r.emitted += 1
            r.segments.append([now, -1, 0, -1])
            if math.isnan(r.first_token_s):  # the request's first token
                r.first_token_s = now
            if r.emitted >= r.n_out:
                w.used -= r.target
                del w.running[r.rid]
                finished.append(r)
            else:
                self._begin_decode(w, r, r.target)
        for r in finished:
            self._finish(r, now)
        if self.disaggregated and self.decode_queue:
            self._admit_decode(now)
        w.busy = False
        self._start(w, now)

    def _finish(self, r: _Request, now: float) -> None:
        r.finish_s = now
        if self.closed and len(self.requests) < self.num_requests:
            self._issue_and_enter(r.client, now)

    # ---- disaggregated pools -----------------------------------------------------------------------

    def _dispatch_prefill(self, pw: _PrefillWorker, now: float) -> None:
        q = self.prefill_queue
        first = q.popleft()
        batch = [first]
        tokens = first.n_in - first.n_cached
        offset_sum = tokens * first.n_cached
        while q and len(batch) < self.pre_max_batch:
            n = q[0].n_in - q[0].n_cached
            if tokens + n > self.pre_budget:
                break
            r = q.popleft()
            batch.append(r)
            tokens += n
            offset_sum += n * r.n_cached
        pw.batch = batch
        dur = self.pre_step(0, 0.0, tokens, offset_sum / tokens, len(batch))
        self._record(pw.index, now, dur, 1, 0, tokens)
        self._push(now + dur, _PREFILL_END, pw)

    def _prefill_end(self, pw: _PrefillWorker, now: float) -> None:
        for r in pw.batch:
            r.transfer_s = float(self.kv_transfer(r.n_in))
            self._push(now + r.transfer_s, _TRANSFER_END, r)
        pw.batch = []
        if self.prefill_queue:
            self._dispatch_prefill(pw, now)
        else:
            heapq.heappush(self.idle_prefill, pw.index)

    def _transfer_end(self, r: _Request, now: float) -> None:
        r.first_token_s = now
        r.emitted = 1
        r.segments.append([now, -1, 0, -1])
        if r.n_out <= 1:
            self._finish(r, now)
            return
        if self.round_robin:
            r.route = self.next_route
            self.next_route = (self.next_route + 1) % len(self.workers)
        self.decode_queue.append(r)
        self._admit_decode(now)

    def _room_for(self, w: _Worker, r: _Request, now: float) -> bool:
        """Has decode worker ``w`` a batch place and KV room for ``r`` (not counting the slots a run in flight
        reserved beyond the iteration an arrival would cut it to)?"""
        used = w.used
        if w.bulk:
            used -= w.run[3] * (w.run[2] - self._iterations_by(w, now))
        return len(w.running) + len(w.pending) < w.max_batch and used + r.n_in <= w.capacity

    def _join(self, w: _Worker, r: _Request, now: float) -> None:
        """``r`` joins decode worker ``w`` at its next iteration (which starts now if it is idle)."""
        w.pending.append(r)
        w.used += r.n_in
        if not w.busy:
            self._start(w, now)
        elif w.bulk:
            self._interrupt(w, now)

    def _admit_routed(self, now: float) -> None:
        """Round-robin routing: each waiting request joins its own worker once that one has room; a request
        that cannot blocks only the ones routed behind it to the same worker."""
        q = self.decode_queue
        blocked: set[int] = set()
        kept: deque[_Request] = deque()
        while q:
            r = q.popleft()
            w = self.workers[r.route]
            if r.route in blocked or w.waiting or not self._room_for(w, r, now):
                blocked.add(r.route)
                kept.append(r)
                continue
            self._join(w, r, now)
        self.decode_queue = kept
        for i in blocked:
            if self.workers[i].bulk:
                self._interrupt(self.workers[i], now)

    def _admit_decode(self, now: float) -> None:
        if self.round_robin:
            self._admit_routed(now)
            return
        q = self.decode_queue
        while q:
            r = q[0]
            best: _Worker | None = None
            best_n = 0
            for w in self.workers:
                if w.waiting:
                    continue
                n = len(w.running) + len(w.pending)
                if (best is None or n < best_n) and self._room_for(w, r, now):
                    best, best_n = w, n
            if best is None:
                # someone waits for room: decode workers go iteration by iteration (their iteration ends
                # are when room can appear) until the queue drains
                for w in self.workers:
                    if w.bulk:
                        self._interrupt(w, now)
                return
            q.popleft()
            self._join(best, r, now)

    # ---- results -----------------------------------------------------------------------------------

    def _decode_end_times(self) -> tuple[FloatArray, NDArray[np.int64]]:
        """End time of every decode iteration, worker by worker on one index, and each worker's offset."""
        worker = np.asarray(self.rec_worker, dtype=np.int64)
        iterations = np.asarray(self.rec_iterations, dtype=np.int64)
        runs = np.flatnonzero(np.asarray(self.rec_decode_batch) > 0)
        runs = runs[np.argsort(worker[runs], kind="stable")]
        per_worker = np.bincount(worker[runs], weights=iterations[runs],
                                 minlength=len(self.workers) + len(self.prefill_workers)).astype(np.int64)
        assert all(per_worker[w.index] == w.next_decode for w in self.workers)
        k = iterations[runs]
        run_of = np.repeat(np.arange(runs.size), k)
        within = np.arange(run_of.size) - np.repeat(np.cumsum(k) - k, k)
        start = np.asarray(self.rec_start_s)[runs][run_of]
        duration = np.asarray(self.rec_duration_s)[runs][run_of]
        return start + duration * (within + 1), np.cumsum(per_worker) - per_worker

    def _token_times(self, measured: list[_Request]) -> tuple[FloatArray, NDArray[np.int64]]:
        """Every token's time, request by request, and the position of the request it belongs to."""
        decode_end_s, offsets = self._decode_end_times()
        seg_req, seg_s, seg_first, seg_len = [], [], [], []
        for i, r in enumerate(measured):
            for t, worker, j0, j1 in r.segments:
                seg_req.append(i)
                seg_s.append(t)
                seg_first.append(int(offsets[worker]) + j0 if worker >= 0 else 0)
                seg_len.append(max(j1 - j0 + 1, 0))
        # a segment: one token at its own time (end of a prefill, or of the KV transfer), then decodes
        counts = np.asarray(seg_len, dtype=np.int64) + 1
        seg_of = np.repeat(np.arange(counts.size), counts)
        pos = np.arange(seg_of.size) - np.repeat(np.cumsum(counts) - counts, counts)
        if decode_end_s.size:
            decoded = decode_end_s[np.clip(np.asarray(seg_first)[seg_of] + pos - 1, 0, decode_end_s.size - 1)]
        else:
            decoded = np.zeros(seg_of.size)
        token_s = np.where(pos == 0, np.asarray(seg_s)[seg_of], decoded)
        return token_s, np.asarray(seg_req, dtype=np.int64)[seg_of]

    def result(self) -> SimulationResult:
        reqs = self.requests
        assert len(reqs) == self.num_requests and not any(math.isnan(r.finish_s) for r in reqs)
        measured = reqs[self.warmup:]
        token_s, token_req = self._token_times(measured)
        n_out = np.array([r.n_out for r in measured], dtype=np.int64)
        assert np.array_equal(np.bincount(token_req, minlength=len(measured)), n_out)
        itl = np.diff(token_s)[token_req[1:] == token_req[:-1]]
        issue = np.array([r.issue_s for r in measured])
        first = np.array([r.first_token_s for r in measured])
        finish = np.array([r.finish_s for r in measured])
        tpot = np.full(len(measured), np.nan)
        many = n_out > 1
        tpot[many] = (finish[many] - first[many]) / (n_out[many] - 1)

        # the window: from the first measured request's issue to the last one's, half-open because
        # completions come in bursts at iteration ends and both bounds are such ends
        t0 = reqs[self.warmup].issue_s
        t1 = reqs[-1].issue_s
        if t1 <= t0:  # a closed loop whose clients all started at once
            t1 = max(r.finish_s for r in reqs)
        span = t1 - t0
        all_finish = np.array([r.finish_s for r in reqs])
        completions = int(np.count_nonzero((all_finish >= t0) & (all_finish < t1)))
        rec_s = np.asarray(self.rec_start_s)
        rec_d = np.asarray(self.rec_duration_s)
        rec_k = np.asarray(self.rec_iterations)
        rec_b = np.asarray(self.rec_decode_batch)
        # iterations of each record ending in the window; tokens: decodes, plus one per finished prefill
        lo = np.maximum(np.ceil((t0 - rec_s) / rec_d), 1.0)
        hi = np.minimum(np.ceil((t1 - rec_s) / rec_d) - 1.0, rec_k)
        ends_in = np.maximum(hi - lo + 1.0, 0.0)
        explicit = np.array([seg[0] for r in reqs for seg in r.segments])
        tokens = float(np.sum(ends_in * rec_b)) + int(np.count_nonzero((explicit >= t0) & (explicit < t1)))
        decode_iterations = float(np.sum(ends_in[rec_b > 0]))
        mean_batch = float(np.sum(ends_in * rec_b) / decode_iterations) if decode_iterations else 0.0
        busy_s = np.clip(np.minimum(rec_s + rec_k * rec_d, t1) - np.maximum(rec_s, t0), 0.0, None)
        rec_w = np.asarray(self.rec_worker)
        utilization = {pool: float(np.sum(busy_s[np.isin(rec_w, members)]) / (span * len(members)))
                       for pool, members in self.pools.items()}
        if not self.disaggregated:
            prefill = np.asarray(self.rec_prefill_tokens) > 0
            utilization["prefill_lane"] = float(np.sum(busy_s[prefill]) / (span * len(self.workers)))
        # the decoding sequences per worker over the window's time (an idle worker decodes none)
        decode_members = self.pools["decode_pool" if self.disaggregated else "gpu"]
        on = np.isin(rec_w, decode_members)
        x = np.asarray(self.rec_decoding, dtype=np.float64)[on]
        weight = busy_s[on] / (span * len(decode_members))
        m1 = float(np.sum(weight * x))
        var = max(float(np.sum(weight * x * x)) - m1 * m1, 0.0)
        blocked = np.asarray(self.rec_blocked, dtype=bool)[on]
        blocked_share = float(np.sum(weight[blocked]))
        return SimulationResult(
            arrival_s=issue, ttft_s=first - issue, e2e_s=finish - issue, tpot_s=tpot, output_tokens=n_out,
            input_tokens=np.array([r.n_in for r in measured], dtype=np.int64),
            kv_transfer_s=np.array([r.transfer_s for r in measured]), itl_s=itl, mean_decode_batch=mean_batch,
            requests_per_s=completions / span, output_tokens_per_s=tokens / span, utilization=utilization,
            num_preemptions=self.num_preemptions, recomputed_tokens=self.recomputed_tokens, window_s=span,
            decode_batch_time_mean=m1, decode_batch_dispersion=var / m1 if m1 > 0 else float("nan"),
            admission_blocked_share=blocked_share,
        )


def simulate(
    problem: ServingProblem,
    *,
    num_requests: int = 4000,
    warmup_requests: int = 400,
    seed: int = 0,
    step_time: StepTime | None = None,
    kv_transfer_s: KvTransfer | None = None,
    kv_capacity_tokens: int | None = None,
    kv_watermark: float = 0.0,
    decode_routing: str = "least_loaded",
) -> SimulationResult:
    """Simulate ``num_requests`` requests through the deployment and measure them as a benchmark would.

    Parameters
    ----------
    problem : ServingProblem
        Model, engine, dtypes, deployment and workload (the ``slo`` is not used).
    num_requests : int
        Requests issued in all, warm-up included.
    warmup_requests : int
        The first requests issued, left out of every statistic (they see an empty system).
    seed : int
        Seed of the ``numpy.random.Generator`` drawing lengths and inter-arrival times; equal seeds give
        identical results.
    step_time : callable, optional
        Iteration time [s] with the keywords of :func:`planner.costs.passes.mixed_step_latency_s`
        (``decode_batch``, ``decode_context_tokens``, ``prefill_tokens``, ``prefill_cached_tokens``,
        ``prefill_sequences``), used for every worker; default: that cost model of each pool, memoized
        on a grid (a :class:`CostModelStepTime` passed here shares its memo across runs).
    kv_transfer_s : callable, optional
        Disaggregated only: KV-transfer time [s] of a prompt of ``prompt_tokens`` tokens; default:
        ``prompt_tokens × kv_cache_bytes_per_token / scale_out_bandwidth_bytes_per_s`` of the prefill GPU.
    kv_capacity_tokens : int, optional
        KV capacity of each (decode) worker [tokens]; default: ``memory_plan(...).kv_capacity_tokens``
        with the context the longest input and output reach.
    kv_watermark : float
        Share of each aggregated worker's KV cache an admission must leave free (the KV a running request
        grows into before it is preempted): vLLM's V0 block manager keeps 1 % (``watermark=0.01``,
        "to avoid frequent cache eviction"), its V1 KV-cache manager none by default (``watermark=0.0``).
        Preemption still happens only when the whole cache is full.
    decode_routing : str
        Disaggregated only: how a request whose KV arrived picks its decode worker: ``"least_loaded"``
        (the worker with the fewest sequences that has room, else a shared FCFS queue) or
        ``"round_robin"`` (the next worker in turn, whatever its load; it waits there for room).

    Returns
    -------
    SimulationResult

    Raises
    ------
    ModelDoesNotFit
        When the weights do not fit, or one worker's KV cache cannot hold the longest request.
    InvalidInput
        For a warm-up not shorter than the run, or an empty pool.
    """
    if not 0.0 <= kv_watermark < 1.0:
        raise InvalidInput(f"kv_watermark must be in [0, 1), got {kv_watermark!r}", field="kv_watermark")
    if decode_routing not in DECODE_ROUTINGS:
        raise InvalidInput(f"decode_routing must be one of {DECODE_ROUTINGS}, got {decode_routing!r}",
                           field="decode_routing")
    sim = _Simulation(problem, num_requests=num_requests, warmup_requests=warmup_requests, seed=seed,
                      step_time=step_time, kv_transfer_s=kv_transfer_s, kv_capacity_tokens=kv_capacity_tokens,
                      kv_watermark=kv_watermark, decode_routing=decode_routing)
    sim.run()
    return sim.result()
