"""The catalogs a service instance answers from, loaded once per app (per hardware directory)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from planner.api.settings import Settings, get_settings
from planner.costs.types import EngineProfile
from planner.engines import load_engine_profiles
from planner.hardware import GpuSpec, load_catalog
from planner.models import ModelCatalog, load_model_catalog


@dataclass(frozen=True, kw_only=True)
class Catalogs:
    gpus: Mapping[str, GpuSpec]
    models: ModelCatalog
    engines: Mapping[str, EngineProfile]


def load_catalogs(hardware_dir: Path | None) -> Catalogs:
    """Read every catalog from disk (the built-in files, plus ``hardware_dir`` when given)."""
    return Catalogs(
        gpus=load_catalog(hardware_dir),
        models=load_model_catalog(),
        engines=load_engine_profiles(),
    )


class CatalogCache:
    """Per-app store: the catalogs are read on first use and kept for the life of the app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_dir: dict[Path | None, Catalogs] = {}

    def get(self, hardware_dir: Path | None) -> Catalogs:
        with self._lock:
            if hardware_dir not in self._by_dir:
                self._by_dir[hardware_dir] = load_catalogs(hardware_dir)
            return self._by_dir[hardware_dir]


def get_catalogs(request: Request, settings: Annotated[Settings, Depends(get_settings)]) -> Catalogs:
    """Dependency: this app's catalogs for the configured hardware directory."""
    cache: CatalogCache = request.app.state.catalog_cache
    return cache.get(settings.hardware_dir)


CatalogsDep = Annotated[Catalogs, Depends(get_catalogs)]
