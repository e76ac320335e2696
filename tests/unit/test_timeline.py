"""Per-iteration timelines (``planner/serving/timeline.py``): the schedule against vLLM's rules, the
durations against the cost model, and the contrasts the timeline exists to show.

No figure here is calibrated: every expected value is recomputed from the cost model or counted from the
scheduler's rules (decodes first, then chunks from what is left of the budget, FCFS).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from planner.costs import CostContext, Parallelism
from planner.costs.passes import decode_latency_s, mixed_step_latency_s, prefill_latency_s
from planner.engines import find_engine
from planner.errors import InvalidInput, ModelDoesNotFit
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.disaggregated import choose_link, kv_transfer_s
from planner.serving.timeline import (
    MAX_ITERATIONS,
    PromptArrival,
    Timeline,
    TimelineScenario,
    aggregated_timeline,
    build_timeline,
    disaggregated_timeline,
)
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec

GPUS = load_catalog()
MODELS = load_model_catalog()
ENGINE = find_engine("vllm")
LLAMA_8B = MODELS.get("meta-llama/Llama-3.1-8B")
H100 = GPUS["h100-sxm"]
CTX = CostContext(model=LLAMA_8B, gpu=H100, engine=ENGINE)

STREAMS, CONTEXT, PROMPT, BUDGET = 8, 2000, 6000, 512


def scenario(
    streams: int = STREAMS, context: int = CONTEXT, prompt: int = PROMPT, *more: PromptArrival, **kw: int
) -> TimelineScenario:
    return TimelineScenario(
        context_tokens=(context,) * streams, prompts=(PromptArrival(prompt_tokens=prompt), *more), **kw
    )


def aggregated(sc: TimelineScenario, *, budget: int = BUDGET, chunked: bool = True, **kw: int) -> Timeline:
    dep = AggregatedDeployment(gpu=H100, token_budget=budget, chunked_prefill=chunked, **kw)
    return aggregated_timeline(CTX, deployment=dep, scenario=sc)


DISAGG = DisaggregatedDeployment(prefill=PoolSpec(gpu=H100), decode=PoolSpec(gpu=H100), kv_link="nvlink")


def disaggregated(sc: TimelineScenario, dep: DisaggregatedDeployment = DISAGG) -> Timeline:
    return disaggregated_timeline(
        LLAMA_8B, ENGINE, weight_dtype="bf16", kv_dtype="bf16", deployment=dep, scenario=sc
    )


@pytest.fixture(scope="module")
def chunked() -> Timeline:
    return aggregated(scenario())


@pytest.fixture(scope="module")
def unchunked() -> Timeline:
    return aggregated(scenario(), budget=8192, chunked=False)


@pytest.fixture(scope="module")
def disagg() -> Timeline:
    return disaggregated(scenario())


def _floats(value: object) -> list[float]:
    """Every float inside a (nested) dataclass result."""
    if dataclasses.is_dataclass(value):
        return [x for f in dataclasses.fields(value) for x in _floats(getattr(value, f.name))]
    if isinstance(value, tuple | list):
        return [x for item in value for x in _floats(item)]
    return [value] if isinstance(value, float) else []


# ------------------------------------------------------------------------------------------ the clock


@pytest.mark.parametrize("name", ["chunked", "unchunked", "disagg"])
def test_iterations_tile_the_clock_and_every_number_is_finite(name, request):
    tl: Timeline = request.getfixturevalue(name)
    its = tl.iterations
    assert its[0].start_s == 0.0
    assert [it.index for it in its] == list(range(len(its)))
    for prev, it in zip(its, its[1:], strict=False):
        assert it.start_s == pytest.approx(prev.end_s, rel=1e-12, abs=0)
    for it in its:
        assert it.duration_s > 0 and it.end_s - it.start_s == pytest.approx(it.duration_s, rel=1e-9)
    numbers = _floats(tl)
    assert numbers and all(math.isfinite(x) for x in numbers)


@pytest.mark.parametrize("name", ["chunked", "unchunked"])
def test_each_iteration_lasts_what_the_cost_model_gives_its_contents(name, request):
    tl: Timeline = request.getfixturevalue(name)
    for it in tl.iterations:
        cached = it.chunks[0].cached_tokens if it.chunks else 0
        expected = mixed_step_latency_s(
            CTX,
            decode_batch=it.decode_tokens,
            decode_context_tokens=it.decode_context_tokens,
            prefill_tokens=it.prefill_tokens,
            prefill_cached_tokens=cached,
            prefill_sequences=len(it.chunks),
        )
        assert it.duration_s == pytest.approx(float(expected), rel=1e-12)
    assert tl.decode_only_iteration_s == pytest.approx(
        float(decode_latency_s(CTX, batch_size=STREAMS, context_tokens=CONTEXT)), rel=1e-12
    )


def test_decode_contexts_grow_by_one_token_per_iteration(chunked):
    before_join = [it for it in chunked.iterations if it.decode_tokens == STREAMS]
    for it in before_join:
        assert it.decode_context_tokens == CONTEXT + it.index
    # the new request joins with its prompt cached: the mean moves to (N·(C + i) + P) / (N + 1)
    joined = next(it for it in chunked.iterations if it.decode_tokens == STREAMS + 1)
    assert joined.decode_context_tokens == pytest.approx(
        (STREAMS * (CONTEXT + joined.index) + PROMPT) / (STREAMS + 1)
    )


# ------------------------------------------------------------------------------------ chunked prefill


def test_chunks_take_what_the_decodes_leave_of_the_budget(chunked):
    carrying = [it for it in chunked.iterations if it.chunks]
    left = BUDGET - STREAMS
    assert len(carrying) == math.ceil(PROMPT / left)
    done = 0
    for it in carrying:
        (chunk,) = it.chunks
        assert it.kind == "mixed" and it.decode_tokens == STREAMS
        assert chunk.request == 0 and chunk.cached_tokens == done
        assert chunk.tokens == min(left, PROMPT - done) == it.prefill_tokens
        assert it.decode_tokens + it.prefill_tokens <= BUDGET
        done += chunk.tokens
        assert chunk.last == (done == PROMPT)
    assert done == PROMPT
    # no stream ever waits: decodes are scheduled first
    assert all(not it.stalled_streams for it in chunked.iterations)
    assert all(s.num_tokens == len(chunked.iterations) for s in chunked.streams)


def test_first_token_ends_the_last_chunk_and_decoding_follows(chunked):
    (req,) = chunked.requests
    carrying = [it for it in chunked.iterations if it.chunks]
    warmup = 2
    assert chunked.iterations[warmup].chunks and not chunked.iterations[warmup - 1].chunks
    assert req.arrival_s == chunked.iterations[warmup].start_s
    assert req.first_token_s == carrying[-1].end_s
    assert req.ttft_s == pytest.approx(sum(it.duration_s for it in carrying), rel=1e-12)
    assert req.num_prefill_iterations == len(carrying)
    assert req.decode_join_iteration == carrying[-1].index + 1
    after = chunked.iterations[req.decode_join_iteration :]
    assert len(after) == 3 and all(it.kind == "decode" and it.decode_tokens == STREAMS + 1 for it in after)
    assert req.token_times_s == (req.first_token_s, *(it.end_s for it in after))
    assert len(chunked.iterations) == warmup + len(carrying) + 3
    assert chunked.request_overhead_s == ENGINE.request_overhead_s


def test_a_stream_stalls_by_the_longest_mixed_iteration(chunked):
    longest = max(it.duration_s for it in chunked.iterations)
    for s in chunked.streams:
        assert s.max_gap_s == pytest.approx(longest, rel=1e-12)
        assert s.stall_s == pytest.approx(longest - chunked.decode_only_iteration_s, rel=1e-12)
    assert chunked.max_stall_s == max(s.stall_s for s in chunked.streams)


# ------------------------------------------------------------------------------------- chunking off


def test_without_chunking_the_prompt_runs_alone_and_every_stream_waits(unchunked):
    (prefill,) = [it for it in unchunked.iterations if it.chunks]
    assert prefill.kind == "prefill" and prefill.decode_tokens == 0 and prefill.prefill_tokens == PROMPT
    assert prefill.stalled_streams == tuple(range(STREAMS))
    prefill_s = float(prefill_latency_s(CTX, prompt_tokens=PROMPT))
    assert prefill.duration_s == pytest.approx(prefill_s, rel=1e-12)
    for s in unchunked.streams:
        assert s.max_gap_s >= prefill_s
        assert s.num_tokens == len(unchunked.iterations) - 1
    assert unchunked.requests[0].ttft_s == pytest.approx(prefill_s, rel=1e-12)


def test_chunking_cuts_the_stall_and_costs_some_ttft(chunked, unchunked):
    assert chunked.max_stall_s < 0.1 * unchunked.max_stall_s
    assert chunked.requests[0].ttft_s > unchunked.requests[0].ttft_s


def test_a_smaller_budget_lengthens_ttft_and_shortens_stalls():
    runs = [aggregated(scenario(), budget=b) for b in (256, 512, 1024, 2048)]
    ttft = [tl.requests[0].ttft_s for tl in runs]
    stall = [tl.max_stall_s for tl in runs]
    assert ttft == sorted(ttft, reverse=True) and len(set(ttft)) == len(ttft)
    assert stall == sorted(stall) and len(set(stall)) == len(stall)


# ------------------------------------------------------------------------------------- disaggregated


def test_disaggregated_streams_only_feel_the_extra_sequence(disagg):
    assert all(it.kind == "decode" and not it.chunks and not it.stalled_streams for it in disagg.iterations)
    (req,) = disagg.requests
    # the most the batch can grow: the new sequence, and every context at its longest
    k = len(disagg.iterations)
    widest_context = (STREAMS * (CONTEXT + k) + PROMPT + k) / (STREAMS + 1)
    growth = float(decode_latency_s(CTX, batch_size=STREAMS + 1, context_tokens=widest_context)) - float(
        decode_latency_s(CTX, batch_size=STREAMS, context_tokens=CONTEXT)
    )
    assert 0.0 < disagg.max_stall_s <= growth < 0.1 * disagg.decode_only_iteration_s
    for it in disagg.iterations:
        expected = decode_latency_s(CTX, batch_size=it.decode_tokens, context_tokens=it.decode_context_tokens)
        assert it.duration_s == pytest.approx(float(expected), rel=1e-12)
        assert it.decode_tokens == STREAMS + (it.index >= req.decode_join_iteration)


def test_disaggregated_prefill_transfer_and_join(disagg):
    (req,), (p,), (kv,) = disagg.requests, disagg.prefill_passes, disagg.kv_transfers
    prefill_s = float(prefill_latency_s(CTX, prompt_tokens=PROMPT))
    kv_bytes_per_token = LLAMA_8B.kv_cache_bytes_per_token(2.0)
    assert disagg.kv_bytes_per_token == kv_bytes_per_token
    assert kv.kv_bytes == PROMPT * kv_bytes_per_token
    link = choose_link(DISAGG)
    assert disagg.kv_link == link
    whole, exposed = kv_transfer_s(
        np.array(kv.kv_bytes), link.bandwidth_bytes_per_s, np.array(prefill_s), LLAMA_8B.num_layers
    )
    assert (kv.whole_s, kv.exposed_s) == pytest.approx((float(whole), float(exposed)), rel=1e-12)
    # the arrival is the end of the decode pool's warm-up; the pass starts at once on the idle worker
    assert p.start_s == req.arrival_s == disagg.iterations[2].start_s
    assert p.end_s - p.start_s == pytest.approx(prefill_s, rel=1e-12)
    # layer-wise: the transfer starts during the pass and ends `exposed` after it
    assert p.start_s < kv.start_s < p.end_s < kv.end_s
    assert kv.end_s - kv.start_s == pytest.approx(kv.whole_s, rel=1e-9)
    assert kv.end_s == pytest.approx(p.end_s + kv.exposed_s, rel=1e-12) and req.kv_ready_s == kv.end_s
    assert req.ttft_s == pytest.approx(prefill_s + kv.exposed_s, rel=1e-12)
    # it joins at the first decode-iteration boundary after its KV lands
    join = disagg.iterations[req.decode_join_iteration]
    assert disagg.iterations[req.decode_join_iteration - 1].start_s < req.kv_ready_s <= join.start_s
    assert req.token_times_s[0] == req.kv_ready_s and req.token_times_s[1] == join.end_s
    assert len(disagg.iterations) == req.decode_join_iteration + 3


def test_prompts_queue_for_the_prefill_workers():
    sc = scenario(STREAMS, CONTEXT, 3000, PromptArrival(prompt_tokens=3000, delay_s=0.0))
    one = disaggregated(sc)
    two = disaggregated(sc, dataclasses.replace(DISAGG, prefill=PoolSpec(gpu=H100, workers=2)))
    a, b = one.prefill_passes
    assert (a.worker, b.worker) == (0, 0) and b.start_s == a.end_s
    assert one.requests[1].ttft_s > one.requests[0].ttft_s
    a, b = two.prefill_passes
    assert (a.worker, b.worker) == (0, 1) and a.start_s == b.start_s
    assert two.requests[1].ttft_s == pytest.approx(two.requests[0].ttft_s, rel=1e-12)


# ------------------------------------------------------------------------------------ several prompts


def test_a_later_prompt_waits_for_the_next_boundary_and_its_turn():
    delay = 0.02  # lands inside a mixed iteration of the first prompt
    tl = aggregated(scenario(STREAMS, CONTEXT, PROMPT, PromptArrival(prompt_tokens=1000, delay_s=delay)))
    first, second = tl.requests
    assert second.arrival_s == pytest.approx(first.arrival_s + delay, rel=1e-12)
    seen = next(it for it in tl.iterations if it.start_s >= second.arrival_s - 1e-9)
    assert tl.iterations[seen.index - 1].start_s < second.arrival_s
    # FCFS: the second prompt's chunks come only once the first prompt's last chunk is scheduled
    carrying = [it for it in tl.iterations if any(c.request == 1 for c in it.chunks)]
    assert carrying[0].index >= seen.index
    assert carrying[0].index == next(
        it.index for it in tl.iterations if any(c.last and c.request == 0 for c in it.chunks)
    )
    # the first prompt's last chunk (6000 = 11 · 504 + 456) leaves 48 tokens of the budget to the second's
    shared = carrying[0]
    assert [(c.request, c.tokens) for c in shared.chunks] == [(0, PROMPT % (BUDGET - STREAMS)), (1, 48)]
    assert shared.decode_tokens + shared.prefill_tokens == BUDGET
    expected = mixed_step_latency_s(
        CTX,
        decode_batch=shared.decode_tokens,
        decode_context_tokens=shared.decode_context_tokens,
        prefill_tokens=shared.prefill_tokens,
        prefill_sequences=2,
        prefill_cached_tokens=sum(c.tokens * c.cached_tokens for c in shared.chunks) / shared.prefill_tokens,
    )
    assert shared.duration_s == pytest.approx(float(expected), rel=1e-12)
    assert second.ttft_s > second.first_token_s - second.prefill_start_s


def test_prompts_seen_at_one_boundary_are_served_in_arrival_order():
    # both arrive during the first prompt's first chunk iteration, the later-listed one first
    sc = scenario(
        STREAMS,
        CONTEXT,
        PROMPT,
        PromptArrival(prompt_tokens=300, delay_s=0.004),
        PromptArrival(prompt_tokens=300, delay_s=0.002),
    )
    tl = aggregated(sc, budget=8192)
    (it,) = [it for it in tl.iterations if any(c.request in (1, 2) for c in it.chunks)]
    assert [c.request for c in it.chunks] == [2, 1]


def test_a_prompt_arriving_after_the_rest_is_done_extends_the_timeline():
    tl = aggregated(scenario(STREAMS, CONTEXT, 1000, PromptArrival(prompt_tokens=500, delay_s=1.0)))
    late = tl.requests[1]
    seen = next(it for it in tl.iterations if any(c.request == 1 for c in it.chunks))
    assert tl.iterations[seen.index - 1].start_s < late.arrival_s <= seen.start_s
    assert not tl.iterations[seen.index - 1].chunks  # decode-only iterations bridge the gap
    assert tl.end_s > late.arrival_s


@pytest.mark.parametrize("design", ["chunked", "unchunked", "disaggregated"])
def test_without_warmup_the_prompt_arrives_at_zero(design):
    sc = scenario(warmup_iterations=0)
    tl = (
        disaggregated(sc)
        if design == "disaggregated"
        else aggregated(sc, budget=8192, chunked=design == "chunked")
    )
    (req,) = tl.requests
    assert req.arrival_s == 0.0 and req.prefill_start_s == 0.0
    if design != "disaggregated":
        assert tl.iterations[0].chunks


def test_per_stream_contexts_are_costed_at_their_mean():
    sc = TimelineScenario(context_tokens=(500, 1000, 8000), prompts=(PromptArrival(prompt_tokens=2000),))
    tl = aggregated(sc)
    assert tl.iterations[0].decode_context_tokens == pytest.approx(9500 / 3)
    assert [s.context_tokens for s in tl.streams] == [500, 1000, 8000]


def test_build_timeline_picks_the_design_from_the_deployment():
    sc = scenario()
    kw = dict(model=LLAMA_8B, engine=ENGINE, weight_dtype="bf16", kv_dtype="bf16", scenario=sc)
    assert build_timeline(deployment=AggregatedDeployment(gpu=H100), **kw).design == "chunked"
    assert (
        build_timeline(deployment=AggregatedDeployment(gpu=H100, chunked_prefill=False), **kw).design
        == "unchunked"
    )
    assert build_timeline(deployment=DISAGG, **kw).design == "disaggregated"


# ----------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: scenario(streams=0), "scenario.context_tokens"),
        (lambda: scenario(streams=257), "scenario.context_tokens"),
        (lambda: scenario(prompt=0), "scenario.prompts.0.prompt_tokens"),
        (
            lambda: TimelineScenario(
                context_tokens=(10,), prompts=(PromptArrival(prompt_tokens=5, delay_s=1.0),)
            ),
            "scenario.prompts.0.delay_s",
        ),
        (
            lambda: scenario(1, 10, 5, PromptArrival(prompt_tokens=5, delay_s=math.nan)),
            "scenario.prompts.1.delay_s",
        ),
        (lambda: scenario(decode_iterations_after=0), "scenario.decode_iterations_after"),
        (lambda: aggregated(scenario(prompt=200_000)), "scenario.prompts.0.prompt_tokens"),
        (lambda: aggregated(scenario(context=131_072)), "scenario.context_tokens.0"),
        (lambda: aggregated(scenario(), budget=STREAMS), "deployment.token_budget"),
        (lambda: aggregated(scenario(), budget=4096, chunked=False), "deployment.token_budget"),
        (lambda: aggregated(scenario(), max_batch_size=STREAMS), "deployment.max_batch_size"),
        (lambda: aggregated(scenario(1, 100, 8000), budget=2), "scenario"),
        (lambda: disaggregated(scenario(prompt=200_000)), "scenario.prompts.0.prompt_tokens"),
        (
            lambda: disaggregated(
                scenario(), dataclasses.replace(DISAGG, decode=PoolSpec(gpu=H100, max_batch_size=4))
            ),
            "deployment.decode.max_batch_size",
        ),
    ],
)
def test_bad_scenarios_name_their_field(build, field):
    with pytest.raises(InvalidInput) as info:
        build()
    assert info.value.extra["field"] == field


def test_a_scenario_beyond_the_iteration_cap_is_refused():
    assert MAX_ITERATIONS == 2000
    with pytest.raises(InvalidInput, match="more than 2000 iterations"):
        aggregated(scenario(1, 100, 8000), budget=2)


def test_a_model_or_kv_cache_that_does_not_fit_is_refused():
    llama_70b = MODELS.get("meta-llama/Llama-3.1-70B")
    with pytest.raises(ModelDoesNotFit):
        aggregated_timeline(
            CostContext(model=llama_70b, gpu=H100, engine=ENGINE),
            deployment=AggregatedDeployment(gpu=H100, token_budget=512),
            scenario=scenario(),
        )
    l4 = GPUS["l4"]
    with pytest.raises(ModelDoesNotFit, match="KV cache holds"):
        aggregated_timeline(
            CostContext(model=LLAMA_8B, gpu=l4, engine=ENGINE, parallelism=Parallelism()),
            deployment=AggregatedDeployment(gpu=l4, token_budget=512),
            scenario=scenario(streams=64, context=60_000),
        )
