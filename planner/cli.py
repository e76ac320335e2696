"""The ``planner`` command: run the HTTP service or print the built-in catalogs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner.errors import PlannerError
from planner.units import BYTES_PER_GIB, DTYPE_BYTES, TERA

app = typer.Typer(help="Analytical capacity planner for LLM serving.", no_args_is_help=True)

HardwareDir = Annotated[
    Path | None,
    typer.Option(
        "--hardware-dir",
        envvar="PLANNER_HARDWARE_DIR",
        help="Directory of extra accelerator files merged over the built-in catalog.",
    ),
]


@contextmanager
def _domain_errors_exit() -> Iterator[None]:
    """Report a domain error (a bad catalog file, say) as one line on stderr and exit 1."""
    try:
        yield
    except PlannerError as exc:
        Console(stderr=True).print(f"[red]{type(exc).__name__}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(1) from None


def _figure(value: float | None, scale: float, digits: int = 1) -> str:
    return "-" if not value else f"{value / scale:,.{digits}f}"


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    hardware_dir: HardwareDir = None,
) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs)."""
    import uvicorn

    from planner.api import create_app
    from planner.api.settings import Settings
    from planner.hardware import load_catalog

    settings = Settings(hardware_dir=hardware_dir) if hardware_dir is not None else None
    if hardware_dir is not None:
        with _domain_errors_exit():  # fail at start, not on the first request
            load_catalog(hardware_dir)
    uvicorn.run(create_app(settings), host=host, port=port)


@app.command()
def gpus(hardware_dir: HardwareDir = None) -> None:
    """List the accelerator catalog."""
    from planner.hardware import load_catalog

    table = Table(title="Accelerators")
    headers = ("id", "name", "HBM [GiB]", "HBM [TB/s]", "bf16 [TFLOP/s]", "fp8 [TFLOP/s]", "efficiencies")
    for header in headers:
        left = header in ("id", "name", "efficiencies")
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "id")
    with _domain_errors_exit():
        catalog = load_catalog(hardware_dir)
    for spec in sorted(catalog.values(), key=lambda s: s.id):
        table.add_row(
            spec.id,
            f"{spec.vendor} {spec.name}",
            _figure(spec.memory_bytes, BYTES_PER_GIB, 0),
            _figure(spec.hbm_bandwidth_bytes_per_s, TERA, 2),
            _figure(spec.peak_flops_per_s.get("bf16"), TERA, 0),
            _figure(spec.peak_flops_per_s.get("fp8"), TERA, 0),
            spec.family + (" (inherited)" if spec.efficiency_inherited else " (fitted)"),
        )
    Console().print(table)


@app.command()
def models() -> None:
    """List the model catalog."""
    from planner.models import load_model_catalog

    with _domain_errors_exit():
        catalog = load_model_catalog()
    table = Table(title="Models")
    for header in ("id", "type", "layers", "total params [B]", "active params [B]", "KV bytes/token"):
        left = header in ("id", "type")
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "id")
    for model_id in catalog.ids():
        with _domain_errors_exit():
            arch = catalog.get(model_id)
        kv_dtype = arch.default_kv_dtype(arch.native_weight_dtype or "bf16")
        table.add_row(
            model_id,
            arch.model_type,
            str(arch.num_layers),
            _figure(arch.total_params, 1e9),
            _figure(arch.active_params, 1e9),
            f"{arch.kv_cache_bytes_per_token(DTYPE_BYTES[kv_dtype]):,.0f}",
        )
    Console().print(table)
