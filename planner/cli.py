"""The ``planner`` command: run the HTTP service or print the built-in catalogs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner.units import BYTES_PER_GB, DTYPE_BYTES, TERA

app = typer.Typer(help="Analytical capacity planner for LLM serving.", no_args_is_help=True)

HardwareDir = Annotated[
    Path | None,
    typer.Option(
        "--hardware-dir",
        envvar="PLANNER_HARDWARE_DIR",
        help="Directory of extra accelerator files merged over the built-in catalog.",
    ),
]


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

    settings = Settings(hardware_dir=hardware_dir) if hardware_dir is not None else None
    uvicorn.run(create_app(settings), host=host, port=port)


@app.command()
def gpus(hardware_dir: HardwareDir = None) -> None:
    """List the accelerator catalog."""
    from planner.hardware import load_catalog

    table = Table(title="Accelerators")
    for header in ("id", "name", "HBM [GB]", "HBM [TB/s]", "bf16 [TFLOP/s]", "fp8 [TFLOP/s]", "efficiency"):
        table.add_column(header, justify="left" if header in ("id", "name", "efficiency") else "right")
    for spec in sorted(load_catalog(hardware_dir).values(), key=lambda s: s.id):
        table.add_row(
            spec.id,
            f"{spec.vendor} {spec.name}",
            _figure(spec.memory_bytes, BYTES_PER_GB, 0),
            _figure(spec.hbm_bandwidth_bytes_per_s, TERA, 2),
            _figure(spec.peak_flops_per_s.get("bf16"), TERA, 0),
            _figure(spec.peak_flops_per_s.get("fp8"), TERA, 0),
            spec.efficiency_origin + (" (inherited)" if spec.efficiency_inherited else ""),
        )
    Console().print(table)


@app.command()
def models() -> None:
    """List the model catalog."""
    from planner.models import load_model_catalog

    catalog = load_model_catalog()
    table = Table(title="Models")
    for header in ("id", "type", "layers", "total params [B]", "active params [B]", "KV bytes/token"):
        table.add_column(header, justify="left" if header in ("id", "type") else "right")
    for model_id in sorted(catalog.ids()):
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
