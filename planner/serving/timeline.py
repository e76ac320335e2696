"""Iteration-by-iteration timelines of a small scenario: running streams decoding when prompts arrive.

``running_streams`` sequences are decoding, each with its own KV-cache context, when one prompt (or a few)
arrives. The timeline shows what every scheduler iteration carries, how long it takes, and where the
running streams stall, under three designs built on the same cost model
(:func:`planner.costs.passes.mixed_step_latency_s`):

- ``chunked``: vLLM's scheduler with chunked prefill (the V1 scheduler; Sarathi-Serve's stall-free
  batching). Each iteration first schedules every running decode (one token each), then spends what is
  left of the token budget on prompt chunks, first come first served, one more sequence per chunk up to
  ``max_batch_size``. A chunk is costed after its prompt's earlier chunks (their KV is cached). The
  iteration that computes a prompt's last chunk samples its first token; it decodes from the next one.
- ``unchunked``: chunked prefill off (vLLM V0, prefills first). Waiting prompts whose whole length fits
  the token budget get a prefill-only iteration; every running stream waits for it.
- ``disaggregated`` (Splitwise, DistServe): the prompt is prefilled in one pass on a prefill worker (FCFS
  over the pool's workers, as :mod:`planner.serving.disaggregated` costs it), its KV cache moves to the
  decode pool layer by layer (:func:`~planner.serving.disaggregated.kv_transfer_s`: the transfer overlaps
  the prefill; the last layer, the excess over the compute and the hand-off stay exposed), and the
  request joins the decode batch at the first decode-iteration boundary after its KV lands. Decode
  iterations never carry prefill: the running streams only see their batch grow by the new sequences.

Clock and arrivals: ``t = 0`` is an iteration boundary at which every running stream has just emitted a
token. The first prompt arrives after ``warmup_iterations`` decode-only iterations, exactly at that
boundary (so its TTFT has no residual wait); prompt ``k`` arrives ``delay_s`` after the first. The
scheduler runs between iterations: a prompt arriving during an iteration waits for its end. The decode
pool of a disaggregated deployment keeps the same clock, so the first prompt arrives at the prefill pool
when the decode pool finishes its warm-up iterations.

What ``ttft_s`` includes: from the prompt's arrival to its first token. Aggregated, that is the wait for
the next iteration boundary, any wait behind earlier prompts, and every iteration that carries the
prompt's chunks up to the end of the one with its last chunk. Disaggregated, it is the wait for a prefill
worker, the prefill pass and the exposed KV transfer (the first token is delivered once the decode worker
holds the KV, as in :mod:`planner.serving.disaggregated`). It excludes the engine's front-end time
(HTTP, tokenization, detokenization: ``EngineProfile.request_overhead_s``), reported separately as
``Timeline.request_overhead_s``; add it for what a client measures.

Approximations (the cost model takes one decode context and one cached prefix per call): a decode batch
is costed at its sequences' mean context (memory-bound decode attention reads the sum of the contexts, the
same bytes), and several prompt chunks in one iteration at their token-weighted mean cached prefix (exact
for one chunk, the main case).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from planner.costs.memory import memory_plan
from planner.costs.passes import mixed_step_latency_s, prefill_latency_s
from planner.costs.types import CostContext, EngineProfile
from planner.errors import InvalidInput, ModelDoesNotFit
from planner.models import ModelArchitecture
from planner.serving.disaggregated import KvLinkChoice, choose_link, kv_transfer_s
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec
from planner.units import DTYPE_BYTES

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: most running streams of a scenario [sequences]
MAX_STREAMS = 256
#: most arriving prompts of a scenario
MAX_PROMPTS = 16
#: most scheduler iterations one timeline holds (the warm-up and the tail included)
MAX_ITERATIONS = 2000
#: most decode-only iterations before the first prompt, and after the last first token
MAX_WARMUP_ITERATIONS = 64
MAX_DECODE_ITERATIONS_AFTER = 256
#: latest arrival of a prompt after the first one [s]
MAX_DELAY_S = 3600.0
#: an arrival this close before an iteration boundary counts as at it [s] (sums of float durations)
TIME_TOLERANCE_S = 1e-9

Design = Literal["chunked", "unchunked", "disaggregated"]
IterationKind = Literal["decode", "mixed", "prefill"]
_Policy = Literal["chunked", "unchunked", "decode_only"]


# ------------------------------------------------------------------------------------------------ inputs


@dataclass(frozen=True, kw_only=True)
class PromptArrival:
    """One arriving prompt: ``prompt_tokens`` long, ``delay_s`` [s] after the first prompt's arrival."""

    prompt_tokens: int
    delay_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class TimelineScenario:
    """What happens: streams decoding with the given contexts when ``prompts`` arrive.

    ``context_tokens`` holds one entry per running stream: the tokens in its KV cache at ``t = 0``.
    ``prompts[0]`` is the main prompt (its ``delay_s`` must be 0); it arrives after
    ``warmup_iterations`` decode-only iterations. The timeline ends ``decode_iterations_after``
    iterations after the last prompt's first token (disaggregated: after it joins the decode batch).
    """

    context_tokens: tuple[int, ...]
    prompts: tuple[PromptArrival, ...]
    warmup_iterations: int = 2
    decode_iterations_after: int = 3

    def __post_init__(self) -> None:
        n = len(self.context_tokens)
        if not 1 <= n <= MAX_STREAMS:
            raise InvalidInput(
                f"give between 1 and {MAX_STREAMS} running streams, got {n}", field="scenario.context_tokens"
            )
        for s, tokens in enumerate(self.context_tokens):
            _require_int(tokens, 1, f"scenario.context_tokens.{s}")
        if not 1 <= len(self.prompts) <= MAX_PROMPTS:
            raise InvalidInput(
                f"give between 1 and {MAX_PROMPTS} prompts, got {len(self.prompts)}", field="scenario.prompts"
            )
        for k, prompt in enumerate(self.prompts):
            _require_int(prompt.prompt_tokens, 1, f"scenario.prompts.{k}.prompt_tokens")
            delay = prompt.delay_s
            if not (math.isfinite(delay) and 0.0 <= delay <= MAX_DELAY_S):
                raise InvalidInput(
                    f"a prompt's delay_s must be in [0, {MAX_DELAY_S:g}] s, got {delay!r}",
                    field=f"scenario.prompts.{k}.delay_s",
                )
        if self.prompts[0].delay_s != 0.0:
            raise InvalidInput(
                "the first prompt defines the arrival: its delay_s must be 0",
                field="scenario.prompts.0.delay_s",
            )
        _require_int(self.warmup_iterations, 0, "scenario.warmup_iterations", MAX_WARMUP_ITERATIONS)
        _require_int(
            self.decode_iterations_after, 1, "scenario.decode_iterations_after", MAX_DECODE_ITERATIONS_AFTER
        )

    @property
    def running_streams(self) -> int:
        return len(self.context_tokens)

    @property
    def prompt_tokens(self) -> NDArray[np.int64]:
        return np.array([p.prompt_tokens for p in self.prompts], dtype=np.int64)


def _require_int(value: int, minimum: int, field: str, maximum: int | None = None) -> None:
    if (
        isinstance(value, bool)
        or int(value) != value
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise InvalidInput(f"{field} must be an integer {bound}, got {value!r}", field=field)


# ----------------------------------------------------------------------------------------------- outputs


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """Prompt tokens of ``request`` computed in one iteration, after ``cached_tokens`` earlier ones."""

    request: int
    tokens: int
    cached_tokens: int
    #: this chunk completes the prompt: the iteration samples the request's first token
    last: bool


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """One scheduler iteration (one forward pass) of an aggregated worker or of the decode worker."""

    index: int
    start_s: float
    end_s: float
    duration_s: float
    kind: IterationKind
    #: sequences that decode one token each (running streams and requests past their prefill)
    decode_tokens: int
    #: mean KV context of those sequences, what the iteration is costed at [tokens]
    decode_context_tokens: float
    #: prompt tokens computed, the sum over ``chunks`` [tokens]
    prefill_tokens: int
    chunks: tuple[Chunk, ...]
    #: running streams that emit no token in this iteration (they wait for a prefill)
    stalled_streams: tuple[int, ...]
    #: requests that emit a token at this iteration's end (their first with their last chunk)
    emitting_requests: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class PrefillPass:
    """A prefill pass of one prompt on a worker of the prefill pool (disaggregated)."""

    request: int
    worker: int
    start_s: float
    end_s: float
    prompt_tokens: int


@dataclass(frozen=True, kw_only=True)
class KvTransfer:
    """A prompt's KV cache moving from the prefill worker to the decode worker (disaggregated).

    ``[start_s, end_s]`` lasts ``whole_s`` (the bytes at the link's bandwidth plus the hand-off) and ends
    ``exposed_s`` after the prefill pass: the rest overlaps the pass, layer by layer.
    """

    request: int
    start_s: float
    end_s: float
    kv_bytes: float
    whole_s: float
    exposed_s: float


@dataclass(frozen=True, kw_only=True)
class StreamSummary:
    """The tokens of one running stream: gaps between consecutive tokens (the first measured from t = 0)."""

    stream: int
    context_tokens: int
    num_tokens: int
    mean_gap_s: float
    max_gap_s: float
    #: when the token that ends the longest gap is emitted [s]
    max_gap_end_s: float
    #: longest gap beyond a decode-only iteration of the initial batch (``Timeline.decode_only_iteration_s``)
    stall_s: float


@dataclass(frozen=True, kw_only=True)
class RequestSummary:
    """One arriving prompt: when it was prefilled and when its tokens came."""

    request: int
    prompt_tokens: int
    arrival_s: float
    prefill_start_s: float
    prefill_end_s: float
    #: iterations that carry its chunks (aggregated), or 1 (its prefill pass, disaggregated)
    num_prefill_iterations: int
    #: when its KV cache is usable on the decode worker (disaggregated only)
    kv_ready_s: float | None
    first_token_s: float
    #: first_token_s − arrival_s, without the engine's front-end time (see the module docstring)
    ttft_s: float
    #: the first iteration in which it decodes
    decode_join_iteration: int
    #: when each of its tokens is emitted, the first one included [s]
    token_times_s: tuple[float, ...]
    #: longest gap between two of its tokens [s] (0 with a single token)
    max_gap_s: float


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """Every iteration of one design, with the prefill pool and the KV link when disaggregated."""

    design: Design
    iterations: tuple[Iteration, ...]
    prefill_passes: tuple[PrefillPass, ...]
    kv_transfers: tuple[KvTransfer, ...]
    streams: tuple[StreamSummary, ...]
    requests: tuple[RequestSummary, ...]
    #: one decode-only iteration of the running streams at their initial contexts [s]
    decode_only_iteration_s: float
    #: largest ``stall_s`` and ``max_gap_s`` over the running streams [s]
    max_stall_s: float
    max_gap_s: float
    #: end of the last iteration or transfer [s]
    end_s: float
    #: the engine's per-request front-end time, not part of any ``ttft_s`` [s]
    request_overhead_s: float
    #: the KV link (disaggregated only)
    kv_link: KvLinkChoice | None = None
    #: KV bytes one prompt token moves, all layers [bytes] (disaggregated only)
    kv_bytes_per_token: float | None = None


# ------------------------------------------------------------------------------------------ scheduling


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """The contents of each iteration (counts only), before they are costed. Sequences are numbered
    running streams first (0 … N−1), then requests (N + r)."""

    decode_batch: FloatArray
    decode_context_tokens: FloatArray
    prefill_tokens: FloatArray
    prefill_cached_tokens: FloatArray
    prefill_sequences: FloatArray
    chunks: tuple[tuple[Chunk, ...], ...]
    #: (iterations, sequences): the sequence emits a token at the iteration's end
    emitted: BoolArray
    #: tokens in each sequence's KV cache once the last iteration ends (requests: their prompt included)
    final_context_tokens: NDArray[np.int64]

    @property
    def num_iterations(self) -> int:
        return int(self.decode_batch.size)


def _schedule(
    policy: _Policy,
    scenario: TimelineScenario,
    *,
    token_budget: int,
    max_batch_size: int,
    admit: Mapping[int, int],
    min_iterations: int,
) -> _Plan:
    """Run the scheduler over counts. ``admit[r]`` is the first iteration that sees request ``r`` (it
    arrived by that iteration's start; disaggregated: its KV is on the decode worker); requests not in
    ``admit`` have not arrived yet. Iterations continue until every admitted request is
    ``decode_iterations_after`` iterations past its first token (or its joining the decode batch), and
    at least ``min_iterations``."""
    n = scenario.running_streams
    prompt = scenario.prompt_tokens
    num_seqs = n + prompt.size
    context = np.concatenate([np.asarray(scenario.context_tokens, dtype=np.int64), prompt])
    decoding = np.zeros(num_seqs, dtype=bool)
    decoding[:n] = True
    prefilled = np.zeros(prompt.size, dtype=np.int64)
    # first come, first served: by the boundary that admits them, then by arrival
    fcfs = sorted(admit, key=lambda r: (admit[r], scenario.prompts[r].delay_s, r))
    after = scenario.decode_iterations_after
    #: the iteration count each admitted request needs the timeline to reach (None: not known yet)
    horizon: dict[int, int | None] = {
        r: (admit[r] + after if policy == "decode_only" else None) for r in admit
    }
    rows: list[tuple[int, float, int, float, int]] = []
    chunks_per_iteration: list[tuple[Chunk, ...]] = []
    emitted_rows: list[BoolArray] = []
    i = 0
    while True:
        known = [h for h in horizon.values() if h is not None]
        if i >= min_iterations and len(known) == len(horizon) and i >= max(known, default=0):
            break
        if i >= MAX_ITERATIONS:
            raise InvalidInput(
                f"this scenario needs more than {MAX_ITERATIONS} iterations: raise the token budget, shorten "
                "the prompts or their delays, or lower warmup_iterations / decode_iterations_after",
                field="scenario",
                max_iterations=MAX_ITERATIONS,
            )
        if policy == "decode_only":
            for r in fcfs:
                if admit[r] == i:
                    decoding[n + r] = True
        num_decoding = int(decoding.sum())
        chunks: list[Chunk] = []
        waiting = [r for r in fcfs if admit[r] <= i and horizon[r] is None]
        if policy == "chunked":
            budget, seats = token_budget - num_decoding, max_batch_size - num_decoding
            for r in waiting:
                if budget <= 0 or seats <= 0:
                    break
                take = int(min(prompt[r] - prefilled[r], budget))
                chunks.append(
                    Chunk(
                        request=r,
                        tokens=take,
                        cached_tokens=int(prefilled[r]),
                        last=bool(prefilled[r] + take == prompt[r]),
                    )
                )
                budget, seats = budget - take, seats - 1
        elif policy == "unchunked":
            budget, seats = token_budget, max_batch_size - num_decoding
            for r in waiting:  # whole prompts, FCFS, while they fit
                if prompt[r] > budget or seats <= 0:
                    break
                chunks.append(Chunk(request=r, tokens=int(prompt[r]), cached_tokens=0, last=True))
                budget, seats = budget - int(prompt[r]), seats - 1
        decodes = (
            decoding.copy() if not (policy == "unchunked" and chunks) else np.zeros(num_seqs, dtype=bool)
        )
        batch = int(decodes.sum())
        mean_context = float(context[decodes].mean()) if batch else 0.0
        tokens = sum(c.tokens for c in chunks)
        cached = sum(c.tokens * c.cached_tokens for c in chunks) / tokens if tokens else 0.0
        rows.append((batch, mean_context, tokens, cached, len(chunks)))
        chunks_per_iteration.append(tuple(chunks))
        emitted = decodes.copy()
        context[decodes] += 1
        for c in chunks:
            prefilled[c.request] += c.tokens
            if c.last:  # the first token now; it decodes from the next iteration
                emitted[n + c.request] = True
                decoding[n + c.request] = True
                horizon[c.request] = i + 1 + after
        emitted_rows.append(emitted)
        i += 1
    cols = np.array(rows, dtype=np.float64).reshape(-1, 5)
    return _Plan(
        decode_batch=cols[:, 0],
        decode_context_tokens=cols[:, 1],
        prefill_tokens=cols[:, 2],
        prefill_cached_tokens=cols[:, 3],
        prefill_sequences=cols[:, 4],
        chunks=tuple(chunks_per_iteration),
        emitted=np.array(emitted_rows, dtype=bool).reshape(-1, num_seqs),
        final_context_tokens=context,
    )


def _durations(ctx: CostContext, plan: _Plan, baseline: tuple[float, float]) -> tuple[FloatArray, float]:
    """Every iteration's duration [s] from the cost model in one vectorized call, and that of the baseline
    decode-only iteration ``(batch, mean context)``."""
    batch, context = baseline
    t = mixed_step_latency_s(
        ctx,
        decode_batch=np.append(plan.decode_batch, batch),
        decode_context_tokens=np.append(plan.decode_context_tokens, context),
        prefill_tokens=np.append(plan.prefill_tokens, 0.0),
        prefill_cached_tokens=np.append(plan.prefill_cached_tokens, 0.0),
        prefill_sequences=np.append(plan.prefill_sequences, 0.0),
    )
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), (plan.num_iterations + 1,))
    return t[:-1].copy(), float(t[-1])


def _run(
    policy: _Policy,
    ctx: CostContext,
    scenario: TimelineScenario,
    *,
    token_budget: int,
    max_batch_size: int,
    admission_times: Callable[[float], FloatArray],
) -> tuple[_Plan, FloatArray, float, FloatArray, dict[int, int]]:
    """Schedule and cost the scenario; returns (plan, durations, baseline, admission times, admit).

    The schedule before iteration ``k`` does not depend on requests admitted at ``k`` or later, so the
    admissions are found one request at a time in arrival order: schedule and cost what has arrived, find
    the first boundary at or after the next arrival, admit it there, repeat (one cost-model call per
    request). ``admission_times(t_first)`` gives each request's admission time from the first prompt's
    arrival, the end of the warm-up iterations.
    """
    baseline = (float(scenario.running_streams), float(np.mean(scenario.context_tokens)))
    warmup = scenario.warmup_iterations
    admit: dict[int, int] = {}

    def reschedule(min_iterations: int) -> tuple[_Plan, np.ndarray, float]:
        plan = _schedule(policy, scenario, token_budget=token_budget, max_batch_size=max_batch_size, admit=admit,
                         min_iterations=min_iterations)
        return (plan, *_durations(ctx, plan, baseline))

    plan, durations, baseline_s = reschedule(warmup)
    t_first = float(np.cumsum(durations)[warmup - 1]) if warmup else 0.0
    times = np.asarray(admission_times(t_first), dtype=np.float64)
    for r in np.argsort(times, kind="stable"):
        while True:
            boundaries = np.concatenate([[0.0], np.cumsum(durations)])
            k = int(np.searchsorted(boundaries, times[r] - TIME_TOLERANCE_S, side="left"))
            if k < boundaries.size:
                break
            # the timeline so far ends before this request arrives: extend it with decode-only iterations
            step_s = durations[-1] if durations.size else baseline_s
            extra = math.ceil((times[r] - boundaries[-1]) / step_s) + 1
            plan, durations, baseline_s = reschedule(plan.num_iterations + extra)
        admit[int(r)] = k
        plan, durations, baseline_s = reschedule(warmup)
    return plan, durations, baseline_s, times, admit


# --------------------------------------------------------------------------------------------- checks


def _check_lengths(model: ModelArchitecture, scenario: TimelineScenario) -> None:
    limit = model.max_position_embeddings
    for s, tokens in enumerate(scenario.context_tokens):
        if tokens >= limit:
            raise InvalidInput(
                f"stream {s} holds {tokens} tokens, but {model.id} has a {limit}-token context",
                field=f"scenario.context_tokens.{s}",
                max_context_tokens=limit,
            )
    for k, prompt in enumerate(scenario.prompts):
        if prompt.prompt_tokens >= limit:
            raise InvalidInput(
                f"prompt {k} has {prompt.prompt_tokens} tokens, but {model.id} has a {limit}-token context "
                "(the prompt and at least one output token must fit)",
                field=f"scenario.prompts.{k}.prompt_tokens",
                max_context_tokens=limit,
            )


def _check_final_lengths(model: ModelArchitecture, scenario: TimelineScenario, plan: _Plan) -> None:
    limit = model.max_position_embeddings
    n = scenario.running_streams
    for seq, tokens in enumerate(plan.final_context_tokens):
        if tokens > limit:
            field = (
                f"scenario.context_tokens.{seq}" if seq < n else f"scenario.prompts.{seq - n}.prompt_tokens"
            )
            raise InvalidInput(
                f"a sequence reaches {int(tokens)} tokens in this timeline, beyond {model.id}'s "
                f"{limit}-token context",
                field=field,
                max_context_tokens=limit,
            )


def _check_batch(scenario: TimelineScenario, max_batch_size: int, field: str) -> None:
    needed = scenario.running_streams + len(scenario.prompts)
    if needed > max_batch_size:
        raise InvalidInput(
            f"{scenario.running_streams} running streams and {len(scenario.prompts)} prompt(s) need "
            f"{needed} sequences in the batch, but max_batch_size is {max_batch_size}",
            field=field,
            needed_sequences=needed,
        )


def _check_memory(ctx: CostContext, needed_tokens: int, max_context_tokens: int, pool: str) -> None:
    """The worker holds the weights and ``needed_tokens`` of KV cache (vLLM would preempt otherwise)."""
    plan = memory_plan(ctx, max_context_tokens=max(max_context_tokens, 1))
    usable = plan.memory_bytes - plan.reserved_bytes_per_gpu
    if not plan.fits:
        raise ModelDoesNotFit(
            f"{ctx.model.id} ({ctx.weight_dtype}) does not fit on the {pool} worker's {ctx.gpu.id} with "
            f"tp={ctx.parallelism.tp}, pp={ctx.parallelism.pp}: {plan.weight_bytes_per_gpu / 1e9:.1f} GB of "
            f"weights per GPU against {usable / 1e9:.1f} GB usable",
            pool=pool,
            weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
            usable_bytes_per_gpu=usable,
        )
    if plan.kv_capacity_tokens < needed_tokens:
        raise ModelDoesNotFit(
            f"the {pool} worker's KV cache holds {plan.kv_capacity_tokens} tokens, but this timeline needs "
            f"{needed_tokens}: fewer or shorter streams, more GPUs or a narrower kv_dtype",
            pool=pool,
            kv_capacity_tokens=plan.kv_capacity_tokens,
            needed_kv_tokens=needed_tokens,
        )


# ------------------------------------------------------------------------------------------- assembly


def _iterations(plan: _Plan, durations: FloatArray, n: int) -> tuple[Iteration, ...]:
    ends = np.cumsum(durations)
    starts = np.concatenate([[0.0], ends[:-1]])
    out = []
    for i in range(plan.num_iterations):
        batch, tokens = int(plan.decode_batch[i]), int(plan.prefill_tokens[i])
        kind: IterationKind = "decode" if tokens == 0 else ("mixed" if batch > 0 else "prefill")
        row = plan.emitted[i]
        out.append(
            Iteration(
                index=i,
                start_s=float(starts[i]),
                end_s=float(ends[i]),
                duration_s=float(durations[i]),
                kind=kind,
                decode_tokens=batch,
                decode_context_tokens=float(plan.decode_context_tokens[i]),
                prefill_tokens=tokens,
                chunks=plan.chunks[i],
                stalled_streams=tuple(int(s) for s in np.flatnonzero(~row[:n])),
                emitting_requests=tuple(int(r) for r in np.flatnonzero(row[n:])),
            )
        )
    return tuple(out)


def _streams(
    scenario: TimelineScenario,
    plan: _Plan,
    ends: FloatArray,
    baseline_s: float,
) -> tuple[StreamSummary, ...]:
    out = []
    for s, context in enumerate(scenario.context_tokens):
        times = ends[plan.emitted[:, s]]
        gaps = np.diff(np.concatenate([[0.0], times]))
        j = int(np.argmax(gaps))
        out.append(
            StreamSummary(
                stream=s,
                context_tokens=int(context),
                num_tokens=int(times.size),
                mean_gap_s=float(gaps.mean()),
                max_gap_s=float(gaps[j]),
                max_gap_end_s=float(times[j]),
                stall_s=max(float(gaps[j]) - baseline_s, 0.0),
            )
        )
    return tuple(out)


def _max_gap(times: FloatArray) -> float:
    return float(np.max(np.diff(times))) if times.size > 1 else 0.0


def _timeline(
    design: Design,
    scenario: TimelineScenario,
    plan: _Plan,
    durations: FloatArray,
    baseline_s: float,
    requests: tuple[RequestSummary, ...],
    engine: EngineProfile,
    *,
    prefill_passes: tuple[PrefillPass, ...] = (),
    kv_transfers: tuple[KvTransfer, ...] = (),
    kv_link: KvLinkChoice | None = None,
    kv_bytes_per_token: float | None = None,
) -> Timeline:
    ends = np.cumsum(durations)
    streams = _streams(scenario, plan, ends, baseline_s)
    return Timeline(
        design=design,
        iterations=_iterations(plan, durations, scenario.running_streams),
        prefill_passes=prefill_passes,
        kv_transfers=kv_transfers,
        streams=streams,
        requests=requests,
        decode_only_iteration_s=baseline_s,
        max_stall_s=max(s.stall_s for s in streams),
        max_gap_s=max(s.max_gap_s for s in streams),
        end_s=max([float(ends[-1])] + [t.end_s for t in kv_transfers]),
        request_overhead_s=engine.request_overhead_s,
        kv_link=kv_link,
        kv_bytes_per_token=kv_bytes_per_token,
    )


# ------------------------------------------------------------------------------------------ the designs


def aggregated_timeline(
    ctx: CostContext, *, deployment: AggregatedDeployment, scenario: TimelineScenario
) -> Timeline:
    """The timeline of one replica of an aggregated deployment: chunked prefill when
    ``deployment.chunked_prefill``, else prefill-only iterations (see the module docstring)."""
    n, prompt = scenario.running_streams, scenario.prompt_tokens
    _check_lengths(ctx.model, scenario)
    _check_batch(scenario, deployment.max_batch_size, "deployment.max_batch_size")
    needed = n + prompt.size
    if deployment.chunked_prefill and deployment.token_budget < needed:
        raise InvalidInput(
            f"a token budget of {deployment.token_budget} cannot hold the {needed - 1} decodes and the "
            f"prompt chunk this scenario needs in one iteration: give at least {needed}",
            field="deployment.token_budget",
            needed_tokens=needed,
        )
    if not deployment.chunked_prefill and deployment.token_budget < max(int(prompt.max()), needed):
        raise InvalidInput(
            "without chunked prefill a prompt runs whole in one iteration, so the token budget must hold "
            f"the longest prompt ({int(prompt.max())} tokens) and every decode ({needed}); it is "
            f"{deployment.token_budget} (vLLM requires max_num_batched_tokens >= max_model_len)",
            field="deployment.token_budget",
            needed_tokens=max(int(prompt.max()), needed),
        )
    _check_memory(
        ctx,
        int(sum(scenario.context_tokens) + prompt.sum()),
        int(max(max(scenario.context_tokens), prompt.max())),
        "aggregated",
    )
    policy: _Policy = "chunked" if deployment.chunked_prefill else "unchunked"
    delays = np.array([p.delay_s for p in scenario.prompts])
    plan, durations, baseline_s, arrivals, admit = _run(
        policy,
        ctx,
        scenario,
        token_budget=deployment.token_budget,
        max_batch_size=deployment.max_batch_size,
        admission_times=lambda t_first: t_first + delays,
    )
    _check_final_lengths(ctx.model, scenario, plan)
    _check_memory(
        ctx, int(plan.final_context_tokens.sum()), int(plan.final_context_tokens.max()), "aggregated"
    )
    ends = np.cumsum(durations)
    requests = []
    for r in range(prompt.size):
        carrying = [i for i, chunks in enumerate(plan.chunks) if any(c.request == r for c in chunks)]
        first = carrying[-1]
        times = ends[plan.emitted[:, n + r]]
        requests.append(
            RequestSummary(
                request=r,
                prompt_tokens=int(prompt[r]),
                arrival_s=float(arrivals[r]),
                prefill_start_s=float(ends[carrying[0] - 1]) if carrying[0] else 0.0,
                prefill_end_s=float(ends[first]),
                num_prefill_iterations=len(carrying),
                kv_ready_s=None,
                first_token_s=float(ends[first]),
                ttft_s=float(ends[first] - arrivals[r]),
                decode_join_iteration=first + 1,
                token_times_s=tuple(float(t) for t in times),
                max_gap_s=_max_gap(times),
            )
        )
    return _timeline(policy, scenario, plan, durations, baseline_s, tuple(requests), ctx.engine)


def _pool_context(ctx: CostContext, pool: PoolSpec) -> CostContext:
    return CostContext(
        model=ctx.model,
        gpu=pool.gpu,
        engine=ctx.engine,
        weight_dtype=ctx.weight_dtype,
        kv_dtype=ctx.kv_dtype,
        parallelism=pool.parallelism,
    )


def disaggregated_timeline(
    model: ModelArchitecture,
    engine: EngineProfile,
    *,
    weight_dtype: str,
    kv_dtype: str,
    deployment: DisaggregatedDeployment,
    scenario: TimelineScenario,
) -> Timeline:
    """The timeline of one decode worker holding the running streams, fed by the prefill pool over the KV
    link (see the module docstring)."""
    base = CostContext(
        model=model, gpu=deployment.decode.gpu, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype
    )
    pre_ctx, dec_ctx = _pool_context(base, deployment.prefill), _pool_context(base, deployment.decode)
    n, prompt = scenario.running_streams, scenario.prompt_tokens
    _check_lengths(model, scenario)
    _check_batch(scenario, deployment.decode.max_batch_size, "deployment.decode.max_batch_size")
    if deployment.decode.token_budget < n + prompt.size:
        raise InvalidInput(
            f"the decode pool's token budget of {deployment.decode.token_budget} cannot hold the "
            f"{n + prompt.size} decodes of this scenario in one iteration",
            field="deployment.decode.token_budget",
            needed_tokens=n + prompt.size,
        )
    _check_memory(pre_ctx, int(prompt.max()), int(prompt.max()), "prefill")
    _check_memory(
        dec_ctx,
        int(sum(scenario.context_tokens) + prompt.sum()),
        int(max(max(scenario.context_tokens), prompt.max())),
        "decode",
    )
    prefill_s = np.broadcast_to(
        prefill_latency_s(pre_ctx, prompt_tokens=prompt.astype(np.float64)), prompt.shape
    ).astype(np.float64)
    link = choose_link(deployment)
    kv_bytes_per_token = model.kv_cache_bytes_per_token(DTYPE_BYTES[kv_dtype])
    kv_bytes = prompt * kv_bytes_per_token  # the whole prompt's KV moves
    whole_s, exposed_s = kv_transfer_s(kv_bytes, link.bandwidth_bytes_per_s, prefill_s, model.num_layers)
    delays = np.array([p.delay_s for p in scenario.prompts])
    arrivals = np.zeros(prompt.size)
    passes: list[PrefillPass] = []
    transfers: list[KvTransfer] = []

    def kv_ready(t_first: float) -> FloatArray:
        """The prefill pool, FCFS over its workers (each prompt one pass), and the KV link after it."""
        passes.clear()
        transfers.clear()
        arrivals[:] = t_first + delays
        free_s = np.zeros(deployment.prefill.workers)
        ready = np.zeros(prompt.size)
        for r in np.argsort(delays, kind="stable"):
            w = int(np.argmin(free_s))
            start = max(float(arrivals[r]), float(free_s[w]))
            end = start + float(prefill_s[r])
            free_s[w] = end
            ready[r] = end + float(exposed_s[r])
            passes.append(
                PrefillPass(request=int(r), worker=w, start_s=start, end_s=end, prompt_tokens=int(prompt[r]))
            )
            transfers.append(
                KvTransfer(
                    request=int(r),
                    start_s=float(ready[r] - whole_s[r]),
                    end_s=float(ready[r]),
                    kv_bytes=float(kv_bytes[r]),
                    whole_s=float(whole_s[r]),
                    exposed_s=float(exposed_s[r]),
                )
            )
        return ready

    plan, durations, baseline_s, ready, admit = _run(
        "decode_only",
        dec_ctx,
        scenario,
        token_budget=deployment.decode.token_budget,
        max_batch_size=deployment.decode.max_batch_size,
        admission_times=kv_ready,
    )
    _check_final_lengths(model, scenario, plan)
    _check_memory(
        dec_ctx, int(plan.final_context_tokens.sum()), int(plan.final_context_tokens.max()), "decode"
    )
    ends = np.cumsum(durations)
    by_request = {p.request: p for p in passes}
    requests = []
    for r in range(prompt.size):
        p = by_request[r]
        times = np.concatenate([[ready[r]], ends[plan.emitted[:, n + r]]])
        arrival = float(arrivals[r])
        requests.append(
            RequestSummary(
                request=r,
                prompt_tokens=int(prompt[r]),
                arrival_s=arrival,
                prefill_start_s=p.start_s,
                prefill_end_s=p.end_s,
                num_prefill_iterations=1,
                kv_ready_s=float(ready[r]),
                first_token_s=float(ready[r]),
                ttft_s=float(ready[r]) - arrival,
                decode_join_iteration=admit[r],
                token_times_s=tuple(float(t) for t in times),
                max_gap_s=_max_gap(times),
            )
        )
    return _timeline(
        "disaggregated",
        scenario,
        plan,
        durations,
        baseline_s,
        tuple(requests),
        engine,
        prefill_passes=tuple(sorted(passes, key=lambda p: p.request)),
        kv_transfers=tuple(sorted(transfers, key=lambda t: t.request)),
        kv_link=link,
        kv_bytes_per_token=kv_bytes_per_token,
    )


def build_timeline(
    *,
    model: ModelArchitecture,
    engine: EngineProfile,
    weight_dtype: str,
    kv_dtype: str,
    deployment: AggregatedDeployment | DisaggregatedDeployment,
    scenario: TimelineScenario,
) -> Timeline:
    """The timeline of ``scenario`` on ``deployment``: its mode (and ``chunked_prefill``) picks the design."""
    if isinstance(deployment, AggregatedDeployment):
        ctx = CostContext(
            model=model,
            gpu=deployment.gpu,
            engine=engine,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            parallelism=deployment.parallelism,
        )
        return aggregated_timeline(ctx, deployment=deployment, scenario=scenario)
    return disaggregated_timeline(
        model, engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, deployment=deployment, scenario=scenario
    )
