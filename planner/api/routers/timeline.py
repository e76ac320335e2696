"""POST /v1/timeline: a small scenario played iteration by iteration, as JSON events or as an SVG drawing."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response

from planner.api.catalogs import CatalogsDep
from planner.api.problems import problem_responses
from planner.api.routers.estimate import calibration_of, resolve_dtypes, resolve_engine, resolve_model
from planner.api.routers.evaluate import (
    UNCHUNKED_MIN_TOKEN_BUDGET,
    build_deployment,
    deployment_echo,
    inherited_efficiency_notes,
)
from planner.api.serving_schemas import (
    AggregatedDeploymentIn,
    DisaggregatedDeploymentIn,
)
from planner.api.timeline_schemas import (
    KvLinkOut,
    PromptOut,
    TimelineOut,
    TimelineRequest,
    TimelineResponse,
    TimelineScenarioIn,
    TimelineScenarioOut,
)
from planner.api.timeline_svg import SVG_MEDIA_TYPE, render_timeline_svg
from planner.errors import PlannerError
from planner.serving.timeline import PromptArrival, Timeline, TimelineScenario, build_timeline
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment
from planner.serving.workload import Arrival, Workload, fixed_length

JSON_MEDIA_TYPE = "application/json"

router = APIRouter(prefix="/timeline", tags=["timeline"],
                   responses=problem_responses([400, 404, 413, 422, 500]))

_T = TypeVar("_T")
_PROMPT_FIELD = re.compile(r"^scenario\.prompts\.(\d+)(.*)$")
_STREAM_FIELD = re.compile(r"^scenario\.context_tokens(\.\d+)?$")


def _request_path(field: str, deployment_path: str, scenario: TimelineScenarioIn) -> str:
    """The request path of a field the core or ``build_deployment`` names.

    ``deployment.*`` is the deployment at ``deployment_path``; the core's ``scenario.prompts.k`` is
    ``prompt_tokens`` (k = 0) or ``additional_prompts.{k - 1}``; its per-stream contexts are
    ``context_tokens`` or ``stream_context_tokens``, whichever the request gave.
    """
    if field == "deployment" or field.startswith("deployment."):
        return deployment_path + field.removeprefix("deployment")
    if match := _PROMPT_FIELD.match(field):
        k, rest = int(match.group(1)), match.group(2)
        if k == 0:
            return "scenario" + (rest or ".prompt_tokens")
        return f"scenario.additional_prompts.{k - 1}{rest}"
    if match := _STREAM_FIELD.match(field):
        if scenario.stream_context_tokens is not None:
            return "scenario.stream_context_tokens" + (match.group(1) or "")
        return "scenario.context_tokens"
    return "scenario.additional_prompts" if field == "scenario.prompts" else field


def _located(build: Callable[[], _T], scenario: TimelineScenarioIn, deployment_path: str | None = None) -> _T:
    """Run ``build``, re-raising a domain error with the request path of the field it names.

    With ``deployment_path`` (building or playing that deployment): a problem without a field names the
    deployment, and a problem of the scenario on one of ``compare_with`` says which in its detail.
    """
    try:
        return build()
    except PlannerError as exc:
        field = exc.extra.get("field")
        where = deployment_path or "deployment"
        path = where if field is None else _request_path(str(field), where, scenario)
        detail = exc.detail
        compared = deployment_path is not None and deployment_path != "deployment"
        if compared and deployment_path is not None and not path.startswith(deployment_path):
            detail = f"on {deployment_path}: {detail}"
        raise type(exc)(detail, **(exc.extra | {"field": path})) from exc


def _scenario(body: TimelineScenarioIn) -> TimelineScenario:
    contexts = body.stream_context_tokens or [body.context_tokens] * body.running_streams
    prompts = [PromptArrival(prompt_tokens=body.prompt_tokens)]
    prompts += [
        PromptArrival(prompt_tokens=p.prompt_tokens, delay_s=p.delay_s) for p in body.additional_prompts
    ]
    return _located(
        lambda: TimelineScenario(
            context_tokens=tuple(int(c) for c in contexts),
            prompts=tuple(prompts),
            warmup_iterations=body.warmup_iterations,
            decode_iterations_after=body.decode_iterations_after,
        ),
        body,
    )


def _with_unchunked_budget(
    body: AggregatedDeploymentIn | DisaggregatedDeploymentIn,
    scenario: TimelineScenario,
    notes: list[str],
    path: str,
) -> AggregatedDeploymentIn | DisaggregatedDeploymentIn:
    """Without chunked prefill vLLM sets ``max_num_batched_tokens = max(max_model_len, 2048)``; the scenario's
    longest prompt stands in for max_model_len when the request gives no budget."""
    if not isinstance(body, AggregatedDeploymentIn) or body.chunked_prefill or body.token_budget is not None:
        return body
    longest = int(scenario.prompt_tokens.max())
    budget = max(longest, UNCHUNKED_MIN_TOKEN_BUDGET)
    notes.append(
        f"{path}: chunked_prefill is off: token_budget defaults to {budget}, vLLM's max(max_model_len, "
        f"{UNCHUNKED_MIN_TOKEN_BUDGET}) with the scenario's longest prompt ({longest} tokens) standing in "
        "for max_model_len"
    )
    return body.model_copy(update={"token_budget": budget})


def _timeline_out(tl: Timeline, dep: AggregatedDeployment | DisaggregatedDeployment) -> TimelineOut:
    out = asdict(tl)
    link = None
    if tl.kv_link is not None and tl.kv_bytes_per_token is not None:
        link = KvLinkOut(
            link=tl.kv_link.link,
            bandwidth_bytes_per_s=tl.kv_link.bandwidth_bytes_per_s,  # type: ignore[arg-type]
            reason=tl.kv_link.reason,
            kv_bytes_per_token=tl.kv_bytes_per_token,
        )
    out.pop("kv_bytes_per_token")
    for p in out["prefill_passes"]:
        p["duration_s"] = p["end_s"] - p["start_s"]
    return TimelineOut.model_validate(
        out
        | {
            "deployment": deployment_echo(dep, None if link is None else link.link),
            "num_iterations": len(tl.iterations),
            "ttft_s": tl.requests[0].ttft_s,
            "kv_link": link,
        }
    )


def _one_worker_note(dep: AggregatedDeployment | DisaggregatedDeployment, path: str) -> list[str]:
    if isinstance(dep, AggregatedDeployment) and dep.replicas > 1:
        return [f"{path}: the timeline follows the one replica the streams and prompts are on"]
    if isinstance(dep, DisaggregatedDeployment) and dep.decode.workers > 1:
        return [f"{path}: the timeline follows the one decode worker the streams and prompts are on"]
    return []


def _media_range_quality(accept: str, media_type: str) -> float:
    """The quality the ``Accept`` header gives ``media_type`` (RFC 9110 Sec. 12.5.1): the most specific
    matching range wins; no match is 0."""
    kind = media_type.split("/")[0]
    best, best_rank = 0.0, -1
    for item in accept.split(","):
        parts = [p.strip() for p in item.split(";")]
        media = parts[0].lower()
        rank = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(media)
        if rank is None or rank < best_rank:
            continue
        quality = 1.0
        for param in parts[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        quality = quality if math.isfinite(quality) else 0.0
        if rank > best_rank or quality > best:
            best, best_rank = min(max(quality, 0.0), 1.0), rank
    return best


def prefers_svg(accept: str | None) -> bool:
    """True when the client ranks ``image/svg+xml`` above ``application/json`` (ties, ``*/*`` and no
    header mean JSON)."""
    if not accept:
        return False
    return _media_range_quality(accept, SVG_MEDIA_TYPE) > _media_range_quality(accept, JSON_MEDIA_TYPE)


_SVG_RESPONSE = {
    200: {
        "description": "The timelines: JSON events by default, an SVG drawing when the Accept header prefers "
        "image/svg+xml",
        "content": {
            SVG_MEDIA_TYPE: {"schema": {"type": "string", "description": "A standalone SVG document"}}
        },
    }
}


@router.post("", response_model=TimelineResponse, responses=_SVG_RESPONSE)
def timeline(body: TimelineRequest, catalogs: CatalogsDep, request: Request, response: Response) -> Any:
    """Every scheduler iteration of a small scenario, N streams decoding when a prompt of P tokens (or a
    few prompts) arrives, on a deployment and optionally on up to three more (``compare_with``).

    The deployment's mode picks the design: aggregated with ``chunked_prefill`` on gives the chunked timeline
    (each iteration's decodes, then prompt chunks from what is left of ``token_budget``), off gives
    prefill-only iterations that stall every stream; disaggregated gives the prefill pool's passes, the
    KV transfers and the decode pool's iterations. To compare designs, list the other deployments in
    ``compare_with`` (e.g. the same GPU with chunked prefill off, and a disaggregated pair).

    Iteration durations come from the cost model (the ``/v1/estimate`` passes); ``ttft_s`` excludes the
    engine's front-end ``request_overhead_s``, reported beside it. JSON by default; with
    ``Accept: image/svg+xml`` the same timelines as a standalone SVG drawing (time axis in milliseconds,
    one lane per stream, request and pool).
    """
    arch = resolve_model(body, catalogs)
    profile = calibration_of(body)
    engine = resolve_engine(body.engine, catalogs, profile)
    weight_dtype, kv_dtype = resolve_dtypes(arch, body.weight_dtype, body.kv_dtype)
    scenario = _scenario(body.scenario)
    # build_deployment reads the workload only for the unchunked default budget, which is set before
    workload = Workload(
        input_tokens=fixed_length(int(scenario.prompt_tokens.max())),
        output_tokens=fixed_length(1),
        arrival=Arrival(kind="closed_loop", concurrency=1),
    )
    notes: list[str] = []
    timelines, gpus = [], []
    specs = [("deployment", body.deployment)] + [
        (f"compare_with.{k}", d) for k, d in enumerate(body.compare_with)
    ]
    for path, spec in specs:
        spec_in = _with_unchunked_budget(spec, scenario, notes, path)
        dep = _located(partial(build_deployment, spec_in, catalogs, workload, notes, profile), body.scenario, path)
        gpus.extend([dep.gpu] if isinstance(dep, AggregatedDeployment) else [dep.prefill.gpu, dep.decode.gpu])
        notes.extend(_one_worker_note(dep, path))
        tl = _located(
            partial(
                build_timeline,
                model=arch,
                engine=engine,
                weight_dtype=weight_dtype,
                kv_dtype=kv_dtype,
                deployment=dep,
                scenario=scenario,
            ),
            body.scenario,
            path,
        )
        timelines.append(_timeline_out(tl, dep))
    out = TimelineResponse(
        model=arch.id,
        engine=engine.id,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        scenario=TimelineScenarioOut(
            running_streams=scenario.running_streams,
            context_tokens=list(scenario.context_tokens),
            prompts=[
                PromptOut(request=k, prompt_tokens=p.prompt_tokens, delay_s=p.delay_s)
                for k, p in enumerate(scenario.prompts)
            ],
            warmup_iterations=scenario.warmup_iterations,
            decode_iterations_after=scenario.decode_iterations_after,
        ),
        timelines=timelines,
        warnings=notes + inherited_efficiency_notes(gpus),
    )
    if prefers_svg(request.headers.get("accept")):
        return Response(
            content=render_timeline_svg(out), media_type=SVG_MEDIA_TYPE, headers={"Vary": "Accept"}
        )
    response.headers["Vary"] = "Accept"
    return out
