"""Request and response models of ``POST /v1/timeline``: a small scenario played iteration by iteration.

The deployment shapes are those of ``POST /v1/evaluate`` (``serving_schemas.DeploymentIn``); the constrained
types come from ``schemas``. Times are seconds from the start of the timeline, an iteration boundary at
which every running stream has just emitted a token.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from planner.api.schemas import _REQUEST, _RESPONSE, FiniteFloat, ModelChoice, Tokens
from planner.api.serving_schemas import DeploymentIn, DeploymentOut
from planner.serving.timeline import (
    MAX_DECODE_ITERATIONS_AFTER,
    MAX_DELAY_S,
    MAX_PROMPTS,
    MAX_STREAMS,
    MAX_WARMUP_ITERATIONS,
)

#: most deployments compared with the main one in one request
MAX_COMPARED = 3

StreamCount = Annotated[
    int, Field(ge=1, le=MAX_STREAMS, description="Sequences decoding when the prompt arrives [sequences]")
]


class AdditionalPromptIn(BaseModel):
    """Another prompt, arriving ``delay_s`` after the first one."""

    model_config = _REQUEST

    prompt_tokens: Tokens = Field(description="Length of this prompt [tokens]")
    delay_s: float = Field(
        ge=0, le=MAX_DELAY_S, allow_inf_nan=False, description="Arrival after the first prompt's arrival [s]"
    )


class TimelineScenarioIn(BaseModel):
    """Running streams decoding on one worker when a prompt (or a few) arrives."""

    model_config = _REQUEST

    running_streams: StreamCount
    context_tokens: Tokens | None = Field(
        None,
        description="Tokens in every running stream's KV cache at the start [tokens]; give this or "
        "stream_context_tokens",
    )
    stream_context_tokens: list[Tokens] | None = Field(
        None,
        max_length=MAX_STREAMS,
        description="Tokens in each running stream's KV cache at the start, one per stream [tokens]",
    )
    prompt_tokens: Tokens = Field(description="Length of the arriving prompt [tokens]")
    additional_prompts: list[AdditionalPromptIn] = Field(
        default_factory=list,
        max_length=MAX_PROMPTS - 1,
        description="More prompts, each arriving some time after the first (requests 1, 2, ... in order)",
    )
    warmup_iterations: int = Field(
        2,
        ge=0,
        le=MAX_WARMUP_ITERATIONS,
        description="Decode-only iterations before the first prompt arrives, at their end [iterations]",
    )
    decode_iterations_after: int = Field(
        3,
        ge=1,
        le=MAX_DECODE_ITERATIONS_AFTER,
        description="Iterations shown after the last prompt's first token (disaggregated: after it joins the "
        "decode batch) [iterations]",
    )

    @model_validator(mode="after")
    def _one_context_form(self) -> TimelineScenarioIn:
        if (self.context_tokens is None) == (self.stream_context_tokens is None):
            field = "context_tokens" if self.context_tokens is None else "stream_context_tokens"
            raise PydanticCustomError(
                "context_form",
                "give exactly one of 'context_tokens' and 'stream_context_tokens'",
                {"field": field},
            )
        if self.stream_context_tokens is not None and len(self.stream_context_tokens) != self.running_streams:
            raise PydanticCustomError(
                "stream_context_length",
                "stream_context_tokens has {given} entries for {streams} running streams: one per stream",
                {
                    "field": "stream_context_tokens",
                    "given": len(self.stream_context_tokens),
                    "streams": self.running_streams,
                },
            )
        return self


_EXAMPLE = {
    "model": "meta-llama/Llama-3.1-8B",
    "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "token_budget": 512, "chunked_prefill": True},
    "compare_with": [
        {"mode": "aggregated", "gpu": "h100-sxm", "chunked_prefill": False},
        {
            "mode": "disaggregated",
            "prefill": {"gpu": "h100-sxm"},
            "decode": {"gpu": "h100-sxm"},
            "kv_transfer": {"link": "nvlink"},
        },
    ],
    "scenario": {"running_streams": 8, "context_tokens": 2000, "prompt_tokens": 6000},
}


class TimelineRequest(ModelChoice):
    """A scenario (streams decoding when prompts arrive) on a deployment, and optionally on others."""

    model_config = _REQUEST | {"json_schema_extra": {"examples": [_EXAMPLE]}}

    deployment: DeploymentIn = Field(
        description="Where the scenario runs (the shapes of /v1/evaluate); its mode and chunked_prefill "
        "pick the design"
    )
    compare_with: list[DeploymentIn] = Field(
        default_factory=list,
        max_length=MAX_COMPARED,
        description="Other deployments to play the same scenario on; their timelines follow the main one's",
    )
    scenario: TimelineScenarioIn = Field(description="The running streams and the arriving prompts")


# ------------------------------------------------------------------------------------------ responses


class ChunkOut(BaseModel):
    """A prompt chunk computed in one iteration."""

    request: int = Field(description="Index of the request (0 = the first prompt)")
    tokens: int = Field(description="Prompt tokens computed in this iteration [tokens]")
    cached_tokens: int = Field(
        description="Earlier tokens of the same prompt, already in the KV cache [tokens]"
    )
    last: bool = Field(description="Completes the prompt: the iteration samples the request's first token")


class IterationOut(BaseModel):
    """One scheduler iteration (one forward pass) of the aggregated worker or of the decode worker."""

    index: int = Field(description="Position in the timeline, from 0")
    start_s: FiniteFloat = Field(description="[s]")
    end_s: FiniteFloat = Field(description="[s]")
    duration_s: FiniteFloat = Field(description="From the cost model for this iteration's contents [s]")
    kind: Literal["decode", "mixed", "prefill"] = Field(
        description="decode: decodes only; mixed: decodes and prompt chunks; prefill: prompts only"
    )
    decode_tokens: int = Field(description="Sequences that decode one token each [tokens]")
    decode_context_tokens: FiniteFloat = Field(
        description="Mean KV context of the decoding sequences, what the iteration is costed at [tokens]"
    )
    prefill_tokens: int = Field(description="Prompt tokens computed, the sum of the chunks [tokens]")
    chunks: list[ChunkOut] = Field(description="The prompt chunks computed in it")
    stalled_streams: list[int] = Field(
        description="Running streams that emit no token in this iteration; every other one emits one"
    )
    emitting_requests: list[int] = Field(description="Requests that emit a token at this iteration's end")


class PrefillPassOut(BaseModel):
    """A prompt's prefill pass on a worker of the prefill pool."""

    request: int = Field(description="Index of the request (0 = the first prompt)")
    worker: int = Field(description="Index of the prefill worker")
    start_s: FiniteFloat = Field(description="[s]")
    end_s: FiniteFloat = Field(description="[s]")
    duration_s: FiniteFloat = Field(description="[s]")
    prompt_tokens: int = Field(description="[tokens]")


class KvTransferOut(BaseModel):
    """A prompt's KV cache moving to the decode worker, layer by layer while the prefill runs."""

    request: int = Field(description="Index of the request (0 = the first prompt)")
    start_s: FiniteFloat = Field(description="[s]")
    end_s: FiniteFloat = Field(description="When the KV is usable on the decode worker [s]")
    kv_bytes: FiniteFloat = Field(description="The whole prompt's KV cache, all layers [bytes]")
    whole_s: FiniteFloat = Field(description="The bytes at the link's bandwidth plus the hand-off [s]")
    exposed_s: FiniteFloat = Field(description="The part after the prefill pass ends, in the TTFT [s]")


class KvLinkOut(BaseModel):
    """The link the KV caches travel on from the prefill to the decode worker."""

    link: Literal["nvlink", "rdma", "pcie"] = Field(description="nvlink, rdma or pcie")
    bandwidth_bytes_per_s: FiniteFloat = Field(description="Aggregate from one prefill worker [bytes/s]")
    reason: str = Field(description="Why this link (auto's choice, or as requested)")
    kv_bytes_per_token: FiniteFloat = Field(description="KV bytes one prompt token moves, all layers [bytes]")


class StreamOut(BaseModel):
    """One running stream's tokens; the first gap is measured from t = 0."""

    stream: int = Field(description="Index of the running stream, from 0")
    context_tokens: int = Field(description="Its KV context at the start [tokens]")
    num_tokens: int = Field(description="Tokens it emits in the timeline [tokens]")
    mean_gap_s: FiniteFloat = Field(description="Mean time between its tokens [s]")
    max_gap_s: FiniteFloat = Field(description="Longest time between two of its tokens [s]")
    max_gap_end_s: FiniteFloat = Field(description="When the token ending the longest gap is emitted [s]")
    stall_s: FiniteFloat = Field(
        description="max_gap_s beyond one decode-only iteration (decode_only_iteration_s) [s]"
    )


class RequestOut(BaseModel):
    """One arriving prompt."""

    request: int = Field(description="0 = the first prompt, then additional_prompts in order")
    prompt_tokens: int = Field(description="[tokens]")
    arrival_s: FiniteFloat = Field(description="[s]")
    prefill_start_s: FiniteFloat = Field(
        description="Start of its first chunk's iteration, or of its pass [s]"
    )
    prefill_end_s: FiniteFloat = Field(description="End of its last chunk's iteration, or of its pass [s]")
    num_prefill_iterations: int = Field(
        description="Iterations carrying its chunks (1 when disaggregated) [iterations]"
    )
    kv_ready_s: FiniteFloat | None = Field(
        description="When its KV lands on the decode worker [s]; null when aggregated"
    )
    first_token_s: FiniteFloat = Field(description="[s]")
    ttft_s: FiniteFloat = Field(
        description="first_token_s − arrival_s: the wait for an iteration boundary or a prefill worker, the "
        "prefill iterations (or pass and exposed KV transfer); without the engine's request_overhead_s [s]"
    )
    decode_join_iteration: int = Field(description="The first iteration in which it decodes")
    token_times_s: list[FiniteFloat] = Field(
        description="When each of its tokens is emitted, the first included [s]"
    )
    max_gap_s: FiniteFloat = Field(
        description="Longest time between two of its tokens (0 with one token) [s]"
    )


class TimelineOut(BaseModel):
    """The scenario on one deployment."""

    model_config = _RESPONSE

    design: Literal["chunked", "unchunked", "disaggregated"] = Field(
        description="chunked / unchunked: aggregated with chunked prefill on / off; disaggregated: prefill "
        "pool, KV link and decode pool"
    )
    deployment: DeploymentOut = Field(description="The deployment, after defaults were applied")
    num_iterations: int = Field(
        description="Iterations of the aggregated or decode worker shown [iterations]"
    )
    decode_only_iteration_s: FiniteFloat = Field(
        description="One decode-only iteration of the running streams at their starting contexts [s]"
    )
    max_stall_s: FiniteFloat = Field(description="Largest stall_s of the running streams [s]")
    max_gap_s: FiniteFloat = Field(description="Largest max_gap_s of the running streams [s]")
    ttft_s: FiniteFloat = Field(description="The first prompt's ttft_s [s]")
    request_overhead_s: FiniteFloat = Field(
        description="The engine's front-end time per request (HTTP, tokenization, scheduling); no ttft_s "
        "includes it [s]"
    )
    end_s: FiniteFloat = Field(description="End of the last iteration or transfer [s]")
    kv_link: KvLinkOut | None = Field(description="The link the KV caches travel on; null when aggregated")
    iterations: list[IterationOut] = Field(description="The aggregated worker's, or the decode worker's")
    prefill_passes: list[PrefillPassOut] = Field(description="The prefill pool's; empty when aggregated")
    kv_transfers: list[KvTransferOut] = Field(description="Empty when aggregated")
    streams: list[StreamOut] = Field(description="The running streams' tokens and stalls")
    requests: list[RequestOut] = Field(description="The arriving prompts: prefill, first token, later tokens")


class PromptOut(BaseModel):
    """An arriving prompt of the scenario."""

    request: int = Field(description="Index of the request (0 = the first prompt)")
    prompt_tokens: int = Field(description="[tokens]")
    delay_s: FiniteFloat = Field(description="After the first prompt's arrival [s]")


class TimelineScenarioOut(BaseModel):
    """The scenario, after defaults were applied."""

    running_streams: int = Field(description="Sequences decoding when the first prompt arrives [sequences]")
    context_tokens: list[int] = Field(description="Each running stream's KV context at the start [tokens]")
    prompts: list[PromptOut] = Field(description="The arriving prompts, the first one included")
    warmup_iterations: int = Field(description="Decode-only iterations before the first prompt [iterations]")
    decode_iterations_after: int = Field(
        description="Iterations shown after the last prompt's first token [iterations]"
    )


class TimelineResponse(BaseModel):
    """The scenario's timeline on the deployment, then on each of ``compare_with``."""

    model_config = _RESPONSE

    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    engine: str = Field(description="The engine profile applied")
    weight_dtype: str = Field(description="Dtype of the weights")
    kv_dtype: str = Field(description="Dtype of the KV cache")
    scenario: TimelineScenarioOut = Field(description="The scenario, after defaults were applied")
    timelines: list[TimelineOut] = Field(description="The main deployment's timeline, then compare_with's")
    warnings: list[str] = Field(description="Caveats: one worker of many shown, defaults applied, ...")
