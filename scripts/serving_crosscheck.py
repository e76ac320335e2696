"""Hold the closed-form serving model against the reference simulation over a grid of loads.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/serving_crosscheck.py [--requests 4000] [--seeds 3] [--jobs 2]

Writes ``docs/accuracy_crosscheck.md``: per scenario and load point the closed-form (``evaluate``) and the
simulated (``simulate``) mean, p90 and p99 of TTFT and ITL with their relative errors, a summary per mode ×
arrival kind with PASS/MISS against the tolerances of issue 3, section 5 (mean and p90 within 15 %, p99
within 25 %), the largest discrepancies with their reading, and two sensitivity runs.
``scripts/accuracy_report.py`` copies it to the end of ``docs/accuracy.md``. The grid and the comparison
live in ``planner.validation.crosscheck``. Runs the cases of one worker configuration in one process
(sharing its step-time memo), ``--jobs`` processes at a time, and prints the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.engines import find_engine  # noqa: E402
from planner.hardware import load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402
from planner.serving.types import DisaggregatedDeployment  # noqa: E402
from planner.units import SECONDS_PER_MS  # noqa: E402
from planner.validation.crosscheck import (  # noqa: E402
    CLOSED_LOOP_CONCURRENCIES,
    KV_WATERMARK,
    LONG_RUN_FROM,
    TAIL_SEED_FACTOR,
    TAIL_SEEDS_FROM,
    METRICS,
    POISSON_LOAD_FRACTIONS,
    POOL_CONCURRENCIES,
    POOL_LOAD_FRACTIONS,
    POOL_SIZES,
    SHORT_PROMPT_BUDGET,
    SHORT_PROMPT_CONCURRENCIES,
    SHORT_PROMPT_LOAD_FRACTIONS,
    STATISTICS,
    TOLERANCE_FRACTION,
    Case,
    Comparison,
    GroupSummary,
    StepTimeMemos,
    closed_loop_points,
    compare,
    crosscheck_engine,
    default_scenarios,
    default_workers,
    poisson_points,
    run_length,
    run_seeds,
    scenario_cases,
    summarize_groups,
    with_pools,
    with_short_prompts,
)

DOCS = ROOT / "docs"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/serving_crosscheck.py"
ENGINE = "vllm"
METRIC_LABEL = {"ttft_s": "TTFT", "itl_s": "ITL"}
#: the sensitivity runs: closed loops of the first worker without the front-end time
NO_FRONT_END_CONCURRENCIES = (16, 64)
#: closed loops of the batching prefill worker's sensitivity run: the first worker (its pool ~25 / 60 / 75 %
#: busy) and the second (~33 / 56 / 86 / 98 % busy)
BATCHING_CONCURRENCIES, BATCHING_CONCURRENCIES_SECOND = (16, 64, 128), (16, 32, 64, 96)
#: the watermark sensitivity run: the second worker's aggregated lognormal scenarios at these loads, its
#: simulated admissions filling the KV cache to the last token (vLLM V1's default ``watermark=0.0``)
WATERMARK_LOADS = (0.7, 0.9)
NO_WATERMARK = 0.0
#: largest discrepancies listed
NUM_WORST = 15


# --------------------------------------------------------------------------------------------------
# the grid and its runs


def main_cases() -> list[Case]:
    workers = default_workers(load_model_catalog(), load_catalog())
    cases: list[Case] = []
    for scenario in default_scenarios(workers, find_engine(ENGINE)):
        cases += scenario_cases(scenario)
    return cases


def sensitivity_cases() -> dict[str, list[Case]]:
    """(a) the first worker's closed loops with no front-end time; (b) its disaggregated lognormal
    scenario with a prefill worker that batches waiting prompts (vLLM's default ``max_num_seqs``), open and
    closed loops; (c) the second worker's aggregated lognormal scenarios at ρ = 0.7 and 0.9, the simulated
    admissions without the KV watermark of the grid (``simulate(kv_watermark=0)``); (d) the disaggregated
    scenarios with pools of several workers (``POOL_SIZES``), the simulated decode router least loaded and,
    for the first worker, round robin too; (e) both workers' chunked scenario with short prompts under a large
    budget (``with_short_prompts``), many prompts to an iteration."""
    workers = default_workers(load_model_catalog(), load_catalog())[:1]
    engine = crosscheck_engine(find_engine(ENGINE), request_overhead_s=0.0)
    no_front_end = []
    for scenario in default_scenarios(workers, find_engine(ENGINE)):
        s = dataclasses.replace(scenario, engine=engine, label=f"{scenario.label} · no front end")
        no_front_end += [Case(scenario=s, point=p) for p in closed_loop_points(NO_FRONT_END_CONCURRENCIES)]
    batching = []
    both = default_workers(load_model_catalog(), load_catalog())[:2]
    for scenario in default_scenarios(both, find_engine(ENGINE), modes=("disaggregated",)):
        if scenario.lengths != "lognormal":
            continue
        dep = scenario.deployment
        assert isinstance(dep, DisaggregatedDeployment)
        batched = dataclasses.replace(dep, prefill=dataclasses.replace(dep.prefill, max_batch_size=256))
        s = dataclasses.replace(scenario, deployment=batched, label=f"{scenario.label} · batched prefill")
        if scenario.label == workers[0].label:  # the first worker: open loops and closed loops
            batching += [Case(scenario=s, point=p) for p in poisson_points(s, POISSON_LOAD_FRACTIONS)]
            batching += [Case(scenario=s, point=p) for p in closed_loop_points(BATCHING_CONCURRENCIES)]
        else:  # the second: closed loops up to its pool's saturation (the laws' largest errors)
            batching += [Case(scenario=s, point=p) for p in closed_loop_points(BATCHING_CONCURRENCIES_SECOND)]
    watermark = []
    second = default_workers(load_model_catalog(), load_catalog())[1:2]
    for scenario in default_scenarios(second, find_engine(ENGINE),
                                      modes=("aggregated_chunked", "aggregated_unchunked")):
        if scenario.lengths != "lognormal":
            continue
        s = dataclasses.replace(scenario, kv_watermark=NO_WATERMARK,
                                label=f"{scenario.label} · no KV watermark")
        watermark += [Case(scenario=s, point=p) for p in poisson_points(s, WATERMARK_LOADS)]
    pools = []
    every = default_workers(load_model_catalog(), load_catalog())
    for i, (worker, (n_pre, n_dec)) in enumerate(zip(every, POOL_SIZES, strict=True)):
        for scenario in default_scenarios([worker], find_engine(ENGINE), modes=("disaggregated",)):
            # both routers for the first worker, the least-loaded one for the second
            for routing in ("least_loaded", "round_robin")[: 2 if i == 0 else 1]:
                s = with_pools(scenario, n_pre, n_dec, routing)
                pools += scenario_cases(s, fractions=POOL_LOAD_FRACTIONS, concurrencies=POOL_CONCURRENCIES)
    short = []
    for worker in every:
        for scenario in default_scenarios([worker], find_engine(ENGINE), modes=("aggregated_chunked",)):
            if scenario.lengths == "lognormal":
                short += scenario_cases(with_short_prompts(scenario), fractions=SHORT_PROMPT_LOAD_FRACTIONS,
                                        concurrencies=SHORT_PROMPT_CONCURRENCIES)
    return {"no_front_end": no_front_end, "batched_prefill": batching, "kv_watermark": watermark,
            "pools": pools, "short_prompts": short}


def _run_group(cases: Sequence[Case], num_requests: int, seeds: Sequence[int]
               ) -> tuple[list[Comparison], float]:
    start = time.perf_counter()
    memos = StepTimeMemos()
    out = [compare(c, num_requests=run_length(c, num_requests), seeds=run_seeds(c, seeds), memos=memos)
           for c in cases]
    return out, time.perf_counter() - start


def _memo_key(case: Case) -> tuple[object, ...]:
    s = case.scenario
    return (s.model.id, s.mode, repr(s.deployment))


def run_all(cases: Sequence[Case], *, num_requests: int, seeds: Sequence[int], jobs: int) -> list[Comparison]:
    """Every case, those of one worker configuration in one process; results in the order of ``cases``."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(_memo_key(c), []).append(i)
    # the slowest groups (chunked prefill: many distinct iteration shapes) first
    order = sorted(groups.values(), key=lambda idx: cases[idx[0]].scenario.mode != "aggregated_chunked")
    results: list[Comparison | None] = [None] * len(cases)
    batches = [[cases[i] for i in idx] for idx in order]
    if jobs <= 1:
        outs = [_run_group(b, num_requests, seeds) for b in batches]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            outs = list(pool.map(_run_group, batches, [num_requests] * len(batches), [seeds] * len(batches)))
    for idx, (comparisons, seconds) in zip(order, outs, strict=True):
        first = cases[idx[0]]
        print(f"  {first.scenario.label} · {first.scenario.mode}: {len(idx)} cases in {seconds:.1f} s",
              flush=True)
        for i, comparison in zip(idx, comparisons, strict=True):
            results[i] = comparison
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


# --------------------------------------------------------------------------------------------------
# markdown


def _ms(seconds: float) -> str:
    value = seconds / SECONDS_PER_MS
    return f"{value:.3g}" if value < 999.5 else f"{value:.0f}"


def _err(c: Comparison, metric: str, statistic: str) -> str:
    text = f"{100 * c.error_fraction(metric, statistic):+.0f}"
    return text if c.within_tolerance(metric, statistic) else f"**{text}**"


def summary_section(summaries: Sequence[GroupSummary]) -> list[str]:
    lines = [
        "## Summary per mode × arrival",
        "",
        "|relative error| of the closed form against the simulation over the group's cases (both workers, "
        "every load point). *worst* is signed (> 0: the closed form over-predicts). PASS: every case of the "
        "group within the tolerance (mean and p90 15 %, p99 25 %).",
        "",
        "| mode | arrival | metric | cases | median % | worst % | within | target | verdict | worst case |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.mode} | {s.arrival} | {METRIC_LABEL[s.metric]} {s.statistic} | {s.num_cases} | "
            f"{100 * s.median_fraction:.1f} | {100 * s.worst_signed_fraction:+.1f} | "
            f"{s.num_within}/{s.num_cases} | {100 * s.tolerance_fraction:.0f} % | {s.verdict} | "
            f"{s.worst_case} |")
    return lines


def verdict_table(summaries: Sequence[GroupSummary]) -> list[str]:
    """One line per mode × arrival: the verdict of each statistic."""
    keys = list(dict.fromkeys((s.mode, s.arrival) for s in summaries))
    head = [f"{METRIC_LABEL[m]} {st}" for m in METRICS for st in STATISTICS]
    lines = ["| mode | arrival | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    index = {(x.mode, x.arrival, x.metric, x.statistic): x for x in summaries}
    for mode, arrival in keys:
        cells = []
        for m in METRICS:
            for st in STATISTICS:
                s = index[(mode, arrival, m, st)]
                cells.append(f"{s.verdict} ({100 * s.median_fraction:.0f} / {100 * s.worst_fraction:.0f})")
        lines.append(f"| {mode} | {arrival} | " + " | ".join(cells) + " |")
    return lines


def case_table(comparisons: Sequence[Comparison]) -> list[str]:
    lines = [
        "| load | req/s cf / sim | decode batch cf / sim | metric | mean cf / sim ms | err % "
        "| p90 cf / sim ms | err % | p99 cf / sim ms | err % | spread % |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        for k, m in enumerate(METRICS):
            cf, sim = c.closed_form[m], c.simulated[m]
            head = " | |"
            if k == 1:
                head = (f" | | var/mean {c.closed_form_batch_dispersion:.3g} / "
                        f"{c.simulated_batch_dispersion:.3g}")
                if max(c.closed_form_cap_share, c.simulated_cap_share) >= 1e-4:
                    head += (f"; at cap {100 * c.closed_form_cap_share:.2f} / "
                             f"{100 * c.simulated_cap_share:.2f} %")
            if k == 0:
                head = (f"{c.case.point.label}{'' if c.closed_form_feasible else ' (cf: infeasible)'} | "
                        f"{c.closed_form_requests_per_s:.3g} / {c.simulated_requests_per_s:.3g} | "
                        f"{c.closed_form_decode_batch:.3g} / {c.simulated_decode_batch:.3g}")
            cells = []
            for st in STATISTICS:
                cells.append(f"{_ms(getattr(cf, st))} / {_ms(getattr(sim, st))} | {_err(c, m, st)}")
            spread = "/".join(f"{100 * c.spread_fraction(m, st):.0f}" for st in STATISTICS)
            lines.append(f"| {head} | {METRIC_LABEL[m]} | " + " | ".join(cells) + f" | {spread} |")
    return lines


def by_scenario(comparisons: Sequence[Comparison]) -> list[list[Comparison]]:
    """The comparisons grouped by scenario (label, mode, lengths), in order of first appearance."""
    groups: dict[tuple[str, str, str], list[Comparison]] = {}
    for c in comparisons:
        s = c.case.scenario
        groups.setdefault((s.label, s.mode, s.lengths), []).append(c)
    return list(groups.values())


def scenarios_section(comparisons: Sequence[Comparison]) -> list[str]:
    lines = [
        "## Per scenario and load point",
        "",
        "cf = closed form, sim = simulation (replications pooled). *err* = cf / sim − 1, **bold** outside "
        "the tolerance. *spread* = (largest − smallest replication) / pooled value of mean / p90 / p99: the "
        "simulation's own noise. Loads: ρ = offered rate / the closed form's saturation rate; N = clients. "
        "*var/mean* (under the decode batch): the decode batch's variance over its mean per worker, the closed "
        "form's law (`batch.batch_dispersion`; a closed loop's binomial 1 − B/N) and the simulation's, "
        "time-weighted (the mean of the replications).",
    ]
    for members in by_scenario(comparisons):
        s = members[0].case.scenario
        lines += ["", f"### {s.label} · {s.mode} · {s.lengths}", "", *case_table(members)]
    return lines


def worst_section(comparisons: Sequence[Comparison]) -> list[str]:
    rows = [(abs(c.error_fraction(m, st)) / TOLERANCE_FRACTION[st], c, m, st)
            for c in comparisons for m in METRICS for st in STATISTICS]
    rows.sort(key=lambda r: -r[0])
    lines = [
        "## Largest discrepancies",
        "",
        f"The {NUM_WORST} statistics furthest outside their tolerance (|err| / tolerance).",
        "",
        "| case | statistic | cf ms | sim ms | err % | × tolerance | spread % |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for ratio, c, m, st in rows[:NUM_WORST]:
        lines.append(f"| {c.case.name} | {METRIC_LABEL[m]} {st} | {_ms(getattr(c.closed_form[m], st))} | "
                     f"{_ms(getattr(c.simulated[m], st))} | {100 * c.error_fraction(m, st):+.0f} | "
                     f"{ratio:.1f} | {100 * c.spread_fraction(m, st):.0f} |")
    return lines


#: the hand-written reading of the misses: one paragraph per mechanism (whitespace is normalized)
READINGS = (
    """Hand-written (in `scripts/serving_crosscheck.py`) from the runs of 2026-12-01 that gave 36, 37, 40,
    44, 47 and 48 of 54 groups and those of 2026-12-02 that gave 50, 51 (twice), 50, 51 and, after the
    engines' host times were refitted on the closed form's TPOT (vLLM: 0.60 ms per iteration and 52 µs per
    running sequence, which both sides run; Qwen3-32B's chunked capacity fell ~10 %), 50, then 51 with 4×
    the replications from ρ = 0.9 (`crosscheck.run_seeds`; the chunked TTFT p99 at ρ = 0.9 passes), 52
    after the shared unchunked passes, and 54 since the chunked train's orbit is stepped (2026-12-05, the
    train paragraph below); the tables above are regenerated, this reading is not: re-read it after
    changing `planner/serving/`.""",
    """- **What moved the report from 20 to 44 passing groups** (each a change of the closed form, except
    the first). (1) The simulation's runs at ρ = 0.9 were too short: with 4000 requests the disaggregated
    M/G/1 prefill queue (whose mean wait the closed form has exactly) came out 21 % above it; the runs now
    grow as 1 / (1 − ρ)² above ρ = 0.7. (2) A chunk's earlier KV was averaged over the *mean* prompt, 0 for
    these lognormal prompts (mean 1426 tokens, shorter than one 1913-token chunk) although their long
    prompts are the ones split: it is now the token-weighted offset over the prompt distribution (636
    tokens); the closed form's saturation rate for Qwen3-32B chunked fell ~2 % and its ρ = 0.9 point
    stopped sitting past the simulation's fold. (3) Disaggregated closed loops queue by mean-value
    analysis over the N clients, their wait with the machine-repair law an arrival sees. (4) Unchunked, a stream's stall is the prefill busy period that the
    prompts arriving during its decode iteration start (probability 1 − e^(−λ·τ_d), the M/G/1 busy
    period's two moments); in a closed loop the arrivals are completion-triggered, land in decode
    iterations and share one prefill batch. (5) Chunked closed loops queue per iteration: completions,
    and so arrivals, come a steady number per iteration end, and the lane is busy in a smaller share of
    the iterations than of the time. (6) Lock-step cohorts have a TTFT law (shares after 1 … K
    iterations); an unchunked cohort prefills in whole-prompt iterations while none of its streams
    decodes. (7) A disaggregated fixed-length closed loop spaces itself
    (`DisaggregatedModel.locked_prefill_wait_s`): the first wave queues, leaves the prefill worker one
    service time apart, decodes for the same time and comes back still one service apart, so no prompt
    waits again while the pool keeps up (the periodic state of a deterministic closed cyclic network, wait
    max(0, N·S / c − S − Z)). The simulated TTFT is that constant (Qwen3-32B, N = 64: 64.7 ms at p50, p90
    and p99, where the random-phase mean-value analysis gave 79.5 / 115 / 174 ms); the engine's
    `closed_loop_coherence` is the share of requests that keep the schedule, 1 here. The three TTFT groups
    of these loops now pass (worst |error| 4 / 11 / 11 %, from 23 / 78 / 168 %). (8) A chunked
    fixed-length closed loop whose front end does not spread runs as a train (next paragraph): 40 → 44
    groups, median |error| over the grid 2.9 → 2.2 %. (9)–(11): 44 → 47 groups, median 2.1 % (the
    paragraph after next).""",
    """- **Chunked fixed-length closed loops: a train, not a cohort.** Every client starts at t = 0, so the
    first wave's prompts fill K = ⌈N·Lp / C⌉ iterations; since the decodes run through the prefills, the
    groups get their first token one iteration apart, finish one iteration apart and come back so: the
    loop keeps the shape of a train (`AggregatedModel._chunked_train`). A returning group reaches the
    scheduler a front-end time h after it finished and waits behind the groups before it. Llama-3.1-8B,
    N = 64: the simulated TTFTs are 66, 99, 125, 132, then 136 ms for every later group; N = 16: 72, 105,
    139, 173 and 175 ms. A stream sees a mixed iteration only while it decodes through a train, a few per
    life, which is why the ITL p90 of these loops is a decode-only iteration and the p99 a mixed one; the
    cohort with random-phase gaps gave the p90 a mixed one. **Since 2026-12-05 (evening) the closed form
    steps the orbit itself** (`planner.serving.train.chunked_orbit`): the system is deterministic, so its
    periodic state is found by following it from the burst start, iteration by iteration (a run of
    decode-only iterations in one step), through four cycles of the loop and two measured windows of six,
    which must agree (and each close Little's law) to 1 % or the planner keeps the cohort (3 ms for 64
    clients), on the cost model's iteration times. Until then it was a closed form of the orbit that
    packed every train into budget-full iterations beside the mean decode batch, which missed two groups
    (52 of 54): a group that returns to a free lane gets an iteration of its own prompts, and the groups
    behind it share full ones, so Qwen3-32B at N = 16 runs iterations of 1536, 2044, 2042, 2038 and
    532 prompt tokens beside 5, 4, 6, 10 and 14 decodes, where the closed form had four of ~2034 tokens
    and one of 64: its ITL p99, on the knife edge of the mixed gaps' 1.0 % share, was a decode-only gap
    (19.1 against 38.2 ms; the orbit: 39.1); and four clients that return together to an idle engine are
    prefilled in two iterations, one request and then the three that arrived with it, not one (Qwen3-32B
    N = 4: a quarter of the requests at 58.9 ms and the rest at 125.7 in the simulation, the orbit 58.9
    and 123.6, the closed form 126 for all: TTFT mean +15.2 → −1.5 %). The simulation's scheduler starts
    an iteration at the first arrival to an idle engine, as an engine loop that wakes on its first input
    does; real arrivals that close are a few microseconds apart. **This orbit is a memory of the start**:
    started with the clients' first requests spread over 10 s instead of at once, the same simulation gives
    Llama-3.1-8B N = 64 a TTFT of 66 / 91 / 101 ms (mean / p90 / p99, against 161 / 173 / 173 from the
    burst) and Qwen3-32B 109 / 159 / 182 ms (against 287 / 303 / 303), near the random-phase law; so does
    the unchunked cohort (Llama-3.1-8B N = 64: 73 / 120 / 120 ms against 420 / 657 / 657), while the
    disaggregated loops space themselves from any start (39.3 ms either way). Benchmark tools do start
    their clients at once. Real front ends spread (parsing, tokenization, the network), and a spread of half
    an iteration shuffles the groups' returns back into one clump: the planner uses the train only for an
    engine whose front-end spread is known to be below that (`EngineProfile.request_overhead_jitter_s`, 0
    here) and keeps the cohort for the built-in engines, whose spread is not measured. The serving
    benchmarks side with that: refitted with the train, vLLM's in-sample TTFT error went from 27.6 to
    36.3 % (leave-one-model-out 38.6 → 46.9 %) and TensorRT-LLM's from 21.7 to 26.0 %. SGLang, whose
    scheduler runs prefill batches apart from the decodes (`enable_mixed_chunk` off by default), keeps a
    cohort in any case (`EngineProfile.mixes_prefill_with_decode`).""",
    """- **ρ = 0.9, Qwen3-32B aggregated chunked: TTFT p99 −24 % (1468 against 1943 ms over twelve
    replications; −18 %, 1591 ms, before the bulk lane wait of 2026-12-05, which shortened the wait where
    the lane takes several prompts to an iteration: mean −2 → −7 %, p90 +0 → −7 %; a miss until 2026-12-02
    at −37 %, 1693 against 2699 ms over three).** The operating point
    sits near the fold of λ(B), where B = λ·(E[O] − 1)·τ̄(B) feeds itself: a busier prefill lane grows the
    batch, which lengthens every iteration. **The lane was too fast (2026-12-02, later: p99 −41 → −37 %, mean
    −12.5 → −8.8 %).** The closed form's mixed iterations carried 1687 prompt tokens on average, the
    simulation's 1545 / 1545 (12000 requests, seeds 0 and 1): a prompt's last chunk was topped up with the
    next prompt's tokens with the lane's busy share u, which counts the prompts that arrive while that chunk runs.
    The share with a prompt already waiting when its iteration starts, 1 − (1 − u) / E[exp(−λ·t_alone)] for
    Poisson arrivals (`aggregated._top_up_share`), gives 1570, and 1273 / 1372 / 1533 against the simulated
    1255 / 1345 / 1518 for Llama-3.1-8B at ρ = 0.5 / 0.7 / 0.9 (`tests/unit/test_top_up.py`). Closed loops
    keep the busy share: their prompts come at iteration ends, and on the serving benchmarks (all closed loops) the
    Poisson law moved the dense TTFT error 18.9 → 19.3 % (vLLM 26.7 → 28.8 %). What is left of the gap (at the
    grid's 8.80 requests/s): the closed form's lane is busy 0.766 of the time, the simulation's 0.794 /
    0.782 / 0.782 (seeds 0–2, 36000 requests), with a batch of 110 against 123 / 118 / 116; the closed form
    reaches that utilization at ~8.93 requests/s, so 1.5 % of rate, which the fold magnifies into the
    batch. In the simulator (at 8.90 requests/s, before that day's change of the collectives' laws),
    freezing the decode batch of the mixed iterations' cost at 113 (seeds 0 and 1) took the TTFT
    p99 from 5.1 / 2.3 s to 2.7 / 1.9 s and the mean from 520 / 446 to 459 / 431 ms; costing every chunk at
    offset zero instead, to 3.7 / 1.8 s. The simulated tail is made of rare congestion episodes of the
    prefill lane, some after the decode batch reached the KV cache's capacity (199 sequences of 1631 tokens;
    admissions stop for 0.3 s at the median, 1.5 s at most), most without one (2026-12-02, one 36000-request
    replication: 4 % of its requests have a TTFT over 1.5 s, in clusters; seven of the first eight had no KV
    block in the 30 s before them). The lane's exact M/G/1 wait (Pollaczek–Khinchine, numerically) has the
    closed form's p99 (1.43 against its exponential's 1.42 s): the simulated congestion outlasts an M/G/1's.
    What prolongs it (2026-12-02, seeds 1 and 0 at 36000 requests, with throwaway probes of the simulator's
    iteration records): the same arrivals through a constant-rate lane (Lindley's recursion at 17.1k prompt
    tokens/s, the closed form's) give a wait p99 of 1.5 / 1.3 s, where the simulated TTFT p99 is 2.3 / 5.1 s.
    The requests whose wait is in the top 1 % see a decode batch of 171 / 175 sequences over it (the
    stationary mean 121 / 126; the closed form's 113) and a lane that moves 14.5k / 13.5k prompt tokens/s,
    against 17.1k / 17.0k for the p50–p90 waits: with every iteration mixed (~110 ms) the lane admits prompts
    faster than streams finish (~12 per s against ~5), the batch grows, each added sequence slows the lane
    (the cost model: 17.5k tokens/s at 110 sequences, 16.6k at 155, 15.8k at 199), and near the cap admissions
    stop. The long waits and the large batches come together; the closed form's batch law is stationary and
    independent of the queue, and a quasi-static mixture of the lane's wait over it moved the p99 only 1588 →
    1638 ms. Not modelled. Each run is decided by a few episodes (TTFT p99 of the replications 5.1 / 2.3 / 2.0
    s at 36000 requests with the watermark below; the grid's spread is 115 %). Why the batch gets there: its
    spread is far wider than the Poisson occupancy the ITL law had (next paragraph). Not modelled: the wait of
    those episodes. Flagged instead (2026-12-02): the free tail of the batch law, a gamma of the steady
    state's mean and of `batch_dispersion`'s variance plus the spread of the KV each running sequence holds
    (`batch.cap_share`; that spread, variance/mean² 0.71 here, was added later that day), puts the batch at
    the cap 0.56 % of the time here and 0.75 % unchunked (0.40 and 0.58 % from the sequence count alone); the
    simulation's share with a prompt kept out for want of KV (`SimulationResult.admission_blocked_share`, the
    *at cap* cells) is 1.16 % and 0.62 %, and `evaluate` and
    the what-if rows warn above 0.1 % that the TTFT tail there is not modelled
    (`tests/unit/test_batch_cap.py`). Llama-3.1-8B at ρ = 0.9, capped by max_batch_size (256): the closed form
    says 0.13 % (chunked; simulated 0.08 %) and 0.52 % (unchunked; simulated 0.09 %, whose batch is 119
    against the closed form's 136 then; 115 against 121 since the shared passes of 2026-12-07, *Unchunked
    Poisson* below), so that warning comes early there. **The
    KV admission watermark (2026-12-02; 48 → 50 groups).** Until this date the simulated scheduler admitted
    requests up to a full cache; a request admitted into a nearly full one was preempted as soon as the
    running ones grew, recomputed its prompt in a prefill pass that stalled every stream, and was admitted and
    preempted again: three 36000-request replications of the unchunked point had 144 / 55 / 24 preemptions,
    TTFT mean 369 / 236 / 226 ms and p99 6.0 / 1.1 / 0.9 s. vLLM's V0 block manager, whose scheduler the
    simulation replays, admits only if 1 % of the cache stays free (`watermark=0.01`, "to avoid frequent cache
    eviction"); with that headroom (`simulate(kv_watermark=0.01)`, now the grid's) the same runs have no
    preemption, TTFT mean 252 / 230 / 225 ms and p99 1.3 / 0.96 / 0.86 s, and the unchunked point passes (mean
    −23 → −9 %, p99 −56 → −13 %). The chunked tail barely moves (p99 −48 → −41 %): it is the blocking itself,
    not the recompute. vLLM V1's KV-cache manager has a watermark option whose default is 0; the sensitivity
    run *Admissions without a KV watermark* below keeps that case (93 and 223 preemptions over its runs, the
    unchunked misses back). The KV-cache batch cap itself counts what a running sequence holds on average, its
    prompt and, length-biased, half its output (1631 tokens; the simulation's time average is 1641), not E[I]
    + E[O] / 2 (1533): 199 sequences, was 212 before 2026-12-01, which lowered Qwen3-32B's closed-form
    saturation by ~1 %. **How noisy the reference is, and why the episodes are long (2026-12-02, later).**
    Twelve replications of 36000 requests (seeds 0–11), measured twice: with the engine of the morning
    (8.80 requests/s) the pooled TTFT p99 was 2351 ms (closed form 1704, −27.5 %; three seeds 1951–2736
    ms), and after the host-time refit (7.93 requests/s) it is 1942 ms, per replication 4.7, 2.0, 1.6,
    1.5, 1.7, 2.0, 1.7, 3.1, 1.6, 2.3, 1.5, 1.7 s (median 1.69 s), mean 408 and p90 829 ms; pools of three
    consecutive seeds give 2198, 1670, 2224 and 1753 ms. Against the closed form's 1591 ms of that day
    (1468 ms since 2026-12-05) that was −18 % over the twelve and −28 % / −5 % / −28 % / −9 % over the
    pools of three: the verdict was the draw of
    the seeds. The grid now runs 4× the replications from ρ = 0.9 (`crosscheck.run_seeds`). The
    replications' p99 rises with their share of time at the KV cap (correlation 0.63). At the cap the
    backlog still drains: with admissions limited to completions (200 / 216 per iteration, 1336 prompt
    tokens beside 200 decodes, 106 ms) the replica serves 8.87 requests/s against the 7.93 offered, a net
    0.94 request/s, against 3.64 with full chunks at the mean batch (11.6 requests/s at 105 sequences):
    an episode that has grown the batch to the cap takes about four times as long to clear. Llama-3.1-8B
    at ρ = 0.9, whose p99 matches, keeps a margin there too (16.3 requests/s at its cap of 256 against
    14.7) and rarely reaches it.""",
    """- **The decode batch is not Poisson (2026-12-01; 47 → 48 groups with the KV cap above).** The
    simulated batch's variance over its mean (the *var/mean* cells) is ~1.1 at ρ = 0.1, ~2.2 at 0.5, ~4 at
    0.7 and ~7 at 0.9 in both aggregated modes and on both workers, where the M/G/∞ occupancy that the ITL
    law used gives 1 at any load. Two mechanisms, each checked alone with an injected step time (Qwen3-32B
    chunked, 12000 requests): a decode iteration that lengthens with the batch (10 ms + 0.1 ms per
    sequence, fixed lengths: 1.30 simulated against 1 / (1 − ε) = 1.26, the negative binomial of a
    processor-sharing station, insensitive to the lives' distribution), and prefill that stretches the
    running streams' iterations (20 ms per iteration plus 30 µs per prompt token, fixed 512-token prompts:
    1.41 against 1 / (1 − u)² = 1.30, the total progeny of the bursts that arrive during a stretch).
    `batch.batch_dispersion` combines them, (1 + θ·E[K(K − 1)] / E[K]) / (1 − ε), θ the overlap of two
    decode lives. Over the 20 aggregated Poisson points its median |error| is 8 % (the Poisson law's:
    50 %); worst +51 % at Llama-3.1-8B unchunked ρ = 0.9, where the closed form's batch is 136 against the
    simulation's 114, and −24 … −28 % at ρ = 0.7 chunked. Decode pools (1 / (1 − ε) alone): median 8 %,
    worst −21 %. The ITL quantiles moved by a few percent (chunked ITL p99 at ρ = 0.9: Llama −11 → −8 %,
    Qwen3-32B −10 → −7 %).""",
    """- **Three changes of the ITL law (2026-12-01, 44 → 47 groups).** (9) *A chunk's spare budget is
    used or not, not a mean of the two.* A prompt's last chunk leaves budget spare, which the next prompt's
    first tokens fill when one waits (probability ≈ u). The law had one kind per prompt point at the mean
    tokens, last + u·spare: a 150-token prompt's chunk at u = 0.35 became one ~21 ms iteration, where the
    simulation runs a ~12 ms one 65 % of the time and a ~40 ms one otherwise. Now the two are separate
    kinds with shares 1 − u and u (the balance equations take the mean of their times). Llama-3.1-8B
    chunked at ρ = 0.5: the simulation has 4.6 % of its gaps between 12 and 20 ms, the law had none; ITL
    p90 +28 % → +7 % (Qwen3-32B +16 % → −8 %). (10) *In a closed loop a mixed or stalled iteration carries
    N − 1 clients' share of the batch.* The prompt that makes it mixed belongs to a client that is not
    decoding, so per stream (the way gaps are counted) those iterations weigh (N − 1)/N of the decode-only
    ones: at N = 4 a quarter less. Chunked ITL p99 at N = 4: Llama-3.1-8B +47 % → +17 %, Qwen3-32B
    +30 % → +2 %; unchunked N = 4: +15 / +28 % → −11 / −4 %. (11) *Unchunked closed loops: prompts return
    into stalls.* A stream that finishes at a decode iteration's end sends its next prompt a front-end time
    F later; those of the decode ends in the window [t0 − F, t0 + X − F) land in a stall of length X that
    starts at t0 and lengthen it by their prefills (about min(X, F + τ_d/2) / τ_d decode ends), and they do
    not start stalls of their own: of the λ / r_dec returns per decode end a_s start one, with a = a_s +
    P(stall)·E[returns into it] solved by false position, so every prompt is still prefilled once.
    Unchunked ITL p99 at N = 64: Llama-3.1-8B −30 % → −1 %, Qwen3-32B −28 % → −11 %. The serving
    benchmarks barely move (dense aggregated TTFT median 19.3 % unchanged, TPOT 6.5 → 6.8 %, vLLM in-sample
    TTFT 27.6 → 28.5 %): their fixed-length loops are mostly lock-step and their TPOT mostly decode.""",
    """- **Unchunked Poisson: the prefill lane's shared passes (2026-12-07; 51 → 52 groups).** The scheduler
    prefills every prompt that waits in one pass, and a pass of several prompts costs less than their passes
    one by one (the cost model, Llama-3.1-8B on an H100: two 32-token prompts 0.51 of two passes, two
    1000-token ones 0.95); the closed form costed each its own pass and queued the prompts one after the
    other (Kingman). Its lane was too busy (Llama-3.1-8B at ρ = 0.9: 52.3 % against the simulation's
    49.8 %, batch 115 against 106, ITL p90 +16 %), and its TTFT was light by the time a prompt's pass
    takes for the others in it (means −2 … −10 %, hidden at the mean by the queue of the overstated load).
    Now (`aggregated._shared_lane`): a stall's first pass holds the prompts of the decode iteration before
    it, at E[t_pre]·T(N)/T(1), T(n) the cost model's pass of n prompts of the mean length; the passes
    after it take the prompts that arrived during the one before, k = g(λ·T(k)), g(x) = x / (1 − e^{−x}),
    and stretch it as a busy period of load λ·T(k)/k; the lane is busy E[S] / (τ_d + E[S]) of the time.
    A prompt waits for the iteration in progress (the rest of a pass, busy) and rides the next pass with
    every prompt of its iteration, T(1 + c) − T(1) more than its own prefill. Llama-3.1-8B at ρ = 0.9:
    batch 121 against 115, ITL mean +0 %, p90 +10 %; Qwen3-32B at ρ = 0.9: batch 107 against 107 (was 103
    against 93), ITL mean −5 %; Qwen3-32B at ρ = 0.7, whose ITL p90 was −17 % at the foot of the stalls'
    jump, −4.5 %. TTFT means within 1 % at every load up to ρ = 0.7 (they were −2 … −8 %), p99 within 6 %
    (were −10 … −14 %). Left: Qwen3-32B at ρ = 0.9, now 7.26 requests/s (the saturation rate rose from
    7.83 to 8.07; the simulation serves 8.42 offered twice it), TTFT mean −12 % and p99 −24.5 %, the
    latter inside the tolerance by half a point: the simulated tail is the KV-blocking episodes of the
    chunked ρ = 0.9 paragraph (at cap 1.34 % of the time against the closed form's 0.48 %; the replications' p99 spread
    197 %), as the sharing tried and reverted on 2026-12-01 predicted. A closed loop's lane still costs
    each prompt its own pass (its stall law counts the returns per decode end; `evaluate` warns where that
    matters, `batch.shared_pass_warning`).""",
    """- **Chunked closed loops of lognormal lengths: the residual iteration at the front end's phase
    (2026-12-02; 50 → 51 groups).** Every chunked closed loop's TTFT p90 and p99 were under the
    simulation's (−4 … −15 %), Qwen3-32B at N = 64 just outside the tolerance (p90 −15.1 %). A request
    reaches the scheduler a front-end time F after the iteration end that completed its client's last
    request, so with a front end that does not spread it lands at a fixed phase of the decode iterations
    that follow, not a uniform one: Qwen3-32B, F = 24.5 ms against 21.6 ms decode iterations, lands 2.9 ms
    into the second and waits 18.7 ms for it, where half an iteration is 10.8. `_phase_residual` follows
    the iterations after the completion, mixed with the lane's share of iterations, and takes the rest of
    the decode-only one it lands in (landing in a mixed one, it waits behind the lane's work, which the
    queue counts); the built-in engines, whose front-end spread is not measured
    (`request_overhead_jitter_s` unset), keep the uniform phase, so the serving benchmarks do not move.
    Qwen3-32B N = 64: mean −9 → −6 %, p90 −15.1 → −13.5 %, p99 −14 → −13 %; Llama-3.1-8B N = 64: −3 →
    −5 %, −9 → −10 %, −12 → −13 %. Looked at first (8000 requests, seed 0): the simulated wait, TTFT less
    the front end and the closed form's own prefill of the prompt, had mean 45 ms and p50 / p90 / p99 of
    15 / 146 / 442 ms, which an atom at zero and an exponential fit with ~31 % of requests waiting ~130 ms
    on average; the closed form had the same conditional wait (~134 ms), 23 % of requests waiting (the
    lane's busy share of iterations) and a mean of 31 ms. It is not short prompts stuck behind long ones:
    by prompt quartile the wait is 35, 37, 51 and 58 ms. Tried and dropped: the probability of landing in a
    mixed iteration (0.42 here) as the wait's probability and queue share: Qwen3-32B N = 64 went to +10 /
    +8 / +13 %, Llama-3.1-8B N = 64 to +16 / +14 / +16 %: the truth sits between that and the iteration
    share, and a blend would be a fit to the simulation.""",
    """- **Disaggregated fixed-length closed loops, what is left.** Llama-3.1-8B, whose decode pool limits
    before its prefill worker, keeps a few percent of spread in the simulation (N = 16: TTFT p90 48 ms
    against a constant 43 ms, −11 %); why its loop does not settle into one spacing was not examined. With lognormal lengths nothing locks, and the mean-value analysis with the machine-repair law
    of the wait matches the simulation (at N = 64 the p99 went from +42 % with an open queue's exponential
    tail to −8 %).""",
    """- **Unchunked closed loops: the wait of a shared prefill pass (2026-12-02; 50 → 51 groups).** Qwen3-32B
    at N = 64 had a TTFT p99 of +25.3 % (667 against 532 ms), p90 +7 %. The mean was right (the closed
    form's queue part 50 ms, the simulated wait, TTFT less the front end and the prompt's own prefill,
    60 ms), but it was given the tail of an exponential: 25 % of requests waiting 164 ms on average, wait
    p99 540 ms against the simulated 404. The mechanism the model already assumes says otherwise: a prompt
    shares its prefill-only pass with the Poisson number of others (mean λ / r_dec = 0.3 here) that
    returned during the same decode iteration, each adding its own prefill, so the wait is a compound
    Poisson sum of prompt prefills, whose tail is that of one prompt's prefill, plus the rest of a stall
    it may land in. `aggregated.unchunked_closed_wait_points` gives that law as points (the same mean;
    `queueing.compound_poisson_points`), and TTFT is the prompt's own time plus it. Qwen3-32B N = 64: mean
    −6 %, p90 +7 → −2 %, p99 +25 → −0.5 %; Llama-3.1-8B N = 64: p90 −4 → −10 %, p99 +8 → −6 %; the N = 4
    and 16 loops move by under 1 %, and the fixed-length loops (lock-step) and the serving benchmarks
    (posed as chunked) not at all (`tests/unit/test_shared_pass_wait.py`).""",
    """- **A prefill worker that batches prompts** (second sensitivity run) takes every waiting prompt into
    one pass. Since 2026-12-05 the closed form models it in open loops as a gated batch queue
    (`disaggregated.batched_prefill_wait`: the pass sizes as a Markov chain, a setup per pass read off the
    cost model; within 4 % of an event simulation of that queue alone): one prompt per pass, its M/G/1
    before, had the TTFT mean +27 % (Llama-3.1-8B) and +54 % (Qwen3-32B) at 0.9 of the one-per-pass
    capacity. Batching waits longer than first come first served where there is no setup to share (a
    prompt also waits for those that arrive after it during the pass in progress); what it saves is the
    setup of the passes a prompt rides once a queue has built up, and the capacity of passes of K prompts
    (Qwen3-32B 12.57 → 14.34 requests/s, so the run's loads, fractions of the closed form's saturation,
    moved up there). Closed loops (since 2026-12-05, later) take the same gated queue at their rate,
    thinned to the other N − 1 clients, with the closed queue's bounded law for the percentiles
    (`DisaggregatedModel._cycle_at`); until then they kept one prompt per pass, whose mean-value analysis
    had the TTFT mean +18 % at 128 clients of Llama-3.1-8B and +26 … +112 % at 64–96 of Qwen3-32B
    (probe of three 6000-request runs). The gated queue is an open one: a closed population waits less, and
    the run's Qwen3-32B loops are over-predicted by +19 % at 64 clients (86 % busy) and +28 % at 96 (98 %
    busy), within 6 % below; their p90 and p99 (the closed queue's bounded law) within 15 %.""",
    """- **Closed loops without a front-end time** (first sensitivity run): a request enters exactly at an
    iteration's end and waits for no residual iteration, so the closed form's residual term over-predicts
    their TTFT.""",
)


def readings_section() -> list[str]:
    lines = ["## Reading of the misses", ""]
    for paragraph in READINGS:
        lines.append(" ".join(paragraph.split()))
    lines.insert(3, "")
    return lines


def sensitivity_section(results: dict[str, list[Comparison]]) -> list[str]:
    lines = [
        "## Sensitivity runs",
        "",
        "### Closed loops without the front-end time",
        "",
        "The first worker's closed loops with `request_overhead_s = 0`: a client's next request enters the "
        "scheduler exactly at the end of the iteration that completed its previous one.",
    ]
    for members in by_scenario(results["no_front_end"]):
        s = members[0].case.scenario
        lines += ["", f"#### {s.label} · {s.mode} · {s.lengths}", "", *case_table(members)]
    lines += [
        "",
        "### Disaggregated prefill worker that batches prompts",
        "",
        "The simulated prefill worker takes every waiting prompt that fits its 8192-token budget (up to 256) "
        "into one pass, as vLLM does; the closed form models that worker as a gated batch queue "
        "(`disaggregated.batched_prefill_wait`; closed loops at their rate). The loads are the same fractions of "
        "the closed form's saturation rate, which the batching raises where the prefill pool limits, and "
        f"closed loops of {', '.join(map(str, BATCHING_CONCURRENCIES))} clients; the second worker's closed "
        f"loops of {', '.join(map(str, BATCHING_CONCURRENCIES_SECOND))} clients.",
        "",
        *case_table(results["batched_prefill"]),
        "",
        "### Admissions without a KV watermark",
        "",
        "The second worker's aggregated scenarios at ρ = 0.7 and 0.9, the simulated scheduler admitting "
        "requests up to a full KV cache (vLLM V1's default, `watermark=0.0`; the grid above keeps "
        f"{100 * KV_WATERMARK:g} % free, vLLM V0's). Preemption waits for a full cache either way. *at cap*: "
        "the share of time the batch is at its cap, the "
        "closed form's gamma tail (`batch.batch_cap_share`) and the simulation's share with a prompt kept "
        "out for want of KV (`SimulationResult.admission_blocked_share`).",
        "",
        "| case | preemptions | at cap cf / sim % |",
        "|---|---:|---:|",
        *[f"| {c.case.name} | {c.num_preemptions} | {100 * c.closed_form_cap_share:.2f} / "
          f"{100 * c.simulated_cap_share:.2f} |" for c in results["kv_watermark"]],
    ]
    for members in by_scenario(results["kv_watermark"]):
        s = members[0].case.scenario
        lines += ["", f"#### {s.label} · {s.mode} · {s.lengths}", "", *case_table(members)]
    sizes = " and ".join(f"{p} prefill + {d} decode workers" for p, d in POOL_SIZES)
    lines += _run_section(
        "Pools of several workers",
        f"The disaggregated scenarios with {sizes} (first and second worker; *N*P*M*D in the labels), at "
        f"{', '.join(f'{f:g}' for f in POOL_LOAD_FRACTIONS)} of the closed form's saturation rate (lognormal "
        f"lengths) and in closed loops of {', '.join(str(n) for n in POOL_CONCURRENCIES)} clients. The "
        "closed form splits the load evenly over the workers and runs one ITL law per decode worker (a "
        "sequence occupies one); the simulation routes each request whose KV arrived either to the decode "
        "worker with the fewest sequences that has room (*least loaded*) or to the next one in turn, "
        "blind to load, where it waits for room (*round robin*, `simulate(decode_routing=...)`).",
        results["pools"])
    lines += _run_section(
        "Short prompts under a large budget",
        "Both workers' chunked scenario with prompts and outputs of median 128 and p90 384 tokens "
        f"(lognormal) under a {SHORT_PROMPT_BUDGET}-token budget, at "
        f"{', '.join(f'{f:g}' for f in SHORT_PROMPT_LOAD_FRACTIONS)} of the closed form's saturation rate "
        f"and in closed loops of {', '.join(str(n) for n in SHORT_PROMPT_CONCURRENCIES)} clients: an "
        "iteration admits every waiting prompt its budget holds, dozens at a time. Until 2026-12-05 the "
        "closed form topped a prompt's last chunk up with one waiting prompt at most and queued the prompts "
        "one after the other (Kingman), which capped the lane at about two prompts per iteration (4-token "
        "prompts, 250 clients: 193 requests/s against the simulation's 415, TTFT 1068 against 54 ms) and "
        "put the TTFT p90 here at +64 to +209 % of the simulation's. Now the top-up takes the prompts that "
        "arrived during the chunk and the wait is the smaller of Kingman's and the bulk lane's "
        "(`aggregated._bulk_wait`).",
        results["short_prompts"])
    return lines


def _run_section(title: str, text: str, comparisons: Sequence[Comparison]) -> list[str]:
    """A sensitivity run's subsection: its description, how many statistics are within the grid's
    tolerance, and its per-scenario tables."""
    within = sum(c.within_tolerance(m, st) for c in comparisons for m in METRICS for st in STATISTICS)
    total = len(comparisons) * len(METRICS) * len(STATISTICS)
    lines = ["", f"### {title}", "",
             f"{text} **{within} of {total}** statistics within the tolerance of the grid."]
    for members in by_scenario(comparisons):
        s = members[0].case.scenario
        lines += ["", f"#### {s.label} · {s.mode} · {s.lengths}", "", *case_table(members)]
    return lines


def markdown(comparisons: Sequence[Comparison], sensitivity: dict[str, list[Comparison]], *,
             num_requests: int, seeds: Sequence[int]) -> str:
    summaries = summarize_groups(comparisons)
    engine = comparisons[0].case.scenario.engine
    scenarios = list(dict.fromkeys((c.case.scenario.label, c.case.scenario.mode) for c in comparisons))
    warmup = int(round(0.1 * num_requests))
    long_run = int(round(num_requests * ((1.0 - LONG_RUN_FROM) / 0.1) ** 2))
    command = COMMAND + ("" if (num_requests, len(seeds)) == (4000, 3) else
                         f" --requests {num_requests} --seeds {len(seeds)}")
    passed = sum(s.verdict == "PASS" for s in summaries)
    lines = [
        "# Closed form against the reference simulation",
        "",
        f"Generated by `{command}` (do not edit by hand). Issue 3, section 5: over a grid from light load "
        "to 90 % utilization, for aggregated (chunked, unchunked) and disaggregated serving and for Poisson "
        "and closed-loop arrivals, the closed-form (`planner.serving.evaluate`) mean and p90 of TTFT and ITL "
        "should stay within 15 % of the discrete-event simulation of the same scheduler "
        "(`planner.validation.simulator`), the p99 within 25 %. The grid and the comparison: "
        "`planner.validation.crosscheck`.",
        "",
        f"**{passed} of {len(summaries)}** mode × arrival × statistic groups PASS (every case within the "
        "tolerance).",
        "",
        "## Set-up",
        "",
        f"- Workers: {'; '.join(dict.fromkeys(label for label, _ in scenarios))}; bf16 weights and KV cache; "
        f"engine profile `{engine.id}`.",
        "- Modes: *aggregated_chunked*: one replica, chunked prefill, token budget 2048 (long prompts are "
        "split); *aggregated_unchunked*: one replica, prefill-only iterations, token budget 8192 (holds the "
        "longest prompt); *disaggregated*: one prefill and one decode worker of the same configuration, KV "
        "link `auto` (NVLink), the prefill worker running one prompt per pass (`max_batch_size = 1`: an "
        "M/G/c queue in the closed form; a worker that batches its prompts, a gated batch queue in the "
        "closed form's open loops, is a sensitivity run below). Decode batch cap 256.",
        "- Lengths: lognormal prompts (median 1000, p90 3000 tokens) and outputs (median 150, p90 450), as "
        "the closed form's 64 equal-mass points, which the simulation draws from; fixed 512-token prompts "
        "and 256-token outputs (closed loops only).",
        f"- Loads: Poisson at {', '.join(f'{f:.0%}' for f in POISSON_LOAD_FRACTIONS)} of the closed form's "
        "saturation rate (`AggregatedModel.saturation_rate_per_s`, "
        "`DisaggregatedModel.saturation_rate_per_s`) for lognormal lengths; closed loops of "
        f"{', '.join(str(n) for n in CLOSED_LOOP_CONCURRENCIES)} clients for both length laws.",
        "- **`closed_loop_coherence` = 1** for both sides (`dataclasses.replace` on the engine profile). It "
        "is the share of a fixed-length closed loop's requests that stay in lock-step groups, fitted on real "
        f"benchmarks whose jitter dissolves part of the phase locking (`{engine.id}`: "
        f"{find_engine(engine.id).closed_loop_coherence:g}); the simulation has no jitter, so its loops stay "
        "locked and 1 is the value that describes it. It has no effect with lognormal lengths.",
        f"- The engine's front-end time (`request_overhead_s` = {1e3 * engine.request_overhead_s:.1f} ms) is "
        "kept: both sides add it to every TTFT (which dilutes relative TTFT errors at light load), and in a "
        "closed loop it puts a client's next request at an arbitrary phase of the iteration in progress.",
        "- Disaggregated: the simulation is given the closed form's exposed KV-transfer time per prompt "
        "(`DisaggregatedModel.transfer_s`: hand-off, last layer, what the prefill cannot hide) instead of "
        "its default (the whole cache over the NIC), so that the queues are compared, not two link models.",
        f"- **KV watermark {100 * KV_WATERMARK:g} %**: the simulated scheduler admits a request only if that "
        "share of the KV cache stays free (vLLM V0's block manager, `watermark=0.01`, whose scheduling and "
        "recompute preemption it replays); the closed form's KV cap is where admissions stop. Without it "
        "(vLLM V1's default, a sensitivity run below) a request admitted into a nearly full cache is "
        "preempted as soon as the running ones grow, and recomputes.",
        f"- Simulation: {len(seeds)} independent replications (seeds {', '.join(map(str, seeds))}) of "
        f"{num_requests} requests each, the first {warmup} of each left out, pooled "
        f"({len(seeds) * (num_requests - warmup)} requests per case); above ρ = {LONG_RUN_FROM:g} the runs "
        f"grow as ((1 − {LONG_RUN_FROM:g}) / (1 − ρ))², to {long_run} requests at ρ = 0.9, because a queue's "
        "relaxation time grows as 1 / (1 − ρ)² (`crosscheck.run_length`); from ρ = "
        f"{TAIL_SEEDS_FROM:g} a case runs {TAIL_SEED_FACTOR}× the replications ({TAIL_SEED_FACTOR * len(seeds)}, "
        "`crosscheck.run_seeds`), because a p99 there is set by a few congestion episodes per run and three "
        "replications measure it no better than the tolerance it is judged against. Disaggregated "
        "Llama-3.1-8B at "
        "ρ = 0.9 (an M/G/1 prefill queue, whose mean wait the closed form has exactly): 4000 requests × 3 "
        "seeds gave a mean TTFT of 377 ms (replications 355–414) against the closed form's 311; 40000 × 6 "
        "gave 309 ms. The step-time memo "
        "(`CostModelStepTime`) is shared by all runs of one worker configuration.",
        "",
        "Verdicts per mode × arrival (median / worst |error| %):",
        "",
        *verdict_table(summaries),
        "",
        *summary_section(summaries),
        "",
        *worst_section(comparisons),
        "",
        *readings_section(),
        "",
        *scenarios_section(comparisons),
        "",
        *sensitivity_section(sensitivity),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="requests per replication (10 %% warm-up)")
    parser.add_argument("--seeds", type=int, default=3, help="independent replications per case")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    seeds = tuple(range(args.seeds))
    cases = main_cases()
    extra = sensitivity_cases()
    names = list(extra)
    flat = [c for name in names for c in extra[name]]
    results = run_all([*cases, *flat], num_requests=args.requests, seeds=seeds, jobs=args.jobs)
    comparisons, rest = results[:len(cases)], results[len(cases):]
    sensitivity: dict[str, list[Comparison]] = {}
    for name in names:
        sensitivity[name], rest = rest[:len(extra[name])], rest[len(extra[name]):]
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "accuracy_crosscheck.md").write_text(
        markdown(comparisons, sensitivity, num_requests=args.requests, seeds=seeds))
    groups = summarize_groups(comparisons)
    errors = [abs(c.error_fraction(m, st)) for c in comparisons for m in METRICS for st in STATISTICS]
    print(f"wrote {args.docs / 'accuracy_crosscheck.md'} in {time.perf_counter() - start:.0f} s: "
          f"{len(results)} cases ({len(cases)} in the grid), {sum(g.verdict == 'PASS' for g in groups)} of "
          f"{len(groups)} mode × arrival × statistic groups PASS; median |error| over the grid "
          f"{100 * np.median(errors):.1f} %")


if __name__ == "__main__":
    main()
