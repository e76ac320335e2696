"""Aggregated serving: continuous batching with a token budget (vLLM's scheduler), in closed form.

Per replica, in steady state. Every iteration carries the ``B`` running decodes (one token each) and,
when prompts are waiting, spends the rest of the token budget ``C = token_budget − B`` on prefill chunks
(chunked prefill, Sarathi-Serve's stall-free batching); without chunked prefill a waiting prompt gets a
prefill-only iteration of its own and the running streams wait for it.

Balance equations (rates per replica; ``λ`` requests/s, prompt ``L`` of which ``Lp`` need computing,
output ``O`` tokens):

- token conservation: mixed iterations run at ``r_m = λ·E[Lp] / E[P]`` per second, ``E[P]`` the mean
  prefill tokens per mixed iteration (full chunks of ``C``, and each prompt's last, partial chunk topped
  up by the next waiting prompt with probability ``u``);
- time: the prefill lane is busy a fraction ``u = r_m · E[τ_mixed]``; the rest are decode-only
  iterations of length ``τ_d``;
- Little's law for the decode batch: ``B = λ · (E[O] − 1) · τ̄`` with ``τ̄`` the mean iteration time.

``B`` is a fixed point of these (solved by damped iteration, vectorized over a grid of rates). A closed
loop of ``N`` clients adds Little's law for the whole cycle, ``N = λ · E[e2e]``, solved for ``λ``.
TTFT = front-end overhead + queue wait for the prefill lane (Kingman's G/G/1 on its token work) + the
mean residual of the iteration in progress + the prompt's own chunk iterations. In a closed loop the
requests are triggered by completions, which come at iteration ends: chunked, the lane's queue is counted
in iterations (its busy share of the iterations, not of the time); unchunked, a prompt shares the
prefill-only iteration of the others that arrived during its decode iteration. Iteration times come from
the cost model on a (batch × chunk) grid, interpolated.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy import special

from planner.costs.memory import memory_plan
from planner.costs.passes import mixed_step_latency_many, prefill_latency_s
from planner.costs.types import CostContext
from planner.errors import ModelDoesNotFit, UnsupportedConfiguration
from planner.serving import queueing as Q
from planner.serving.grids import broadcast_view, geometric_grid, sorted_unique
from planner.serving.train import MAX_ORBIT_STEPS, Orbit, chunked_orbit, orbit_steps
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import LengthDistribution, held_kv_scv

FloatArray = NDArray[np.float64]

#: chunk sizes tabulated per batch size, as fractions of the budget left after the decodes: 0, then powers of
#: two up to 1 (``_Tables.at_segments`` finds a fraction's segment from its binary exponent)
CHUNK_FRACTIONS = np.array([0.0, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0])
_LAST_SEGMENT = CHUNK_FRACTIONS.size - 2
assert np.array_equal(CHUNK_FRACTIONS[1:], 2.0 ** np.arange(-_LAST_SEGMENT, 1.0))
NUM_BATCH_POINTS = 20
#: largest prefill-lane utilization treated as stable
MAX_UTILIZATION = 0.995
#: a chunked lane busy in every iteration has u = 1 up to the top-up share's solution, ~1e-8 of u (1-token
#: prompts on a 512-token budget: 1 ± 2e-8 from 1100 to 4300 requests/s); beyond this slack the balance is
#: inconsistent (u = 1.24 where that curve ends)
BUSY_LANE_SLACK = 1e-6
#: secant steps of the chunked lane's top-up share (``_top_up_share``) after two plain passes; a closed
#: loop's share is the lane's busy share u, whose three plain passes were always enough
TOP_UP_SECANT_STEPS, CLOSED_LOOP_PASSES = 2, 3
#: |g(top) − top| above which a row's top-up share is bisected instead (the secant leaves up to ~0.01 on
#: the benchmark's trace, which the crosscheck grid was validated with; it fails by ~1 where it fails), and
#: the bisections (to 6e-8)
TOP_UP_TOLERANCE, TOP_UP_BISECTIONS = 0.05, 24
#: decode batches of the λ(B) curve an arrival rate is interpolated on (geometric from 1e-3 to the cap)
CURVE_POINTS = 48
#: rounds and points of the search for the end of the stable branch between two curve points
EDGE_ROUNDS, EDGE_POINTS = 2, 24
#: prompts per prefill-only pass the unchunked lane's shared pass is tabulated at (``_Tables.pass_saving_s``;
#: the last one's saving beyond it), and the Newton rounds of its mean pass size (``_shared_pass_size``)
SHARED_PASS_GRID = np.array([1.0, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
                             1024, 2048, 4096, 8192, 16384, 65536])
SHARED_PASS_ROUNDS = 5
#: regula-falsi rounds of the unchunked lane's rate at a decode batch (``_shared_lane_rate``)
SHARED_LANE_ROUNDS = 4
#: Newton rounds of the extension passes' size per evaluation inside that root (warm-started)
SHARED_LANE_NEWTON = 1
#: prompt points an open loop's brief λ(B) curve is computed on (``_curve_model``): a longer empirical law
#: is grouped to this many for the curve alone (the rate's own state reads every point)
CURVE_PROMPT_POINTS = 64


@dataclass(frozen=True, kw_only=True)
class _Tables:
    """Cost-model grids per budget row ``k``. The rows of one model share one batch grid; a stack of models
    (:func:`stack_models`) keeps each model's grid in its rows."""

    batch: FloatArray  # (nk, nb) decode-batch grid of each row
    budget_left: FloatArray  # (nk, nb) chunk budget C(B) per token budget
    mixed_s: FloatArray  # (nk, nb, nf) iteration time at chunk = CHUNK_FRACTIONS · C(B) (unchunked: nf = 1)
    prompt_prefill_s: FloatArray  # (nk, ni) prefill-only pass of each prompt point (unchunked; NaN chunked)
    #: (nk, len(SHARED_PASS_GRID)) what one prefill-only pass of n prompts of the mean length saves against n
    #: passes of one, in passes of one: n − T(n) / T(1) (unchunked, open loops; 0 closed loops, NaN chunked).
    #: A pass of n prompts of the law costs n·E[t_pre] less that many E[t_pre]: relative, so that it stays
    #: positive where E[t_pre] < T(1) (a MoE's prompt touches more experts the longer it is: t_pre concave)
    pass_saving_s: FloatArray
    #: True when all rows share the first row's grid (one model), which allows a plain binary search
    shared_grid: bool = False
    #: rows with their own grids (a stack): every row's grid points, sorted and merged (u,), and per row how
    #: many of its own points are at or below each merged one, after a leading 0 (nk, u + 1)
    merged_grid: FloatArray | None = None
    merged_count: NDArray[np.intp] | None = None

    @staticmethod
    def merged(batch: FloatArray) -> tuple[FloatArray, NDArray[np.intp]]:
        """``merged_grid`` and ``merged_count`` of the row grids ``batch`` (nk, nb)."""
        grid = np.unique(batch)
        count = np.zeros((batch.shape[0], grid.size + 1), dtype=np.intp)
        for k, row in enumerate(batch):
            count[k, 1:] = np.searchsorted(row, grid, side="right")
        return grid, count

    def _locate(self, b: FloatArray, k: NDArray[np.intp]) -> tuple[NDArray[np.intp], FloatArray]:
        """Grid cell ``i0`` and position ``a`` in it of each ``b`` in its row's grid (b and k broadcast)."""
        nb = self.batch.shape[1]
        if self.shared_grid:  # one model: every row has the same grid
            grid = self.batch[0]
            i0 = np.minimum(np.maximum(np.searchsorted(grid, b, side="right") - 1, 0), nb - 2)
            g0, g1 = grid[i0], grid[i0 + 1]
        else:
            if self.merged_grid is None or self.merged_count is None:
                count = np.sum(b[..., None] >= self.batch[k], axis=-1)
            else:
                # the row's points at or below b are its points at or below the last merged point ≤ b: one
                # binary search in the merged grid and a table look-up, where comparing b with every point
                # of its row costs a pass per point (NaN, which no point is below, counts none)
                j = np.searchsorted(self.merged_grid, b, side="right")
                count = self.merged_count[k, np.where(np.isnan(b), 0, j)]
            i0 = np.minimum(np.maximum(count - 1, 0), nb - 2)
            g0, g1 = self.batch[k, i0], self.batch[k, i0 + 1]
        return i0, np.minimum(np.maximum((b - g0) / np.maximum(g1 - g0, 1e-12), 0.0), 1.0)

    def decode(self, b: FloatArray, budget: NDArray[np.intp] | int = 0) -> FloatArray:
        """Decode-only iteration time at batch ``b`` in the rows ``budget`` (leading axes of ``b``)."""
        b = np.asarray(b, dtype=np.float64)
        k = np.asarray(budget, dtype=np.intp)
        # (its own shape: the look-ups below broadcast it against the batch's indices)
        k = k.reshape(k.shape + (1,) * (b.ndim - k.ndim))
        i0, a = self._locate(b, k)
        return self.mixed_s[k, i0, 0] * (1.0 - a) + self.mixed_s[k, i0 + 1, 0] * a

    def segments(self, b: FloatArray, budget: NDArray[np.intp] | int = 0) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The iteration time as a function of the chunk tokens at decode batch ``b`` (shape (n,)), per row:
        (value at each chunk-fraction segment's start (n, nf − 1), slope along it, 1 / chunk budget (n, 1)).
        Linear in the batch between grid rows, piecewise linear in the chunk fraction."""
        b = np.asarray(b, dtype=np.float64)
        k = np.asarray(budget, dtype=np.intp)  # the look-ups below broadcast it against the batch's indices
        r0, a = self._locate(b, k)
        a = a[:, None]
        rows = self.mixed_s[k, r0] * (1.0 - a) + self.mixed_s[k, r0 + 1] * a  # (n, nf)
        c_left = self.budget_left[k, r0] * (1.0 - a[:, 0]) + self.budget_left[k, r0 + 1] * a[:, 0]
        slope = np.diff(rows, axis=1) / np.diff(CHUNK_FRACTIONS)
        offset = rows[:, :-1] - slope * CHUNK_FRACTIONS[:-1]
        return offset, slope, (1.0 / np.maximum(c_left, 1.0))[:, None]

    @staticmethod
    def at_segments(seg: tuple[FloatArray, FloatArray, FloatArray], chunk_tokens: FloatArray) -> FloatArray:
        """Iteration time of ``chunk_tokens`` (n, k) prefill tokens on the rows of :meth:`segments`."""
        offset, slope, inv_c = seg
        frac = np.minimum(np.asarray(chunk_tokens) * inv_c, 1.0)  # chunk tokens are never negative
        # the segment of each fraction, 0 … nf − 2 (as a right-sided search of the inner breakpoints): the
        # breakpoints are powers of two, so it is the binary exponent e of frac = m·2^e (m in [1/2, 1)) plus
        # nf − 2, clipped; at the size of these arrays a search is ~2× slower than the whole rest of this
        j = np.frexp(frac)[1]
        j += _LAST_SEGMENT
        np.maximum(j, 0, out=j)
        np.minimum(j, _LAST_SEGMENT, out=j)
        j[frac <= 0.0] = 0
        j += (np.arange(offset.shape[0], dtype=j.dtype) * offset.shape[1])[:, None]
        return np.take(offset, j) + np.take(slope, j) * frac

    def mixed(self, b: FloatArray, chunk_tokens: FloatArray, budget: NDArray[np.intp] | int = 0) -> FloatArray:
        """Iteration time with decode batch ``b`` (shape (n, 1)) and ``chunk_tokens`` prefill tokens (n, k),
        under the token budget of index ``budget`` (shape (n,) or a scalar)."""
        return self.at_segments(self.segments(np.asarray(b, dtype=np.float64)[..., 0], budget), chunk_tokens)


@dataclass(frozen=True, kw_only=True)
class SteadyState:
    """The per-replica operating point at arrival rate ``rate_per_s`` (arrays over a grid of rates)."""

    rate_per_s: FloatArray
    batch: FloatArray
    mean_iteration_s: FloatArray
    decode_iteration_s: FloatArray
    prefill_utilization: FloatArray
    mixed_iteration_rate_per_s: FloatArray
    iteration_rate_per_s: FloatArray
    #: per input point: the prompt's own prefill time (its chunk iterations) [s], shape (nr, ni)
    own_prefill_s: FloatArray
    #: per mixed-iteration kind: time and share of mixed iterations, shapes (nr, k); chunked, k = 3 · ni: a
    #: full chunk, the prompt's last chunk alone, and topped up with the next prompt's first tokens
    mixed_kind_s: FloatArray
    mixed_kind_weight: FloatArray
    queue_wait_s: FloatArray
    residual_s: FloatArray
    stable: NDArray[np.bool_]
    #: the budget row of each state (see ``AggregatedModel.budgets``)
    budget_index: NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))


def _unit_interval(x: float) -> float:
    """``x`` clipped to [0, 1]: ``float(np.clip(x, 0, 1))`` of a scalar (NaN kept), without numpy's cost."""
    return min(max(float(x), 0.0), 1.0)


def _stable_branch(st: SteadyState) -> NDArray[np.bool_]:
    """The points of a batch grid on the stable, increasing branch of λ(B)."""
    lam = st.rate_per_s
    ok = st.stable & np.isfinite(lam)
    return ok & (lam >= np.maximum.accumulate(np.where(ok, lam, -np.inf)))


def take_states(st: SteadyState, idx: NDArray[np.intp] | NDArray[np.bool_]) -> SteadyState:
    """The states of rows ``idx`` (indices or a mask)."""
    n = st.batch.shape[0]
    return SteadyState(**{k: (v[idx] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v)
                          for k, v in st.__dict__.items()})


def concat_states(parts: list[SteadyState]) -> SteadyState:
    """The rows of several states of one model, one after the other."""
    return SteadyState(**{k: np.concatenate([p.__dict__[k] for p in parts]) for k in parts[0].__dict__})


class AggregatedModel:
    """Closed-form model of one replica of an aggregated deployment."""

    def __init__(self, problem: ServingProblem, token_budgets: FloatArray | None = None,
                 tabulate: bool = True) -> None:
        """``token_budgets``: tabulate several token budgets at once (the chunk-budget search); the
        deployment's own ``token_budget`` is used otherwise. States of budget ``k`` are computed with
        ``budget=k``; the single-budget methods (``steady_state``, closed loops) use index 0.
        ``tabulate=False`` leaves the cost-model grid to the caller: pass ``table_inputs()`` to
        ``mixed_step_latency_s`` (batched with other work on the same GPU) and hand the results to
        ``set_tables``."""
        dep = problem.deployment
        assert isinstance(dep, AggregatedDeployment)
        self.problem = problem
        self.dep = dep
        self.budgets = np.atleast_1d(np.asarray(
            [dep.token_budget] if token_budgets is None else token_budgets, dtype=np.float64))
        w = problem.workload
        self.ctx = CostContext(model=problem.model, gpu=dep.gpu, engine=problem.engine,
                               weight_dtype=problem.weight_dtype, kv_dtype=problem.kv_dtype,
                               parallelism=dep.parallelism)
        self.hit = w.prefix_cache_hit_fraction
        self.in_values = w.input_tokens.values
        self.in_weights = w.input_tokens.weights
        self.prompt_compute = np.maximum(np.round(self.in_values * (1.0 - self.hit)), 1.0)
        self.out_values = w.output_tokens.values
        self.out_weights = w.output_tokens.weights
        mean_out = w.output_tokens.mean
        self.mean_decode_steps = max(mean_out - 1.0, 0.0)
        if self.mean_decode_steps <= 0.0:
            # the state of the balance equations is the decode batch B = λ·(E[O] − 1)·τ̄, identically 0
            # here: λ is then undetermined by B and the λ(B) curve has no stable branch to stand on
            raise UnsupportedConfiguration(
                "every request generates a single token (prefill only): the aggregated model's steady state "
                "is that of its decode batch, which such a workload never forms; give outputs above one "
                "token, or evaluate it disaggregated",
                field="workload.output_tokens", mean_output_tokens=mean_out,
            )
        self.mean_prompt_compute = float(np.dot(self.prompt_compute, self.in_weights))
        scv = float(np.dot(self.prompt_compute**2, self.in_weights)) / self.mean_prompt_compute**2 - 1.0
        self.prompt_scv = max(scv, 0.0)
        #: the prompt points in order of length
        self.prompt_order = np.argsort(self.in_values, kind="stable")
        #: requests triggered by completions (a closed loop): they arrive while decode iterations run
        self.closed_loop = w.arrival.kind == "closed_loop"
        # mean context of a running decode: its prompt plus, on average over its decode life, half its output
        # (length-biased: long outputs are seen decoding more often)
        self.decode_context = w.input_tokens.mean + w.output_tokens.second_moment / (2.0 * max(mean_out, 1.0))
        max_context = int(w.input_tokens.max + w.output_tokens.max)
        self.plan = memory_plan(self.ctx, max_context_tokens=max(max_context, 1))
        if not self.plan.fits:
            raise ModelDoesNotFit(
                f"{problem.model.id} ({problem.weight_dtype}) does not fit on {dep.gpu.id} with "
                f"tp={dep.parallelism.tp}, pp={dep.parallelism.pp}: {self.plan.weight_bytes_per_gpu / 1e9:.1f} GB of "
                f"weights per GPU against {(self.plan.memory_bytes - self.plan.reserved_bytes_per_gpu) / 1e9:.1f} GB "
                "usable", weight_bytes_per_gpu=self.plan.weight_bytes_per_gpu,
                usable_bytes_per_gpu=self.plan.memory_bytes - self.plan.reserved_bytes_per_gpu,
            )
        # a running sequence holds its prompt and the tokens it has generated: on average over the batch
        # ``decode_context`` (the reference simulation's time-averaged KV per running sequence: 1641 tokens
        # for the crosscheck's lognormal lengths, against 1631 here and 1533 for E[I] + E[O] / 2)
        self.kv_batch_cap = self.plan.kv_capacity_tokens / max(self.decode_context, 1.0)
        #: variance / mean² of that KV over the running sequences (``workload.held_kv_scv``)
        self.kv_scv = held_kv_scv(w, self.decode_context)
        self.batch_cap = float(min(dep.max_batch_size, self.kv_batch_cap))
        #: per budget row: the batch cap and the KV-cache batch cap (rows of a stack differ)
        self.cap_k = np.full(self.budgets.size, self.batch_cap)
        self.kv_cap_k = np.full(self.budgets.size, self.kv_batch_cap)
        if self.plan.kv_capacity_tokens < w.input_tokens.max + 1:
            raise ModelDoesNotFit(
                f"the KV cache of one replica holds {self.plan.kv_capacity_tokens} tokens, less than the longest "
                f"prompt ({int(w.input_tokens.max)} tokens)", kv_capacity_tokens=self.plan.kv_capacity_tokens,
            )
        self._grid = sorted_unique(np.concatenate([[0.0], geometric_grid(1.0, max(self.batch_cap, 1.0),
                                                                         NUM_BATCH_POINTS)]))
        if tabulate:
            # both grids in one pass of the cost model (its time is mostly per operator, not per point)
            self.set_tables(*mixed_step_latency_many(self.ctx, self.table_inputs()))

    # -- the cost-model grid --------------------------------------------------------------------------------
    @property
    def _chunk_fractions(self) -> FloatArray:
        """The chunk fractions tabulated. Unchunked, a prompt is never beside decodes: only the decode-only
        iterations (fraction 0, ``_Tables.decode``) are read, and the prefill-only passes of a lock-step
        cohort's groups of prompts (``_unchunked_cohort``, at batch 0) when the workload can lock step (a
        closed loop of fixed lengths)."""
        w = self.problem.workload
        lockable = (w.arrival.kind == "closed_loop" and w.input_tokens.values.size == 1
                    and w.output_tokens.values.size == 1)
        return CHUNK_FRACTIONS if self.dep.chunked_prefill or lockable else CHUNK_FRACTIONS[:1]

    def table_inputs(self) -> tuple[dict[str, FloatArray | float], dict[str, FloatArray | float]]:
        """Keyword arguments of ``mixed_step_latency_s`` for the (budget × batch × chunk) grid of mixed
        iterations and for each prompt point's prefill-only pass."""
        grid = self._grid
        budget_left = np.maximum(self.budgets[:, None] - grid[None, :], 1.0)  # (nk, nb)
        chunk = self._chunk_fractions[None, None, :] * budget_left[:, :, None]
        # a chunk's earlier KV: the cached prefix plus the chunk's offset in its prompt, averaged over the
        # prompt tokens of every chunk (token-weighted: a chunk's attention work grows with its tokens times
        # its offset), over the prompt distribution: its long prompts are the ones split into chunks
        cached = self.hit * float(np.dot(self.in_values, self.in_weights)) + self._mean_chunk_offset(
            budget_left)[:, :, None]
        seqs = np.maximum(1.0, chunk / self.mean_prompt_compute)
        mixed = dict(decode_batch=grid[None, :, None], decode_context_tokens=self.decode_context,
                     prefill_tokens=chunk, prefill_cached_tokens=cached * (chunk > 0), prefill_sequences=seqs)
        if self.dep.chunked_prefill:
            # chunked, a prompt is never a pass of its own (``prompt_prefill_s`` is read only unchunked): one
            # placeholder point instead of one per prompt point (0.92 → 0.77 ms for a 248-point trace)
            prompt = dict(decode_batch=0.0, decode_context_tokens=0.0, prefill_tokens=1.0,
                          prefill_cached_tokens=0.0, prefill_sequences=1.0)
        elif self.closed_loop:  # (a closed loop's lane costs each prompt its own pass: ``_unchunked``)
            prompt = dict(decode_batch=0.0, decode_context_tokens=0.0, prefill_tokens=self.prompt_compute,
                          prefill_cached_tokens=np.round(self.in_values * self.hit), prefill_sequences=1.0)
        else:
            # each prompt point's own pass, then passes of n prompts of the mean length (``pass_saving_s``)
            cached = self.hit * float(np.dot(self.in_values, self.in_weights))
            n = SHARED_PASS_GRID
            prompt = dict(decode_batch=0.0, decode_context_tokens=0.0,
                          prefill_tokens=np.concatenate([self.prompt_compute, n * self.mean_prompt_compute]),
                          prefill_cached_tokens=np.concatenate([np.round(self.in_values * self.hit),
                                                                np.full(n.size, cached)]),
                          prefill_sequences=np.concatenate([np.ones(self.prompt_compute.size), n]))
        return mixed, prompt

    def _mean_chunk_offset(self, chunk_budget: FloatArray) -> FloatArray:
        """Token-weighted mean offset [tokens] of a prefill chunk in its prompt's computed part, for chunks of
        ``chunk_budget`` tokens (any shape): a prompt of ``Lp`` tokens is cut into ``n = ⌈Lp / C⌉`` chunks,
        the j-th (j = 0 … n − 1) starting at ``j·C``, the last one holding the ``Lp − (n − 1)·C`` left."""
        c = np.maximum(np.asarray(chunk_budget, dtype=np.float64), 1.0)[..., None]
        lp = self.prompt_compute
        n = np.ceil(lp / c)
        last = lp - (n - 1.0) * c
        # full chunks: Σ_{j<n−1} C·(j·C) = C²·(n − 1)(n − 2)/2; the last chunk: last·(n − 1)·C
        weighted = c * c * (n - 1.0) * (n - 2.0) / 2.0 + last * (n - 1.0) * c
        return (weighted @ self.in_weights) / self.mean_prompt_compute

    def set_tables(self, mixed_s: FloatArray, prompt_prefill_s: FloatArray) -> None:
        grid = self._grid
        nk = self.budgets.size
        budget_left = np.maximum(self.budgets[:, None] - grid[None, :], 1.0)
        shape = (nk, grid.size, self._chunk_fractions.size)
        # chunked: NaN, which a reader of the unchunked prompt passes would carry into its answer visibly
        ni = self.prompt_compute.size
        if self.dep.chunked_prefill:
            prompt, saving = np.full(ni, np.nan), np.full(SHARED_PASS_GRID.size, np.nan)
        else:
            passes = np.broadcast_to(np.asarray(prompt_prefill_s, dtype=np.float64), (ni,)) if (
                self.closed_loop) else np.asarray(prompt_prefill_s, dtype=np.float64)
            prompt, shared = passes[:ni], passes[ni:]
            # a closed loop's lane does not read it: zeros
            saving = (np.zeros(SHARED_PASS_GRID.size) if self.closed_loop or not shared[0] > 0
                      else np.clip(SHARED_PASS_GRID - shared / shared[0], 0.0, SHARED_PASS_GRID - 1.0))
        self.tables = _Tables(batch=np.broadcast_to(grid, (nk, grid.size)).copy(), budget_left=budget_left,
                              mixed_s=np.broadcast_to(mixed_s, shape).copy(),
                              prompt_prefill_s=np.broadcast_to(prompt, (nk, prompt.size)).copy(),
                              pass_saving_s=np.broadcast_to(saving, (nk, saving.size)).copy(),
                              shared_grid=True)

    def shared_pass_ratio(self) -> float:
        """Unchunked: the cost of one prefill pass of two prompts of the mean (computed) length over two
        passes of one. The scheduler prefills the prompts that wait together; the closed form costs each its
        own pass, which overstates the lane's load where this is well below 1 (short prompts, whose pass is
        the weights' read: 0.51 at 32 tokens for Llama-3.1-8B on an H100, 0.98 at 2048). 1 chunked."""
        if self.dep.chunked_prefill:
            return 1.0
        if "_shared_pass" not in self.__dict__:
            cached = self.hit * float(np.dot(self.in_values, self.in_weights))
            tokens = self.mean_prompt_compute + cached
            t = prefill_latency_s(self.ctx, prompt_tokens=np.array([tokens, tokens]),
                                  batch_size=np.array([1, 2]), cached_tokens=cached)
            self.__dict__["_shared_pass"] = float(t[1] / (2.0 * t[0])) if t[0] > 0 else 1.0
        return self.__dict__["_shared_pass"]

    # -- steady state ---------------------------------------------------------------------------------------
    # The fixed point is solved backwards: for a decode batch B every balance equation is explicit in λ
    # (B = λ·D·τ̄ with τ̄ = 1 / (λ·k + (1 − λ·k·τ_m)/τ_d), k mixed iterations per request), so one vectorized
    # pass over a grid of B gives the whole λ(B) curve; a requested λ (or a closed loop's N) is then
    # interpolated on it and the state recomputed at that B.
    def steady_state(self, rate_per_s: FloatArray, arrival_scv: float, wait_scale: float = 1.0) -> SteadyState:
        """Operating point at each rate. ``wait_scale`` < 1 thins the traffic a new request queues behind:
        in a closed loop of N clients an arrival sees the other N − 1 (the arrival theorem of mean-value
        analysis, Reiser and Lavenberg, J. ACM 27(2), 1980), so the caller passes (N − 1)/N."""
        lam = np.atleast_1d(np.asarray(rate_per_s, dtype=np.float64))
        b_grid, lam_grid, ok = self._curve(wait_scale)
        top = lam_grid[ok][-1] if np.any(ok) else 0.0
        b = np.interp(np.minimum(lam, top), lam_grid[ok], b_grid[ok]) if np.any(ok) else np.zeros_like(lam)
        st = self._at_batch(b, arrival_scv, wait_scale, rate_per_s=lam)
        # a rate up to the stable branch's top has a stable state on the curve; this one, at the batch
        # interpolated between two of its points, is that state to the interpolation's error, which can
        # put its lane over the limit where the lane is busy in every iteration (2026-12-06: 1-token prompts,
        # 2-token outputs, Llama-3.1-70B tp4 on A100s, at 0.9 of the saturation rate: u = 1.011 between two
        # curve points of u = 1 ± 1e-8, and the rate came out infeasible). The curve decides
        stable = (lam <= top * (1.0 + 1e-9)) & (st.batch <= self.batch_cap * (1.0 + 1e-9)) & np.isfinite(
            st.rate_per_s)
        return SteadyState(**{**st.__dict__, "stable": stable})

    def _curve(self, wait_scale: float = 1.0, whole: bool = False
               ) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
        """λ over a grid of decode batches B (the stable, increasing branch), per queue-thinning factor.

        An open loop reads only the rates and the stability off the curve (its state is computed again at
        its own rate): its curve states are brief (``_at_batch``), which took the benchmark's 248-point trace
        curve from 1.57 to 1.24 ms (2026-12-06), and are computed on at most ``CURVE_PROMPT_POINTS`` prompt
        points (``_curve_model``: that call 30.25 → 25.37 M instructions, 2026-12-07; 40 traces of 300–3000
        samples at 0.3–0.95 of saturation answered within 0.18 %, their saturation rates within 0.005 %).
        A closed loop's root reads the whole states (``whole``, ``_curve_state``)."""
        cache = self.__dict__.setdefault("_curve_cache", {})
        if wait_scale not in cache or (whole and cache[wait_scale][4]):
            cap = max(self.batch_cap, 1e-3)
            b = np.concatenate([[0.0], geometric_grid(min(1e-3, cap), cap, CURVE_POINTS)])
            brief = not self.closed_loop and not whole
            # (unchunked, the prompt points' passes are table columns: the curve reads them all)
            src = self._curve_model() if brief and self.dep.chunked_prefill else self
            st = src._refined_edge(b, src._at_batch(b, 1.0, wait_scale, brief=brief), wait_scale, brief)
            cache[wait_scale] = (st.batch, st.rate_per_s, _stable_branch(st), st, brief)
        return cache[wait_scale][:3]

    def _curve_model(self) -> AggregatedModel:
        """This model, or a shallow copy of it on a prompt law of at most ``CURVE_PROMPT_POINTS`` points,
        grouped in order of length as :meth:`LengthDistribution.tail_refined` groups (each group at its
        weighted mean, so E[Lp] is kept)."""
        if self.prompt_compute.size <= CURVE_PROMPT_POINTS:
            return self
        law = LengthDistribution(values=self.prompt_compute, weights=self.in_weights).tail_refined(
            CURVE_PROMPT_POINTS)
        coarse = copy.copy(self)
        coarse.__dict__.pop("_curve_cache", None)
        coarse.prompt_compute, coarse.in_weights = law.values, law.weights
        return coarse

    def _refined_edge(self, b: FloatArray, st: SteadyState, wait_scale: float, brief: bool = False
                      ) -> SteadyState:
        """The states ``st`` of the batch grid ``b`` with the end of the stable branch located between its two
        grid points: the grid steps by ~30 % in B, and the saturation rate is the top of the branch, so
        ``EDGE_ROUNDS`` rounds of ``EDGE_POINTS`` points narrow the last step to 1/EDGE_POINTS^rounds of
        itself. Each round evaluates only its new points (a state depends on its own batch alone), against
        the branch's running maximum of λ up to the last stable grid point."""
        ok = _stable_branch(st)
        last = int(np.flatnonzero(ok)[-1]) if np.any(ok) else -1
        if last < 0 or last == b.size - 1:
            return st
        lo, hi = float(b[last]), float(b[last + 1])
        top = float(np.max(st.rate_per_s[: last + 1][ok[: last + 1]]))
        found: list[SteadyState] = []
        for _ in range(EDGE_ROUNDS):
            pts = np.linspace(lo, hi, EDGE_POINTS + 2)[1:-1]
            sub = self._at_batch(pts, 1.0, wait_scale, brief=brief)
            lam = sub.rate_per_s
            fine = sub.stable & np.isfinite(lam)
            good = fine & (lam >= np.maximum(top, np.maximum.accumulate(np.where(fine, lam, -np.inf))))
            # the leading run of stable points: the edge lies after its last one
            k = (int(np.flatnonzero(~good)[0]) if not np.all(good) else good.size) - 1
            if k < 0:
                hi = float(pts[0])
                continue
            found.append(take_states(sub, np.array([k])))
            lo, hi = float(pts[k]), (float(pts[k + 1]) if k + 1 < pts.size else hi)
        if not found:
            return st
        merged = concat_states([st, *found])
        return take_states(merged, np.unique(merged.batch, return_index=True)[1])

    def _curve_state(self, wait_scale: float) -> SteadyState:
        """The steady states along the stable branch of the curve (Poisson-like arrivals)."""
        self._curve(wait_scale, whole=True)
        _, _, ok, st, _ = self.__dict__["_curve_cache"][wait_scale]
        return take_states(st, ok)

    def _at_batch(self, b: FloatArray, arrival_scv: float, wait_scale: float,
                  rate_per_s: FloatArray | None = None, budget: NDArray[np.intp] | int = 0,
                  brief: bool = False) -> SteadyState:
        """The states at decode batches ``b``; ``brief``: the balance alone (rates, utilization, iteration
        rates, stability), the per-prompt and per-kind laws and the waits left empty (chunked; ``_curve``)."""
        if self.dep.chunked_prefill:
            return self._chunked(b, arrival_scv, wait_scale, rate_per_s, budget, brief)
        return self._unchunked(b, arrival_scv, wait_scale, rate_per_s, budget, brief)

    def states_at_batch(self, b: FloatArray, budget: NDArray[np.intp] | int = 0, arrival_scv: float = 1.0,
                        wait_scale: float = 1.0) -> SteadyState:
        """Steady states at decode batches ``b`` (1-D) under the token budgets of index ``budget`` (one per
        point, or a scalar), their rates solved from the balance equations: the optimizers walk these."""
        b = np.atleast_1d(np.asarray(b, dtype=np.float64))
        return self._at_batch(b, arrival_scv, wait_scale, None, np.broadcast_to(np.asarray(budget, np.intp), b.shape))

    def _chunked(self, b: FloatArray, arrival_scv: float, wait_scale: float,
                 rate_per_s: FloatArray | None, budget: NDArray[np.intp] | int = 0,
                 brief: bool = False) -> SteadyState:
        tb = self.tables
        lp = self.prompt_compute[None, :]
        w = self.in_weights[None, :]
        steps = self.mean_decode_steps
        # the batch a decoding request runs in: itself plus the others (Poisson for an open loop, the M/G/∞
        # occupancy seen from inside; the other N − 1 clients' share for a closed loop)
        k_idx = broadcast_view(np.asarray(budget, dtype=np.intp), b.shape)
        cap = self.cap_k[k_idx]
        seen = np.minimum(b * wait_scale + 1.0, np.maximum(cap, 1.0))
        c_left = np.maximum(self.budgets[k_idx] - seen, 1.0)[:, None]
        n_chunks = np.ceil(lp / c_left)
        last = lp - (n_chunks - 1.0) * c_left
        # the iteration time against the chunk tokens at this batch, the same in every pass of the loop below
        seg = tb.segments(seen, k_idx)
        # a full chunk is the whole budget left, whatever the prompt: one column, broadcast. It and each
        # prompt's last chunk alone (below) in one look-up
        t_both = tb.at_segments(seg, np.concatenate([c_left, last], axis=1))
        t_full = np.broadcast_to(t_both[:, :1], n_chunks.shape)
        tau_d = tb.decode(seen, k_idx)
        wv = self.in_weights  # the weighted sums over prompt points below are matrix–vector products
        iters_per_req = n_chunks @ wv
        # the parts of the per-iteration sums that do not move with u
        full_share = iters_per_req - float(np.sum(wv))
        room = np.maximum(c_left - last, 0.0)
        # sequences an iteration can still admit beside the batch (max_num_seqs)
        free_seqs = np.maximum(np.maximum(cap, 1.0) - seen, 1.0)[:, None]
        base_tokens = full_share * c_left[:, 0] + last @ wv
        # a prompt's last chunk leaves budget spare: when other prompts wait as its iteration starts
        # (``_top_up_share``) their tokens fill it, else the iteration runs the short chunk alone. Two
        # iteration kinds, each the same in every pass of the loop below; only their shares move with u
        t_alone = t_both[:, 1:]
        alone_mean = t_alone @ wv
        full_s = full_share * t_full[:, 0]
        # the spare filled when topped up: the prompts that arrived while the chunk ran (at least one,
        # ``_waiting_prompts``), as far as the budget and the batch's free places allow. Their rate is the
        # batch's completion rate through decode-only iterations, B / (E[O − 1]·τ_d): a function of the batch
        # alone, so that a state is the same whether its rate is given or solved for (at most the rate the
        # balance below gives, by the mixed iterations' share; equal where prompts are short)
        lam_b = np.where(b > 0, b / np.maximum(steps * tau_d, 1e-300), 0.0) if steps > 0 else np.zeros(b.shape)
        waiting = _waiting_prompts(lam_b, t_alone)
        spare = np.minimum(room, np.minimum(waiting, free_seqs) * self.mean_prompt_compute)
        spare_tokens = spare @ wv
        t_topped = tb.at_segments(seg, last + spare)
        topped_mean = t_topped @ wv

        def lane(top: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            """(τ_m, mixed iterations per request, λ, u) with a share ``top`` of last chunks topped up."""
            tokens_per_iter = (base_tokens + top * spare_tokens) / iters_per_req
            tau_m = (full_s + alone_mean + top * (topped_mean - alone_mean)) / iters_per_req
            k = self.mean_prompt_compute / tokens_per_iter  # mixed iterations per request
            if rate_per_s is None:
                if steps > 0:
                    denom = steps + b * k * (tau_m / tau_d - 1.0)
                    lam = np.where(denom > 0, (b / tau_d) / np.where(denom > 0, denom, 1.0), np.inf)
                else:
                    lam = np.where(b > 0, np.inf, 0.0)
            else:
                lam = broadcast_view(rate_per_s, b.shape)
            return tau_m, k, lam, lam * k * tau_m

        if self.closed_loop:
            # a closed loop's prompts come at iteration ends, often several at one (the clients whose streams
            # ended together), not as Poisson arrivals: the share topped up is the lane's busy share, as
            # before 2026-12-02. The Poisson law below, tried on the serving benchmarks (all closed loops),
            # moved dense TTFT 18.9 → 19.3 %, vLLM 26.7 → 28.8 %, TensorRT-LLM 20.3 → 21.9 %
            u = np.zeros_like(b)
            for _ in range(CLOSED_LOOP_PASSES):
                u_top = np.minimum(u, MAX_UTILIZATION)
                tau_m, k, lam, u = lane(u_top)
        else:
            e_fixed = (None if rate_per_s is None
                       else np.exp(-broadcast_view(rate_per_s, b.shape)[..., None] * t_alone) @ wv)

            def step(top: FloatArray) -> tuple[FloatArray, tuple[FloatArray, ...]]:
                state = lane(top)
                return _top_up_share(state[3], state[2], t_alone, wv, e_alone=e_fixed), state

            # the share solves top = g(top), g falling (more tokens per iteration, fewer iterations): two
            # plain passes, then secant steps on g(top) − top (to ~1e-4 of u on the crosscheck's curves)
            x0 = np.zeros_like(b)
            g0, _ = step(x0)
            x1 = g0
            g1, state = step(x1)
            for _ in range(TOP_UP_SECANT_STEPS):
                f0, f1 = g0 - x0, g1 - x1
                slope = f1 - f0
                ok = np.isfinite(slope) & (np.abs(slope) > 1e-12)
                x2 = np.where(ok, x1 - f1 * (x1 - x0) / np.where(ok, slope, 1.0), g1)
                x0, g0 = x1, g1
                # NaN to 0 (±inf clip to the bounds)
                x1 = np.clip(np.where(np.isnan(x2), 0.0, x2), 0.0, MAX_UTILIZATION)
                g1, state = step(x1)
            # where the secant has not settled (g steep: short prompts, many to an iteration, whose top-up
            # swings the lane between idle and saturated), bisect: g(top) − top falls, so the root is
            # bracketed by 0 and MAX_UTILIZATION (2026-12-05: 1-token prompts at half the saturation rate
            # were left at top = 0, u = 1, infeasible)
            bad = np.abs(g1 - x1) > TOP_UP_TOLERANCE  # (NaN is not bad: as np.nan_to_num's 0 was not)
            if np.any(bad):
                lo, hi = np.zeros_like(b), np.full(b.shape, MAX_UTILIZATION)
                for _ in range(TOP_UP_BISECTIONS):
                    mid = np.where(bad, 0.5 * (lo + hi), x1)
                    g_mid, _ = step(mid)
                    up = g_mid > mid
                    lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
                x1 = np.where(bad, 0.5 * (lo + hi), x1)
                g1, state = step(x1)
            u_top = x1
            tau_m, k, lam, u = state
        r_mixed = lam * k
        r_dec = np.maximum(1.0 - u, 0.0) / tau_d
        tau_bar = 1.0 / np.maximum(r_mixed + r_dec, 1e-300)
        # the lane keeps up while it is not busy all the time (u, the prompts one after the other) or, busy
        # all the time, while its iterations have budget to spare for the prompt tokens that arrive: every
        # iteration then takes all the prompts waiting, and the lane saturates only when the prompt tokens
        # fill its full chunks, λ·E[Lp] = C / t_full (short prompts, many to an iteration)
        token_load = lam * self.mean_prompt_compute * t_full[:, 0] / c_left[:, 0]
        lane_ok = (u < MAX_UTILIZATION) | ((u <= 1.0 + BUSY_LANE_SLACK) & (token_load < MAX_UTILIZATION))
        stable = lane_ok & (b <= cap * (1.0 + 1e-9)) & np.isfinite(lam)
        if brief:
            # (nr, 0) laws: a reader that expects a point per prompt fails to broadcast rather than read zeros
            none, nan = np.empty((b.size, 0)), np.full(b.shape, np.nan)
            return SteadyState(
                rate_per_s=lam, batch=b, mean_iteration_s=tau_bar, decode_iteration_s=tau_d,
                prefill_utilization=u, mixed_iteration_rate_per_s=r_mixed, iteration_rate_per_s=1.0 / tau_bar,
                own_prefill_s=none,
                mixed_kind_s=none, mixed_kind_weight=none, queue_wait_s=nan, residual_s=nan, stable=stable,
                budget_index=np.array(k_idx))
        topped = u_top[:, None]
        own = (n_chunks - 1.0) * t_full + t_alone + topped * (t_topped - t_alone)
        # iteration-time distribution of the mixed kinds: full chunks, then each prompt's last chunk alone and
        # topped up (three blocks of one column per prompt point)
        kinds_s = np.concatenate([t_full, t_alone, t_topped], axis=1)
        kinds_w = np.concatenate([w * (n_chunks - 1.0), w * (1.0 - topped), w * topped], axis=1) / iters_per_req[:, None]
        # queue for the prefill lane: token work at u / (λ E[Lp]) s per token (Kingman)
        u_c = np.clip(u, 0.0, MAX_UTILIZATION)
        service_mean = np.where(lam > 0, u_c / np.where(lam > 0, lam, 1.0), 0.0)
        u_w = u_c * wait_scale
        if self.closed_loop:
            # a closed loop's requests are triggered by completions, a steady number per iteration end
            # whatever the iteration's length, so they arrive per iteration, not per second: in iterations
            # the lane is busy a share r_m / (r_m + r_d) of them, less than its share u of the time (the
            # mixed iterations are the long ones), and the queue is that of the iteration count
            u_w = np.clip(r_mixed * tau_bar, 0.0, MAX_UTILIZATION) * wait_scale
        renewal = not self.closed_loop and abs(arrival_scv - 1.0) > 1e-12
        # the share of arrivals that find the lane busy: its time share, or the GI/M/1 σ of gamma arrivals
        seen_w = Q.busy_seen_by_arrivals(u_w, arrival_scv) if renewal else u_w
        wq = _kingman_wait(u_w, arrival_scv, self.prompt_scv, service_mean, renewal)
        # Kingman's queue serves the prompts one after the other; the scheduler admits every waiting prompt
        # the budget holds into the next iteration. Where prompts are short against the budget, a prompt
        # that finds the lane busy waits for the mixed iteration in progress to end (its residual,
        # E[τ²] / (2 E[τ]) over the mixed kinds, the weights of ``kinds_w`` as matrix–vector products), and
        # beyond it only for the token backlog the budget cannot take at once: a fluid queue of the prompt
        # tokens at the lane's full-iteration rate C / t_full (``_bulk_wait``). The smaller wait applies
        sq = (full_share * t_full[:, 0] ** 2 + (1.0 - u_top) * ((t_alone * t_alone) @ wv)
              + u_top * ((t_topped * t_topped) @ wv)) / iters_per_req
        mixed_residual = sq / (2.0 * np.maximum(tau_m, 1e-300))
        wq = np.minimum(wq, _bulk_wait(seen_w, mixed_residual, lam * self.mean_prompt_compute * wait_scale,
                                       c_left[:, 0] / t_full[:, 0], arrival_scv, self.prompt_scv,
                                       self.mean_prompt_compute, renewal))
        # arriving mid-iteration: with the prefill lane idle (a time share 1 − u) the new prompt waits for the
        # decode-only iteration in progress, τ_d / 2 on average; with it busy, the rest of the iteration in
        # progress is part of the lane's residual work, already in Kingman's wait (P-K counts the residual
        # service). Only other requests' work can be in progress, hence the same thinning as the queue
        # (gamma arrivals find the lane idle with probability 1 − σ, as the bulk wait above has it busy with
        # σ: with the time share, the TTFT of 5-token prompts under c = 3 fell by 0.2 % from 50 to 100
        # requests/s, σ near 1 rising slower than u; an open loop's u_w is u_c)
        idle = 1.0 - np.minimum(seen_w, 1.0) if renewal else 1.0 - u_c
        residual = np.where(b > 0, tau_d / 2.0, 0.0) * idle * wait_scale
        if self.closed_loop:
            # unless a front end of known, small spread puts it at a fixed phase: a front-end time F after the
            # iteration end that completed its client's last request (``_phase_residual``)
            eng = self.problem.engine
            locked = (np.zeros(b.shape, dtype=bool) if eng.request_overhead_jitter_s is None
                      else eng.request_overhead_jitter_s < 0.5 * tau_d)
            if np.any(locked):
                p_it = np.clip(r_mixed * tau_bar, 0.0, MAX_UTILIZATION)
                tau_mix = (tau_bar - (1.0 - p_it) * tau_d) / np.maximum(p_it, 1e-12)
                phased = _phase_residual(p_it, np.where(p_it > 0, tau_mix, tau_d), tau_d, eng.request_overhead_s)
                residual = np.where(locked & (b > 0), phased * wait_scale, residual)
        return SteadyState(
            rate_per_s=lam, batch=b, mean_iteration_s=tau_bar, decode_iteration_s=tau_d, prefill_utilization=u,
            mixed_iteration_rate_per_s=r_mixed, iteration_rate_per_s=1.0 / tau_bar, own_prefill_s=own,
            mixed_kind_s=kinds_s, mixed_kind_weight=kinds_w, queue_wait_s=wq, residual_s=residual, stable=stable,
            budget_index=np.array(k_idx),
        )

    def _unchunked(self, b: FloatArray, arrival_scv: float, wait_scale: float,
                   rate_per_s: FloatArray | None, budget: NDArray[np.intp] | int = 0,
                   brief: bool = False) -> SteadyState:
        tb = self.tables
        k_idx = broadcast_view(np.asarray(budget, dtype=np.intp), b.shape)
        cap = self.cap_k[k_idx]
        t_pre = tb.prompt_prefill_s[k_idx]  # (n, ni)
        w = self.in_weights[None, :]
        mean_pre = np.add.reduce(w * t_pre, axis=1)
        scv_pre = np.add.reduce(w * t_pre**2, axis=1) / mean_pre**2 - 1.0
        steps = self.mean_decode_steps
        tau_d = tb.decode(np.minimum(b * wait_scale + 1.0, np.maximum(cap, 1.0)), k_idx)
        if self.closed_loop:
            # a closed loop's stall law (``_unchunked_stalls``) costs each prompt its own pass: its balance
            # keeps u = λ·E[t_pre] (the shared passes of its lock-step cohorts are ``_unchunked_cohort``'s)
            saving, ext = None, None
            if rate_per_s is None:
                lam = (np.where(b > 0, b / (steps * tau_d + b * mean_pre), 0.0) if steps > 0
                       else np.zeros_like(b))
            else:
                lam = broadcast_view(np.asarray(rate_per_s, dtype=np.float64), b.shape)
            u = lam * mean_pre
        else:
            # the scheduler prefills every prompt that waits in one pass (up to the token budget), which
            # shares the pass's fixed part (the weights' read) among them (``_shared_lane``)
            # in seconds: the relative saving times E[t_pre] (one model's rows share one table and one
            # E[t_pre], the prompts' law being the same: read as one)
            saving = (tb.pass_saving_s[0] * float(mean_pre[0]) if tb.shared_grid
                      else tb.pass_saving_s[k_idx] * mean_pre[:, None])
            k_cap = np.maximum(self.budgets[k_idx] / max(self.mean_prompt_compute, 1.0), 1.0)
            if rate_per_s is None:
                lam = _shared_lane_rate(b, steps, tau_d, mean_pre, saving, k_cap)
            else:
                lam = broadcast_view(np.asarray(rate_per_s, dtype=np.float64), b.shape)
            stall, u_ext, k_ext = _shared_lane(lam, tau_d, mean_pre, saving, k_cap)
            ext = (u_ext, k_ext)
            finite = np.isfinite(stall)
            u = np.where(finite, stall / (tau_d + np.where(finite, stall, 0.0)), np.maximum(u_ext, 1.0))
        r_dec = np.maximum(1.0 - u, 1e-9) / tau_d
        stable = (u < MAX_UTILIZATION) & (b <= cap * (1.0 + 1e-9))
        if brief:  # an open loop's curve (``_at_batch``): the balance alone; a stall follows an arrival
            none, nan = np.empty((b.size, 0)), np.full(b.shape, np.nan)
            lam_v = broadcast_view(lam, b.shape)
            return SteadyState(
                rate_per_s=lam_v, batch=b, mean_iteration_s=1.0 / r_dec, decode_iteration_s=tau_d,
                prefill_utilization=u, mixed_iteration_rate_per_s=-np.expm1(-lam_v * tau_d) * r_dec,
                iteration_rate_per_s=r_dec, own_prefill_s=none, mixed_kind_s=none, mixed_kind_weight=none,
                queue_wait_s=nan, residual_s=nan, stable=stable, budget_index=np.array(k_idx))
        u_c = np.clip(u, 0.0, MAX_UTILIZATION)
        u_w = u_c * wait_scale
        wq = _kingman_wait(u_w, arrival_scv, scv_pre, mean_pre)
        own = t_pre
        bursty = not self.closed_loop and arrival_scv > 1.0 + 1e-12
        seen = u_c
        if ext is not None:
            # an open loop's prompt does not queue behind the others one by one: it waits for the iteration
            # in progress and rides the next pass with every prompt that arrived during that iteration. Busy
            # (a share u of the time) it waits for the rest of a pass, E[T²] / (2 E[T]), T the passes of k
            # prompts (T(k)² + k·Var(t_pre) in the second moment; Kingman's factor (c_a² + 1) / 2 for bursty
            # arrivals); idle, for the decode iteration (``residual`` below). Its pass then holds the c =
            # λ·E[W] others of its iteration W (length-biased: τ_d with the lane idle, E[T²] / E[T] busy), at
            # T(1 + c) − T(1) more than its own prefill (the first token comes when the whole pass ends)
            u_e, k_e = ext
            lam_v = broadcast_view(lam, b.shape)
            t_e = np.where(lam_v > 0, u_e * k_e / np.where(lam_v > 0, lam_v, 1.0), mean_pre)
            pass_sq = t_e * t_e + k_e * np.maximum(scv_pre, 0.0) * mean_pre**2
            window = (1.0 - u_c) * tau_d + u_c * pass_sq / np.maximum(t_e, 1e-300)
            riders = _co_arrivals(lam_v * wait_scale, window, arrival_scv)
            rider_work = riders * mean_pre - _pass_saving(1.0 + riders, saving)[0]
            # bursty arrivals find the lane busy more often than its time share: the GI/M/1 σ
            # (``queueing.busy_seen_by_arrivals``; Llama-3.1-8B, c = 2 at 0.5 / 0.8 of saturation, TTFT mean
            # −26 / −25 % → −1 / −6 % against the simulation, p99 +6 / +7 → +18 / +9 %). Regular ones keep
            # the time share: their co-riders (``_co_arrivals``) already follow the renewal law, and σ took
            # c = 0.5's mean from −1 to −7 % at 0.8. (An open loop's u_w is u_c.)
            seen = Q.busy_seen_by_arrivals(u_c, arrival_scv) if bursty else u_c
            busy_w = seen if bursty else u_w
            wq = np.where(u_c < MAX_UTILIZATION, busy_w * pass_sq / (2.0 * np.maximum(t_e, 1e-300))
                          * (1.0 + arrival_scv) / 2.0 + np.maximum(rider_work, 0.0), wq)
        # a new prompt waits for the decode iteration in progress (prefills have priority over decodes): when
        # it finds the lane idle, 1 − u of the time (1 − σ for bursty arrivals, as above)
        idle = 1.0 - np.minimum(seen, 1.0)
        residual = np.where(b > 0, tau_d / 2.0, 0.0) * idle * wait_scale
        p_pre, kinds_s, kinds_w = _unchunked_stalls(broadcast_view(lam, b.shape), u_c, tau_d, t_pre, w,
                                                    self.prompt_order, self.closed_loop,
                                                    self.problem.engine.request_overhead_s, saving, ext,
                                                    arrival_scv if not self.closed_loop else 1.0)
        if self.closed_loop:
            # completions come at the ends of decode iterations and their next requests a front-end time F
            # later, λ / r_dec of them per iteration: a prompt waits for the rest of its decode iteration,
            # then shares one prefill-only iteration with the others that arrived in it. When that decode
            # iteration was followed by a stall (probability p_pre) longer than F, the prompt lands in the
            # stall instead and first waits for the rest of it, (X − F)⁺
            f = self.problem.engine.request_overhead_s
            stall = kinds_s - tau_d[:, None]
            late = np.add.reduce(kinds_w * np.maximum(stall - f, 0.0), axis=1) / np.maximum(
                np.add.reduce(kinds_w, axis=1), 1e-300)
            wq = (lam / r_dec * mean_pre + p_pre * late) * wait_scale
            residual = np.where(b > 0, tau_d / 2.0, 0.0) * (1.0 - p_pre) * wait_scale
        # a stream's gap: its decode iteration, then the prefill-only iterations the scheduler runs back to
        # back while prompts wait (every waiting prompt that fits the budget in one, vLLM's unchunked
        # scheduler). Prompts that arrived during the decode iteration start such a busy period, and those
        # arriving during it extend it: P(stall) = 1 − exp(−λ·τ_d), and n prompts' work W stretches to
        # W / (1 − u) on average (the busy period of M/G/1 started by W; exhaustive service with the decode
        # iteration as the vacation, Takagi, "Queueing Analysis" vol. 1, 1991, Sec. 2.3). The mean stall
        # per gap, λ·τ_d·E[t_pre] / (1 − u), is the balance equations' u / (1 − u) decode iterations.
        return SteadyState(
            rate_per_s=lam, batch=b, mean_iteration_s=1.0 / r_dec, decode_iteration_s=tau_d, prefill_utilization=u,
            mixed_iteration_rate_per_s=p_pre * r_dec, iteration_rate_per_s=r_dec,
            own_prefill_s=own.copy(), mixed_kind_s=kinds_s,
            mixed_kind_weight=kinds_w, queue_wait_s=wq, residual_s=residual, stable=stable,
            budget_index=np.array(k_idx),
        )

    # -- closed loop ----------------------------------------------------------------------------------------
    def lockstep(self, batch: FloatArray, clients: float) -> tuple[float, FloatArray] | None:
        """(share, mean TTFT per batch) of requests arriving in lock-step groups in a fixed-length closed
        loop; :meth:`lockstep_points` gives the TTFT law of the groups.

        With every prompt and output the same length, clients that start together finish together and send
        their next requests together: in the deterministic reference simulation the whole loop stays one
        cohort, whose N prompts are prefilled in K budget-full iterations, the k-th share getting its first
        token after k of them (mean (K + 1)/2). Chunked, K = ⌈N·Lp / C⌉ iterations beside the running
        decodes; unchunked, whole prompts in prefill-only iterations of g = ⌊budget / Lp⌋ prompts, K = ⌈N / g⌉.
        Real stacks add jitter (request parsing, tokenization, network) that dissolves part of that phase
        locking; the share that survives is the engine's ``closed_loop_coherence``, fitted by
        ``scripts/fit_engines.py`` on the serving benchmarks. None when it does not apply (open loop, varied
        lengths, a lone client).
        """
        if not self._lockstep_applies(clients):
            return None
        phi = _unit_interval(self.problem.engine.closed_loop_coherence)
        b = np.atleast_1d(np.asarray(batch, dtype=np.float64))
        if not self.dep.chunked_prefill:
            times, weights = self._unchunked_cohort(clients)
            return phi, np.full(b.shape, float(np.dot(times, weights)))
        iterations, t_iter = self._chunked_cohort(b, clients)
        cohort = self.problem.engine.request_overhead_s + t_iter * (iterations + 1.0) / 2.0
        train = self._train_at(b, clients)
        if np.any(train):
            cohort = np.where(train, float(np.mean(self._train(clients).ttft_s)), cohort)
        return phi, cohort

    def lockstep_points(self, batch: float, clients: float) -> tuple[float, FloatArray, FloatArray] | None:
        """(share, TTFTs [s], their weights) of the lock-step cohort at decode batch ``batch``: the k-th
        iteration's prompts get their first token after k iterations, k = 1 … K (at most
        ``LOCKSTEP_POINTS`` points: equal-mass bins of the iterations beyond that); mean as :meth:`lockstep`."""
        if not self._lockstep_applies(clients):
            return None
        phi = _unit_interval(self.problem.engine.closed_loop_coherence)
        if not self.dep.chunked_prefill:
            times, weights = self._unchunked_cohort(clients)
            return phi, times, weights
        if self._train_at(np.array([float(batch)]), clients)[0]:
            # (the orbit's TTFTs repeat every cycle, to the rounding of the time steps)
            times, counts = np.unique(np.round(self._train(clients).ttft_s, 7), return_counts=True)
            return phi, times, counts / counts.sum()
        iterations, t_iter = self._chunked_cohort(np.array([float(batch)]), clients)
        k = _cohort_positions(float(iterations[0]))
        return phi, self.problem.engine.request_overhead_s + float(t_iter[0]) * k, np.full(k.size, 1.0 / k.size)

    def lockstep_itl(self, batch: float, clients: float) -> tuple[float, FloatArray, FloatArray] | None:
        """(share, gap times [s], their weights) of the locked streams of a chunked fixed-length closed loop
        that runs as a train (:meth:`_chunked_train`): decode-only gaps, and the train's mixed iterations a
        stream decodes through. None where the lock keeps the random-phase gaps (no lock, or a cohort)."""
        if not (self.dep.chunked_prefill and self._lockstep_applies(clients)
                and self._train_at(np.array([float(batch)]), clients)[0]):
            return None
        phi = _unit_interval(self.problem.engine.closed_loop_coherence)
        orbit = self._train(clients)
        return phi, orbit.gap_s, orbit.gap_weight

    def _train_at(self, b: FloatArray, clients: float) -> NDArray[np.bool_]:
        """Per decode batch: does a locked chunked loop of ``clients`` run as a train (the decodes run
        through the prefills and the front end's spread is below half a decode iteration), else as one
        cohort? (Also the cohort where the orbit would take more than ``MAX_ORBIT_STEPS`` to step, or has not
        settled, :func:`planner.serving.train.chunked_orbit`.)"""
        eng = self.problem.engine
        n = max(int(round(clients)), 1)
        if (not eng.mixes_prefill_with_decode or eng.request_overhead_jitter_s is None
                or orbit_steps(n, max(int(round(self.mean_prompt_compute)), 1), int(self.dep.token_budget))
                > MAX_ORBIT_STEPS or self._chunked_train(clients) is None):
            return np.zeros(b.shape, dtype=bool)
        return eng.request_overhead_jitter_s < 0.5 * self.tables.decode(b)

    def _train(self, clients: float) -> Orbit:
        """The settled orbit of a loop that runs as a train (``_train_at`` said so)."""
        orbit = self._chunked_train(clients)
        assert orbit is not None
        return orbit

    def _chunked_train(self, clients: float) -> Orbit | None:
        """The periodic orbit of a chunked fixed-length closed loop whose clients started together, when the
        running decodes share every iteration with the prompt chunks and the front end's time does not
        spread (``_train_at``; a spread of an iteration merges the groups' returns back into one cohort,
        ``_chunked_cohort``): :func:`planner.serving.train.chunked_orbit` on this replica's cost model.

        The first wave's prompts fill the first iterations, so the loop splits into groups that get their
        first token one iteration apart, decode together, finish one iteration apart and come back so, a
        front-end time after they finished: a train, which keeps its shape while the returning groups pack
        into the iterations (a group that returns to a free lane gets an iteration of its own prompts, the
        groups behind it share full ones). A stream sees a mixed iteration only while it decodes through a
        train, a few per life.

        Until 2026-12-05 this was a closed form of that orbit that packed every train into budget-full
        iterations beside the mean decode batch, a remainder last. The orbit the reference simulation
        settles into packs the first returning group alone (Qwen3-32B tp2, 16 clients of 512/256 tokens:
        iterations of 1536, 2044, 2042, 2038 and 532 prompt tokens beside 5, 4, 6, 10 and 14 decodes,
        82.6 … 38.2 ms; the closed form had four of ~2034 and one of 64 tokens, so its ITL p99 was a
        decode-only gap, 19.1 against 38.2 ms), and with four clients a group that returns to an idle
        engine is prefilled in two iterations, one request and then the others (TTFT 36.9 and 65.7 ms,
        Llama-3.1-8B; the closed form's one iteration of four gave 65.6 for all)."""
        n = max(int(round(clients)), 1)
        memo = self.__dict__.setdefault("_train_memo", {})
        if n not in memo:  # evaluate asks for the TTFT law and the ITL law of the same orbit
            memo.clear()
            memo[n] = self._train_orbit(n)
        return memo[n]

    def _train_orbit(self, n: int) -> Orbit | None:
        cap = max(int(min(self.batch_cap, n)), 1)
        tau_d = self.tables.decode(np.arange(cap + 1, dtype=np.float64))
        seg = self.tables.segments(np.arange(cap + 1, dtype=np.float64))
        mixed: dict[tuple[int, int], float] = {}

        def mixed_s(b: int, tokens: int) -> float:
            key = (b, tokens)
            if key not in mixed:
                row = tuple(x[b:b + 1] for x in seg)
                mixed[key] = float(self.tables.at_segments(row, np.array([[float(tokens)]]))[0, 0])
            return mixed[key]

        return chunked_orbit(n, max(int(round(self.mean_prompt_compute)), 1),
                             max(int(round(self.mean_decode_steps)) + 1, 1), int(self.dep.token_budget), cap,
                             self.problem.engine.request_overhead_s, lambda b: float(tau_d[b]), mixed_s)

    def _lockstep_applies(self, clients: float | None) -> bool:
        w = self.problem.workload
        phi = _unit_interval(self.problem.engine.closed_loop_coherence)
        return not (clients is None or w.arrival.kind != "closed_loop" or phi <= 0 or clients <= 1.0
                    or w.input_tokens.values.size != 1 or w.output_tokens.values.size != 1)

    def _chunked_cohort(self, b: FloatArray, clients: float) -> tuple[FloatArray, FloatArray]:
        """(iterations K, time of one [s]) of a chunked cohort per batch: K = ⌈N·Lp / C⌉ budget-full
        iterations of C = budget − B prompt tokens beside the B running decodes, equal shares of the prompts
        getting their first token after 1 … K of them, (K + 1)/2 on average.

        Laying the prompts out one by one (the last iteration holds only the remainder, and prompt j ends
        in iteration ⌈(j + 1)·Lp / C⌉) fits the reference simulation's small loops better, but the serving
        benchmarks worse: refitted on them, SGLang's front-end time went from 16 to 89 ms and its in-sample
        TTFT error from 10.1 to 12.1 % (vLLM 25.7 → 25.3 %, TensorRT-LLM 21.7 → 21.9 %), so the budget-full
        iterations stay."""
        c_left = np.maximum(self.dep.token_budget - b, 1.0)
        tokens = clients * self.mean_prompt_compute
        t_iter = self.tables.mixed(b[:, None], np.minimum(tokens, c_left)[:, None])[:, 0]
        return np.ceil(tokens / c_left), t_iter

    def _unchunked_cohort(self, clients: float) -> tuple[FloatArray, FloatArray]:
        """(TTFTs, weights) of an unchunked cohort: K − 1 prefill-only iterations of g whole prompts and a
        last one of the rest (what the scheduler does: a prompt is never split without chunking)."""
        lp = self.mean_prompt_compute
        g = max(float(np.floor(self.dep.token_budget / lp)), 1.0)
        iterations = float(np.ceil(clients / g))
        rest = clients - (iterations - 1.0) * g
        t = self.tables.mixed(np.zeros((2, 1)), np.array([[g * lp], [rest * lp]]))[:, 0]
        overhead = self.problem.engine.request_overhead_s
        if iterations <= 1.0:
            return np.array([overhead + t[1]]), np.array([1.0])
        k = _cohort_positions(iterations - 1.0)
        times = np.concatenate([overhead + t[0] * k, [overhead + t[0] * (iterations - 1.0) + t[1]]])
        weights = np.concatenate([np.full(k.size, (clients - rest) / clients / k.size), [rest / clients]])
        return times, weights

    def cohort_gaps(self, clients: float) -> tuple[FloatArray, FloatArray]:
        """(gap times [s], weights) of an unchunked cohort's streams: all N decode together, so a gap is a
        decode-only iteration at the batch N (the cap at most), except the first after a stream's first
        token, which waits for the cohort's passes after its own: the k-th group's K − k more, the rest of
        the cohort's prefill. One gap in E[O − 1] is such a stall, so a request's decode takes the cohort's
        whole prefill beyond its own TTFT, and its end-to-end latency is the cohort's cycle: the last
        group's TTFT plus the decode steps.

        Until 2026-12-06 the gaps were the steady state's decode-only iteration, at the batch the
        random-phase balance gives (72.9 sequences for 64 clients, Llama-3.1-8B 512/256 tokens on the
        crosscheck's engine), without the stall: the two errors nearly cancelled where outputs are long
        (ITL mean 13.41 against the simulation's 13.49 ms), not where they are short (SGLang's profile,
        Llama-3.1-70B tp4, 64 clients of 1000/16 tokens: E[e2e] 2.67 s against a cycle of 4.09 s)."""
        times, weights = self._unchunked_cohort(clients)
        tau = float(self.tables.decode(np.array([min(clients, max(self.batch_cap, 1.0))]))[0])
        steps = self.mean_decode_steps
        stall = float(np.max(times)) - times
        late = (stall > 0) & (weights > 0)
        if steps <= 0 or not np.any(late):
            return np.array([tau]), np.array([1.0])
        share = min(1.0 / steps, 1.0)  # of a stream's gaps, its first
        return (np.concatenate([[tau], tau + stall[late]]),
                np.concatenate([[1.0 - share * float(np.sum(weights[late]))], share * weights[late]]))

    def mean_ttft_s(self, st: SteadyState, clients: float | None = None) -> FloatArray:
        w = self.in_weights[None, :]
        ttft = self.problem.engine.request_overhead_s + st.queue_wait_s + st.residual_s + np.sum(
            w * st.own_prefill_s, axis=1)
        lock = self.lockstep(st.batch, clients) if clients is not None else None
        if lock is not None:
            phi, t_lock = lock
            finite = np.isfinite(t_lock)
            ttft = np.where(finite, (1.0 - phi) * ttft + phi * np.where(finite, t_lock, 0.0), ttft)
        return ttft

    def mean_e2e_s(self, st: SteadyState, clients: float | None = None) -> FloatArray:
        return self.mean_ttft_s(st, clients) + self.mean_decode_steps * self.stream_gap_s(st, clients)

    def stream_gap_s(self, st: SteadyState, clients: float | None = None,
                     lockstep: bool = True) -> FloatArray:
        """A decoding stream's mean gap: the mean iteration, except in a closed loop, where the iterations a
        prompt makes mixed (or stalls) carry the other N − 1 clients' share of the batch, so a stream sees
        them (N − 1)/N as often as the decode-only ones (``stream_mixed_share``, as evaluate's ITL law); and
        for a fixed-length loop's lock-step share (:meth:`lockstep`), unless ``lockstep`` is False (a
        saturated loop, whose TTFT is its queue's), that share's own gaps."""
        p = np.minimum(st.mixed_iteration_rate_per_s / st.iteration_rate_per_s, 1.0)
        seen = stream_mixed_share(p, clients if self.closed_loop else None)
        ratio = np.divide(seen, p, out=np.ones_like(p), where=p > 0)
        gap = st.decode_iteration_s + ratio * (st.mean_iteration_s - st.decode_iteration_s)
        if not (lockstep and self._lockstep_applies(clients)):
            return gap
        # the lock-step share's streams see other gaps, as evaluate's ITL law has them (2026-12-05: until then
        # only the TTFT mixed them in, and an unchunked 64-client loop of 1000/16 tokens closed at
        # λ·E[e2e] = 0.89 N): an unchunked cohort's streams decode-only iterations (the cohort is prefilled
        # while none of them decodes), a chunked train's the mixed iterations they decode through
        phi = _unit_interval(self.problem.engine.closed_loop_coherence)
        if not self.dep.chunked_prefill:
            values, weights = self.cohort_gaps(float(clients))  # type: ignore[arg-type]
            return (1.0 - phi) * gap + phi * float(np.dot(values, weights))
        train = self._train_at(st.batch, float(clients))  # type: ignore[arg-type]
        if not np.any(train):
            return gap
        orbit = self._train(float(clients))  # type: ignore[arg-type]
        return np.where(train, (1.0 - phi) * gap + phi * orbit.mean_gap_s(), gap)

    def saturation_rate_per_s(self, arrival_scv: float = 1.0, wait_scale: float = 1.0) -> float:
        """Largest stable per-replica arrival rate (the top of the λ(B) curve)."""
        _, lam, ok = self._curve(wait_scale)
        return float(lam[ok][-1]) if np.any(ok) else 0.0

    def closed_loop_state(self, clients: float, arrival_scv: float) -> tuple[float, SteadyState]:
        """(per-replica throughput, its steady state) of ``clients`` closed-loop clients: the root of
        ``λ·E[e2e](λ) = N`` and the state there (queue thinned to the other N − 1 clients).

        The λ(B) curve gives the root to within 0.3 % by linear interpolation (1280 closed loops of the
        serving benchmarks: median 0.06 %). The states at ``CLOSED_LOOP_OFFSETS`` around that estimate, one
        vectorized pass, bracket it; the root is interpolated between the two that do, and so is the state,
        field by field, over 0.5 % of λ (a second-order error of ~1e-5, below the curve's own interpolation
        of the batch). Outside the bracket (it does not happen on the benchmarks), the candidates move to the
        secant through the outer two and look again; after ``CLOSED_LOOP_ROUNDS`` passes, the state at the
        last estimate."""
        scale = max(clients - 1.0, 0.0) / clients
        st = self._curve_state(scale)
        # the curve was tabulated for Poisson-like arrivals; Kingman's wait scales with (c_a² + c_s²)
        st = dataclasses.replace(st, queue_wait_s=st.queue_wait_s * (arrival_scv + self.prompt_scv)
                                 / (1.0 + self.prompt_scv))
        pops = np.maximum.accumulate(st.rate_per_s * self.mean_e2e_s(st, clients))
        top = float(st.rate_per_s[-1])
        if clients >= pops[-1]:  # saturated: the extra clients queue
            return top, self.steady_state(np.array([top]), arrival_scv, scale)
        lam0 = float(np.interp(clients, pops, st.rate_per_s))
        for _ in range(CLOSED_LOOP_ROUNDS):
            cand = sorted_unique(np.clip(lam0 * (1.0 + CLOSED_LOOP_OFFSETS), 0.0, top))
            sts = self.steady_state(cand, arrival_scv, scale)
            n = cand * self.mean_e2e_s(sts, clients)
            inside = np.flatnonzero((n[:-1] <= clients) & (n[1:] >= clients) & (n[1:] > n[:-1]))
            if inside.size:
                j = int(inside[0])
                w = (clients - n[j]) / (n[j + 1] - n[j])
                lam = float(cand[j] + w * (cand[j + 1] - cand[j]))
                between = _between_states(sts, j, w, lam)
                if _interpolation_holds(between):
                    return lam, between
                # the two states straddle a kink (the batch reaching its cap, 2026-12-06: Qwen3-32B fp8 tp2,
                # 128 clients of 1024/128 tokens on 128 places, whose interpolated mixed iterations averaged
                # 153.8 ms against the 148.8 ms of its mean iteration and X·E[e2e] came to 1.024 N): the
                # exact root below
                lam0 = lam
                break
            if cand.size < 2 or n[-1] == n[0]:
                break
            # not bracketed: the candidates move to the secant through the outer two, and look again
            lo, hi = float(cand[0]), float(cand[-1])
            lam0 = float(np.clip(lo + (clients - n[0]) * (hi - lo) / (n[-1] - n[0]), 0.0, top))
        # where E[e2e] climbs steeply (a prefill lane near saturation) the secant passes can stop short. Until
        # 2026-12-05 their last estimate was the answer: chunked Qwen3.5-35B-A3B on two GB200 (tp2, dp2), a
        # 1500-sample trace, 99 % prefix-cache hits, 257 clients closed at λ·E[e2e] = 266 clients
        def excess(rate: float) -> float:
            at = self.steady_state(np.array([rate]), arrival_scv, scale)
            return rate * float(self.mean_e2e_s(at, clients)[0]) - clients

        lam = Q.root_on_curve(excess, st.rate_per_s, pops, clients, lam0)
        return lam, self.steady_state(np.array([lam]), arrival_scv, scale)


def iteration_kinds(model: AggregatedModel, st: SteadyState) -> tuple[FloatArray, FloatArray]:
    """(iteration times (n, k) [s], their shares of a stream's gaps (n, k)) of states ``st``: the
    decode-only iteration first, then the mixed (chunked) or stalled (unchunked) kinds. Chunked, the full
    chunks of every prompt point are one iteration time (a full chunk does not depend on the prompt) and
    are one atom: the same quantiles, a third fewer points to sort."""
    p_mixed = np.minimum(st.mixed_iteration_rate_per_s / st.iteration_rate_per_s, 1.0)
    kind_w, kind_s = st.mixed_kind_weight, st.mixed_kind_s
    if not model.dep.chunked_prefill:
        kind_w = kind_w / np.sum(kind_w, axis=1, keepdims=True)
    ni = model.in_values.size
    if model.dep.chunked_prefill and kind_s.shape[1] == 3 * ni and ni > 1:
        kind_s = np.concatenate([kind_s[:, :1], kind_s[:, ni:]], axis=1)
        kind_w = np.concatenate([np.sum(kind_w[:, :ni], axis=1, keepdims=True), kind_w[:, ni:]], axis=1)
    return (np.concatenate([st.decode_iteration_s[:, None], kind_s], axis=1),
            np.concatenate([(1.0 - p_mixed)[:, None], p_mixed[:, None] * kind_w], axis=1))


def _interpolation_holds(st: SteadyState, tolerance: float = 1e-3) -> bool:
    """Whether an interpolated state (one row) is one: its mixed kinds' mean time is the mixed iteration
    time its mean iteration implies, τ̄ = (1 − p)·τ_d + p·τ_m, to ``tolerance`` (interpolated field by field
    over 0.5 % of λ the two agree to ~1e-5, unless the two states lie on either side of a kink)."""
    p = float(st.mixed_iteration_rate_per_s[0] / st.iteration_rate_per_s[0])
    w = st.mixed_kind_weight[0]
    if p <= 1e-9 or w.size == 0 or float(np.sum(w)) <= 0.0:
        return True
    kinds = float(np.dot(st.mixed_kind_s[0], w)) / float(np.sum(w))
    tau_m = (float(st.mean_iteration_s[0]) - (1.0 - p) * float(st.decode_iteration_s[0])) / p
    return abs(kinds - tau_m) <= tolerance * max(abs(tau_m), 1e-300)


#: candidate rates around the λ(B) curve's estimate of a closed loop's throughput, relative to it, and the
#: most passes that move them to a secant estimate when they do not bracket the root
#: (``AggregatedModel.closed_loop_state``)
CLOSED_LOOP_OFFSETS = np.array([-0.015, -0.01, -0.005, 0.0, 0.005, 0.01, 0.015])
CLOSED_LOOP_ROUNDS = 3


def _between_states(st: SteadyState, j: int, w: float, rate_per_s: float) -> SteadyState:
    """The state a fraction ``w`` of the way from row ``j`` of ``st`` to row ``j + 1`` (one row), at
    ``rate_per_s``: float fields interpolated, stability of both, the budget row of the first."""
    n = st.batch.shape[0]
    out = {}
    for k, v in st.__dict__.items():
        if isinstance(v, np.ndarray) and v.shape[:1] == (n,):
            if v.dtype == np.bool_:
                out[k] = v[j:j + 1] & v[j + 1:j + 2]
            elif v.dtype.kind == "f":  # np.issubdtype(v.dtype, np.floating), cheaper
                out[k] = v[j:j + 1] + w * (v[j + 1:j + 2] - v[j:j + 1])
            else:
                out[k] = v[j:j + 1]
        else:
            out[k] = v
    out["rate_per_s"] = np.array([rate_per_s])
    return SteadyState(**out)


#: iterations after a completion that ``_phase_residual`` follows at most (a front end of many iterations
#: is at a random phase by then)
PHASE_ITERATIONS = 24


def _top_up_share(u: FloatArray, lam: FloatArray, t_alone: FloatArray, weights: FloatArray,
                  e_alone: FloatArray | None = None) -> FloatArray:
    """Probability that a prompt's last chunk is topped up: another prompt waits when its iteration starts.

    Taking the lane as an M/G/1 queue of prompts, a departing prompt leaves it empty with probability
    1 − u (departures see what arrivals see, and arrivals see the time average: PASTA). It leaves it empty
    exactly when nobody waited as its last chunk started and nobody arrived during that chunk's iteration,
    which then ran alone (``t_alone`` per prompt point, Poisson arrivals at ``lam``). So nobody waited with
    probability (1 − u) / E[exp(−λ·t_alone)], and the share topped up is one minus that; it is below u
    (the share this law replaces) by the arrivals that come too late for the chunk. At ρ = 0.9 of
    Qwen3-32B's chunked capacity it is 0.60 against u = 0.77, and the mixed iterations carry 1570 prompt
    tokens on average, the reference simulation's 1545 (2026-12-02, 12000 requests; with u, 1687)."""
    if e_alone is None:
        e_alone = np.exp(-np.asarray(lam, dtype=np.float64)[..., None] * t_alone) @ weights
    return np.clip(1.0 - (1.0 - u) / np.maximum(e_alone, 1e-300), 0.0, np.minimum(u, MAX_UTILIZATION))


def _waiting_prompts(lam: FloatArray, t_alone: FloatArray) -> FloatArray:
    """Prompts waiting when a prompt's last chunk is topped up, per batch (rows of ``lam``, their arrival
    rate) and prompt point (columns of ``t_alone``, the chunk's iteration alone): those that arrived while
    the iteration before ran, a Poisson number of mean x = λ·t given that there is one, x / (1 − e^(−x))
    (1 for rare arrivals, ~x for frequent ones). This is the prompt's view (an iteration of many prompts is
    seen by many), so the tokens per mixed iteration come out long by that bias where x is near 1. Open
    loops of many prompts per iteration remain under-served: ``_top_up_share``, an M/G/1 law of one prompt
    at a time, falls towards 0 when x is large (the lane empties only with probability e^(−x)), so with
    4-token prompts the closed form saturates at ~301 requests/s where the reference simulation serves 353
    (2026-12-05; a bulk-service share, 1 − E[e^(−x)], fixed that but broke the M/G/1 law's agreement on the
    crosscheck grid, and was not kept).

    Until 2026-12-05 one prompt at most topped a chunk up, which capped the lane at about two prompts per
    iteration where prompts are short against the budget (the scheduler admits every waiting prompt the
    budget holds): with 4-token prompts and 250 clients, 193 requests/s against the reference simulation's
    415 (Llama-3.1-8B on one H100, budget 8192)."""
    x = np.maximum(np.where(np.isfinite(lam), lam, 0.0)[:, None] * t_alone, 1e-9)
    return np.maximum(x / -np.expm1(-x), 1.0)


def _bulk_wait(busy: FloatArray, residual: FloatArray, token_rate: FloatArray, capacity: FloatArray,
               arrival_scv: float, prompt_scv: float, mean_prompt: float, renewal: bool = False
               ) -> FloatArray:
    """Mean wait for the prefill lane when each iteration admits every waiting prompt its budget holds.

    With the lane busy (share ``busy`` of the arrivals' view) a prompt waits for the mixed iteration in
    progress, ``residual`` = E[τ²] / (2 E[τ]) over the mixed kinds; the tokens that do not fit in the next
    iteration queue as a fluid at the lane's capacity ``capacity`` [tokens/s] (a full chunk's tokens over
    its iteration time) under ``token_rate`` [tokens/s] of prompt work, Kingman's wait for a request of
    ``mean_prompt`` tokens (Kingman, "The single server queue in heavy traffic", Proc. Cambridge Phil.
    Soc. 57, 1961). ``renewal``: open gamma arrivals (``busy`` is then the share of them that find the lane
    busy, ``queueing.busy_seen_by_arrivals``), whose fluid queue waits by ``_kingman_wait``'s GI/M/1 law."""
    rho = np.clip(token_rate / np.maximum(capacity, 1e-300), 0.0, MAX_UTILIZATION)
    return busy * residual + _kingman_wait(rho, arrival_scv, prompt_scv,
                                           mean_prompt / np.maximum(capacity, 1e-300), renewal)


def _kingman_wait(u: FloatArray, arrival_scv: float, service_scv: float, service_s: FloatArray,
                  renewal: bool = False) -> FloatArray:
    """Kingman's mean wait of a G/G/1 queue at utilization ``u`` (below 1): u / (1 − u)·(c_a² + c_s²) / 2
    times the mean service time (Kingman, Proc. Cambridge Phil. Soc. 57, 1961). ``renewal``: the arrivals
    are an open renewal (gamma) stream of squared CV ``arrival_scv``, and the wait is the GI/M/1
    interpolation of ``queueing.renewal_wait_factors`` (exact for M/G/1 and GI/M/1; Kingman's is exact only
    as u → 1: bursty arrivals of c = 2 at u = 0.5 wait 1.34× its figure, regular ones of c = 0.5 0.69×)."""
    wait = u / (1.0 - u) * (arrival_scv + service_scv) / 2.0 * service_s
    if renewal:
        wait = wait * np.nan_to_num(Q.renewal_wait_factors(u, arrival_scv)[0], nan=1.0)
    return wait


def _phase_residual(p_mixed: FloatArray, tau_m: FloatArray, tau_d: FloatArray, front_end_s: float) -> FloatArray:
    """E[the rest of the decode-only iteration in progress; the request lands in one] for a closed loop's
    request that reaches the scheduler ``front_end_s`` = F after the iteration end that completed its
    client's last request, the iterations after it mixed independently with probability ``p_mixed`` (the
    lane's share of iterations) and lasting ``tau_m`` (mixed, on average) or ``tau_d`` (decode-only).

    After i mixed and j decode-only iterations (probability C(i + j, i)·p^i·(1 − p)^j) the next one starts
    at o = i·τ_m + j·τ_d; when o ≤ F < o + τ_d and it is decode-only, the request waits o + τ_d − F for it
    to end. Landing in a mixed iteration it waits behind the lane's work instead, which the queue counts.
    A uniform phase (the default, for a front end whose spread is not known) gives τ_d / 2 for the lane's
    idle share of the time."""
    p = np.asarray(p_mixed, dtype=np.float64)
    tm = broadcast_view(np.asarray(tau_m, dtype=np.float64), p.shape)
    td = broadcast_view(np.asarray(tau_d, dtype=np.float64), p.shape)
    f = float(front_end_s)
    out = np.zeros(p.shape)
    for i in range(PHASE_ITERATIONS):
        reached_any = False
        for j in range(PHASE_ITERATIONS - i):
            start = i * tm + j * td
            reach = start <= f
            if not np.any(reach):
                break
            reached_any = True
            prob = math.comb(i + j, i) * p**i * (1.0 - p) ** j * (1.0 - p)
            out += np.where(reach & (start + td > f), prob * (start + td - f), 0.0)
        if not reached_any:
            break
    return out


def stream_mixed_share(p_mixed: FloatArray | float, clients: float | None) -> FloatArray:
    """The share of a stream's gaps that are mixed (or stalled) iterations, when ``p_mixed`` of the iterations
    are. In a closed loop of N clients the prompt that makes an iteration mixed belongs to a client that is
    not decoding, so the iteration carries the other N − 1 clients' share of the batch, (N − 1)/N of the
    mean (the arrival theorem): per stream it weighs that much less. An open loop's newcomer is one of an
    unbounded population: no thinning."""
    p = np.asarray(p_mixed, dtype=np.float64)
    if clients is None or clients <= 0:
        return p
    s = max(clients - 1.0, 0.0) / clients
    return p * s / np.maximum(p * s + 1.0 - p, 1e-300)


#: most prompts that start one stall of an unchunked stream (the Poisson tail beyond is one more kind)
MAX_STALL_PROMPTS = 12
#: groups of equal mass the prompt points are merged into as one-prompt stalls
STALL_PROMPT_GROUPS = 8
#: most Newton rounds for the share of a closed loop's returning prompts that start stalls (the rest return
#: into them), and the residual, relative to the returns per decode end, at which a row stops
STALL_RETURN_ROUNDS = 12
STALL_RETURN_TOLERANCE = 1e-13
#: edges of the probability bins each stall's law is represented by (one point at each bin's middle)
STALL_BIN_EDGES = np.array([0.0, 0.25, 0.5, 0.75, 0.9, 0.97, 0.995, 1.0])
_STALL_Z = special.ndtri((STALL_BIN_EDGES[:-1] + STALL_BIN_EDGES[1:]) / 2.0)
_STALL_MASS = np.diff(STALL_BIN_EDGES)


#: n = 0 … MAX_STALL_PROMPTS and log n!: the Poisson weights p_0 … p_12 of a stall's prompt count
_STALL_N = np.arange(0.0, MAX_STALL_PROMPTS + 1.0)[None, :]
_STALL_LOG_FACTORIAL = special.gammaln(_STALL_N + 1.0)


#: renewal terms of ``_co_arrivals`` (the n-th later arrival within the half window, n = 1 … this)
CO_ARRIVAL_TERMS = 64
_CO_ARRIVAL_N = np.arange(1.0, CO_ARRIVAL_TERMS + 1.0)


def _co_arrivals(lam: FloatArray, window: FloatArray, arrival_scv: float) -> FloatArray:
    """Expected other arrivals in the window of length ``window`` around an arrival, half before and half
    after it: λ·W for Poisson arrivals; for regular gamma inter-arrival times of squared CV c² < 1 (shape
    k = 1/c²), twice the renewal function at W/2, m(t) = Σ_n P(Gamma(n·k, 1/(λk)) ≤ t) (Cox, "Renewal
    Theory", 1962, Sec. 4.1): regular arrivals (c² < 1) rarely come within one iteration of each other
    (Llama-3.1-8B unchunked at 0.8 of saturation, c = 0.5: TTFT mean +15 % against the simulation with
    λ·W, −2 % with this). Bursty ones (c² > 1) keep λ·W: their clumps put many more prompts in a pass,
    but as a wait of the lane's busy share that tail was twice the simulation's at the p99 (c = 2:
    +131 %). What λ·W missed of their mean (−24 … −26 %) was the busy share an arrival sees, the GI/M/1 σ
    above the time share (``_unchunked``, 2026-12-05: −1 … −7 %)."""
    if arrival_scv >= 1.0 - 1e-12:
        return lam * window
    k = 1.0 / max(arrival_scv, 1e-6)
    x = (lam * k * window / 2.0)[:, None]
    return 2.0 * np.add.reduce(special.gammainc(_CO_ARRIVAL_N[None, :] * k, x), axis=1)


def _stall_counts(a: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(P(N = 0 … 12) (n, 13), P(N ≥ 1), P(N > 12), E[N | N > 12] (each (n, 1))) of a Poisson count N of
    mean ``a`` (n, 1)."""
    pois = np.exp(_STALL_N * np.log(np.maximum(a, 1e-300)) - a - _STALL_LOG_FACTORIAL)
    p_stall = -np.expm1(-a)
    tail = np.maximum(p_stall - np.add.reduce(pois[:, 1:], axis=1, keepdims=True), 0.0)
    # E[N | N > 12] = (a − Σ_{n≤12} n·p_n) / P(N > 12)
    beyond = a - np.add.reduce(_STALL_N * pois, axis=1, keepdims=True)
    tail_n = np.where(tail > 1e-300, beyond / np.maximum(tail, 1e-300), MAX_STALL_PROMPTS + 1.0)
    return pois, p_stall, tail, tail_n


def _stall_passes(mean_pre: FloatArray, saving: FloatArray | None) -> FloatArray:
    """One pass of n = 2 … 12 prompts of the law (n, 11), and the mean prefill E[t_pre] in a last column (the
    tail's marginal cost): n·E[t_pre] − s(n) (``saving`` None: one pass per prompt, s = 0)."""
    several = _STALL_N[:, 2:] * mean_pre
    if saving is not None:
        several = several - _several_savings(saving, np.full(mean_pre.shape[0], np.inf))
    return np.concatenate([several, mean_pre], axis=1)


def _tail_pass(tail_n: FloatArray, several: FloatArray, saving: FloatArray | None) -> FloatArray:
    """One pass of the Poisson tail's conditional count of prompts (n, 1)."""
    n = np.maximum(tail_n, 1.0)
    return n * several[:, -1:] - (0.0 if saving is None else _pass_saving(n, saving)[0])


def _renewal_stall_counts(a: FloatArray, arrival_scv: float) -> tuple[FloatArray, FloatArray, FloatArray,
                                                                       FloatArray]:
    """:func:`_stall_counts` for bursty gamma arrivals (squared CV ``arrival_scv`` > 1, shape k = 1/c²) in a
    window of a = λ·τ expected arrivals. None arrive with the stationary renewal process's probability
    P₀ = λ·E[(X − τ)⁺] = Q(k + 1, kλτ) − λτ·Q(k, kλτ) (Q the regularized upper incomplete gamma function;
    e^{−a} for k = 1). Given one or more, the count is geometric of the same mean, m = a / (1 − P₀): after
    an arrival the next comes within the window with a probability near P(X < τ) (the clump goes on), the
    count's tail heavier than the Poisson's. Llama-3.1-8B unchunked, c = 2 at 0.8 of saturation, ITL p90 /
    p99 against the simulation (two seeds): Poisson counts 44 / 186 ms, a zero-truncated Poisson of mean m
    34 / 196, this 33 / 218, the simulation 28 / 263 and 25 / 257 ms."""
    k = 1.0 / arrival_scv
    p0 = np.clip(special.gammaincc(k + 1.0, k * a) - a * special.gammaincc(k, k * a), 0.0, 1.0)
    m = np.maximum(a / np.maximum(1.0 - p0, 1e-300), 1.0)
    q = 1.0 - 1.0 / m
    pois = np.concatenate([p0, (1.0 - p0) * (1.0 - q) * q ** (_STALL_N[:, 1:] - 1.0)], axis=1)
    return pois, 1.0 - p0, (1.0 - p0) * q**MAX_STALL_PROMPTS, MAX_STALL_PROMPTS + m


def _stall_starts(counts: tuple[FloatArray, FloatArray, FloatArray, FloatArray], g_work: FloatArray,
                  g_mass: FloatArray, keep: NDArray[np.bool_], several: FloatArray,
                  saving: FloatArray | None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(P(stall), the work that starts it (n, k), its law given a stall (n, k)) when a Poisson number of
    prompts (``counts``: :func:`_stall_counts` of its mean) arrives during a decode iteration: one prompt (its
    prefill in the prompt groups ``g_work``, of masses ``g_mass``), 2 … 12 prompts in one pass (``several``,
    :func:`_stall_passes`), and the tail beyond."""
    pois, p_stall, tail, tail_n = counts
    p_stall = p_stall[:, 0]
    work = np.concatenate([g_work[:, keep], several[:, :-1], _tail_pass(tail_n, several, saving)], axis=1)
    # the law of a stall given that there is one (its weights sum to 1: consumers weigh it by p_stall); with
    # no arrivals it is the limit a → 0, one prompt
    counts_w = np.concatenate([pois[:, 1:], tail], axis=1)
    lone = np.zeros_like(counts_w)
    lone[:, 0] = 1.0
    counts_w = np.where(p_stall[:, None] > 1e-300, counts_w / np.maximum(p_stall, 1e-300)[:, None], lone)
    mass = np.concatenate([counts_w[:, :1] * g_mass[keep], counts_w[:, 1:]], axis=1)
    return p_stall, work, mass


def _pass_saving(n: FloatArray, saving: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(s(n), ds/dn) per row: the saving of one pass of ``n`` prompts (n, ...) against n passes of one,
    linear in n between the points of ``SHARED_PASS_GRID`` (s(1) = 0; the last point's saving beyond it).
    ``saving``: the rows' tables (n, len(SHARED_PASS_GRID)), or one table (len(SHARED_PASS_GRID),) that
    every row shares (one model's rows: ``np.interp``, a fraction of the rows' gathers' time)."""
    g = SHARED_PASS_GRID
    n = np.minimum(np.maximum(n, 1.0), g[-1])
    j = np.minimum(g.searchsorted(n, side="right") - 1, g.size - 2)
    if saving.ndim == 1:
        return np.interp(n, g, saving), (saving[1:] - saving[:-1])[j] / _SHARED_PASS_STEP[j]
    # the rows' cells by flat index (row·len(g) + j): a fraction of take_along_axis's time on these sizes
    at = j + (np.arange(n.shape[0]) * g.size).reshape((-1,) + (1,) * (n.ndim - 1))
    flat = saving.ravel()
    lo = flat[at]
    slope = (flat[at + 1] - lo) / _SHARED_PASS_STEP[j]
    return lo + slope * (n - g[j]), slope


_SHARED_PASS_STEP = np.diff(SHARED_PASS_GRID)


def _pass_time(k: FloatArray, mean_pre: FloatArray, saving: FloatArray) -> FloatArray:
    """One prefill-only pass of ``k`` prompts of the law (k may be fractional: a mean), k·E[t_pre] − s(k)."""
    return k * mean_pre - _pass_saving(k, saving)[0]


def _extension_pass_size(lam: FloatArray, mean_pre: FloatArray, saving: FloatArray, k_cap: FloatArray,
                         k0: FloatArray | None = None, rounds: int = SHARED_PASS_ROUNDS) -> FloatArray:
    """Mean prompts k per prefill-only pass of a stall after its first, at rates ``lam`` (Poisson): such a
    pass takes the prompts that arrived during the pass before, at least one, k = g(λ·T(k)) with
    g(x) = x / (1 − e^{−x}), T(k) = k·E[t_pre] − s(k): 1 at light load, λ·T(k) when the passes run back to
    back. g(λT(k)) − k is convex in k (g and T are), so Newton's steps from below (``k0``, at most the root)
    rise to its smallest root without passing it; where it has none (the marginal prompt costs more than
    1/λ) or the root is past ``k_cap`` (the token budget), k = k_cap and the lane is over its capacity."""
    k = np.ones_like(lam) if k0 is None else np.minimum(np.maximum(k0, 1.0), k_cap)
    for _ in range(rounds):
        s, ds = _pass_saving(k, saving)
        x = np.maximum(lam * (k * mean_pre - s), 1e-12)
        em = -np.expm1(-x)  # 1 − e^{−x}
        g = x / em
        dg = (em - x * (1.0 - em)) / (em * em)
        f = g - k
        df = dg * lam * (mean_pre - ds) - 1.0
        step = np.where(df < 0.0, k - f / np.where(df < 0.0, df, -1.0), k_cap)
        k = np.clip(np.where(f > 0.0, step, k), 1.0, k_cap)
    return k


def _shared_lane(lam: FloatArray, tau_d: FloatArray, mean_pre: FloatArray, saving: FloatArray,
                 k_cap: FloatArray, k0: FloatArray | None = None, rounds: int = SHARED_PASS_ROUNDS,
                 several: FloatArray | None = None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(mean stall per decode gap [s], the load u_ext that stretches a stall's first pass, the extension
    passes' size) of an unchunked lane at rates ``lam`` (Poisson) whose scheduler prefills the prompts that
    wait in one pass. The λτ_d prompts that arrived during a decode iteration (Poisson) form the first pass,
    W₁ = N·E[t_pre] − s(N) (``_stall_counts``: N = 2 … 12 and the tail's mean); those arriving meanwhile are
    prefilled in passes of k (``_extension_pass_size``) at T(k) / k each, so that the stall is a busy period
    of load u_ext = λ·T(k)/k started by W₁: E[S] = E[W₁] / (1 − u_ext) (Takagi, "Queueing Analysis" vol. 1,
    1991, Sec. 1.2). The lane's busy share is E[S] / (τ_d + E[S]); with no sharing (s = 0) E[W₁] = λτ_d·E[t]
    and u_ext = λ·E[t], and this is the balance u = λ·E[t_pre] of one pass per prompt. ∞ past capacity."""
    a = np.maximum(lam * tau_d, 0.0)[:, None]
    pois, _, tail, tail_n = _stall_counts(a)
    if several is None:
        several = _several_savings(saving, k_cap)
    tail_n = np.minimum(np.maximum(tail_n, 1.0), k_cap[:, None])
    shared = np.add.reduce(pois[:, 2:] * several, axis=1) + tail[:, 0] * _pass_saving(tail_n, saving)[0][:, 0]
    first = np.maximum(a[:, 0] * mean_pre - shared, 0.0)
    k = _extension_pass_size(lam, mean_pre, saving, k_cap, k0, rounds)
    u_ext = lam * _pass_time(k, mean_pre, saving) / k
    stall = np.where(u_ext < 1.0, first / np.maximum(1.0 - u_ext, 1e-300), np.inf)
    return stall, u_ext, k


def _several_savings(saving: FloatArray, k_cap: FloatArray) -> FloatArray:
    """s(min(n, k_cap)) of first passes of n = 2 … 12 prompts, per row (n, 11) (``k_cap`` ∞: uncapped)."""
    n = np.minimum(np.broadcast_to(_STALL_N[:, 2:], (k_cap.size, _STALL_N.size - 2)), k_cap[:, None])
    return _pass_saving(n, saving)[0]


def _shared_lane_rate(b: FloatArray, steps: float, tau_d: FloatArray, mean_pre: FloatArray,
                      saving: FloatArray, k_cap: FloatArray) -> FloatArray:
    """The rate λ at decode batches ``b`` of an unchunked lane with shared passes (``_shared_lane``): the root
    of λ·D·(τ_d + E[S](λ)) = B (B = λ·D·τ̄, the gap a decode iteration and its stall), increasing in λ and
    bracketed by the rate without sharing (one pass per prompt, E[S] larger) and B / (D·τ_d) (no stall).
    Regula falsi with the Illinois step (an end that stays is halved), ``SHARED_LANE_ROUNDS`` rounds, from
    the bracket [λ₀, B / (D·(τ_d + E[S](λ₀)))], λ₀ the rate without sharing."""
    safe = np.maximum(b, 0.0)
    lo = safe / (steps * tau_d + safe * mean_pre)
    k = np.ones_like(b)
    several = _several_savings(saving, k_cap)

    def excess(lam: FloatArray, k: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        # (k warm-started from the low end's, at most the root: a few Newton rounds follow it)
        stall, _, k = _shared_lane(lam, tau_d, mean_pre, saving, k_cap, k, SHARED_LANE_NEWTON, several)
        finite = np.isfinite(stall)
        return np.where(finite, lam * steps * (tau_d + stall) - safe, np.inf), k, stall

    f_lo, k, stall_lo = excess(lo, k)
    f_lo = np.minimum(f_lo, 0.0)  # at most 0 (the rate without sharing), to rounding
    # B / (D·(τ_d + E[S](λ))) falls as λ rises, so at the low end's stall it is past the root: the bracket
    finite = np.isfinite(stall_lo)
    hi = safe / (steps * (tau_d + np.where(finite, stall_lo, 0.0)))
    f_hi, _, _ = excess(hi, k)
    f_hi = np.maximum(f_hi, 0.0)
    side = np.zeros(b.shape, dtype=np.int8)  # which end the last round moved: −1 low, +1 high

    def guess() -> FloatArray:
        # the secant where both ends are finite, else bisection
        sec = np.isfinite(f_hi) & (f_hi > f_lo)
        x = np.where(sec, lo - f_lo * (hi - lo) / np.where(sec, f_hi - f_lo, 1.0), 0.5 * (lo + hi))
        return np.clip(x, lo, hi)

    for _ in range(SHARED_LANE_ROUNDS):
        x = guess()
        fx, k_x, _ = excess(x, k)
        below = fx <= 0.0
        # Illinois: an end kept twice in a row has its value halved
        f_hi = np.where(below & (side < 0), 0.5 * f_hi, f_hi)
        f_lo = np.where(~below & (side > 0), 0.5 * f_lo, f_lo)
        lo, f_lo, k = np.where(below, x, lo), np.where(below, fx, f_lo), np.where(below, k_x, k)
        hi, f_hi = np.where(below, hi, x), np.where(below, f_hi, fx)
        side = np.where(below, -1, 1).astype(np.int8)
    lam = guess()
    return np.where(b > 0, lam, 0.0)


def _unchunked_stalls(lam: FloatArray, u: FloatArray, tau_d: FloatArray, t_pre: FloatArray, w: FloatArray,
                      order: NDArray[np.intp], closed_loop: bool = False, front_end_s: float = 0.0,
                      saving: FloatArray | None = None,
                      ext_passes: tuple[FloatArray, FloatArray] | None = None, renewal_scv: float = 1.0
                      ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(probability that a gap is stalled, stalled gaps [s] (n, k), their weights given a stall (n, k), each
    row summing to 1) of an unchunked stream at rates ``lam``: λ·τ_d prompts (Poisson) arrive during its decode iteration.

    A stall started by work x (the prefill of those prompts) is a busy period of the prefill server, mean
    x / (1 − u) and variance x·λ·E[t²] / (1 − u)³ (the busy period of M/G/1 started by work x, Takagi,
    "Queueing Analysis" vol. 1, 1991, Sec. 1.2): x itself when nothing arrives during it (probability
    e^{−λx}), else x plus a lognormal of the remaining two moments, at the middles of ``STALL_BIN_EDGES``
    (rescaled to keep the mean exactly). x: one prompt's prefill (the prompt points merged into
    ``STALL_PROMPT_GROUPS`` groups of equal mass in ``order``), n = 2 … 12 prompts (n times the mean
    prefill), and the Poisson tail beyond (its conditional mean count).

    ``closed_loop``: a closed loop's requests are triggered by completions, which come at the ends of decode
    iterations, λ / r_dec = λ·τ_d / (1 − u) of them per iteration, and reach the scheduler ``front_end_s``
    later. Those that land in a decode iteration start a stall after it; those that land in a stall (the
    completions of the decode ends a front-end time before it) lengthen it by their prefills, one more
    prefill-only iteration, and start none. No other arrival extends a stall: nothing completes during it."""
    lam = np.asarray(lam, dtype=np.float64)[:, None]
    one_minus_u = np.maximum(1.0 - np.asarray(u, dtype=np.float64), 1.0 - MAX_UTILIZATION)[:, None]
    a = np.maximum(lam * tau_d[:, None], 0.0)
    if closed_loop:
        a = a / one_minus_u
    mean_pre = np.add.reduce(w * t_pre, axis=1, keepdims=True)
    second = np.add.reduce(w * t_pre**2, axis=1, keepdims=True)
    # several prompts that wait together are prefilled in one pass (``saving``: the rows' pass savings)
    several = _stall_passes(mean_pre, saving)
    # one prompt: the prompt points in groups of equal mass (by prompt length), at their mean prefill
    ws = w[0, order] if w.ndim == 2 else w[order]
    groups = np.minimum((np.cumsum(ws) - 0.5 * ws) * STALL_PROMPT_GROUPS, STALL_PROMPT_GROUPS - 1e-9).astype(int)
    g_mass = np.bincount(groups, weights=ws, minlength=STALL_PROMPT_GROUPS)
    # every row's groups in one bincount over (row, group) bins: each bin adds its row's terms in the same
    # order as a bincount of that row alone (a matrix product would round differently with the row count)
    nr = t_pre.shape[0]
    bins = (np.arange(nr)[:, None] * STALL_PROMPT_GROUPS + groups[None, :]).ravel()
    g_work = np.bincount(bins, weights=(t_pre[:, order] * ws).ravel(), minlength=nr * STALL_PROMPT_GROUPS
                         ).reshape(nr, STALL_PROMPT_GROUPS) / np.maximum(g_mass, 1e-300)
    keep = g_mass > 0
    if closed_loop:
        # the streams that finish at a decode iteration's end come back a front-end time F later: those of
        # the decode ends in the window [t0 − F, t0 + X − F) of a stall of length X that starts at t0 land in
        # it and extend it by their prefills (one more prefill-only iteration). Before t0 the decode ends are
        # τ_d apart and none comes during the stall: about min(X, F + τ_d/2) / τ_d of them, a each. Those
        # returns are not in the decode iterations, so fewer prompts start stalls: of the a returns per
        # decode end, a_s start one, where a = a_s + P(stall | a_s)·E[returns into it] (solved below, so that
        # every returning prompt is prefilled once and the balance equations' prefill time holds)
        per_end = a

        cap = front_end_s + tau_d[:, None] / 2.0
        per_work = per_end / np.maximum(tau_d[:, None], 1e-300)

        def returns_into(work: FloatArray) -> FloatArray:
            return per_work * np.minimum(work, cap)

        # the stall-starting work of one prompt (its groups) and of 2 … 12 prompts does not depend on a_s:
        # their capped lengths once, so that a round costs only the Poisson weights (the tail's count moves)
        one_capped = np.add.reduce(g_mass[keep] * np.minimum(g_work[:, keep], cap), axis=1, keepdims=True)
        kind_capped = np.concatenate([one_capped, np.minimum(several[:, :-1], cap)], axis=1)

        def excess(counts: tuple[FloatArray, ...], a_s: FloatArray) -> tuple[FloatArray, FloatArray]:
            # (the prompts per decode end that starters a_s account for, less those there are; its
            # derivative): increasing in a_s. P(stall)·E[returns into it] = Σ_kinds P(kind)·returns_into(its
            # work), with unnormalized Poisson weights p_n, whose derivatives are p_{n−1} − p_n
            pois, _, tail, tail_n = counts
            tail_work = _tail_pass(tail_n, several, saving)
            capped_tail = tail_work >= cap
            capped = (np.add.reduce(pois[:, 1:] * kind_capped, axis=1, keepdims=True)
                      + tail * np.minimum(tail_work, cap))
            # the tail's part: P(N > 12)·cap grows by p_12; uncapped, (a − Σ n·p_n)·E[t] grows by
            # (P(N > 12) + 13·p_12)·E[t]
            p12 = pois[:, -1:]
            d_tail = np.where(capped_tail, p12 * cap, (tail + 13.0 * p12) * mean_pre)
            d_capped = (np.add.reduce((pois[:, :-1] - pois[:, 1:]) * kind_capped, axis=1, keepdims=True)
                        + d_tail)
            return a_s + per_work * capped - per_end, 1.0 + per_work * d_capped

        # its root by Newton's method kept inside a bracket, [0, a] at first, where excess(0) = −a ≤ 0 ≤
        # excess(a); a step that leaves the bracket bisects it instead. It starts where one prompt's mean
        # capped work would put it (the root when stalls are single prompts). Each row stops when its residual
        # is at rounding level, and stays there while the others go on (so a row's answer is the same alone)
        lo, hi = np.zeros_like(a), a.copy()
        x = np.clip(per_end / (1.0 + per_work * one_capped), 0.0, a)
        done = per_end <= 0.0
        counts = None
        for _ in range(STALL_RETURN_ROUNDS):
            counts = _stall_counts(x)
            fx, dfx = excess(counts, x)
            done = done | (np.abs(fx) <= STALL_RETURN_TOLERANCE * per_end)
            if done.all():
                break
            lo, hi = np.where(fx < 0, x, lo), np.where(fx > 0, x, hi)
            step = x - fx / dfx
            inside = (step > lo) & (step < hi)
            x = np.where(done, x, np.where(inside, step, (lo + hi) / 2.0))
            counts = None
        a = x
    elif abs(renewal_scv - 1.0) > 1e-12:
        counts = _renewal_stall_counts(a, renewal_scv)
    else:
        counts = None
    # the Poisson weights at the starters' rate (the last round's, when the rows stopped there)
    p_stall, work, mass = _stall_starts(counts if counts is not None else _stall_counts(a), g_work, g_mass,
                                        keep, several, saving)
    chain = None
    if closed_loop:
        # the returns into the stall (above): Poisson of mean m, each adding one prompt's prefill
        m = returns_into(work)
        q0 = np.exp(-m)
        extra_mean = m * mean_pre
        extra_second = m * second + extra_mean**2
    else:
        # the busy period is the work itself plus what arrives meanwhile: Y = B − x is 0 when nothing
        # arrives during x (probability e^{−λx}) and otherwise has the rest of the mean and second moment;
        # what arrives meanwhile is prefilled in passes of k prompts (``ext_passes``: their load and k,
        # ``_shared_lane``), lumps of work T(k) at the rate λ / k, each T(k)² + k·Var(t_pre) in the second
        # moment: λ·E[t²] with one prompt to a pass
        lumps = lam * second
        if ext_passes is not None:
            load, k_e = (np.asarray(x, dtype=np.float64)[:, None] for x in ext_passes)
            one_minus_u = np.maximum(1.0 - load, 1.0 - MAX_UTILIZATION)
            lumps = load * load * k_e / np.maximum(lam, 1e-300) + lam * np.maximum(second - mean_pre**2, 0.0)
            # where a pass is mostly its fixed part, the extension is a chain of passes of about T(k) each,
            # one after another while anything arrives (probability q = 1 − e^{−λT}): a geometric count,
            # squared coefficient of variation q, where lumps arriving as Poisson overstate it (2026-12-07:
            # 32-token prompts at 0.9 of saturation, ITL p99 103 against the simulation's 77 ms). The two
            # are weighed by the marginal prompt's share of the pass, T'(k)·k / T(k) (1 for passes that
            # are the sum of their prompts, where lumps are the M/G/1 busy period)
            t_e = load * k_e / np.maximum(lam, 1e-300)
            marginal = np.clip((mean_pre - _pass_saving(k_e, saving)[1]) * k_e / np.maximum(t_e, 1e-300),
                               0.0, 1.0)
            chain = (marginal, -np.expm1(-lam * t_e))
        q0 = np.exp(-lam * work)
        extra_mean = work * (1.0 / one_minus_u - 1.0)
        extra_second = work * lumps / one_minus_u**3 + extra_mean**2
    busy = np.maximum(1.0 - q0, 1e-300)
    c_mean, c_second = extra_mean / busy, extra_second / busy
    ratio = np.divide(c_second, c_mean**2, out=np.ones_like(c_mean), where=c_mean > 1e-150)
    if chain is not None:
        ratio = 1.0 + chain[0] * (ratio - 1.0) + (1.0 - chain[0]) * chain[1]
    # the lognormal's points e^{μ + σz} at the bins' middles, rescaled to the mean c_mean: e^{μ} cancels
    spread = np.exp(np.sqrt(np.log1p(np.maximum(ratio - 1.0, 0.0)))[:, :, None] * _STALL_Z)
    pts = spread * (c_mean / np.maximum(np.add.reduce(spread * _STALL_MASS, axis=2), 1e-300))[:, :, None]
    stall = np.concatenate([work[:, :, None], work[:, :, None] + pts], axis=2)
    share = np.concatenate([q0[:, :, None], (1.0 - q0)[:, :, None] * _STALL_MASS], axis=2)
    kinds_s = (tau_d[:, None, None] + stall).reshape(stall.shape[0], -1)
    kinds_w = (mass[:, :, None] * share).reshape(stall.shape[0], -1)
    return p_stall, kinds_s, kinds_w


def unchunked_closed_wait_points(st: SteadyState, i: int, weights: FloatArray, front_end_s: float,
                                 wait_scale: float) -> tuple[FloatArray, FloatArray]:
    """The wait of an unchunked closed loop's prompt beyond the residual iteration, as (values [s], weights)
    points whose weights sum to 1 and whose mean is the state's ``queue_wait_s`` (row ``i``).

    The mechanism of ``_unchunked``'s closed loop, as a law rather than a mean: the prompt shares its
    prefill-only pass with the other prompts that returned during the same decode iteration, a Poisson
    number of mean λ / r_dec (thinned by ``wait_scale``, the N − 1 others), each adding its own prefill
    (``own_prefill_s`` at the prompt points, ``weights``): a compound Poisson sum
    (``queueing.compound_poisson_points``). Independently, when its client's last decode iteration was
    followed by a stall X (probability p_pre, thinned the same way) it lands in that stall a front-end time
    F in and waits (X − F)⁺ for it: the compound sum's independent addend, convolved with it on one
    lattice. An exponential of the same mean, which this replaces, puts the p99 of
    the wait too far out: one shared prompt's prefill has the tail of the prompt lengths, and the number of
    such prompts is small (Qwen3-32B at N = 64: mean 0.3)."""
    lam, r_dec = float(st.rate_per_s[i]), float(st.iteration_rate_per_s[i])
    a = lam / r_dec * wait_scale if r_dec > 0 else 0.0
    p_stall = min(float(st.mixed_iteration_rate_per_s[i]) / r_dec * wait_scale, 1.0) if r_dec > 0 else 0.0
    kinds_w = st.mixed_kind_weight[i]
    rest = np.maximum(st.mixed_kind_s[i] - st.decode_iteration_s[i] - front_end_s, 0.0)
    late = (np.concatenate([[0.0], rest]),
            np.concatenate([[1.0 - p_stall], p_stall * kinds_w / np.sum(kinds_w)]))
    return Q.compound_poisson_points(a, st.own_prefill_s[i], weights, plus=late)


#: most points of a lock-step cohort's TTFT law (equal-mass bins of its iterations beyond that)
LOCKSTEP_POINTS = 64
def _cohort_positions(iterations: float) -> FloatArray:
    """Iterations after which the cohort's shares get their first token: 1 … K, or the centres of
    ``LOCKSTEP_POINTS`` equal-mass bins of them (the same mean, (K + 1)/2)."""
    n = int(iterations)
    if n <= LOCKSTEP_POINTS:
        return np.arange(1.0, n + 1.0)
    return (np.arange(LOCKSTEP_POINTS) + 0.5) * n / LOCKSTEP_POINTS + 0.5


def stack_models(models: list[AggregatedModel]) -> AggregatedModel:
    """One model whose budget rows are all the rows of ``models``, so that a search computes the states of
    many configurations (GPUs, parallelisms, budgets) in one vectorized pass.

    The models must share the workload, the engine and the chunking mode, and have their tables set. The
    stack supports the per-row methods (``states_at_batch``, ``tables``, ``cap_k``); the single-deployment
    ones (``steady_state``, closed loops, ``plan``, ``ctx``) are those of the first model and do not apply.
    ``owner[k]`` is the index in ``models`` of row ``k``; ``local[k]`` its row there."""
    first = models[0]
    out = copy.copy(first)
    out.__dict__.pop("_curve_cache", None)
    out.__dict__.pop("_train_memo", None)
    nb = max(m.tables.batch.shape[1] for m in models)

    def pad(a: FloatArray) -> FloatArray:
        """Repeat a row's last grid point to the common grid length (a zero-width cell is never chosen)."""
        extra = nb - a.shape[1]
        return a if extra == 0 else np.concatenate([a, np.repeat(a[:, -1:], extra, axis=1)], axis=1)

    t = [m.tables for m in models]
    batch = np.concatenate([pad(x.batch) for x in t])
    grid, count = _Tables.merged(batch)
    out.tables = _Tables(batch=batch, budget_left=np.concatenate([pad(x.budget_left) for x in t]),
                         mixed_s=np.concatenate([pad(x.mixed_s) for x in t]),
                         prompt_prefill_s=np.concatenate([x.prompt_prefill_s for x in t]),
                         pass_saving_s=np.concatenate([x.pass_saving_s for x in t]),
                         merged_grid=grid, merged_count=count)
    out.budgets = np.concatenate([m.budgets for m in models])
    out.cap_k = np.concatenate([m.cap_k for m in models])
    out.kv_cap_k = np.concatenate([m.kv_cap_k for m in models])
    out.owner = np.concatenate([np.full(m.budgets.size, i) for i, m in enumerate(models)])
    out.local = np.concatenate([np.arange(m.budgets.size) for m in models])
    return out


def with_row_caps(model: AggregatedModel, rows: NDArray[np.intp], caps: FloatArray) -> AggregatedModel:
    """A model whose budget rows are ``rows`` of ``model`` (a model or a stack; rows may repeat), each capped
    at ``caps`` decode sequences as well (a ``max_batch_size`` below the row's own cap): the cells (budget,
    batch limit) of a search, each searched at its own cap. The cap is all that differs between a budget's
    cells: the states below it are the same, and the batch's fluctuation and the wait for a place in it
    (``batch.slot_wait``) read ``cap_k``. ``owner`` and ``local`` follow the rows (a model's own: 0 and the
    row)."""
    rows = np.asarray(rows, dtype=np.intp)
    out = copy.copy(model)
    out.__dict__.pop("_curve_cache", None)
    out.__dict__.pop("_train_memo", None)
    t = model.tables
    out.tables = _Tables(batch=t.batch[rows], budget_left=t.budget_left[rows], mixed_s=t.mixed_s[rows],
                         prompt_prefill_s=t.prompt_prefill_s[rows], pass_saving_s=t.pass_saving_s[rows],
                         shared_grid=t.shared_grid,
                         merged_grid=t.merged_grid,
                         merged_count=None if t.merged_count is None else t.merged_count[rows])
    out.budgets = model.budgets[rows]
    out.cap_k = np.minimum(model.cap_k[rows], np.asarray(caps, dtype=np.float64))
    out.kv_cap_k = model.kv_cap_k[rows]
    out.owner = getattr(model, "owner", np.zeros(model.budgets.size, dtype=np.intp))[rows]
    out.local = getattr(model, "local", np.arange(model.budgets.size))[rows]
    return out
