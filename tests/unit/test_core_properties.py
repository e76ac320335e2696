"""Properties of the core (the in-process cost model, serving evaluator and planners) that must hold for
every input: hypothesis draws catalog models (dense and MoE, GQA, MLA, sliding-window and hybrid linear
attention), catalog GPUs, dtypes, TP degrees and engines.

1. more prompt tokens never cost less (one prefill pass, also after a cached prefix, and the prefill part
   of the served TTFT with a prefix-cache hit fraction);
2. more HBM bandwidth never makes a decode step slower;
3. a larger token budget (``max_num_batched_tokens``) never lowers the ITL at the same load. Read
   literally (the mean, p90 or p99 of ITL) this is false, in the model and, I argue, in a real engine: the
   two strict xfails below give the mechanisms. What holds, and is tested, is the trade-off Sarathi-Serve
   builds on: at the same decode batch, the longest gap a stream can wait through (an iteration that
   fills the budget with prompt tokens, the stall) never shortens when the budget grows, in the cost model
   and in the serving model's interpolated tables that the ITL law is built from;
4. a plan's chosen configuration meets its SLO when ``evaluate`` evaluates it.

Properties the current model breaks are strict xfails whose reason gives hypothesis's minimal
counterexample, so they XPASS (and fail) once the model changes.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from planner.costs import CostContext, Parallelism, decode_latency_s, prefill_latency_s
from planner.costs.memory import memory_plan, validate_parallelism
from planner.costs.passes import mixed_step_latency_s
from planner.engines import ENGINE_IDS, find_engine
from planner.errors import PlannerError
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.optimize.chunked import ChunkedSearch, plan_chunked
from planner.optimize.plan import Configuration, PlanSearch, plan
from planner.serving.aggregated import AggregatedModel
from planner.serving.evaluate import evaluate
from planner.serving.types import (
    AggregatedDeployment,
    DisaggregatedDeployment,
    Evaluation,
    PoolSpec,
    ServingProblem,
    Slo,
)
from planner.serving.workload import Arrival, Workload, fixed_length, lognormal_lengths

GPUS = load_catalog()
MODELS = load_model_catalog()
#: relative floating tolerance of every comparison
RTOL = 1e-9
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: the cost-model properties cost ~5 ms an example: more of them
COST_PROPERTY = settings(PROPERTY, max_examples=60)

# --------------------------------------------------------------------------------------------------
# deployments of the cost model: every (model, GPU, weight dtype, TP) of these lists that the engines can
# run (TP divides the heads, fits one scale-up domain) and that holds its weights plus 64k tokens of KV
# --------------------------------------------------------------------------------------------------

COST_MODELS = (
    "meta-llama/Llama-3.1-8B",  # dense GQA
    "meta-llama/Llama-3.1-70B",
    "Qwen/Qwen3-32B",
    "mistralai/Mistral-7B-v0.1",  # sliding window
    "facebook/opt-13b",  # MHA, ungated MLP
    "Qwen/Qwen3.5-27B",  # dense, hybrid linear attention
    "Qwen/Qwen3-30B-A3B",  # MoE
    "mistralai/Mixtral-8x7B-v0.1",  # MoE, few large experts
    "openai/gpt-oss-20b",  # MoE, alternating sliding window
    "Qwen/Qwen3.5-35B-A3B",  # MoE, hybrid linear attention
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",  # MoE with a shared expert
    "deepseek-ai/DeepSeek-V3",  # MoE, MLA
)
COST_GPUS = ("h100-sxm", "a100-80gb-sxm", "h200-sxm", "b200", "mi300x", "l40s", "gaudi3", "tpu-v6e")
WEIGHT_DTYPES = ("bf16", "fp8", "fp4", "int4")
TENSOR_PARALLEL = (1, 2, 4, 8)
#: longest prompt × batch the cost-model properties draw (every deployment holds this much KV)
MAX_TOKENS = 65_536


def _runnable(ctx: CostContext) -> bool:
    if ctx.parallelism.tp > ctx.gpu.scale_up_domain_size:
        return False
    try:
        validate_parallelism(ctx)
        mem = memory_plan(ctx, max_context_tokens=MAX_TOKENS)
    except PlannerError:
        return False
    return mem.fits and mem.kv_capacity_tokens >= MAX_TOKENS


def _cost_deployments() -> list[tuple[str, str, str, int]]:
    out = []
    vllm = find_engine("vllm")
    for model, gpu, dtype, tp in itertools.product(COST_MODELS, COST_GPUS, WEIGHT_DTYPES, TENSOR_PARALLEL):
        ctx = CostContext(
            model=MODELS.get(model),
            gpu=GPUS[gpu],
            engine=vllm,
            weight_dtype=dtype,
            kv_dtype="bf16",
            parallelism=Parallelism(tp=tp),
        )
        if _runnable(ctx):
            out.append((model, gpu, dtype, tp))
    return out


COST_DEPLOYMENTS = _cost_deployments()


@st.composite
def cost_keys(draw: st.DrawFn) -> tuple[str, str, str, int, str, str]:
    """(model, GPU, weight dtype, TP, engine, KV dtype) of a runnable cost context: the model first (each
    equally likely), then one of its listed deployments, any engine and a bf16 or fp8 KV cache (fp8 halves
    the KV bytes, so it fits wherever bf16 does)."""
    model = draw(st.sampled_from(COST_MODELS))
    _, gpu, dtype, tp = draw(st.sampled_from([d for d in COST_DEPLOYMENTS if d[0] == model]))
    event(f"model {model}")
    return model, gpu, dtype, tp, draw(st.sampled_from(ENGINE_IDS)), draw(st.sampled_from(("bf16", "fp8")))


def _context(key: tuple[str, str, str, int, str, str]) -> CostContext:
    model, gpu, dtype, tp, engine, kv = key
    return CostContext(
        model=MODELS.get(model),
        gpu=GPUS[gpu],
        engine=find_engine(engine),
        weight_dtype=dtype,
        kv_dtype=kv,
        parallelism=Parallelism(tp=tp),
    )


def test_the_cost_deployments_cover_dense_moe_gpus_dtypes_and_tp() -> None:
    """The strategy's pool is what the module docstring promises (guards the filter above)."""
    models = {m for m, *_ in COST_DEPLOYMENTS}
    assert models == set(COST_MODELS)
    assert {MODELS.get(m).is_moe for m in models} == {True, False}
    assert {g for _, g, _, _ in COST_DEPLOYMENTS} == set(COST_GPUS)
    assert {d for _, _, d, _ in COST_DEPLOYMENTS} == set(WEIGHT_DTYPES)
    assert {tp for *_, tp in COST_DEPLOYMENTS} == set(TENSOR_PARALLEL)


# --------------------------------------------------------------------------------------------------
# 1. more prompt tokens never cost less
# --------------------------------------------------------------------------------------------------

#: consecutive prompt lengths checked one token apart from the drawn one (catches a dip at a tile edge)
WINDOW = 96


def _nondecreasing(lat: np.ndarray) -> np.ndarray:
    """Indices ``i`` where ``lat[i + 1]`` is below ``lat[i]`` beyond floating tolerance."""
    return np.flatnonzero(lat[1:] < lat[:-1] * (1.0 - RTOL))


@COST_PROPERTY
@given(
    key=cost_keys(),
    prompt=st.integers(1, 12_000),
    extra=st.integers(1, 4_000),
    batch=st.integers(1, 4),
)
def test_more_prompt_tokens_never_cost_less(key, prompt, extra, batch) -> None:
    ctx = _context(key)
    lengths = np.concatenate([np.arange(prompt, prompt + WINDOW), [prompt + WINDOW + extra]])
    lat = prefill_latency_s(ctx, prompt_tokens=lengths, batch_size=batch)
    assert np.all(np.isfinite(lat)) and np.all(lat > 0)
    bad = _nondecreasing(lat)
    assert bad.size == 0, (
        f"{lengths[bad[0] + 1]} tokens take {lat[bad[0] + 1]:.6g} s, "
        f"{lengths[bad[0]]} take {lat[bad[0]]:.6g} s"
    )


@COST_PROPERTY
@given(
    key=cost_keys(),
    prompt=st.integers(2, 12_000),
    extra=st.integers(1, 4_000),
    batch=st.integers(1, 4),
    hit=st.floats(0.0, 0.95),
)
def test_more_prompt_tokens_never_cost_less_with_a_cached_prefix(key, prompt, extra, batch, hit) -> None:
    """With a prefix-cache hit fraction (the cached prefix grows with the prompt) and with a fixed cached
    prefix, a longer prompt never takes less time."""
    ctx = _context(key)
    lengths = np.concatenate([np.arange(prompt, prompt + WINDOW), [prompt + WINDOW + extra]])
    cached = np.minimum(np.floor(hit * lengths), lengths - 1)
    lat = prefill_latency_s(ctx, prompt_tokens=lengths, batch_size=batch, cached_tokens=cached)
    bad = _nondecreasing(lat)
    assert bad.size == 0, (
        f"hit {hit:.3f}: {lengths[bad[0] + 1]} tokens ({cached[bad[0] + 1]:.0f} cached) take "
        f"{lat[bad[0] + 1]:.6g} s, {lengths[bad[0]]} ({cached[bad[0]]:.0f} cached) take {lat[bad[0]]:.6g} s"
    )
    prefix = float(cached[0])
    lat = prefill_latency_s(ctx, prompt_tokens=lengths, batch_size=batch, cached_tokens=prefix)
    bad = _nondecreasing(lat)
    assert bad.size == 0, (
        f"{prefix:.0f} cached: {lengths[bad[0] + 1]} tokens take {lat[bad[0] + 1]:.6g} s, {lengths[bad[0]]} "
        f"take {lat[bad[0]]:.6g} s"
    )


# deployments of the serving evaluator: weights plus a few long requests' KV fit on every one
SERVING_DEPLOYMENTS = (
    ("meta-llama/Llama-3.1-8B", "h100-sxm", 1, "bf16"),
    ("meta-llama/Llama-3.1-70B", "h100-sxm", 4, "fp8"),
    ("Qwen/Qwen3-8B", "a100-80gb-sxm", 1, "bf16"),
    ("Qwen/Qwen3-8B", "l40s", 1, "fp8"),
    ("Qwen/Qwen3-30B-A3B", "h200-sxm", 1, "bf16"),
    ("mistralai/Mixtral-8x7B-v0.1", "mi300x", 2, "bf16"),
    ("openai/gpt-oss-20b", "b200", 1, "fp4"),
    ("Qwen/Qwen3.5-35B-A3B", "h100-sxm", 2, "bf16"),
    ("deepseek-ai/DeepSeek-V3", "h200-sxm", 8, "fp8"),
)


def _serving_problem(
    deployment: tuple[str, str, int, str],
    *,
    engine: str = "vllm",
    inp,  # noqa: ANN001
    out,  # noqa: ANN001
    rate_per_s: float = 1.0,
    token_budget: int = 8192,
    chunked: bool = True,
    hit: float = 0.0,
) -> ServingProblem:
    model, gpu_id, tp, dtype = deployment
    dep = AggregatedDeployment(
        gpu=GPUS[gpu_id],
        parallelism=Parallelism(tp=tp),
        token_budget=token_budget,
        chunked_prefill=chunked,
    )
    wl = Workload(
        input_tokens=inp,
        output_tokens=out,
        arrival=Arrival(kind="poisson", rate_per_s=rate_per_s),
        prefix_cache_hit_fraction=hit,
    )
    return ServingProblem(
        model=MODELS.get(model),
        engine=find_engine(engine),
        weight_dtype=dtype,
        kv_dtype="fp8" if dtype == "fp8" else "bf16",
        deployment=dep,
        workload=wl,
    )


def _at_rate(problem: ServingProblem, rate_per_s: float) -> ServingProblem:
    arrival = dataclasses.replace(problem.workload.arrival, rate_per_s=rate_per_s)
    return dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, arrival=arrival))


def _saturation(problem: ServingProblem) -> float:
    """The rate an overloaded deployment serves (``evaluate`` reports its saturation rate)."""
    return evaluate(_at_rate(problem, 1e7)).requests_per_s


@PROPERTY
@given(
    deployment=st.sampled_from(SERVING_DEPLOYMENTS),
    engine=st.sampled_from(ENGINE_IDS),
    prompt=st.integers(1, 12_000),
    extra=st.integers(1, 4_000),
    output=st.integers(2, 500),
    hit=st.sampled_from((0.0, 0.25, 0.5, 0.9)),
    budget=st.sampled_from((256, 512, 2048, 8192, None)),
    load=st.floats(0.01, 0.5),
)
def test_more_prompt_tokens_never_lower_the_served_prefill_time(
    deployment, engine, prompt, extra, output, hit, budget, load
) -> None:
    """In ``evaluate``, at the same light load (a share of the longer prompt's saturation rate), the prompt's
    own prefill time and the mean TTFT never fall when the prompt grows (``budget`` None: no chunking)."""
    chunked = budget is not None

    def problem(tokens: int) -> ServingProblem:
        return _serving_problem(
            deployment,
            engine=engine,
            inp=fixed_length(tokens),
            out=fixed_length(output),
            token_budget=budget or 32_768,
            chunked=chunked,
            hit=hit,
        )

    short, long = problem(prompt), problem(prompt + extra)
    rate = load * min(_saturation(short), _saturation(long))
    a, b = evaluate(_at_rate(short, rate)), evaluate(_at_rate(long, rate))
    assert a.feasible and b.feasible
    assert b.ttft_breakdown_s.prefill >= a.ttft_breakdown_s.prefill * (1 - RTOL), (
        f"prefill {a.ttft_breakdown_s.prefill:.6g} s -> {b.ttft_breakdown_s.prefill:.6g} s "
        f"at {rate:.4g} req/s"
    )
    assert b.ttft_s.mean >= a.ttft_s.mean * (1 - RTOL), (
        f"mean TTFT {a.ttft_s.mean:.6g} s -> {b.ttft_s.mean:.6g} s at {rate:.4g} req/s"
    )


# --------------------------------------------------------------------------------------------------
# 2. more memory bandwidth never makes decode slower
# --------------------------------------------------------------------------------------------------

DECODE_BATCH = np.array([1, 2, 8, 32, 128, 512], dtype=np.float64)[:, None]
DECODE_CONTEXT = np.array([1, 100, 1000, 4000, 16_000, 32_000], dtype=np.float64)[None, :]


def _with_bandwidth(ctx: CostContext, factor: float) -> CostContext:
    gpu = dataclasses.replace(ctx.gpu, hbm_bandwidth_bytes_per_s=ctx.gpu.hbm_bandwidth_bytes_per_s * factor)
    return dataclasses.replace(ctx, gpu=gpu)


@COST_PROPERTY
@given(
    key=cost_keys(),
    factors=st.lists(st.floats(1.0, 4.0), min_size=1, max_size=3),
    batch=st.integers(1, 256),
    context_tokens=st.integers(1, 32_768),
)
def test_more_memory_bandwidth_never_makes_decode_slower(key, factors, batch, context_tokens) -> None:
    """A copy of the catalog GPU with more HBM bandwidth (a ladder of factors ≥ 1) takes no longer for one
    decode step, at the drawn (batch, context) and over a grid of them, wherever the batch's KV fits."""
    ctx = _context(key)
    capacity = memory_plan(ctx, max_context_tokens=int(DECODE_CONTEXT.max()) + 1).kv_capacity_tokens
    batch = max(1, min(batch, capacity // (context_tokens + 1)))
    batch_grid = np.concatenate([DECODE_BATCH.ravel(), [batch]])[:, None]
    ctx_grid = np.concatenate([DECODE_CONTEXT.ravel(), [context_tokens]])[None, :]
    fits = batch_grid * (ctx_grid + 1) <= max(capacity, batch * (context_tokens + 1))
    previous = decode_latency_s(ctx, batch_size=batch_grid, context_tokens=ctx_grid)
    assert np.all(np.isfinite(previous)) and np.all(previous > 0)
    bw = 1.0
    for factor in sorted(factors):
        step = decode_latency_s(_with_bandwidth(ctx, factor), batch_size=batch_grid, context_tokens=ctx_grid)
        slower = np.argwhere(fits & (step > previous * (1 + RTOL)))
        if slower.size:
            i, j = slower[0]
            pytest.fail(
                f"{ctx.gpu.id} bandwidth ×{bw:.4g} -> ×{factor:.4g}: batch {batch_grid[i, 0]:.0f}, "
                f"context {ctx_grid[0, j]:.0f}: {previous[i, j]:.6g} s -> {step[i, j]:.6g} s"
            )
        previous, bw = step, factor


# --------------------------------------------------------------------------------------------------
# 3. a larger token budget never lowers ITL (aggregated, chunked prefill, the same load)
# --------------------------------------------------------------------------------------------------


#: prompt lengths: ("fixed", tokens) or ("lognormal", median tokens)
prompt_specs = st.one_of(
    st.tuples(st.just("fixed"), st.integers(16, 8_000)),
    st.tuples(st.just("lognormal"), st.integers(100, 2_000)),
)


def _lengths(spec: tuple[str, int], *, p90: int, max_tokens: int):  # noqa: ANN202
    kind, tokens = spec
    return (
        fixed_length(tokens)
        if kind == "fixed"
        else lognormal_lengths(median=tokens, p90=p90, max_tokens=max_tokens)
    )


def _budget_pair(deployment, prompt, output, small, extra, load):  # noqa: ANN001, ANN202
    """Two chunked deployments differing only in their token budget (``small`` and ``small + extra``), at a
    rate both sustain (``load`` times the smaller of their saturation rates), evaluated."""
    pair = [
        _serving_problem(
            deployment,
            inp=_lengths(prompt, p90=4_000, max_tokens=16_000),
            out=fixed_length(output),
            token_budget=tb,
        )
        for tb in (small, small + extra)
    ]
    rate = load * min(_saturation(p) for p in pair)
    a, b = (evaluate(_at_rate(p, rate)) for p in pair)
    assert a.feasible and b.feasible

    def describe(stat: str) -> str:
        return (
            f"{rate:.6g} req/s: ITL {stat} {getattr(a.itl_s, stat):.6g} s at budget {small}, "
            f"{getattr(b.itl_s, stat):.6g} s at budget {small + extra}"
        )

    return a, b, describe


budget_args = dict(
    deployment=st.sampled_from(SERVING_DEPLOYMENTS),
    prompt=prompt_specs,
    output=st.integers(8, 800),
    small=st.integers(256, 8_192),
    extra=st.integers(1, 8_192),
    load=st.floats(0.05, 0.95),
)


@COST_PROPERTY
@given(
    key=cost_keys(),
    batch=st.integers(0, 256),
    small=st.integers(257, 8_192),
    extra=st.integers(1, 8_192),
    context=st.integers(1, 32_768),
    offset=st.integers(0, 16_384),
)
def test_a_larger_token_budget_never_shortens_a_full_budget_iteration(
    key, batch, small, extra, context, offset
) -> None:
    """The stall: ``batch`` decodes and as many prompt tokens as the budget leaves, one iteration."""
    ctx = _context(key)
    budgets = np.array([small, small + extra], dtype=np.float64)
    lat = mixed_step_latency_s(
        ctx,
        decode_batch=batch,
        decode_context_tokens=context,
        prefill_tokens=budgets - batch,
        prefill_cached_tokens=offset,
    )
    assert lat[1] >= lat[0] * (1 - RTOL), (
        f"{batch} decodes: {lat[0]:.9g} s at budget {small}, {lat[1]:.9g} s at {small + extra}"
    )


#: the serving tables interpolate the iteration time between chunk sizes at fractions of the budget: two
#: budgets' nodes sit at different token counts, so equal iterations may differ by the interpolation's
#: round-off (~1e-8 relative, see the xfails below); a real shortening is orders of magnitude larger
TABLE_RTOL = 1e-6


@PROPERTY
@given(
    deployment=st.sampled_from(SERVING_DEPLOYMENTS),
    prompt=prompt_specs,
    output=st.integers(8, 800),
    small=st.integers(256, 8_192),
    extra=st.integers(1, 8_192),
    batch_share=st.floats(0.0, 1.0),
)
def test_a_larger_token_budget_never_shortens_the_stall_a_stream_waits_through(
    deployment, prompt, output, small, extra, batch_share
) -> None:
    """In the serving model's tables (one model, both budgets), at the same decode batch."""
    problem = _serving_problem(
        deployment, inp=_lengths(prompt, p90=4_000, max_tokens=16_000), out=fixed_length(output)
    )
    model = AggregatedModel(problem, token_budgets=np.array([small, small + extra], dtype=np.float64))
    b = np.array([batch_share * min(model.batch_cap, small - 1.0)] * 2)
    c_left = np.maximum(model.budgets - b, 1.0)
    stall = model.tables.mixed(b[:, None], c_left[:, None], np.array([0, 1]))[:, 0]
    assert stall[1] >= stall[0] * (1 - TABLE_RTOL), (
        f"decode batch {b[0]:.4g}: stall {stall[0]:.9g} s at budget {small}, {stall[1]:.9g} s at "
        f"{small + extra}"
    )


LLAMA_8B_H100 = ("meta-llama/Llama-3.1-8B", "h100-sxm", 1, "bf16")
QWEN3_30B_H200 = ("Qwen/Qwen3-30B-A3B", "h200-sxm", 1, "bf16")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "false in the model. Minimal (hypothesis): Qwen3-30B-A3B bf16 on 1 H200, 16-token prompts, 8 output "
        "tokens, 38.2034 req/s: mean ITL 12.91957 ms at budget 256, 12.91787 ms at 257 (the budget never "
        "binds: the chunk time is interpolated between nodes at CHUNK_FRACTIONS x (budget - B), "
        "planner/serving/aggregated.py AggregatedModel.table_inputs / _Tables.segments). Structural: "
        "2000-token prompts, 200 outputs, 3.14521 req/s: 20.39 ms at budget 256, 15.12 ms at 2048 (each of "
        "the ceil(L / (budget - B)) mixed iterations re-pays the step's fixed costs and weight/expert "
        "streaming: AggregatedModel._chunked's mean iteration time falls as chunks grow)"
    ),
)
@PROPERTY
@example(deployment=QWEN3_30B_H200, prompt=("fixed", 16), output=8, small=256, extra=1, load=0.5)
@example(deployment=QWEN3_30B_H200, prompt=("fixed", 2000), output=200, small=256, extra=1792, load=0.8)
@given(**budget_args)
def test_a_larger_token_budget_never_lowers_the_mean_itl(
    deployment, prompt, output, small, extra, load
) -> None:
    a, b, describe = _budget_pair(deployment, prompt, output, small, extra, load)
    assert b.itl_s.mean >= a.itl_s.mean * (1 - RTOL), describe("mean")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "false in the model. Minimal (hypothesis): Llama-3.1-8B bf16 on 1 H100, 16-token prompts, 8 output "
        "tokens, 171.618 req/s: ITL p90 8.651972113 ms at budget 256, 8.651971934 ms at 257 (-2e-8: the "
        "same budget-scaled interpolation nodes, planner/serving/aggregated.py _Tables.segments). "
        "Structural: 2000-token prompts, 200 outputs, 0.690321 req/s: p99 22.68 ms at budget 1024, 8.146 ms "
        "at 2048 (two mixed iterations per request put more than 1 % of the gaps on a stalled iteration, one "
        "longer one puts fewer: the p99 of evaluate.py _evaluate_aggregated's discrete ITL law drops to the "
        "decode-only iteration)"
    ),
)
@PROPERTY
@example(deployment=LLAMA_8B_H100, prompt=("fixed", 16), output=8, small=256, extra=1, load=0.75)
@example(deployment=LLAMA_8B_H100, prompt=("fixed", 2000), output=200, small=1024, extra=1024, load=0.05)
@given(**budget_args)
def test_a_larger_token_budget_never_lowers_the_tail_itl(
    deployment, prompt, output, small, extra, load
) -> None:
    a, b, describe = _budget_pair(deployment, prompt, output, small, extra, load)
    for stat in ("p90", "p99"):
        assert getattr(b.itl_s, stat) >= getattr(a.itl_s, stat) * (1 - RTOL), describe(stat)


# --------------------------------------------------------------------------------------------------
# 4. a plan's chosen configuration meets its SLO when evaluated
# --------------------------------------------------------------------------------------------------

PERCENTILES = (50.0, 90.0, 99.0)


@st.composite
def slos(draw: st.DrawFn) -> Slo:
    ttft = draw(st.one_of(st.none(), st.floats(0.1, 5.0)))
    itl = draw(st.floats(0.01, 0.2)) if ttft is None else draw(st.one_of(st.none(), st.floats(0.01, 0.2)))
    return Slo(
        ttft_s=ttft,
        ttft_percentile=draw(st.sampled_from(PERCENTILES)),
        itl_s=itl,
        itl_percentile=draw(st.sampled_from(PERCENTILES)),
    )


#: (prompt spec, output spec, prefix-cache hit fraction); a spec is ("fixed", tokens) or ("lognormal", median)
workload_specs = st.tuples(
    st.one_of(
        st.tuples(st.just("fixed"), st.integers(16, 4_000)),
        st.tuples(st.just("lognormal"), st.integers(100, 1_500)),
    ),
    st.one_of(
        st.tuples(st.just("fixed"), st.integers(8, 800)),
        st.tuples(st.just("lognormal"), st.integers(50, 300)),
    ),
    st.sampled_from((0.0, 0.0, 0.5)),
)


def _workload(spec) -> Workload:  # noqa: ANN001
    prompt, output, hit = spec
    return Workload(
        input_tokens=_lengths(prompt, p90=3_000, max_tokens=12_000),
        output_tokens=_lengths(output, p90=800, max_tokens=2_000),
        arrival=Arrival(kind="poisson", rate_per_s=1.0),
        prefix_cache_hit_fraction=hit,
    )


def _open_loop(workload: Workload, rate_per_s: float, arrival_cv: float) -> Workload:
    arrival = (
        Arrival(kind="poisson", rate_per_s=rate_per_s)
        if arrival_cv == 1.0
        else Arrival(kind="gamma", rate_per_s=rate_per_s, cv=arrival_cv)
    )
    return dataclasses.replace(workload, arrival=arrival)


def _slo_misses(ev: Evaluation, slo: Slo) -> list[str]:
    """What ``ev`` misses of ``slo``: steady state, and each target at its percentile."""
    misses = [] if ev.feasible else ["overloaded (not a steady state)"]
    for name, target, pct, stats in (
        ("TTFT", slo.ttft_s, slo.ttft_percentile, ev.ttft_s),
        ("ITL", slo.itl_s, slo.itl_percentile, ev.itl_s),
    ):
        if target is None:
            continue
        got = getattr(stats, f"p{pct:g}")
        if not got <= target * (1 + RTOL):
            misses.append(f"{name} p{pct:g} {got:.6g} s > {target:.6g} s")
    return misses


@PROPERTY
@given(
    deployment=st.sampled_from(SERVING_DEPLOYMENTS),
    engine=st.sampled_from(ENGINE_IDS),
    replicas=st.integers(1, 3),
    workload=workload_specs,
    slo=slos(),
    arrival_cv=st.sampled_from((1.0, 1.0, 2.0)),
    target=st.one_of(st.none(), st.floats(0.05, 20.0)),
)
def test_the_chunk_budget_plan_meets_its_slo_when_evaluated(
    deployment, engine, replicas, workload, slo, arrival_cv, target
) -> None:
    model, gpu, tp, dtype = deployment
    workload = _workload(workload)
    problem = ServingProblem(
        model=MODELS.get(model),
        engine=find_engine(engine),
        weight_dtype=dtype,
        kv_dtype="fp8" if dtype == "fp8" else "bf16",
        workload=workload,
        deployment=AggregatedDeployment(gpu=GPUS[gpu], parallelism=Parallelism(tp=tp), replicas=replicas),
    )
    result = plan_chunked(
        ChunkedSearch(problem=problem, slo=slo, arrival_cv=arrival_cv, target_rate_per_s=target)
    )
    event(f"chunk plan {result.status}")
    if result.status != "optimal":
        return
    assert result.token_budget is not None and result.max_batch_size is not None
    if target is not None:
        assert result.rate_per_s == pytest.approx(target, rel=RTOL)
    chosen = dataclasses.replace(
        problem.deployment,
        token_budget=result.token_budget,
        max_batch_size=result.max_batch_size,
        chunked_prefill=True,
    )
    ev = evaluate(
        dataclasses.replace(
            problem, deployment=chosen, slo=slo, workload=_open_loop(workload, result.rate_per_s, arrival_cv)
        )
    )
    assert ev.requests_per_s == pytest.approx(result.rate_per_s, rel=RTOL)
    misses = _slo_misses(ev, slo)
    assert not misses, (
        f"budget {result.token_budget}, batch limit {result.max_batch_size} "
        f"at {result.rate_per_s:.6g} req/s: " + "; ".join(misses)
    )


PLAN_MODELS = (
    ("meta-llama/Llama-3.1-8B", "bf16"),
    ("Qwen/Qwen3-8B", "fp8"),
    ("Qwen/Qwen3-30B-A3B", "bf16"),
    ("openai/gpt-oss-20b", "fp4"),
)
PLAN_GPUS = ("h100-sxm", "a100-80gb-sxm", "h200-sxm", "b200", "mi300x", "l40s")


plan_args = dict(
    model=st.sampled_from(PLAN_MODELS),
    gpus=st.lists(st.sampled_from(PLAN_GPUS), min_size=1, max_size=2, unique=True),
    tensor_parallel=st.sampled_from(((1, 2), (1, 2, 4))),
    workload=workload_specs,
    slo=slos(),
    #: a GPU budget (int) or a target rate (float) with its objective
    goal=st.one_of(
        st.integers(1, 8),
        st.tuples(st.floats(0.1, 50.0), st.sampled_from(("goodput_per_gpu", "gpus_needed"))),
    ),
    arrival_cv=st.sampled_from((1.0, 1.0, 2.0)),
)


def _plan_search(model, gpus, tensor_parallel, workload, slo, goal, arrival_cv) -> PlanSearch:  # noqa: ANN001
    """A small whole-plan problem: one or two GPU types, TP up to 2 or 4, a GPU budget or a target rate."""
    model_id, dtype = model
    candidates = tuple(GPUS[g] for g in gpus)
    problem = ServingProblem(
        model=MODELS.get(model_id),
        engine=find_engine("vllm"),
        weight_dtype=dtype,
        kv_dtype="fp8" if dtype == "fp8" else "bf16",
        workload=_workload(workload),
        deployment=AggregatedDeployment(gpu=candidates[0]),
    )
    if isinstance(goal, int):
        total, target, objective = goal, None, "goodput_per_gpu"
    else:
        total, (target, objective) = None, goal
    return PlanSearch(
        problem=problem,
        slo=slo,
        gpus=candidates,
        tensor_parallel=tensor_parallel,
        total_gpus=total,
        target_rate_per_s=target,
        objective=objective,
        arrival_cv=arrival_cv,
    )


def _deployment_of(cfg: Configuration, search: PlanSearch) -> AggregatedDeployment | DisaggregatedDeployment:
    gpus = {g.id: g for g in search.gpus}
    if cfg.mode == "disaggregated":
        assert cfg.prefill_gpu is not None and cfg.decode_gpu is not None
        return DisaggregatedDeployment(
            prefill=PoolSpec(
                gpu=gpus[cfg.prefill_gpu], parallelism=cfg.prefill_parallelism, workers=cfg.prefill_workers
            ),
            decode=PoolSpec(
                gpu=gpus[cfg.decode_gpu], parallelism=cfg.decode_parallelism, workers=cfg.decode_workers
            ),
            kv_link=cfg.kv_link,
        )
    assert cfg.gpu is not None and cfg.parallelism is not None and cfg.replicas is not None
    return AggregatedDeployment(
        gpu=gpus[cfg.gpu],
        parallelism=cfg.parallelism,
        replicas=cfg.replicas,
        max_batch_size=cfg.max_batch_size,
        token_budget=cfg.token_budget,
        chunked_prefill=cfg.mode == "aggregated_chunked",
    )


def _evaluate_configuration(cfg: Configuration, search: PlanSearch) -> list[str]:
    problem = dataclasses.replace(
        search.problem,
        deployment=_deployment_of(cfg, search),
        slo=search.slo,
        workload=_open_loop(search.problem.workload, cfg.rate_per_s, search.arrival_cv),
    )
    ev = evaluate(problem)
    misses = _slo_misses(ev, search.slo)
    if not misses and search.target_rate_per_s is not None:
        # a target-rate plan must serve the target itself
        if ev.requests_per_s < search.target_rate_per_s * (1 - RTOL):
            misses.append(
                f"serves {ev.requests_per_s:.6g} of the {search.target_rate_per_s:.6g} req/s target"
            )
    return [f"{cfg.label} (verified={cfg.verified}) at {cfg.rate_per_s:.6g} req/s: {m}" for m in misses]


# found by hypothesis (this example): the plan ranked first a configuration its verification had refuted,
# because evaluate's saturation was the last stable point of a 48-point batch grid (15 % under the search's
# stability edge). The curve now locates the edge between its grid points, and a refuted configuration
# ranks last.
@PROPERTY
@example(
    model=("meta-llama/Llama-3.1-8B", "bf16"),
    gpus=["h100-sxm"],
    tensor_parallel=(1, 2),
    workload=(("fixed", 16), ("fixed", 16), 0.0),
    slo=Slo(ttft_s=None, ttft_percentile=50.0, itl_s=0.125, itl_percentile=50.0),
    goal=1,
    arrival_cv=1.0,
)
@given(**plan_args)
def test_the_whole_plan_chosen_configuration_meets_its_slo_when_evaluated(
    model, gpus, tensor_parallel, workload, slo, goal, arrival_cv
) -> None:
    search = _plan_search(model, gpus, tensor_parallel, workload, slo, goal, arrival_cv)
    result = plan(search)
    event(f"plan {result.status}")
    if result.status != "optimal":
        return
    chosen = result.configurations[0]
    event(f"chosen {chosen.mode}")
    misses = _evaluate_configuration(chosen, search)
    assert not misses, "; ".join(misses)


@PROPERTY
@given(**plan_args)
def test_every_verified_configuration_of_the_whole_plan_meets_its_slo(
    model, gpus, tensor_parallel, workload, slo, goal, arrival_cv
) -> None:
    """What the plan marks ``verified`` holds when evaluated again from the configuration's own fields."""
    search = _plan_search(model, gpus, tensor_parallel, workload, slo, goal, arrival_cv)
    result = plan(search)
    misses = [
        m for cfg in result.configurations if cfg.verified for m in _evaluate_configuration(cfg, search)
    ]
    assert not misses, "; ".join(misses)
