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
    LONG_RUN_FROM,
    METRICS,
    POISSON_LOAD_FRACTIONS,
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
    scenario_cases,
    summarize_groups,
)

DOCS = ROOT / "docs"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/serving_crosscheck.py"
ENGINE = "vllm"
METRIC_LABEL = {"ttft_s": "TTFT", "itl_s": "ITL"}
#: the sensitivity runs: closed loops of the first worker without the front-end time
NO_FRONT_END_CONCURRENCIES = (16, 64)
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
    scenario with a prefill worker that batches waiting prompts (vLLM's default ``max_num_seqs``)."""
    workers = default_workers(load_model_catalog(), load_catalog())[:1]
    engine = crosscheck_engine(find_engine(ENGINE), request_overhead_s=0.0)
    no_front_end = []
    for scenario in default_scenarios(workers, find_engine(ENGINE)):
        s = dataclasses.replace(scenario, engine=engine, label=f"{scenario.label} · no front end")
        no_front_end += [Case(scenario=s, point=p) for p in closed_loop_points(NO_FRONT_END_CONCURRENCIES)]
    batching = []
    for scenario in default_scenarios(workers, find_engine(ENGINE), modes=("disaggregated",)):
        if scenario.lengths != "lognormal":
            continue
        dep = scenario.deployment
        assert isinstance(dep, DisaggregatedDeployment)
        batched = dataclasses.replace(dep, prefill=dataclasses.replace(dep.prefill, max_batch_size=256))
        s = dataclasses.replace(scenario, deployment=batched, label=f"{scenario.label} · batched prefill")
        batching += [Case(scenario=s, point=p) for p in poisson_points(s, POISSON_LOAD_FRACTIONS)]
    return {"no_front_end": no_front_end, "batched_prefill": batching}


def _run_group(cases: Sequence[Case], num_requests: int, seeds: Sequence[int]
               ) -> tuple[list[Comparison], float]:
    start = time.perf_counter()
    memos = StepTimeMemos()
    out = [compare(c, num_requests=run_length(c, num_requests), seeds=seeds, memos=memos) for c in cases]
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
        "simulation's own noise. Loads: ρ = offered rate / the closed form's saturation rate; N = clients.",
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
    """Hand-written (in `scripts/serving_crosscheck.py`) from the runs that introduced this report; the
    tables above are regenerated, this reading is not: re-read it after changing `planner/serving/`.""",
    """- **Disaggregated closed loops near the prefill pool's saturation (N = 64): the closed form
    over-predicts TTFT.** Two causes. (1) `DisaggregatedModel.closed_loop_rate_per_s` solves
    `λ·E[e2e](λ) = N` by linear interpolation on a coarse geometric grid (48 points from 10⁻⁶ to 0.9 of
    saturation, 34 % apart) without the secant polish of the aggregated model. `N(λ)` is convex there, so
    the chord's root lies below the true one, and `evaluate._operating_rate` then reads
    `N/λ − E[e2e](λ)`, when above 1 % of E[e2e], as saturated closed-loop queueing and adds it to every
    TTFT with a waiting probability of 1. For Llama-3.1-8B, lognormal lengths, N = 64, it returns
    λ = 21.2/s against a root of 21.5/s and adds about 0.10 s of queue that is not there: at the root the
    closed form's mean TTFT would be about 153 ms, against 156 ms simulated. A bug of the closed form,
    reported and not fixed here. (2) At a prefill utilization of 0.95 (Qwen3-32B, N = 64) the finite
    population caps the queue (at most N − 1 requests wait, and the arrival rate falls as the queue grows),
    which Allen–Cunneen with the (N − 1)/N thinning does not capture.""",
    """- **Disaggregated decode batch at ρ ≥ 0.7.** `DisaggregatedModel._decode_curve` means to pair each
    batch B with τ_d(B + 1) (a request decodes with itself plus B others), but pairs
    `batch_grid[i − 1]` with `decode_table[i]`, the iteration time of the next point of a geometric grid
    (27 % apart): below the true τ_d(B + 1) at small batches, above it at large ones. For Llama-3.1-8B at
    ρ = 0.9 it gives a decode batch of 115 and an ITL mean of 17.1 ms; with τ_d(B + 1) interpolated the
    same Little's law gives 84.5 and 14.7 ms, and the simulation 86 and 14.8 ms (at ρ = 0.7: 64.4 against
    54.5, simulated 55.6). A bug of the closed form, reported and not fixed here.""",
    """- **Disaggregated fixed-length closed loops: the TTFT tail.** The closed form gives a closed loop's
    arrivals the squared coefficient of variation 1 − 1/N (many clients superpose towards Poisson) and
    the prefill wait an exponential tail. With fixed lengths every client's cycle is the same and the
    requests reach the prefill worker evenly spaced: the simulated TTFT is nearly constant, and the closed
    form's p90 and p99 carry a queue that does not form.""",
    """- **Fixed-length closed loops: the lock-step model has groups, the simulation one cohort.**
    `AggregatedModel.lockstep` gives each lock-step group (as many prompts as one iteration's budget holds)
    a TTFT of one iteration of its own. In the simulation the groups of a loop merge into one cohort.
    Unchunked, the groups prefilled in one burst of prefill-only iterations all start decoding in the
    iteration after it, so all N clients finish and return together and the k-th group waits k prefill
    iterations. Chunked, the groups finish one decode iteration apart, and the front-end time (45.5 ms,
    several decode iterations) brings them back while the first group's mixed iteration runs, where they
    queue together. TTFT is then spread over 1 … ⌈N/g⌉ group iterations, and the closed form
    under-predicts its mean by about 1 − 2/(⌈N/g⌉ + 1) of the prefill part. The same lock-step leaves the
    closed form's ITL untouched: it still puts one prefill interruption per request into the streams' gaps,
    while a cohort's prefill iterations run when none of its streams decodes. So the ITL p99 of small
    loops (N = 4, 16) lands on a mixed iteration in the closed form (its mixed share just above 1 %) and on
    a decode-only one in the simulation, and at N = 64 the ITL p90 does the same at 10 %.""",
    """- **Unchunked ITL at moderate and high load.** The closed form puts at most one prompt's
    prefill-only iteration into a stream's gap, with probability λ / r_dec. The simulation (as vLLM)
    prefills every waiting prompt that fits the budget in one prefill-only iteration, and runs such
    iterations back to back while prompts wait: fewer gaps are interrupted, by longer stalls. The ITL
    distribution has a knee (decode-only gaps of ~10–20 ms, stalled gaps of 30–200 ms): near ρ = 0.5 the
    stalled share is close to 10 % (12 % in the closed form, 8 % simulated for Llama-3.1-8B), and the p90
    jumps across the knee; at ρ ≥ 0.7 the simulation's p99 gap holds several prefills, and the closed
    form's p99 is short. Batched prefills also cost less per prompt, so at ρ = 0.9 the closed form's
    prefill share, decode batch and mean ITL run high.""",
    """- **Knees of the chunked ITL.** Chunked, a stream's gap is a decode-only iteration or a mixed one
    (3–5 × longer): the p90 near ρ = 0.5 and the p99 of small closed loops sit where the mixed share crosses
    10 % or 1 %, and a small error in that share moves them between the two modes.""",
    """- **Aggregated closed loops of lognormal lengths (N = 64) queue less than the closed form says.** A
    closed loop's next request is triggered by a completion, and completions come at iteration ends: while
    long mixed iterations run, fewer iterations end and fewer requests arrive, a negative feedback a Poisson
    stream lacks (disaggregated closed loops, whose decodes do not share iterations with prefills, match to
    a few percent below N = 64). Without a front-end time it is extreme: a request enters exactly at an
    iteration's end and waits for no residual iteration (first sensitivity run below).""",
    """- **A prefill worker that batches prompts** (second sensitivity run) drains a burst in fewer, larger
    passes: from ρ ≈ 0.7 its queue is shorter than the one-prompt-per-pass M/G/1 of the closed form, by a
    third or more at ρ = 0.9.""",
    """- **ρ = 0.9.** Near saturation the simulated queues are noisy (*spread*), and the replications share
    their seeds across the load points, so their realized load is the same ~1 % off the offered one at
    every ρ, ~10 % of queue at ρ = 0.9. For Qwen3-32B aggregated the simulation sits closer to its own
    saturation than the closed form to its: its prefill lane is busier (0.80–0.85 against 0.76 chunked),
    its decode batch larger and its iterations longer (mean ITL above the closed form's), a gap that feeds
    itself through B = λ·(E[O] − 1)·τ̄; KV preemptions appear, and the three replications' mean TTFT differ
    by a factor of about 2.5.""",
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
        "The closed form models one prompt per prefill pass (an M/G/c queue); here the simulated prefill "
        "worker takes every waiting prompt that fits its 8192-token budget (up to 256) into one pass, as "
        "vLLM does. The loads are the same fractions of the closed form's saturation rate.",
        "",
        *case_table(results["batched_prefill"]),
    ]
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
        "link `auto` (NVLink), the prefill worker running one prompt per pass (`max_batch_size = 1`, the "
        "queue the closed form models; the batching variant is a sensitivity run below). Decode batch cap "
        "256.",
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
        f"- Simulation: {len(seeds)} independent replications (seeds {', '.join(map(str, seeds))}) of "
        f"{num_requests} requests each, the first {warmup} of each left out, pooled "
        f"({len(seeds) * (num_requests - warmup)} requests per case); above ρ = {LONG_RUN_FROM:g} the runs "
        f"grow as ((1 − {LONG_RUN_FROM:g}) / (1 − ρ))², to {long_run} requests at ρ = 0.9, because a queue's "
        "relaxation time grows as 1 / (1 − ρ)² (`crosscheck.run_length`). Disaggregated Llama-3.1-8B at "
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
