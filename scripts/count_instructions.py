"""Instructions per call of the benchmark's evaluate and plan calls, counted by valgrind's callgrind.

Usage::

    python scripts/count_instructions.py                       # every call, 4 calls each
    python scripts/count_instructions.py plan chunked --calls 2
    python scripts/count_instructions.py ev0 --root ../other-checkout   # the same calls on another checkout

Wall time on a shared 2-core VM moves by up to 2x between runs of the same code (the benchmark records
``prefill_cost``, pure Python nobody changes, at 0.61 to 1.15 ms on different days), which hides changes of
10-20 %. The number of instructions a call executes does not move: two runs of the same code agree to a few
parts in a thousand, so an A/B of two checkouts is two numbers. It is not a speed (a cache miss costs more
than an add) and not a pass/fail figure: ``docs/benchmarks.md`` has the times.

Needs ``valgrind`` (the Debian package; not part of the project's setup). Each call is counted inside
``operator.methodcaller``'s C function, which nothing else on these paths calls, so imports, catalog loading
and the two warm-up calls are left out (``--collect-atstart=no --toggle-collect=methodcaller_call``). A
count takes ~1.5 minutes per evaluate call kind and ~3 for the whole plan (valgrind runs ~50x slower).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what each name runs: ``ev0`` … ``ev6`` the benchmark's evaluate bodies in order, then its plan bodies
CALLS = ("ev0", "ev1", "ev2", "ev3", "ev4", "ev5", "ev6", "chunked", "disagg", "plan")

_CHILD = r'''
import operator, sys
root, which, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root); sys.path.insert(0, root + "/scripts")
from benchmark import EVALUATE_BODIES, PLAN_BODIES
from planner.api.catalogs import Catalogs
from planner.api.plan_schemas import PlanChunkedRequest, PlanDisaggregatedRequest, PlanRequest
from planner.api.routers import plan as P
from planner.api.settings import Settings
catalogs, settings = Catalogs(None), Settings(hardware_dir=None)
if which.startswith("ev"):
    from planner.api.routers.evaluate import build_problem, evaluation_response
    from planner.api.serving_schemas import EvaluateRequest
    from planner.serving.evaluate import evaluate
    def run(body, c, s):
        problem, notes = build_problem(body, c)
        return evaluation_response(problem, evaluate(problem), notes)
    bodies, fn, model = [list(EVALUATE_BODIES.values())[int(which[2:])]], run, EvaluateRequest
else:
    k = {"chunked": 0, "disagg": 1, "plan": 2}[which]
    fn = (P.plan_chunk_budget, P.plan_pool_split, P.plan_deployment)[k]
    bodies, model = PLAN_BODIES[k][2], (PlanChunkedRequest, PlanDisaggregatedRequest, PlanRequest)[k]
for _ in range(2):  # warm-up: catalogs, caches, first-call imports
    for b in bodies:
        fn(model.model_validate(b), catalogs, settings)
class Calls:
    def run(self):
        for i in range(n):
            fn(model.model_validate(bodies[i % len(bodies)]), catalogs, settings)
operator.methodcaller("run")(Calls())
'''


def count(root: Path, which: str, calls: int) -> float:
    """Instructions per call [millions]."""
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=methodcaller_call",
           "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD, str(root), which, str(calls)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(root))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"{which}: valgrind failed:\n{out.stderr[-2000:]}")
    return int(found.group(1)) / calls / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calls", nargs="*", metavar="CALL", help=f"which calls: {', '.join(CALLS)} (default: all)")
    parser.add_argument("--calls", dest="n", type=int, default=4, help="calls counted per kind (default 4)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to count (default: this one)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.calls) - set(CALLS))
    if unknown:
        parser.error(f"unknown call(s) {', '.join(unknown)}: choose from {', '.join(CALLS)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    for which in args.calls or CALLS:
        print(f"{which}: {count(args.root.resolve(), which, args.n):.2f} M instructions per call", flush=True)


if __name__ == "__main__":
    main()
