"""JSON answers serialized once, by the model that validated them.

A route that returns a pydantic model has FastAPI dump it to a dict, validate that dict against the
``response_model`` again and encode it with ``jsonable_encoder``: three passes over a large answer (a plan's
curve, a per-operator breakdown). The routes build their answer with ``Model.model_validate`` (which checks
it: finite numbers, the declared fields) and return :func:`model_response` of it instead; the decorator's
``response_model`` still documents it in the spec.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel


def model_response(model: BaseModel) -> Response:
    """``model`` as an ``application/json`` response, in the same members and aliases FastAPI would write."""
    return Response(content=model.model_dump_json(by_alias=True), media_type="application/json")


def plain(obj: Any) -> Any:
    """``dataclasses.asdict(obj)`` for the results the routes answer with, without its deep copy of every
    leaf: dataclasses become dicts, and lists, tuples and dicts are rebuilt around what they hold (the
    answer is validated into a response model at once, so nothing is shared with a caller). ``asdict``'s
    copying was ~1 ms of a chunk-budget plan's answer."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*[plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    return obj
