"""The FastAPI application factory."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from planner import __version__
from planner.api.catalogs import CatalogCache
from planner.api.limits import MAX_BODY_BYTES, BodySizeLimit
from planner.api.middleware import AccessLog, ApiKeyGate
from planner.api.problems import problem_schemas, register_problem_handlers
from planner.api.routers import ROUTERS
from planner.api.settings import Settings, get_settings
from planner.api.whatif_schemas import MAX_WHATIF_BODY_BYTES

API_PREFIX = "/v1"
DESCRIPTION = (
    "Analytical capacity planner for LLM serving: the cost of prefill passes and decode steps per "
    "operator, from accelerator datasheets and Hugging Face model configs. SI units throughout; "
    "errors are RFC 9457 application/problem+json."
)


def _operation_id(route: APIRoute) -> str:
    """operationId = the handler's name, so generated clients get readable methods."""
    return route.name


def _openapi_schema(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(problem_schemas())
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service.

    Parameters
    ----------
    settings
        Settings to use instead of the ``PLANNER_*`` environment (kept on ``app.state``, which the
        ``app_settings`` dependency reads before the environment).
    """
    app = FastAPI(
        title="planner",
        version=__version__,
        description=DESCRIPTION,
        generate_unique_id_function=_operation_id,
    )
    app.state.catalog_cache = CatalogCache()
    app.state.settings = settings
    register_problem_handlers(app)
    app.add_middleware(BodySizeLimit, max_body_bytes=MAX_BODY_BYTES,
                       path_limits={f"{API_PREFIX}/whatif": MAX_WHATIF_BODY_BYTES})
    # the last added runs first: the access log sees every answer (401, 413 included), CORS answers
    # preflights and decorates errors too, the key is checked before any body is read
    resolved = settings if settings is not None else get_settings()
    if resolved.api_key is not None:
        app.add_middleware(ApiKeyGate, api_key=resolved.api_key.get_secret_value())
    if resolved.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(resolved.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "Accept", "X-API-Key", "Authorization", "X-Request-ID"],
                           expose_headers=["X-Request-ID"])
    if resolved.access_log:
        app.add_middleware(AccessLog)
    for router in ROUTERS:
        app.include_router(router, prefix=API_PREFIX)

    def openapi() -> dict[str, Any]:
        return _openapi_schema(app)

    app.openapi = openapi  # type: ignore[method-assign]
    return app
