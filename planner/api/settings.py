"""Service settings, read from ``PLANNER_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """What the service reads from its environment.

    Attributes
    ----------
    hardware_dir
        Optional directory of extra or overriding accelerator files (``PLANNER_HARDWARE_DIR``),
        merged over the built-in ``hardware_catalog/``.
    """

    model_config = SettingsConfigDict(env_prefix="PLANNER_", frozen=True, extra="ignore")

    hardware_dir: Path | None = None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings of this process, read once. Tests override this dependency."""
    return Settings()
