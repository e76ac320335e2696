"""Response models of ``POST /v1/whatif``: one evaluate answer or one problem per scenario.

The request body is not a pydantic model: it is a JSON array of evaluate bodies or a CSV file, and each
row is validated on its own (a bad row answers its own error), so its schema is declared on the route.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from planner.api.schemas import _RESPONSE
from planner.api.serving_schemas import EvaluateResponse

#: most scenarios in one request (more is a 413 naming the limit)
MAX_WHATIF_SCENARIOS = 100_000
#: largest what-if body [bytes] (the other endpoints take 1 MiB)
MAX_WHATIF_BODY_BYTES = 64 * 1024 * 1024


class WhatifRowOut(BaseModel):
    """One scenario's answer: the evaluation, or the problem that scenario has (the others still answer)."""

    model_config = _RESPONSE

    row: int = Field(description="Index of the scenario in the request, from 0 [scenarios]")
    status: Literal["ok", "error"] = Field(description="ok: `result` holds the evaluation; error: `error` the problem")
    result: EvaluateResponse | None = Field(None, description="What POST /v1/evaluate answers for this scenario")
    error: dict[str, Any] | None = Field(
        None, description="An RFC 9457 problem object (type, title, status, detail, and errors on a 422)")


class WhatifResponse(BaseModel):
    model_config = _RESPONSE

    num_scenarios: int = Field(description="Scenarios in the request [scenarios]")
    num_ok: int = Field(description="Scenarios evaluated [scenarios]")
    num_errors: int = Field(description="Scenarios answered with a problem [scenarios]")
    results: list[WhatifRowOut] = Field(description="One answer per scenario, in request order")
