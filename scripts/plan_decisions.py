"""Reproduce three published serving decisions with the planner's searches; write docs/accuracy_decisions.md.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/plan_decisions.py [--shared DIR] [--docs DIR]

The published numbers are read from ``shared/data/published_measurements.csv`` (row ids in the tables);
what the rows do not state is a constant below, with its source:

1. **DistServe** (Zhong et al., OSDI 2024, Fig. 1 and Sec. 1; DS-001..DS-004): OPT-13B on one A100-80GB,
   input 512 / output 64, goodput = largest rate with >= 90 % of requests within the SLO. Colocated ~1.6,
   prefill-only ~5.6 and decode-only ~10 requests/s per GPU; two prefill GPUs + one decode GPU ~3.3.
   The SLO is only drawn in the figure (the rows say so); the authors' blog on the same figure
   (hao-ai-lab.github.io/blogs/distserve, 2024-03-17) states it: P90 TTFT 0.4 s and P90 TPOT 0.04 s, and
   the colocated system's TTFT-only limit ~2.3 requests/s. A 3 x 3 grid around it checks robustness.
2. **Sarathi-Serve** (Agrawal et al., OSDI 2024, Sec. 5.1-5.2 / Fig. 12, Table 4; SS-001/002, SS-011..022,
   SS-024/028/029): a 512-token budget meets the strict P99 TBT SLO where 2048 serves far less, and 2048
   is the better budget under the relaxed SLO. Request lengths: the paper's Table 2 (median and P90 of
   prompts and outputs; not in the CSV) as lognormals. Table 4's run conditions (rate, batch limit) come
   from the authors' artifact, microsoft/sarathi-serve ``osdi-experiments/table-6/scheduling_ablation.sh``
   (commit 02d2567): Poisson at 1 QPS (openchat_sharegpt4) and 0.5 QPS (arxiv_summarization), 128
   requests, max batch 128.
3. **Splitwise** (Patel et al., ISCA 2024, Table IV, Table VI, Sec. IV; SW-001..SW-021): the prompt phase
   gains more from H100 than the token phase. H100/A100 speedups of the two phases (cost model), the
   pools' SLO capacities per worker, and which GPU a cost-minimizing ``plan_disaggregated`` picks per pool.

Runs in a few seconds; every number in the report is recomputed on each run.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.costs import CostContext, Parallelism, decode_latency_s, prefill_latency_s  # noqa: E402
from planner.costs.passes import mixed_step_latency_s  # noqa: E402
from planner.engines import find_engine  # noqa: E402
from planner.hardware import GpuSpec, load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402
from planner.optimize.chunked import ChunkedSearch, aggregated_option, plan_chunked  # noqa: E402
from planner.optimize.disaggregated import (  # noqa: E402
    DisaggregatedPlan,
    DisaggregatedSearch,
    PoolCandidate,
    plan_disaggregated,
)
from planner.serving.evaluate import evaluate  # noqa: E402
from planner.serving.types import AggregatedDeployment, Evaluation, ServingProblem, Slo  # noqa: E402
from planner.serving.workload import Arrival, LengthDistribution, Workload, fixed_length, lognormal_lengths  # noqa: E402

DOCS = ROOT / "docs"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/plan_decisions.py"
ENGINE = "vllm"  # every study ran vLLM or a prototype built on it

# ------------------------------------------------------------------------------------------------ DistServe
DS_MODEL = "facebook/opt-13b"
DS_GPU = "a100-80gb-sxm"
DS_PROMPT_TOKENS = 512
DS_OUTPUT_TOKENS = 64
#: P90 TTFT / P90 TPOT of Fig. 1, stated in the authors' blog (the CSV rows: "SLO values only in figure")
DS_TTFT_S = 0.4
DS_TPOT_S = 0.04
DS_PERCENTILE = 90.0
#: the colocated system's TTFT-only limit, blog text (not a CSV row)
DS_BLOG_COLOCATED_TTFT_LIMIT_PER_S = 2.3
DS_TTFT_GRID_S = (0.3, 0.4, 0.5)
DS_TPOT_GRID_S = (0.03, 0.04, 0.05)

# --------------------------------------------------------------------------------------------- Sarathi-Serve
#: Azure NC96ads A100 v4: A100 80GB PCIe in NVLink-bridged pairs (as planner.validation.datasets reads it)
SS_GPU = "a100-80gb-pcie"
#: name -> (catalog id, tensor parallel degree, CSV row of its strict SLO)
SS_MODELS = {
    "Mistral-7B": ("mistralai/Mistral-7B-v0.1", 1, "SS-001"),
    "Yi-34B": ("01-ai/Yi-34B", 2, "SS-002"),
}


@dataclass(frozen=True)
class Table2Lengths:
    """Sarathi-Serve Table 2 [tokens]: median and P90 of prompts and outputs; the trace's length filter."""

    prompt_median: int
    prompt_p90: int
    output_median: int
    output_p90: int
    max_total_tokens: int


SS_TABLE2 = {
    "openchat_sharegpt4": Table2Lengths(1730, 5696, 415, 834, 8192),
    "arxiv_summarization": Table2Lengths(7059, 12985, 208, 371, 16384),
}
#: Sarathi-Serve's capacity: P99 TBT within the SLO with the median scheduling delay <= 2 s (SS-023 notes);
#: posed as P50 TTFT <= 2 s (TTFT also holds the prompt's own prefill: a slightly stricter reading)
SS_SCHEDULING_DELAY_S = 2.0
SS_BUDGETS = (512, 2048)
#: vLLM baselines at batch limits 32/64/128 (SS-028); Sarathi-Serve at 128 (artifact yi34_strict.yml)
SS_BATCH_LIMITS = (32, 64, 128)
#: Table 4 run (artifact scheduling_ablation.sh): Poisson rate per trace [requests/s], batch limit
SS_TABLE4_RATE_PER_S = {"openchat_sharegpt4": 1.0, "arxiv_summarization": 0.5}
SS_TABLE4_MAX_BATCH = 128
#: Table 4 caption (and the CSV): token budget 1024; the artifact script runs chunk size 512
SS_TABLE4_BUDGET = 1024
SS_ARTIFACT_CHUNK = 512

# ------------------------------------------------------------------------------------------------ Splitwise
SW_MODEL = "meta-llama/Llama-2-70b-hf"
SW_TP = 8  # one 8-GPU DGX machine (TP not stated; SplitwiseSim's profiles are TP8)
SW_GPUS = {"A100": "a100-80gb-sxm", "H100": "h100-sxm"}
SW_DECODE_BATCHES = (1, 64)
SW_TARGET_RATES_PER_S = (10.0, 70.0)  # 70: Splitwise's cost-optimal cluster example (SW-016/017)


# ================================================================================================ data


def default_shared_dir() -> Path:
    env = os.environ.get("PLANNER_SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


def published_rows(shared: Path) -> dict[str, dict[str, str]]:
    """The DS-*, SS-* and SW-* rows of published_measurements.csv, by id."""
    with open(shared / "data" / "published_measurements.csv", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh) if r["id"].split("-")[0] in ("DS", "SS", "SW")}


def value(rows: Mapping[str, Mapping[str, str]], row_id: str) -> float:
    return float(rows[row_id]["value"])


def relaxed_slo_s(row: Mapping[str, str]) -> float:
    """The relaxed P99 TBT SLO stated in a Sarathi-Serve Table 3 row's notes ("relaxed SLO (0.5 s)")."""
    match = re.search(r"relaxed SLO \(([\d.]+) s\)", row["notes"])
    if match is None:
        raise ValueError(f"no relaxed SLO in the notes of {row['id']}")
    return float(match.group(1))


def splitwise_traces(rows: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[int, int]]:
    """Median (prompt, output) tokens of Splitwise's traces, as the rows' notes state them."""
    notes = rows["SW-001"]["notes"]
    out = {}
    for trace in ("coding", "conversation"):
        match = re.search(rf"{trace}: median prompt (\d+) / output (\d+)", notes)
        if match is None:
            raise ValueError(f"no {trace} trace lengths in the SW-001 notes")
        out[trace] = (int(match.group(1)), int(match.group(2)))
    return out


def splitwise_table_iv(
    rows: Mapping[str, Mapping[str, str]],
) -> dict[tuple[str, str, str], tuple[str, float]]:
    """(trace, 'A100'|'H100', 'ttft'|'tbt'|'e2e') -> (row id, P50 [s]) of Table IV."""
    out = {}
    for rid, r in rows.items():
        if not rid.startswith("SW-") or not r["table_or_figure"].startswith("Table IV"):
            continue
        gpu = "A100" if r["gpu"].startswith("A100") else "H100"
        trace = r["workload(isl/osl/batch/chunk/rate)"].split()[0]
        metric = r["metric"].split("_")[0]
        out[(trace, gpu, metric)] = (rid, float(r["value"]) * (1e-3 if r["unit"] == "ms" else 1.0))
    return out


def splitwise_price_ratio(rows: Mapping[str, Mapping[str, str]]) -> dict[str, float]:
    """H100/A100 machine price per hour implied by Table IV (cost per request / E2E latency, one request at a
    time), per trace. Derived, not stated."""
    match = re.search(
        r"cost \$([\d.]+)/\$([\d.]+) \(coding\), \$([\d.]+)/\$([\d.]+) \(conv\)", rows["SW-006"]["notes"]
    )
    if match is None:
        raise ValueError("no Table IV costs in the SW-006 notes")
    ca, ch, va, vh = (float(x) for x in match.groups())
    t4 = splitwise_table_iv(rows)
    return {
        "coding": (ch / t4[("coding", "H100", "e2e")][1]) / (ca / t4[("coding", "A100", "e2e")][1]),
        "conversation": (vh / t4[("conversation", "H100", "e2e")][1])
        / (va / t4[("conversation", "A100", "e2e")][1]),
    }


# ================================================================================================ builders


@dataclass(frozen=True)
class Catalogs:
    gpus: Mapping[str, GpuSpec]
    models: object


def catalogs() -> Catalogs:
    return Catalogs(gpus=load_catalog(), models=load_model_catalog())


def aggregated_problem(
    cat: Catalogs,
    *,
    model: str,
    gpu: str,
    tp: int,
    workload: Workload,
    chunked: bool = True,
    token_budget: int = 8192,
    max_batch_size: int = 256,
) -> ServingProblem:
    dep = AggregatedDeployment(
        gpu=cat.gpus[gpu],
        parallelism=Parallelism(tp=tp),
        chunked_prefill=chunked,
        token_budget=token_budget,
        max_batch_size=max_batch_size,
    )
    return ServingProblem(
        model=cat.models.get(model),
        engine=find_engine(ENGINE),
        weight_dtype="fp16",  # type: ignore[attr-defined]
        kv_dtype="fp16",
        deployment=dep,
        workload=workload,
    )


def at_rate(problem: ServingProblem, rate_per_s: float) -> ServingProblem:
    wl = dataclasses.replace(problem.workload, arrival=Arrival(kind="poisson", rate_per_s=rate_per_s))
    return dataclasses.replace(problem, workload=wl)


def table2_workload(name: str) -> Workload:
    """Sarathi-Serve Table 2 lengths as lognormals (median and P90), prompts cut at the trace's length filter
    minus the median output."""
    t = SS_TABLE2[name]
    prompts = lognormal_lengths(
        median=t.prompt_median, p90=t.prompt_p90, max_tokens=t.max_total_tokens - t.output_median
    )
    outputs = lognormal_lengths(median=t.output_median, p90=t.output_p90)
    return Workload(
        input_tokens=prompts, output_tokens=outputs, arrival=Arrival(kind="poisson", rate_per_s=1.0)
    )


def fixed_workload(prompt_tokens: int, output_tokens: int) -> Workload:
    return Workload(
        input_tokens=fixed_length(prompt_tokens),
        output_tokens=fixed_length(output_tokens),
        arrival=Arrival(kind="poisson", rate_per_s=1.0),
    )


def longest(lengths: LengthDistribution) -> int:
    return int(np.ceil(lengths.max))


# ================================================================================================ DistServe


@dataclass(frozen=True)
class DistServePoint:
    """The planner's DistServe Fig. 1 numbers at one SLO [requests/s per GPU unless said]."""

    ttft_s: float
    tpot_s: float
    colocated_itl: float  # aggregated_option, no chunked prefill, ITL p90 <= TPOT target
    colocated_tpot: float  # evaluate bisection, no chunked prefill, TPOT p90 (DistServe's metric)
    chunked_itl: float
    chunked_tpot: float
    chunked_budget: int | None
    prefill_only: float  # one prefill worker's SLO capacity
    decode_only: float  # one decode worker's SLO capacity
    split: DisaggregatedPlan  # the 3-GPU search


def distserve_problem(cat: Catalogs, chunked: bool) -> ServingProblem:
    return aggregated_problem(
        cat,
        model=DS_MODEL,
        gpu=DS_GPU,
        tp=1,
        chunked=chunked,
        workload=fixed_workload(DS_PROMPT_TOKENS, DS_OUTPUT_TOKENS),
    )


def distserve_slo(ttft_s: float, tpot_s: float | None) -> Slo:
    return Slo(ttft_s=ttft_s, ttft_percentile=DS_PERCENTILE, itl_s=tpot_s, itl_percentile=DS_PERCENTILE)


def tpot_goodput_per_s(problem: ServingProblem, ttft_s: float, tpot_s: float, halvings: int = 30) -> float:
    """Largest Poisson rate whose P90 TTFT and P90 TPOT (per-request mean gap, ``evaluate``'s TPOT) are within
    target: bisection on the rate (the planner's searches test ITL, not TPOT)."""

    def ok(rate: float) -> bool:
        ev = evaluate(at_rate(problem, rate))
        return ev.feasible and ev.ttft_s.p90 <= ttft_s and ev.tpot_s.p90 <= tpot_s

    lo, hi = 0.0, 1.0
    while ok(hi):
        lo, hi = hi, 2.0 * hi
    for _ in range(halvings):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def distserve_split(cat: Catalogs, slo: Slo, total_gpus: int) -> DisaggregatedPlan:
    cand = PoolCandidate(gpu=cat.gpus[DS_GPU], parallelism=Parallelism(tp=1))
    return plan_disaggregated(
        DisaggregatedSearch(
            problem=distserve_problem(cat, False),
            slo=slo,
            prefill_candidates=(cand,),
            decode_candidates=(cand,),
            total_gpus=total_gpus,
        )
    )


def distserve_point(cat: Catalogs, ttft_s: float, tpot_s: float) -> DistServePoint:
    slo = distserve_slo(ttft_s, tpot_s)
    plain, chunked = distserve_problem(cat, False), distserve_problem(cat, True)
    opt_chunked = aggregated_option(chunked, slo)
    chunked_eval = dataclasses.replace(
        chunked,
        deployment=dataclasses.replace(
            chunked.deployment,
            token_budget=opt_chunked.token_budget or 512,
            max_batch_size=opt_chunked.max_batch_size or 256,
        ),
    )
    pair = distserve_split(cat, slo, 2)
    assert pair.prefill is not None and pair.decode is not None
    return DistServePoint(
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        colocated_itl=aggregated_option(plain, slo).capacity_per_replica_per_s,
        colocated_tpot=tpot_goodput_per_s(plain, ttft_s, tpot_s),
        chunked_itl=opt_chunked.capacity_per_replica_per_s,
        chunked_tpot=tpot_goodput_per_s(chunked_eval, ttft_s, tpot_s),
        chunked_budget=opt_chunked.token_budget,
        prefill_only=pair.prefill.capacity_per_s,
        decode_only=pair.decode.capacity_per_s,
        split=distserve_split(cat, slo, 3),
    )


def md1_service_for_ttft_s(rate_per_s: float, ttft_s: float, q: float = 0.9) -> float:
    """The deterministic service time S [s] at which an M/D/1 queue at ``rate_per_s`` has its ``q`` quantile
    of wait + S at ``ttft_s`` (wait: an atom at zero plus an exponential tail of the Pollaczek-Khinchine mean,
    the planner's law): what a published prefill-only goodput implies about the prefill pass."""

    def ttft(s: float) -> float:
        rho = rate_per_s * s
        if rho >= 1.0:
            return np.inf
        mean_wait = rho * s / (2.0 * (1.0 - rho))
        tail = 0.0 if rho <= 1.0 - q else mean_wait / rho * np.log(rho / (1.0 - q))
        return s + tail

    lo, hi = 0.0, 1.0 / rate_per_s
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ttft(mid) <= ttft_s else (lo, mid)
    return lo


def distserve_passes(cat: Catalogs, rows: Mapping[str, Mapping[str, str]]) -> dict[str, float]:
    """The cost model's OPT-13B passes against what DS-002 / DS-003 imply (prefill pass [s], its fraction of
    dense peak, the M/D/1 pass the published prefill-only goodput needs, the decode batch Little's law gives
    the published decode-only goodput at the TPOT target, and the planner's step at that batch [s])."""
    ctx = CostContext(
        model=cat.models.get(DS_MODEL),
        gpu=cat.gpus[DS_GPU],
        engine=find_engine(ENGINE),  # type: ignore[attr-defined]
        weight_dtype="fp16",
        kv_dtype="fp16",
        parallelism=Parallelism(tp=1),
    )
    pre = float(prefill_latency_s(ctx, prompt_tokens=DS_PROMPT_TOKENS))
    flop = 2.0 * cat.models.get(DS_MODEL).active_params_excluding_embedding * DS_PROMPT_TOKENS  # type: ignore[attr-defined]
    batch = value(rows, "DS-003") * (DS_OUTPUT_TOKENS - 1) * DS_TPOT_S
    step = float(
        decode_latency_s(ctx, batch_size=batch, context_tokens=DS_PROMPT_TOKENS + DS_OUTPUT_TOKENS // 2)
    )
    return {
        "prefill_s": pre,
        "prefill_flop": flop,
        "peak_fraction": flop / pre / cat.gpus[DS_GPU].peak_flops_per_s["fp16"],
        "implied_prefill_s": md1_service_for_ttft_s(value(rows, "DS-002"), DS_TTFT_S),
        "implied_batch": batch,
        "step_at_batch_s": step,
    }


def distserve(cat: Catalogs, rows: Mapping[str, Mapping[str, str]]) -> dict[str, object]:
    grid = {(t, p): distserve_point(cat, t, p) for t in DS_TTFT_GRID_S for p in DS_TPOT_GRID_S}
    ttft_only = aggregated_option(distserve_problem(cat, False), distserve_slo(DS_TTFT_S, None))
    return {
        "grid": grid,
        "nominal": grid[(DS_TTFT_S, DS_TPOT_S)],
        "colocated_ttft_only": ttft_only.capacity_per_replica_per_s,
        "passes": distserve_passes(cat, rows),
    }


# ============================================================================================= Sarathi-Serve


def sarathi_problem(
    cat: Catalogs,
    name: str,
    dataset: str,
    *,
    chunked: bool = True,
    token_budget: int = 8192,
    max_batch_size: int = 128,
) -> ServingProblem:
    model, tp, _ = SS_MODELS[name]
    return aggregated_problem(
        cat,
        model=model,
        gpu=SS_GPU,
        tp=tp,
        workload=table2_workload(dataset),
        chunked=chunked,
        token_budget=token_budget,
        max_batch_size=max_batch_size,
    )


def sarathi_slo(itl_s: float) -> Slo:
    return Slo(ttft_s=SS_SCHEDULING_DELAY_S, ttft_percentile=50.0, itl_s=itl_s, itl_percentile=99.0)


@dataclass(frozen=True)
class SarathiCapacity:
    """SLO capacity of one replica [requests/s] per token budget, of vLLM (no chunking), and the searches'
    picks (over ``SS_BUDGETS``, and over the planner's default budgets)."""

    model: str
    dataset: str
    slo_name: str
    itl_s: float
    by_budget: dict[int, float]
    binding: dict[int, str]
    vllm: float
    pick: int | None
    pick_default_grid: int | None
    capacity_default_grid: float


def sarathi_capacity(cat: Catalogs, name: str, dataset: str, slo_name: str, itl_s: float) -> SarathiCapacity:
    slo = sarathi_slo(itl_s)
    problem = sarathi_problem(cat, name, dataset)
    opt = aggregated_option(problem, slo, token_budgets=SS_BUDGETS, max_batch_sizes=SS_BATCH_LIMITS)
    plain = sarathi_problem(
        cat, name, dataset, chunked=False, token_budget=SS_TABLE2[dataset].max_total_tokens
    )
    vllm = aggregated_option(plain, slo, max_batch_sizes=SS_BATCH_LIMITS).capacity_per_replica_per_s
    plan = plan_chunked(
        ChunkedSearch(problem=problem, slo=slo, token_budgets=SS_BUDGETS, max_batch_sizes=SS_BATCH_LIMITS)
    )
    wide = plan_chunked(ChunkedSearch(problem=problem, slo=slo, max_batch_sizes=SS_BATCH_LIMITS))
    return SarathiCapacity(
        model=name,
        dataset=dataset,
        slo_name=slo_name,
        itl_s=itl_s,
        by_budget={p.token_budget: p.max_rate_per_s for p in opt.points},
        binding={p.token_budget: p.binding_constraint for p in opt.points},
        vllm=vllm,
        pick=plan.token_budget,
        pick_default_grid=wide.token_budget,
        capacity_default_grid=wide.rate_per_s,
    )


def table4_evaluation(
    cat: Catalogs, dataset: str, scheduler: str, token_budget: int | None = None
) -> Evaluation:
    """Yi-34B TP2 at Table 4's rate: 'combined' (chunked prefill, stall-free batching) at ``token_budget``, or
    'hybrid' (hybrid batching only: a whole prompt per iteration with the decodes, budget = length filter)."""
    cap = SS_TABLE2[dataset].max_total_tokens
    budget = cap if scheduler == "hybrid" else int(token_budget or SS_TABLE4_BUDGET)
    problem = sarathi_problem(cat, "Yi-34B", dataset, token_budget=budget, max_batch_size=SS_TABLE4_MAX_BATCH)
    return evaluate(at_rate(problem, SS_TABLE4_RATE_PER_S[dataset]))


#: an illustrative mixed iteration: this many decodes of this context, the chunk after this many cached tokens
SS_ITERATION_DECODES = 20
SS_ITERATION_CONTEXT_TOKENS = 2500
SS_ITERATION_CACHED_TOKENS = 1000


def sarathi_iteration_s(cat: Catalogs, name: str, chunk_tokens: int) -> float:
    """One stall-free iteration [s]: ``chunk_tokens`` prefill tokens with ``SS_ITERATION_DECODES`` decodes."""
    model, tp, _ = SS_MODELS[name]
    ctx = CostContext(
        model=cat.models.get(model),
        gpu=cat.gpus[SS_GPU],
        engine=find_engine(ENGINE),  # type: ignore[attr-defined]
        weight_dtype="fp16",
        kv_dtype="fp16",
        parallelism=Parallelism(tp=tp),
    )
    return float(
        mixed_step_latency_s(
            ctx,
            decode_batch=SS_ITERATION_DECODES,
            decode_context_tokens=SS_ITERATION_CONTEXT_TOKENS,
            prefill_tokens=chunk_tokens,
            prefill_cached_tokens=SS_ITERATION_CACHED_TOKENS,
        )
    )


#: Table 4 rows: (dataset, scheduler) -> (P50 TTFT row, P99 TBT row)
SS_TABLE4_ROWS = {
    ("openchat_sharegpt4", "hybrid"): ("SS-011", "SS-012"),
    ("openchat_sharegpt4", "chunked_only"): ("SS-013", "SS-014"),
    ("openchat_sharegpt4", "combined"): ("SS-015", "SS-016"),
    ("arxiv_summarization", "hybrid"): ("SS-017", "SS-018"),
    ("arxiv_summarization", "chunked_only"): ("SS-019", "SS-020"),
    ("arxiv_summarization", "combined"): ("SS-021", "SS-022"),
}


def sarathi(cat: Catalogs, rows: Mapping[str, Mapping[str, str]]) -> dict[str, object]:
    caps = []
    for name, (_, _, strict_row) in SS_MODELS.items():
        for dataset in SS_TABLE2:
            caps.append(sarathi_capacity(cat, name, dataset, "strict", value(rows, strict_row)))
            caps.append(sarathi_capacity(cat, name, dataset, "relaxed", relaxed_slo_s(rows[strict_row])))
    table4: dict[tuple[str, str], Evaluation] = {}
    for dataset in SS_TABLE2:
        table4[(dataset, "hybrid")] = table4_evaluation(cat, dataset, "hybrid")
        table4[(dataset, "combined")] = table4_evaluation(cat, dataset, "combined", SS_TABLE4_BUDGET)
        table4[(dataset, "combined_512")] = table4_evaluation(cat, dataset, "combined", SS_ARTIFACT_CHUNK)
    iteration = {
        (name, c): sarathi_iteration_s(cat, name, c) for name in SS_MODELS for c in (512, 1024, 2048)
    }
    yi = sarathi_problem(cat, "Yi-34B", "openchat_sharegpt4")
    point = aggregated_option(
        yi,
        sarathi_slo(value(rows, "SS-002")),
        token_budgets=(SS_TABLE4_BUDGET,),
        max_batch_sizes=SS_BATCH_LIMITS,
    ).points[0]
    return {
        "capacity": caps,
        "table4": table4,
        "iteration": iteration,
        "overhead_1024": point.chunk_overhead_fraction,
    }


# ================================================================================================ Splitwise


def splitwise_context(cat: Catalogs, gpu: str) -> CostContext:
    return CostContext(
        model=cat.models.get(SW_MODEL),
        gpu=cat.gpus[SW_GPUS[gpu]],
        engine=find_engine(ENGINE),  # type: ignore[attr-defined]
        weight_dtype="fp16",
        kv_dtype="fp16",
        parallelism=Parallelism(tp=SW_TP),
    )


@dataclass(frozen=True)
class PhaseSpeedup:
    """One trace's phase times on A100 and H100 [s] (median prompt; decode at prompt + output/2 context)."""

    trace: str
    prefill_s: dict[str, float]
    decode_s: dict[tuple[str, int], float]

    def prefill_speedup(self, with_overhead_s: float = 0.0) -> float:
        return (self.prefill_s["A100"] + with_overhead_s) / (self.prefill_s["H100"] + with_overhead_s)

    def decode_speedup(self, batch: int) -> float:
        return self.decode_s[("A100", batch)] / self.decode_s[("H100", batch)]


def phase_speedup(cat: Catalogs, trace: str, prompt_tokens: int, output_tokens: int) -> PhaseSpeedup:
    pre, dec = {}, {}
    for gpu in SW_GPUS:
        ctx = splitwise_context(cat, gpu)
        pre[gpu] = float(prefill_latency_s(ctx, prompt_tokens=prompt_tokens))
        for b in SW_DECODE_BATCHES:
            dec[(gpu, b)] = float(
                decode_latency_s(ctx, batch_size=b, context_tokens=prompt_tokens + output_tokens // 2)
            )
    return PhaseSpeedup(trace=trace, prefill_s=pre, decode_s=dec)


def splitwise_slo(cat: Catalogs, rows: Mapping[str, Mapping[str, str]], sp: PhaseSpeedup, pair: str) -> Slo:
    """Table VI's SLOs (slowdowns over an uncontended DGX-A100 request), one TTFT and one TBT percentile,
    relative to the planner's own uncontended A100 request (front-end overhead + prefill; batch-1 step)."""
    ttft_ref = find_engine(ENGINE).request_overhead_s + sp.prefill_s["A100"]
    tbt_ref = sp.decode_s[("A100", 1)]
    ttft_row, tbt_row, pct = {"p99": ("SW-019", "SW-021", 99.0), "p50": ("SW-018", "SW-020", 50.0)}[pair]
    return Slo(
        ttft_s=value(rows, ttft_row) * ttft_ref,
        ttft_percentile=pct,
        itl_s=value(rows, tbt_row) * tbt_ref,
        itl_percentile=pct,
    )


def splitwise_problem(cat: Catalogs, prompt_tokens: int, output_tokens: int) -> ServingProblem:
    return aggregated_problem(
        cat,
        model=SW_MODEL,
        gpu=SW_GPUS["A100"],
        tp=SW_TP,
        workload=fixed_workload(prompt_tokens, output_tokens),
    )


def splitwise_candidates(cat: Catalogs, gpus: Sequence[str] = ("A100", "H100")) -> tuple[PoolCandidate, ...]:
    return tuple(PoolCandidate(gpu=cat.gpus[SW_GPUS[g]], parallelism=Parallelism(tp=SW_TP)) for g in gpus)


def pool_capacity_per_worker(
    cat: Catalogs, problem: ServingProblem, slo: Slo, gpu: str
) -> tuple[float, float]:
    """(prefill, decode) SLO capacity of one worker of ``gpu`` [requests/s]: a 1 + 1 worker split."""
    cand = splitwise_candidates(cat, (gpu,))
    plan = plan_disaggregated(
        DisaggregatedSearch(
            problem=problem, slo=slo, prefill_candidates=cand, decode_candidates=cand, total_gpus=2 * SW_TP
        )
    )
    assert plan.prefill is not None and plan.decode is not None
    return plan.prefill.capacity_per_s, plan.decode.capacity_per_s


def splitwise_pick(
    cat: Catalogs,
    problem: ServingProblem,
    slo: Slo,
    rate_per_s: float,
    prices: dict[str, float] | None,
    gpus: Sequence[str] = ("A100", "H100"),
) -> DisaggregatedPlan:
    cands = splitwise_candidates(cat, gpus)
    return plan_disaggregated(
        DisaggregatedSearch(
            problem=problem,
            slo=slo,
            prefill_candidates=cands,
            decode_candidates=cands,
            target_rate_per_s=rate_per_s,
            price_per_gpu_hour_usd=prices,
        )
    )


def splitwise(cat: Catalogs, rows: Mapping[str, Mapping[str, str]]) -> dict[str, object]:
    traces = splitwise_traces(rows)
    ratio = splitwise_price_ratio(rows)
    a100_price = cat.gpus[SW_GPUS["A100"]].price_per_gpu_hour_usd
    implied_ratio = float(np.mean(list(ratio.values())))
    price_sets: dict[str, dict[str, float] | None] = {
        "catalog": None,
        "Table IV implied": {
            SW_GPUS["A100"]: float(a100_price or 1.0),
            SW_GPUS["H100"]: float(a100_price or 1.0) * implied_ratio,
        },
    }
    speed, caps, picks, hh = {}, {}, {}, {}
    for trace, (p, o) in traces.items():
        sp = phase_speedup(cat, trace, p, o)
        speed[trace] = sp
        problem = splitwise_problem(cat, p, o)
        for pair in ("p99", "p50"):
            slo = splitwise_slo(cat, rows, sp, pair)
            for gpu in SW_GPUS:
                caps[(trace, pair, gpu)] = pool_capacity_per_worker(cat, problem, slo, gpu)
            for rate in SW_TARGET_RATES_PER_S:
                for label, prices in price_sets.items():
                    picks[(trace, pair, rate, label)] = splitwise_pick(cat, problem, slo, rate, prices)
            hh[(trace, pair)] = splitwise_pick(cat, problem, slo, 70.0, None, ("H100",))
    return {
        "traces": traces,
        "speed": speed,
        "caps": caps,
        "picks": picks,
        "hh": hh,
        "price_ratio": ratio,
        "implied_ratio": implied_ratio,
        "catalog_ratio": float(cat.gpus[SW_GPUS["H100"]].price_per_gpu_hour_usd or np.nan)
        / float(a100_price or np.nan),
    }


# ================================================================================================ markdown


def _g(x: float | None, digits: int = 3) -> str:
    if x is None or not np.isfinite(x):
        return "—"
    return f"{x:.{digits}g}"


def _span(values: Sequence[float], digits: int = 2) -> str:
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def cat_gpu(gpu_id: str) -> GpuSpec:
    return load_catalog()[gpu_id]


def _ratio(planner: float | None, published: float | None) -> str:
    if planner is None or published is None or published == 0:
        return "—"
    return f"{planner / published:.2f}"


def _row(
    rid: str, what: str, published: float | None, planner: float | None, unit: str, note: str = ""
) -> str:
    ratio = _ratio(planner, published)
    return f"| {rid} | {what} | {_g(published)} | {_g(planner)} | {ratio} | {unit} | {note} |"


TABLE_HEAD = (
    "| row | quantity | published | planner | planner / published | unit | note |\n"
    "|---|---|---:|---:|---:|---|---|"
)


def distserve_section(rows: Mapping[str, Mapping[str, str]], ds: Mapping[str, object]) -> list[str]:
    nom = ds["nominal"]
    assert isinstance(nom, DistServePoint)
    grid = ds["grid"]
    assert isinstance(grid, dict)
    split = nom.split
    assert split.prefill is not None and split.decode is not None
    pub = {k: value(rows, k) for k in ("DS-001", "DS-002", "DS-003", "DS-004")}
    pub_gain = pub["DS-004"] / pub["DS-001"]
    passes = ds["passes"]
    assert isinstance(passes, dict)
    lines = [
        "## 1. DistServe: disaggregation beats colocation (OPT-13B, one A100 per instance)",
        "",
        "Zhong et al., *DistServe*, OSDI 2024, Fig. 1 and Sec. 1 (rows DS-001..DS-004): input 512 / output "
        "64 tokens, Poisson arrivals, goodput = the largest rate per GPU with ≥ 90 % of requests within "
        "the SLO. The SLO is only drawn in the figure (the rows say so); the authors' blog on the same "
        f"figure states it: **P90 TTFT {DS_TTFT_S} s, P90 TPOT {DS_TPOT_S} s**. Planner: `a100-80gb-sxm`, "
        f"TP1, fp16, engine `{ENGINE}`.",
        "",
        "- *colocated*: one aggregated replica without chunked prefill (DistServe's baseline is vLLM of "
        "early 2024, prefill-prioritizing). `aggregated_option` tests the ITL percentile (per token); "
        "DistServe's TPOT is per request (the mean of its gaps), so the TPOT reading is also given: a "
        "bisection on the rate with `evaluate`'s P90 TTFT and P90 TPOT. With chunked prefill (the "
        "planner's budget search) for comparison.",
        "- *prefill-only* / *decode-only*: the SLO capacity of one prefill worker (TTFT target) and one "
        "decode worker (ITL target) of a 1 + 1 split (`plan_disaggregated`, `total_gpus=2`).",
        "- *2P1D*: `plan_disaggregated` with `total_gpus=3`; DistServe's 3.3 is the idealized "
        "min(2 × 5.6, 10) / 3 (DS-004 notes).",
        "",
        TABLE_HEAD,
        _row(
            "DS-001",
            "colocated goodput per GPU, no chunking, ITL P90 (`aggregated_option`)",
            pub["DS-001"],
            nom.colocated_itl,
            "req/s/GPU",
            "primary",
        ),
        _row(
            "DS-001",
            "colocated goodput per GPU, no chunking, TPOT P90 (`evaluate` bisection)",
            pub["DS-001"],
            nom.colocated_tpot,
            "req/s/GPU",
            "DistServe's metric",
        ),
        _row(
            "DS-001",
            f"colocated, chunked prefill (budget {nom.chunked_budget}), ITL P90",
            pub["DS-001"],
            nom.chunked_itl,
            "req/s/GPU",
            "not DistServe's baseline",
        ),
        _row(
            "DS-001",
            "colocated, chunked prefill, TPOT P90",
            pub["DS-001"],
            nom.chunked_tpot,
            "req/s/GPU",
            "not DistServe's baseline",
        ),
        _row(
            "blog",
            "colocated, TTFT target alone (no chunking)",
            DS_BLOG_COLOCATED_TTFT_LIMIT_PER_S,
            float(ds["colocated_ttft_only"]),
            "req/s/GPU",
            "not a CSV row",
        ),  # type: ignore[arg-type]
        _row("DS-002", "prefill-only instance", pub["DS-002"], nom.prefill_only, "req/s/GPU", ""),
        _row("DS-003", "decode-only instance", pub["DS-003"], nom.decode_only, "req/s/GPU", ""),
        _row(
            "DS-003/DS-002",
            "decode-only over prefill-only",
            pub["DS-003"] / pub["DS-002"],
            nom.decode_only / nom.prefill_only,
            "x",
            "sets the 2:1 split",
        ),
        _row(
            "DS-004",
            f"disaggregated, search on 3 GPUs: {split.prefill.workers}P{split.decode.workers}D",
            pub["DS-004"],
            split.goodput_per_gpu_per_s,
            "req/s/GPU",
            f"{split.limiting_pool} pool limits",
        ),
        _row(
            "DS-004/DS-001",
            "disaggregated over colocated (ITL reading)",
            pub_gain,
            split.goodput_per_gpu_per_s / nom.colocated_itl,
            "x",
            "DS-004 notes: 2.1x",
        ),
        _row(
            "DS-004/DS-001",
            "disaggregated over colocated (TPOT reading)",
            pub_gain,
            split.goodput_per_gpu_per_s / nom.colocated_tpot,
            "x",
            "",
        ),
        _row(
            "DS-004/DS-001",
            "disaggregated over colocated with chunked prefill (ITL)",
            pub_gain,
            split.goodput_per_gpu_per_s / nom.chunked_itl,
            "x",
            "not the paper's comparison",
        ),
        "",
        "Robustness over the SLO (P90 TTFT × P90 TPOT targets; req/s/GPU):",
        "",
        "| TTFT s | TPOT s | colocated ITL | colocated TPOT | chunked ITL | prefill-only | decode-only | "
        "3-GPU split | per GPU | over colocated (ITL / TPOT) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for (t, p), pt in grid.items():
        s = pt.split
        assert s.prefill is not None and s.decode is not None
        lines.append(
            f"| {t} | {p} | {_g(pt.colocated_itl)} | {_g(pt.colocated_tpot)} | {_g(pt.chunked_itl)} | "
            f"{_g(pt.prefill_only)} | {_g(pt.decode_only)} | {s.prefill.workers}P{s.decode.workers}D | "
            f"{_g(s.goodput_per_gpu_per_s)} | {s.goodput_per_gpu_per_s / pt.colocated_itl:.2f} / "
            f"{s.goodput_per_gpu_per_s / pt.colocated_tpot:.2f} |"
        )
    wins = all(
        pt.split.goodput_per_gpu_per_s > max(pt.colocated_itl, pt.colocated_tpot) for pt in grid.values()
    )
    two_one = all(
        pt.split.prefill is not None
        and pt.split.decode is not None
        and (pt.split.prefill.workers, pt.split.decode.workers) == (2, 1)
        for pt in grid.values()
    )
    lines += [
        "",
        "**What holds.** The direction: on every SLO of the grid the 3-GPU search picks "
        f"{'2 prefill + 1 decode' if two_one else 'a split other than 2P1D somewhere (see the table)'}, and "
        f"disaggregation {'beats' if wins else 'does not always beat'} colocation without chunked prefill "
        f"per GPU. At the stated SLO the gain is {split.goodput_per_gpu_per_s / nom.colocated_itl:.2f}x "
        f"(ITL reading) or {split.goodput_per_gpu_per_s / nom.colocated_tpot:.2f}x (TPOT reading) against "
        f"DistServe's {pub_gain:.2f}x, and the decode-only / prefill-only ratio that makes 2:1 the right "
        f"split is {nom.decode_only / nom.prefill_only:.2f} against {pub['DS-003'] / pub['DS-002']:.2f}.",
        "",
        "**What does not.** The absolute goodputs: the planner serves "
        f"{nom.prefill_only / pub['DS-002']:.1f}x DistServe's prefill-only and "
        f"{nom.decode_only / pub['DS-003']:.1f}x its decode-only rate. A 512-token OPT-13B prefill is "
        f"~{passes['prefill_flop'] / 1e12:.0f} TFLOP: the planner's {passes['prefill_s'] * 1e3:.0f} ms pass "
        f"runs at {100 * passes['peak_fraction']:.0f} % of A100 dense peak, while {pub['DS-002']:g} req/s "
        f"within P90 TTFT {DS_TTFT_S:g} s needs a pass of {passes['implied_prefill_s']:.2f} s (M/D/1); "
        f"{pub['DS-003']:g} req/s within {DS_TPOT_S * 1e3:.0f} ms per token means (Little's law) a decode "
        f"step of {DS_TPOT_S * 1e3:.0f} ms at a batch of {passes['implied_batch']:.0f}, where the planner's "
        f"is {passes['step_at_batch_s'] * 1e3:.0f} ms. Both point at the 2023-24 engines' lower kernel "
        "efficiency and per-step host floor (the mechanism of the Splitwise TBT misses listed in "
        "`tests/reference/test_published_steps.py`), which the H100-fitted profile does not have. The "
        "colocated goodput also depends on reading TPOT as per-token ITL or per-request TPOT (a factor "
        f"{nom.colocated_tpot / nom.colocated_itl:.1f}): with ITL P90 the capacity ends where 10 % of "
        "iterations carry a prefill, whatever the target. The colocated TTFT limit is the largest miss: "
        f"the blog's {DS_BLOG_COLOCATED_TTFT_LIMIT_PER_S:g} req/s is "
        f"{DS_BLOG_COLOCATED_TTFT_LIMIT_PER_S / pub['DS-002']:.2f} "
        f"of DistServe's prefill-only rate, the planner's {float(ds['colocated_ttft_only']):.3g} is "  # type: ignore[arg-type]
        f"{float(ds['colocated_ttft_only']) / nom.prefill_only:.2f} of its own: in the planner a colocated "  # type: ignore[arg-type]
        "prompt is delayed by decodes only through the residual of one decode step (prefills have "
        "priority), so TTFT interference is nearly absent; Fig. 1's colocated curve is also another engine "
        "(vLLM) than its prefill-only one (DistServe's). With chunked prefill the planner's colocated "
        f"replica comes within {split.goodput_per_gpu_per_s / nom.chunked_itl:.2f}x of the split: chunking "
        "removes most of the interference Fig. 1 measures (the paper compares against vLLM without it).",
    ]
    return lines


def sarathi_section(rows: Mapping[str, Mapping[str, str]], ss: Mapping[str, object]) -> list[str]:
    caps, t4, it = ss["capacity"], ss["table4"], ss["iteration"]
    assert isinstance(caps, list) and isinstance(t4, dict) and isinstance(it, dict)
    lines = [
        "## 2. Sarathi-Serve: a small token budget meets strict TBT SLOs",
        "",
        "Agrawal et al., *Sarathi-Serve*, OSDI 2024, Sec. 5.1-5.2 / Fig. 12 and Table 4. Strict P99 TBT "
        "SLOs from Table 3 (SS-001: Mistral-7B 0.1 s on one A100; SS-002: Yi-34B 0.2 s on two A100s, TP2); "
        "relaxed SLOs from the same rows' notes (0.5 s, 1 s). Planner: `a100-80gb-pcie` (Azure NC96ads "
        f"A100 v4), fp16, engine `{ENGINE}`. Lengths: the paper's Table 2 (not in the CSV) as lognormals of "
        "the stated median and P90, prompts cut at the trace filter (8192 / 16384 tokens) minus the median "
        "output:",
        "",
        "| dataset | prompt median | prompt P90 | output median | output P90 | filter |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, t in SS_TABLE2.items():
        lines.append(
            f"| {name} | {t.prompt_median} | {t.prompt_p90} | {t.output_median} | {t.output_p90} | "
            f"{t.max_total_tokens} |"
        )
    lines += [
        "",
        "(Table 2's output std of 101 tokens for openchat_sharegpt4 is inconsistent with its median 415 "
        "and P90 834; the lognormal follows median and P90.) Capacity = Sarathi-Serve's: the largest rate "
        "with P99 TBT within the SLO and a median scheduling delay ≤ 2 s, posed as P50 TTFT ≤ "
        f"{SS_SCHEDULING_DELAY_S} s (TTFT also holds the prompt's own prefill: slightly stricter). Batch "
        f"limits {list(SS_BATCH_LIMITS)}; vLLM = the planner's unchunked mode (prefill-only iterations the "
        "running streams wait through).",
        "",
        "Capacity of one replica (req/s) per token budget, and what the searches pick:",
        "",
        "| model | dataset | SLO | P99 TBT s | budget 512 | budget 2048 | 512 / 2048 | vLLM | pick of "
        "{512, 2048} | pick of the default budgets (capacity) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in caps:
        lines.append(
            f"| {c.model} | {c.dataset} | {c.slo_name} | {c.itl_s:g} | {_g(c.by_budget[512])} "
            f"({c.binding[512]}) | {_g(c.by_budget[2048])} ({c.binding[2048]}) | "
            f"{c.by_budget[512] / max(c.by_budget[2048], 1e-12):.2f} | {_g(c.vllm)} | {c.pick} | "
            f"{c.pick_default_grid} ({_g(c.capacity_default_grid)}) |"
        )

    def cap(model: str, dataset: str, slo: str) -> SarathiCapacity:
        return next(c for c in caps if c.model == model and c.dataset == dataset and c.slo_name == slo)

    yi_s = cap("Yi-34B", "openchat_sharegpt4", "strict")
    mi_s = cap("Mistral-7B", "openchat_sharegpt4", "strict")
    yi_r = cap("Yi-34B", "openchat_sharegpt4", "relaxed")
    lines += [
        "",
        TABLE_HEAD,
        _row(
            "SS-024",
            "Yi-34B, openchat, strict SLO: budget 512 over vLLM",
            value(rows, "SS-024"),
            yi_s.by_budget[512] / yi_s.vllm,
            "x",
            "",
        ),
        _row(
            "SS-028",
            "Mistral-7B, openchat, P99 TBT 0.1 s: budget 512 over vLLM",
            value(rows, "SS-028"),
            mi_s.by_budget[512] / mi_s.vllm,
            "x",
            "",
        ),
        _row(
            "SS-029",
            "Yi-34B, openchat, P99 TBT 1 s: budget 2048 over vLLM",
            value(rows, "SS-029"),
            yi_r.by_budget[2048] / yi_r.vllm,
            "x",
            "",
        ),
    ]
    lines += [
        "",
        f"Table 4 (Yi-34B, TP2, Poisson at the artifact's rate, batch limit {SS_TABLE4_MAX_BATCH}); "
        f"*combined* = chunked prefill with stall-free batching at the caption's budget {SS_TABLE4_BUDGET} "
        f"(and at the artifact script's chunk {SS_ARTIFACT_CHUNK}); *hybrid-batching-only* = a whole prompt "
        "in one iteration with the decodes (budget = the length filter). *chunked-prefills-only* (chunks "
        "never share an iteration with decodes) has no planner mode.",
        "",
        TABLE_HEAD,
    ]
    for dataset in SS_TABLE2:
        for sched, label in (
            ("hybrid", "hybrid-batching-only"),
            ("combined", f"combined, budget {SS_TABLE4_BUDGET}"),
            ("combined_512", f"combined, chunk {SS_ARTIFACT_CHUNK} (artifact)"),
        ):
            key = "combined" if sched == "combined_512" else sched
            ttft_row, tbt_row = SS_TABLE4_ROWS[(dataset, key)]
            ev = t4[(dataset, sched)]
            lines.append(
                _row(ttft_row, f"{dataset}, {label}: P50 TTFT", value(rows, ttft_row), ev.ttft_s.p50, "s", "")
            )
            lines.append(
                _row(tbt_row, f"{dataset}, {label}: P99 TBT", value(rows, tbt_row), ev.itl_s.p99, "s", "")
            )
        ttft_row, tbt_row = SS_TABLE4_ROWS[(dataset, "chunked_only")]
        lines.append(
            _row(
                ttft_row,
                f"{dataset}, chunked-prefills-only: P50 TTFT",
                value(rows, ttft_row),
                None,
                "s",
                "not modelled",
            )
        )
        lines.append(
            _row(
                tbt_row,
                f"{dataset}, chunked-prefills-only: P99 TBT",
                value(rows, tbt_row),
                None,
                "s",
                "not modelled",
            )
        )
    strict = [c for c in caps if c.slo_name == "strict"]
    relaxed = [c for c in caps if c.slo_name == "relaxed"]
    worst_strict = min(c.by_budget[512] / c.by_budget[2048] for c in strict)
    worst_relaxed = min(c.by_budget[2048] / c.by_budget[512] for c in relaxed)
    gains = [
        yi_s.by_budget[512] / yi_s.vllm / value(rows, "SS-024"),
        mi_s.by_budget[512] / mi_s.vllm / value(rows, "SS-028"),
        yi_r.by_budget[2048] / yi_r.vllm / value(rows, "SS-029"),
    ]
    sg = ("openchat_sharegpt4", "arxiv_summarization")

    def pub(dataset: str, sched: str, which: int) -> float:
        return value(rows, SS_TABLE4_ROWS[(dataset, sched)][which])

    def both(f: str, sched: str) -> str:
        ev0, ev1 = t4[(sg[0], sched)], t4[(sg[1], sched)]
        pick = (lambda e: e.ttft_s.p50) if f == "ttft" else (lambda e: e.itl_s.p99)
        return f"{pick(ev0):.3g} / {pick(ev1):.3g} s"

    def pub_both(sched: str, which: int) -> str:
        return f"{pub(sg[0], sched, which):g} / {pub(sg[1], sched, which):g} s"

    stall = [t4[(d, "hybrid")].itl_s.p99 / t4[(d, "combined")].itl_s.p99 for d in sg]
    stall_pub = [pub(d, "hybrid", 1) / pub(d, "combined", 1) for d in sg]
    ttft_1024 = [t4[(d, "combined")].ttft_s.p50 / pub(d, "combined", 0) for d in sg]
    ttft_512 = [t4[(d, "combined_512")].ttft_s.p50 / pub(d, "combined", 0) for d in sg]
    lines += [
        "",
        f"**What holds.** Under the strict SLOs every case serves at least {worst_strict:.1f}x more with "
        "budget 512 than with 2048. The mechanism is the paper's: an iteration with a full 2048-token "
        f"chunk takes longer than the strict TBT ({it[('Mistral-7B', 2048)]:.2f} s on Mistral-7B, "
        f"{it[('Yi-34B', 2048)]:.2f} s on Yi-34B TP2, with {SS_ITERATION_DECODES} decodes), so the P99 "
        "holds only while fewer than 1 % of iterations carry one (2048 is bound by `itl`), while 512-token "
        f"iterations ({it[('Mistral-7B', 512)]:.2f} / {it[('Yi-34B', 512)]:.2f} s) stay inside it up to the "
        "scheduling-delay bound (`ttft`). `plan_chunked` over {512, 2048} picks "
        f"{sorted({c.pick for c in strict})}; under the relaxed SLOs 2048 serves at least "
        f"{worst_relaxed:.2f}x 512 and the search picks {sorted({c.pick for c in relaxed})}, as the paper "
        "chose (SS-029: 2048 at 1 s; SS-026 notes, LLaMA2-70B: 512 strict / 1536 relaxed). The planner's "
        f"gains over vLLM are {min(gains):.2f}-{max(gains):.2f} of the published ones. In Table 4 the "
        f"planner's P99 TBT of the combined scheduler at budget {SS_TABLE4_BUDGET} is "
        f"{both('tbt', 'combined')} against {pub_both('combined', 1)}, and hybrid batching alone stalls the "
        f"streams ({stall[0]:.1f}x / {stall[1]:.1f}x the combined P99 TBT; published {stall_pub[0]:.1f}x / "
        f"{stall_pub[1]:.1f}x).",
        "",
        "**What does not.** (a) The planner's own best budget at the strict SLO is often 1024, which the "
        "paper did not run (its Fig. 12 compares 512 and 2048 only): a 1024-token iteration "
        f"({it[('Mistral-7B', 1024)]:.2f} / {it[('Yi-34B', 1024)]:.2f} s) still fits the strict TBT and "
        "costs less chunking overhead. (b) Table 4's TTFT ordering: Sarathi-Serve measured a *lower* P50 "
        f"TTFT with hybrid batching only ({pub_both('hybrid', 0)}) than combined "
        f"({pub_both('combined', 0)}); the planner has it the other way ({both('ttft', 'hybrid')} against "
        f"{both('ttft', 'combined')}): its "
        f"{SS_TABLE4_BUDGET}-token chunks cost {100 * float(ss['overhead_1024']):.0f} % more than one pass "  # type: ignore[arg-type]
        "(Yi-34B, openchat), while a whole-prompt iteration is charged the next prompt's tokens (top-up) "
        f"when another prompt waits. The combined P50 TTFT is {min(ttft_1024):.2f}-{max(ttft_1024):.2f}x the published one "
        f"at budget {SS_TABLE4_BUDGET} and {min(ttft_512):.2f}-{max(ttft_512):.2f}x at chunk "
        f"{SS_ARTIFACT_CHUNK}, the artifact's setting (where the P99 TBT drops to "
        f"{both('tbt', 'combined_512')}). Table 4 is 128 requests, a transient the steady state only "
        "approximates, with lengths rebuilt from two quantiles.",
    ]
    return lines


def splitwise_section(rows: Mapping[str, Mapping[str, str]], sw: Mapping[str, object]) -> list[str]:
    speed, caps, picks, hh = sw["speed"], sw["caps"], sw["picks"], sw["hh"]
    assert (
        isinstance(speed, dict)
        and isinstance(caps, dict)
        and isinstance(picks, dict)
        and isinstance(hh, dict)
    )
    t4 = splitwise_table_iv(rows)
    overhead = find_engine(ENGINE).request_overhead_s
    lines = [
        "## 3. Splitwise: the two phases want different hardware (Llama-2-70B, DGX-A100 vs DGX-H100)",
        "",
        "Patel et al., *Splitwise*, ISCA 2024, Table IV (SW-001..SW-012: P50 TTFT and TBT of one request "
        "at a time on a DGX-A100 and a DGX-H100 with vLLM), Table VI (SLOs) and Sec. IV. Planner: TP8 (one "
        "machine; TP not stated), fp16, engine `vllm`; each trace at its median lengths (row notes: coding "
        "1500 / 13, conversation 1020 / 129 tokens). Prefill = one pass of the median prompt; decode = one "
        "step at batch 1 and 64 with context prompt + output / 2 (as `planner.validation` reads these "
        "rows).",
        "",
        TABLE_HEAD,
    ]
    for trace, sp in speed.items():
        (ra_t, pa_t), (rh_t, ph_t) = t4[(trace, "A100", "ttft")], t4[(trace, "H100", "ttft")]
        (ra_b, pa_b), (rh_b, ph_b) = t4[(trace, "A100", "tbt")], t4[(trace, "H100", "tbt")]
        lines += [
            _row(
                ra_t, f"{trace}: A100 TTFT (prefill pass)", pa_t * 1e3, sp.prefill_s["A100"] * 1e3, "ms", ""
            ),
            _row(
                rh_t, f"{trace}: H100 TTFT (prefill pass)", ph_t * 1e3, sp.prefill_s["H100"] * 1e3, "ms", ""
            ),
            _row(
                ra_b,
                f"{trace}: A100 TBT (batch-1 step)",
                pa_b * 1e3,
                sp.decode_s[("A100", 1)] * 1e3,
                "ms",
                "known miss (2023 vLLM step floor)",
            ),
            _row(
                rh_b,
                f"{trace}: H100 TBT (batch-1 step)",
                ph_b * 1e3,
                sp.decode_s[("H100", 1)] * 1e3,
                "ms",
                "known miss (2023 vLLM step floor)",
            ),
            _row(
                f"{ra_t}/{rh_t}",
                f"{trace}: prefill speedup H100/A100",
                pa_t / ph_t,
                sp.prefill_speedup(),
                "x",
                "",
            ),
            _row(
                f"{ra_t}/{rh_t}",
                f"{trace}: prefill speedup with the front-end overhead",
                pa_t / ph_t,
                sp.prefill_speedup(overhead),
                "x",
                f"+{overhead * 1e3:.0f} ms on both",
            ),
            _row(
                f"{ra_b}/{rh_b}",
                f"{trace}: decode speedup H100/A100, batch 1",
                pa_b / ph_b,
                sp.decode_speedup(1),
                "x",
                "",
            ),
            _row(
                f"{ra_b}/{rh_b}",
                f"{trace}: decode speedup H100/A100, batch 64",
                pa_b / ph_b,
                sp.decode_speedup(64),
                "x",
                "published is batch 1",
            ),
        ]
    lines += [
        "",
        "SLO capacity of one worker (one 8-GPU machine) per pool, under Table VI's SLOs relative to the "
        "planner's own uncontended A100 request (P99 pair: TTFT 6x, TBT 5x; P50 pair: TTFT 2x, TBT 1.25x):",
        "",
        "| trace | SLO | prefill A100 | prefill H100 | H100/A100 | decode A100 | decode H100 | H100/A100 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (trace, pair, gpu), (pre, dec) in caps.items():
        if gpu != "A100":
            continue
        hp, hd = caps[(trace, pair, "H100")]
        lines.append(
            f"| {trace} | {pair} | {_g(pre)} | {_g(hp)} | {hp / pre:.2f} | {_g(dec)} | {_g(hd)} | "
            f"{hd / dec:.2f} |"
        )
    lines += [
        "",
        "Cost-minimizing `plan_disaggregated` at a target rate, both pools choosing between "
        f"{SW_GPUS['A100']} and {SW_GPUS['H100']} TP8. Prices: the catalog's (H100/A100 = "
        f"{sw['catalog_ratio']:.2f} per GPU-hour) and the ratio implied by Table IV's cost and E2E columns "
        f"({sw['implied_ratio']:.2f}; derived, not stated):",
        "",
        "| trace | SLO | rate req/s | prices | prefill pool | decode pool | USD/h | Splitwise-HA? |",
        "|---|---|---:|---|---|---|---:|---|",
    ]
    for (trace, pair, rate, label), plan in picks.items():
        if plan.prefill is None or plan.decode is None:
            lines.append(f"| {trace} | {pair} | {rate:g} | {label} | — | — | — | {plan.status} |")
            continue
        ha = plan.prefill.gpu == SW_GPUS["H100"] and plan.decode.gpu == SW_GPUS["A100"]
        lines.append(
            f"| {trace} | {pair} | {rate:g} | {label} | {plan.prefill.workers} x {plan.prefill.gpu} | "
            f"{plan.decode.workers} x {plan.decode.gpu} | {_g(plan.cost_per_hour_usd)} | "
            f"{'yes' if ha else 'no'} |"
        )
    hh_c = hh[("coding", "p99")]
    hh_5 = hh[("coding", "p50")]
    lines += [
        "",
        TABLE_HEAD,
        _row(
            "SW-016",
            "coding, 70 req/s, H100 only: prompt machines (P99 pair / P50 pair)",
            value(rows, "SW-016"),
            hh_c.prefill.workers if hh_c.prefill else None,
            "machines",
            f"P50 pair: {hh_5.prefill.workers if hh_5.prefill else '—'}; not comparable, see below",
        ),
        _row(
            "SW-017",
            "coding, 70 req/s, H100 only: token machines",
            value(rows, "SW-017"),
            hh_c.decode.workers if hh_c.decode else None,
            "machines",
            f"P50 pair: {hh_5.decode.workers if hh_5.decode else '—'}",
        ),
    ]
    pre_h = [
        p.prefill.gpu == SW_GPUS["H100"]
        for (t, pr, r, lab), p in picks.items()
        if lab == "catalog" and p.prefill is not None
    ]
    ha_count = sum(
        1
        for p in picks.values()
        if p.prefill is not None
        and p.decode is not None
        and p.prefill.gpu == SW_GPUS["H100"]
        and p.decode.gpu == SW_GPUS["A100"]
    )
    sp_c, sp_v = speed["coding"], speed["conversation"]
    pre_dev, pre_dev_oh, dec_dev, tbt_abs = [], [], [], []
    for trace, sp in speed.items():
        pub_pre = t4[(trace, "A100", "ttft")][1] / t4[(trace, "H100", "ttft")][1]
        pub_dec = t4[(trace, "A100", "tbt")][1] / t4[(trace, "H100", "tbt")][1]
        pre_dev.append(sp.prefill_speedup() / pub_pre)
        pre_dev_oh.append(sp.prefill_speedup(overhead) / pub_pre)
        dec_dev.append(sp.decode_speedup(1) / pub_dec)
        tbt_abs += [sp.decode_s[(g, 1)] / t4[(trace, g, "tbt")][1] for g in SW_GPUS]
    pre_caps = [caps[(t, p, "H100")][0] / caps[(t, p, "A100")][0] for (t, p, g) in caps if g == "A100"]
    dec_caps = [caps[(t, p, "H100")][1] / caps[(t, p, "A100")][1] for (t, p, g) in caps if g == "A100"]
    g_a, g_h = (cat_gpu(SW_GPUS[g]) for g in ("A100", "H100"))
    peak_ratio = g_h.peak_flops_per_s["fp16"] / g_a.peak_flops_per_s["fp16"]
    hbm_ratio = g_h.hbm_bandwidth_bytes_per_s / g_a.hbm_bandwidth_bytes_per_s
    pub_sp = {
        trace: (
            t4[(trace, "A100", "ttft")][1] / t4[(trace, "H100", "ttft")][1],
            t4[(trace, "A100", "tbt")][1] / t4[(trace, "H100", "tbt")][1],
        )
        for trace in speed
    }
    coding_steps = sw["traces"]["coding"][1] - 1  # type: ignore[index]
    lines += [
        "",
        "**What holds.** Per phase, H100 speeds the prompt phase up much more than the token phase: "
        f"{sp_c.prefill_speedup():.2f}x / {sp_v.prefill_speedup():.2f}x for a prefill pass against "
        f"{sp_c.decode_speedup(1):.2f}x / {sp_v.decode_speedup(1):.2f}x for a batch-1 decode step (coding / "
        f"conversation), below the dense-peak ratio ({peak_ratio:.2f}x) and the HBM-bandwidth ratio "
        f"({hbm_ratio:.2f}x) respectively; Table IV has {pub_sp['coding'][0]:.2f}x / "
        f"{pub_sp['conversation'][0]:.2f}x against {pub_sp['coding'][1]:.2f}x / "
        f"{pub_sp['conversation'][1]:.2f}x. The planner's prefill speedups are {_span(pre_dev)}x the "
        "published ones (the A100's kernel efficiencies are inherited from the H100 fit, an unvalidated "
        f"assumption; adding the {overhead * 1e3:.0f} ms front-end overhead to both passes gives "
        f"{_span(pre_dev_oh)}x) and its batch-1 decode speedups {_span(dec_dev)}x, although its absolute "
        f"TBTs are {_span(tbt_abs)}x Splitwise's (the 2023 vLLM step floor, known misses in "
        "`test_published_steps.py`). At catalog prices the cost-optimal prompt pool is H100 in "
        f"{sum(pre_h)} of {len(pre_h)} cases.",
        "",
        "**What does not, or only partly.** The cost-optimal plan is Splitwise-HA (H100 prompt, A100 "
        f"token) in {ha_count} of {len(picks)} runs, not as a rule. Two mechanisms of the planner work "
        "against it: (1) under SLOs set relative to the A100's own uncontended step, a decode worker's "
        "*capacity* gains far more than its batch-1 step time: under the P50 pair the A100 reaches the TBT "
        "target (1.25x its batch-1 step) at a small batch while the H100 still has headroom, and where "
        "both run at the batch limit (coding, P99 pair) a step at the batch limit is no longer "
        f"memory-bound. Per worker the H100 then serves {_span(dec_caps, 1)}x an A100 in the token phase, "
        f"about as much as in the prompt phase ({_span(pre_caps, 1)}x, table above); (2) where the decode "
        "pool is A100, it is often because one token machine of either kind suffices (coding: "
        f"{coding_steps} decode steps per request) and the A100 machine is the cheaper one, a granularity "
        "effect, not an efficiency win. With Table IV's implied price ratio the prompt pool also goes to "
        f"A100 at high load, since the planner's prefill speedup ({sp_c.prefill_speedup():.1f}x per pass) "
        f"is close to that ratio. SW-016/017 ({value(rows, 'SW-016'):g} prompt + {value(rows, 'SW-017'):g} "
        "token DGX-H100 for 70 req/s) are not comparable: SplitwiseSim replays the full coding trace (a "
        "heavy prompt tail the median does not carry) under all nine Table VI SLOs at once, and batches "
        "prompts up to 2048 tokens.",
    ]
    return lines


ISSUES = [
    "## Modelling issues found while reproducing these studies",
    "",
    "1. **Fixed: chunked-mode TTFT counted the prefill in progress twice** (`AggregatedModel._chunked` "
    "added the residual of *every* iteration, mixed ones included, on top of Kingman's wait, which for "
    "Poisson arrivals already holds the residual of the prompt in service). It now adds only the decode "
    "iteration an arrival at an idle prefill lane waits for, (1 − u)·τ_d / 2, as the unchunked branch does; "
    "the engines were refitted (`scripts/fit_engines.py --write`) and the closed form moved towards the "
    "reference simulation (chunked Poisson TTFT mean: median error 9 % → 3 %).",
    "2. **ITL percentiles stand in for TPOT percentiles** (`planner/serving/types.py` `Slo`, "
    "`planner/optimize/common.py` `meets_slo`): DistServe's SLO is on TPOT (per request), Sarathi-Serve's "
    "on per-token TBT. The searches can only target ITL; for colocated serving without chunking the two "
    "readings of DistServe's 0.04 s differ by ~1.5x in capacity, and the ITL-bound capacity does not move "
    "with the target at all (it ends where 10 % of iterations carry a prefill). A `tpot_s` target would "
    "let the searches pose DistServe-style SLOs.",
    "3. Fixed: `planner/calibration/engines.json` `fitted_on` repeated the leave-one-model-out note "
    "(`scripts/fit_engines.py` appended instead of replacing it).",
]


def render(
    rows: Mapping[str, Mapping[str, str]],
    ds: Mapping[str, object],
    ss: Mapping[str, object],
    sw: Mapping[str, object],
    seconds: float,
) -> str:
    lines = [
        "# Published decisions reproduced by the planner's searches",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand; {seconds:.1f} s). Published values from "
        "`shared/data/published_measurements.csv` (row ids below; conditions the rows do not state are "
        "named where they are used, with their sources in the script's docstring). *planner / published* "
        "is the ratio of the two. The tests `tests/reference/test_published_decisions.py` recompute and "
        "assert the directions and the tolerances stated there.",
        "",
    ]
    lines += (
        distserve_section(rows, ds) + [""] + sarathi_section(rows, ss) + [""] + splitwise_section(rows, sw)
    )
    lines += [""] + ISSUES
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared_dir())
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = published_rows(args.shared)
    cat = catalogs()
    ds = distserve(cat, rows)
    ss = sarathi(cat, rows)
    sw = splitwise(cat, rows)
    text = render(rows, ds, ss, sw, time.perf_counter() - start)
    out = args.docs / "accuracy_decisions.md"
    out.write_text(text)
    print(f"wrote {out} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
