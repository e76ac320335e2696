"""The chunk-budget search: which ``token_budget`` (vLLM ``max_num_batched_tokens``) and ``max_batch_size``
(``max_num_seqs``) serve the most load within the SLO, or, at a fixed load, give the lowest TTFT within
the ITL target.

The space is discrete (a list of budgets × a list of batch limits) and is searched exhaustively: every
budget's steady-state curve is built in one vectorized pass (:func:`capacity.aggregated_capacity`), each
batch limit truncates it (:func:`capacity.capacity_at_batch_limits`), and the best cell is picked from
the whole table, after the cells that can be their budget's best are searched again at their own limit
(its batch fluctuation and wait for a place, ``_own_cap_cells``). Ties (objectives within 0.5 %) go to
the smaller budget (fewer tokens per iteration: shorter stalls for running streams) and then to the
smaller batch limit. The chosen configuration is then evaluated by ``evaluate`` itself, and the reported
metrics are that evaluation's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.costs.passes import mixed_step_latency_many
from planner.errors import InvalidInput
from planner.optimize import capacity as C
from planner.optimize.common import (
    TIE_FRACTION,
    Checkpoint,
    confirmed_nearest_slo,
    open_loop,
    tick,
    verified_evaluation,
)
from planner.serving import queueing as Q
from planner.serving.aggregated import (
    AggregatedModel,
    SteadyState,
    concat_states,
    stack_models,
    take_states,
    with_row_caps,
)
from planner.serving.batch import batch_dispersion, place_holding_s
from planner.serving.evaluate import FLUCTUATION_Z, compress_points
from planner.serving.types import AggregatedDeployment, Evaluation, ServingProblem, Slo

#: token budgets searched by default [tokens]: Sarathi-Serve's 256–2048 range up to vLLM's 8192 default and beyond
DEFAULT_TOKEN_BUDGETS = (256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384)
#: batch limits searched by default [sequences]
DEFAULT_MAX_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
#: the largest probability that a request waits for a place in the batch (Erlang C over the limit's places,
#: at the budget's capacity; ``serving.batch.slot_wait``) that a chosen batch limit may leave. The limit is a
#: tie-break among those that keep the budget's capacity; a looser one would charge the chosen
#: configuration a wait its capacity search did not see (the search tests each budget at its largest limit)
LIMIT_WAIT_PROBABILITY = 1e-3
#: a cell whose limit a request would wait for with a smaller probability at its budget's capacity (and which
#: the batch's fluctuation does not reach) is not searched at its own limit (``_own_cap_cells``)
OWN_CAP_WAIT = 1e-4
#: most prompt-length points the search costs (``LengthDistribution.coarsened``); a lognormal's 64 points are
#: costed as evaluate costs them. Coarser is not safe: the chunks per prompt, ⌈Lp / C⌉, jump where a prompt
#: point crosses a multiple of the budget, and 32 points moved a lognormal's capacity by up to 5 % against
#: the full distribution (tests/unit/test_optimize_chunked.py brute force)
SEARCH_PROMPT_POINTS = 64


@dataclass(frozen=True, kw_only=True)
class ChunkedSearch:
    """A chunk-budget search. ``problem.deployment`` gives the GPU, parallelism and replicas (its budget and
    batch limit are ignored); ``target_rate_per_s`` (all replicas) switches from "most load" to "lowest TTFT
    at this load"."""

    problem: ServingProblem
    slo: Slo
    arrival_cv: float = 1.0
    target_rate_per_s: float | None = None
    token_budgets: tuple[int, ...] = DEFAULT_TOKEN_BUDGETS
    max_batch_sizes: tuple[int, ...] = DEFAULT_MAX_BATCH_SIZES
    #: called between the search's stages (see ``planner.optimize.common.Checkpoint``)
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class BudgetPoint:
    """One token budget on the curve, at its best batch limit."""

    token_budget: int
    max_batch_size: int
    #: most load served within the SLO, all replicas [requests/s]
    max_rate_per_s: float
    #: where the budget is evaluated: its capacity, or the target rate [requests/s]
    rate_per_s: float
    #: TTFT and ITL at the SLO's percentiles at that rate [s] (None when the rate is not sustained)
    ttft_s: float | None
    itl_s: float | None
    mean_itl_s: float | None
    throughput_output_tokens_per_s: float
    #: prefill time of the mean prompt in chunks of this budget, over its time in one pass, minus 1
    chunk_overhead_fraction: float
    binding_constraint: str
    feasible: bool


@dataclass(frozen=True, kw_only=True)
class AggregatedOption:
    """The best scheduler settings of one aggregated configuration (a GPU, a parallelism, chunked or not),
    with every budget's point: what the chunk search reports and what the plan ranks."""

    chunked_prefill: bool
    token_budget: int | None
    max_batch_size: int | None
    #: per replica [requests/s]: the SLO capacity of the chosen settings, and the operating rate
    capacity_per_replica_per_s: float
    binding_constraint: str
    points: tuple[BudgetPoint, ...]
    #: (throughput per replica [output tokens/s], mean ITL [s]) along the chosen budget's SLO-meeting curve
    frontier: tuple[tuple[float, float], ...] = field(default_factory=tuple)


@dataclass(frozen=True, kw_only=True)
class ChunkedPlan:
    status: Literal["optimal", "infeasible"]
    objective: Literal["max_rate", "min_ttft"]
    token_budget: int | None
    max_batch_size: int | None
    #: the rate the chosen configuration is evaluated at, all replicas [requests/s]
    rate_per_s: float
    binding_constraint: str
    evaluation: Evaluation | None
    curve: tuple[BudgetPoint, ...]
    message: str
    nearest_feasible_slo: Slo | None
    assumptions: tuple[str, ...]


def _chunk_overhead_inputs(
    model: AggregatedModel, max_points: int = 16
) -> tuple[list[dict[str, np.ndarray | float]], np.ndarray, np.ndarray]:
    """Cost-model inputs of Sarathi-Serve's chunking overhead (Agrawal et al., OSDI 2024, Sec. 5.4.1): each
    prompt prefilled in budget-sized chunks (every chunk re-reading the KV of the ones before it, no decodes
    in the batch) and in one pass; the prompt distribution re-binned to ``max_points`` equal-mass points.
    Returns (requests, sizes, weights) for :func:`_chunk_overhead`: ``sizes`` (nk, ni, nj) [tokens] of the
    j-th chunk of prompt point i under budget k, 0 past a prompt's last chunk. Only the chunks that exist
    are costed (about a tenth of the padded grid; the cost model is elementwise, so each one's time is
    what the padded grid gives it)."""
    lp, w = compress_points(model.prompt_compute, model.in_weights, max_points)
    cached0 = np.round(lp / (1.0 - model.hit) * model.hit) if model.hit > 0 else np.zeros_like(lp)
    budgets = model.budgets
    n_max = int(np.max(np.ceil(lp[None, :] / budgets[:, None])))
    offsets = np.arange(n_max, dtype=np.float64)[None, None, :] * budgets[:, None, None]  # (nk, ni, nj)
    sizes = np.clip(lp[None, :, None] - offsets, 0.0, budgets[:, None, None])
    real = sizes > 0
    chunks = dict(
        decode_batch=0.0,
        decode_context_tokens=0.0,
        prefill_tokens=sizes[real],
        prefill_cached_tokens=(cached0[None, :, None] + offsets)[real],
    )
    one = dict(decode_batch=0.0, decode_context_tokens=0.0, prefill_tokens=lp, prefill_cached_tokens=cached0)
    return [chunks, one], sizes, w


def _chunk_overhead(times: list[np.ndarray], sizes: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per budget: time-weighted chunked prefill over one-pass prefill, minus 1 (``times``: of the chunks
    that exist, ``sizes > 0``, in their order; and of each prompt in one pass)."""
    per_chunk = np.zeros(sizes.shape)
    per_chunk[sizes > 0] = times[0]
    chunked = np.sum(per_chunk, axis=2) @ w
    return chunked / float(np.dot(np.broadcast_to(times[1], w.shape), w)) - 1.0


def _places(model: AggregatedModel, st: SteadyState) -> np.ndarray:
    """The decode batch's places in use per state: λ times how long a request holds one."""
    return np.asarray(st.rate_per_s, dtype=np.float64) * place_holding_s(model, st)


def _limit_margin(candidates: np.ndarray, places: np.ndarray) -> np.ndarray:
    """(n, m): whether each candidate limit leaves a request waiting for a place with probability at most
    ``LIMIT_WAIT_PROBABILITY``, at ``places`` (n,) places in use."""
    p = np.stack([Q.erlang_c_array(float(c), places) for c in candidates], axis=1)
    return p <= LIMIT_WAIT_PROBABILITY


def _batch_limit(candidates: np.ndarray, capacity_row: np.ndarray, places: float) -> int:
    """The smallest batch limit that keeps the budget's best capacity and where a request rarely waits for a
    place (``places`` in use at the capacity)."""
    best = float(np.max(capacity_row))
    keeps = capacity_row >= best * (1.0 - 1e-3)
    margin = _limit_margin(candidates, np.array([max(places, 0.0)]))[0]
    pick = np.flatnonzero(keeps & margin)
    if pick.size == 0:
        pick = np.flatnonzero(keeps)
    return int(candidates[pick[0]])


def _batch_limits(candidates: np.ndarray, capacity: np.ndarray, places: np.ndarray) -> list[int]:
    """:func:`_batch_limit` of every budget at once: ``capacity`` (nk, nm) [requests/s] by batch limit,
    ``places`` (nk,) the batch's places in use at each budget's capacity."""
    best = np.max(capacity, axis=1)
    keeps = capacity >= (best * (1.0 - 1e-3))[:, None]
    if not np.all(np.any(keeps, axis=1)):  # a row without a capacity (NaN): as the scalar version fails
        return [_batch_limit(candidates, capacity[k], float(places[k])) for k in range(places.size)]
    margin = _limit_margin(candidates, np.maximum(np.nan_to_num(places), 0.0))
    both = keeps & margin
    pick = np.where(np.any(both, axis=1), np.argmax(both, axis=1), np.argmax(keeps, axis=1))
    return [int(c) for c in candidates[pick]]


def _own_cap_cells(model: AggregatedModel, cap: C.AggregatedCapacity, by_limit: np.ndarray, limits: np.ndarray,
                   slo: Slo, scv: float) -> tuple[np.ndarray, C.AggregatedCapacity]:
    """The cells (budget, batch limit) that can be their budget's best, searched at their own cap.

    ``capacity_at_batch_limits`` gives a cell below the top limit the budget's capacity, or the rate at
    which the mean batch reaches the limit, with the top limit's batch fluctuation and no wait for a place.
    At its own limit the fluctuation is cut at the limit (shorter ITL tails: more capacity when ITL binds)
    and a request near it waits for a place (``batch.slot_wait``: less when TTFT binds). Its states are the
    top limit's up to its cap, but for the decode batch a stream sees (itself and the others, at most the
    cap), and λ grows with the batch along the stable branch: the cell's capacity is at most its rate at a
    mean batch of the limit. A cell where that is below its budget's capacity at the top limit by more than
    the limit choice's 1e-3 cannot be chosen; the others (and those unstable at their limit) are searched
    as their own rows (``with_row_caps``). Returns the table with
    their capacities, and ``cap`` with each budget's row (rate, batch, binding, state) that of its best cell
    where one beats the top limit."""
    top = cap.rate_per_s
    below = (limits[None, :] < model.cap_k[:, None]) & (top[:, None] > 0)
    # a limit above the batch's fluctuation points at the top limit's capacity, where a request would wait for
    # a place with probability under OWN_CAP_WAIT, changes neither the ITL law nor (to within that) the TTFT's
    # wait there: that cell is the top limit's (up to the search's resolution)
    sd = np.sqrt(np.maximum(cap.batch, 0.0) * batch_dispersion(model, cap.state, np.arange(top.size)))
    reaches = np.round(cap.batch + sd * float(np.max(FLUCTUATION_Z))) + 2.0
    places = np.maximum(np.nan_to_num(_places(model, cap.state)), 0.0)
    waits = np.stack([Q.erlang_c_array(float(c), places) for c in limits], axis=1)
    below &= (limits[None, :] <= reaches[:, None]) | (waits >= OWN_CAP_WAIT)
    ks, ls = np.nonzero(below)
    if ks.size == 0:
        return by_limit, cap
    capped = with_row_caps(model, ks, limits[ls])
    cells_at = np.arange(ks.size)
    at_limit = capped.states_at_batch(limits[ls], cells_at, scv)
    reach = at_limit.rate_per_s
    keep = ~(at_limit.stable & np.isfinite(reach)) | (reach >= top[ks] * (1.0 - 1e-3))
    ks, ls = ks[keep], ls[keep]
    if ks.size == 0:
        return by_limit, cap
    cells = C.aggregated_capacity(with_row_caps(model, ks, limits[ls]), slo, scv)
    out = by_limit.copy()
    out[ks, ls] = cells.rate_per_s
    # each budget's best cell, where it beats the top limit
    nk = top.size
    best = np.full(nk, -1)
    best_rate = top.copy()
    for j in np.argsort(-cells.rate_per_s, kind="stable"):
        k = int(ks[j])
        if best[k] < 0 and cells.rate_per_s[j] > best_rate[k]:
            best[k], best_rate[k] = j, cells.rate_per_s[j]
    if np.all(best < 0):
        return out, cap
    st_cells = dataclasses.replace(cells.state, budget_index=ks[cells.state.budget_index])
    idx = np.where(best >= 0, nk + best, np.arange(nk))
    state = take_states(concat_states([cap.state, st_cells]), idx)
    binding = tuple(
        cap.binding[k] if best[k] < 0
        else ("max_batch_size" if cells.binding[best[k]] == "batch_capacity" else cells.binding[best[k]])
        for k in range(nk))
    batch = np.where(best >= 0, cells.batch[best], cap.batch)
    merged = dataclasses.replace(cap, rate_per_s=best_rate, batch=batch, binding=binding, state=state)
    return out, merged


@dataclass(kw_only=True)
class PreparedAggregated:
    """An aggregated configuration set up for the search, waiting for its cost-model grids (``requests``,
    for ``mixed_step_latency_many`` on ``model.ctx``; batched with other work on the same GPU by the plan)."""

    problem: ServingProblem
    model: AggregatedModel
    budgets: np.ndarray
    batch_limits: np.ndarray
    requests: list[dict[str, np.ndarray | float]]
    overhead_sizes: np.ndarray | None
    overhead_weights: np.ndarray | None


def prepare_aggregated(
    problem: ServingProblem,
    *,
    token_budgets: tuple[int, ...] = DEFAULT_TOKEN_BUDGETS,
    max_batch_sizes: tuple[int, ...] = DEFAULT_MAX_BATCH_SIZES,
    chunk_overhead: bool = True,
) -> PreparedAggregated:
    """Build the search model of one aggregated configuration (raises ``ModelDoesNotFit`` as evaluate does);
    ``chunk_overhead=False`` skips the grids of the chunking-overhead report (reported as 0)."""
    dep = problem.deployment
    assert isinstance(dep, AggregatedDeployment)
    mbs = np.array(sorted(set(max_batch_sizes)), dtype=np.float64)
    longest = problem.workload.input_tokens.max
    if dep.chunked_prefill:
        budgets = np.array(sorted(set(token_budgets)), dtype=np.float64)
    else:
        budgets = np.array([max(dep.token_budget, longest)], dtype=np.float64)
    top = dataclasses.replace(dep, max_batch_size=int(mbs[-1]), token_budget=int(budgets[0]))
    coarse = dataclasses.replace(
        problem.workload, input_tokens=problem.workload.input_tokens.coarsened(SEARCH_PROMPT_POINTS)
    )
    model = AggregatedModel(
        dataclasses.replace(problem, deployment=top, workload=coarse), token_budgets=budgets, tabulate=False
    )
    requests: list[dict[str, np.ndarray | float]] = list(model.table_inputs())
    sizes = weights = None
    if dep.chunked_prefill and chunk_overhead:
        extra, sizes, weights = _chunk_overhead_inputs(model)
        requests += extra
    return PreparedAggregated(
        problem=problem,
        model=model,
        budgets=budgets,
        batch_limits=mbs,
        requests=requests,
        overhead_sizes=sizes,
        overhead_weights=weights,
    )


def aggregated_option(
    problem: ServingProblem,
    slo: Slo,
    *,
    arrival_cv: float = 1.0,
    target_rate_per_replica_per_s: float | None = None,
    token_budgets: tuple[int, ...] = DEFAULT_TOKEN_BUDGETS,
    max_batch_sizes: tuple[int, ...] = DEFAULT_MAX_BATCH_SIZES,
    prepared: PreparedAggregated | None = None,
    times: list[np.ndarray] | None = None,
    quantiles: Literal["all", "chosen", "none"] = "all",
    own_limits: bool = False,
) -> AggregatedOption:
    """Search one aggregated configuration's scheduler settings (exhaustive over budgets × batch limits).

    ``problem.deployment.chunked_prefill`` selects the mode; without chunking the budget only has to hold
    the longest prompt, so one budget (the deployment's) is costed. ``prepared`` and its cost-model
    ``times`` may come from the caller (see :class:`PreparedAggregated`). ``quantiles`` says which budgets'
    TTFT and ITL percentiles a capacity search reports: all, the chosen one's, or none (a fixed-rate search
    always computes them: it ranks by them). ``own_limits``: a capacity search also searches the cells
    that can be their budget's best at their own batch limit (``_own_cap_cells``), as the chunk-budget
    search and the whole plan's stacked search (``capacity_options``) do."""
    if prepared is None:
        prepared = prepare_aggregated(problem, token_budgets=token_budgets, max_batch_sizes=max_batch_sizes)
    model, budgets, mbs = prepared.model, prepared.budgets, prepared.batch_limits
    if times is None:
        times = mixed_step_latency_many(model.ctx, prepared.requests)
    if not hasattr(model, "tables"):
        model.set_tables(times[0], times[1])
    dep = problem.deployment
    assert isinstance(dep, AggregatedDeployment)
    scv = arrival_cv**2
    cap = C.aggregated_capacity(model, slo, scv)
    by_limit = C.capacity_at_batch_limits(model, cap, mbs, scv)  # (nk, nm)
    if own_limits and target_rate_per_replica_per_s is None:
        by_limit, cap = _own_cap_cells(model, cap, by_limit, mbs, slo, scv)
    if prepared.overhead_sizes is not None and prepared.overhead_weights is not None:
        overhead = _chunk_overhead(times[2:4], prepared.overhead_sizes, prepared.overhead_weights)
    else:
        overhead = np.zeros(budgets.size)
    return _assemble(prepared, slo, cap, by_limit, overhead, model, scv, target_rate_per_replica_per_s, quantiles)


def capacity_options(prepared: list[PreparedAggregated], times: list[list[np.ndarray]], slo: Slo, *,
                     arrival_cv: float = 1.0) -> list[AggregatedOption]:
    """:func:`aggregated_option` (capacity search, no percentiles) of many configurations at once: the models
    of each chunking mode are stacked (``stack_models``) so that every refinement of every configuration is
    one vectorized pass. The configurations must share the workload, engine and batch limits.

    Each option's choice (budget, batch limit, capacity, binding constraint, frontier) is that of the
    exhaustive search (``aggregated_option`` with ``own_limits``: the cells that can be a budget's best at
    their own limits, ``_own_cap_cells``); the budget rows that provably cannot be chosen stop refining
    early (see ``aggregated_capacity``'s ``choose_in``), so their points carry a rate they surely reach,
    not their capacity: the whole plan reports the chosen budget only. A stopped row's cells are searched
    from its lower bound, so more of them are, each exactly: its point stays at most the exhaustive one."""
    scv = arrival_cv**2
    for prep, t in zip(prepared, times, strict=True):
        if not hasattr(prep.model, "tables"):
            prep.model.set_tables(t[0], t[1])
    out: list[AggregatedOption | None] = [None] * len(prepared)
    for chunked in (True, False):
        idx = [i for i, p in enumerate(prepared) if p.model.dep.chunked_prefill == chunked]
        if not idx:
            continue
        stack = stack_models([prepared[i].model for i in idx])
        mbs = prepared[idx[0]].batch_limits
        # each configuration keeps one budget: the rows that cannot be it stop refining early
        cap = C.aggregated_capacity(stack, slo, scv, choose_in=stack.owner, tie_fraction=TIE_FRACTION,
                                    batch_top=float(np.max(mbs)))
        by_limit = C.capacity_at_batch_limits(stack, cap, mbs, scv)
        by_limit, cap = _own_cap_cells(stack, cap, by_limit, mbs, slo, scv)
        limits = _batch_limits(mbs, by_limit, _places(stack, cap.state))  # every row at once
        for pos, i in enumerate(idx):
            prep = prepared[i]
            rows = np.flatnonzero(stack.owner == pos)
            if prep.overhead_sizes is not None and prep.overhead_weights is not None:
                overhead = _chunk_overhead(times[i][2:4], prep.overhead_sizes, prep.overhead_weights)
            else:
                overhead = np.zeros(rows.size)
            part = C.slice_capacity(cap, rows)
            # the states' rows, renumbered from the stack's to the configuration's own
            local = dataclasses.replace(part.state, budget_index=stack.local[part.state.budget_index])
            out[i] = _assemble(prep, slo, dataclasses.replace(part, state=local), by_limit[rows], overhead,
                               prep.model, scv, None, "none", limits=[limits[r] for r in rows])
    return [o for o in out if o is not None]


def _assemble(prepared: PreparedAggregated, slo: Slo, cap: C.AggregatedCapacity, by_limit: np.ndarray,
              overhead: np.ndarray, model: AggregatedModel, scv: float,
              target_rate_per_replica_per_s: float | None, quantiles: str,
              limits: list[int] | None = None) -> AggregatedOption:
    """The option of one configuration from its capacity table (``cap`` and ``by_limit`` rows are its
    budgets; ``limits``: their batch limits, when the caller has them from a larger table)."""
    problem, budgets, mbs = prepared.problem, prepared.budgets, prepared.batch_limits
    dep = problem.deployment
    assert isinstance(dep, AggregatedDeployment)
    mean_out = problem.workload.output_tokens.mean
    reps = dep.replicas
    if target_rate_per_replica_per_s is None:
        st = cap.state
        rates = cap.rate_per_s
        sustained = rates > 0
    else:
        st, sustained = C.states_at_rate(model, target_rate_per_replica_per_s, scv)
        rates = np.full(budgets.size, float(target_rate_per_replica_per_s))
    best_cap = by_limit.max(axis=1)
    if quantiles == "all" or target_rate_per_replica_per_s is not None:
        ttft_q, itl_q = C.aggregated_quantiles(model, st, slo, scv)
    else:
        ttft_q = itl_q = np.full(budgets.size, np.nan)
        score = np.where(best_cap > 0, best_cap, -np.inf)
        k = int(np.flatnonzero(score >= score.max() * (1.0 - TIE_FRACTION))[0])
        if best_cap[k] > 0 and quantiles == "chosen":
            one = C.take_states(st, np.array([k]))
            tq, iq = C.aggregated_quantiles(model, one, slo, scv)
            ttft_q[k], itl_q[k] = tq[0], iq[0]
    if limits is None or target_rate_per_replica_per_s is not None:
        limits = _batch_limits(mbs, by_limit, _places(model, st))
    points = []
    feasible = np.zeros(budgets.size, dtype=bool)
    binding = []
    for k in range(budgets.size):
        if target_rate_per_replica_per_s is None:
            ok = bool(rates[k] > 0)
            why = cap.binding[k]
            if why == "batch_capacity":
                why = "kv_cache" if model.kv_cap_k[k] <= mbs[-1] else "max_batch_size"
        else:
            itl_ok = slo.itl_s is None or itl_q[k] <= slo.itl_s * (1 + 1e-9)
            ttft_ok = slo.ttft_s is None or ttft_q[k] <= slo.ttft_s * (1 + 1e-9)
            ok = bool(sustained[k]) and bool(itl_ok) and bool(ttft_ok) and st.batch[k] <= model.cap_k[k]
            why = (
                "overload"
                if not sustained[k]
                else "itl"
                if not itl_ok
                else "ttft"
                if not ttft_ok
                else _tightest(slo, float(ttft_q[k]), float(itl_q[k]))
            )
        feasible[k] = ok
        binding.append(why)
        points.append(
            BudgetPoint(
                token_budget=int(budgets[k]),
                max_batch_size=limits[k],
                max_rate_per_s=float(best_cap[k]) * reps,
                rate_per_s=float(rates[k]) * reps,
                ttft_s=float(ttft_q[k]) if sustained[k] and np.isfinite(ttft_q[k]) else None,
                itl_s=float(itl_q[k]) if sustained[k] and np.isfinite(itl_q[k]) else None,
                mean_itl_s=float(st.mean_iteration_s[k]) if sustained[k] else None,
                throughput_output_tokens_per_s=float(rates[k]) * reps * mean_out if sustained[k] else 0.0,
                chunk_overhead_fraction=float(overhead[k]),
                binding_constraint=why,
                feasible=ok,
            )
        )
    if not np.any(feasible):
        return AggregatedOption(
            chunked_prefill=dep.chunked_prefill,
            token_budget=None,
            max_batch_size=None,
            capacity_per_replica_per_s=0.0,
            binding_constraint=binding[int(np.argmax(best_cap))],
            points=tuple(points),
        )
    if target_rate_per_replica_per_s is None:
        score = np.where(feasible, best_cap, -np.inf)
        k = int(np.flatnonzero(score >= score.max() * (1.0 - TIE_FRACTION))[0])
    else:
        score = np.where(feasible, ttft_q, np.inf)
        k = int(np.flatnonzero(score <= score.min() * (1.0 + TIE_FRACTION))[0])
    frontier = _frontier(cap, k, mean_out)
    return AggregatedOption(
        chunked_prefill=dep.chunked_prefill,
        token_budget=int(budgets[k]),
        max_batch_size=limits[k],
        capacity_per_replica_per_s=float(best_cap[k]),
        binding_constraint=binding[k],
        points=tuple(points),
        frontier=frontier,
    )


def _frontier(cap: C.AggregatedCapacity, k: int, mean_out: float) -> tuple[tuple[float, float], ...]:
    good = cap.curve_ok[k] & (cap.curve_rate_per_s[k] > 0)
    lam = cap.curve_rate_per_s[k][good]
    itl = cap.curve_mean_itl_s[k][good]
    pts = list(zip((lam * mean_out).tolist(), itl.tolist(), strict=True))
    pts.append((float(cap.rate_per_s[k]) * mean_out, float(cap.state.mean_iteration_s[k])))
    return tuple(pts)


def _tightest(slo: Slo, ttft: float, itl: float) -> str:
    slack = {}
    if slo.ttft_s is not None:
        slack["ttft"] = slo.ttft_s / max(ttft, 1e-300)
    if slo.itl_s is not None:
        slack["itl"] = slo.itl_s / max(itl, 1e-300)
    return min(slack, key=lambda n: slack[n]) if slack else "none"


def plan_chunked(search: ChunkedSearch) -> ChunkedPlan:
    """The chunk-budget search (see the module docstring). A configuration is only reported ``optimal`` once
    ``evaluate`` confirms it meets the SLO; when the best cell misses it in the full evaluation, the next
    cells are tried in the search's order; when none holds, the answer is ``infeasible``."""
    return _plan_chunked(search, find_nearest=True)


def _plan_chunked(search: ChunkedSearch, find_nearest: bool) -> ChunkedPlan:
    problem, slo = search.problem, search.slo
    dep = problem.deployment
    if not isinstance(dep, AggregatedDeployment):
        raise InvalidInput("the chunk-budget search needs an aggregated deployment", field="deployment")
    if slo.ttft_s is None and slo.itl_s is None:
        raise InvalidInput("give at least one of slo.ttft_s and slo.itl_s", field="slo")
    reps = dep.replicas
    per_rep = None if search.target_rate_per_s is None else search.target_rate_per_s / reps
    chunked = dataclasses.replace(dep, chunked_prefill=True)
    base = dataclasses.replace(problem, deployment=chunked)
    tick(search.checkpoint, "chunk-budget grid")
    opt = aggregated_option(
        base,
        slo,
        arrival_cv=search.arrival_cv,
        target_rate_per_replica_per_s=per_rep,
        token_budgets=search.token_budgets,
        max_batch_sizes=search.max_batch_sizes,
        own_limits=True,
    )
    objective: Literal["max_rate", "min_ttft"] = "max_rate" if per_rep is None else "min_ttft"
    assumptions = (
        f"engine {problem.engine.id}: scheduler as vLLM documents it (decodes first, the rest of the token budget "
        "to prefill chunks)",
        f"arrivals open-loop ({'Poisson' if search.arrival_cv == 1 else f'gamma, cv {search.arrival_cv:g}'}), "
        f"split evenly over {reps} replica(s)",
        f"searched token budgets {list(search.token_budgets)} and batch limits {list(search.max_batch_sizes)}",
        "the batch limit is the smallest that keeps the capacity (each limit that can be a budget's best "
        "searched at its own batch cap) and, where one does, leaves a request waiting for a place in the "
        f"batch with probability at most {LIMIT_WAIT_PROBABILITY:g}",
    )
    # the search's cells in its order of preference; the first one the full evaluation confirms is the answer
    feasible_points = [p for p in opt.points if p.feasible]
    if per_rep is None:
        order = sorted(feasible_points, key=lambda p: (-p.max_rate_per_s, p.token_budget))
        if opt.token_budget is not None:
            order.sort(key=lambda p: p.token_budget != opt.token_budget)
    else:
        order = sorted(feasible_points, key=lambda p: (p.token_budget != opt.token_budget, p.ttft_s or np.inf))
    for point in order[:4]:
        tick(search.checkpoint, "verification")
        chosen = dataclasses.replace(chunked, token_budget=point.token_budget, max_batch_size=point.max_batch_size)
        rate = point.max_rate_per_s if per_rep is None else float(search.target_rate_per_s or 0.0)
        ev, rate, ok = verified_evaluation(
            dataclasses.replace(problem, deployment=chosen), rate, search.arrival_cv, slo, backoff=per_rep is None
        )
        if not ok:
            continue
        if per_rep is None:
            msg = (
                f"token_budget {point.token_budget} with max_batch_size {point.max_batch_size} serves "
                f"{rate:.3g} requests/s within the SLO; more load breaks the {point.binding_constraint} target"
            )
        else:
            msg = (
                f"token_budget {point.token_budget} gives the lowest TTFT p{slo.ttft_percentile:g} "
                f"({point.ttft_s:.3g} s as searched) at {rate:.3g} requests/s within the SLO"
            )
        return ChunkedPlan(
            status="optimal",
            objective=objective,
            token_budget=point.token_budget,
            max_batch_size=point.max_batch_size,
            rate_per_s=rate,
            binding_constraint=point.binding_constraint,
            evaluation=ev,
            curve=opt.points,
            message=msg,
            nearest_feasible_slo=None,
            assumptions=assumptions,
        )
    near = None
    if find_nearest:

        def feasible(s: Slo) -> bool:
            tick(search.checkpoint, "nearest feasible SLO")
            o = aggregated_option(
                base,
                s,
                arrival_cv=search.arrival_cv,
                target_rate_per_replica_per_s=per_rep,
                token_budgets=search.token_budgets,
                max_batch_sizes=search.max_batch_sizes,
            )
            return o.token_budget is not None

        near = confirmed_nearest_slo(
            slo, feasible, lambda s: _plan_chunked(dataclasses.replace(search, slo=s), False).status == "optimal"
        )
    what = "at any load" if per_rep is None else f"at {search.target_rate_per_s:g} requests/s"
    msg = f"no token budget meets the SLO {what}: the binding constraint is {opt.binding_constraint}"
    if feasible_points:
        msg = (f"no token budget meets the SLO {what} once evaluated in full (the search's best cells miss it "
               "by a hair)")
    if near is not None:
        msg += f"; the nearest SLO some budget meets is ttft_s={near.ttft_s}, itl_s={near.itl_s}"
    return ChunkedPlan(
        status="infeasible",
        objective=objective,
        token_budget=None,
        max_batch_size=None,
        rate_per_s=0.0,
        binding_constraint=opt.binding_constraint,
        evaluation=None,
        curve=opt.points,
        message=msg,
        nearest_feasible_slo=near,
        assumptions=assumptions,
    )


__all__ = ["ChunkedPlan", "ChunkedSearch", "plan_chunked", "aggregated_option", "open_loop"]
