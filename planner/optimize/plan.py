"""The whole decision: aggregated (chunked and unchunked) against disaggregated serving, over GPUs and
tensor-parallel degrees, for a GPU budget or a target rate, ranked by an objective.

For every (GPU, TP) the cost-model grids of all modes are computed in one batched call
(``mixed_step_latency_many``); then

- aggregated: each mode's best scheduler settings and per-replica SLO capacity ``λ*`` (the chunk-budget
  search of :mod:`optimize.chunked`, exhaustive over its budgets and batch limits); a budget of ``G`` GPUs
  holds ``⌊G/tp⌋`` replicas serving ``⌊G/tp⌋·λ*``; a target rate ``R`` needs ``⌈R/λ*⌉`` replicas;
- disaggregated: the pool-split search of :mod:`optimize.disaggregated` over every (GPU, TP) for each
  pool.

Configurations are ranked by the objective (``goodput_per_gpu``: the most goodput per GPU of the budget,
or the fewest GPUs for a rate; ``cost_per_million_tokens``: the lowest cost per million output tokens at
the operating rate; ``gpus_needed``: the fewest GPUs for the target rate). The top configurations are
evaluated by ``evaluate`` (their metrics are that evaluation's); the rest carry the search's figures.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.costs.passes import mixed_step_latency_many
from planner.costs.types import Parallelism
from planner.errors import InvalidInput, PlannerError
from planner.hardware import GpuSpec
from planner.optimize import capacity as C
from planner.optimize.chunked import (
    AggregatedOption,
    PreparedAggregated,
    capacity_options,
    prepare_aggregated,
)
from planner.optimize.common import Checkpoint, meets_slo, scaled_slo, tick, verified_evaluation
from planner.optimize.disaggregated import (
    DisaggregatedPlan,
    DisaggregatedSearch,
    PoolCandidate,
    plan_disaggregated,
    pool_requests,
)
from planner.serving.types import AggregatedDeployment, Evaluation, ServingProblem, Slo

Mode = Literal["aggregated_chunked", "aggregated_unchunked", "disaggregated"]
Objective = Literal["goodput_per_gpu", "cost_per_million_tokens", "gpus_needed"]
ALL_MODES: tuple[Mode, ...] = ("aggregated_chunked", "aggregated_unchunked", "disaggregated")
#: token budgets the whole plan searches for chunked prefill [tokens] (the chunk endpoint searches more)
PLAN_TOKEN_BUDGETS = (512, 1024, 2048, 4096, 8192)
PLAN_MAX_BATCH_SIZES = (16, 32, 64, 128, 256, 512)
#: without chunked prefill vLLM's budget is max(max_model_len, 2048)
UNCHUNKED_MIN_BUDGET = 2048
#: configurations verified by a full evaluation, and the most the plan evaluates to find them
NUM_VERIFIED = 2
MAX_VERIFY_ATTEMPTS = 6


@dataclass(frozen=True, kw_only=True)
class PlanSearch:
    problem: ServingProblem
    slo: Slo
    gpus: tuple[GpuSpec, ...]
    tensor_parallel: tuple[int, ...] = (1, 2, 4, 8)
    modes: tuple[Mode, ...] = ALL_MODES
    total_gpus: int | None = None
    target_rate_per_s: float | None = None
    objective: Objective = "goodput_per_gpu"
    arrival_cv: float = 1.0
    price_per_gpu_hour_usd: dict[str, float] | None = None
    token_budgets: tuple[int, ...] = PLAN_TOKEN_BUDGETS
    max_batch_sizes: tuple[int, ...] = PLAN_MAX_BATCH_SIZES
    #: called between the search's stages (see ``planner.optimize.common.Checkpoint``)
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class Configuration:
    """One ranked configuration. Aggregated ones fill ``gpu``, ``parallelism``, ``replicas``,
    ``token_budget``, ``max_batch_size``; disaggregated ones the ``prefill_*`` and ``decode_*`` fields."""

    mode: Mode
    num_gpus: int
    #: where it is evaluated (the budget's capacity, or the target rate), and its SLO capacity [requests/s]
    rate_per_s: float
    capacity_per_s: float
    goodput_per_gpu_per_s: float
    throughput_output_tokens_per_s_per_gpu: float
    #: 1 / mean ITL at the operating rate [tokens/s]
    output_tokens_per_s_per_user: float
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    binding_constraint: str
    gpu: str | None = None
    parallelism: Parallelism | None = None
    replicas: int | None = None
    token_budget: int | None = None
    max_batch_size: int | None = None
    prefill_gpu: str | None = None
    prefill_parallelism: Parallelism | None = None
    prefill_workers: int | None = None
    decode_gpu: str | None = None
    decode_parallelism: Parallelism | None = None
    decode_workers: int | None = None
    kv_link: str | None = None
    #: True when ``evaluate`` confirmed it meets the SLO at ``rate_per_s`` (then ``evaluation`` is set)
    verified: bool = False
    evaluation: Evaluation | None = None
    score: float = 0.0

    @property
    def label(self) -> str:
        if self.mode == "disaggregated":
            assert self.prefill_parallelism is not None and self.decode_parallelism is not None
            return (
                f"disaggregated {self.prefill_workers}× {self.prefill_gpu} tp{self.prefill_parallelism.tp} "
                f"prefill + {self.decode_workers}× {self.decode_gpu} tp{self.decode_parallelism.tp} decode"
            )
        assert self.parallelism is not None
        kind = "chunked" if self.mode == "aggregated_chunked" else "unchunked"
        budget = f", budget {self.token_budget}" if self.mode == "aggregated_chunked" else ""
        return f"aggregated {kind} {self.replicas}× {self.gpu} tp{self.parallelism.tp}{budget}"


@dataclass(frozen=True, kw_only=True)
class FrontierPoint:
    throughput_output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    mode: Mode
    label: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    status: Literal["optimal", "infeasible"]
    objective: Objective
    configurations: tuple[Configuration, ...]
    pareto_frontier: tuple[FrontierPoint, ...]
    recommendation: str
    reasons: tuple[str, ...]
    binding_constraints: tuple[str, ...]
    nearest_feasible_slo: Slo | None
    assumptions: tuple[str, ...]
    skipped: tuple[str, ...] = field(default_factory=tuple)


def _hourly(gpu: GpuSpec, prices: dict[str, float] | None) -> float | None:
    if prices and gpu.id in prices:
        return float(prices[gpu.id])
    return gpu.price_per_gpu_hour_usd


def _validate(search: PlanSearch) -> None:
    if search.slo.ttft_s is None and search.slo.itl_s is None:
        raise InvalidInput("give at least one of slo.ttft_s and slo.itl_s", field="slo")
    if search.total_gpus is None and search.target_rate_per_s is None:
        raise InvalidInput(
            "give total_gpus (the most goodput on that budget) or target_rate_per_s (the fewest "
            "GPUs or the lowest cost for that rate)",
            field="total_gpus",
        )
    if search.objective == "gpus_needed" and search.target_rate_per_s is None:
        raise InvalidInput("objective gpus_needed needs target_rate_per_s", field="objective")
    if not search.gpus:
        raise InvalidInput("give at least one candidate GPU", field="gpus")
    if not search.modes:
        raise InvalidInput("give at least one mode", field="modes")
    if search.objective == "cost_per_million_tokens":
        missing = [g.id for g in search.gpus if _hourly(g, search.price_per_gpu_hour_usd) is None]
        if missing:
            raise InvalidInput(
                f"objective cost_per_million_tokens needs a price for every candidate GPU; the catalog "
                f"has none for {', '.join(missing)}: give price_per_gpu_hour_usd",
                field="price_per_gpu_hour_usd",
            )


def plan(search: PlanSearch) -> Plan:
    """Rank configurations across modes, GPUs and TP degrees (see the module docstring)."""
    return _plan(search, find_nearest=True)


def _plan(search: PlanSearch, find_nearest: bool) -> Plan:
    _validate(search)
    problem, slo = search.problem, search.slo
    skipped: list[str] = []
    agg: list[
        tuple[GpuSpec, int, Literal["aggregated_chunked", "aggregated_unchunked"], PreparedAggregated]
    ] = []
    longest = math.ceil(problem.workload.input_tokens.max)
    for gpu in search.gpus:
        tick(search.checkpoint, f"grids of {gpu.id}")
        for tp in search.tensor_parallel:
            par = Parallelism(tp=tp)
            for mode in ("aggregated_chunked", "aggregated_unchunked"):
                if mode not in search.modes:
                    continue
                dep = AggregatedDeployment(
                    gpu=gpu,
                    parallelism=par,
                    replicas=1,
                    chunked_prefill=mode == "aggregated_chunked",
                    token_budget=max(longest, UNCHUNKED_MIN_BUDGET),
                )
                try:
                    prep = prepare_aggregated(
                        dataclasses.replace(problem, deployment=dep),
                        token_budgets=search.token_budgets,
                        max_batch_sizes=search.max_batch_sizes,
                        chunk_overhead=False,
                    )
                except PlannerError as exc:
                    if mode == "aggregated_chunked" or "aggregated_chunked" not in search.modes:
                        skipped.append(f"{gpu.id} tp{tp}: {exc.detail}")
                    continue
                agg.append((gpu, tp, mode, prep))  # type: ignore[arg-type]
    disagg_search = None
    disagg_requests = []
    if "disaggregated" in search.modes:
        cands = tuple(
            PoolCandidate(gpu=g, parallelism=Parallelism(tp=tp))
            for g in search.gpus
            for tp in search.tensor_parallel
        )
        disagg_search = DisaggregatedSearch(
            problem=problem,
            slo=slo,
            prefill_candidates=cands,
            decode_candidates=cands,
            total_gpus=search.total_gpus,
            target_rate_per_s=search.target_rate_per_s,
            arrival_cv=search.arrival_cv,
            price_per_gpu_hour_usd=search.price_per_gpu_hour_usd,
            checkpoint=search.checkpoint,
            minimize={
                "goodput_per_gpu": "gpus",
                "gpus_needed": "gpus",
                "cost_per_million_tokens": "cost_per_token",
            }[search.objective],  # type: ignore[arg-type]
        )
        disagg_requests = pool_requests(disagg_search)
    # one cost-model call per (GPU, TP) for every mode's grids
    tick(search.checkpoint, "cost model")
    agg_times, disagg_times = _batched(agg, disagg_requests)
    tick(search.checkpoint, "capacities")
    configs: list[Configuration] = []
    options: list[tuple[Configuration, AggregatedOption, int]] = []
    found = capacity_options([a[3] for a in agg], agg_times, slo, arrival_cv=search.arrival_cv)
    for (gpu, tp, mode, _), opt in zip(agg, found, strict=True):
        cfg = _aggregated_config(search, gpu, tp, mode, opt)
        if cfg is not None:
            configs.append(cfg)
            options.append((cfg, opt, tp))
        elif opt.token_budget is None:
            skipped.append(f"{mode} {gpu.id} tp{tp}: misses the SLO at any load ({opt.binding_constraint})")
    disagg_plan = None
    if disagg_search is not None:
        disagg_plan = plan_disaggregated(disagg_search, disagg_requests, disagg_times)
        if disagg_plan.status == "optimal":
            configs.append(_disaggregated_config(search, disagg_plan))
        else:
            skipped.append(f"disaggregated: {disagg_plan.message}")
    assumptions = _assumptions(search)
    if not configs:
        return _infeasible(search, agg, skipped, assumptions, find_nearest)
    ranked = sorted(configs, key=lambda c: -c.score)
    ranked = _verify_top(search, ranked, disagg_plan)
    frontier = _frontier(options, ranked)
    text, reasons = _recommend(search, ranked, options)
    return Plan(
        status="optimal",
        objective=search.objective,
        configurations=tuple(ranked),
        pareto_frontier=frontier,
        recommendation=text,
        reasons=tuple(reasons),
        binding_constraints=(),
        nearest_feasible_slo=None,
        assumptions=assumptions,
        skipped=tuple(skipped),
    )


def _batched(
    agg: list[tuple[GpuSpec, int, str, PreparedAggregated]], disagg_requests: list
) -> tuple[list[list[np.ndarray]], list[np.ndarray | None]]:
    groups: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    for a, (gpu, tp, _, prep) in enumerate(agg):
        for r in range(len(prep.requests)):
            groups.setdefault((gpu.id, tp), []).append(("agg", a, r))
    for d, req in enumerate(disagg_requests):
        if req.request is not None:
            groups.setdefault((req.candidate.gpu.id, req.candidate.parallelism.tp), []).append(("dis", d, 0))
    agg_times: list[list[np.ndarray]] = [[np.zeros(0)] * len(p.requests) for *_, p in agg]
    disagg_times: list[np.ndarray | None] = [None] * len(disagg_requests)
    for members in groups.values():
        kind, idx, _ = members[0]
        ctx = agg[idx][3].model.ctx if kind == "agg" else disagg_requests[idx].ctx
        reqs = [agg[i][3].requests[r] if k == "agg" else disagg_requests[i].request for k, i, r in members]
        got = mixed_step_latency_many(ctx, reqs)
        for (k, i, r), t in zip(members, got, strict=True):
            if k == "agg":
                agg_times[i][r] = t
            else:
                disagg_times[i] = t
    return agg_times, disagg_times


def _score(search: PlanSearch, rate: float, gpus: int, cost_per_hour: float | None, mean_out: float) -> float:
    """Larger is better."""
    if search.objective == "cost_per_million_tokens":
        if cost_per_hour is None or rate <= 0:
            return -np.inf
        return -cost_per_hour / (rate * mean_out * 3600.0 / 1e6)
    if search.target_rate_per_s is None:
        return rate / max(search.total_gpus or gpus, 1)  # goodput per GPU of the budget
    return -float(gpus) + 1e-9 * rate  # fewest GPUs, then the most headroom


def _aggregated_config(
    search: PlanSearch,
    gpu: GpuSpec,
    tp: int,
    mode: Literal["aggregated_chunked", "aggregated_unchunked"],
    opt: AggregatedOption,
) -> Configuration | None:
    lam = opt.capacity_per_replica_per_s
    if opt.token_budget is None or lam <= 0:
        return None
    if search.target_rate_per_s is None:
        replicas = int((search.total_gpus or 0) // tp)
        if replicas < 1:
            return None
        rate = replicas * lam
    else:
        replicas = max(1, math.ceil(search.target_rate_per_s / lam * (1.0 - 1e-12)))
        if search.total_gpus is not None and replicas * tp > search.total_gpus:
            return None
        rate = float(search.target_rate_per_s)
    gpus = replicas * tp
    mean_out = search.problem.workload.output_tokens.mean
    hourly = _hourly(gpu, search.price_per_gpu_hour_usd)
    cost = None if hourly is None else hourly * gpus
    point = next(p for p in opt.points if p.token_budget == opt.token_budget)
    per_user = 1.0 / point.mean_itl_s if point.mean_itl_s else 0.0
    return Configuration(
        mode=mode,
        num_gpus=gpus,
        rate_per_s=rate,
        capacity_per_s=replicas * lam,
        goodput_per_gpu_per_s=rate / gpus,
        throughput_output_tokens_per_s_per_gpu=rate * mean_out / gpus,
        output_tokens_per_s_per_user=per_user,
        cost_per_hour_usd=cost,
        cost_per_million_output_tokens_usd=None if cost is None else cost / (rate * mean_out * 3600.0 / 1e6),
        binding_constraint=opt.binding_constraint,
        gpu=gpu.id,
        parallelism=Parallelism(tp=tp),
        replicas=replicas,
        token_budget=opt.token_budget,
        max_batch_size=opt.max_batch_size,
        score=_score(search, rate, gpus, cost, mean_out),
    )


def _disaggregated_config(search: PlanSearch, p: DisaggregatedPlan) -> Configuration:
    assert p.prefill is not None and p.decode is not None
    mean_out = search.problem.workload.output_tokens.mean
    ev = p.evaluation
    per_user = ev.output_tokens_per_s_per_user if ev is not None else 0.0
    cost = p.cost_per_hour_usd
    return Configuration(
        mode="disaggregated",
        num_gpus=p.num_gpus,
        rate_per_s=p.rate_per_s,
        capacity_per_s=p.capacity_per_s,
        goodput_per_gpu_per_s=p.rate_per_s / p.num_gpus,
        throughput_output_tokens_per_s_per_gpu=p.rate_per_s * mean_out / p.num_gpus,
        output_tokens_per_s_per_user=per_user,
        cost_per_hour_usd=cost,
        cost_per_million_output_tokens_usd=None
        if cost is None
        else cost / (p.rate_per_s * mean_out * 3600.0 / 1e6),
        binding_constraint=f"{p.limiting_pool} pool",
        prefill_gpu=p.prefill.gpu,
        prefill_parallelism=p.prefill.parallelism,
        prefill_workers=p.prefill.workers,
        decode_gpu=p.decode.gpu,
        decode_parallelism=p.decode.parallelism,
        decode_workers=p.decode.workers,
        kv_link=p.kv_link,
        verified=ev is not None and meets_slo(ev, search.slo),
        evaluation=ev,
        score=_score(search, p.rate_per_s, p.num_gpus, cost, mean_out),
    )


def _verify_top(
    search: PlanSearch, ranked: list[Configuration], disagg_plan: DisaggregatedPlan | None
) -> list[Configuration]:
    """Evaluate the leading aggregated configurations (the disaggregated one is evaluated by its search)."""
    out = []
    failed: set[int] = set()
    attempts = passed = 0
    for cfg in ranked:
        if (passed < NUM_VERIFIED and attempts < MAX_VERIFY_ATTEMPTS and cfg.mode != "disaggregated"
                and cfg.evaluation is None):
            attempts += 1
            tick(search.checkpoint, "verification")
            assert cfg.gpu is not None and cfg.replicas is not None and cfg.parallelism is not None
            gpu = next(g for g in search.gpus if g.id == cfg.gpu)
            dep = AggregatedDeployment(
                gpu=gpu,
                parallelism=cfg.parallelism,
                replicas=cfg.replicas,
                max_batch_size=cfg.max_batch_size or 256,
                token_budget=cfg.token_budget or 8192,
                chunked_prefill=cfg.mode == "aggregated_chunked",
            )
            ev, rate, ok = verified_evaluation(
                dataclasses.replace(search.problem, deployment=dep),
                cfg.rate_per_s,
                search.arrival_cv,
                search.slo,
                backoff=search.target_rate_per_s is None,
            )
            mean_out = search.problem.workload.output_tokens.mean
            cfg = dataclasses.replace(
                cfg,
                rate_per_s=rate,
                goodput_per_gpu_per_s=rate / cfg.num_gpus,
                throughput_output_tokens_per_s_per_gpu=rate * mean_out / cfg.num_gpus,
                output_tokens_per_s_per_user=ev.output_tokens_per_s_per_user,
                cost_per_million_output_tokens_usd=None
                if cfg.cost_per_hour_usd is None
                else cfg.cost_per_hour_usd / (rate * mean_out * 3600.0 / 1e6),
                verified=ok,
                evaluation=ev,
                score=_score(search, rate, cfg.num_gpus, cfg.cost_per_hour_usd, mean_out),
            )
            if ok:
                passed += 1
            else:
                failed.add(len(out))
        elif cfg.mode == "disaggregated" and cfg.verified:
            passed += 1
        out.append(cfg)
    # a verified back-off can reorder the head; a configuration the full evaluation refuted goes last (the
    # plan never recommends one); unverified ones keep their search order behind equals
    order = sorted(range(len(out)), key=lambda k: (k in failed, -out[k].score))
    return [out[k] for k in order]


def _frontier(
    options: list[tuple[Configuration, AggregatedOption, int]], ranked: list[Configuration]
) -> tuple[FrontierPoint, ...]:
    """Non-dominated (throughput per GPU, tokens/s per user) points: every aggregated configuration's
    SLO-meeting load curve (per replica, so per GPU = / tp) and each configuration's operating point."""
    pts: list[FrontierPoint] = []
    for cfg, opt, tp in options:
        for thr, itl in opt.frontier:
            if itl > 0 and thr > 0:
                pts.append(
                    FrontierPoint(
                        throughput_output_tokens_per_s_per_gpu=thr / tp,
                        output_tokens_per_s_per_user=1.0 / itl,
                        mode=cfg.mode,
                        label=cfg.label.replace(f"{cfg.replicas}× ", ""),
                    )
                )
    for cfg in ranked:
        if cfg.output_tokens_per_s_per_user > 0:
            pts.append(
                FrontierPoint(
                    throughput_output_tokens_per_s_per_gpu=cfg.throughput_output_tokens_per_s_per_gpu,
                    output_tokens_per_s_per_user=cfg.output_tokens_per_s_per_user,
                    mode=cfg.mode,
                    label=cfg.label,
                )
            )
    if not pts:
        return ()
    x = np.array([p.throughput_output_tokens_per_s_per_gpu for p in pts])
    y = np.array([p.output_tokens_per_s_per_user for p in pts])
    order = np.lexsort((-y, -x))  # by throughput descending
    keep, best_y = [], -np.inf
    for k in order:
        if y[k] > best_y * (1.0 + 1e-9):
            keep.append(k)
            best_y = y[k]
    return tuple(pts[k] for k in sorted(keep, key=lambda k: x[k]))


def _mode_name(mode: Mode) -> str:
    return {
        "aggregated_chunked": "aggregated serving with chunked prefill",
        "aggregated_unchunked": "aggregated serving without chunked prefill",
        "disaggregated": "disaggregated serving",
    }[mode]


def _why(cfg: Configuration, search: PlanSearch) -> str:
    slo = search.slo
    b = cfg.binding_constraint
    ev = cfg.evaluation
    if cfg.mode == "disaggregated":
        text = f"the {b} limits it"
        if ev is not None and ev.ttft_s.mean > 0:
            share = ev.ttft_breakdown_s.kv_transfer / ev.ttft_s.mean
            text += f"; KV transfer adds {100 * share:.0f} % to its mean TTFT over {cfg.kv_link}"
        return text
    if b in ("itl", "ttft"):
        target = slo.itl_s if b == "itl" else slo.ttft_s
        pct = slo.itl_percentile if b == "itl" else slo.ttft_percentile
        what = "prefill work interleaved with the decodes" if b == "itl" else "queueing for the prefill lane"
        return f"its {b.upper()} p{pct:g} target ({target:g} s) binds first: {what} at higher load"
    return f"it is limited by {b.replace('_', ' ')}"


def _recommend(
    search: PlanSearch,
    ranked: list[Configuration],
    options: list[tuple[Configuration, AggregatedOption, int]],
) -> tuple[str, list[str]]:
    best = ranked[0]
    by_mode: dict[Mode, Configuration] = {}
    for cfg in ranked:
        by_mode.setdefault(cfg.mode, cfg)
    unit = {
        "goodput_per_gpu": "goodput per GPU",
        "cost_per_million_tokens": "cost per million output tokens",
        "gpus_needed": "GPUs needed",
    }[search.objective]
    if search.target_rate_per_s is not None and search.objective == "goodput_per_gpu":
        unit = "GPUs needed"

    def value(c: Configuration) -> float:
        if unit == "cost per million output tokens":
            return c.cost_per_million_output_tokens_usd or np.inf
        if unit == "GPUs needed":
            return float(c.num_gpus)
        return c.goodput_per_gpu_per_s

    text = f"{best.label}: {_mode_name(best.mode)} ranks first on {unit}"
    others = [c for m, c in by_mode.items() if m != best.mode]
    if others:
        runner = max(others, key=lambda c: c.score)
        vb, vr = value(best), value(runner)
        factor = (vb / vr if unit == "goodput per GPU" else vr / vb) if vb > 0 and vr > 0 else float("inf")
        text = (
            f"{_mode_name(best.mode).capitalize()} wins by {factor:.2f}× on {unit} over "
            f"{_mode_name(runner.mode)}: {best.label}"
        )
    reasons = [f"{best.label}: {_why(best, search)}"]
    for cfg in others:
        reasons.append(f"best {_mode_name(cfg.mode)} ({cfg.label}): {_why(cfg, search)}")
    missing = [m for m in search.modes if m not in by_mode]
    for m in missing:
        reasons.append(f"{_mode_name(m)}: no configuration meets the SLO within the limits")
    text += "; " + reasons[0].split(": ", 1)[1] if reasons else ""
    return text, reasons


def _assumptions(search: PlanSearch) -> tuple[str, ...]:
    eng = search.problem.engine.id
    out = [
        f"engine {eng}; scheduler limits searched: token budgets {list(search.token_budgets)} (chunked), "
        f"max(longest prompt, {UNCHUNKED_MIN_BUDGET}) unchunked, batch limits {list(search.max_batch_sizes)}",
        f"tensor-parallel degrees {list(search.tensor_parallel)}; pipeline, data and expert parallelism 1",
        "replicas split the load evenly; disaggregated KV transfer over NVLink inside one scale-up domain of one "
        "GPU type, else the RDMA NIC",
        f"arrivals open-loop ({'Poisson' if search.arrival_cv == 1 else f'gamma, cv {search.arrival_cv:g}'})",
        f"the top {NUM_VERIFIED} aggregated configurations (and the disaggregated one) are checked by a full "
        "evaluation; the others carry the search's figures",
    ]
    if search.objective == "cost_per_million_tokens" or any(
        g.price_per_gpu_hour_usd is not None for g in search.gpus
    ):
        out.append("prices: USD per GPU-hour from the request, else the catalog's on-demand figures")
    return tuple(out)


def _infeasible(
    search: PlanSearch,
    agg: list[tuple[GpuSpec, int, str, PreparedAggregated]],
    skipped: list[str],
    assumptions: tuple[str, ...],
    find_nearest: bool = True,
) -> Plan:
    slo = search.slo
    bindings: list[str] = []
    near: Slo | None = None
    # the lightest-load TTFT and ITL percentiles of each aggregated configuration: the SLO pair nearest to the
    # asked one that some configuration meets at light load is the asked pair scaled by the smallest factor
    best_factor = np.inf
    for _, _, _, prep in agg:
        model = prep.model
        if not hasattr(model, "tables"):
            continue
        st = model.states_at_batch(np.array([1e-3]), np.array([0]))
        ttft, itl = C.aggregated_quantiles(model, st, slo)
        f = 1.0
        if slo.ttft_s is not None:
            f = max(f, float(ttft[0]) / slo.ttft_s)
        if slo.itl_s is not None:
            f = max(f, float(itl[0]) / slo.itl_s)
        best_factor = min(best_factor, f)
    if np.isfinite(best_factor) and best_factor > 1.0:
        bindings.append("the SLO is missed even at light load by every configuration searched")
        if find_nearest:
            # confirmed by planning again with it (the targets grow by 10 % until a plan holds)
            for k in range(1, 6):
                candidate = scaled_slo(slo, best_factor * 1.1**k)
                if _plan(dataclasses.replace(search, slo=candidate), find_nearest=False).status == "optimal":
                    near = candidate
                    break
    elif search.total_gpus is not None:
        bindings.append(
            f"the GPU budget ({search.total_gpus}) is too small for the SLO"
            + ("" if search.target_rate_per_s is None else f" at {search.target_rate_per_s:g} requests/s")
        )
    else:
        bindings.append("no configuration searched meets the SLO")
    msg = "no configuration meets the SLO: " + "; ".join(bindings)
    if near is not None:
        msg += (
            f"; the nearest SLO a configuration meets (confirmed by planning with it) is ttft_s={near.ttft_s}, "
            f"itl_s={near.itl_s}"
        )
    return Plan(
        status="infeasible",
        objective=search.objective,
        configurations=(),
        pareto_frontier=(),
        recommendation=msg,
        reasons=tuple(bindings),
        binding_constraints=tuple(bindings),
        nearest_feasible_slo=near,
        assumptions=assumptions,
        skipped=tuple(skipped),
    )
