"""POST /v1/timeline through the app: JSON events, the SVG drawing, content negotiation, the spec, and
problems that name the field.

The SVG checks are what a browser needs to draw it: well-formed XML (``xml.etree`` parses it), an ``svg``
root in the SVG namespace with its size and viewBox, the lanes and their labels, and nothing fetched from
elsewhere (no scripts, links, images or external styles).
"""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from planner.api.timeline_schemas import TimelineRequest

pytestmark = pytest.mark.anyio

TIMELINE = "/v1/timeline"
SVG = "image/svg+xml"
SVG_NS = "http://www.w3.org/2000/svg"
LLAMA_8B = "meta-llama/Llama-3.1-8B"
STREAMS, PROMPT, BUDGET = 8, 6000, 512

# the request model's documented example: chunked on an H100, compared with chunking off and disaggregated
EXAMPLE: dict[str, Any] = TimelineRequest.model_json_schema()["examples"][0]


def _body(**scenario: Any) -> dict[str, Any]:
    return {
        "model": LLAMA_8B,
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "token_budget": BUDGET},
        "scenario": {"running_streams": STREAMS, "context_tokens": 2000, "prompt_tokens": PROMPT} | scenario,
    }


@pytest.fixture(scope="module")
async def example_json(app, client_for) -> dict[str, Any]:
    async with client_for(app) as client:
        response = await client.post(TIMELINE, json=EXAMPLE)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "accept" in response.headers["vary"].lower()
    return response.json()


@pytest.fixture(scope="module")
async def example_svg(app, client_for) -> ET.Element:
    async with client_for(app) as client:
        response = await client.post(TIMELINE, json=EXAMPLE, headers={"Accept": SVG})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(SVG)
    assert "accept" in response.headers["vary"].lower()
    return ET.fromstring(response.content)  # raises on anything that is not well-formed XML


# ---------------------------------------------------------------------------------------------- JSON


async def test_the_example_answers_one_timeline_per_deployment(example_json):
    out = example_json
    assert [tl["design"] for tl in out["timelines"]] == ["chunked", "unchunked", "disaggregated"]
    assert out["model"] == LLAMA_8B and out["weight_dtype"] == "bf16" and out["kv_dtype"] == "bf16"
    assert out["scenario"]["context_tokens"] == [2000] * STREAMS
    assert out["scenario"]["prompts"] == [{"request": 0, "prompt_tokens": PROMPT, "delay_s": 0.0}]
    json.dumps(out, allow_nan=False)  # raises on any NaN or infinity
    # the unchunked comparison takes vLLM's default budget, and says so
    assert out["timelines"][1]["deployment"]["token_budget"] == PROMPT
    assert any(w.startswith("compare_with.0: chunked_prefill is off") for w in out["warnings"])


async def test_the_chunked_timeline_follows_the_budget(example_json):
    tl = example_json["timelines"][0]
    assert tl["deployment"]["token_budget"] == BUDGET and tl["num_iterations"] == len(tl["iterations"])
    carrying = [it for it in tl["iterations"] if it["chunks"]]
    assert len(carrying) == math.ceil(PROMPT / (BUDGET - STREAMS))
    assert all(it["decode_tokens"] + it["prefill_tokens"] <= BUDGET for it in tl["iterations"])
    assert [it["prefill_tokens"] for it in carrying[:-1]] == [BUDGET - STREAMS] * (len(carrying) - 1)
    assert all(not it["stalled_streams"] for it in tl["iterations"])
    (req,) = tl["requests"]
    assert req["first_token_s"] == carrying[-1]["end_s"] and tl["ttft_s"] == req["ttft_s"]
    assert req["kv_ready_s"] is None and tl["kv_link"] is None and tl["prefill_passes"] == []
    assert tl["request_overhead_s"] > 0  # reported beside the TTFT, not in it
    assert req["ttft_s"] == pytest.approx(sum(it["duration_s"] for it in carrying), rel=1e-9)


async def test_chunking_off_stalls_every_stream_for_the_whole_prefill(example_json):
    chunked, unchunked, _ = example_json["timelines"]
    (prefill,) = [it for it in unchunked["iterations"] if it["chunks"]]
    assert prefill["kind"] == "prefill" and prefill["stalled_streams"] == list(range(STREAMS))
    assert all(s["max_gap_s"] >= prefill["duration_s"] for s in unchunked["streams"])
    assert chunked["max_stall_s"] < 0.1 * unchunked["max_stall_s"]


async def test_the_disaggregated_timeline_moves_the_whole_prompts_kv(client, example_json):
    tl = example_json["timelines"][2]
    model = (await client.get(f"/v1/models/{LLAMA_8B}")).json()
    per_token = model["kv_cache_bytes_per_token"]
    assert tl["kv_link"]["kv_bytes_per_token"] == per_token and tl["kv_link"]["link"] == "nvlink"
    assert tl["deployment"]["kv_transfer"] == {"link": "nvlink", "resolved_link": "nvlink"}
    (p,), (kv,), (req,) = tl["prefill_passes"], tl["kv_transfers"], tl["requests"]
    assert kv["kv_bytes"] == PROMPT * per_token
    assert p["start_s"] == req["arrival_s"] and p["duration_s"] == pytest.approx(p["end_s"] - p["start_s"])
    assert kv["end_s"] == req["kv_ready_s"] == req["first_token_s"]
    assert req["ttft_s"] == pytest.approx(p["duration_s"] + kv["exposed_s"], rel=1e-9)
    assert all(it["kind"] == "decode" and not it["stalled_streams"] for it in tl["iterations"])
    assert tl["max_stall_s"] < 0.1 * tl["decode_only_iteration_s"]


async def test_per_stream_contexts_and_later_prompts(client):
    body = _body(
        running_streams=3,
        context_tokens=None,
        stream_context_tokens=[500, 1000, 8000],
        additional_prompts=[{"prompt_tokens": 700, "delay_s": 0.05}],
    )
    response = await client.post(TIMELINE, json=body)
    assert response.status_code == 200, response.text
    (tl,) = response.json()["timelines"]
    assert [s["context_tokens"] for s in tl["streams"]] == [500, 1000, 8000]
    first, second = tl["requests"]
    assert second["arrival_s"] == pytest.approx(first["arrival_s"] + 0.05)
    assert second["prefill_start_s"] >= second["arrival_s"]
    assert tl["iterations"][0]["decode_context_tokens"] == pytest.approx(9500 / 3)


# ----------------------------------------------------------------------------------------------- SVG


async def test_the_svg_is_a_standalone_svg_document(example_svg):
    root = example_svg
    assert root.tag == f"{{{SVG_NS}}}svg"
    width, height = float(root.attrib["width"]), float(root.attrib["height"])
    assert width > 0 and height > 0
    assert [float(v) for v in root.attrib["viewBox"].split()] == [0.0, 0.0, width, height]
    # nothing a browser would fetch or run
    forbidden = {"script", "image", "foreignObject", "a", "use", "iframe"}
    for node in root.iter():
        assert node.tag.startswith(f"{{{SVG_NS}}}"), node.tag
        assert node.tag.removeprefix(f"{{{SVG_NS}}}") not in forbidden
        for name, value in node.attrib.items():
            assert "href" not in name and not name.startswith("on"), name
            assert "url(" not in value and "://" not in value, (name, value)
        assert "@import" not in (node.text or "") and "url(" not in (node.text or "")


async def test_the_svg_has_a_lane_per_stream_request_and_pool(example_svg, example_json):
    texts = [node.text or "" for node in example_svg.iter(f"{{{SVG_NS}}}text")]
    labels = [
        node.text or "" for node in example_svg.iter(f"{{{SVG_NS}}}text") if node.get("class") == "lane-label"
    ]
    sections = len(example_json["timelines"])
    for s in range(STREAMS):
        assert sum(label.startswith(f"stream {s} (") for label in labels) == sections
    assert sum(label.startswith("request 0 (") for label in labels) == sections
    assert labels.count("iterations") == 2  # the two aggregated timelines
    assert {"prefill pool", "KV link", "decode pool"} <= set(labels)
    assert any(t.endswith(" ms") for t in texts)  # the time axis
    assert any("chunked prefill" in t for t in texts) and any("disaggregated" in t for t in texts)
    groups = [g for g in example_svg.iter(f"{{{SVG_NS}}}g") if g.get("class") == "timeline"]
    assert len(groups) == sections
    # a stall shade per stream lane where streams wait: chunked, a little in each mixed iteration; with
    # chunking off, one long wait; disaggregated, none
    stalls = [[node for node in g.iter() if node.get("class") == "stall"] for g in groups]
    assert [len(shades) for shades in stalls] == [STREAMS, STREAMS, 0]
    waits = [[_spans(shade) for shade in shades] for shades in stalls[:2]]
    assert all(n > 1 for n in waits[0]) and all(n == 1 for n in waits[1])


def _spans(shade: ET.Element) -> int:
    """How many separate stretches the shade's rectangles cover."""
    runs = sorted((float(r.get("x")), float(r.get("width"))) for r in shade.iter(f"{{{SVG_NS}}}rect"))
    return 1 + sum(
        x > prev_x + prev_w + 1e-6 for (prev_x, prev_w), (x, _) in zip(runs, runs[1:], strict=False)
    )


async def test_chunks_are_coloured_by_request(client):
    body = _body(additional_prompts=[{"prompt_tokens": 1000, "delay_s": 0.02}])
    response = await client.post(TIMELINE, json=body, headers={"Accept": SVG})
    assert response.status_code == 200, response.text
    root = ET.fromstring(response.content)
    fills = {r.get("fill") for r in root.iter(f"{{{SVG_NS}}}rect")}
    assert {"#0072b2", "#e69f00"} <= fills  # requests 0 and 1
    legend = [t.text for t in root.iter(f"{{{SVG_NS}}}text") if t.get("class") == "legend"]
    assert "request 0 prompt" in legend and "request 1 prompt" in legend


@pytest.mark.parametrize(
    ("accept", "svg"),
    [
        (None, False),
        ("application/json", False),
        ("*/*", False),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", False),
        ("image/svg+xml;q=0.5, application/json", False),
        ("image/svg+xml", True),
        ("image/*", True),
        ("application/json;q=0.4, image/svg+xml", True),
    ],
)
async def test_content_negotiation(client, accept, svg):
    headers = {} if accept is None else {"Accept": accept}
    response = await client.post(TIMELINE, json=_body(decode_iterations_after=1), headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(SVG if svg else "application/json")


async def test_a_problem_stays_json_when_svg_is_asked_for(client, problem):
    body = _body(prompt_tokens=200_000)
    problem(await client.post(TIMELINE, json=body, headers={"Accept": SVG}), 422, "invalid-input")


# ---------------------------------------------------------------------------------------------- spec


async def test_the_spec_documents_both_media_types(client):
    spec = (await client.get("/openapi.json")).json()
    op = spec["paths"]["/v1/timeline"]["post"]
    assert op["operationId"] == "timeline"
    ok = op["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/TimelineResponse"}
    assert ok[SVG]["schema"]["type"] == "string"
    assert {"404", "413", "422", "500"} <= set(op["responses"])
    request = spec["components"]["schemas"]["TimelineRequest"]
    assert request["examples"][0]["scenario"]["prompt_tokens"] == PROMPT
    scenario = spec["components"]["schemas"]["TimelineScenarioIn"]
    assert all(p.get("description") for p in scenario["properties"].values())


# ------------------------------------------------------------------------------------------ problems


@pytest.mark.parametrize(
    ("change", "slug", "field"),
    [
        ({"scenario": {"prompt_tokens": 200_000}}, "invalid-input", "scenario.prompt_tokens"),
        (
            {"scenario": {"additional_prompts": [{"prompt_tokens": 200_000, "delay_s": 0.1}]}},
            "invalid-input",
            "scenario.additional_prompts.0.prompt_tokens",
        ),
        ({"scenario": {"running_streams": 0}}, "validation-error", "scenario.running_streams"),
        ({"scenario": {"running_streams": 257}}, "validation-error", "scenario.running_streams"),
        (
            {"scenario": {"stream_context_tokens": [1, 2]}},
            "validation-error",
            "scenario.stream_context_tokens",
        ),
        ({"scenario": {"context_tokens": None}}, "validation-error", "scenario.context_tokens"),
        ({"scenario": {"warmup_s": 1}}, "validation-error", "scenario.warmup_s"),
        ({"deployment": {"token_budget": 8}}, "invalid-input", "deployment.token_budget"),
        ({"deployment": {"max_batch_size": 4}}, "invalid-input", "deployment.max_batch_size"),
        (
            {"deployment": {"token_budget": 2}, "scenario": {"running_streams": 1}},
            "invalid-input",
            "scenario",
        ),
        (
            {
                "compare_with": [
                    {"mode": "aggregated", "gpu": "h100-sxm", "token_budget": 4, "chunked_prefill": True}
                ]
            },
            "invalid-input",
            "compare_with.0.token_budget",
        ),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(client, problem, change, slug, field):
    body = copy.deepcopy(_body())
    for key, value in change.items():
        body[key] = body[key] | value if isinstance(value, dict) else value
    body["scenario"] = {k: v for k, v in body["scenario"].items() if v is not None}
    out = problem(await client.post(TIMELINE, json=body), 422, slug)
    named = [e["field"] for e in out["errors"]] if slug == "validation-error" else [out["field"]]
    assert field in named, out


async def test_a_scenario_problem_on_a_compared_deployment_says_which(client, problem):
    body = _body(running_streams=1, prompt_tokens=8000)
    body["compare_with"] = [{"mode": "aggregated", "gpu": "h100-sxm", "token_budget": 2}]
    out = problem(await client.post(TIMELINE, json=body), 422, "invalid-input")
    assert out["field"] == "scenario" and out["detail"].startswith("on compare_with.0: ")
    assert out["max_iterations"] == 2000


async def test_an_unknown_gpu_is_a_404_naming_the_field(client, problem):
    body = _body()
    body["deployment"]["gpu"] = "h900"
    assert problem(await client.post(TIMELINE, json=body), 404, "unknown-gpu")["field"] == "deployment.gpu"
    body = _body()
    body["compare_with"] = [
        {"mode": "disaggregated", "prefill": {"gpu": "h100-sxm"}, "decode": {"gpu": "h900"}}
    ]
    out = problem(await client.post(TIMELINE, json=body), 404, "unknown-gpu")
    assert out["field"] == "compare_with.0.decode.gpu"


async def test_a_model_that_does_not_fit_is_a_422(client, problem):
    body = _body() | {"model": "meta-llama/Llama-3.1-70B"}
    out = problem(await client.post(TIMELINE, json=body), 422, "model-does-not-fit")
    assert out["field"] == "deployment"
