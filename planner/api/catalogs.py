"""The catalogs a service instance answers from, read once per app (and per hardware directory)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from planner.api.settings import Settings, app_settings
from planner.costs.types import EngineProfile
from planner.engines import load_engine_profiles
from planner.hardware import GpuSpec, load_catalog
from planner.models import ModelCatalog, load_model_catalog


class Catalogs:
    """Each catalog is read the first time a request needs it, then kept for the life of the app.

    Reading them separately keeps a broken model catalog from taking the GPU endpoints down.
    """

    def __init__(self, hardware_dir: Path | None) -> None:
        self.hardware_dir = hardware_dir
        self._lock = threading.Lock()
        self._loaded: dict[str, Any] = {}

    def _once(self, name: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = load()
            return self._loaded[name]

    @property
    def gpus(self) -> Mapping[str, GpuSpec]:
        return self._once("gpus", lambda: load_catalog(self.hardware_dir))

    @property
    def models(self) -> ModelCatalog:
        return self._once("models", load_model_catalog)

    @property
    def engines(self) -> Mapping[str, EngineProfile]:
        return self._once("engines", load_engine_profiles)


class CatalogCache:
    """Per-app store of ``Catalogs``, one per hardware directory the settings have named."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_dir: dict[Path | None, Catalogs] = {}

    def get(self, hardware_dir: Path | None) -> Catalogs:
        with self._lock:
            return self._by_dir.setdefault(hardware_dir, Catalogs(hardware_dir))


async def get_catalogs(request: Request, settings: Annotated[Settings, Depends(app_settings)]) -> Catalogs:
    """Dependency: this app's catalogs for the configured hardware directory (a coroutine: it only looks them up,
    and FastAPI would run a plain function in its thread pool; the catalogs load in the endpoints' threads)."""
    cache: CatalogCache = request.app.state.catalog_cache
    return cache.get(settings.hardware_dir)


CatalogsDep = Annotated[Catalogs, Depends(get_catalogs)]
