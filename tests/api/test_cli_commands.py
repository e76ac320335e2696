"""The `planner` question commands: request bodies from JSON or YAML files, answered in this process or by a
service at --url, shown as tables or as the API's JSON exactly; what-if in batches written as one file.

The reference answers come from the same app called over ``httpx.ASGITransport``. The what-if batching is
checked against a stand-in endpoint that follows the contract of ``POST /v1/whatif`` (a trivial result per
row), and once against the real endpoint when it exists.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

import planner.cli as cli
from planner.api import create_app
from planner.api.diagnose_schemas import DiagnoseRequest
from planner.api.plan_schemas import PlanChunkedRequest, PlanRequest
from planner.api.settings import Settings
from planner.api.timeline_schemas import TimelineRequest

# wide enough that no figure the tests look for is wrapped; no service or catalog from the caller's shell
ENV = {"COLUMNS": "250", "PLANNER_URL": None, "PLANNER_HARDWARE_DIR": None}
LLAMA_8B = "meta-llama/Llama-3.1-8B"
SVG_NS = "{http://www.w3.org/2000/svg}"

EVALUATE: dict[str, Any] = {
    "model": LLAMA_8B,
    "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}, "replicas": 2},
    "workload": {
        "input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000},
        "output_tokens": {"distribution": "lognormal", "median": 200, "p90": 600},
        "arrival": {"kind": "poisson", "rate_per_s": 8},
    },
    "slo": {"ttft_s": 0.5, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99},
}
PREFILL = {
    "model": "meta-llama/Llama-3.1-70B",
    "gpu": "h100-sxm",
    "parallelism": {"tp": 2},
    "prompt_tokens": 4096,
}
DECODE = {
    "model": "meta-llama/Llama-3.1-70B",
    "gpu": "h100-sxm",
    "parallelism": {"tp": 4},
    "batch_size": 32,
    "context_tokens": 4096,
}
CALIBRATE = {
    "model": LLAMA_8B,
    "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
    "measurements": {
        "ttft_by_prompt": [{"input_tokens": 500, "ttft_s": 0.08}, {"input_tokens": 4000, "ttft_s": 0.3}]
    },
}


def _example(model: type) -> dict[str, Any]:
    return model.model_config["json_schema_extra"]["examples"][0]


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli.app, list(args), env=ENV, input=input)


def reference(app: FastAPI, path: str, body: Any, **headers: str) -> httpx.Response:
    """What the app answers in process for ``body``."""

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://planner.test") as client:
            return await client.post(path, json=body, headers=headers)

    return asyncio.run(post())


def write_json(path: Path, body: Any) -> str:
    path.write_text(json.dumps(body))
    return str(path)


def write_yaml(path: Path, body: Any) -> str:
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return str(path)


def assert_clean_failure(result: Any, *fragments: str) -> None:
    """Exit 1 with a message on stderr (each fragment in it) and no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- a request file in, the answer out


def test_evaluate_json_prints_exactly_what_the_api_answers(tmp_path, app):
    result = run("evaluate", write_yaml(tmp_path / "body.yaml", EVALUATE), "--json")
    assert result.exit_code == 0, result.output
    expected = reference(app, "/v1/evaluate", EVALUATE)
    assert expected.status_code == 200
    assert result.stdout == expected.text + "\n"
    assert result.stderr == ""


def test_yaml_json_sniffed_and_stdin_bodies_give_the_same_answer(tmp_path):
    files = [
        write_yaml(tmp_path / "body.yml", EVALUATE),
        write_json(tmp_path / "body.json", EVALUATE),
        write_yaml(tmp_path / "body.txt", EVALUATE),  # no telling extension: sniffed (not JSON, so YAML)
        write_json(tmp_path / "body", EVALUATE),  # sniffed JSON
    ]
    outputs = {run("evaluate", f, "--json").stdout for f in files}
    outputs.add(run("evaluate", "-", "--json", input=yaml.safe_dump(EVALUATE)).stdout)
    assert len(outputs) == 1
    assert json.loads(outputs.pop())["ttft_s"]["p90"] > 0


def test_yaml_exponent_floats_are_numbers(tmp_path, app):
    # YAML 1.1 reads 5e-3 as a string; the API's strict types would refuse it
    body = {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "batch_size": 8, "context_tokens": 4000,
            "calibration": {"step_overhead_s": 0.005}}
    text = yaml.safe_dump(body, sort_keys=False).replace("step_overhead_s: 0.005", "step_overhead_s: 5e-3")
    assert "5e-3" in text
    path = tmp_path / "body.yaml"
    path.write_text(text)
    result = run("estimate", "decode", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout == reference(app, "/v1/estimate/decode", body).text + "\n"


def test_evaluate_table_shows_the_latency_percentiles_in_ms(tmp_path, app):
    result = run("evaluate", write_json(tmp_path / "body.json", EVALUATE))
    assert result.exit_code == 0, result.output
    answer = reference(app, "/v1/evaluate", EVALUATE).json()
    for label, key in (("TTFT", "ttft_s"), ("ITL", "itl_s"), ("E2E", "e2e_latency_s")):
        (row,) = [line for line in result.stdout.splitlines() if line.startswith(f"│ {label} ")]
        figures = [f"{answer[key][q] * 1e3:,.2f}" for q in ("mean", "p50", "p90", "p99")]
        assert [cell.strip() for cell in row.split("│")[2:6]] == figures, row
    ttft_p90_ms = f"{answer['ttft_s']['p90'] * 1e3:,.2f}"
    assert ttft_p90_ms in result.stdout
    assert "throughput [output tokens/s]" in result.stdout and "prefill_lane" in result.stdout
    assert "TTFT breakdown [ms]" in result.stdout


def test_estimate_prefill_and_decode_show_latency_bound_and_slowest_operator(tmp_path, app):
    for phase, body, key in (("prefill", PREFILL, "latency_s"), ("decode", DECODE, "step_latency_s")):
        file = write_json(tmp_path / f"{phase}.json", body)
        answer = reference(app, f"/v1/estimate/{phase}", body)
        raw = run("estimate", phase, file, "--json")
        assert raw.exit_code == 0, raw.output
        assert raw.stdout == answer.text + "\n"
        table = run("estimate", phase, file, "--top", "2")
        assert table.exit_code == 0, table.output
        figures = answer.json()
        slowest = sorted(figures["breakdown"], key=lambda op: -op["time_s"])
        assert f"{figures[key] * 1e3:,.2f}" in table.stdout
        assert figures["bound"] in table.stdout
        assert slowest[0]["name"] in table.stdout and slowest[1]["name"] in table.stdout
        assert slowest[2]["name"] not in table.stdout  # --top 2


def test_plan_prints_status_and_recommendation(tmp_path, app):
    body = _example(PlanRequest)
    result = run("plan", write_json(tmp_path / "plan.json", body), "--top", "3")
    assert result.exit_code == 0, result.output
    answer = reference(app, "/v1/plan", body).json()
    assert f"Status: {answer['status']}" in result.stdout
    assert f"Recommendation: {answer['recommendation']}" in result.stdout
    assert f"Top 3 of {len(answer['configurations'])} configurations" in result.stdout


def test_plan_mode_chunked_asks_the_chunked_search(tmp_path, app):
    body = _example(PlanChunkedRequest)
    file = write_json(tmp_path / "chunked.json", body)
    expected = reference(app, "/v1/plan/chunked", body)
    raw = run("plan", file, "--mode", "chunked", "--json")
    assert raw.exit_code == 0, raw.output
    assert raw.stdout == expected.text + "\n"
    table = run("plan", file, "--mode", "chunked")
    assert expected.json()["message"] in table.stdout
    (chosen,) = [line for line in table.stdout.splitlines() if line.startswith("│ → ")]
    assert f" {expected.json()['token_budget']} " in chosen


def test_plan_mode_is_checked():
    result = run("plan", "x.json", "--mode", "sideways")
    assert result.exit_code == 2


def test_diagnose_prints_the_slowest_phase(tmp_path, app):
    body = _example(DiagnoseRequest)  # TTFT samples with 1 s of queueing
    result = run("diagnose", write_yaml(tmp_path / "diagnose.yaml", body))
    assert result.exit_code == 0, result.output
    answer = reference(app, "/v1/diagnose", body).json()
    assert answer["slowest_phase"] == "queueing"
    assert "Slowest phase: queueing" in result.stdout
    assert f"Summary: {answer['summary']}" in result.stdout
    assert "problem" in result.stdout  # the finding's severity


def test_calibrate_says_which_parameters_were_not_pinned_down(tmp_path, app):
    result = run("calibrate", write_yaml(tmp_path / "calibrate.yaml", CALIBRATE))
    assert result.exit_code == 0, result.output
    answer = reference(app, "/v1/calibrate", CALIBRATE).json()
    assert answer["could_not_pin_down"]
    assert "Not pinned down: " + ", ".join(answer["could_not_pin_down"]) in result.stdout
    for parameter in answer["parameters"]:
        assert parameter["name"] in result.stdout


def test_timeline_svg_writes_a_drawing(tmp_path, app):
    body = _example(TimelineRequest)
    drawing = tmp_path / "out.svg"
    result = run("timeline", write_json(tmp_path / "timeline.json", body), "--svg", str(drawing))
    assert result.exit_code == 0, result.output
    root = ET.parse(drawing).getroot()
    assert root.tag == f"{SVG_NS}svg"
    assert drawing.read_bytes() == reference(app, "/v1/timeline", body, accept="image/svg+xml").content
    assert f"SVG drawing written to {drawing}" in result.stdout
    for timeline in reference(app, "/v1/timeline", body).json()["timelines"]:
        assert f"{timeline['ttft_s'] * 1e3:,.2f}" in result.stdout


# --- problems: one message, exit 1, never a traceback


def test_an_unknown_model_exits_1_with_the_problem_detail(tmp_path):
    file = write_json(tmp_path / "body.json", {**PREFILL, "model": "nope/nope"})
    result = run("estimate", "prefill", file)
    assert_clean_failure(result, "404 Unknown model", "unknown model 'nope/nope'")
    assert result.stdout == ""
    raw = run("estimate", "prefill", file, "--json")  # scripts get the problem document on stdout
    assert_clean_failure(raw, "unknown model 'nope/nope'")
    assert json.loads(raw.stdout)["type"] == "/problems/unknown-model"


def test_an_invalid_field_is_named(tmp_path):
    result = run("estimate", "prefill", write_json(tmp_path / "body.json", {**PREFILL, "prompt_tokens": 0}))
    assert_clean_failure(result, "422 Invalid request", "prompt_tokens: Input should be greater than")


def test_unreadable_or_malformed_files_exit_1_with_a_clear_message(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("model: [meta-llama/Llama-3.1-8B\n  gpu: h100-sxm\n")
    assert_clean_failure(run("evaluate", str(bad_yaml)), "bad.yaml: not valid YAML", "line 2")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"model": "x",}')
    assert_clean_failure(run("evaluate", str(bad_json)), "bad.json: not valid JSON", "line 1 column 15")
    assert_clean_failure(run("evaluate", str(tmp_path / "absent.yaml")), "absent.yaml: no such file")
    assert_clean_failure(
        run("evaluate", write_json(tmp_path / "list.json", [EVALUATE])), "expected an object"
    )
    (tmp_path / "empty.yaml").write_text("")
    assert_clean_failure(run("evaluate", str(tmp_path / "empty.yaml")), "empty.yaml: empty")
    (tmp_path / "nan.yaml").write_text("model: .nan\n")
    assert_clean_failure(run("evaluate", str(tmp_path / "nan.yaml")), "NaN or infinity")


def test_yaml_tags_are_not_executed(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("model: !!python/object/apply:os.system ['echo pwned']\n")
    assert_clean_failure(run("evaluate", str(evil)), "evil.yaml: not valid YAML")


def test_an_unreachable_url_exits_1_naming_it(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    result = run("evaluate", write_json(tmp_path / "body.json", EVALUATE), "--url", url)
    assert_clean_failure(result, f"cannot reach {url}/v1/evaluate")


def test_a_url_without_a_scheme_is_a_usage_error(tmp_path):
    result = run("evaluate", write_json(tmp_path / "body.json", EVALUATE), "--url", "localhost:8000")
    assert result.exit_code == 2


# --- the same answer from a running service


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    """The service on a free port of 127.0.0.1, served by uvicorn in a background thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        create_app(Settings(hardware_dir=None)), log_level="warning", lifespan="off", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_url_answers_the_same_as_in_process(tmp_path, live_url):
    file = write_yaml(tmp_path / "body.yaml", EVALUATE)
    remote = run("evaluate", file, "--json", "--url", live_url, "--timeout", "30")
    assert remote.exit_code == 0, remote.output
    assert remote.stdout == run("evaluate", file, "--json").stdout
    table = run("evaluate", file, "--url", live_url)
    assert table.exit_code == 0 and table.stdout == run("evaluate", file).stdout
    missing = run(
        "evaluate", write_json(tmp_path / "bad.json", {**EVALUATE, "model": "nope/nope"}), "--url", live_url
    )
    assert_clean_failure(missing, "unknown model 'nope/nope'")


# --- what-if in batches, against a stand-in of POST /v1/whatif

WHATIF_HEADER = [
    "model",
    "deployment.mode",
    "deployment.gpu",
    "workload.input_tokens",
    "workload.output_tokens",
    "workload.arrival.kind",
    "workload.arrival.rate_per_s",
    "label",
]
UNKNOWN = "unknown/model"


def _scenario_rows() -> list[list[str]]:
    """Five scenarios: rates 1..5, the fourth of an unknown model, the fifth disaggregated."""
    rows = []
    for k in range(5):
        model = UNKNOWN if k == 3 else LLAMA_8B
        mode = "disaggregated" if k == 4 else "aggregated"
        rows.append(
            [model, mode, "h100-sxm", "1000", "200", "poisson", str(k + 1), f"case {k}, rate {k + 1}"]
        )
    return rows


def _nested(flat: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        *parents, leaf = dotted.split(".")
        node = out
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return out


def _fake_answer(row: int, scenario: dict[str, Any]) -> dict[str, Any]:
    """A trivial evaluation (TTFT mean = rate / 100) or the problem of an unknown model."""
    if scenario.get("model") == UNKNOWN:
        problem = {
            "type": "/problems/unknown-model",
            "title": "Unknown model",
            "status": 404,
            "detail": f"unknown model '{UNKNOWN}'",
        }
        return {"row": row, "status": "error", "error": problem}
    rate = float(scenario["workload"]["arrival"]["rate_per_s"])
    result: dict[str, Any] = {"ttft_s": {"mean": rate / 100}, "feasible": True}
    if scenario["deployment"]["mode"] == "disaggregated":
        result["kv_transfer"] = {"bytes_per_s": rate * 1e9}
    return {"row": row, "status": "ok", "result": result}


def fake_whatif_app(calls: list[int], max_scenarios: int = 100) -> FastAPI:
    """``POST /v1/whatif`` as its contract says, for CSV and JSON in and CSV, JSON and NDJSON out."""
    fake = FastAPI()

    @fake.post("/v1/whatif")
    async def whatif(request: Request) -> Response:
        raw = (await request.body()).decode()
        header: list[str] | None = None
        if request.headers["content-type"].startswith("text/csv"):
            header, *rows = list(csv.reader(io.StringIO(raw)))
            inputs: list[list[str]] = rows
            scenarios = [_nested(dict(zip(header, r, strict=True))) for r in rows]
        else:
            scenarios = json.loads(raw)
        calls.append(len(scenarios))
        if len(scenarios) > max_scenarios:
            problem = {
                "type": "/problems/request-too-large",
                "title": "Content Too Large",
                "status": 413,
                "detail": f"{len(scenarios)} scenarios; at most {max_scenarios}",
                "instance": "/v1/whatif",
            }
            return JSONResponse(problem, status_code=413, media_type="application/problem+json")
        answers = [_fake_answer(k, s) for k, s in enumerate(scenarios)]
        accept = request.headers.get("accept", "application/json")
        if accept == "application/x-ndjson":
            return Response("".join(json.dumps(a) + "\n" for a in answers), media_type=accept)
        if accept != "text/csv":
            ok = sum(a["status"] == "ok" for a in answers)
            return JSONResponse(
                {
                    "num_scenarios": len(answers),
                    "num_ok": ok,
                    "num_errors": len(answers) - ok,
                    "results": answers,
                }
            )
        assert header is not None
        outputs = ["ttft_s.mean", "feasible"]
        if any("kv_transfer" in (a.get("result") or {}) for a in answers):
            outputs.append("kv_transfer.bytes_per_s")
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header + ["row", "status", "error"] + outputs)
        for values, a in zip(inputs, answers, strict=True):
            result = a.get("result") or {}
            figures = {
                "ttft_s.mean": (result.get("ttft_s") or {}).get("mean"),
                "feasible": result.get("feasible"),
                "kv_transfer.bytes_per_s": (result.get("kv_transfer") or {}).get("bytes_per_s"),
            }
            error = a["error"]["detail"] if a["status"] == "error" else ""
            writer.writerow(
                values
                + [a["row"], a["status"], error]
                + ["" if figures[c] is None else figures[c] for c in outputs]
            )
        return Response(out.getvalue(), media_type="text/csv")

    return fake


@pytest.fixture
def whatif_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CLI's in-process service is the stand-in; returns the scenarios of each request it got."""
    calls: list[int] = []
    monkeypatch.setattr(cli, "local_app", lambda: fake_whatif_app(calls, max_scenarios=3))
    return calls


def write_scenarios_csv(path: Path) -> str:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(WHATIF_HEADER)
        writer.writerows(_scenario_rows())
    return str(path)


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_whatif_csv_in_batches_writes_one_header_and_every_row(tmp_path, whatif_calls):
    out = tmp_path / "out.csv"
    result = run("whatif", write_scenarios_csv(tmp_path / "in.csv"), "-o", str(out), "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert whatif_calls == [2, 2, 1]
    header, *rows = read_csv(out)
    assert header == WHATIF_HEADER + [
        "row",
        "status",
        "error",
        "ttft_s.mean",
        "feasible",
        "kv_transfer.bytes_per_s",
    ]  # the last batch's extra column, once
    assert [r[: len(WHATIF_HEADER)] for r in rows] == _scenario_rows()  # inputs kept, quoted commas too
    by_name = [dict(zip(header, r, strict=True)) for r in rows]
    assert [r["row"] for r in by_name] == ["0", "1", "2", "3", "4"]
    assert [r["status"] for r in by_name] == ["ok", "ok", "ok", "error", "ok"]
    assert by_name[3]["error"] == f"unknown model '{UNKNOWN}'"
    for r in by_name:  # each answer stays beside its own scenario
        if r["status"] == "ok":
            assert float(r["ttft_s.mean"]) == float(r["workload.arrival.rate_per_s"]) / 100
    assert [r["kv_transfer.bytes_per_s"] for r in by_name] == ["", "", "", "", "5000000000.0"]
    assert "│ ok " in result.stdout and "│ errors " in result.stdout and str(out.resolve()) in result.stdout
    assert "3" in next(line for line in result.stdout.splitlines() if "│ batches " in line)


def test_whatif_json_in_json_and_ndjson_out_count_rows_over_the_whole_input(tmp_path, whatif_calls):
    bodies = [_nested(dict(zip(WHATIF_HEADER[:-1], r[:-1], strict=True))) for r in _scenario_rows()]
    scenarios = write_json(tmp_path / "in.json", bodies)
    out = tmp_path / "out.json"
    result = run("whatif", scenarios, "-o", str(out), "--batch-size", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "num_scenarios": 5,
        "num_ok": 4,
        "num_errors": 1,
        "num_batches": 2,
        "output": str(out),
    }
    combined = json.loads(out.read_text())
    assert (combined["num_scenarios"], combined["num_ok"], combined["num_errors"]) == (5, 4, 1)
    assert [r["row"] for r in combined["results"]] == [0, 1, 2, 3, 4]
    assert combined["results"][3]["error"]["title"] == "Unknown model"
    assert combined["results"][4]["result"]["ttft_s"]["mean"] == 0.05

    lines = tmp_path / "out.ndjson"
    result = run("whatif", scenarios, "-o", str(lines), "--batch-size", "2")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert records == combined["results"]
    assert whatif_calls == [3, 2, 2, 2, 1]


def test_whatif_progress_bar_only_when_asked_or_on_a_terminal(tmp_path, whatif_calls):
    scenarios = write_scenarios_csv(tmp_path / "in.csv")
    quiet = run("whatif", scenarios, "-o", str(tmp_path / "a.csv"), "--batch-size", "2")
    assert quiet.exit_code == 0 and quiet.stderr == ""  # stderr is not a terminal here
    shown = run("whatif", scenarios, "-o", str(tmp_path / "b.csv"), "--batch-size", "2", "--progress")
    assert shown.exit_code == 0 and "5/5" in shown.stderr
    scripted = run(
        "whatif", scenarios, "-o", str(tmp_path / "c.csv"), "--batch-size", "2", "--progress", "--json"
    )
    assert scripted.exit_code == 0 and scripted.stderr == ""
    assert json.loads(scripted.stdout)["num_errors"] == 1


def test_whatif_stops_at_a_refused_batch_and_writes_nothing(tmp_path, whatif_calls):
    out = tmp_path / "out.csv"
    result = run("whatif", write_scenarios_csv(tmp_path / "in.csv"), "-o", str(out), "--batch-size", "4")
    assert_clean_failure(
        result, "batch 1 of 2 (rows 0 to 3)", "413 Content Too Large", "smaller --batch-size"
    )
    assert not out.exists()
    assert whatif_calls == [4]


def test_whatif_input_problems_exit_1(tmp_path, whatif_calls):
    (tmp_path / "empty.csv").write_text("")
    assert_clean_failure(run("whatif", str(tmp_path / "empty.csv"), "-o", str(tmp_path / "o.csv")), "empty")
    (tmp_path / "header.csv").write_text(",".join(WHATIF_HEADER) + "\n")
    assert_clean_failure(
        run("whatif", str(tmp_path / "header.csv"), "-o", str(tmp_path / "o.csv")), "no scenarios"
    )
    assert_clean_failure(
        run("whatif", write_json(tmp_path / "obj.json", EVALUATE), "-o", str(tmp_path / "o.json")),
        "expected an array",
    )
    assert whatif_calls == []


def test_whatif_against_the_real_endpoint(tmp_path, app):
    pytest.importorskip("planner.api.routers.whatif")
    header = [
        "model",
        "deployment.mode",
        "deployment.gpu",
        "deployment.parallelism.tp",
        "workload.input_tokens",
        "workload.output_tokens",
        "workload.arrival.kind",
        "workload.arrival.rate_per_s",
    ]
    rows = [
        [LLAMA_8B, "aggregated", "h100-sxm", "1", "1000", "200", "poisson", str(rate)] for rate in (2, 4, 8)
    ]
    rows.insert(1, [LLAMA_8B, "aggregated", "no-such-gpu", "1", "1000", "200", "poisson", "2"])
    scenarios = tmp_path / "in.csv"
    with scenarios.open("w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    out = tmp_path / "out.csv"
    result = run("whatif", str(scenarios), "-o", str(out), "--batch-size", "3")
    assert result.exit_code == 0, result.output
    got_header, *got = read_csv(out)
    assert got_header[: len(header)] == header
    by_name = [dict(zip(got_header, r, strict=True)) for r in got]
    assert [r["row"] for r in by_name] == ["0", "1", "2", "3"]
    assert [r["status"] for r in by_name] == ["ok", "error", "ok", "ok"]
    evaluate = {
        "model": LLAMA_8B,
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}},
        "workload": {
            "input_tokens": 1000,
            "output_tokens": 200,
            "arrival": {"kind": "poisson", "rate_per_s": 8},
        },
    }
    expected = reference(app, "/v1/evaluate", evaluate).json()
    assert float(by_name[3]["ttft_s.mean"]) == pytest.approx(expected["ttft_s"]["mean"], rel=1e-9)
