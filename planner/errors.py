"""The planner's domain errors: one small hierarchy, mapped to RFC 9457 problems at the API edge.

The numeric core raises these; it never imports FastAPI or pydantic.
"""

from __future__ import annotations

from typing import Any


class PlannerError(Exception):
    """Base of every domain error.

    ``slug`` becomes the problem ``type`` (``/problems/<slug>``), ``status`` the HTTP status,
    ``extra`` is merged into the problem body (numbers, closest ids, the offending field).
    """

    slug = "planner-error"
    title = "Planner error"
    status = 400

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class DeadlineExceeded(PlannerError):
    """A search ran past the deadline its caller set (raised by the caller's checkpoint between stages)."""

    slug = "deadline-exceeded"
    title = "Search deadline exceeded"
    status = 503


class UnknownGpu(PlannerError):
    slug = "unknown-gpu"
    title = "Unknown GPU"
    status = 404


class UnknownModel(PlannerError):
    slug = "unknown-model"
    title = "Unknown model"
    status = 404


class UnsupportedModel(PlannerError):
    """A config the planner cannot cost faithfully (unknown block types, missing fields)."""

    slug = "unsupported-model"
    title = "Unsupported model architecture"
    status = 422


class UnsupportedConfiguration(PlannerError):
    """A request that is well-formed but impossible: a dtype the GPU lacks, tp not dividing heads, ..."""

    slug = "unsupported-configuration"
    title = "Unsupported configuration"
    status = 422


class ModelDoesNotFit(PlannerError):
    slug = "model-does-not-fit"
    title = "Model does not fit in GPU memory"
    status = 422


class CatalogError(PlannerError):
    """A catalog file that fails validation (names the file and field)."""

    slug = "invalid-catalog"
    title = "Invalid catalog file"
    status = 500


class RequestTooLarge(PlannerError):
    slug = "request-too-large"
    title = "Request too large"
    status = 413


class UnsupportedMediaType(PlannerError):
    slug = "unsupported-media-type"
    title = "Unsupported Media Type"
    status = 415


class InvalidInput(PlannerError):
    """A value the core cannot use (the API validates first; this is the core's own guard)."""

    slug = "invalid-input"
    title = "Invalid input"
    status = 422
