"""The HTTP service: the only package of the planner that imports FastAPI and pydantic."""

from planner.api.app import create_app

__all__ = ["create_app"]
