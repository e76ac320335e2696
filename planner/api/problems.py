"""RFC 9457 problem details: the models, the responses and the one function that registers every handler.

A problem body is ``{type, title, status, detail, instance}`` plus the domain error's ``extra``
(numbers, closest ids, the offending field). ``type`` is a relative URI, ``/problems/<slug>``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from planner.errors import PlannerError

logger = logging.getLogger("planner.api")

PROBLEM_MEDIA_TYPE = "application/problem+json"
_COMPONENT_REF = "#/components/schemas/{model}"
_HTTP_SLUGS = {
    400: "bad-request",
    404: "not-found",
    405: "method-not-allowed",
    413: "request-too-large",
    415: "unsupported-media-type",
}
_LOCATION_ROOTS = ("body", "query", "path", "header", "cookie")


class Problem(BaseModel):
    """An RFC 9457 problem; domain errors add their own members (``closest_ids``, byte counts, ...)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str


class FieldError(BaseModel):
    """One invalid input: ``field`` is the dotted path inside the request (``parallelism.tp``)."""

    field: str
    loc: list[str | int]
    msg: str
    type: str


class ValidationProblem(Problem):
    errors: list[FieldError]


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_MEDIA_TYPE


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such numbers in a problem's members become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def problem_body(
    *, status: int, slug: str, title: str, detail: str, instance: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The members of a problem object; ``extra`` never overrides the five standard ones."""
    body = _finite(jsonable_encoder(dict(extra or {})))
    body.update(type=f"/problems/{slug}", title=title, status=status, detail=detail, instance=instance)
    return body


def validation_problem_body(errors: Sequence[Mapping[str, Any]], instance: str) -> dict[str, Any]:
    """The 422 problem object of pydantic ``errors`` (what the handler answers for an invalid request)."""
    fields = _field_errors(errors)
    named = "; ".join(f"{e['field']}: {e['msg']}" for e in fields[:5])
    more = f" (and {len(fields) - 5} more)" if len(fields) > 5 else ""
    return problem_body(status=422, slug="validation-error", title="Invalid request",
                        detail=f"Invalid request: {named}{more}", instance=instance, extra={"errors": fields})


def problem_response(
    *,
    status: int,
    slug: str,
    title: str,
    detail: str,
    instance: str,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ProblemResponse:
    """Build a problem+json response; ``extra`` never overrides the five standard members."""
    body = problem_body(status=status, slug=slug, title=title, detail=detail, instance=instance, extra=extra)
    return ProblemResponse(body, status_code=status, headers=dict(headers or {}))


def field_path(error: Mapping[str, Any]) -> str:
    """Dotted path of the field a pydantic error is about, without the ``body``/``query`` root.

    Model-level checks name their field in ``ctx["field"]``.
    """
    if error.get("type") == "json_invalid":
        return "body"
    loc = list(error.get("loc", ()))
    if loc and loc[0] in _LOCATION_ROOTS:
        loc = loc[1:]
    ctx = error.get("ctx") or {}
    if isinstance(ctx.get("field"), str):
        loc.append(ctx["field"])
    return ".".join(str(part) for part in loc) or "body"


def _field_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "field": field_path(err),
            "loc": [p if isinstance(p, int) else str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in errors
    ]


async def _planner_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, PlannerError)
    if exc.status >= 500:
        logger.error("%s on %s: %s", type(exc).__name__, request.url.path, exc.detail)
    return problem_response(
        status=exc.status,
        slug=exc.slug,
        title=exc.title,
        detail=exc.detail,
        instance=request.url.path,
        # a deadline hit under load may pass on a retry; the problem says how to narrow the search otherwise
        headers={"Retry-After": "1"} if exc.status == 503 else None,
        extra=exc.extra,
    )


async def _validation_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    body = validation_problem_body(exc.errors(), request.url.path)
    return ProblemResponse(body, status_code=422)


async def _http_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    phrase = HTTPStatus(status).phrase
    if status == 404:
        detail = f"No resource at {request.method} {request.url.path}"
    elif status == 405:
        detail = f"Method {request.method} is not allowed on {request.url.path}"
    else:
        detail = str(exc.detail) if exc.detail else phrase
    return problem_response(
        status=status,
        slug=_HTTP_SLUGS.get(status, f"http-{status}"),
        title=phrase,
        detail=detail,
        instance=request.url.path,
        headers=exc.headers,
    )


async def _unexpected_error(request: Request, exc: Exception) -> ProblemResponse:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        status=500,
        slug="internal-error",
        title="Internal Server Error",
        detail="The planner failed unexpectedly; the error has been logged.",
        instance=request.url.path,
    )


def register_problem_handlers(app: FastAPI) -> None:
    """Map every error the service can meet to a problem+json response (the only place that does)."""
    app.add_exception_handler(PlannerError, _planner_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


_DESCRIPTIONS = {
    400: "A request body that could not be parsed (not UTF-8 text, or JSON nested too deeply)",
    404: "Unknown GPU, model or route",
    405: "Method not allowed",
    413: "Request body or inline model_config too large",
    422: "Invalid input (names the field) or an impossible configuration",
    500: "Unexpected failure (logged; no details leak)",
    503: "The search passed its deadline (names the deadline and the stage reached; Retry-After: 1)",
}


def problem_responses(statuses: Iterable[int]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries documenting the problem bodies a route can return."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        schema: dict[str, Any] = {"$ref": _COMPONENT_REF.format(model="Problem")}
        if status == 422:  # field errors, or a domain error such as model-does-not-fit
            schema = {"anyOf": [{"$ref": _COMPONENT_REF.format(model="ValidationProblem")}, schema]}
        out[status] = {
            "description": _DESCRIPTIONS.get(status, HTTPStatus(status).phrase),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": schema}},
        }
    return out


def problem_schemas() -> dict[str, Any]:
    """JSON schemas of the problem models, keyed by component name, for ``components.schemas``."""
    _, top = models_json_schema(
        [(Problem, "serialization"), (ValidationProblem, "serialization")],
        ref_template=_COMPONENT_REF,
    )
    return dict(top.get("$defs", {}))
