"""Schemathesis walks the whole spec in-process, with positive and negative data: no server error, and every
answer (status code, content type, body) is one the spec declares.

Every operation runs through schemathesis' phases: the spec's examples, the coverage phase (boundary values
of every constraint, each required member left out, wrong types: a fixed set of cases per operation,
whatever ``max_examples`` says) and ``max_examples`` generated cases, each phase in both generation modes
(``GenerationMode.POSITIVE`` and ``NEGATIVE``, the CLI's ``--mode all``). The searches are costlier than
the other operations and get a smaller fuzzing budget of their own. Generation is derandomized and the
example database is off, so CI runs the same cases every time.

The checks: ``not_a_server_error``, ``status_code_conformance``, ``content_type_conformance``,
``response_schema_conformance``, ``negative_data_rejection`` and ``positive_data_acceptance``, the latter
two adapted to what the spec can say:

- ``positive_data_acceptance`` accepts 404, 413 and 422 besides 2xx. Data the spec admits can still name a
  GPU or model the catalog lacks (ids are free strings: ``PLANNER_HARDWARE_DIR`` adds GPUs, so they are no
  enum; 404), break a rule across fields that a JSON schema cannot state (exactly one of ``model`` and
  ``model_config``, ``cached_tokens`` below ``prompt_tokens``, tp dividing the heads, the model fitting in
  memory: 422), or carry an inline ``model_config`` over its own size limit within the body limit (413).
  A 400, 405, 415 or 5xx for data the spec admits is still a failure.
- ``negative_data_rejection`` is off for ``POST /v1/whatif`` only: by design a scenario that breaks the
  ``EvaluateRequest`` schema answers its own problem in its row of a 200 (one bad row never fails the
  batch), so an array with such an item is accepted on purpose. The batch's own faults (no array, more
  items than the limit, a CSV header naming no evaluate field) are 4xx, and are checked in
  test_api_whatif.py.

Stateful: the spec declares no OpenAPI links, and the natural ones (``GET /v1/gpus`` → ``GET /v1/gpus/{id}``,
``GET /v1/models`` → ``GET /v1/models/{id}``) are the ones schemathesis infers from the response schemas
itself (the ``id`` of a listed entry feeds the detail's path parameter); ``test_stateful_links`` walks them.
The POST operations are pure functions of their bodies and link to nothing.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from planner.api import create_app
from planner.api.settings import Settings

#: generated cases per operation (the fuzzing phase; the examples and coverage phases run in full)
MAX_EXAMPLES = 25
#: the same for the searches, the fit and the batch what-if, whose answered requests take up to seconds
MAX_EXAMPLES_EXPENSIVE = 10
EXPENSIVE_PATHS = "^/v1/(plan|calibrate|whatif)"

CONFIG = SchemathesisConfig.from_dict(
    {
        # "deterministic" is Hypothesis' derandomize (schemathesis sets deadline=None itself): CI draws the
        # same cases on every run, the seed only names the run in the reports, and no example database
        "seed": 20_260_601,
        # these two health checks judge the strategies schemathesis reads out of the spec, not the service:
        # too_slow (drawing a nested body of unions and sample lists is slow) and filter_too_much (negative
        # cases are drawn until they break the schema, and most draws of a body of optional members do not)
        "suppress-health-check": ["too_slow", "filter_too_much"],
        "generation": {
            "mode": "all",
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            "database": "none",
        },
        "checks": {
            "enabled": False,
            "not_a_server_error": {"enabled": True},
            "status_code_conformance": {"enabled": True},
            "content_type_conformance": {"enabled": True},
            "response_schema_conformance": {"enabled": True},
            "negative_data_rejection": {"enabled": True},
            "positive_data_acceptance": {"enabled": True, "expected-statuses": ["2xx", "404", "413", "422"]},
        },
        # the links test_stateful_links walks are inferred from the response schemas (the spec declares none)
        "phases": {"stateful": {"inference": {"algorithms": ["dependency-analysis"]}}},
        "operations": [
            {"include-path-regex": EXPENSIVE_PATHS, "generation": {"max-examples": MAX_EXAMPLES_EXPENSIVE}},
            {"include-path": "/v1/whatif", "checks": {"negative_data_rejection": {"enabled": False}}},
        ],
    }
)

# explicit settings: a PLANNER_HARDWARE_DIR in the caller's environment must not leak in
APP = create_app(Settings(hardware_dir=None))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CONFIG)


@schema.parametrize()
def test_every_operation_conforms_to_the_spec(case: schemathesis.Case) -> None:
    case.call_and_validate()


def test_stateful_links() -> None:
    answered: set[tuple[str, int]] = set()

    class Walk(schema.as_state_machine()):  # type: ignore[misc]
        def after_call(self, response: schemathesis.Response, case: schemathesis.Case) -> None:
            answered.add((case.operation.label, response.status_code))

    Walk.run(
        settings=settings(
            max_examples=40,
            stateful_step_count=4,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
    )
    # each detail was reached through its list's link: with an id the catalog has
    assert {("GET /v1/gpus/{gpu_id}", 200), ("GET /v1/models/{model_id}", 200)} <= answered, answered


# ----------------------------------------------------------------------------------- beyond the spec
def _reject_constant(name: str) -> Any:
    raise AssertionError(f"{name} in a response body: JSON has no NaN or infinity")


def _strict_json(text: str) -> Any:
    """``text`` parsed as JSON, refusing the NaN and Infinity that Python's json would write and read."""
    return json.loads(text, parse_constant=_reject_constant)


def _post_examples() -> list[tuple[str, str, str]]:
    """(path, content type, body) of every example body of every POST operation in the served spec."""
    spec = APP.openapi()
    components = spec["components"]["schemas"]
    out = []
    for path, item in spec["paths"].items():
        body = item.get("post", {}).get("requestBody")
        if body is None:
            continue
        for media, content in body["content"].items():
            examples = [content["example"]] if "example" in content else []
            ref = content["schema"].get("$ref")
            if ref is not None:
                examples += components[ref.rsplit("/", 1)[-1]].get("examples", [])
            for example in examples:
                out.append((path, media, example if isinstance(example, str) else json.dumps(example)))
    return out


POST_EXAMPLES = _post_examples()
EXAMPLE_IDS = [f"{path} {media}" for path, media, _ in POST_EXAMPLES]


def test_every_post_operation_has_an_example():
    posts = {path for path, item in APP.openapi()["paths"].items() if "post" in item}
    assert posts == {path for path, _, _ in POST_EXAMPLES}


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://planner.test")


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "media", "body"), POST_EXAMPLES, ids=EXAMPLE_IDS)
async def test_the_same_request_gives_the_same_bytes_and_only_finite_numbers(path, media, body):
    """Answers are a function of the request: the same bytes from one app twice and from a fresh app (no
    state carried between requests leaks into them), and never a NaN or an infinity."""
    headers = {"content-type": media}
    answers = []
    for app in (APP, APP, create_app(Settings(hardware_dir=None))):
        async with _client(app) as client:
            response = await client.post(path, content=body, headers=headers)
        assert response.status_code == 200, response.text
        answers.append(response.content)
    assert answers[0] == answers[1] == answers[2]
    assert response.headers["content-type"].startswith("application/json")
    _strict_json(response.text)


@pytest.mark.anyio
@pytest.mark.parametrize("accept", ["text/csv", "application/x-ndjson"])
async def test_the_whatif_csv_and_ndjson_answers_are_deterministic_and_finite(accept):
    _, _, body = next(e for e in POST_EXAMPLES if e[0] == "/v1/whatif" and e[1] == "application/json")
    answers = []
    for app in (APP, create_app(Settings(hardware_dir=None))):
        async with _client(app) as client:
            response = await client.post(
                "/v1/whatif", content=body, headers={"content-type": "application/json", "accept": accept}
            )
        assert response.status_code == 200, response.text
        answers.append(response.content)
    assert answers[0] == answers[1]
    if accept == "application/x-ndjson":
        rows = [_strict_json(line) for line in response.text.splitlines()]
        assert rows and all(row["status"] == "ok" for row in rows)
    else:
        cells = {cell.lower() for line in response.text.splitlines() for cell in line.split(",")}
        assert not cells & {"nan", "inf", "-inf", "infinity", "-infinity"}
