"""Fit a calibration profile to a user's measurements by bounded least squares (``/v1/calibrate``).

The residuals are log ratios of predicted to measured values (a factor off weighs the same up or down, and
fast and slow figures count alike), under scipy's ``soft_l1`` loss so that one wild measurement does not
drag the fit. A weak prior pulls every parameter towards the catalog's value: a parameter the data say
nothing about stays where the catalog put it, and is reported as not pinned down, instead of wandering.

Which parameters the data pin down comes from the Jacobian at the solution: the Gauss–Newton covariance
``s² (JᵀJ)⁻¹`` of the data alone (not the prior) gives each parameter's standard error; a parameter the
residuals do not depend on, one with a large standard error, or one strongly correlated with another is
named, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

from planner.diagnose.expected import (
    calibrated_problem,
    decode_step_s,
    iteration_s,
    kv_transfer,
    prefill_time_s,
)
from planner.diagnose.measurements import Measurements
from planner.diagnose.profile import PARAMETERS, CalibrationProfile
from planner.errors import InvalidInput, PlannerError
from planner.serving.evaluate import TableMemo, evaluate
from planner.serving.types import DisaggregatedDeployment, Evaluation, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length

FloatArray = NDArray[np.float64]
#: units the fit works in: log of each scale; overheads in steps of these [s]
OVERHEAD_UNITS_S = {"step_overhead_s": 0.01, "request_overhead_s": 0.1}
#: weight of the prior per parameter (in fit units): a factor e away from the catalog costs as much as
#: a 15 % misfit of one measurement. Chosen on scripts/calibration_accuracy.py (5 rows fitted per slice of
#: the H100 serving benchmarks, the rest scored): 0.15 gave held-out median |error| TTFT 15.7 %, TPOT 4.8 %;
#: 0.03 gave 16.0 % and 4.9 % (both from 18.7 % and 6.3 % uncalibrated): a weak preference, recorded
PRIOR_WEIGHT = 0.15
#: soft_l1 scale: residuals (log ratios) beyond ~10 % count linearly, not quadratically
LOSS_SCALE = 0.1
#: a parameter is pinned down when its standard error is below these (in fit units: ±25 % for a scale,
#: 5 ms of step overhead, 20 ms of request overhead)
PINNED_SE = {"step_overhead_s": 0.5, "request_overhead_s": 0.2}
PINNED_SE_SCALE = float(np.log(1.25))
#: |correlation| above which two unpinned parameters are reported as confounded
CONFOUNDED = 0.95
MAX_FUNCTION_EVALUATIONS = 40


@dataclass(frozen=True, kw_only=True)
class BenchmarkPoint:
    """One benchmark run of the deployment (a row like ``serving_benchmarks_h100.csv``): fixed lengths at a
    closed-loop concurrency (``--max-concurrency``) or an open-loop rate, and the means it measured."""

    input_tokens: float
    output_tokens: float
    concurrency: int | None = None
    rate_per_s: float | None = None
    measured_ttft_s: float | None = None
    measured_tpot_s: float | None = None
    label: str = ""
    #: the whole problem of this run when its deployment differs from the calibrated one's (its own max
    #: batch, say); None: the calibrated problem with this point's workload
    problem: ServingProblem | None = None


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One fitted figure: its kind and label, what was measured, and the model before and after the fit."""

    kind: str
    label: str
    measured: float
    predicted_before: float
    predicted_after: float

    @property
    def error_before_fraction(self) -> float:
        return self.predicted_before / self.measured - 1.0

    @property
    def error_after_fraction(self) -> float:
        return self.predicted_after / self.measured - 1.0


@dataclass(frozen=True, kw_only=True)
class ParameterFit:
    name: str
    unit: str
    initial: float
    value: float
    lower: float
    upper: float
    #: standard error in the parameter's unit (None when the data do not inform it)
    standard_error: float | None
    pinned_down: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    status: str  # "fitted" or "no_information"
    message: str
    profile: CalibrationProfile
    parameters: tuple[ParameterFit, ...]
    observations: tuple[Observation, ...]
    median_abs_error_before_fraction: float
    median_abs_error_after_fraction: float
    num_evaluations: int
    assumptions: tuple[str, ...]


# --------------------------------------------------------------------------------------------- blocks
@dataclass(frozen=True, kw_only=True)
class _Block:
    kind: str
    labels: tuple[str, ...]
    measured: FloatArray
    #: the prediction on the calibrated problem, given it and the profile
    predict: Callable[[ServingProblem, CalibrationProfile], FloatArray]


def _mean_context(problem: ServingProblem) -> float:
    w = problem.workload
    return float(w.input_tokens.mean + w.output_tokens.mean / 2.0)


def _blocks(problem: ServingProblem, m: Measurements, benchmarks: tuple[BenchmarkPoint, ...],
            assumptions: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    with_prefill = [s for s in m.ttft if s.prefill_s is not None and s.prefill_s > 0]
    if with_prefill:
        p = np.array([s.input_tokens for s in with_prefill])
        blocks.append(_Block(kind="prefill", labels=tuple(f"prefill of {int(x)} tokens" for x in p),
                             measured=np.array([s.prefill_s for s in with_prefill]),
                             predict=lambda pr, _, p=p: prefill_time_s(pr, p)))
    ttft = [s for s in m.ttft if s.ttft_s > 0]
    if ttft:
        p = np.array([s.input_tokens for s in ttft])
        queue = np.array([s.queue_s or 0.0 for s in ttft])
        if any(s.queue_s is None for s in ttft):
            assumptions.append("TTFT samples without a queue time are taken as unqueued (light load): their "
                               "queueing, if any, is fitted as request overhead")
        blocks.append(_Block(kind="ttft", labels=tuple(f"TTFT at {int(x)} prompt tokens" for x in p),
                             measured=np.array([s.ttft_s for s in ttft]),
                             predict=lambda pr, _, p=p, q=queue: pr.engine.request_overhead_s + q + prefill_time_s(pr, p)))
    if m.decode:
        c = np.array([s.context_tokens for s in m.decode])
        b = np.array([s.batch_size or 1.0 for s in m.decode])
        if any(s.batch_size is None for s in m.decode):
            assumptions.append("decode samples without a batch size are taken at batch 1")
        blocks.append(_Block(kind="decode", labels=tuple(f"decode step at {int(x)} context tokens, batch {int(y)}"
                                                         for x, y in zip(c, b, strict=True)),
                             measured=np.array([s.itl_s for s in m.decode]),
                             predict=lambda pr, _, c=c, b=b: decode_step_s(pr, c, b)))
    if m.iterations:
        if isinstance(problem.deployment, DisaggregatedDeployment):
            raise InvalidInput("scheduler iteration records describe an aggregated engine; this deployment is "
                               "disaggregated", field="measurements.iterations")
        it = m.iterations
        d = np.array([r.decode_tokens for r in it], dtype=np.float64)
        pt = np.array([r.prefill_tokens for r in it], dtype=np.float64)
        npf = np.array([max(r.num_prefill, 1 if r.prefill_tokens else 0) for r in it], dtype=np.float64)
        ctx = _mean_context(problem)
        assumptions.append(f"iteration records: decoding sequences hold the workload's mean context ({ctx:.0f} "
                           "tokens); prefill chunks start at the beginning of their prompts")
        blocks.append(_Block(kind="iteration",
                             labels=tuple(f"iteration of {int(x)} decodes + {int(y)} prompt tokens"
                                          for x, y in zip(d, pt, strict=True)),
                             measured=np.array([r.duration_s for r in it]),
                             predict=lambda pr, _, d=d, pt=pt, npf=npf, ctx=ctx: iteration_s(
                                 pr, decode_tokens=d, prefill_tokens=pt, num_prefill=npf, context_tokens=ctx)))
    kv = m.kv_transfer
    if kv is not None and kv.bandwidth_bytes_per_s and isinstance(problem.deployment, DisaggregatedDeployment):
        blocks.append(_Block(kind="kv_transfer", labels=("KV-transfer bandwidth",),
                             measured=np.array([kv.bandwidth_bytes_per_s]),
                             predict=lambda pr, _: np.array([kv_transfer(pr, 1.0)[3]])))
    runs = _BenchmarkRuns()
    for i, bp in enumerate(benchmarks):
        label = bp.label or f"benchmark {i + 1}: {int(bp.input_tokens)}/{int(bp.output_tokens)} tokens"
        workload = _benchmark_workload(problem, bp) if bp.problem is None else None
        for metric, value in (("ttft", bp.measured_ttft_s), ("tpot", bp.measured_tpot_s)):
            if value is not None and value > 0:
                blocks.append(_Block(kind=f"benchmark_{metric}", labels=(f"{label}, mean {metric.upper()}",),
                                     measured=np.array([value]),
                                     predict=lambda pr, prof, i=i, bp=bp, w=workload, m=metric: runs.mean(
                                         pr, prof, i, bp, w, m)))
    return blocks


class _BenchmarkRuns:
    """The benchmark points' evaluations on the latest calibrated problem: a point's TTFT and TPOT blocks
    share its one evaluation, and points of equal lengths share their cost grid (``evaluate``'s table memo),
    which gives the numbers evaluating every block on its own gives, in a fraction of the time."""

    def __init__(self) -> None:
        #: held while the memo lives: the memo's keys are identities of its catalog objects
        self._calibrated: ServingProblem | None = None
        self._memo: TableMemo = {}
        self._runs: dict[int, Evaluation] = {}

    def mean(self, calibrated: ServingProblem, profile: CalibrationProfile, index: int, point: BenchmarkPoint,
             workload: Workload | None, metric: str) -> FloatArray:
        """The mean TTFT or TPOT [s] of benchmark run ``index``: its ``workload`` on the ``calibrated``
        problem, or its own problem with the ``profile`` applied."""
        if calibrated is not self._calibrated:
            self._calibrated, self._memo, self._runs = calibrated, {}, {}
        if index not in self._runs:
            if workload is not None:
                run = replace(calibrated, workload=workload)
            else:
                assert point.problem is not None
                run = calibrated_problem(point.problem, profile)
            self._runs[index] = evaluate(run, table_memo=self._memo)
        ev = self._runs[index]
        stats = ev.ttft_s if metric == "ttft" else ev.tpot_s
        return np.array([stats.mean])


def _benchmark_workload(problem: ServingProblem, bp: BenchmarkPoint) -> Workload:
    if bp.concurrency is not None:
        arrival = Arrival(kind="closed_loop", concurrency=int(bp.concurrency))
    elif bp.rate_per_s is not None:
        arrival = Arrival(kind="poisson", rate_per_s=float(bp.rate_per_s))
    else:
        raise InvalidInput("a benchmark point needs concurrency or rate_per_s", field="benchmarks")
    return Workload(input_tokens=fixed_length(int(round(bp.input_tokens))),
                    output_tokens=fixed_length(int(round(bp.output_tokens))), arrival=arrival,
                    prefix_cache_hit_fraction=problem.workload.prefix_cache_hit_fraction)


# ------------------------------------------------------------------------------------------------ fit
def _profile(x: FloatArray, names: tuple[str, ...], base: CalibrationProfile, fitted_on: str) -> CalibrationProfile:
    values = {}
    for name, v in zip(names, x, strict=True):
        values[name] = float(v) * OVERHEAD_UNITS_S[name] if name in OVERHEAD_UNITS_S else float(np.exp(v))
    return replace(base, **values, fitted_on=fitted_on)


def _to_fit_units(name: str, value: float) -> float:
    return value / OVERHEAD_UNITS_S[name] if name in OVERHEAD_UNITS_S else float(np.log(value))


def calibrate(problem: ServingProblem, measurements: Measurements,
              benchmarks: tuple[BenchmarkPoint, ...] = (), *, fitted_on: str = "") -> CalibrationResult:
    """Fit the profile that makes the model agree with ``measurements`` and ``benchmarks`` on ``problem``'s
    deployment (its workload gives the context of iteration records)."""
    assumptions: list[str] = []
    blocks = _blocks(problem, measurements, benchmarks, assumptions)
    measured = np.concatenate([b.measured for b in blocks]) if blocks else np.zeros(0)
    if measured.size == 0:
        raise InvalidInput("nothing to fit: give measurements (TTFT, decode, iterations, KV transfer, a metrics "
                           "scrape or a vllm bench result) or benchmark points", field="measurements")
    if not np.all(np.isfinite(measured)) or np.any(measured <= 0):
        raise InvalidInput("every measured time must be finite and positive", field="measurements")
    engine = problem.engine
    names = tuple(p[0] for p in PARAMETERS)
    initial = {"gemm_efficiency_scale": 1.0, "gemm_k_half_scale": 1.0, "memory_efficiency_scale": 1.0,
               "collective_efficiency_scale": 1.0, "step_overhead_s": engine.step_overhead_s,
               "request_overhead_s": engine.request_overhead_s}
    lo = np.array([_to_fit_units(n, max(lower, 1e-12) if n not in OVERHEAD_UNITS_S else lower)
                   for n, lower, _, _ in PARAMETERS])
    hi = np.array([_to_fit_units(n, upper) for n, _, upper, _ in PARAMETERS])
    x0 = np.clip(np.array([_to_fit_units(n, initial[n]) for n in names]), lo, hi)
    base = CalibrationProfile()
    evaluations = 0

    def predicted(x: FloatArray) -> FloatArray:
        nonlocal evaluations
        evaluations += 1
        prof = _profile(x, names, base, fitted_on)
        pr = calibrated_problem(problem, prof)
        return np.concatenate([np.asarray(b.predict(pr, prof), dtype=np.float64).ravel() for b in blocks])

    def data_residuals(x: FloatArray) -> FloatArray:
        pred = predicted(x)
        return np.log(np.maximum(pred, 1e-300) / measured)

    try:
        r0 = data_residuals(x0)
    except PlannerError:
        raise
    # which parameters the residuals depend on at all (central differences of ±10 % / ±1 unit)
    step = 0.1
    sens = np.zeros((r0.size, len(names)))
    for j in range(len(names)):
        xp, xm = x0.copy(), x0.copy()
        xp[j] = min(x0[j] + step, hi[j])
        xm[j] = max(x0[j] - step, lo[j])
        sens[:, j] = (data_residuals(xp) - data_residuals(xm)) / max(xp[j] - xm[j], 1e-12)
    informative = np.linalg.norm(sens, axis=0) > 1e-3
    free = np.flatnonzero(informative)
    x = x0.copy()
    if free.size:
        def residuals(z: FloatArray) -> FloatArray:
            xx = x0.copy()
            xx[free] = z
            return np.concatenate([data_residuals(xx), PRIOR_WEIGHT * (z - x0[free])])

        fit = optimize.least_squares(residuals, x0[free], bounds=(lo[free], hi[free]), loss="soft_l1",
                                     f_scale=LOSS_SCALE, max_nfev=MAX_FUNCTION_EVALUATIONS, x_scale=1.0)
        x[free] = fit.x
    r1 = data_residuals(x)
    params = _parameter_report(names, x0, x, lo, hi, sens, informative, free, r1, data_residuals)
    obs = []
    pred0, pred1 = measured * np.exp(r0), measured * np.exp(r1)
    labels = [(b.kind, lab) for b in blocks for lab in b.labels]
    for (kind, lab), m_, a, b_ in zip(labels, measured, pred0, pred1, strict=True):
        obs.append(Observation(kind=kind, label=lab, measured=float(m_), predicted_before=float(a),
                               predicted_after=float(b_)))
    profile = _profile(x, names, base, fitted_on)
    # overheads that did not move stay the engine's own (None), so the profile carries no stale copy
    profile = replace(profile, **{n: None for n in OVERHEAD_UNITS_S if not informative[names.index(n)]})
    err0 = float(np.median(np.abs(pred0 / measured - 1.0)))
    err1 = float(np.median(np.abs(pred1 / measured - 1.0)))
    status = "fitted" if free.size else "no_information"
    message = (f"fitted {free.size} of {len(names)} parameters to {measured.size} measurements: median "
               f"|error| {100 * err0:.1f} % → {100 * err1:.1f} %") if free.size else (
        "the measurements do not depend on any calibration parameter; the profile is the catalog's")
    return CalibrationResult(status=status, message=message, profile=profile, parameters=tuple(params),
                             observations=tuple(obs), median_abs_error_before_fraction=err0,
                             median_abs_error_after_fraction=err1, num_evaluations=evaluations,
                             assumptions=tuple(dict.fromkeys(assumptions)))


def _parameter_report(names: tuple[str, ...], x0: FloatArray, x: FloatArray, lo: FloatArray, hi: FloatArray,
                      sens0: FloatArray, informative: NDArray[np.bool_], free: NDArray[np.intp], r1: FloatArray,
                      data_residuals: Callable[[FloatArray], FloatArray]) -> list[ParameterFit]:
    n_data = r1.size
    se = np.full(len(names), np.nan)
    corr = np.zeros((len(names), len(names)))
    if free.size:
        # Jacobian of the data residuals at the solution (central differences), the prior's curvature added
        jac = np.zeros((n_data, free.size))
        for i, j in enumerate(free):
            h = 0.02
            xp, xm = x.copy(), x.copy()
            xp[j] = min(x[j] + h, hi[j])
            xm[j] = max(x[j] - h, lo[j])
            jac[:, i] = (data_residuals(xp) - data_residuals(xm)) / max(xp[j] - xm[j], 1e-12)
        dof = max(n_data - free.size, 1)
        s2 = max(float(np.sum(r1**2)) / dof, 0.02**2)  # never claim better than 2 % measurement noise
        # what the data alone say (the prior would make every parameter look determined)
        info = jac.T @ jac + 1e-12 * np.eye(free.size)
        cov = s2 * np.linalg.pinv(info, rcond=1e-10)
        d = np.sqrt(np.maximum(np.diag(cov), 0.0))
        se[free] = d
        c = cov / np.maximum(np.outer(d, d), 1e-300)
        corr[np.ix_(free, free)] = c
    out = []
    for j, (name, lower, upper, unit) in enumerate(PARAMETERS):
        to_value = (lambda v, n=name: v * OVERHEAD_UNITS_S[n]) if name in OVERHEAD_UNITS_S else np.exp
        value, initial = float(to_value(x[j])), float(to_value(x0[j]))
        limit = PINNED_SE.get(name, PINNED_SE_SCALE)
        if not informative[j]:
            out.append(ParameterFit(name=name, unit=unit, initial=initial, value=value, lower=lower, upper=upper,
                                    standard_error=None, pinned_down=False,
                                    reason="the measurements do not depend on it: kept at the catalog's value"))
            continue
        err = float(se[j])
        err_unit = err * OVERHEAD_UNITS_S[name] if name in OVERHEAD_UNITS_S else value * err
        partners = [names[k] for k in free if k != j and abs(corr[j, k]) > CONFOUNDED]
        at_bound = x[j] <= lo[j] + 1e-6 or x[j] >= hi[j] - 1e-6
        if err > limit or partners:
            reason = (f"confounded with {', '.join(partners)} (|correlation| > {CONFOUNDED}): the data fix a "
                      "combination, not each" if partners else
                      f"weakly determined: ± {err_unit:.3g} {unit} (1 standard error)")
            pinned = False
        else:
            reason = f"pinned down: ± {err_unit:.3g} {unit} (1 standard error)"
            pinned = True
        if at_bound:
            reason += "; at the bound of its range"
        out.append(ParameterFit(name=name, unit=unit, initial=initial, value=value, lower=lower, upper=upper,
                                standard_error=err_unit, pinned_down=pinned, reason=reason))
    return out
