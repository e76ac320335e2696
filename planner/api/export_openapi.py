"""Write the service's OpenAPI document to ``openapi/openapi.json``, or check that it is current.

Usage: ``python -m planner.api.export_openapi [--check] [--output PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from planner.api.app import create_app

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def render_openapi() -> str:
    """The spec as committed: sorted keys, two-space indent, one trailing newline."""
    return json.dumps(create_app().openapi(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.api.export_openapi", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the app")
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH, help="default: %(default)s")
    args = parser.parse_args(argv)
    rendered = render_openapi()
    path: Path = args.output
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != rendered:
            print(f"{path} is stale: run python -m planner.api.export_openapi", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rendered, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
