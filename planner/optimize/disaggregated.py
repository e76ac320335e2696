"""The pool-ratio search of disaggregated serving: how many prefill and decode workers, of which GPU and
parallelism each (the pools may differ, as Splitwise proposes), for a GPU budget or a target rate.

Exhaustive over (prefill configuration, decode configuration, prefill workers, decode workers): each
pool's SLO capacity is computed for every worker count in one vectorized pass (:mod:`optimize.pools`);
a cell serves ``min(prefill capacity, decode capacity)`` (the slower pool limits) on ``c·g_p + D·g_d``
GPUs, with its KV link chosen as ``evaluate`` chooses it. With a budget the best cell serves the most
within it (ties: fewer GPUs, then lower cost); with a target rate it is the cheapest (GPUs, or cost when
every candidate has a price) that serves the rate (ties: more headroom). The chosen cell is then checked
by ``evaluate`` and its metrics are that evaluation's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.costs.memory import memory_plan
from planner.costs.passes import mixed_step_latency_many
from planner.costs.types import CostContext, MemoryPlan, Parallelism
from planner.errors import InvalidInput, PlannerError
from planner.hardware import GpuSpec
from planner.optimize.common import (
    TIE_FRACTION,
    Checkpoint,
    confirmed_nearest_slo,
    tick,
    verified_evaluation,
)
from planner.optimize.pools import DecodeVariant, PrefillVariant, decode_capacity, prefill_capacity
from planner.serving.disaggregated import (
    NUM_BATCH_POINTS,
    SETUP_PASS_SIZES,
    choose_link,
    kv_transfer_s,
    pass_prompt_cap,
    setup_from_passes,
)
from planner.serving.types import DisaggregatedDeployment, Evaluation, KvLink, PoolSpec, ServingProblem, Slo
from planner.units import DTYPE_BYTES

#: most prompt-length points the search costs (a lognormal's 64 as evaluate costs them; longer sample lists
#: are coarsened, and the chosen cell is evaluated on the full distribution)
SEARCH_PROMPT_POINTS = 64
Objective = Literal["max_goodput", "min_gpus", "min_cost", "min_cost_per_token"]
#: most workers per pool searched when no GPU budget bounds them
DEFAULT_MAX_WORKERS = 64


@dataclass(frozen=True, kw_only=True)
class PoolCandidate:
    gpu: GpuSpec
    parallelism: Parallelism = Parallelism()
    max_batch_size: int = 256


@dataclass(frozen=True, kw_only=True)
class DisaggregatedSearch:
    """``problem`` gives the model, engine, dtypes and workload (its deployment is ignored)."""

    problem: ServingProblem
    slo: Slo
    prefill_candidates: tuple[PoolCandidate, ...]
    decode_candidates: tuple[PoolCandidate, ...]
    total_gpus: int | None = None
    target_rate_per_s: float | None = None
    arrival_cv: float = 1.0
    kv_link: KvLink = "auto"
    max_workers_per_pool: int = DEFAULT_MAX_WORKERS
    #: USD per GPU-hour by GPU id (overrides the catalog's price)
    price_per_gpu_hour_usd: dict[str, float] | None = None
    #: what a target rate minimizes: "auto" (cost when every candidate has a price, else GPUs), "gpus", "cost",
    #: or "cost_per_token" (cost per served request, also with a budget)
    minimize: Literal["auto", "gpus", "cost", "cost_per_token"] = "auto"
    #: called between the search's stages (see ``planner.optimize.common.Checkpoint``)
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class PoolChoice:
    gpu: str
    parallelism: Parallelism
    workers: int
    max_batch_size: int
    #: the pool's SLO capacity at this size [requests/s] and its busy fraction at the operating rate
    capacity_per_s: float
    utilization: float


@dataclass(frozen=True, kw_only=True)
class DisaggregatedPlan:
    status: Literal["optimal", "infeasible"]
    objective: Objective
    prefill: PoolChoice | None
    decode: PoolChoice | None
    kv_link: str | None
    num_gpus: int
    #: the rate the chosen cell is evaluated at [requests/s]; its SLO capacity
    rate_per_s: float
    capacity_per_s: float
    goodput_per_gpu_per_s: float
    cost_per_hour_usd: float | None
    #: "prefill", "decode" or "kv_link": the pool that runs out first
    limiting_pool: str
    evaluation: Evaluation | None
    message: str
    binding_constraints: tuple[str, ...]
    nearest_feasible_slo: Slo | None
    assumptions: tuple[str, ...]
    #: the next-best cells (prefill gpu, tp, workers, decode gpu, tp, workers, capacity, GPUs)
    alternatives: tuple[dict[str, object], ...] = ()


@dataclass(frozen=True, kw_only=True)
class _Pools:
    pre: list[PoolCandidate]
    dec: list[PoolCandidate]
    pre_variants: list[PrefillVariant]
    #: variant index per (prefill, decode, link 0 = nvlink / 1 = rdma or the requested link)
    variant_of: np.ndarray
    links: tuple[str, ...]
    dec_variants: list[DecodeVariant]
    skipped: tuple[str, ...]


def _ctx(problem: ServingProblem, cand: PoolCandidate) -> CostContext:
    return CostContext(
        model=problem.model,
        gpu=cand.gpu,
        engine=problem.engine,
        weight_dtype=problem.weight_dtype,
        kv_dtype=problem.kv_dtype,
        parallelism=cand.parallelism,
    )


def _pool_spec(cand: PoolCandidate, workers: int) -> PoolSpec:
    return PoolSpec(
        gpu=cand.gpu, parallelism=cand.parallelism, workers=workers, max_batch_size=cand.max_batch_size
    )


@dataclass(frozen=True, kw_only=True)
class PoolRequest:
    """One pool candidate's cost-model grid (``request`` for ``mixed_step_latency_many`` on ``ctx``), or the
    reason it cannot serve (``skip``)."""

    role: Literal["prefill", "decode"]
    candidate: PoolCandidate
    ctx: CostContext
    request: dict[str, np.ndarray | float] | None
    #: a prefill worker that batches its prompts: the pass sizes n whose passes of n mean prompts follow
    #: the prompt points in ``request`` (``serving.disaggregated.setup_from_passes``); empty otherwise
    pass_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    skip: str | None = None
    batch_grid: np.ndarray | None = None
    batch_cap: float = 0.0


def pool_requests(search: DisaggregatedSearch) -> list[PoolRequest]:
    """The grids every pool candidate needs: each prompt point's prefill pass (prefill pools), the decode
    step over a batch grid up to the batch cap (decode pools); candidates that do not fit are skipped."""
    problem = search.problem
    w = problem.workload
    inp = w.input_tokens.coarsened(SEARCH_PROMPT_POINTS)
    hit = w.prefix_cache_hit_fraction
    max_context = int(w.input_tokens.max + w.output_tokens.max)
    decode_context = w.input_tokens.mean + w.output_tokens.second_moment / (
        2.0 * max(w.output_tokens.mean, 1.0)
    )
    mean_in = float(np.dot(inp.weights, inp.values))
    mean_compute = float(np.dot(inp.weights, np.maximum(np.round(inp.values * (1.0 - hit)), 1.0)))
    out: list[PoolRequest] = []
    roles: tuple[tuple[Literal["prefill", "decode"], tuple[PoolCandidate, ...]], ...] = (
        ("prefill", search.prefill_candidates),
        ("decode", search.decode_candidates),
    )
    # a candidate of both pools (the whole plan's) is one worker layout: its memory plan is computed once
    layouts: dict[tuple[int, Parallelism], tuple[CostContext, MemoryPlan | PlannerError]] = {}
    for role, cands in roles:
        for cand in cands:
            key = (id(cand.gpu), cand.parallelism)
            if key not in layouts:
                ctx = _ctx(problem, cand)
                try:
                    layouts[key] = (ctx, memory_plan(ctx, max_context_tokens=max(max_context, 1)))
                except PlannerError as exc:
                    layouts[key] = (ctx, exc)
            ctx, plan = layouts[key]
            name = f"{role} {cand.gpu.id} tp{cand.parallelism.tp}"
            if isinstance(plan, PlannerError):
                out.append(
                    PoolRequest(
                        role=role, candidate=cand, ctx=ctx, request=None, skip=f"{name}: {plan.detail}"
                    )
                )
                continue
            need = w.input_tokens.max + 1 if role == "prefill" else max_context
            if not plan.fits or plan.kv_capacity_tokens < need:
                what = "the longest prompt's" if role == "prefill" else "one sequence's"
                out.append(
                    PoolRequest(
                        role=role,
                        candidate=cand,
                        ctx=ctx,
                        request=None,
                        skip=f"{name}: the model or {what} KV cache does not fit",
                    )
                )
                continue
            if role == "prefill":
                # the prompt points' passes, then (open loops, a worker that batches) passes of n mean
                # prompts, whose savings give its setup (as ``DisaggregatedModel`` reads it)
                k_cap = pass_prompt_cap(_pool_spec(cand, 1), mean_compute)
                sizes = (SETUP_PASS_SIZES[SETUP_PASS_SIZES <= k_cap]
                         if w.arrival.kind != "closed_loop" and k_cap >= 2.0 else np.zeros(0))
                cached_mean = float(round(mean_in * hit))
                req: dict[str, np.ndarray | float] = dict(
                    decode_batch=0.0,
                    decode_context_tokens=0.0,
                    prefill_tokens=np.concatenate([inp.values, sizes * (mean_in - cached_mean)]),
                    prefill_cached_tokens=np.concatenate([np.round(inp.values * hit),
                                                          np.full(sizes.size, cached_mean)]),
                    prefill_sequences=np.concatenate([np.ones(inp.values.size), sizes]),
                )
                out.append(PoolRequest(role=role, candidate=cand, ctx=ctx, request=req, pass_sizes=sizes))
            else:
                cap = float(min(cand.max_batch_size, plan.kv_capacity_tokens / max(decode_context, 1.0)))
                grid = np.unique(np.concatenate([[1.0], np.geomspace(1.0, max(cap, 1.0), NUM_BATCH_POINTS)]))
                req = dict(decode_batch=grid, decode_context_tokens=decode_context, prefill_tokens=0.0)
                out.append(
                    PoolRequest(
                        role=role, candidate=cand, ctx=ctx, request=req, batch_grid=grid, batch_cap=cap
                    )
                )
    return out


def batched_times(requests: list[PoolRequest]) -> list[np.ndarray | None]:
    """Cost-model times of every request, one ``mixed_step_latency_many`` call per GPU and parallelism."""
    groups: dict[tuple[str, Parallelism], list[int]] = {}
    for k, r in enumerate(requests):
        if r.request is not None:
            groups.setdefault((r.candidate.gpu.id, r.candidate.parallelism), []).append(k)
    times: list[np.ndarray | None] = [None] * len(requests)
    for idx in groups.values():
        got = mixed_step_latency_many(requests[idx[0]].ctx, [requests[k].request for k in idx])  # type: ignore[misc]
        for k, t in zip(idx, got, strict=True):
            times[k] = t
    return times


def _prepare(
    search: DisaggregatedSearch,
    requests: list[PoolRequest] | None = None,
    times: list[np.ndarray | None] | None = None,
) -> _Pools:
    """The pools' search data; ``requests`` and their cost-model ``times`` may come from the caller."""
    problem = search.problem
    inp = problem.workload.input_tokens.coarsened(SEARCH_PROMPT_POINTS)
    if requests is None:
        requests = pool_requests(search)
    if times is None:
        times = batched_times(requests)
    skipped = [r.skip for r in requests if r.skip is not None]
    pre, pre_s, dec, dec_variants = [], [], [], []
    setups: list[tuple[float | None, float]] = []
    hit = problem.workload.prefix_cache_hit_fraction
    mean_compute = float(np.dot(inp.weights, np.maximum(np.round(inp.values * (1.0 - hit)), 1.0)))
    ni = inp.values.size
    for r, t in zip(requests, times, strict=True):
        if r.request is None or t is None:
            continue
        if r.role == "prefill":
            pre.append(r.candidate)
            t_all = np.broadcast_to(t, (ni + r.pass_sizes.size,)).astype(float)
            pre_s.append(t_all[:ni])
            # a worker that batches its waiting prompts (open loops), as evaluate models it
            mean_pre = float(np.dot(inp.weights, pre_s[-1]))
            setups.append((setup_from_passes(r.pass_sizes, t_all[ni:], mean_pre),
                           pass_prompt_cap(_pool_spec(r.candidate, 1), mean_compute))
                          if r.pass_sizes.size and mean_pre > 0 else (None, 1.0))
        else:
            assert r.batch_grid is not None
            dec.append(r.candidate)
            dec_variants.append(
                DecodeVariant(
                    batch_grid=r.batch_grid,
                    step_s=np.broadcast_to(t, r.batch_grid.shape).astype(float),
                    batch_cap=r.batch_cap,
                )
            )
    links = ("nvlink", "rdma") if search.kv_link == "auto" else (search.kv_link,)
    kv_per_token = problem.model.kv_cache_bytes_per_token(DTYPE_BYTES[problem.kv_dtype])
    kv_bytes = inp.values * kv_per_token
    variants: list[PrefillVariant] = []
    seen: dict[tuple[int, float], int] = {}
    variant_of = np.zeros((len(pre), len(dec), len(links)), dtype=np.intp)
    # one worker of each candidate, as the link is chosen for a pair of them
    pre_one, dec_one = [_pool_spec(pc, 1) for pc in pre], [_pool_spec(dc, 1) for dc in dec]
    for i, pc in enumerate(pre):
        for j, dc in enumerate(dec):
            for li, link in enumerate(links):
                if len(links) == 2 and li == 0 and pc.gpu.id != dc.gpu.id:
                    continue  # "auto" never joins two GPU types by NVLink: the pair's NVLink slot is never read
                bw = choose_link(
                    DisaggregatedDeployment(prefill=pre_one[i], decode=dec_one[j], kv_link=link)  # type: ignore[arg-type]
                ).bandwidth_bytes_per_s
                key = (i, round(bw, -3))
                if key not in seen:
                    full, exposed = kv_transfer_s(kv_bytes, bw, pre_s[i], problem.model.num_layers)
                    seen[key] = len(variants)
                    variants.append(
                        PrefillVariant(
                            prefill_s=pre_s[i],
                            transfer_full_s=full,
                            transfer_exposed_s=exposed,
                            gpus_per_worker=pc.parallelism.num_gpus,
                            pass_setup_s=setups[i][0],
                            pass_prompts=setups[i][1],
                        )
                    )
                variant_of[i, j, li] = seen[key]
            if len(links) == 2 and pc.gpu.id != dc.gpu.id:
                variant_of[i, j, 0] = variant_of[i, j, 1]
    return _Pools(
        pre=pre,
        dec=dec,
        pre_variants=variants,
        variant_of=variant_of,
        links=links,
        dec_variants=dec_variants,
        skipped=tuple(skipped),
    )


@dataclass(frozen=True, kw_only=True)
class _Cells:
    """Every (prefill cfg, decode cfg, prefill workers, decode workers) cell, flattened."""

    i: np.ndarray
    j: np.ndarray
    c: np.ndarray
    d: np.ndarray
    link: np.ndarray
    capacity: np.ndarray
    prefill_capacity: np.ndarray
    decode_capacity: np.ndarray
    gpus: np.ndarray
    cost: np.ndarray


def _cells(search: DisaggregatedSearch, pools: _Pools, slo: Slo) -> _Cells:
    problem = search.problem
    w = problem.workload
    inp = w.input_tokens.coarsened(SEARCH_PROMPT_POINTS)
    limit = search.max_workers_per_pool
    if search.total_gpus is not None:
        limit = min(limit, search.total_gpus)
    workers = np.arange(1, max(limit, 1) + 1)
    max_pre = max_dec = None
    if search.total_gpus is not None:
        # a decode pool can use what the budget leaves after the smallest prefill worker
        p_min = min(p.parallelism.num_gpus for p in pools.pre)
        max_dec = np.array([(search.total_gpus - p_min) // d.parallelism.num_gpus for d in pools.dec])
        # a prefill pool can use what the budget leaves after the smallest decode worker
        g_min = min(d.parallelism.num_gpus for d in pools.dec)
        max_pre = np.array([(search.total_gpus - g_min) // v.gpus_per_worker for v in pools.pre_variants])
    cap_pre = prefill_capacity(
        pools.pre_variants,
        inp.weights,
        workers,
        overhead_s=problem.engine.request_overhead_s,
        ttft_s=slo.ttft_s,
        ttft_percentile=slo.ttft_percentile,
        arrival_scv=search.arrival_cv**2,
        max_workers=max_pre,
    )  # (nv, nw)
    cap_dec, _ = decode_capacity(
        pools.dec_variants,
        workers,
        mean_decode_steps=max(w.output_tokens.mean - 1.0, 0.0),
        itl_s=slo.itl_s,
        itl_percentile=slo.itl_percentile,
        max_workers=max_dec,
    )  # (nd, nw)
    npre, ndec, nw = len(pools.pre), len(pools.dec), workers.size
    gp = np.array([p.parallelism.num_gpus for p in pools.pre])
    gd = np.array([d.parallelism.num_gpus for d in pools.dec])
    same = np.array([[p.gpu.id == q.gpu.id for q in pools.dec] for p in pools.pre])
    domain = np.array([p.gpu.scale_up_domain_size for p in pools.pre])
    auto = len(pools.links) == 2
    if search.target_rate_per_s is None:
        # every (c, d) that fits the budget, grouped by the pools' GPUs per worker
        budget = int(search.total_gpus or 0)
        parts = []
        pi, pj = np.meshgrid(np.arange(npre), np.arange(ndec), indexing="ij")
        pi, pj = pi.ravel(), pj.ravel()
        # every (prefill workers, decode workers) pair, by index into ``workers``
        c_all, d_all = (x.ravel() for x in np.meshgrid(np.arange(nw), np.arange(nw), indexing="ij"))
        wc, wd = workers[c_all], workers[d_all]
        for g_p, g_d in {(int(gp[x]), int(gd[y])) for x, y in zip(pi, pj, strict=True)}:
            sel = (gp[pi] == g_p) & (gd[pj] == g_d)
            fit = wc * g_p + wd * g_d <= budget
            cc, dd = c_all[fit], d_all[fit]
            if cc.size == 0 or not np.any(sel):
                continue
            parts.append(
                (
                    np.repeat(pi[sel], cc.size),
                    np.repeat(pj[sel], cc.size),
                    np.tile(cc, int(np.sum(sel))),
                    np.tile(dd, int(np.sum(sel))),
                )
            )
        if parts:
            i, j, ci, di = (np.concatenate([p[q] for p in parts]) for q in range(4))
        else:
            i = j = ci = di = np.zeros(0, dtype=np.intp)
        gpus = workers[ci] * gp[i] + workers[di] * gd[j]
        link = np.where(same[i, j] & (gpus <= domain[i]), 0, 1) if auto else np.zeros_like(i)
    else:
        # the cheapest cell of each pool pair: the fewest workers of each pool that serve the rate (cost and
        # GPUs grow with both counts, capacity never shrinks), NVLink when that pair fits one domain
        target = float(search.target_rate_per_s)

        def first(cap: np.ndarray) -> np.ndarray:
            hit = cap >= target
            return np.where(np.any(hit, axis=1), np.argmax(hit, axis=1), nw - 1)

        c_of_variant = first(cap_pre)
        d_of_decode = first(cap_dec)
        i, j = (x.ravel() for x in np.meshgrid(np.arange(npre), np.arange(ndec), indexing="ij"))
        di = d_of_decode[j]
        if auto:
            c_nv = c_of_variant[pools.variant_of[i, j, 0]]
            c_rd = c_of_variant[pools.variant_of[i, j, 1]]
            nv_ok = same[i, j] & (workers[c_nv] * gp[i] + workers[di] * gd[j] <= domain[i])
            ci = np.where(nv_ok, c_nv, c_rd)
            link = np.where(nv_ok, 0, 1)
        else:
            ci = c_of_variant[pools.variant_of[i, j, 0]]
            link = np.zeros_like(i)
        gpus = workers[ci] * gp[i] + workers[di] * gd[j]
    c, d = workers[ci], workers[di]
    pre_cap = cap_pre[pools.variant_of[i, j, link], ci]
    dec_cap = cap_dec[j, di]
    price = search.price_per_gpu_hour_usd or {}

    def hourly(cands: list[PoolCandidate]) -> np.ndarray:
        vals = [price.get(c.gpu.id, c.gpu.price_per_gpu_hour_usd) for c in cands]
        return np.array([np.nan if v is None else float(v) for v in vals])

    cost = c * gp[i] * hourly(pools.pre)[i] + d * gd[j] * hourly(pools.dec)[j]
    return _Cells(
        i=i,
        j=j,
        c=c,
        d=d,
        link=link,
        capacity=np.minimum(pre_cap, dec_cap),
        prefill_capacity=pre_cap,
        decode_capacity=dec_cap,
        gpus=gpus,
        cost=cost,
    )


def _pick(search: DisaggregatedSearch, cells: _Cells, exclude: set[int]) -> tuple[int | None, Objective]:
    """Index of the best cell (None when no cell meets the SLO, the budget and the rate) and the objective."""
    ok = cells.capacity > 0
    if search.total_gpus is not None:
        ok &= cells.gpus <= search.total_gpus
    target = search.target_rate_per_s
    if target is not None:
        ok &= cells.capacity >= target
    if exclude:
        ok[list(exclude)] = False
    cost = np.nan_to_num(cells.cost, nan=np.inf)
    if search.minimize == "cost_per_token":
        served = cells.capacity if target is None else np.full(cells.capacity.shape, float(target))
        key = np.where(ok, cost / np.maximum(served, 1e-300), np.inf)
        cand = np.flatnonzero(np.isfinite(key))
        if cand.size == 0:
            return None, "min_cost_per_token"
        order = np.lexsort((-cells.capacity[cand], cells.gpus[cand], key[cand]))
        return int(cand[order[0]]), "min_cost_per_token"
    if target is None:
        if not np.any(ok):
            return None, "max_goodput"
        best = np.max(cells.capacity[ok])
        tied = np.flatnonzero(ok & (cells.capacity >= best * (1.0 - TIE_FRACTION)))
        order = np.lexsort((cost[tied], cells.gpus[tied], -cells.capacity[tied]))
        return int(tied[order[0]]), "max_goodput"
    use_cost = search.minimize == "cost" or (
        search.minimize == "auto" and bool(np.any(ok)) and bool(np.all(np.isfinite(cells.cost[ok])))
    )
    obj: Objective = "min_cost" if use_cost else "min_gpus"
    if not np.any(ok):
        return None, obj
    key = cost if use_cost else cells.gpus.astype(float)
    cand = np.flatnonzero(ok)
    order = np.lexsort((-cells.capacity[cand], key[cand]))
    return int(cand[order[0]]), obj


def plan_disaggregated(
    search: DisaggregatedSearch,
    requests: list[PoolRequest] | None = None,
    times: list[np.ndarray | None] | None = None,
    find_nearest: bool = True,
) -> DisaggregatedPlan:
    """Search the pool split (see the module docstring); ``requests`` (from :func:`pool_requests`) and their
    cost-model ``times`` may come from a caller that batches them with other work."""
    slo = search.slo
    if slo.ttft_s is None and slo.itl_s is None:
        raise InvalidInput("give at least one of slo.ttft_s and slo.itl_s", field="slo")
    if search.total_gpus is None and search.target_rate_per_s is None:
        raise InvalidInput(
            "give total_gpus (maximize goodput on that budget) or a target rate (minimize GPUs or cost)",
            field="total_gpus",
        )
    if not search.prefill_candidates or not search.decode_candidates:
        raise InvalidInput("give at least one candidate for each pool", field="prefill")
    tick(search.checkpoint, "pool grids")
    pools = _prepare(search, requests, times)
    assumptions = [
        "prefill workers serve one queue first come first served (M/G/c, Allen–Cunneen); in open loops a worker "
        "whose max_batch_size is above 1 prefills every waiting prompt in one pass (a gated batch queue)",
        "decode workers share the load evenly; KV moves layer by layer, overlapped with the prefill, plus a 5 ms "
        "hand-off (Splitwise)",
        "KV link: NVLink when both pools use one GPU type and fit in one scale-up domain, else the RDMA NIC"
        if search.kv_link == "auto"
        else f"KV link: {search.kv_link}, as requested",
        f"arrivals open-loop ({'Poisson' if search.arrival_cv == 1 else f'gamma, cv {search.arrival_cv:g}'})",
        *pools.skipped,
    ]
    base_obj: Objective = "max_goodput"
    if not pools.pre or not pools.dec:
        return _infeasible(search, pools, base_obj, ["no candidate pool holds the model"], None, assumptions)
    cells = _cells(search, pools, slo)
    exclude: set[int] = set()
    for _ in range(5):
        k, obj = _pick(search, cells, exclude)
        if k is None:
            break
        tick(search.checkpoint, "verification")
        plan = _verify(search, pools, cells, k, obj, assumptions)
        if plan is not None:
            return plan
        exclude.add(k)
    # no cell the search proposes holds once evaluated in full
    k, obj = _pick(search, cells, set())
    bindings = _bindings(search, cells) if k is None else [
        "the search's best splits miss the SLO by a hair once evaluated in full"]
    near = _near(search, pools) if find_nearest else None
    return _infeasible(search, pools, obj, bindings, near, assumptions)


def _bindings(search: DisaggregatedSearch, cells: _Cells) -> list[str]:
    out = []
    if not np.any(cells.prefill_capacity > 0):
        out.append(
            f"TTFT p{search.slo.ttft_percentile:g} ≤ {search.slo.ttft_s} s: no prefill configuration meets it "
            "even unloaded"
        )
    if not np.any(cells.decode_capacity > 0):
        out.append(
            f"ITL p{search.slo.itl_percentile:g} ≤ {search.slo.itl_s} s: no decode configuration meets it "
            "even at batch 1"
        )
    if not out and search.target_rate_per_s is not None:
        within = cells.gpus <= (search.total_gpus or np.inf)
        best = float(np.max(np.where(within, cells.capacity, 0.0)))
        out.append(
            f"target rate {search.target_rate_per_s:g} requests/s: the most any searched split serves "
            f"within the SLO is {best:.3g} requests/s"
        )
    if not out:
        out.append("GPU budget: no split of the budget meets the SLO")
    return out


def _near(search: DisaggregatedSearch, pools: _Pools) -> Slo | None:
    def feasible(s: Slo) -> bool:
        tick(search.checkpoint, "nearest feasible SLO")
        k, _ = _pick(search, _cells(search, pools, s), set())
        return k is not None

    def confirmed(s: Slo) -> bool:
        again = dataclasses.replace(search, slo=s)
        return plan_disaggregated(again, find_nearest=False).status == "optimal"

    return confirmed_nearest_slo(search.slo, feasible, confirmed)


def _infeasible(
    search: DisaggregatedSearch,
    pools: _Pools,
    obj: Objective,
    bindings: list[str],
    near: Slo | None,
    assumptions: list[str],
) -> DisaggregatedPlan:
    msg = "no prefill:decode split meets the SLO: " + "; ".join(bindings)
    if near is not None:
        msg += f"; the nearest SLO some split meets is ttft_s={near.ttft_s}, itl_s={near.itl_s}"
    return DisaggregatedPlan(
        status="infeasible",
        objective=obj,
        prefill=None,
        decode=None,
        kv_link=None,
        num_gpus=0,
        rate_per_s=0.0,
        capacity_per_s=0.0,
        goodput_per_gpu_per_s=0.0,
        cost_per_hour_usd=None,
        limiting_pool="none",
        evaluation=None,
        message=msg,
        binding_constraints=tuple(bindings),
        nearest_feasible_slo=near,
        assumptions=tuple(assumptions),
    )


def _verify(
    search: DisaggregatedSearch,
    pools: _Pools,
    cells: _Cells,
    k: int,
    obj: Objective,
    assumptions: list[str],
) -> DisaggregatedPlan | None:
    pc, dc = pools.pre[cells.i[k]], pools.dec[cells.j[k]]
    c, d = int(cells.c[k]), int(cells.d[k])
    link = pools.links[int(cells.link[k])] if search.kv_link == "auto" else search.kv_link
    dep = DisaggregatedDeployment(prefill=_pool_spec(pc, c), decode=_pool_spec(dc, d), kv_link=link)  # type: ignore[arg-type]
    problem = dataclasses.replace(search.problem, deployment=dep)
    target = search.target_rate_per_s
    rate = float(cells.capacity[k]) if target is None else float(target)
    ev, rate, ok = verified_evaluation(problem, rate, search.arrival_cv, search.slo, backoff=target is None)
    if not ok:
        return None
    pre_cap, dec_cap = float(cells.prefill_capacity[k]), float(cells.decode_capacity[k])
    limiting = "prefill" if pre_cap <= dec_cap else "decode"
    if ev.utilization.get("kv_link", 0.0) >= max(ev.utilization.get("prefill_pool", 0.0), 0.999):
        limiting = "kv_link"
    gpus = int(cells.gpus[k])
    cost = float(cells.cost[k]) if np.isfinite(cells.cost[k]) else None
    order = np.argsort(
        -np.where(cells.gpus <= (search.total_gpus or np.inf), cells.capacity, -1.0), kind="stable"
    )
    alts = []
    for a in order[:40]:
        if a == k or cells.capacity[a] <= 0 or len(alts) >= 5:
            continue
        alts.append(
            {
                "prefill_gpu": pools.pre[cells.i[a]].gpu.id,
                "prefill_tp": pools.pre[cells.i[a]].parallelism.tp,
                "prefill_workers": int(cells.c[a]),
                "decode_gpu": pools.dec[cells.j[a]].gpu.id,
                "decode_tp": pools.dec[cells.j[a]].parallelism.tp,
                "decode_workers": int(cells.d[a]),
                "capacity_per_s": float(cells.capacity[a]),
                "num_gpus": int(cells.gpus[a]),
            }
        )
    msg = (
        f"{c} prefill worker(s) of {pc.gpu.id} tp{pc.parallelism.tp} and {d} decode worker(s) of {dc.gpu.id} "
        f"tp{dc.parallelism.tp} ({gpus} GPUs) serve {rate:.3g} requests/s within the SLO; the {limiting} pool "
        "limits"
    )
    return DisaggregatedPlan(
        status="optimal",
        objective=obj,
        prefill=PoolChoice(
            gpu=pc.gpu.id,
            parallelism=pc.parallelism,
            workers=c,
            max_batch_size=pc.max_batch_size,
            capacity_per_s=pre_cap,
            utilization=float(ev.utilization.get("prefill_pool", 0.0)),
        ),
        decode=PoolChoice(
            gpu=dc.gpu.id,
            parallelism=dc.parallelism,
            workers=d,
            max_batch_size=dc.max_batch_size,
            capacity_per_s=dec_cap,
            utilization=float(ev.utilization.get("decode_pool", 0.0)),
        ),
        kv_link=link,
        num_gpus=gpus,
        rate_per_s=rate,
        capacity_per_s=float(cells.capacity[k]),
        goodput_per_gpu_per_s=rate / gpus,
        cost_per_hour_usd=cost,
        limiting_pool=limiting,
        evaluation=ev,
        message=msg,
        binding_constraints=(),
        nearest_feasible_slo=None,
        assumptions=tuple(assumptions),
        alternatives=tuple(alts),
    )
