"""Closed-form costs of one prefill pass and one decode step (pure, vectorized numpy)."""

from planner.costs.memory import memory_plan
from planner.costs.passes import decode_cost, decode_latency_s, prefill_cost, prefill_latency_s
from planner.costs.types import CostContext, EngineProfile, MemoryPlan, OperatorCost, Parallelism, PassCost

__all__ = [
    "CostContext",
    "EngineProfile",
    "MemoryPlan",
    "OperatorCost",
    "Parallelism",
    "PassCost",
    "decode_cost",
    "decode_latency_s",
    "memory_plan",
    "prefill_cost",
    "prefill_latency_s",
]
