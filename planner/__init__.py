"""planner: an analytical capacity planner for LLM serving."""

__version__ = "0.1.0"
