"""A Python client generated from ``openapi/openapi.json`` drives a live ``planner serve``.

What CI checks here: openapi-python-client turns the committed spec into an importable package with a
typed function for every operation; started as users start it, the service answers those functions; the
typed models read back exactly what the app answers in process for the same body (``to_dict()`` of the
parsed response equals the JSON); and the two batch what-if examples in ``examples/`` run against it.

The package is generated once per module into a temporary directory (``--meta none`` writes the bare
package, named after the output directory: ``planner_client``, what the generator names it by default
for the spec's title ``planner``) and imported from there; ``sys.path`` and ``sys.modules`` are restored
afterwards. The server gets a free port and a copy of the environment without ``PLANNER_*`` variables,
and is stopped in the fixture's teardown whatever the tests did.

The generator skips the what-if endpoint's ``text/csv`` request body (it only types JSON, forms and
octet-stream bodies), so the client sends what-if scenarios as a JSON array; the CSV form is what
``examples/whatif_httpx.py`` exercises.
"""

from __future__ import annotations

import copy
import csv
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "openapi" / "openapi.json"
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
GENERATOR = BIN / "openapi-python-client"
PLANNER = BIN / "planner"
PACKAGE = "planner_client"
#: guards against a server that never comes up or a generator that hangs; not a performance bound
STARTUP_DEADLINE_S = 60.0
GENERATE_DEADLINE_S = 120.0
REQUEST_TIMEOUT_S = 120.0


def _spec() -> dict[str, Any]:
    return json.loads(SPEC_PATH.read_text(encoding="utf-8"))


def _example(schema: str) -> dict[str, Any]:
    """The first documented example of a component schema (a request model)."""
    return copy.deepcopy(_spec()["components"]["schemas"][schema]["examples"][0])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def generated_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the freshly generated ``planner_client`` package."""
    if not GENERATOR.exists():
        pytest.skip(f"{GENERATOR} is missing: install the dev extras (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("generated")
    result = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(SPEC_PATH),
            "--output-path",
            str(out / PACKAGE),
            "--meta",
            "none",
        ],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=GENERATE_DEADLINE_S,
    )
    assert result.returncode == 0, f"generation failed:\n{result.stdout}\n{result.stderr}"
    assert (out / PACKAGE / "__init__.py").is_file(), result.stdout
    return out


@pytest.fixture(scope="module")
def package(generated_dir: Path) -> Iterator[ModuleType]:
    """The generated package, imported from its directory; the import state is restored afterwards."""
    sys.path.insert(0, str(generated_dir))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(generated_dir))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live ``planner serve`` on a free port; stopped at the end of the module."""
    if not PLANNER.exists():
        pytest.skip(f"{PLANNER} is missing: install this checkout (pip install -e .)")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("server") / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANNER_")}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(PLANNER), "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log_path.parent,
        )
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"planner serve exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{url}/v1/gpus", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"planner serve did not answer GET /v1/gpus:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def api(package: ModuleType, server_url: str) -> Iterator[Any]:
    """A generated ``Client`` of the live server that raises on undocumented statuses."""
    client = package.Client(
        base_url=server_url, timeout=httpx.Timeout(REQUEST_TIMEOUT_S), raise_on_unexpected_status=True
    )
    with client:
        yield client


async def _in_process(client: httpx.AsyncClient, path: str, body: Any) -> Any:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_every_operation_has_a_typed_function(package):
    """Nothing in the spec was dropped: ``api.<tag>.<operationId>`` exists with sync and asyncio forms."""
    for path, item in _spec()["paths"].items():
        for method, operation in item.items():
            module = _module(f"api.{operation['tags'][0]}.{operation['operationId']}")
            for form in ("sync", "sync_detailed", "asyncio", "asyncio_detailed"):
                assert callable(getattr(module, form, None)), (method, path, form)


def test_generated_models_carry_the_spec_descriptions(package):
    """The generated docstrings document the units, as the spec does."""
    doc = _module("models").PrefillResponse.__doc__ or ""
    assert "latency_s" in doc and "[s]" in doc
    assert "[FLOP]" in doc and "[bytes]" in doc


async def test_estimate_prefill_matches_the_app(api, client):
    models = _module("models")
    body = _example("PrefillRequest")
    answer = _module("api.estimate.estimate_prefill").sync(
        client=api, body=models.PrefillRequest.from_dict(body)
    )
    assert isinstance(answer, models.PrefillResponse), answer
    assert answer.latency_s > 0
    reference = await _in_process(client, "/v1/estimate/prefill", body)
    assert answer.latency_s == reference["latency_s"]
    assert answer.to_dict() == reference


async def test_evaluate_matches_the_app(api, client):
    models = _module("models")
    body = _example("EvaluateRequest")
    answer = _module("api.evaluate.evaluate_deployment").sync(
        client=api, body=models.EvaluateRequest.from_dict(body)
    )
    assert isinstance(answer, models.EvaluateResponse), answer
    assert answer.ttft_s.p90 > 0 and answer.feasible
    assert answer.to_dict() == await _in_process(client, "/v1/evaluate", body)


async def test_plan_chunked_and_plan_answer_a_status(api, client):
    models = _module("models")
    body = _example("PlanChunkedRequest")
    chunked = _module("api.plan.plan_chunk_budget").sync(
        client=api, body=models.PlanChunkedRequest.from_dict(body)
    )
    assert isinstance(chunked, models.PlanChunkedResponse), chunked
    assert chunked.status.value in {"optimal", "infeasible"}
    assert chunked.to_dict() == await _in_process(client, "/v1/plan/chunked", body)

    body = _example("PlanRequest")
    whole = _module("api.plan.plan_deployment").sync(client=api, body=models.PlanRequest.from_dict(body))
    assert isinstance(whole, models.PlanResponse), whole
    assert whole.status.value in {"optimal", "infeasible"}
    assert whole.configurations and whole.configurations[0].rank == 1


def test_a_problem_comes_back_typed(api):
    """An unknown GPU is a documented 404: the client parses it as a ``Problem``, it does not raise."""
    models = _module("models")
    body = _example("PrefillRequest") | {"gpu": "h100-sxm-nonexistent"}
    reply = _module("api.estimate.estimate_prefill").sync_detailed(
        client=api, body=models.PrefillRequest.from_dict(body)
    )
    assert reply.status_code == 404
    assert isinstance(reply.parsed, models.Problem)
    assert reply.parsed.status == 404 and reply.parsed.type_.startswith("/problems/")


async def test_whatif_answers_each_scenario_in_its_row(api, client):
    pytest.importorskip("planner.api.routers.whatif", reason="POST /v1/whatif is not in this checkout yet")
    models = _module("models")
    valid = _example("EvaluateRequest")
    invalid = copy.deepcopy(valid)
    invalid["deployment"]["gpu"] = "h100-sxm-nonexistent"
    bodies = [models.EvaluateRequest.from_dict(b) for b in (valid, invalid)]
    answer = _module("api.whatif.whatif").sync(client=api, body=bodies)
    assert isinstance(answer, models.WhatifResponse), answer
    assert (answer.num_scenarios, answer.num_ok, answer.num_errors) == (2, 1, 1)
    ok, error = sorted(answer.results, key=lambda r: r.row)
    assert (ok.row, ok.status.value, error.row, error.status.value) == (0, "ok", 1, "error")
    assert ok.result.to_dict() == await _in_process(client, "/v1/evaluate", valid)
    problem = error.error.to_dict()
    assert problem["status"] == 404 and "h100-sxm-nonexistent" in problem["detail"]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_whatif_examples_answer_every_scenario(generated_dir, package, server_url, tmp_path):
    pytest.importorskip("planner.api.routers.whatif", reason="POST /v1/whatif is not in this checkout yet")
    scenarios = _read_csv(EXAMPLES / "scenarios.csv")
    assert scenarios
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANNER_")}
    env["PYTHONPATH"] = str(generated_dir)  # where whatif_client.py imports planner_client from
    answers = {}
    for script in ("whatif_httpx.py", "whatif_client.py"):
        output = tmp_path / f"{script}.csv"
        result = subprocess.run(
            [
                sys.executable,
                str(EXAMPLES / script),
                "--url",
                server_url,
                "--input",
                str(EXAMPLES / "scenarios.csv"),
                "--output",
                str(output),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=REQUEST_TIMEOUT_S,
        )
        assert result.returncode == 0, f"{script}:\n{result.stdout}\n{result.stderr}"
        rows = _read_csv(output)
        assert len(rows) == len(scenarios), script
        for i, (row, scenario) in enumerate(zip(rows, scenarios, strict=True)):
            assert (row["row"], row["status"], row["error"]) == (str(i), "ok", ""), (script, row)
            assert {k: row[k] for k in scenario} == scenario, script  # the input columns come back first
            assert float(row["ttft_s.mean"]) > 0 and float(row["throughput_output_tokens_per_s"]) > 0
        answers[script] = rows
    # the two routes (CSV over httpx, typed JSON through the client) evaluate the same scenarios
    for by_csv, by_client in zip(answers["whatif_httpx.py"], answers["whatif_client.py"], strict=True):
        for column in ("ttft_s.mean", "itl_s.p99", "throughput_output_tokens_per_s"):
            assert float(by_csv[column]) == float(by_client[column]), column
