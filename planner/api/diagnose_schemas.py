"""Request and response models of ``POST /v1/diagnose`` and ``POST /v1/calibrate``: what a running
deployment measured, what the model expected, and the calibration profile fitted to close the gap."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from planner.api.schemas import _REQUEST, _RESPONSE, MAX_TOKENS, FiniteFloat, ModelChoice
from planner.api.serving_schemas import DeploymentIn, MetricsOut, SloIn, WorkloadIn

#: most structured samples of one kind in a request (a scheduler log is summarized before it is sent)
MAX_RECORDS = 100_000
#: largest metrics scrape accepted [characters]
MAX_METRICS_TEXT = 5_000_000
#: most benchmark points one calibration fits
MAX_BENCHMARKS = 50

Seconds = Field(gt=0, le=1e6, allow_inf_nan=False)
SecondsOrZero = Field(ge=0, le=1e6, allow_inf_nan=False)


class TtftSampleIn(BaseModel):
    model_config = _REQUEST

    input_tokens: float = Field(
        gt=0, le=MAX_TOKENS, allow_inf_nan=False, description="Prompt length [tokens]"
    )
    ttft_s: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="Mean time to first token [s]")
    queue_s: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False,
                                  description="Mean time waiting in the engine's queue, when known [s]")
    prefill_s: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False,
        description="Engine-reported prefill time (first iteration to first token) [s]",
    )
    count: int = Field(1, ge=1, le=10**9, description="Requests the means are over [requests]")


class DecodeSampleIn(BaseModel):
    model_config = _REQUEST

    context_tokens: float = Field(ge=0, le=MAX_TOKENS, allow_inf_nan=False,
                                  description="Tokens of history (prompt + generated so far) [tokens]")
    itl_s: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="Mean gap between tokens [s]")
    batch_size: float | None = Field(None, ge=1, le=65_536, allow_inf_nan=False,
                                     description="Sequences decoding together, when known [sequences]")
    count: int = Field(1, ge=1, le=10**9, description="Gaps the mean is over [gaps]")


class IterationIn(BaseModel):
    model_config = _REQUEST

    duration_s: float = Field(gt=0, le=1e4, allow_inf_nan=False, description="Iteration time [s]")
    decode_tokens: int = Field(
        ge=0, le=65_536, description="Sequences that decoded one token each, so tokens decoded [tokens]"
    )
    prefill_tokens: int = Field(
        ge=0, le=MAX_TOKENS, description="Prompt tokens prefilled (all chunks) [tokens]"
    )
    num_prefill: int = Field(0, ge=0, le=65_536, description="Sequences with prompt tokens in it [sequences]")
    start_s: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Start on the engine's clock [s]"
    )


class KvTransferMeasuredIn(BaseModel):
    model_config = _REQUEST

    bytes_per_request: float | None = Field(None, gt=0, le=1e15, allow_inf_nan=False,
                                            description="KV-cache bytes moved per request [bytes]")
    bandwidth_bytes_per_s: float | None = Field(None, gt=0, le=1e15, allow_inf_nan=False,
                                                description="Achieved transfer bandwidth [bytes/s]")
    wait_s: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False,
                                 description="Time a request waits for its KV cache beyond its prefill [s]")
    transfer_s: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                     description="Duration of one request's transfer [s]")


class MeasurementsIn(BaseModel):
    """Any of: structured samples, a vLLM Prometheus ``/metrics`` scrape (text exposition format), or the
    result JSON of ``vllm bench serve`` (``--save-result``, optionally ``--save-detailed``)."""

    model_config = _REQUEST

    ttft_by_prompt: list[TtftSampleIn] = Field(
        default_factory=list,
        max_length=MAX_RECORDS,
        description="TTFT by prompt length, with queue time when known",
    )
    decode_by_context: list[DecodeSampleIn] = Field(
        default_factory=list, max_length=MAX_RECORDS, description="Inter-token latency by context length")
    iterations: list[IterationIn] = Field(default_factory=list, max_length=MAX_RECORDS,
                                          description="Scheduler iteration records")
    kv_transfer: KvTransferMeasuredIn | None = Field(None, description="KV-transfer figures (disaggregated)")
    metrics_text: str | None = Field(None, max_length=MAX_METRICS_TEXT,
                                     description="A vLLM /metrics scrape in the Prometheus text format")
    metrics_model_name: str | None = Field(
        None, max_length=500, description="The model_name label to read when the scrape serves several models"
    )
    vllm_bench_result: dict[str, Any] | None = Field(None, description="The JSON `vllm bench serve` saved")


class DiagnoseRequest(ModelChoice):
    """A running deployment, the workload it serves, and what was measured on it."""

    deployment: DeploymentIn = Field(description="The deployment measured (the shapes of /v1/evaluate)")
    workload: WorkloadIn = Field(description="The workload it served while measured")
    measurements: MeasurementsIn = Field(
        description="What was measured: samples, a metrics scrape or a bench result"
    )
    slo: SloIn | None = Field(None, description="Latency targets, to say which findings break them")

    model_config = _REQUEST | {"json_schema_extra": {"examples": [{
        "model": "meta-llama/Llama-3.1-8B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1},
                       "token_budget": 2048},
        "workload": {"input_tokens": 2000, "output_tokens": 300,
                     "arrival": {"kind": "poisson", "rate_per_s": 5.0}},
        "measurements": {"ttft_by_prompt": [
            {"input_tokens": 500, "ttft_s": 1.08, "queue_s": 1.0},
            {"input_tokens": 2000, "ttft_s": 1.17, "queue_s": 1.0},
            {"input_tokens": 8000, "ttft_s": 1.62, "queue_s": 1.0}]},
    }]}}


class FindingOut(BaseModel):
    model_config = _RESPONSE

    symptom: str = Field(
        description="first_token_later_for_longer_prompts, later_tokens_slower_as_histories_grow, "
        "long_prompt_interrupts_streams or pools_spend_time_moving_state"
    )
    phase: str = Field(description="queueing, prefill, decode, scheduling_interference, kv_transfer, "
                                   "outside_model (tokenization, network, client), or none")
    severity: str = Field(description="ok, warning or problem")
    summary: str = Field(description="The finding in one sentence")
    measured: dict[str, FiniteFloat] = Field(description="The measured figures, SI units in their names")
    expected: dict[str, FiniteFloat] = Field(description="The model's figures for the same quantities")
    deviation_fraction: FiniteFloat = Field(
        description="Measured / expected − 1 of the figure the finding rests on, in −1..∞ (0 = as expected)"
    )
    evidence: list[str] = Field(
        description="The comparisons the finding rests on, in words with their numbers"
    )
    next_step: str = Field(description="What to measure or change next")


class DiagnoseResponse(BaseModel):
    model_config = _RESPONSE

    slowest_phase: str = Field(description="The phase of the most severe finding, or none")
    summary: str = Field(description="The diagnosis in one sentence")
    findings: list[FindingOut] = Field(description="One finding per symptom the measurements can speak to")
    expected: MetricsOut | None = Field(
        None, description="The model's evaluation of this deployment and workload"
    )
    measurement_sources: list[str] = Field(description="Which kinds of measurement were read")
    notes: list[str] = Field(description="Defaults applied and caveats of the comparison")


# -------------------------------------------------------------------------------------------- calibrate
class BenchmarkPointIn(BaseModel):
    """One benchmark run (a row like the shared serving benchmarks): fixed lengths at a closed-loop
    concurrency or an open-loop rate, and the means it measured."""

    model_config = _REQUEST

    input_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Prompt length [tokens]")
    output_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Generated tokens per request [tokens]")
    concurrency: int | None = Field(
        None, ge=1, le=100_000, description="Closed-loop clients (--max-concurrency) [clients]"
    )
    rate_per_s: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                     description="Open-loop Poisson arrival rate [requests/s]")
    measured_ttft_s: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False, description="Mean TTFT [s]"
    )
    measured_tpot_s: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                          description="Mean time per output token after the first [s]")
    label: str = Field("", max_length=200, description="A name for the run in the residuals (free text)")


class CalibrateRequest(ModelChoice):
    """Measurements of one deployment to fit the efficiency parameters to."""

    workload: WorkloadIn | None = Field(
        None, description="The workload the measurements were taken under (gives iteration records their "
                          "context and TTFT samples their expected queueing); optional for benchmark points")
    deployment: DeploymentIn = Field(description="The deployment measured (the shapes of /v1/evaluate)")
    measurements: MeasurementsIn = Field(
        default_factory=MeasurementsIn, description="Samples, a metrics scrape or a bench result to fit to"
    )
    benchmarks: list[BenchmarkPointIn] = Field(
        default_factory=list, max_length=MAX_BENCHMARKS, description="Benchmark runs to fit to, at most 50"
    )

    #: the example's benchmarks are three measured rows of ../shared/data/serving_benchmarks_h100.csv
    #: (vLLM 0.12.0, Qwen3-32B, TP2 on H100 SXM: 1024×128 at 8 and 32 clients, 4096×128 at 16)
    model_config = _REQUEST | {"json_schema_extra": {"examples": [{
        "model": "Qwen/Qwen3-32B",
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 2},
                       "max_batch_size": 32},
        "benchmarks": [
            {"input_tokens": 1024, "output_tokens": 128, "concurrency": 8,
             "measured_ttft_s": 0.154248, "measured_tpot_s": 0.018037},
            {"input_tokens": 1024, "output_tokens": 128, "concurrency": 32,
             "measured_ttft_s": 0.250471, "measured_tpot_s": 0.0293754},
            {"input_tokens": 4096, "output_tokens": 128, "concurrency": 16,
             "measured_ttft_s": 0.896848, "measured_tpot_s": 0.0425668}],
    }]}}


class CalibrationOut(BaseModel):
    """The fitted profile: pass it as ``calibration`` to any other endpoint."""

    model_config = _RESPONSE

    gemm_efficiency_scale: FiniteFloat = Field(
        description="Multiplies the fraction of tensor peak a large GEMM reaches [×]"
    )
    gemm_k_half_scale: FiniteFloat = Field(
        description="Multiplies the reduction depth at which a GEMM reaches half its efficiency [×]"
    )
    memory_efficiency_scale: FiniteFloat = Field(
        description="Multiplies the achieved fraction of HBM bandwidth [×]"
    )
    collective_efficiency_scale: FiniteFloat = Field(
        description="Multiplies the achieved link-bandwidth fraction of collectives [×]"
    )
    step_overhead_s: FiniteFloat | None = Field(
        description="Host time of one scheduler iteration [s]; null keeps the engine's"
    )
    request_overhead_s: FiniteFloat | None = Field(
        description="Front-end time of one request [s]; null keeps the engine's"
    )
    fitted_on: str = Field(description="What the profile was fitted on")


class ParameterFitOut(BaseModel):
    model_config = _RESPONSE

    name: str = Field(description="The parameter: a field of the calibration profile")
    unit: str = Field(description="× for a scale, s for an overhead")
    initial: FiniteFloat = Field(description="The catalog's value the fit started from")
    value: FiniteFloat = Field(description="The fitted value, in the parameter's unit")
    lower: FiniteFloat = Field(description="The lower bound of the fit, in the parameter's unit")
    upper: FiniteFloat = Field(description="The upper bound of the fit, in the parameter's unit")
    standard_error: FiniteFloat | None = Field(
        description="1 standard error in the parameter's unit; null when the measurements do not depend on it"
    )
    pinned_down: bool = Field(description="Whether the measurements determine it")
    reason: str = Field(description="Why it is or is not pinned down")


class ResidualOut(BaseModel):
    model_config = _RESPONSE

    kind: str = Field(
        description="prefill, ttft, decode, iteration, kv_transfer, benchmark_ttft, benchmark_tpot"
    )
    label: str = Field(description="Which measurement (the benchmark's label, the prompt length, ...)")
    measured: FiniteFloat = Field(description="[s], or [bytes/s] for kv_transfer")
    predicted_before: FiniteFloat = Field(description="The catalog's prediction, in the unit of measured")
    predicted_after: FiniteFloat = Field(description="The calibrated prediction, in the unit of measured")
    error_before_fraction: FiniteFloat = Field(
        description="predicted_before / measured − 1, in −1..∞"
    )
    error_after_fraction: FiniteFloat = Field(description="predicted_after / measured − 1, in −1..∞")


class CalibrateResponse(BaseModel):
    model_config = _RESPONSE

    status: str = Field(description="fitted, or no_information when no parameter affects the measurements")
    message: str = Field(description="The fit in one sentence")
    calibration: CalibrationOut = Field(
        description="The fitted profile: pass it as calibration to any endpoint"
    )
    parameters: list[ParameterFitOut] = Field(
        description="Each parameter: start, fitted value, bounds, error"
    )
    could_not_pin_down: list[str] = Field(description="Parameters the measurements leave undetermined")
    residuals: list[ResidualOut] = Field(
        description="Each measurement against the predictions before and after"
    )
    median_abs_error_before_fraction: FiniteFloat = Field(
        description="Median |error_before_fraction| of the residuals, in 0..∞"
    )
    median_abs_error_after_fraction: FiniteFloat = Field(
        description="Median |error_after_fraction| of the residuals, in 0..∞"
    )
    num_evaluations: int = Field(description="Model evaluations the fit took [evaluations]")
    measurement_sources: list[str] = Field(description="Which kinds of measurement were read")
    assumptions: list[str] = Field(description="What the fit assumed or defaulted, in words")
