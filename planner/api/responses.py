"""JSON answers serialized once, by the model that validated them.

A route that returns a pydantic model has FastAPI dump it to a dict, validate that dict against the
``response_model`` again and encode it with ``jsonable_encoder``: three passes over a large answer (a plan's
curve, a per-operator breakdown). The routes build their answer with ``Model.model_validate`` (which checks
it: finite numbers, the declared fields) and return :func:`model_response` of it instead; the decorator's
``response_model`` still documents it in the spec.
"""

from __future__ import annotations

from fastapi.responses import Response
from pydantic import BaseModel


def model_response(model: BaseModel) -> Response:
    """``model`` as an ``application/json`` response, in the same members and aliases FastAPI would write."""
    return Response(content=model.model_dump_json(by_alias=True), media_type="application/json")
