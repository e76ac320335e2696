"""Service settings, read from ``PLANNER_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import Request
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """What the service reads from its environment.

    Attributes
    ----------
    hardware_dir
        Optional directory of extra or overriding accelerator files (``PLANNER_HARDWARE_DIR``),
        merged over the built-in ``hardware_catalog/``.
    api_key
        When set (``PLANNER_API_KEY``), every request under ``/v1`` must carry it in the ``X-API-Key``
        header (or as ``Authorization: Bearer <key>``); others get a 401 problem. The spec and the docs
        pages stay open.
    cors_origins
        Origins allowed to call the service from a browser (``PLANNER_CORS_ORIGINS``, comma-separated or
        a JSON list; ``*`` for any). Empty: no CORS headers.
    access_log
        One structured line per request on the ``planner.access`` logger (``PLANNER_ACCESS_LOG``).
    search_deadline_s
        Wall-clock seconds a plan search may run (``PLANNER_SEARCH_DEADLINE_S``); past it the request
        answers a 503 problem naming the deadline and the stage reached.
    whatif_deadline_s
        Wall-clock seconds one what-if batch may run (``PLANNER_WHATIF_DEADLINE_S``), with the same answer.
    """

    model_config = SettingsConfigDict(env_prefix="PLANNER_", frozen=True, extra="ignore")

    hardware_dir: Path | None = None
    api_key: SecretStr | None = Field(None, min_length=1)
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    access_log: bool = True
    search_deadline_s: float = Field(30.0, gt=0, le=3600)
    whatif_deadline_s: float = Field(300.0, gt=0, le=3600)

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return tuple(json.loads(text))
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings of this process, read once. Tests override this dependency."""
    return Settings()


async def app_settings(request: Request) -> Settings:
    """Dependency: the settings the app was built with (``create_app(settings)``), else the process's
    (``get_settings``, or what ``app.dependency_overrides`` puts in its place).

    An app's own settings live on ``app.state`` rather than in ``dependency_overrides``: FastAPI rebuilds the
    dependency tree of every request while any override is installed (half a millisecond a request). It is a
    coroutine, and reads ``get_settings`` itself rather than through ``Depends``, because FastAPI runs each
    plain-function dependency in its thread pool: a hand-off to a worker thread and back, ~0.1–0.3 ms a
    request on 2 cores, for work that takes a microsecond."""
    own = getattr(request.app.state, "settings", None)
    if own is not None:
        return own
    return request.app.dependency_overrides.get(get_settings, get_settings)()
