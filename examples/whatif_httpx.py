"""Batch what-if with plain httpx: POST a CSV of scenarios to ``/v1/whatif`` and save the answer CSV.

Each row of the input is one ``POST /v1/evaluate`` body, its columns the dotted field names
(``deployment.gpu``, ``workload.arrival.rate_per_s``); an empty cell leaves a field at its default. The
answer has the input columns, then ``row``, ``status`` (``ok`` or ``error``) and ``error`` (a problem's
detail), then the dotted evaluate outputs (``ttft_s.mean``, ``itl_s.p99``, ``throughput_output_tokens_per_s``,
...). A bad row answers its own error; the others are still evaluated.

Usage, with the service running (``planner serve``)::

    python examples/whatif_httpx.py --url http://127.0.0.1:8000 \\
        --input examples/scenarios.csv --output answers.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the service (default: %(default)s)")
    parser.add_argument("--input", type=Path, default=HERE / "scenarios.csv", help="default: %(default)s")
    parser.add_argument("--output", default="-", help="answer CSV file, - for standard output (default)")
    args = parser.parse_args(argv)

    response = httpx.post(
        f"{args.url.rstrip('/')}/v1/whatif",
        content=args.input.read_bytes(),
        headers={"Content-Type": "text/csv", "Accept": "text/csv"},
        timeout=httpx.Timeout(300.0, connect=10.0),
    )
    if response.status_code != 200:  # the whole batch was refused: a problem+json body says why
        print(f"{response.status_code}: {response.text}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(response.text)
    else:
        Path(args.output).write_text(response.text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
