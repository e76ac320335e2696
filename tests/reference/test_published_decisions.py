"""Three published serving decisions, reproduced with the planner's searches (published_measurements.csv).

1. DistServe (Zhong et al., OSDI 2024), Fig. 1 and Sec. 1, rows DS-001..DS-004: OPT-13B on one A100-80GB,
   input 512 / output 64 tokens, goodput at >= 90 % SLO attainment. Colocated ~1.6, prefill-only ~5.6,
   decode-only ~10 requests/s per GPU, so two prefill GPUs per decode GPU serve ~3.3 per GPU, 2.1x colocation.
   The rows give no SLO ("values only in figure"); the authors' blog on this figure
   (hao-ai-lab.github.io/blogs/distserve, 2024-03-17) states P90 TTFT 0.4 s and P90 TPOT 0.04 s. The
   planner's searches target an ITL percentile, so TPOT P90 is posed as ITL P90 (per token: stricter for
   colocated serving, see docs/accuracy_decisions.md), and the direction is also checked on a 3 x 3 grid of
   targets around the stated one (TTFT 0.3-0.5 s, TPOT 0.03-0.05 s), with and without the TPOT reading.
2. Sarathi-Serve (Agrawal et al., OSDI 2024), Sec. 5.1-5.2 / Fig. 12 and Table 4: under the strict P99 TBT
   SLO (Table 3: SS-001 Mistral-7B 0.1 s on one A100, SS-002 Yi-34B 0.2 s on two, TP2) a 512-token budget
   serves far more than 2048, under the relaxed one (same rows' notes: 0.5 s, 1 s) 2048 is the better budget
   (SS-029); Sarathi-Serve's gain over vLLM (SS-024, SS-028, SS-029); Table 4's P50 TTFT and P99 TBT
   (SS-011..SS-022). Request lengths: the paper's Table 2 (median and P90, not in the CSV) as lognormals;
   Table 4's rate (1 QPS openchat_sharegpt4, 0.5 QPS arxiv_summarization) and batch limit (128) from the
   authors' artifact (microsoft/sarathi-serve, osdi-experiments/table-6/scheduling_ablation.sh). Capacity as
   the paper defines it: P99 TBT within the SLO with a median scheduling delay <= 2 s, posed as P50 TTFT
   <= 2 s.
3. Splitwise (Patel et al., ISCA 2024), Table IV, rows SW-001..SW-012: on DGX-A100 vs DGX-H100 (Llama-2-70B,
   vLLM, one request at a time) the prompt phase gains more from the H100 (TTFT 1.95x / 1.85x) than the token
   phase (TBT 1.68x / 1.43x), so prompt machines want H100s. SLOs of Table VI (SW-018..SW-021).

Tolerances follow the sources' precision. DistServe's four numbers are "about" values read off a plot: a
factor 1.5 on the ratios built from them, +-50 % on the values. Sarathi-Serve's ratios are stated to two
digits but measured against a vLLM baseline the planner only approximates: +-50 %; Table 4 is exact, but
the run is 128 requests (a transient, not the steady state the planner predicts) on lengths rebuilt from two
quantiles: +-50 % on P99 TBT and a factor 2 on P50 TTFT, which also moves with the queue. Splitwise's
speedups are ratios of integer-millisecond P50s (rounding < 2 %); the A100's kernel efficiencies are inherited
from the H100 fit and 2023 vLLM had a per-step floor (the TBT known misses of test_published_steps.py), both
partly cancelling in a ratio: +-30 %, the project's per-phase target. Known misses are strict xfails with
their mechanism: they XPASS, and must be removed, when the model improves.
Everything here is also computed and compared in docs/accuracy_decisions.md (scripts/plan_decisions.py).
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from planner.costs import Parallelism, decode_latency_s, prefill_latency_s
from planner.engines import find_engine
from planner.optimize.chunked import ChunkedSearch, aggregated_option, plan_chunked
from planner.optimize.disaggregated import (
    DisaggregatedSearch,
    PoolCandidate,
    plan_disaggregated,
)
from planner.serving.evaluate import evaluate
from planner.serving.types import Evaluation, ServingProblem, Slo
from planner.serving.workload import Arrival, Workload, fixed_length

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plan_decisions", ROOT / "scripts" / "plan_decisions.py")
assert _spec is not None and _spec.loader is not None
D = importlib.util.module_from_spec(_spec)
sys.modules["plan_decisions"] = D
_spec.loader.exec_module(D)

ENGINE = "vllm"

# DistServe Fig. 1 (blog for the SLO)
DS_MODEL, DS_GPU = "facebook/opt-13b", "a100-80gb-sxm"
DS_PROMPT, DS_OUTPUT = 512, 64
DS_TTFT_S, DS_TPOT_S, DS_PERCENTILE = 0.4, 0.04, 90.0
DS_GRID = [(t, p) for t in (0.3, 0.4, 0.5) for p in (0.03, 0.04, 0.05)]
#: grid points where disaggregation wins by less than the 1.2x margin: (ratio when listed, why)
DS_GRID_KNOWN_MISSES = {
    (t, 0.03): (1.10, "disaggregated 5.44 against colocated 4.95 requests/s/GPU (2026-12-02): the engines' host "
                "times refitted on the closed form's TPOT give vLLM 52 us per running sequence per iteration, "
                "which at a 30 ms TPOT costs the decode pool, whose batch is the larger, more than the "
                "colocated replica; the direction still holds (1.10 > 1), the margin does not")
    for t in (0.3, 0.4, 0.5)
}


def _ds_grid_params() -> list[Any]:
    out = []
    for point in DS_GRID:
        miss = DS_GRID_KNOWN_MISSES.get(point)
        marks = () if miss is None else (
            pytest.mark.xfail(strict=True, reason=f"disaggregated / colocated {miss[0]:.2f} when listed: {miss[1]}"),)
        out.append(pytest.param(*point, marks=marks))
    return out

# Sarathi-Serve
SS_GPU = "a100-80gb-pcie"  # Azure NC96ads A100 v4, as planner.validation.datasets reads these rows
SS_MODELS = {
    "Mistral-7B": ("mistralai/Mistral-7B-v0.1", 1, "SS-001"),
    "Yi-34B": ("01-ai/Yi-34B", 2, "SS-002"),
}
#: Table 2: prompt median, P90; output median, P90; the trace's total-length filter [tokens]
SS_TABLE2 = {
    "openchat_sharegpt4": (1730, 5696, 415, 834, 8192),
    "arxiv_summarization": (7059, 12985, 208, 371, 16384),
}
SS_TABLE4_RATE_PER_S = {"openchat_sharegpt4": 1.0, "arxiv_summarization": 0.5}
SS_TABLE4_BUDGET, SS_TABLE4_MAX_BATCH = 1024, 128
SS_BATCH_LIMITS = (32, 64, 128)
#: Table 4 rows: (dataset, scheduler) -> (P50 TTFT row, P99 TBT row); "combined" = Sarathi-Serve
SS_TABLE4_ROWS = {
    ("openchat_sharegpt4", "hybrid"): ("SS-011", "SS-012"),
    ("openchat_sharegpt4", "combined"): ("SS-015", "SS-016"),
    ("arxiv_summarization", "hybrid"): ("SS-017", "SS-018"),
    ("arxiv_summarization", "combined"): ("SS-021", "SS-022"),
}

# Splitwise
SW_MODEL, SW_TP = "meta-llama/Llama-2-70b-hf", 8
SW_GPUS = {"A100": "a100-80gb-sxm", "H100": "h100-sxm"}
SW_TRACES = {"coding": (1500, 13), "conversation": (1020, 129)}  # medians, SW-* row notes
#: Table IV rows per trace: (A100 TTFT, A100 TBT, H100 TTFT, H100 TBT)
SW_TABLE_IV = {
    "coding": ("SW-001", "SW-002", "SW-004", "SW-005"),
    "conversation": ("SW-007", "SW-008", "SW-010", "SW-011"),
}

#: row -> (planner / published when listed, mechanism): DistServe's absolute goodputs
DS_KNOWN_MISSES = {
    "DS-001": (
        2.35,
        "2023-24 engines: lower kernel efficiency and a per-step host floor the H100-fitted vllm "
        "profile lacks; colocated TTFT interference (a prompt waits only one decode step's residual)",
    ),
    "DS-002": (
        2.36,
        "DistServe's 512-token prefill implies a ~0.11 s pass (M/D/1 at 5.6 req/s within P90 TTFT "
        "0.4 s); the cost model's is 60 ms, 69 % of A100 dense peak",
    ),
    "DS-003": (
        2.71,
        "10 req/s within 40 ms per token implies a 40 ms step at batch ~25; the cost model's is "
        "25 ms (the step floor of the Splitwise TBT misses)",
    ),
    "DS-004": (2.71, "both phases as DS-002 and DS-003"),
}


# ================================================================================================ fixtures


@pytest.fixture(scope="module")
def rows(shared_dir: Path) -> dict[str, dict[str, str]]:
    with open(shared_dir / "data" / "published_measurements.csv", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh) if r["id"].split("-")[0] in ("DS", "SS", "SW")}


@pytest.fixture(scope="module")
def catalogs() -> Any:
    return D.catalogs()


def _value(rows: Mapping[str, Mapping[str, str]], row_id: str) -> float:
    return float(rows[row_id]["value"])


def _workload(prompts: Any, outputs: Any) -> Workload:
    return Workload(
        input_tokens=prompts, output_tokens=outputs, arrival=Arrival(kind="poisson", rate_per_s=1.0)
    )


# the problem builders are the report script's (scripts/plan_decisions.py), so both cost the same problems
_problem = D.aggregated_problem
_at_rate = D.at_rate


# ------------------------------------------------------------------------------------------------ DistServe


_ds_slo = D.distserve_slo
_ds_split = D.distserve_split


def _ds_problem(catalogs: Any) -> ServingProblem:
    """DistServe's colocated baseline: vLLM without chunked prefill, one A100."""
    return D.distserve_problem(catalogs, False)


def _tpot_goodput_per_s(problem: ServingProblem, ttft_s: float, tpot_s: float) -> float:
    """Largest rate with P90 TTFT and P90 TPOT (per request, ``evaluate``'s) within target: DistServe's
    metric."""
    return D.tpot_goodput_per_s(problem, ttft_s, tpot_s, halvings=20)


@pytest.fixture(scope="module")
def distserve_fig1(catalogs: Any) -> dict[str, Any]:
    slo = _ds_slo(DS_TTFT_S, DS_TPOT_S)
    pair = _ds_split(catalogs, slo, 2)
    assert pair.prefill is not None and pair.decode is not None
    return {
        "colocated": aggregated_option(_ds_problem(catalogs), slo).capacity_per_replica_per_s,
        "prefill_only": pair.prefill.capacity_per_s,
        "decode_only": pair.decode.capacity_per_s,
        "split": _ds_split(catalogs, slo, 3),
    }


def _ds_planner(fig1: Mapping[str, Any], row_id: str) -> float:
    return {
        "DS-001": fig1["colocated"],
        "DS-002": fig1["prefill_only"],
        "DS-003": fig1["decode_only"],
        "DS-004": fig1["split"].goodput_per_gpu_per_s,
    }[row_id]


def test_fig1_search_splits_two_prefill_to_one_decode(distserve_fig1: dict[str, Any]) -> None:
    split = distserve_fig1["split"]
    assert split.status == "optimal"
    assert (split.prefill.workers, split.decode.workers) == (2, 1), split.message


def test_fig1_disaggregation_beats_colocation(
    rows: dict[str, dict[str, str]], distserve_fig1: dict[str, Any]
) -> None:
    published = _value(rows, "DS-004") / _value(rows, "DS-001")  # 3.3 / 1.6: "2.1x" in DS-004's notes
    gain = distserve_fig1["split"].goodput_per_gpu_per_s / distserve_fig1["colocated"]
    assert published / 1.5 <= gain <= published * 1.5, (gain, published)


def test_fig1_decode_phase_serves_about_twice_the_prefill_phase(
    rows: dict[str, dict[str, str]], distserve_fig1: dict[str, Any]
) -> None:
    published = _value(rows, "DS-003") / _value(
        rows, "DS-002"
    )  # 10 / 5.6: why two prefill GPUs per decode GPU
    ratio = distserve_fig1["decode_only"] / distserve_fig1["prefill_only"]
    assert published / 1.5 <= ratio <= published * 1.5, (ratio, published)


@pytest.mark.parametrize(("ttft_s", "tpot_s"), _ds_grid_params())
def test_fig1_direction_holds_around_the_stated_slo(
    catalogs: Any, ttft_s: float, tpot_s: float
) -> None:
    slo = _ds_slo(ttft_s, tpot_s)
    split = _ds_split(catalogs, slo, 3)
    assert split.prefill is not None and split.decode is not None
    assert (split.prefill.workers, split.decode.workers) == (2, 1), split.message
    colocated_itl = aggregated_option(_ds_problem(catalogs), slo).capacity_per_replica_per_s
    colocated_tpot = _tpot_goodput_per_s(_ds_problem(catalogs), ttft_s, tpot_s)
    assert split.goodput_per_gpu_per_s > 1.2 * max(colocated_itl, colocated_tpot), (
        split.goodput_per_gpu_per_s,
        colocated_itl,
        colocated_tpot,
    )


def _ds_marks(row_id: str) -> tuple[Any, ...]:
    if row_id in DS_KNOWN_MISSES:
        ratio, why = DS_KNOWN_MISSES[row_id]
        return (pytest.mark.xfail(strict=True, reason=f"planner / published {ratio:.2f} when listed: {why}"),)
    return ()


@pytest.mark.parametrize(
    "row_id", [pytest.param(r, id=r, marks=_ds_marks(r)) for r in ("DS-001", "DS-002", "DS-003", "DS-004")]
)
def test_fig1_goodputs(rows: dict[str, dict[str, str]], distserve_fig1: dict[str, Any], row_id: str) -> None:
    planner, published = _ds_planner(distserve_fig1, row_id), _value(rows, row_id)
    assert abs(planner / published - 1.0) <= 0.5, (row_id, planner, published)


# --------------------------------------------------------------------------------------------- Sarathi-Serve


_ss_problem = D.sarathi_problem  # Table 2 lengths as lognormals, the script's (same figures as SS_TABLE2)


def _ss_slo(itl_s: float) -> Slo:
    return Slo(ttft_s=2.0, ttft_percentile=50.0, itl_s=itl_s, itl_percentile=99.0)


def _ss_itl_s(rows: Mapping[str, Mapping[str, str]], name: str, slo_name: str) -> float:
    row = rows[SS_MODELS[name][2]]
    if slo_name == "strict":
        return float(row["value"])
    relaxed = row["notes"].split("relaxed SLO (", 1)[1].split(" s)", 1)[0]  # "relaxed SLO (0.5 s) = 25x ..."
    return float(relaxed)


@pytest.fixture(scope="module")
def sarathi_fig12(
    rows: dict[str, dict[str, str]], catalogs: Any
) -> dict[tuple[str, str, str], dict]:
    """Per (model, dataset, SLO): capacity [req/s] at budgets 512 and 2048, of vLLM, and the search's pick."""
    out = {}
    for name in SS_MODELS:
        for dataset in SS_TABLE2:
            for slo_name in ("strict", "relaxed"):
                slo = _ss_slo(_ss_itl_s(rows, name, slo_name))
                problem = _ss_problem(catalogs, name, dataset)
                opt = aggregated_option(
                    problem, slo, token_budgets=(512, 2048), max_batch_sizes=SS_BATCH_LIMITS
                )
                plain = _ss_problem(
                    catalogs, name, dataset, chunked=False, token_budget=SS_TABLE2[dataset][4]
                )
                plan = plan_chunked(
                    ChunkedSearch(
                        problem=problem, slo=slo, token_budgets=(512, 2048), max_batch_sizes=SS_BATCH_LIMITS
                    )
                )
                out[(name, dataset, slo_name)] = {
                    **{p.token_budget: p.max_rate_per_s for p in opt.points},
                    "vllm": aggregated_option(
                        plain, slo, max_batch_sizes=SS_BATCH_LIMITS
                    ).capacity_per_replica_per_s,
                    "pick": plan.token_budget,
                }
    return out


SS_CASES = [pytest.param(n, d, id=f"{n}-{d}") for n in SS_MODELS for d in SS_TABLE2]


@pytest.mark.parametrize(("name", "dataset"), SS_CASES)
def test_fig12_strict_slo_wants_budget_512(sarathi_fig12: dict, name: str, dataset: str) -> None:
    cap = sarathi_fig12[(name, dataset, "strict")]
    assert cap[512] > 0 and cap[512] >= 2.0 * cap[2048], cap
    assert cap["pick"] == 512, cap


@pytest.mark.parametrize(("name", "dataset"), SS_CASES)
def test_fig12_relaxed_slo_wants_budget_2048(sarathi_fig12: dict, name: str, dataset: str) -> None:
    cap = sarathi_fig12[(name, dataset, "relaxed")]
    assert cap[2048] > cap[512], cap
    assert cap["pick"] == 2048, cap


@pytest.mark.parametrize(
    ("row_id", "name", "slo_name", "budget"),
    [
        ("SS-024", "Yi-34B", "strict", 512),  # 3.7x vLLM, P99 TBT 0.2 s
        ("SS-028", "Mistral-7B", "strict", 512),  # 3.5x vLLM, P99 TBT 0.1 s
        ("SS-029", "Yi-34B", "relaxed", 2048),  # 1.65x vLLM, P99 TBT 1 s
    ],
)
def test_sec5_capacity_gain_over_vllm(
    rows: dict[str, dict[str, str]], sarathi_fig12: dict, row_id: str, name: str, slo_name: str, budget: int
) -> None:
    cap = sarathi_fig12[(name, "openchat_sharegpt4", slo_name)]
    gain, published = cap[budget] / cap["vllm"], _value(rows, row_id)
    assert gain > 1.0 and abs(gain / published - 1.0) <= 0.5, (row_id, gain, published)


@pytest.fixture(scope="module")
def sarathi_table4(catalogs: Any) -> dict[tuple[str, str], Evaluation]:
    """Yi-34B TP2 at Table 4's rates: 'combined' = chunked prefill at budget 1024 (the caption); 'hybrid' = a
    whole prompt per iteration with the decodes (budget = the trace's length filter)."""
    out = {}
    for dataset in SS_TABLE2:
        for sched, budget in (("combined", SS_TABLE4_BUDGET), ("hybrid", SS_TABLE2[dataset][4])):
            problem = _ss_problem(
                catalogs, "Yi-34B", dataset, token_budget=budget, max_batch_size=SS_TABLE4_MAX_BATCH
            )
            out[(dataset, sched)] = evaluate(_at_rate(problem, SS_TABLE4_RATE_PER_S[dataset]))
    return out


T4_CASES = [pytest.param(d, s, id=f"{SS_TABLE4_ROWS[(d, s)][1]}-{d}-{s}") for d, s in SS_TABLE4_ROWS]


#: the P99 TBT rows. Hybrid batching on arxiv prompts was a known miss on 2026-12-01 (planner 2.11 s against
#: the published 1.38 s, +53 %): with 7–13K-token prompts and a 16384-token budget a topped-up last chunk
#: holds two whole prompts, and the share topped up was the lane's busy share (u ≈ 0.65). Since 2026-12-02
#: it is the share with a prompt already waiting when the chunk's iteration starts
#: (``aggregated._top_up_share``): 1.85 s, +34 %
T4_P99_CASES = [pytest.param(d, s, id=f"{SS_TABLE4_ROWS[(d, s)][1]}-{d}-{s}") for d, s in SS_TABLE4_ROWS]


@pytest.mark.parametrize(("dataset", "sched"), T4_P99_CASES)
def test_table4_p99_tbt(
    rows: dict[str, dict[str, str]], sarathi_table4: dict, dataset: str, sched: str
) -> None:
    row_id = SS_TABLE4_ROWS[(dataset, sched)][1]
    planner, published = sarathi_table4[(dataset, sched)].itl_s.p99, _value(rows, row_id)
    assert abs(planner / published - 1.0) <= 0.5, (row_id, planner, published)


@pytest.mark.parametrize(("dataset", "sched"), T4_CASES)
def test_table4_p50_ttft(
    rows: dict[str, dict[str, str]], sarathi_table4: dict, dataset: str, sched: str
) -> None:
    row_id = SS_TABLE4_ROWS[(dataset, sched)][0]
    planner, published = sarathi_table4[(dataset, sched)].ttft_s.p50, _value(rows, row_id)
    assert 0.5 <= planner / published <= 2.0, (row_id, planner, published)


@pytest.mark.parametrize("dataset", list(SS_TABLE2))
def test_table4_hybrid_batching_alone_stalls_the_streams(sarathi_table4: dict, dataset: str) -> None:
    # published: 0.68 / 0.14 = 4.9x (openchat), 1.38 / 0.17 = 8.1x (arxiv)
    hybrid, combined = (
        sarathi_table4[(dataset, "hybrid")].itl_s.p99,
        sarathi_table4[(dataset, "combined")].itl_s.p99,
    )
    assert hybrid >= 3.0 * combined, (hybrid, combined)


# openchat was a known miss until 2026-12-02 (planner 0.553 s hybrid against 0.508 s combined, where
# Sarathi-Serve measured 0.53 against 0.76 s): a whole-prompt iteration was charged the next prompt's tokens
# whenever the lane was busy. With the share of prompts found waiting (``aggregated._top_up_share``) it is
# 0.468 against 0.525 s
@pytest.mark.parametrize("dataset", ["openchat_sharegpt4", "arxiv_summarization"])
def test_table4_hybrid_batching_alone_has_the_lower_ttft(sarathi_table4: dict, dataset: str) -> None:
    assert sarathi_table4[(dataset, "hybrid")].ttft_s.p50 < sarathi_table4[(dataset, "combined")].ttft_s.p50


# ------------------------------------------------------------------------------------------------ Splitwise


_sw_context = D.splitwise_context


@pytest.fixture(scope="module")
def splitwise_table_iv(catalogs: Any) -> dict[str, dict[str, float]]:
    """Per trace: the prefill pass of the median prompt and decode steps at batch 1 and 64 (context prompt +
    output / 2) on A100 and H100 [s]."""
    out = {}
    for trace, (prompt, output) in SW_TRACES.items():
        t: dict[str, float] = {}
        for gpu in SW_GPUS:
            ctx = _sw_context(catalogs, gpu)
            t[f"prefill_{gpu}"] = float(prefill_latency_s(ctx, prompt_tokens=prompt))
            for b in (1, 64):
                t[f"decode{b}_{gpu}"] = float(
                    decode_latency_s(ctx, batch_size=b, context_tokens=prompt + output // 2)
                )
        out[trace] = t
    return out


def _speedup(t: Mapping[str, float], phase: str) -> float:
    return t[f"{phase}_A100"] / t[f"{phase}_H100"]


def test_table_iv_traces_match_the_rows(rows: dict[str, dict[str, str]]) -> None:
    notes = rows["SW-001"]["notes"]
    for trace, (prompt, output) in SW_TRACES.items():
        assert f"{trace}: median prompt {prompt} / output {output}" in notes


@pytest.mark.parametrize("trace", list(SW_TRACES))
@pytest.mark.parametrize("batch", [1, 64])
def test_table_iv_prompt_phase_gains_more_from_h100(splitwise_table_iv: dict, trace: str, batch: int) -> None:
    # published TTFT / TBT speedups: 1.95 / 1.68 (coding), 1.85 / 1.43 (conversation): a gap of >= 1.16x
    t = splitwise_table_iv[trace]
    assert _speedup(t, "prefill") >= 1.15 * _speedup(t, f"decode{batch}"), t


@pytest.mark.parametrize(("trace", "phase"), [(tr, ph) for tr in SW_TRACES for ph in ("prefill", "decode1")])
def test_table_iv_phase_speedups(
    rows: dict[str, dict[str, str]], splitwise_table_iv: dict, trace: str, phase: str
) -> None:
    a_ttft, a_tbt, h_ttft, h_tbt = SW_TABLE_IV[trace]
    published = (
        _value(rows, a_ttft) / _value(rows, h_ttft)
        if phase == "prefill"
        else _value(rows, a_tbt) / _value(rows, h_tbt)
    )
    planner = _speedup(splitwise_table_iv[trace], phase)
    assert abs(planner / published - 1.0) <= 0.3, (trace, phase, planner, published)


@pytest.mark.parametrize("trace", list(SW_TRACES))
@pytest.mark.parametrize("rate_per_s", [10.0, 70.0])
def test_cost_optimal_prompt_pool_is_h100(
    rows: dict[str, dict[str, str]],
    catalogs: Any,
    splitwise_table_iv: dict,
    trace: str,
    rate_per_s: float,
) -> None:
    """At catalog prices (H100 1.43x an A100 per GPU-hour) the prompt pool goes to H100. The token pool's
    choice is not asserted: it is A100 in most runs but not all (docs/accuracy_decisions.md)."""
    gpus = catalogs.gpus
    prompt, output = SW_TRACES[trace]
    t = splitwise_table_iv[trace]
    # Table VI, P99 pair: TTFT 6x and TBT 5x an uncontended A100 request (the planner's own)
    slo = Slo(
        ttft_s=_value(rows, "SW-019") * (find_engine(ENGINE).request_overhead_s + t["prefill_A100"]),
        ttft_percentile=99.0,
        itl_s=_value(rows, "SW-021") * t["decode1_A100"],
        itl_percentile=99.0,
    )
    problem = _problem(
        catalogs,
        model=SW_MODEL,
        gpu=SW_GPUS["A100"],
        tp=SW_TP,
        workload=_workload(fixed_length(prompt), fixed_length(output)),
    )
    cands = tuple(PoolCandidate(gpu=gpus[g], parallelism=Parallelism(tp=SW_TP)) for g in SW_GPUS.values())
    plan = plan_disaggregated(
        DisaggregatedSearch(
            problem=problem,
            slo=slo,
            prefill_candidates=cands,
            decode_candidates=cands,
            target_rate_per_s=rate_per_s,
        )
    )
    assert plan.status == "optimal" and plan.objective == "min_cost", plan.message
    assert plan.prefill is not None and plan.prefill.gpu == SW_GPUS["H100"], plan.message
