"""Disaggregated serving (Splitwise, DistServe): a prefill pool and a decode pool, in closed form.

- Prefill pool: ``P`` workers serving prompts FCFS from one queue, each prompt one prefill pass; an
  M/G/c queue (Allen–Cunneen), service time from the cost model per prompt length. A worker whose
  ``max_batch_size`` is above 1 admits every waiting prompt into one pass (open loops): its gated queue
  (``batched_prefill_wait``) scales the pool's wait, and the passes' shared setup raises its capacity.
- KV transfer: the prompt's KV cache (``kv_cache_bytes_per_token × prompt``) moves from the prefill
  worker's GPUs to the decode worker's GPUs, every TP rank sending its shard in parallel, over NVLink
  (same scale-up domain), the RDMA NIC, or PCIe. Layer-by-layer transfer overlaps with the prefill
  compute (Splitwise Sec. V-C; DistServe Sec. 4.4): only the last layer's share, and whatever the link
  cannot hide behind the compute, adds to TTFT.
- A closed loop of N clients: the prefill pool is the one queue of a closed network whose other stations
  (front end, KV transfer, decode) are delays; its wait comes from mean-value analysis over the N clients
  (``queueing.closed_queue_mva``), which bounds the queue by the population.
- Decode pool: ``D`` workers, decode-only iterations; Little's law ``B = (λ/D)·(E[O] − 1)·τ_d(B)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

from planner.costs.memory import memory_plan
from planner.costs.passes import decode_latency_s, prefill_latency_s
from planner.costs.types import CostContext
from planner.errors import ModelDoesNotFit
from planner.serving import queueing as Q
from planner.serving.batch import decode_elasticity, life_overlap, renewal_peakedness
from planner.serving.grids import geometric_grid
from planner.serving.types import DisaggregatedDeployment, PoolSpec, ServingProblem
from planner.serving.workload import held_kv_scv
from planner.units import DTYPE_BYTES

FloatArray = NDArray[np.float64]
NUM_BATCH_POINTS = 24
#: the closed loop's fixed point (``DisaggregatedModel.closed_loop_prefill``): the factor its bracket widens
#: by at its first step (squared at each next one); Brent's tolerances: ``queueing.ROOT_XTOL``, ``ROOT_RTOL``
BRACKET_FACTOR = 1.05
MAX_UTILIZATION = 0.995
#: per-request hand-off between the pools that layer-wise transfer cannot hide (completion signalling,
#: decode-side block allocation and admission) [s]: Splitwise measured a roughly constant 5 ms of
#: non-overlapped transfer for large prompts on DGX-H100 with 400 Gb/s InfiniBand (Patel et al., ISCA 2024,
#: Sec. VI; shared/data published_measurements.csv SW-022) and 8 ms on DGX-A100 with 200 Gb/s (SW-023,
#: which this constant under-predicts by 3 ms: the part that scales with the link is not separated)
KV_HANDOFF_S = 5e-3


@dataclass(frozen=True, kw_only=True)
class KvLinkChoice:
    link: str
    bandwidth_bytes_per_s: float
    reason: str


def choose_link(dep: DisaggregatedDeployment) -> KvLinkChoice:
    """The link the KV caches travel on, and its aggregate bandwidth from one prefill worker."""
    pre, dec = dep.prefill, dep.decode
    senders = min(pre.parallelism.num_gpus, dec.parallelism.num_gpus)
    same_domain = (pre.gpu.id == dec.gpu.id and pre.parallelism.num_gpus * pre.workers
                   + dec.parallelism.num_gpus * dec.workers <= pre.gpu.scale_up_domain_size)
    link = dep.kv_link
    caveat = ""
    if link == "nvlink" and pre.gpu.id != dec.gpu.id:
        caveat = (f"; caution: NVLink joins GPUs of one scale-up domain, which a {pre.gpu.id} and a {dec.gpu.id} "
                  "pool do not share on any shipping system: costed as requested, at the slower side's bandwidth")
    if link == "auto":
        link = "nvlink" if same_domain else "rdma"
        why = ("both pools fit in one scale-up domain of the same GPU type" if same_domain else
               "the pools span more than one scale-up domain (or differ in GPU type)")
    else:
        why = "as requested"
    gpu = pre.gpu
    per_gpu = {"nvlink": min(gpu.scale_up_bandwidth_bytes_per_s, dec.gpu.scale_up_bandwidth_bytes_per_s), "rdma": min(gpu.scale_out_bandwidth_bytes_per_s,
               dec.gpu.scale_out_bandwidth_bytes_per_s), "pcie": min(gpu.pcie_bandwidth_bytes_per_s,
               dec.gpu.pcie_bandwidth_bytes_per_s)}[link]
    return KvLinkChoice(link=link, bandwidth_bytes_per_s=per_gpu * senders * gpu.efficiency.link_bandwidth_fraction,
                        reason=f"{link}: {why}; {senders} GPU(s) send in parallel{caveat}")


def kv_transfer_s(kv_bytes: FloatArray, bandwidth_bytes_per_s: float | FloatArray, prefill_s: FloatArray,
                  num_layers: int) -> tuple[FloatArray, FloatArray]:
    """(whole, exposed) KV-transfer time per prompt [s]. Layer-wise transfer: layer l's KV leaves as soon as
    layer l is computed; what the prefill cannot hide is the last layer's share, any excess of the transfer
    over the compute, and the hand-off (``KV_HANDOFF_S``)."""
    full = np.asarray(kv_bytes, dtype=np.float64) / bandwidth_bytes_per_s
    layers = max(int(num_layers), 1)
    exposed = KV_HANDOFF_S + full / layers + np.maximum(0.0, full - prefill_s * (layers - 1) / layers)
    return full + KV_HANDOFF_S, exposed


def _pool_ctx(problem: ServingProblem, pool: PoolSpec) -> CostContext:
    return CostContext(model=problem.model, gpu=pool.gpu, engine=problem.engine, weight_dtype=problem.weight_dtype,
                       kv_dtype=problem.kv_dtype, parallelism=pool.parallelism)


#: pass sizes the setup of a batched prefill pass is read off (``DisaggregatedModel.pass_setup_s``)
SETUP_PASS_SIZES = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 8.0])
#: secant rounds of the pass-size moments' fixed point (``batched_prefill_wait``; 3 settle the wait to
#: 1e-9 from ρ = 0.05 to 0.98, where plain rounds of the fixed point needed ~30 for 1e-4 at 0.8)
GATED_ROUNDS = 4
#: a batching pool's closed-loop root: its tolerance relative to the rate, and the most secant rounds
#: (``DisaggregatedModel._batched_closed_loop``)
BATCHED_ROOT_XTOL, BATCHED_ROOT_ROUNDS = 1e-6, 12


def pass_prompt_cap(pool: PoolSpec, mean_compute_tokens: float) -> float:
    """The most prompts K a prefill pass of ``pool`` takes: ``max_batch_size``, and its token budget over
    the mean prompt's computed tokens."""
    return min(float(pool.max_batch_size), float(pool.token_budget) / max(mean_compute_tokens, 1.0))


def setup_from_passes(n: FloatArray, t_n: FloatArray, mean_prefill_s: float) -> float:
    """The setup a [s] of a prefill worker that batches its prompts (``batched_prefill_wait``): what a pass
    of n prompts of the mean length (``n`` = 1, 2, … K, taking ``t_n``) saves against n passes of one, per
    extra prompt, in units of the mean prefill ``mean_prefill_s``."""
    per_extra = (n[1:] - t_n[1:] / t_n[0]) / (n[1:] - 1.0)
    return float(np.clip(np.mean(per_extra), 0.0, 1.0)) * mean_prefill_s


def batched_prefill_wait(lam: FloatArray, prefill_s: FloatArray, weights: FloatArray,
                         setup_s: float | FloatArray, max_prompts: float | FloatArray
                         ) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """(mean wait beyond a prompt's own prefill [s], busy share, stable) of one prefill worker at Poisson
    rates ``lam`` that prefills every waiting prompt in one pass (gated service): a pass of n prompts takes
    a + Σ b_i, the setup ``setup_s`` = a once and b_i = t_i − a per prompt (``prefill_s`` at the prompt
    points with probabilities ``weights``); at most ``max_prompts`` = K to a pass, which bounds the capacity
    at passes of K back to back, λ < K / (a + K·b̄) (the cap is not in the wait: the mean pass is far
    below it where the wait is finite).

    The pass sizes X form a Markov chain: the next pass takes the arrivals during this one, Y with
    E[Y | X] = λa + ρX (ρ = λb̄, b̄ = E[t] − a) and Var[Y | X] = λa + X·(ρ + λ²·Var b) (Poisson counts over
    a random length), or, when none arrived, the worker idles and the next pass is the one prompt that ends
    the idle time, X' = max(Y, 1). Its first two moments solve m₁ = (λa + P₀) / (1 − ρ) and
    m₂ = (λ²a² + 2λaρm₁ + λa + m₁(ρ + λ²Var b) + P₀) / (1 − ρ²), P₀ = e^{−λa}·E[β(λ)^X] the chance that
    nobody arrives (β the Laplace transform of b, E[z^X] from a negative binomial of the two
    moments), a fixed point in P₀ solved by the secant method (``GATED_ROUNDS``).

    A pass lasts C = a + b̄X: the worker is busy u = E[C] / (E[C] + P₀/λ), and a prompt that finds it
    busy (PASTA) waits for the rest of the pass, E[C²] / (2E[C]), and rides the next with the
    λ·E[C²]/E[C] others that arrive meanwhile, their b each: W = u·E[C²]/E[C]·(½ + ρ). Without a setup
    this is more than FIFO's wait (a prompt also waits for those that arrive after it); against an event
    simulation of the same queue (E[t] = 1, Var t = 0.75, a = 0 and 0.13, ρ = 0.5 … 0.9) within 4 %
    (``tests/unit/test_batched_prefill.py``)."""
    lam = np.maximum(np.asarray(lam, dtype=np.float64), 0.0)
    t = np.asarray(prefill_s, dtype=np.float64)  # (ni,), or one row per rate (n, ni)
    w = np.asarray(weights, dtype=np.float64)
    if lam.size == 1 and t.ndim == 1 and np.ndim(setup_s) == 0 and np.ndim(max_prompts) == 0:
        # one rate (a closed loop's root asks for ~6): the same steps on floats, ~10× faster
        wait1, busy1, ok1 = _gated_queue(float(lam.reshape(-1)[0]), t, w, float(setup_s), float(max_prompts),
                                         _FLOAT_OPS)
        shape = lam.shape
        return np.full(shape, wait1), np.full(shape, busy1), np.full(shape, ok1)
    return _gated_queue(lam, t, w, np.asarray(setup_s, dtype=np.float64),
                        np.asarray(max_prompts, dtype=np.float64), _ARRAY_OPS)


@dataclass(frozen=True)
class _Ops:
    """The element-wise operations :func:`_gated_queue` runs on: numpy's on arrays of rates, or the
    ``math`` module's and the builtins on one rate as floats (numpy's per-call cost is most of a scalar
    call's time)."""

    num: Callable[[Any], Any]
    maximum: Callable[[Any, Any], Any]
    minimum: Callable[[Any, Any], Any]
    exp: Callable[[Any], Any]
    log1p: Callable[[Any], Any]
    where: Callable[[Any, Any, Any], Any]
    clip: Callable[[Any, Any, Any], Any]
    #: E[e^{−λb}] over the prompt points: (λ, t, a, w) -> one value per rate
    beta: Callable[[Any, FloatArray, Any, FloatArray], Any]


_ARRAY_OPS = _Ops(
    num=lambda x: x, maximum=np.maximum, minimum=np.minimum, exp=np.exp, log1p=np.log1p, where=np.where,
    clip=np.clip,
    beta=lambda lam, t, a, w: np.sum(np.exp(-lam[..., None] * np.maximum(t - np.asarray(a)[..., None], 0.0))
                                     * w, axis=-1))
_FLOAT_OPS = _Ops(
    num=float, maximum=max, minimum=min, exp=math.exp, log1p=math.log1p,
    where=lambda c, x, y: x if c else y, clip=lambda x, lo, hi: min(max(x, lo), hi),
    beta=lambda lam, t, a, w: float(np.exp(-lam * np.maximum(t - a, 0.0)) @ w))


def _gated_queue(lam: Any, t: FloatArray, w: FloatArray, setup_s: Any, max_prompts: Any, ops: _Ops
                 ) -> tuple[Any, Any, Any]:
    """:func:`batched_prefill_wait`'s steps on rates ``lam`` (an array, or one float with ``_FLOAT_OPS``)."""
    mean_t = ops.num(t @ w)
    var_b = ops.maximum(ops.num((t * t) @ w) - mean_t * mean_t, 0.0)
    a = ops.minimum(ops.maximum(setup_s, 0.0), mean_t)
    k = ops.maximum(max_prompts, 1.0)
    b = mean_t - a
    rho = lam * b
    ok = (rho < MAX_UTILIZATION) & (lam * (b + a / k) < MAX_UTILIZATION)
    r = ops.where(ok, rho, 0.5)
    la = lam * a
    beta = ops.beta(lam, t, a, w)  # E[e^{−λb}]
    spread = r + lam * lam * var_b
    top = ops.exp(-la) * beta  # P₀ with one prompt to a pass, its largest value

    def moments(p0: Any) -> tuple[Any, Any, Any]:
        """(m₁, m₂, the P₀ they give) at the chance of no arrival ``p0``."""
        m1 = (la + p0) / (1.0 - r)
        m2 = (la * la + 2.0 * la * r * m1 + la + m1 * spread + p0) / (1.0 - r * r)
        mu = ops.maximum(m1 - 1.0, 0.0)
        shape = mu * mu / ops.maximum(m2 - m1 * m1 - mu, 1e-12)
        # E[β^N] of N = X − 1: negative binomial of mean μ and its excess variance
        return m1, m2, top * ops.exp(-shape * ops.log1p(mu / ops.maximum(shape, 1e-300) * (1.0 - beta)))

    # P₀ = F(P₀), F falling in P₀: the secant method on F(p) − p from the two first rounds
    x0 = top
    f0 = moments(x0)[2] - x0
    x1 = x0 + f0
    for _ in range(GATED_ROUNDS):
        f1 = moments(x1)[2] - x1
        slope = f1 - f0
        moved = abs(slope) > 1e-300
        step = ops.where(moved, f1 * (x1 - x0) / ops.where(moved, slope, 1.0), 0.0)
        x0, f0 = x1, f1
        x1 = ops.clip(x1 - step, 0.0, top)
    m1, m2, _ = moments(x1)
    e_c = a + b * m1
    e_c2 = a * a + 2.0 * a * b * m1 + b * b * m2 + m1 * var_b
    busy = ops.where(lam > 0, e_c / (e_c + x1 / ops.maximum(lam, 1e-300)), 0.0)
    wait = busy * e_c2 / ops.maximum(e_c, 1e-300) * (0.5 + r)
    return ops.where(ok, wait, np.inf), ops.where(ok, busy, 1.0), ok


@dataclass(frozen=True, kw_only=True)
class DisaggState:
    rate_per_s: FloatArray
    prefill_wait_s: FloatArray
    prefill_p_wait: FloatArray
    prefill_utilization: FloatArray
    prefill_s: FloatArray  # (ni,) per prompt point
    transfer_s: FloatArray  # (ni,) exposed KV-transfer time per prompt point
    transfer_full_s: FloatArray  # (ni,) whole transfer time
    link_utilization: FloatArray
    decode_batch: FloatArray
    decode_iteration_s: FloatArray
    decode_slot_wait_s: FloatArray
    stable: NDArray[np.bool_]


class DisaggregatedModel:
    def __init__(self, problem: ServingProblem) -> None:
        dep = problem.deployment
        assert isinstance(dep, DisaggregatedDeployment)
        self.problem, self.dep = problem, dep
        w = problem.workload
        self.pre_ctx = _pool_ctx(problem, dep.prefill)
        self.dec_ctx = _pool_ctx(problem, dep.decode)
        hit = w.prefix_cache_hit_fraction
        self.in_values, self.in_weights = w.input_tokens.values, w.input_tokens.weights
        self.prompt_compute = np.maximum(np.round(self.in_values * (1.0 - hit)), 1.0)
        self.mean_out = w.output_tokens.mean
        self.mean_decode_steps = max(self.mean_out - 1.0, 0.0)
        self.decode_context = w.input_tokens.mean + w.output_tokens.second_moment / (2.0 * max(self.mean_out, 1.0))
        max_context = int(w.input_tokens.max + w.output_tokens.max)
        for name, ctx, pool in (("prefill", self.pre_ctx, dep.prefill), ("decode", self.dec_ctx, dep.decode)):
            plan = memory_plan(ctx, max_context_tokens=max(max_context, 1))
            if not plan.fits:
                raise ModelDoesNotFit(
                    f"{problem.model.id} ({problem.weight_dtype}) does not fit on the {name} pool's {pool.gpu.id} "
                    f"with tp={pool.parallelism.tp}, pp={pool.parallelism.pp}", pool=name,
                    weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
                    usable_bytes_per_gpu=plan.memory_bytes - plan.reserved_bytes_per_gpu,
                )
            if name == "decode":
                self.dec_plan = plan
        # KV per running sequence: its prompt and, length-biased, half its output (as the aggregated model's)
        self.kv_batch_cap = self.dec_plan.kv_capacity_tokens / max(self.decode_context, 1.0)
        self.kv_scv = held_kv_scv(w, self.decode_context)  # the spread of what each holds
        self.batch_cap = float(min(dep.decode.max_batch_size, self.kv_batch_cap))
        # prefill pass per prompt point (one prompt per pass; FCFS), and in the same cost-model pass the
        # passes of n prompts of the mean length a worker that batches its prompts reads its setup off
        # (``setup_from_passes``; one pass of the cost model instead of two: ~0.4 ms of a ~3 ms call)
        ni = self.in_values.size
        k_cap = pass_prompt_cap(dep.prefill, float(np.dot(self.in_weights, self.prompt_compute)))
        sizes = SETUP_PASS_SIZES[SETUP_PASS_SIZES <= k_cap] if k_cap >= 2.0 else np.zeros(0)
        mean_in = float(np.dot(self.in_weights, self.in_values))
        cached = np.concatenate([np.round(self.in_values * hit), np.full(sizes.size, round(mean_in * hit))])
        pre = np.broadcast_to(prefill_latency_s(
            self.pre_ctx, prompt_tokens=np.concatenate([self.in_values, np.full(sizes.size, mean_in)]),
            batch_size=np.concatenate([np.ones(ni), sizes]), cached_tokens=cached), (ni + sizes.size,))
        self.prefill_s = pre[:ni].astype(float)
        self.link = choose_link(dep)
        kv_bytes_per_token = problem.model.kv_cache_bytes_per_token(DTYPE_BYTES[problem.kv_dtype])
        self.kv_bytes = self.in_values * kv_bytes_per_token
        self.transfer_full_s, self.transfer_s = kv_transfer_s(
            self.kv_bytes, self.link.bandwidth_bytes_per_s, self.prefill_s, problem.model.num_layers)
        grid = np.unique(np.concatenate([[1.0], geometric_grid(1.0, max(self.batch_cap, 1.0),
                                                               NUM_BATCH_POINTS)]))
        self.batch_grid = grid
        self.decode_table = np.broadcast_to(
            decode_latency_s(self.dec_ctx, batch_size=grid, context_tokens=self.decode_context), grid.shape).copy()
        # the prompt law's moments that every steady state uses (a closed loop's root asks for ~7 of them)
        w_in = self.in_weights
        self.prefill_mean_s = float(np.dot(w_in, self.prefill_s))
        self.prefill_scv = (max(float(np.dot(w_in, self.prefill_s**2)) / self.prefill_mean_s**2 - 1.0, 0.0)
                            if self.prefill_mean_s > 0 else 0.0)
        self.transfer_full_mean_s = float(np.dot(w_in, self.transfer_full_s))
        self.transfer_mean_s = float(np.dot(w_in, self.transfer_s))
        self._curves: dict[float, tuple[FloatArray, FloatArray]] = {}
        # a prefill worker that admits every waiting prompt into one pass (max_batch_size > 1, up to its token
        # budget: ``batched_prefill_wait``; closed loops too since 2026-12-05): the pass's setup a (what a pass
        # of n prompts saves against n passes, per extra prompt, from the cost model's passes at the mean
        # prompt) and the most prompts a pass takes, K. None: one prompt per pass
        self.pass_setup_s: float | None = None
        self.pass_prompts = 1.0
        if sizes.size and self.prefill_mean_s > 0:
            self.pass_setup_s = setup_from_passes(sizes, pre[ni:], self.prefill_mean_s)
            self.pass_prompts = k_cap

    def _decode_curve(self, wait_scale: float = 1.0) -> tuple[FloatArray, FloatArray]:
        """λ(B) of the decode pool: Little's law B = (λ/D)·(E[O] − 1)·τ_d(s·B + 1), explicit in λ (a request
        decodes in a batch of itself plus the others it sees, s·B: all B in an open loop, s = 1; the other
        N − 1 clients' share in a closed loop of N, s = (N − 1)/N, as ``steady_state``'s iteration time).
        Computed once per ``wait_scale`` (read-only arrays).

        Until 2026-12-05 the curve had s = 1 for closed loops too, while the iteration time used s: a single
        client (s = 0) read a batch of 2.1 sequences off it (Qwen3-0.6B, 16000/100000 tokens, one L40S tp4
        decode worker), and evaluate's ITL law, built on that batch, broke Little's law by 53 %."""
        if wait_scale not in self._curves:
            top = self.batch_grid[-1]
            b = np.concatenate([[0.0], geometric_grid(1e-3, max(top - 1.0, 1e-3), 90)])
            if self.mean_decode_steps <= 0:
                lam = np.full_like(b, np.inf)
            else:
                tau = np.interp(np.minimum(b * wait_scale + 1.0, top), self.batch_grid, self.decode_table)
                lam = self.dep.decode.workers * b / (self.mean_decode_steps * tau)
                # the stable branch: where the iteration time steps up faster than the batch (a GEMM tile
                # boundary) λ(B) dips, and a batch past the dip is reached only at a higher rate; a rate
                # reads the first batch that serves it (np.interp needs increasing rates: on the raw curve
                # a vector and a scalar look-up of one rate gave batches of 122 and 197)
                rising = np.concatenate([[True], lam[1:] > np.maximum.accumulate(lam)[:-1]])
                b, lam = b[rising], lam[rising]
            b.flags.writeable = lam.flags.writeable = False
            self._curves[wait_scale] = (b, lam)
        return self._curves[wait_scale]

    def steady_state(self, rate_per_s: FloatArray, arrival_scv: float, wait_scale: float = 1.0) -> DisaggState:
        lam = np.atleast_1d(np.asarray(rate_per_s, dtype=np.float64))
        dep = self.dep
        mean_s, scv_s = self.prefill_mean_s, self.prefill_scv
        # beyond saturation the figures are those at the stability limit (flagged unstable)
        lam_q = np.minimum(lam, MAX_UTILIZATION * dep.prefill.workers / mean_s)
        wq_a, p_a = Q.ggc_wait_array(arrival_rate_per_s=lam_q * wait_scale, servers=dep.prefill.workers,
                                     service_mean_s=mean_s, service_scv=scv_s, arrival_scv=arrival_scv)
        rho_a = lam * mean_s / dep.prefill.workers
        batched = None
        if self.pass_setup_s is not None:
            # the worker batches: its queue is the gated one of ``batched_prefill_wait`` at the per-worker
            # rate, taken as a factor on the pool's wait (one prompt per pass, Allen–Cunneen: the pooling of
            # its workers kept; for one worker and Poisson arrivals the gated wait itself)
            # beyond its capacity (passes of K back to back) the figures are those at the limit, flagged
            # unstable, as the one-per-pass queue's are
            k = self.pass_prompts
            cap_w = MAX_UTILIZATION * k / (k * mean_s - (k - 1.0) * self.pass_setup_s)
            over_g = lam / dep.prefill.workers > cap_w * (1.0 + 1e-9)
            lam_w = np.minimum(lam / dep.prefill.workers, cap_w * (1.0 - 1e-9)) * wait_scale
            wq_g, busy_g, ok_g = batched_prefill_wait(lam_w, self.prefill_s, self.in_weights,
                                                      self.pass_setup_s, self.pass_prompts)
            batched = (busy_g, ok_g & ~over_g, wq_g)
        if self.problem.workload.arrival.kind == "gamma" and abs(arrival_scv - 1.0) > 1e-12:
            # open gamma arrivals: the GI/M/1 interpolation of the wait and of its probability, at the
            # per-worker utilization (``queueing.renewal_wait_factors``; Allen–Cunneen's (c_a² + c_s²) / 2 is
            # Kingman's heavy-traffic factor: at c = 2 and ρ = 0.5 the wait was −13 % against the simulation)
            rho_w = lam_q * wait_scale * mean_s / dep.prefill.workers
            f_wait, f_p = Q.renewal_wait_factors(rho_w, arrival_scv)
            wq_a = wq_a * np.nan_to_num(f_wait, nan=1.0)
            p_a = np.minimum(p_a * np.nan_to_num(f_p, nan=1.0), 1.0)
        link_util = lam * self.transfer_full_mean_s / dep.prefill.workers
        if batched is not None:
            busy_g, ok_g, wq_g = batched
            # the gated wait times the pool's one-per-pass wait over one worker's FIFO wait (the pooling of
            # the workers and the arrivals' burstiness), both at the one-per-pass queue's load capped at its
            # limit: past it the pool keeps the factor of the limit, so that the wait does not jump there
            # (2026-12-05: frozen at 1 past the limit, a gamma loop's TTFT fell from 180 to 87 ms as its rate
            # rose 30 %)
            rho_q = lam_q * wait_scale * mean_s / dep.prefill.workers
            fifo_q = rho_q * mean_s * (1.0 + scv_s) / 2.0 / np.maximum(1.0 - rho_q, 1e-300)
            scale = np.divide(wq_a, fifo_q, out=np.ones_like(fifo_q), where=(fifo_q > 0) & np.isfinite(wq_a))
            wq_a = wq_g * scale
            busy_ratio = np.divide(busy_g, rho_q, out=np.ones_like(rho_q), where=rho_q > 0)
            p_a = np.where(ok_g, np.minimum(p_a * busy_ratio, 1.0), p_a)
            rho_a = np.where(ok_g, np.minimum(busy_g, MAX_UTILIZATION * 0.999), np.maximum(rho_a, 1.0))
        b_grid, lam_grid = self._decode_curve(wait_scale)
        if self.mean_decode_steps > 0:
            b = np.interp(lam, lam_grid, b_grid)
            decode_ok = lam <= lam_grid[-1] * (1.0 + 1e-9)
        else:
            b = np.zeros_like(lam)
            decode_ok = np.ones_like(lam, dtype=bool)
        # the batch a decoding request runs in: itself plus the others on its worker
        tau = np.interp(np.minimum(b * wait_scale + 1.0, self.batch_grid[-1]), self.batch_grid, self.decode_table)
        stable = (rho_a < MAX_UTILIZATION) & decode_ok & (link_util < 1.0)
        # waiting for a decode slot once the batch nears its cap (Allen-Cunneen over the slots), each rate
        # with its own residence. Until 2026-12-05 every rate of a call had the mean residence of them all:
        # on the closed loop's grid of rates the slot wait near the cap came out far too small, the loop
        # looked saturated and took the grid's last rate (Qwen3-0.6B, 2/16000 tokens, 257 clients on one
        # GB200 tp4 decode worker of 256 slots: 0.659 requests/s and 456 s end to end, 301 clients' worth;
        # random evaluate bodies found 34 loops in 8300 that broke Little's law, by up to 3.3×, with the
        # causes in ``_decode_curve`` and ``closed_loop_rate_per_s``)
        residence = self.mean_decode_steps * tau
        slots = max(self.batch_cap, 1.0)
        per_worker = lam / dep.decode.workers
        x_q = np.minimum(per_worker, MAX_UTILIZATION * slots / np.maximum(residence, 1e-300))
        slot_wait = np.zeros_like(lam)
        if self.mean_decode_steps > 0:
            slot_wait, _ = Q.ggc_wait_array(arrival_rate_per_s=x_q * wait_scale, servers=slots,
                                            service_mean_s=residence, service_scv=0.5,
                                            arrival_scv=arrival_scv)
        return DisaggState(
            rate_per_s=lam, prefill_wait_s=wq_a, prefill_p_wait=p_a, prefill_utilization=rho_a,
            prefill_s=self.prefill_s, transfer_s=self.transfer_s, transfer_full_s=self.transfer_full_s,
            link_utilization=link_util, decode_batch=b, decode_iteration_s=tau, decode_slot_wait_s=slot_wait,
            stable=stable,
        )

    def decode_batch_dispersion(self, batch: float, prefill_utilization: float = 0.0) -> float:
        """Variance over mean of an open loop's decode batch on one worker at ``batch`` per worker:
        decode-only iterations, so a processor-sharing station's 1 / (1 − ε) (``batch.batch_dispersion``),
        times the peakedness of gamma arrivals smoothed by the prefill pool at ``prefill_utilization``."""
        eps = decode_elasticity(lambda x: np.interp(x + 1.0, self.batch_grid, self.decode_table), np.array([batch]))
        # gamma arrivals widen it by their peakedness (``batch.renewal_peakedness``), as the prefill pool's
        # departures: taken at the arrivals' c², the decode batch's variance/mean came out +57 % against the
        # simulation at 0.8 of saturation (c = 2; 4.68 simulated), with the pool's smoothing +2 %
        w = self.problem.workload
        peaked = renewal_peakedness(w.arrival, life_overlap(w.output_tokens.values, w.output_tokens.weights),
                                    prefill_utilization)
        return peaked / (1.0 - float(eps[0]))

    def mean_e2e_s(self, st: DisaggState) -> FloatArray:
        ttft = (self.problem.engine.request_overhead_s + st.prefill_wait_s + self.prefill_mean_s
                + self.transfer_mean_s)
        return ttft + st.decode_slot_wait_s + self.mean_decode_steps * st.decode_iteration_s

    def batched_capacity_per_s(self) -> float:
        """The prefill pool's capacity when its workers batch (``pass_setup_s``): passes of K prompts back to
        back, each K·E[t] less (K − 1) setups, at ``MAX_UTILIZATION``; one prompt per pass otherwise."""
        if self.pass_setup_s is None:
            return MAX_UTILIZATION * self.dep.prefill.workers / self.prefill_mean_s
        k = self.pass_prompts
        per_pass = k * self.prefill_mean_s - (k - 1.0) * self.pass_setup_s
        return MAX_UTILIZATION * self.dep.prefill.workers * k / per_pass

    def saturation_rate_per_s(self, arrival_scv: float = 1.0, wait_scale: float = 1.0) -> float:
        prefill_max = self.batched_capacity_per_s()
        link_max = self.dep.prefill.workers / self.transfer_full_mean_s
        _, lam_grid = self._decode_curve(wait_scale)
        return float(min(prefill_max, link_max, lam_grid[-1]))

    def closed_loop_rate_per_s(self, clients: float, arrival_scv: float, polish: bool = True) -> float:
        """The rate at which ``clients`` closed-loop clients close Little's law, N = λ·E[e2e](λ), with the
        prefill queue as an open one: interpolated on a grid of rates, then (``polish``) solved by Brent's
        method between the two grid rates around it.

        Until 2026-12-05 the polish was three secant steps from ±2 % of the interpolated rate, which can stop
        short where E[e2e] climbs as 1 / (1 − ρ) near the decode pool's slot cap; the root is now bracketed
        (``queueing.root_on_curve``)."""
        scale = max(clients - 1.0, 0.0) / clients
        grid, raw, pop = self._population_curve(clients, arrival_scv)
        if clients >= pop[-1]:
            return float(grid[-1])
        lam = float(np.interp(clients, pop, grid))
        if not polish:
            return lam

        def excess(rate: float) -> float:
            at = self.steady_state(np.array([rate]), arrival_scv, scale)
            return rate * float(self.mean_e2e_s(at)[0]) - clients

        return Q.root_on_curve(excess, grid, pop, clients, lam, raw=raw)

    def _population_curve(self, clients: float, arrival_scv: float
                          ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(rates up to saturation, the population λ·E[e2e](λ) at each with the queue thinned to the other
        N − 1 clients, its running maximum) of a closed loop of ``clients``."""
        scale = max(clients - 1.0, 0.0) / clients
        sat = self.saturation_rate_per_s(arrival_scv, scale)
        grid = sat * np.concatenate([geometric_grid(1e-6, 0.9, 48),
                                     1.0 - geometric_grid(1e-4, 0.1, 32)[::-1]])
        st = self.steady_state(grid, arrival_scv, scale)
        raw = grid * self.mean_e2e_s(st)
        return grid, raw, np.maximum.accumulate(raw)

    def _batched_closed_loop(self, clients: float, arrival_scv: float
                             ) -> tuple[DisaggState, float, tuple[float, float, float]] | None:
        """``_cycle_at`` of a batching pool's closed loop at its root, N = λ·E[e2e](λ): bracketed on the
        population curve, then secant steps on X(λ) − λ (X = N / E[e2e](λ), the throughput that closes the
        cycle; the first a fixed-point step), each one state, to ``BATCHED_ROOT_XTOL`` of the rate (4
        states on the benchmark's loop, where Brent's method from the bracket took 7); the last step's
        state is the answer, its throughput X closing the cycle. None when the loop saturates a pool (N
        above the curve's top): the caller then keeps the open queue at the saturated rate, whose extra
        queueing closes Little's law."""
        grid, raw, pop = self._population_curve(clients, arrival_scv)
        if clients >= pop[-1]:  # saturated: the caller's open queue, with the saturated loop's queueing
            return None
        i = int(np.searchsorted(pop, clients))
        lo, hi = (float(grid[i - 1]) if i > 0 else 0.0), float(grid[i])
        lam = float(np.interp(clients, pop, grid))
        cap = self.batched_capacity_per_s()
        last: tuple[float, float] | None = None  # (rate, x − rate) of the previous step
        for _ in range(BATCHED_ROOT_ROUNDS):
            st, think, cycle = self._cycle_at(lam, clients, arrival_scv)
            x = cycle[0]
            if x >= cap or abs(x - lam) <= BATCHED_ROOT_XTOL * lam:
                break
            g = x - lam  # > 0 below the root: the cycle there closes at a higher rate
            if g > 0.0:
                lo = lam
            else:
                hi = lam
            # the secant on g through the last two steps (the first: the fixed-point step λ ← X), kept inside
            # the bracket, else its middle
            nxt = x if last is None else lam - g * (lam - last[0]) / (g - last[1])
            last = (lam, g)
            lam = nxt if lo < nxt < hi else 0.5 * (lo + hi)
        return st, think, cycle

    def _cycle_at(self, rate: float, clients: float, arrival_scv: float
                  ) -> tuple[DisaggState, float, tuple[float, float, float]]:
        """At throughput ``rate`` of a closed loop of ``clients``: the pools' state (queue thinned to the
        other N − 1), the rest of a client's cycle Z besides its prefill wait and service [s], and the
        prefill queue's mean-value analysis at that Z (throughput, mean wait, probability of waiting).

        A worker that batches its prompts (``pass_setup_s``) is not a FCFS station: its queue is the gated
        batch queue of ``steady_state`` at this rate, thinned to the other N − 1 clients, and the throughput
        the one that closes the cycle, N / (Z + E[t] + W). Against the reference simulation's batching
        worker (Llama-3.1-8B and Qwen3-32B on H100s, lognormal lengths, 16 … 256 clients, three 6000-request
        runs, 2026-12-05) that put the TTFT mean within +0 … +28 % (the largest at 0.86–0.98 of the pool
        busy, where a closed population's waits fall short of an open queue's), where one prompt per pass
        (the mean-value analysis) had +18 … +112 % from 0.75 busy up; a mean-value analysis of the gated
        queue itself (the wait of the pass in progress, then the marginal prefill of each prompt in one's
        own pass) was exact at low load but −18 … −37 % from 0.8 busy up, and an embedded chain of the pass
        sizes, with passes of fixed length, −6 … −34 %: neither adopted."""
        st = self.steady_state(np.array([rate]), arrival_scv, max(clients - 1.0, 0.0) / clients)
        rest = max(float(self.mean_e2e_s(st)[0]) - float(st.prefill_wait_s[0]) - self.prefill_mean_s, 0.0)
        if self.pass_setup_s is not None:
            wait = float(st.prefill_wait_s[0])
            x = clients / (rest + self.prefill_mean_s + wait)
            return st, rest, (x, wait, float(st.prefill_p_wait[0]))
        return st, rest, Q.closed_queue_mva(clients=clients, service_mean_s=self.prefill_mean_s,
                                            service_scv=self.prefill_scv, servers=self.dep.prefill.workers,
                                            think_s=rest)

    def closed_loop_prefill(
        self, clients: float, arrival_scv: float, start_rate_per_s: float | None = None
    ) -> tuple[float, float, float, FloatArray, FloatArray, float, DisaggState] | None:
        """(per-pool throughput [req/s], mean prefill wait [s], probability of waiting, the wait law as
        (values [s], weights) points, the rest of a client's cycle [s], the pools' state at that throughput)
        of a closed loop of ``clients``, by mean-value analysis of the prefill
        queue with the rest of each client's cycle as a delay (``queueing.closed_queue_wait_points`` for
        the law); None when the decode pool or the KV link limits before the prefill pool does (the caller
        then keeps the open-loop queue at the solved rate).

        The delay ``Z`` (front end, exposed transfer, decode slot wait, the decode steps) depends on the
        throughput through the decode batch: the throughput is the root of X(Z(λ)) = λ, bracketed from the
        open-queue root and solved by Brent's method (5-7 evaluations of the pools' state)."""
        mean_s, scv_s = self.prefill_mean_s, self.prefill_scv
        if clients < 1.0 or mean_s <= 0.0:
            return None
        if self.pass_setup_s is not None and start_rate_per_s is None:
            # a batching worker (``_cycle_at``): X = N / (Z + E[t] + W) at the root of N = λ·E[e2e](λ), the
            # open-queue root (the cycle's throughput, returned, closes Little's law exactly)
            solved = self._batched_closed_loop(clients, arrival_scv)
            if solved is None:
                return None
            st, think, (lam, wait, p_wait) = solved
            values, weights = Q.closed_queue_wait_points(
                clients=clients, service_mean_s=mean_s, service_scv=scv_s, servers=self.dep.prefill.workers,
                think_s=think, mean_wait_s=wait)
            return lam, wait, p_wait, values, weights, think, st
        scale = max(clients - 1.0, 0.0) / clients
        # the fixed point starts from the open-queue root (``closed_loop_rate_per_s``, interpolated), unless
        # given
        lam = (self.closed_loop_rate_per_s(clients, arrival_scv, polish=False) if start_rate_per_s is None
               else start_rate_per_s)
        prefill_max = MAX_UTILIZATION * self.dep.prefill.workers / mean_s
        other_max = min(self.dep.prefill.workers / self.transfer_full_mean_s,
                        float(self._decode_curve(scale)[1][-1]))
        # (a batching worker's queue is the open gated one in any case: its closed law's bounded shape, below,
        # is what this path adds, whichever pool limits)
        if other_max < prefill_max and self.pass_setup_s is None:
            return None
        # the fixed point λ = X(Z(λ)): X the MVA throughput at the delay Z, which grows with λ, so
        # g(λ) = X(Z(λ)) − λ decreases and has one root. Its slope can be below −2 near the prefill pool's
        # capacity (fixed 2000-token prompts, 128 clients: X moves 2 req/s per req/s there), where iterating
        # λ ← X oscillates and diverges; the root is bracketed and solved instead (Brent's method)
        memo: dict[float, tuple[float, float, float, float, DisaggState]] = {}

        def mva_at(rate: float) -> tuple[float, float, float, float, DisaggState]:
            if rate not in memo:
                st, rest, (x, wait, p_wait) = self._cycle_at(rate, clients, arrival_scv)
                memo[rate] = (x, wait, p_wait, rest, st)
            return memo[rate]

        def excess(rate: float) -> float:
            return mva_at(rate)[0] - rate

        lam = min(max(lam, 1e-9 * other_max), other_max) if np.isfinite(lam) else 0.5 * other_max
        lo = hi = lam
        factor = BRACKET_FACTOR
        if excess(lam) > 0.0:
            # the root is above: widen upwards (each step twice as far, in log) to the decode pool's (or the
            # link's) limit, where a positive excess means that limit binds first
            while excess(hi) > 0.0:
                if hi >= other_max:
                    return None
                lo, hi, factor = hi, min(hi * factor, other_max), factor * factor
        else:
            while excess(lo) < 0.0:  # X > 0 at any rate, so a small enough rate has a positive excess
                hi, lo, factor = lo, lo / factor, factor * factor
        if lo < hi:
            lam = float(optimize.brentq(excess, lo, hi, xtol=Q.ROOT_XTOL * hi, rtol=Q.ROOT_RTOL))
        _, wait, p_wait, think, st = mva_at(lam)
        values, weights = Q.closed_queue_wait_points(
            clients=clients, service_mean_s=mean_s, service_scv=scv_s, servers=self.dep.prefill.workers,
            think_s=think, mean_wait_s=wait)
        return lam, wait, p_wait, values, weights, think, st

    def locked_closed_loop(
        self, clients: float, arrival_scv: float, phi: float,
        solved: tuple[float, float, float, FloatArray, FloatArray, float, DisaggState],
    ) -> tuple[tuple[float, float, float, FloatArray, FloatArray, float, DisaggState], float]:
        """``closed_loop_prefill``'s answer ``solved`` redone for a fixed-length loop of which a share
        ``phi`` of the requests keeps the locked schedule (``locked_prefill_wait_s``) and the rest sees the
        random phases of the mean-value analysis: the throughput λ is the root of λ·E[e2e](λ) = N with
        E[e2e] the blend, E[e2e] = Z + S + (1 − φ)·W_mva(Z) + φ·W_locked(Z), Z = Z(λ) the rest of the
        cycle. The analysis alone closes the law at its own root λ₀; the locked share's waits are shorter,
        so the blend's root is above it, below N / E[e2e](λ₀) (E[e2e] grows with λ). Returns (the answer at
        that root, its locked wait). Until 2026-12-06 the blend's latencies came with λ₀: SGLang's profile
        (share 1), two prefill workers, 8 clients of 1000/16 tokens closed at X·E[e2e] = 0.92 N."""
        mean_s, workers = self.prefill_mean_s, self.dep.prefill.workers
        scale = max(clients - 1.0, 0.0) / clients

        def at(rate: float) -> tuple[DisaggState, float, tuple[float, float, float], float, float]:
            st, rest, x_w_p = self._cycle_at(rate, clients, arrival_scv)
            locked = self.locked_prefill_wait_s(clients, rest) or 0.0
            return st, rest, x_w_p, locked, rest + mean_s + (1.0 - phi) * x_w_p[1] + phi * locked

        lam0 = solved[0]
        e2e0 = at(lam0)[4]
        hi = clients / e2e0 if e2e0 > 0 else lam0
        # at most what the pools sustain (the prefill pool at ``MAX_UTILIZATION``, as the steady state's
        # stability): a locked loop that would run faster is bound there, its locked wait the rest
        top = min(self.batched_capacity_per_s(), workers / self.transfer_full_mean_s,
                  float(self._decode_curve(scale)[1][-1])) * (1.0 - 1e-9)
        hi = min(hi, top)
        lam = lam0

        def excess(rate: float) -> float:
            return rate * at(rate)[4] - clients

        if hi > lam0 and lam0 * e2e0 < clients:
            lam = (float(optimize.brentq(excess, lam0, hi, xtol=Q.ROOT_XTOL * hi, rtol=Q.ROOT_RTOL))
                   if excess(hi) >= 0.0 else hi)
        elif lam0 * e2e0 > clients * (1.0 + 1e-9):
            # (the locked share waits longer than the queue's answer: the root is below λ₀, above a rate
            # whose population falls short; never met since the batching pool's locked service, kept as a
            # guard of Little's law)
            lo = lam0
            for _ in range(60):
                lo *= 0.5
                if excess(lo) <= 0.0:
                    lam = float(optimize.brentq(excess, lo, lam0, xtol=Q.ROOT_XTOL * lam0, rtol=Q.ROOT_RTOL))
                    break
        st, rest, (_, wait, p_wait), locked, _ = at(lam)
        values, weights = Q.closed_queue_wait_points(
            clients=clients, service_mean_s=mean_s, service_scv=self.prefill_scv, servers=workers,
            think_s=rest, mean_wait_s=wait)
        return (lam, wait, p_wait, values, weights, rest, st), locked

    def locked_prefill_wait_s(self, clients: float, think_s: float) -> float | None:
        """The prefill wait of a closed loop whose clients stay phase-locked, or None when the workload can
        not lock (lengths that vary, a single client).

        With fixed lengths every service and every cycle takes the same time, and the loop spaces itself:
        the first wave queues, leaves the prefill pool one service time S apart, decodes for the same time
        and comes back still S apart, so no prompt waits again while the pool keeps up. It is the periodic
        steady state of a deterministic closed cyclic network: throughput min(N / (S + Z), c / S) for N
        clients, c servers and the rest of the cycle Z, so the wait is max(0, N·S / c − S − Z), zero below
        saturation. The reference simulation, which has no jitter, runs in it (constant TTFT); real
        benchmarks keep a share of it, the engine's ``closed_loop_coherence``. Workers that batch their
        prompts serve a saturated pool in full passes, c / S at their capacity (``batched_capacity_per_s``
        without its margin); until 2026-12-05 (a batching pool's closed loop was one prompt per pass until
        then) the one-prompt S made a locked loop of 257 clients wait 0.78 s behind a pool that keeps up,
        and close Little's law at 1.7 N."""
        w = self.problem.workload
        if clients <= 1.0 or w.input_tokens.values.size != 1 or w.output_tokens.values.size != 1:
            return None
        service = self.prefill_mean_s
        per_prompt = MAX_UTILIZATION * self.dep.prefill.workers / self.batched_capacity_per_s()
        return max(clients * per_prompt / self.dep.prefill.workers - service - think_s, 0.0)
