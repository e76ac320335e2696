"""The share of time the decode batch spends at its cap (``batch.cap_share``, ``batch.batch_cap_share``), its
warning, and the reference simulation's share of time with a prompt kept out for want of KV cache or a batch
slot.

The simulated cases are Qwen3-32B on two H100s (TP2) from the crosscheck grid (its 1 % KV admission
watermark included), whose cap is the KV cache (~200 sequences), at 70 % and 90 % of the closed form's
saturation rate: three replications of 12000 requests each (10 % warm-up). Measured when written
(2026-12-02): at ρ = 0.9 the closed form gives 0.56 % (chunked) and 0.75 % (unchunked; 0.40 and 0.58 % from
the spread of the sequence count alone, before the KV each sequence holds was added); the replications
0.53 / 1.71 / 0.34 % and 0 / 1.12 / 0.65 %, without preemptions. At ρ = 0.7 both are zero (the closed
form's ~1e-12). The event is rare and decided by a few episodes per run, so the check is on its order of
magnitude: within a factor of three.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.aggregated import AggregatedModel
from planner.serving.batch import CAP_WARNING_SHARE, batch_cap_share, batch_dispersion, cap_share
from planner.serving.evaluate import evaluate
from planner.serving.workload import fixed_length
from planner.validation import crosscheck as X
from planner.validation.simulator import simulate

NUM_REQUESTS = 12000
SEEDS = (0, 1, 2)


def test_a_poisson_batch_has_the_poisson_tail():
    # dispersion 1: the gamma of shape B, the continuous form of the Poisson occupancy
    for mean, cap in ((50.0, 70.0), (100.0, 130.0), (200.0, 240.0)):
        exact = stats.poisson.sf(cap - 1, mean)
        share = float(batch_cap_share(np.array([mean]), np.array([1.0]), cap)[0])
        assert share == pytest.approx(exact, rel=0.5)


def test_the_share_grows_with_the_batch_and_its_spread():
    b = np.array([0.0, 50.0, 100.0, 150.0])
    share = batch_cap_share(b, np.full(4, 4.0), 200.0)
    assert share[0] == 0.0
    assert np.all(np.diff(share) > 0)
    wide = batch_cap_share(np.full(3, 100.0), np.array([1.0, 4.0, 10.0]), 200.0)
    assert np.all(np.diff(wide) > 0)
    assert wide[0] < 1e-12 < 1e-3 < wide[2] < 0.1


@pytest.fixture(scope="module")
def qwen_cases():
    workers = X.default_workers(load_model_catalog(), load_catalog())
    worker = next(w for w in workers if w.model.id == "Qwen/Qwen3-32B")
    scenarios = {(s.mode, s.lengths): s for s in X.default_scenarios([worker], find_engine("vllm"))}
    memos = X.StepTimeMemos()
    out = {}
    for mode in ("aggregated_chunked", "aggregated_unchunked"):
        for case in X.scenario_cases(scenarios[(mode, "lognormal")]):
            if case.point.label in ("ρ=0.70", "ρ=0.90"):
                out[(mode, case.point.label)] = (case.problem, memos.for_problem(case.problem))
    return out


def closed_form_share(problem) -> float:
    model = AggregatedModel(problem)
    st = model.steady_state(np.array([float(problem.workload.arrival.rate_per_s)]), 1.0)
    return float(cap_share(model, st.batch, batch_dispersion(model, st))[0])


@pytest.fixture(scope="module")
def runs(qwen_cases):
    """``runs(mode, label, watermark)``: the replications of a case, simulated once per module."""
    done: dict[tuple[str, str, float], list] = {}

    def get(mode: str, label: str, watermark: float = X.KV_WATERMARK) -> list:
        key = (mode, label, watermark)
        if key not in done:
            problem, memo = qwen_cases[(mode, label)]
            done[key] = [simulate(problem, num_requests=NUM_REQUESTS, warmup_requests=NUM_REQUESTS // 10,
                                  seed=s, step_time=memo, kv_watermark=watermark) for s in SEEDS]
        return done[key]

    return get


def pooled_share(replications) -> float:
    return float(sum(r.admission_blocked_share * r.window_s for r in replications)
                 / sum(r.window_s for r in replications))


@pytest.mark.parametrize("mode", ["aggregated_chunked", "aggregated_unchunked"])
def test_the_kv_cap_share_follows_the_simulation(qwen_cases, runs, mode):
    problem, _ = qwen_cases[(mode, "ρ=0.90")]
    model = AggregatedModel(problem)
    assert model.kv_batch_cap < problem.deployment.max_batch_size  # the KV cache sets the cap here
    cf, sim = closed_form_share(problem), pooled_share(runs(mode, "ρ=0.90"))
    assert sim > 0.0
    assert sim / 3.0 <= cf <= 3.0 * sim, f"{mode} ρ=0.9: at the cap {cf:.2%} of the time, simulated {sim:.2%}"
    calm, _ = qwen_cases[(mode, "ρ=0.70")]
    assert closed_form_share(calm) < 1e-6
    assert pooled_share(runs(mode, "ρ=0.70")) == 0.0


def test_the_watermark_is_what_keeps_the_unchunked_point_from_preempting(runs):
    """With vLLM V0's 1 % admission watermark (the crosscheck grid's) the ρ = 0.9 unchunked point reaches
    the KV cap without a preemption; admitting up to a full cache (vLLM V1's default) preempts there
    (measured when written: 0 / 20 / 13 preemptions in the three replications)."""
    assert sum(r.num_preemptions for r in runs("aggregated_unchunked", "ρ=0.90")) == 0
    assert sum(r.num_preemptions for r in runs("aggregated_unchunked", "ρ=0.90", 0.0)) > 0


def test_evaluate_warns_when_the_batch_reaches_the_kv_cap(qwen_cases):
    busy, _ = qwen_cases[("aggregated_chunked", "ρ=0.90")]
    calm, _ = qwen_cases[("aggregated_chunked", "ρ=0.70")]
    share = closed_form_share(busy)
    assert share >= CAP_WARNING_SHARE
    notes = [w for w in evaluate(busy).warnings if "decode batch is at" in w]
    assert len(notes) == 1 and f"{share:.1%}" in notes[0]
    assert "KV cache" in notes[0] and "preempted" in notes[0]
    assert not any("decode batch is at" in w for w in evaluate(calm).warnings)


def _kv_model(input_tokens, output_tokens):
    workers = X.default_workers(load_model_catalog(), load_catalog())
    worker = next(w for w in workers if w.model.id == "Qwen/Qwen3-32B")
    scenario = next(s for s in X.default_scenarios([worker], find_engine("vllm"))
                    if s.mode == "aggregated_chunked" and s.lengths == "lognormal")
    problem = scenario.problem(X.Arrival(kind="poisson", rate_per_s=1.0))
    wl = dataclasses.replace(problem.workload, input_tokens=input_tokens, output_tokens=output_tokens)
    return AggregatedModel(dataclasses.replace(problem, workload=wl))


def test_fixed_lengths_spread_the_kv_only_by_the_age_of_each_sequence():
    model = _kv_model(fixed_length(512), fixed_length(256))
    # a uniform age over the 256 outputs: variance 256² / 12 around a mean of 512 + 128
    assert model.kv_scv == pytest.approx(256.0**2 / 12.0 / 640.0**2, rel=0.02)


def test_the_kv_spread_is_that_of_a_sampled_running_sequence():
    """Sample the running sequences directly: a prompt, an output drawn in proportion to its length (long
    decodes are running more of the time) and an age uniform over it."""
    ins, outs = X.lognormal_workload()
    model = _kv_model(ins, outs)
    rng = np.random.default_rng(3)
    n = 400_000
    prompt = rng.choice(ins.values, size=n, p=ins.weights / ins.weights.sum())
    biased = outs.weights * outs.values
    output = rng.choice(outs.values, size=n, p=biased / biased.sum())
    held = prompt + rng.uniform(0.0, 1.0, size=n) * output
    assert float(np.mean(held)) == pytest.approx(model.decode_context, rel=0.01)
    assert model.kv_scv == pytest.approx(float(np.var(held) / np.mean(held) ** 2), rel=0.03)


def test_the_kv_cap_share_adds_the_spread_of_what_each_sequence_holds():
    ins, outs = X.lognormal_workload()
    model = _kv_model(ins, outs)
    b, d = np.array([110.0, 150.0]), np.array([6.0, 6.0])
    count = batch_cap_share(b, d, model.kv_batch_cap)
    share = cap_share(model, b, d)
    assert np.all(share > count)
    assert share == pytest.approx(batch_cap_share(b, d + model.kv_scv, model.kv_batch_cap))


def test_a_disaggregated_decode_pool_near_its_kv_cap_is_warned_about():
    """256 clients of the crosscheck's lognormal lengths on one Llama-3.1-8B H100 decode worker hold ~87 % of
    its KV cache on average (241 sequences of ~277): the reference simulation preempted 0, 9 and 18 requests
    in three 8000-request runs (2026-12-05), which the closed form does not model; it now says so. Its
    sequence count is binomial over the clients (a closed loop's batch cannot outgrow them), the KV it holds
    spread as the aggregated law's (``workload.held_kv_scv``); 64 clients are far from the cap."""
    workers = X.default_workers(load_model_catalog(), load_catalog())
    scenario = next(s for s in X.default_scenarios(workers[:1], find_engine("vllm"), modes=("disaggregated",))
                    if s.lengths == "lognormal")
    notes = {}
    for n in (64, 256):
        ev = evaluate(scenario.problem(X.Arrival(kind="closed_loop", concurrency=n)))
        notes[n] = [w for w in ev.warnings if "decode pool's batch is at" in w]
    assert notes[64] == []
    assert len(notes[256]) == 1 and "KV cache's capacity" in notes[256][0] and "preempted" in notes[256][0]
    share = float(notes[256][0].split("about ")[1].split("%")[0]) / 100
    assert CAP_WARNING_SHARE <= share < 0.05
