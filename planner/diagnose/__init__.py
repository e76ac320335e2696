"""What a running deployment measured, and what the model expected: ``/v1/diagnose`` and ``/v1/calibrate``.

``measurements`` holds the parsed shapes (plain frozen dataclasses, SI units); ``prometheus`` and
``vllm_bench`` turn a vLLM ``/metrics`` scrape and a ``vllm bench serve`` result into them.
"""
