"""The columnar what-if path: scenarios that differ only in rate, replicas and SLO are evaluated as columns,
and every row still answers exactly what ``/v1/evaluate`` answers for it (or its own problem)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from planner.api.whatif_columns import split_json_row, valid_grouped

pytestmark = pytest.mark.anyio


def _scenario(rate, replicas=None, slo=None, **extra):
    dep = {"mode": "aggregated", "gpu": "h100-sxm"}
    if replicas is not None:
        dep["replicas"] = replicas
    row = {"model": "meta-llama/Llama-3.1-8B", "deployment": dep | extra.pop("deployment", {}),
           "workload": {"input_tokens": extra.pop("input_tokens", 2000), "output_tokens": 300,
                        "arrival": {"kind": "poisson", "rate_per_s": rate} | extra.pop("arrival", {})}}
    if slo is not None:
        row["slo"] = slo
    return row | extra


SWEEP = (
    [_scenario(r, 1, {"ttft_s": 0.5, "itl_s": 0.05}) for r in (0.5, 2, 4.5, 9, 14.0, 40, 500)]
    + [_scenario(r, k, {"ttft_s": t, "ttft_percentile": p, "itl_s": i, "itl_percentile": 90})
       for r, k, t, p, i in [(3, 2, 0.2, 50, 0.02), (30, 4, 1.0, 99, None), (12, 3, None, 90, 0.1)]]
    + [_scenario(r) for r in (1, 6, 60)]
    + [_scenario(r, 2, deployment={"chunked_prefill": False}, input_tokens={"distribution": "lognormal", "mean": 2000,
                                                                           "p90": 3500}) for r in (1, 5, 9)]
    + [_scenario(r, 1, arrival={"kind": "gamma", "cv": 2.0}) | {"workload": {
        "input_tokens": 2000, "output_tokens": {"distribution": "lognormal", "mean": 300, "p90": 550},
        "arrival": {"kind": "gamma", "rate_per_s": r, "cv": 2.0}}} for r in (1, 7)]
    # bad grouped values: each answers its own problem, the others are unaffected
    + [_scenario(True, 1), _scenario(-1.0, 1), _scenario(4, 2.0), _scenario(4, 0), _scenario(4, 1, {"ttft_s": "1"}),
       _scenario(4, 1, {"ttft_s": 0.5, "ttft_percentile": 100})]
    # not groupable: closed loop, disaggregated
    + [{"model": "meta-llama/Llama-3.1-8B", "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
        "workload": {"input_tokens": 2000, "output_tokens": 300, "arrival": {"kind": "closed_loop", "concurrency": c}}}
       for c in (4, 16)]
)


async def _evaluate_each(client, rows):
    out = []
    for row in rows:
        r = await client.post("/v1/evaluate", json=row)
        out.append((r.status_code, r.json()))
    return out


async def test_every_row_of_a_sweep_answers_what_evaluate_answers(client):
    r = await client.post("/v1/whatif", json=SWEEP)
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    assert [a["row"] for a in got] == list(range(len(SWEEP)))
    for (status, want), ans, row in zip(await _evaluate_each(client, SWEEP), got, SWEEP, strict=True):
        if status == 200:
            assert ans["status"] == "ok", (row, ans)
            assert ans["result"] == want, row
        else:
            assert ans["status"] == "error" and ans["error"]["status"] == status, (row, ans)
            assert ans["error"]["detail"] == want["detail"]


async def test_csv_sweep_rows_equal_the_json_rows(client):
    columns = ["model", "deployment.mode", "deployment.gpu", "deployment.replicas", "workload.input_tokens",
               "workload.output_tokens", "workload.arrival.kind", "workload.arrival.rate_per_s", "slo.ttft_s",
               "slo.itl_s"]
    cells = [["meta-llama/Llama-3.1-8B", "aggregated", "h100-sxm", str(k), "2000", "300", "poisson", str(rate),
              "0.5", "" if k == 2 else "0.05"] for rate in (0.5, 3, 8, 20) for k in (1, 2)]
    text = ",".join(columns) + "\n" + "\n".join(",".join(c) for c in cells) + "\n"
    r = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv"})
    assert r.status_code == 200
    rows = [{"model": c[0], "deployment": {"mode": c[1], "gpu": c[2], "replicas": int(c[3])},
             "workload": {"input_tokens": 2000, "output_tokens": 300,
                          "arrival": {"kind": "poisson", "rate_per_s": float(c[7])}},
             "slo": {"ttft_s": 0.5} | ({} if c[9] == "" else {"itl_s": 0.05})} for c in cells]
    want = await _evaluate_each(client, rows)
    for (_, w), ans in zip(want, r.json()["results"], strict=True):
        assert ans["result"] == w
    as_csv = await client.post("/v1/whatif", content=text, headers={"content-type": "text/csv", "accept": "text/csv"})
    out = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [float(o["ttft_s.p90"]) for o in out] == [w["ttft_s"]["p90"] for _, w in want]
    assert [float(o["itl_s.p99"]) for o in out] == [w["itl_s"]["p99"] for _, w in want]


async def test_ndjson_lines_equal_the_json_results(client):
    body = json.dumps(SWEEP[:10])
    js = (await client.post("/v1/whatif", content=body, headers={"content-type": "application/json"})).json()
    nd = await client.post("/v1/whatif", content=body,
                           headers={"content-type": "application/json", "accept": "application/x-ndjson"})
    assert [json.loads(line) for line in nd.text.splitlines()] == js["results"]


def test_grouped_values_are_checked_as_the_request_model_checks_them():
    assert valid_grouped("workload.arrival.rate_per_s", 2) and valid_grouped("workload.arrival.rate_per_s", 2.5)
    for bad in (True, "2", 0.0, -1, float("nan"), float("inf"), 2e6, None):
        assert not valid_grouped("workload.arrival.rate_per_s", bad)
    assert valid_grouped("deployment.replicas", 3)
    for bad in (2.0, True, 0, 100_001):
        assert not valid_grouped("deployment.replicas", bad)
    assert valid_grouped("slo.ttft_s", None) and not valid_grouped("slo.ttft_percentile", None)
    assert not valid_grouped("slo.itl_percentile", 100) and valid_grouped("slo.itl_percentile", 99.9)


def test_scenarios_group_by_everything_but_the_grouped_fields():
    a = split_json_row(_scenario(2, 1, {"ttft_s": 0.5}))
    b = split_json_row(_scenario(9, 4, {"ttft_s": 0.1}))
    c = split_json_row(_scenario(2, 1, {"itl_s": 0.5}))  # another SLO field: another group
    d = split_json_row(_scenario(2, 1, {"ttft_s": 0.5}, input_tokens=2001))
    assert a is not None and b is not None and c is not None and d is not None
    assert a[0] == b[0] and a[0] != c[0] and a[0] != d[0]
    assert b[1] == {"workload.arrival.rate_per_s": 9, "deployment.replicas": 4, "slo.ttft_s": 0.1}
    assert split_json_row([1, 2]) is None


async def test_only_the_ungroupable_rows_take_the_row_by_row_path(client, monkeypatch):
    from planner.api.routers import whatif as W

    seen: list[int] = []
    original = W._answer_rows

    def counting(rows, catalogs, instance, start=0, memo=None):
        seen.extend(range(start, start + len(rows)))
        return original(rows, catalogs, instance, start, memo)

    monkeypatch.setattr(W, "_answer_rows", counting)
    r = await client.post("/v1/whatif", json=SWEEP)
    assert r.status_code == 200
    # the six bad grouped values and the two closed loops; every other row was a column of its group
    assert seen == list(range(len(SWEEP) - 8, len(SWEEP)))


def test_the_column_checks_agree_with_the_field_checks():
    from planner.api.whatif_columns import GROUPED, valid_rows

    samples = [2, 2.5, 0, -1, 1e-7, 1e-6, 1e6, 1e7, 10**400, True, False, None, "3", float("nan"), float("inf"),
               99.99, 100, 100.0, 100_000, 100_001, 3.0, [1]]
    for path in GROUPED:
        values = [{path: x} for x in samples]
        want = [k for k, x in enumerate(samples) if valid_grouped(path, x)]
        assert valid_rows(list(range(len(samples))), values) == want, path


async def test_an_in_process_sweep_answers_what_whatif_answers(client, app):
    import numpy as np

    from planner.api.whatif_columns import evaluate_sweep
    from planner.errors import InvalidInput

    rates, reps, ttft = [0.5, 4.0, 12.0, 300.0], [1, 2, 3, 1], [0.5, float("nan"), 0.2, 1.0]
    base = _scenario(1.0, 1, {"ttft_s": 0.5, "itl_s": 0.05})
    rows = []
    for r, k, t in zip(rates, reps, ttft, strict=True):
        slo = {"itl_s": 0.05} | ({} if t != t else {"ttft_s": t})
        rows.append(_scenario(r, k, slo))
    want = [a["result"] for a in (await client.post("/v1/whatif", json=rows)).json()["results"]]
    catalogs = app.state.catalog_cache.get(None)
    got = evaluate_sweep(base, catalogs, rate_per_s=rates, replicas=reps, ttft_s=ttft)
    for j, w in enumerate(want):
        for name in ("ttft_s", "itl_s", "tpot_s", "e2e_latency_s"):
            assert [float(got[f"{name}.{s}"][j]) for s in ("mean", "p50", "p90", "p99")] == list(w[name].values())
        assert float(got["requests_per_s"][j]) == w["requests_per_s"]
        assert int(got["num_gpus"][j]) == w["num_gpus"]
        assert got["warnings"][j] == w["warnings"]
        frac = float(got["slo_attainment_fraction"][j])
        assert frac == w["slo_attainment_fraction"]
    with pytest.raises(InvalidInput, match="index 1"):
        evaluate_sweep(base, catalogs, rate_per_s=[1.0, -2.0])
    with pytest.raises(InvalidInput, match="2 values for 3 rates"):
        evaluate_sweep(base, catalogs, rate_per_s=[1.0, 2.0, 3.0], replicas=[1, 2])
    assert np.all(evaluate_sweep(base, catalogs, rate_per_s=[1.0, 2.0])["feasible"])
