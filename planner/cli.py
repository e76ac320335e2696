"""The ``planner`` command: run the HTTP service, print the built-in catalogs, and ask the API's questions.

``planner estimate prefill|decode``, ``evaluate``, ``plan``, ``diagnose``, ``calibrate`` and ``timeline``
read the body of their endpoint from a JSON or YAML file and print the answer as tables, or with ``--json``
exactly as the service answered it; ``whatif`` sends a CSV or JSON file of scenarios in batches and writes
one combined file. The request goes through one ``httpx.AsyncClient``: in this process over an ASGI
transport by default, to a running service with ``--url``.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

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
    workers: Annotated[int, typer.Option(help="Worker processes (each a whole service).", min=1, max=64)] = 1,
) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs); one JSON access line per request on stderr."""
    import copy
    import os

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from planner.api.middleware import ACCESS_LOGGER
    from planner.hardware import load_catalog

    if hardware_dir is not None:
        with _domain_errors_exit():  # fail at start, not on the first request
            load_catalog(hardware_dir)
        os.environ["PLANNER_HARDWARE_DIR"] = str(hardware_dir)  # the workers read their settings from it
    # the planner's access lines replace uvicorn's; a logging config (not handlers set here) so that worker
    # processes get it too
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["formatters"]["planner_access"] = {"format": "%(message)s"}
    log_config["handlers"]["planner_access"] = {"class": "logging.StreamHandler", "formatter": "planner_access",
                                                "stream": "ext://sys.stderr"}
    log_config["loggers"][ACCESS_LOGGER] = {"handlers": ["planner_access"], "level": "INFO", "propagate": False}
    uvicorn.run("planner.api.app:create_app", factory=True, host=host, port=port, workers=workers,
                access_log=False, log_config=log_config)


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


# --- questions to the API: read a request body, send it, show the answer

JSON_MEDIA_TYPE = "application/json"
CSV_MEDIA_TYPE = "text/csv"
NDJSON_MEDIA_TYPE = "application/x-ndjson"
SVG_MEDIA_TYPE = "image/svg+xml"
#: base URL of the in-process service (any host works over the ASGI transport; this one says where it went)
LOCAL_BASE_URL = "http://planner.local"
#: seconds to wait for a remote service's answer unless ``--timeout`` says otherwise [s]
DEFAULT_TIMEOUT_S = 300.0
#: scenarios per what-if request unless ``--batch-size`` says otherwise
DEFAULT_WHATIF_BATCH_SIZE = 10_000
#: most scenarios the service takes in one what-if request
MAX_WHATIF_BATCH_SIZE = 100_000
#: what-if rows with errors listed in the summary table
SHOWN_WHATIF_ERRORS = 5
#: candidates a plan skipped that the table lists
SHOWN_SKIPPED = 5


class CliFailure(Exception):
    """A failure the command reports on stderr as one message and exit 1 (never a traceback).

    ``raw`` is the service's answer (a problem document) that ``--json`` prints on stdout.
    """

    def __init__(self, message: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


@contextmanager
def _failures_exit(json_output: bool = False) -> Iterator[None]:
    try:
        yield
    except CliFailure as exc:
        if json_output and exc.raw is not None:
            typer.echo(exc.raw)
        Console(stderr=True).print(Text("error: ", style="red") + Text(str(exc)), soft_wrap=True)
        raise typer.Exit(1) from None


def _check_url(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.startswith(("http://", "https://")):
        raise typer.BadParameter("give the service's root as http://host:port (or https://)")
    return value.rstrip("/")


JsonOutput = Annotated[
    bool,
    typer.Option("--json", help="Print the service's JSON answer exactly as it came (SI units), no tables."),
]
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="PLANNER_URL",
        callback=_check_url,
        help="Send the request to a running service (its root, e.g. http://127.0.0.1:8000) instead of "
        "answering it in this process.",
    ),
]
Timeout = Annotated[
    float,
    typer.Option("--timeout", min=0.001, help="Seconds to wait for the --url service's answer."),
]
BodyFile = Annotated[
    str,
    typer.Argument(
        metavar="FILE",
        show_default=False,
        help="The request body, JSON or YAML (by the .json/.yaml/.yml extension, else sniffed); "
        "- reads stdin.",
    ),
]


def local_app() -> Any:
    """The service answering in this process: ``planner.api.create_app()`` (settings from ``PLANNER_*``)."""
    from planner.api import create_app

    return create_app()


class ApiClient:
    """Requests to the planner API through one ``httpx.AsyncClient``, whichever service answers.

    Without ``url`` the client's transport is ``httpx.ASGITransport`` over :func:`local_app`, so the
    request goes through the same routing, validation and problem handlers as over HTTP; with ``url`` it
    is httpx's network transport. The client's coroutines run on one event loop kept for its life.
    """

    def __init__(self, url: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        if url is None:
            transport = httpx.ASGITransport(app=local_app(), raise_app_exceptions=False)
            self._client = httpx.AsyncClient(transport=transport, base_url=LOCAL_BASE_URL)
        else:
            self._client = httpx.AsyncClient(base_url=url, timeout=timeout_s)
        self._runner = asyncio.Runner()

    def post(
        self, path: str, body: bytes, *, content_type: str = JSON_MEDIA_TYPE, accept: str = JSON_MEDIA_TYPE
    ) -> httpx.Response:
        """POST ``body`` to ``path`` (``/v1/...``); a network failure is a ``CliFailure`` naming the URL."""
        headers = {"content-type": content_type, "accept": accept}
        try:
            return self._runner.run(self._client.post(path, content=body, headers=headers))
        except httpx.TimeoutException:
            raise CliFailure(
                f"no answer from {self.url}{path} within {self.timeout_s:g} s (a longer --timeout may help)"
            ) from None
        except httpx.HTTPError as exc:
            raise CliFailure(f"cannot reach {self.url}{path}: {exc or type(exc).__name__}") from None

    def close(self) -> None:
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _problem_message(response: httpx.Response) -> str:
    """What went wrong, from the problem document (title, detail, the fields) or the bare answer."""
    where = f"POST {response.request.url.path}"
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict) or not problem.get("title"):
        excerpt = response.text.strip()[:500] or "(empty)"
        return f"{where}: HTTP {response.status_code}: {excerpt}"
    title, detail = str(problem["title"]), str(problem.get("detail") or "")
    detail = detail.removeprefix(f"{title}: ")
    errors = [e for e in problem.get("errors") or [] if isinstance(e, dict)]
    header = f"{where}: {problem.get('status', response.status_code)} {title}"
    lines = [header if errors or not detail else f"{header}: {detail}"]
    if isinstance(problem.get("field"), str):
        lines.append(f"  field: {problem['field']}")
    lines += [f"  {error.get('field', '?')}: {error.get('msg', '')}" for error in errors]
    if problem.get("closest_ids"):
        lines.append("  closest: " + ", ".join(str(i) for i in problem["closest_ids"]))
    return "\n".join(lines)


def _answered(response: httpx.Response, media_type: str = JSON_MEDIA_TYPE) -> httpx.Response:
    """The response if it is a success of ``media_type``, else a :class:`CliFailure` saying why not."""
    if not response.is_success:
        raise CliFailure(_problem_message(response), raw=response.text)
    got = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if got != media_type:
        raise CliFailure(
            f"POST {response.request.url.path} answered {got or 'no content type'}, not "
            f"{media_type}: is {response.request.url.host} the planner service?"
        )
    return response


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise CliFailure(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise CliFailure(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise CliFailure(f"{path}: cannot read it: {exc.strerror or exc}") from None


def _parse_json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliFailure(
            f"{name}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


class _SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads ``5e-3`` and ``1e3`` as numbers (YAML 1.1 wants a dot in a float and
    leaves them strings, which the API's strict types refuse); nothing else changes."""


_SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _parse_yaml(text: str, name: str) -> Any:
    try:
        return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 — a SafeLoader: no object construction
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1} column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CliFailure(f"{name}: not valid YAML: {problem}{where}") from None


def _parse_document(text: str, path: str) -> Any:
    """A JSON or YAML document: by the extension, else JSON when it parses as JSON, else YAML."""
    name = "stdin" if path == "-" else path
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        document = _parse_json(text, name)
    elif suffix in (".yaml", ".yml"):
        document = _parse_yaml(text, name)
    else:
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = _parse_yaml(text, name)
    if document is None:
        raise CliFailure(f"{name}: empty")
    return document


def _json_value(value: Any) -> Any:
    """What a YAML timestamp becomes in JSON (its ISO 8601 text); anything else JSON lacks is refused."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} has no JSON form")


def _encode(document: Any, name: str) -> bytes:
    try:
        return json.dumps(document, allow_nan=False, default=_json_value, ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        reason = "NaN or infinity has no JSON form" if isinstance(exc, ValueError) else str(exc)
        raise CliFailure(f"{name}: cannot send it as JSON: {reason}") from None


def _request_body(path: str) -> bytes:
    """The body of a request file: a JSON or YAML object, encoded as JSON."""
    document = _parse_document(_read_input(path), path)
    name = "stdin" if path == "-" else path
    if not isinstance(document, dict):
        raise CliFailure(f"{name}: expected an object (the request body), got a {type(document).__name__}")
    return _encode(document, name)


Renderer = Callable[[dict[str, Any], Console], None]


def _ask(
    endpoint: str, file: str, *, url: str | None, timeout: float, json_output: bool, render: Renderer
) -> None:
    """POST the body in ``file`` to ``endpoint``; print the answer as is (``--json``) or as tables."""
    with _failures_exit(json_output):
        body = _request_body(file)
        with ApiClient(url, timeout) as api:
            response = _answered(api.post(endpoint, body))
        _show(response, json_output, render)


def _show(response: httpx.Response, json_output: bool, render: Renderer) -> None:
    if json_output:
        typer.echo(response.text)
        return
    try:
        render(response.json(), Console())
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CliFailure(
            f"the answer of POST {response.request.url.path} lacks what the table shows "
            f"({type(exc).__name__}: {exc}); --json prints it as it is"
        ) from None


# --- figures for people (the JSON stays SI)


def _ms(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s * 1e3:,.2f}"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f} %"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _sig(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _cell(value: object) -> Text:
    return Text("-" if value is None else str(value))


def _facts(title: str, rows: Iterable[tuple[str, object]]) -> Table:
    table = Table(title=Text(title), show_header=False, title_justify="left")
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value")
    for label, value in rows:
        table.add_row(_cell(label), _cell(value))
    return table


def _table(
    title: str, headers: Sequence[str], rows: Iterable[Sequence[object]], *, left: Sequence[str] = ()
) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for header in headers:
        table.add_column(Text(header), justify="left" if header in left else "right")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    return table


def _prose(console: Console, label: str, text: object, style: str = "bold") -> None:
    console.print(Text(f"{label}: ", style=style) + Text(str(text)), soft_wrap=True)


def _list(console: Console, label: str, items: Sequence[object]) -> None:
    if items:
        console.print(Text(f"{label}:", style="bold"))
        for item in items:
            console.print(Text(f"  - {item}"), soft_wrap=True)


def _layout(parallelism: dict[str, Any] | None) -> str:
    if not parallelism:
        return ""
    parts = [f"tp{parallelism.get('tp', 1)}"]
    parts += [f"{k}{parallelism[k]}" for k in ("pp", "dp", "ep") if parallelism.get(k, 1) != 1]
    return " ".join(parts)


def _deployment(dep: dict[str, Any]) -> str:
    if dep.get("mode") == "disaggregated":
        pools = [
            f"{dep[p]['workers']}× {dep[p]['gpu']} {_layout(dep[p].get('parallelism'))} {p}"
            for p in ("prefill", "decode")
        ]
        link = (dep.get("kv_transfer") or {}).get("resolved_link")
        return " + ".join(pools) + (f", KV over {link}" if link else "")
    chunking = f"chunked, budget {dep.get('token_budget')}" if dep.get("chunked_prefill") else "unchunked"
    return f"{dep.get('replicas', 1)}× {dep['gpu']} {_layout(dep.get('parallelism'))}, {chunking}"


_LATENCIES = (("TTFT", "ttft_s"), ("ITL", "itl_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_latency_s"))


def _latency_table(metrics: dict[str, Any], title: str = "Latency [ms]") -> Table:
    rows = []
    for label, key in _LATENCIES:
        stats = metrics.get(key) or {}
        rows.append([label] + [_ms(stats.get(q)) for q in ("mean", "p50", "p90", "p99")])
    return _table(title, ("metric", "mean", "p50", "p90", "p99"), rows, left=("metric",))


def _show_metrics(metrics: dict[str, Any], console: Console) -> None:
    """Latencies, throughput, utilization, the TTFT breakdown and warnings of one evaluation."""
    console.print(_latency_table(metrics))
    facts = [
        ("throughput [output tokens/s]", _num(metrics.get("throughput_output_tokens_per_s"))),
        ("per GPU [output tokens/s]", _num(metrics.get("throughput_output_tokens_per_s_per_gpu"))),
        ("per user [output tokens/s]", _num(metrics.get("output_tokens_per_s_per_user"))),
        ("requests/s", _num(metrics.get("requests_per_s"), 3)),
        ("GPUs", metrics.get("num_gpus")),
        ("mean decode batch", _num(metrics.get("mean_decode_batch"))),
        ("feasible", "yes" if metrics.get("feasible") else "no: the offered load exceeds what it serves"),
        ("limiting resource", metrics.get("limiting_resource")),
    ]
    if metrics.get("slo_attainment_fraction") is not None:
        facts.append(("SLO attainment", _pct(metrics["slo_attainment_fraction"])))
        facts.append(("goodput [requests/s]", _num(metrics.get("goodput_requests_per_s"), 3)))
    console.print(_facts("Throughput", facts))
    utilization = metrics.get("utilization") or {}
    console.print(_facts("Utilization", [(k, _pct(v)) for k, v in utilization.items()]))
    breakdown = metrics.get("ttft_breakdown_s") or {}
    console.print(_facts("TTFT breakdown [ms]", [(k, _ms(v)) for k, v in breakdown.items()]))
    _list(console, "Warnings", metrics.get("warnings") or [])


def _render_estimate(latency_key: str, top: int) -> Renderer:
    def render(answer: dict[str, Any], console: Console) -> None:
        memory = answer.get("memory") or {}
        scope = [
            f"{answer['model']} on {answer['gpu']} {_layout(answer.get('parallelism'))}",
            f"{answer.get('engine')}, weights {answer.get('weight_dtype')}, KV {answer.get('kv_dtype')}",
        ]
        if "prompt_tokens" in answer:
            scope.append(
                f"{answer['prompt_tokens']} prompt tokens × {answer.get('batch_size')}"
                + (f", {answer['cached_tokens']} cached" if answer.get("cached_tokens") else "")
            )
        else:
            scope.append(
                f"{answer.get('batch_size')} sequences × {answer.get('context_tokens')} context tokens"
            )
        console.print(
            _facts(
                "Estimate",
                [
                    ("what", "; ".join(scope)),
                    (
                        "step latency [ms]" if latency_key == "step_latency_s" else "latency [ms]",
                        _ms(answer[latency_key]),
                    ),
                    ("tokens/s", _num(answer.get("tokens_per_s"))),
                    ("bound", answer.get("bound")),
                    ("TFLOP per GPU", _num((answer.get("flops") or 0) / 1e12, 2)),
                    ("GB moved per GPU", _num((answer.get("bytes_moved") or 0) / 1e9, 2)),
                    ("fits in memory", "yes" if memory.get("fits") else "no"),
                    ("KV capacity [tokens]", _num(memory.get("kv_capacity_tokens"), 0)),
                ],
            )
        )
        ops = sorted(answer.get("breakdown") or [], key=lambda op: -op["time_s"])[:top]
        total_s = answer[latency_key] or 1.0
        rows = [
            (
                op["name"],
                _ms(op["time_s"]),
                _pct(op["time_s"] / total_s),
                op.get("bound"),
                _pct(op.get("mfu")),
                _pct(op.get("mbu")),
            )
            for op in ops
        ]
        console.print(
            _table(
                f"Top {len(rows)} operators by time",
                ("operator", "time [ms]", "share", "bound", "MFU", "MBU"),
                rows,
                left=("operator", "bound"),
            )
        )
        _list(console, "Warnings", answer.get("warnings") or [])

    return render


def _render_evaluate(answer: dict[str, Any], console: Console) -> None:
    _prose(
        console,
        "Deployment",
        f"{answer['model']} on {_deployment(answer['deployment'])} ({answer['engine']})",
    )
    _show_metrics(answer, console)


def _slo_text(slo: dict[str, Any] | None) -> str:
    if not slo:
        return "-"
    parts = []
    if slo.get("ttft_s") is not None:
        parts.append(f"TTFT p{slo['ttft_percentile']:g} ≤ {_ms(slo['ttft_s'])} ms")
    if slo.get("itl_s") is not None:
        parts.append(f"ITL p{slo['itl_percentile']:g} ≤ {_ms(slo['itl_s'])} ms")
    return ", ".join(parts) or "none"


def _plan_status(answer: dict[str, Any], console: Console) -> None:
    status = answer.get("status")
    _prose(console, "Status", status, style="bold green" if status == "optimal" else "bold red")
    _prose(console, "SLO", _slo_text(answer.get("slo")))
    if answer.get("nearest_feasible_slo"):
        _prose(console, "Nearest SLO something meets", _slo_text(answer["nearest_feasible_slo"]))


def _render_plan(top: int) -> Renderer:
    def render(answer: dict[str, Any], console: Console) -> None:
        _plan_status(answer, console)
        _prose(console, "Recommendation", answer.get("recommendation"))
        _list(console, "Reasons", answer.get("reasons") or [])
        configurations = (answer.get("configurations") or [])[:top]
        rows = [
            (
                c.get("rank"),
                c.get("label"),
                c.get("num_gpus"),
                _num(c.get("rate_per_s"), 2),
                _num(c.get("goodput_per_gpu_per_s"), 3),
                _num(c.get("throughput_output_tokens_per_s_per_gpu")),
                _num(c.get("output_tokens_per_s_per_user")),
                _num(c.get("cost_per_million_output_tokens_usd"), 3),
                c.get("binding_constraint"),
                "yes" if c.get("verified") else "no",
            )
            for c in configurations
        ]
        headers = (
            "rank",
            "configuration",
            "GPUs",
            "requests/s",
            "goodput/GPU [req/s]",
            "tokens/s/GPU",
            "tokens/s/user",
            "$/M tokens",
            "binds",
            "verified",
        )
        total = len(answer.get("configurations") or [])
        console.print(
            _table(
                f"Top {len(rows)} of {total} configurations",
                headers,
                rows,
                left=("configuration", "binds", "verified"),
            )
        )
        _list(console, "Binding constraints", answer.get("binding_constraints") or [])
        skipped = answer.get("skipped") or []
        more = (
            [f"... {len(skipped) - SHOWN_SKIPPED} more (--json lists them)"]
            if len(skipped) > SHOWN_SKIPPED
            else []
        )
        _list(console, "Skipped", skipped[:SHOWN_SKIPPED] + more)

    return render


def _render_plan_chunked() -> Renderer:
    def render(answer: dict[str, Any], console: Console) -> None:
        _plan_status(answer, console)
        _prose(console, "Recommendation", answer.get("message"))
        console.print(
            _facts(
                "Chosen",
                [
                    (
                        "deployment",
                        f"{answer.get('replicas')}× {answer.get('gpu')} {_layout(answer.get('parallelism'))}",
                    ),
                    ("token_budget", answer.get("token_budget")),
                    ("max_batch_size", answer.get("max_batch_size")),
                    ("requests/s", _num(answer.get("rate_per_s"), 3)),
                    ("binding constraint", answer.get("binding_constraint")),
                ],
            )
        )
        chosen = (answer.get("token_budget"), answer.get("max_batch_size"))
        rows = [
            (
                "→" if (p["token_budget"], p.get("max_batch_size")) == chosen else "",
                p["token_budget"],
                p.get("max_batch_size"),
                _num(p["max_rate_per_s"], 2),
                _ms(p.get("ttft_s")),
                _ms(p.get("itl_s")),
                _pct(p.get("chunk_overhead_fraction")),
                p.get("binding_constraint"),
            )
            for p in sorted(answer.get("curve") or [], key=lambda p: p["token_budget"])
        ]
        headers = (
            "",
            "token_budget",
            "max_batch_size",
            "max requests/s",
            "TTFT [ms]",
            "ITL [ms]",
            "chunk overhead",
            "binds",
        )
        console.print(_table("Budget → the load it serves within the SLO", headers, rows, left=("", "binds")))
        if answer.get("metrics"):
            _show_metrics(answer["metrics"], console)

    return render


def _render_plan_disaggregated(answer: dict[str, Any], console: Console) -> None:
    _plan_status(answer, console)
    _prose(console, "Recommendation", answer.get("message"))
    rows = [
        (
            name,
            pool["gpu"],
            _layout(pool.get("parallelism")),
            pool.get("workers"),
            pool.get("max_batch_size"),
            _num(pool.get("capacity_per_s"), 2),
            _pct(pool.get("utilization")),
        )
        for name in ("prefill", "decode")
        if (pool := answer.get(name))
    ]
    console.print(
        _table(
            "Pools",
            ("pool", "GPU", "parallelism", "workers", "max batch", "capacity [req/s]", "utilization"),
            rows,
            left=("pool", "GPU", "parallelism"),
        )
    )
    kv = answer.get("kv_transfer") or {}
    console.print(
        _facts(
            "Totals",
            [
                ("GPUs", answer.get("num_gpus")),
                ("requests/s", _num(answer.get("rate_per_s"), 3)),
                ("goodput per GPU [req/s]", _num(answer.get("goodput_per_gpu_per_s"), 3)),
                ("cost [$/h]", _num(answer.get("cost_per_hour_usd"), 2)),
                ("limiting pool", answer.get("limiting_pool")),
                (
                    "KV transfer",
                    f"{_num(kv.get('bytes_per_s', 0) / 1e9, 2)} GB/s over {kv.get('link')}, "
                    f"{_pct(kv.get('utilization'))} of the link"
                    if kv
                    else "-",
                ),
            ],
        )
    )
    if answer.get("metrics"):
        _show_metrics(answer["metrics"], console)


def _render_diagnose(answer: dict[str, Any], console: Console) -> None:
    _prose(console, "Slowest phase", answer.get("slowest_phase"), style="bold red")
    _prose(console, "Summary", answer.get("summary"))
    rows = [
        (f.get("phase"), f.get("severity"), f.get("summary"), f.get("next_step"))
        for f in answer.get("findings") or []
    ]
    console.print(
        _table(
            "Findings",
            ("phase", "severity", "summary", "next step"),
            rows,
            left=("phase", "severity", "summary", "next step"),
        )
    )
    _list(console, "Measurements from", answer.get("measurement_sources") or [])
    _list(console, "Notes", answer.get("notes") or [])


def _render_calibrate(answer: dict[str, Any], console: Console) -> None:
    _prose(console, "Status", answer.get("status"))
    _prose(console, "Fit", answer.get("message"))
    rows = [
        (
            p["name"],
            p.get("unit"),
            _sig(p.get("initial")),
            _sig(p.get("value")),
            _sig(p.get("standard_error")),
            "yes" if p.get("pinned_down") else "no",
            p.get("reason"),
        )
        for p in answer.get("parameters") or []
    ]
    console.print(
        _table(
            "Profile",
            ("parameter", "unit", "catalog", "fitted", "± 1 s.e.", "pinned down", "why"),
            rows,
            left=("parameter", "unit", "pinned down", "why"),
        )
    )
    loose = answer.get("could_not_pin_down") or []
    _prose(
        console, "Not pinned down", ", ".join(loose) if loose else "none: the data determine every parameter"
    )
    _prose(
        console,
        "Median |error|",
        f"{_pct(answer.get('median_abs_error_before_fraction'))} before, "
        f"{_pct(answer.get('median_abs_error_after_fraction'))} after",
    )
    console.print(
        Text("Pass the answer's calibration object as `calibration` to any other request.", style="dim"),
        soft_wrap=True,
    )
    _list(console, "Assumptions", answer.get("assumptions") or [])


def _render_timeline(answer: dict[str, Any], console: Console) -> None:
    rows = [
        (
            t.get("design"),
            _deployment(t["deployment"]),
            t.get("num_iterations"),
            _ms(t.get("ttft_s")),
            _ms(t.get("max_stall_s")),
            _ms(t.get("max_gap_s")),
            _ms(t.get("decode_only_iteration_s")),
            _ms(t.get("end_s")),
        )
        for t in answer.get("timelines") or []
    ]
    console.print(
        _table(
            f"Timelines of {answer.get('model')}",
            (
                "design",
                "deployment",
                "iterations",
                "TTFT [ms]",
                "max stall [ms]",
                "max gap [ms]",
                "decode-only step [ms]",
                "end [ms]",
            ),
            rows,
            left=("design", "deployment"),
        )
    )
    _list(console, "Notes", answer.get("notes") or [])


# --- the commands

estimate_app = typer.Typer(
    help="The cost of one pass: `planner estimate prefill FILE` or `planner estimate decode FILE`.",
    no_args_is_help=True,
)
app.add_typer(estimate_app, name="estimate")

TopN = Annotated[int, typer.Option("--top", min=1, help="Rows of the ranked table to show.")]


@estimate_app.command("prefill")
def estimate_prefill(
    file: BodyFile,
    top: TopN = 5,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """One prefill pass (POST /v1/estimate/prefill).

    FILE is that endpoint's body (model, gpu, parallelism, prompt_tokens, ...). Shows the latency, the
    bound and the slowest operators."""
    _ask(
        "/v1/estimate/prefill",
        file,
        url=url,
        timeout=timeout,
        json_output=json_output,
        render=_render_estimate("latency_s", top),
    )


@estimate_app.command("decode")
def estimate_decode(
    file: BodyFile,
    top: TopN = 5,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """One decode step (POST /v1/estimate/decode).

    FILE is that endpoint's body (model, gpu, parallelism, batch_size, context_tokens, ...). Shows the step
    latency, the bound and the slowest operators."""
    _ask(
        "/v1/estimate/decode",
        file,
        url=url,
        timeout=timeout,
        json_output=json_output,
        render=_render_estimate("step_latency_s", top),
    )


@app.command()
def evaluate(
    file: BodyFile,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """A deployment under a workload (POST /v1/evaluate).

    FILE is that endpoint's body (model, deployment, workload, slo). Shows TTFT/ITL/TPOT/E2E in ms,
    throughput, utilization and the TTFT breakdown."""
    _ask("/v1/evaluate", file, url=url, timeout=timeout, json_output=json_output, render=_render_evaluate)


class PlanMode(StrEnum):
    all = "all"
    chunked = "chunked"
    disaggregated = "disaggregated"


_PLAN_ENDPOINTS = {
    PlanMode.all: "/v1/plan",
    PlanMode.chunked: "/v1/plan/chunked",
    PlanMode.disaggregated: "/v1/plan/disaggregated",
}


@app.command()
def plan(
    file: BodyFile,
    mode: Annotated[
        PlanMode,
        typer.Option(
            "--mode",
            help="all: POST /v1/plan (mode, GPU and parallelism); chunked: /v1/plan/chunked (the chunk "
            "budget); disaggregated: /v1/plan/disaggregated (the pool split).",
        ),
    ] = PlanMode.all,
    top: TopN = 5,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """What serves the most within an SLO (POST /v1/plan, /v1/plan/chunked or /v1/plan/disaggregated).

    FILE is the body of the --mode's endpoint. Shows the status, the recommendation and the top
    configurations (or budgets, or the pools)."""
    render = {
        PlanMode.all: _render_plan(top),
        PlanMode.chunked: _render_plan_chunked(),
        PlanMode.disaggregated: _render_plan_disaggregated,
    }[mode]
    _ask(_PLAN_ENDPOINTS[mode], file, url=url, timeout=timeout, json_output=json_output, render=render)


@app.command()
def diagnose(
    file: BodyFile,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Which phase is slow (POST /v1/diagnose).

    FILE is that endpoint's body (deployment, workload, measurements). Shows the slowest phase and each
    finding with its next step."""
    _ask("/v1/diagnose", file, url=url, timeout=timeout, json_output=json_output, render=_render_diagnose)


@app.command()
def calibrate(
    file: BodyFile,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Fit a calibration profile to measurements (POST /v1/calibrate).

    FILE is that endpoint's body (deployment, measurements and/or benchmarks). Shows the fitted parameters
    and which ones the data could not pin down."""
    _ask("/v1/calibrate", file, url=url, timeout=timeout, json_output=json_output, render=_render_calibrate)


@app.command()
def timeline(
    file: BodyFile,
    svg: Annotated[
        Path | None,
        typer.Option(
            "--svg",
            metavar="OUT.svg",
            dir_okay=False,
            help="Also ask for the drawing (Accept: image/svg+xml) and write it to this file.",
        ),
    ] = None,
    json_output: JsonOutput = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """A small scenario iteration by iteration (POST /v1/timeline).

    FILE is that endpoint's body (deployment, compare_with, scenario). Shows each design's TTFT, stalls
    and gaps in ms; --svg also writes the drawing."""
    with _failures_exit(json_output):
        body = _request_body(file)
        with ApiClient(url, timeout) as api:
            if svg is not None:
                drawing = _answered(api.post("/v1/timeline", body, accept=SVG_MEDIA_TYPE), SVG_MEDIA_TYPE)
                try:
                    svg.write_bytes(drawing.content)
                except OSError as exc:
                    raise CliFailure(f"{svg}: cannot write it: {exc.strerror or exc}") from None
            response = _answered(api.post("/v1/timeline", body))
        _show(response, json_output, _render_timeline)
        if svg is not None and not json_output:
            Console().print(
                Text(f"SVG drawing written to {svg} ({len(drawing.content):,} bytes)"), soft_wrap=True
            )


# --- what-if: many evaluate bodies, in batches

_ROW_FORMATS = {".csv": "csv", ".json": "json", ".ndjson": "ndjson", ".jsonl": "ndjson"}
_ACCEPT = {"csv": CSV_MEDIA_TYPE, "json": JSON_MEDIA_TYPE, "ndjson": NDJSON_MEDIA_TYPE}


class RowFormat(StrEnum):
    csv = "csv"
    json = "json"
    ndjson = "ndjson"


@dataclass(frozen=True)
class Scenarios:
    """What-if input: CSV rows under one header of dotted evaluate fields, or evaluate bodies (JSON)."""

    header: list[str] | None
    rows: list[Any]

    @property
    def kind(self) -> str:
        return "csv" if self.header is not None else "json"

    def body(self, start: int, stop: int) -> tuple[bytes, str]:
        """Rows ``start:stop`` as one request body and its content type."""
        if self.header is None:
            return _encode(self.rows[start:stop], "the scenarios"), JSON_MEDIA_TYPE
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.header)
        writer.writerows(self.rows[start:stop])
        return out.getvalue().encode(), CSV_MEDIA_TYPE


def _read_scenarios(path: str) -> Scenarios:
    """The scenarios of a .csv file (blank lines skipped), a .json array, .ndjson lines or a .yaml list;
    stdin or another extension is sniffed (``[`` opens JSON, ``{`` NDJSON, else CSV)."""
    text = _read_input(path)
    name = "stdin" if path == "-" else path
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".json", ".ndjson", ".jsonl", ".yaml", ".yml"):
        start = text.lstrip()[:1]
        suffix = {"[": ".json", "{": ".ndjson"}.get(start, ".csv")
    if suffix == ".csv":
        try:
            records = [r for r in csv.reader(io.StringIO(text, newline="")) if r]
        except csv.Error as exc:
            raise CliFailure(f"{name}: not valid CSV: {exc}") from None
        if not records:
            raise CliFailure(f"{name}: empty: expected a header row of dotted evaluate fields")
        return Scenarios(header=records[0], rows=records[1:])
    if suffix in (".ndjson", ".jsonl"):
        rows = [
            _parse_json(line, f"{name} line {k + 1}")
            for k, line in enumerate(text.splitlines())
            if line.strip()
        ]
    else:
        rows = _parse_json(text, name) if suffix == ".json" else _parse_yaml(text, name)
        if not isinstance(rows, list):
            raise CliFailure(f"{name}: expected an array of evaluate request bodies")
    return Scenarios(header=None, rows=rows)


def _offset_row(record: dict[str, Any], offset: int) -> dict[str, Any]:
    if isinstance(record.get("row"), int):
        record["row"] += offset
    return record


class WhatifResults:
    """The answers of every batch, with row numbers counted over the whole input."""

    def __init__(self, row_format: str) -> None:
        self.format = row_format
        self.num_ok = 0
        self.num_errors = 0
        self.errors: list[tuple[int | str, str]] = []  # (row, what) of the first few rows with errors
        self._columns: list[tuple[str, int]] = []  # CSV columns, a repeated name told apart by its occurrence
        self._records: list[Any] = []

    @property
    def num_scenarios(self) -> int:
        return self.num_ok + self.num_errors

    def add(self, response: httpx.Response, offset: int) -> int:
        """One batch's answer, whose rows start at ``offset`` in the input; returns the rows it had."""
        before = len(self._records)
        if self.format == "csv":
            self._add_csv(response.text, offset)
            return len(self._records) - before
        if self.format == "json":
            records = response.json()["results"]
        else:
            records = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        for record in records:
            self._count(
                record.get("status"),
                _offset_row(record, offset).get("row"),
                lambda r=record: _row_problem(r.get("error")),
            )
            self._records.append(record)
        return len(self._records) - before

    def _count(self, status: object, row: object, what: Callable[[], str]) -> None:
        if status == "ok":
            self.num_ok += 1
            return
        self.num_errors += 1
        if len(self.errors) < SHOWN_WHATIF_ERRORS:
            self.errors.append((row if isinstance(row, int | str) else "?", what()))

    def _add_csv(self, text: str, offset: int) -> None:
        records = list(csv.reader(io.StringIO(text, newline="")))
        if not records:
            raise CliFailure("the service answered an empty CSV")
        header = records[0]
        seen: dict[str, int] = {}
        columns = []
        for name in header:
            columns.append((name, seen.get(name, 0)))
            seen[name] = seen.get(name, 0) + 1
        at = [i for i, name in enumerate(header[:-1]) if name == "row" and header[i + 1] == "status"]
        if not at:
            raise CliFailure("the service's CSV has no row,status columns")
        row_i = at[-1]
        error_i = row_i + 2 if row_i + 2 < len(header) and header[row_i + 2] == "error" else None
        self._merge_columns(columns)
        for values in records[1:]:
            if not values:
                continue
            values = values + [""] * (len(header) - len(values))
            try:
                values[row_i] = str(int(values[row_i]) + offset)
            except ValueError:
                pass
            self._count(
                values[row_i + 1], values[row_i], lambda v=values: v[error_i] if error_i is not None else ""
            )
            self._records.append(dict(zip(columns, values, strict=False)))

    def _merge_columns(self, columns: list[tuple[str, int]]) -> None:
        """Columns a batch adds go after the column they follow in that batch (the union keeps one header)."""
        known = set(self._columns)
        for k, column in enumerate(columns):
            if column in known:
                continue
            where = self._columns.index(columns[k - 1]) + 1 if k else 0
            self._columns.insert(where, column)
            known.add(column)

    def write(self, out: IO[str]) -> None:
        if self.format == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow([name for name, _ in self._columns])
            for record in self._records:
                writer.writerow([record.get(column, "") for column in self._columns])
        elif self.format == "json":
            json.dump(
                {
                    "num_scenarios": self.num_scenarios,
                    "num_ok": self.num_ok,
                    "num_errors": self.num_errors,
                    "results": self._records,
                },
                out,
                ensure_ascii=False,
            )
            out.write("\n")
        else:
            for record in self._records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")


def _row_problem(error: object) -> str:
    """One row's problem as ``title: detail`` (the detail alone when it already starts with the title)."""
    if not isinstance(error, dict):
        return str(error or "")
    title, detail = str(error.get("title") or ""), str(error.get("detail") or "")
    detail = detail.removeprefix(f"{title}: ")
    return f"{title}: {detail}" if title and detail and detail != title else detail or title


def _output_format(output: str, chosen: RowFormat | None, scenarios: Scenarios) -> str:
    if chosen is not None:
        return chosen.value
    return _ROW_FORMATS.get(Path(output).suffix.lower(), scenarios.kind) if output != "-" else scenarios.kind


@contextmanager
def _progress_bar(show: bool, total: int) -> Iterator[Callable[[int], None]]:
    """``advance(rows)`` moves a bar on stderr (when ``show``) over ``total`` rows."""
    if not show:
        yield lambda rows: None
        return
    columns = (
        TextColumn("what-if"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("what-if", total=total)
        yield lambda rows: progress.advance(task, rows)


def _write_rows(results: WhatifResults, output: str) -> None:
    if output == "-":
        results.write(sys.stdout)
        return
    try:
        with open(output, "w", encoding="utf-8", newline="") as out:
            results.write(out)
    except OSError as exc:
        raise CliFailure(f"{output}: cannot write it: {exc.strerror or exc}") from None


@app.command()
def whatif(
    input_file: Annotated[
        str,
        typer.Argument(
            metavar="IN",
            show_default=False,
            help="Scenarios: a .csv with a header of dotted evaluate fields (model,deployment.gpu,"
            "workload.arrival.rate_per_s,...) and one scenario per row, or a .json array (.ndjson "
            "lines, .yaml list) of POST /v1/evaluate bodies; - reads stdin.",
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="OUT",
            show_default=False,
            help="Where the answers go: .csv (the input columns, then row,status,error and the evaluate "
            "figures), .json (one {num_scenarios, num_ok, num_errors, results}) or .ndjson; - is stdout.",
        ),
    ],
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, max=MAX_WHATIF_BATCH_SIZE, help="Scenarios per request.")
    ] = DEFAULT_WHATIF_BATCH_SIZE,
    row_format: Annotated[
        RowFormat | None,
        typer.Option(
            "--format", help="Format of OUT when its extension does not say (default: the input's)."
        ),
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            show_default=False,
            help="Show a progress bar on stderr (default: when there is more than one batch and stderr is a "
            "terminal; never with --json).",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print a JSON summary {num_scenarios, num_ok, num_errors, num_batches, output}."
        ),
    ] = False,
    url: Url = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Evaluate many scenarios (POST /v1/whatif) and write one combined file.

    IN is sent in batches of --batch-size rows; OUT has one header and row numbers counted from 0 over the
    whole input. A bad row answers its own error (status error) and the run goes on; a batch the service
    refuses stops it with exit 1 and writes nothing."""
    with _failures_exit(json_output):
        scenarios = _read_scenarios(input_file)
        total = len(scenarios.rows)
        if total == 0:
            raise CliFailure(f"{'stdin' if input_file == '-' else input_file}: no scenarios")
        if output != "-" and not Path(output).resolve().parent.is_dir():
            raise CliFailure(f"{output}: its directory does not exist")
        results = WhatifResults(_output_format(output, row_format, scenarios))
        starts = range(0, total, batch_size)
        show = not json_output and (
            progress if progress is not None else len(starts) > 1 and sys.stderr.isatty()
        )
        with ApiClient(url, timeout) as api, _progress_bar(show, total) as advance:
            for k, start in enumerate(starts):
                stop = min(start + batch_size, total)
                body, content_type = scenarios.body(start, stop)
                response = api.post(
                    "/v1/whatif", body, content_type=content_type, accept=_ACCEPT[results.format]
                )
                where = f"batch {k + 1} of {len(starts)} (rows {start} to {stop - 1})"
                try:
                    answered = results.add(_answered(response, _ACCEPT[results.format]), start)
                except CliFailure as exc:
                    hint = "; a smaller --batch-size may help" if response.status_code == 413 else ""
                    raise CliFailure(
                        f"{where}: {exc}{hint}",
                        raw=exc.raw,
                    ) from None
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise CliFailure(
                        f"{where}: the service's answer does not follow the what-if contract "
                        f"({type(exc).__name__}: {exc})"
                    ) from None
                if answered != stop - start:
                    raise CliFailure(
                        f"{where}: sent {stop - start} scenarios, the service answered {answered}"
                    )
                advance(stop - start)
        _write_rows(results, output)
        where = "stdout" if output == "-" else output
        if json_output:
            typer.echo(
                json.dumps(
                    {
                        "num_scenarios": results.num_scenarios,
                        "num_ok": results.num_ok,
                        "num_errors": results.num_errors,
                        "num_batches": len(starts),
                        "output": where,
                    }
                )
            )
            return
        console = Console(stderr=output == "-")
        console.print(
            _facts(
                "What-if",
                [
                    ("scenarios", results.num_scenarios),
                    ("ok", results.num_ok),
                    ("errors", results.num_errors),
                    ("batches", len(starts)),
                    ("written to", where if output == "-" else str(Path(output).resolve())),
                ],
            )
        )
        if results.errors:
            more = results.num_errors - len(results.errors)
            console.print(
                _table(
                    "Rows with errors" + (f" (first {len(results.errors)}, {more} more)" if more else ""),
                    ("row", "error"),
                    results.errors,
                    left=("error",),
                )
            )
