"""The spec documents itself: every request body carries a working example, every field a description
with its unit, so the clients generated from ``openapi/openapi.json`` explain their own arguments.

What is checked, on the app's own spec (``create_app().openapi()``):

1. Every operation with a request body has at least one example for its ``application/json`` body:
   in the body schema's ``examples`` (the component's, or the array items' for a list body), or in the
   media type's ``example`` / ``examples``.
2. Every property of every component schema has a non-empty ``description``, and a property whose name
   carries a unit says it. A name is held to every rule it matches (``UNIT_RULES``):

   - ``_per_s`` at the end or before another ``_`` (``rate_per_s``, ``output_tokens_per_s_per_user``): a
     bracketed per-second unit, ``[requests/s]``, ``[bytes/s]``, ``[tokens/s per GPU]``;
   - any other name ending in ``_s`` (``ttft_s``, ``token_times_s``): ``[s]``;
   - a ``bytes`` word (``kv_cache_bytes_per_gpu``, ``bytes_moved``): ``[bytes`` (``[bytes]``,
     ``[bytes/token]``);
   - a ``flops`` word (``flops``, ``peak_flops_per_s``): ``[FLOP`` (``[FLOP]``, ``[FLOP/s]``);
   - ending in ``tokens`` or ``token_budget(s)``: ``[tokens``;
   - ending in ``_fraction``, ``utilization``, ``mfu`` or ``mbu``: a numeric range ``a..b`` (``0..1``; a
     relative deviation, measured / expected − 1, says ``−1..∞``);
   - ending in ``_percentile``: ``(0, 100)``; in ``_scale``: ``[×]``; in ``_usd``: ``[USD``;
   - a count (starting with ``num_``, or ending in ``batch_size(s)``, ``replicas``, ``workers``,
     ``concurrency``, ``total_gpus`` or ``count``): a bracketed unit naming what it counts (``[GPUs]``,
     ``[sequences]``, ``[workers]``).

   The RFC 9457 problem members (``Problem``, ``ValidationProblem``, ``FieldError``, built in
   ``planner/api/problems.py``) are left out of the description check: they are the RFC's members, not the
   planner's quantities, and carry no units.
3. Every example of every request body, POSTed through the app in-process with its media type, answers
   2xx. A JSON example is sent as JSON; a string example of a text media type (``text/csv``) as its text.
   A media type whose example is neither is a test failure, not a skip, so a new body form must be handled
   here explicitly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from planner.api import create_app

pytestmark = pytest.mark.anyio

JSON = "application/json"

#: the problem members are RFC 9457's (see the module docstring), not the planner's fields
UNDOCUMENTED_COMPONENTS = frozenset({"Problem", "ValidationProblem", "FieldError"})

_BRACKETED = r"\[[^\]]+\]"
_RANGE = r"[-−]?\d+(?:\.\d+)?\.\.(?:[-−]?\d|∞)"

#: (rule name, what the property name matches, what its description must match)
UNIT_RULES: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    ("per second", re.compile(r"_per_s(?:_|$)"), re.compile(r"\[[^\]]*/s\b[^\]]*\]")),
    ("seconds", re.compile(r"(?<!_per)_s$"), re.compile(re.escape("[s]"))),
    ("bytes", re.compile(r"(?:^|_)bytes(?:_|$)"), re.compile(re.escape("[bytes"))),
    ("FLOP", re.compile(r"(?:^|_)flops(?:_|$)"), re.compile(re.escape("[FLOP"))),
    ("tokens", re.compile(r"(?:^|_)(?:tokens|token_budgets?)$"), re.compile(re.escape("[tokens"))),
    ("range", re.compile(r"(?:_fraction|(?:^|_)(?:utilization|mfu|mbu))$"), re.compile(_RANGE)),
    ("percentile", re.compile(r"_percentile$"), re.compile(re.escape("(0, 100)"))),
    ("multiplier", re.compile(r"_scale$"), re.compile(re.escape("[×]"))),
    ("US dollars", re.compile(r"_usd$"), re.compile(re.escape("[USD"))),
    (
        "count",
        re.compile(r"^num_|(?:^|_)(?:batch_sizes?|replicas|workers|concurrency|total_gpus|count)$"),
        re.compile(_BRACKETED),
    ),
)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return create_app().openapi()


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.removeprefix("#/components/schemas/")
    return spec["components"]["schemas"][name]


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def _examples(spec: dict[str, Any], media: dict[str, Any]) -> list[Any]:
    """Every example one media type of a request body documents, wherever the spec puts it."""
    found: list[Any] = []
    if "example" in media:
        found.append(media["example"])
    found.extend(example["value"] for example in media.get("examples", {}).values() if "value" in example)
    schema = _resolve(spec, media.get("schema", {}))
    found.extend(schema.get("examples", []))
    if schema.get("type") == "array" and "items" in schema:  # a list body: one example list per item example
        found.extend([item] for item in _resolve(spec, schema["items"]).get("examples", []))
    return found


def _request_examples(spec: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """(method, path, media type, example) of every request body example of the spec."""
    out = []
    for path, method, operation in _operations(spec):
        for media_type, media in operation.get("requestBody", {}).get("content", {}).items():
            out.extend((method, path, media_type, example) for example in _examples(spec, media))
    return out


def _properties(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for name, schema in sorted(spec["components"]["schemas"].items()):
        if name in UNDOCUMENTED_COMPONENTS:
            continue
        for prop, definition in schema.get("properties", {}).items():
            yield name, prop, definition


def test_every_request_body_has_a_json_example(spec):
    missing = []
    for path, method, operation in _operations(spec):
        body = operation.get("requestBody")
        if body is None:
            continue
        media = body["content"].get(JSON)
        if media is None or not _examples(spec, media):
            missing.append(f"{method.upper()} {path} ({operation['operationId']})")
    assert not missing, "request bodies without an application/json example:\n" + "\n".join(missing)


def test_every_property_has_a_description(spec):
    missing = [
        f"{name}.{prop}" for name, prop, d in _properties(spec) if not str(d.get("description", "")).strip()
    ]
    assert not missing, f"{len(missing)} properties without a description:\n" + "\n".join(missing)


def test_every_unit_named_property_states_its_unit(spec):
    wrong = []
    for name, prop, definition in _properties(spec):
        description = str(definition.get("description", ""))
        for rule, name_pattern, wanted in UNIT_RULES:
            if name_pattern.search(prop) and not wanted.search(description):
                wrong.append(f"{name}.{prop} ({rule}, wants /{wanted.pattern}/): {description!r}")
    assert not wrong, f"{len(wrong)} descriptions without their unit:\n" + "\n".join(wrong)


def test_the_unit_rules_catch_what_they_should():
    """The rules themselves: a few names and descriptions, right and wrong."""

    def broken(prop: str, description: str) -> list[str]:
        return [
            rule
            for rule, name_pattern, wanted in UNIT_RULES
            if name_pattern.search(prop) and not wanted.search(description)
        ]

    assert broken("ttft_s", "Time to first token [s]") == []
    assert broken("ttft_s", "Time to first token") == ["seconds"]
    assert broken("rate_per_s", "Arrival rate [requests/s]") == []
    assert broken("rate_per_s", "Arrival rate [s]") == ["per second"]
    assert broken("output_tokens_per_s_per_user", "Decode speed one user sees [tokens/s]") == []
    assert broken("bandwidth_bytes_per_s", "Achieved bandwidth [bytes/s]") == []
    assert broken("peak_flops_per_s", "Dense tensor peak by dtype [FLOP/s]") == []
    assert broken("kv_bytes_per_token_per_gpu", "KV cache one token adds [bytes/token]") == []
    assert broken("prefix_cache_hit_fraction", "Share of prompt tokens, 0..1") == []
    assert broken("deviation_fraction", "Measured / expected − 1, in −1..∞") == []
    assert broken("chunk_overhead_fraction", "Extra prefill time...") == ["range"]
    assert broken("num_gpus", "GPUs of the deployment [GPUs]") == []
    assert broken("num_gpus", "GPUs of the deployment") == ["count"]
    assert broken("token_budget", "Most tokens one iteration processes [tokens]") == []
    assert broken("status", "optimal or infeasible") == []


def test_the_spec_has_request_examples_to_post(spec):
    """Guards the next test against passing vacuously."""
    posted = {path for _, path, _, _ in _request_examples(spec)}
    assert {"/v1/estimate/prefill", "/v1/evaluate", "/v1/plan"} <= posted


async def test_every_request_example_is_accepted(spec, client):
    failed = []
    for method, path, media_type, example in _request_examples(spec):
        if media_type == JSON or media_type.endswith("+json"):
            content = json.dumps(example).encode()
        elif media_type.startswith("text/") and isinstance(example, str):
            content = example.encode()
        else:
            failed.append(f"{method.upper()} {path} {media_type}: no way to send a {type(example).__name__}")
            continue
        response = await client.request(method, path, content=content, headers={"Content-Type": media_type})
        if not 200 <= response.status_code < 300:
            failed.append(
                f"{method.upper()} {path} {media_type}: {response.status_code} {response.text[:500]}"
            )
    assert not failed, "request examples the app refuses:\n" + "\n".join(failed)
