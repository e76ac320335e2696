"""POST /v1/whatif: many evaluate scenarios in one request (JSON array or CSV), answered as JSON, CSV or
NDJSON by Accept; each row answers what POST /v1/evaluate answers for it, a bad row answers its own
problem and never fails the batch, and the bounds are 413 problems that name the limit."""

from __future__ import annotations

import csv
import io
import json

import pytest

import planner.api.routers.whatif as W

pytestmark = pytest.mark.anyio

LLAMA_8B = "meta-llama/Llama-3.1-8B"
HEADER = ("model,deployment.mode,deployment.gpu,deployment.parallelism.tp,workload.input_tokens,"
          "workload.output_tokens,workload.arrival.kind,workload.arrival.rate_per_s")


def _body(rate: float, gpu: str = "h100-sxm") -> dict:
    return {"model": LLAMA_8B, "deployment": {"mode": "aggregated", "gpu": gpu},
            "workload": {"input_tokens": 2000, "output_tokens": 300, "arrival": {"kind": "poisson", "rate_per_s": rate}}}


async def test_json_rows_answer_what_evaluate_answers_and_bad_rows_their_own_problem(client):
    rows = [_body(2.0), _body(6.0), _body(2.0, gpu="no-such-gpu"), {"model": LLAMA_8B}, 7]
    r = await client.post("/v1/whatif", json=rows)
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["num_scenarios"], d["num_ok"], d["num_errors"]) == (5, 2, 3)
    assert [x["row"] for x in d["results"]] == [0, 1, 2, 3, 4]
    for i in (0, 1):
        alone = (await client.post("/v1/evaluate", json=rows[i])).json()
        assert d["results"][i]["result"] == alone
    missing_gpu, invalid, not_object = (d["results"][k]["error"] for k in (2, 3, 4))
    assert missing_gpu["status"] == 404 and missing_gpu["field"] == "deployment.gpu"
    assert invalid["status"] == 422 and {e["field"] for e in invalid["errors"]} >= {"deployment", "workload"}
    assert not_object["status"] == 422


async def test_csv_in_csv_out_keeps_the_input_columns_and_row_order(client):
    text = (HEADER + "\n" + f"{LLAMA_8B},aggregated,h100-sxm,1,2000,300,poisson,2\n"
            + f"{LLAMA_8B},aggregated,nope,1,2000,300,poisson,2\n"
            + f"{LLAMA_8B},aggregated,h100-sxm,2,4000,200,poisson,5\n")
    r = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv", "accept": "text/csv"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    out = list(csv.DictReader(io.StringIO(r.text)))
    assert [o["row"] for o in out] == ["0", "1", "2"]
    assert [o["status"] for o in out] == ["ok", "error", "ok"]
    assert out[1]["error"] and not out[1]["ttft_s.mean"]
    assert out[2]["deployment.parallelism.tp"] == "2" and out[2]["workload.arrival.rate_per_s"] == "5"
    # the third row is the evaluate of its nested body
    alone = (await client.post("/v1/evaluate", json={
        "model": LLAMA_8B, "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 2}},
        "workload": {"input_tokens": 4000, "output_tokens": 200, "arrival": {"kind": "poisson", "rate_per_s": 5}}})).json()
    assert float(out[2]["ttft_s.p90"]) == pytest.approx(alone["ttft_s"]["p90"], rel=1e-12)
    assert out[2]["feasible"] == str(alone["feasible"])


async def test_csv_cells_spell_json_values(client):
    text = ("model,deployment.mode,deployment.gpu,workload.input_tokens.samples,workload.output_tokens,"
            "workload.arrival.kind,workload.arrival.concurrency,deployment.chunked_prefill\n"
            f'{LLAMA_8B},aggregated,h100-sxm,"[500, 1000, 4000]",200,closed_loop,8,false\n')
    r = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv"})
    res = r.json()["results"][0]
    assert res["status"] == "ok", res
    assert res["result"]["deployment"]["chunked_prefill"] is False
    assert res["result"]["workload"]["arrival"]["concurrency"] == 8


async def test_csv_lines_may_end_in_cr_and_whole_numbers_may_be_written_as_floats(client):
    # spreadsheets write integer columns with gaps as 2000.0; old Macs end lines with a lone CR
    row = f"{LLAMA_8B},aggregated,h100-sxm,1.0,2000.0,300,poisson,2.5"
    for text in (HEADER + "\r" + row + "\r", HEADER + "\r\n" + row + "\r\n"):
        r = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv"})
        assert r.status_code == 200, r.text
        assert r.json()["num_ok"] == 1, r.text


async def test_ndjson_streams_one_line_per_row(client):
    rows = [_body(1.0 + i) for i in range(5)]
    r = await client.post("/v1/whatif", json=rows, headers={"accept": "application/x-ndjson"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [x["row"] for x in lines] == list(range(5)) and all(x["status"] == "ok" for x in lines)


async def test_too_many_scenarios_is_413_naming_the_limit(client, monkeypatch):
    monkeypatch.setattr(W, "MAX_WHATIF_SCENARIOS", 3)
    r = await client.post("/v1/whatif", json=[_body(1.0)] * 4)
    assert r.status_code == 413
    p = r.json()
    assert p["limit_scenarios"] == 3 and p["num_scenarios"] == 4
    text = HEADER + "\n" + "\n".join([f"{LLAMA_8B},aggregated,h100-sxm,1,2000,300,poisson,2"] * 4) + "\n"
    r = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv"})
    assert r.status_code == 413 and r.json()["limit_scenarios"] == 3


async def test_whatif_takes_bodies_larger_than_the_other_endpoints(client):
    # 1.5 MiB: over the 1 MiB of /v1/evaluate, within the what-if limit (the padding row is its own error)
    big = [_body(2.0), {"padding": "x" * (3 * 2**19)}]
    assert (await client.post("/v1/evaluate", json=big[1])).status_code == 413
    r = await client.post("/v1/whatif", json=big)
    assert r.status_code == 200 and r.json()["num_ok"] == 1


@pytest.mark.parametrize(("content", "ctype", "status"), [
    ("a,b\n1,2\n", "text/plain", 415),
    ('{"model": "x"}', "application/json", 422),
    ("not json", "application/json", 422),
    ("[" * 100_000 + "]" * 100_000, "application/json", 422),  # deeper than the JSON parser goes
    ("", "text/csv", 422),
    ("{}", "text/csv", 422),  # a header naming no evaluate field: every row would fail on it
    (HEADER + ",notes\n", "text/csv", 422),
    ("model\n" + "x" * 200_000 + "\n", "text/csv", 422),  # a cell over the csv module's size limit
])
async def test_a_bad_batch_is_a_problem(client, content, ctype, status):
    r = await client.post("/v1/whatif", content=content, headers={"content-type": ctype})
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
