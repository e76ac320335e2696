"""An SVG drawing of a ``POST /v1/timeline`` response, built with ``xml.etree.ElementTree``.

One section per timeline, stacked vertically on a shared time axis so the designs compare at a glance:

- aggregated: an ``iterations`` track (each iteration a rectangle; a grey band for its decodes, the rest
  coloured by the request whose prompt chunk it computes), one lane per running stream (a tick per token,
  the wait beyond a decode-only iteration shaded red) and one lane per arriving request (arrival, prefill
  span, first and later tokens);
- disaggregated: a ``prefill pool`` track, a ``KV link`` track and a ``decode pool`` track, then the same
  stream and request lanes.

Ticks closer than ``TICK_SPACING_PX`` are drawn once and stall shades are binned at that width, so a long
timeline of many streams stays a document of bounded size (lanes × width), not one shape per token.

The document is self-contained: no scripts, links, external fonts or images; hovering a shape shows its
figures (``<title>`` children). Labels read in milliseconds for people; the JSON stays in seconds.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
from numpy.typing import NDArray

from planner.api.timeline_schemas import IterationOut, TimelineOut, TimelineResponse
from planner.units import SECONDS_PER_MS

SVG_NS = "http://www.w3.org/2000/svg"
SVG_MEDIA_TYPE = "image/svg+xml"

WIDTH = 1100
LEFT = 200  # the label column [px]
RIGHT = 24
TOP = 52  # title and legend [px]
TRACK_H = 26
LANE_H = 14
LANE_GAP = 4
SECTION_TITLE_H = 26
AXIS_H = 34
SECTION_GAP = 18
#: a stream's gap between tokens counts as a stall, shaded, beyond this multiple of a decode-only iteration
STALL_FACTOR = 1.25
#: token ticks closer than this are drawn once, and stall shades are drawn per bin of this width [px]: the
#: size of the document stays bounded by lanes × width, however many iterations the timeline holds
TICK_SPACING_PX = 2.0

DECODE_FILL = "#9e9e9e"
DECODE_FILL_ALT = "#bdbdbd"
STALL_FILL = "#d62728"
AXIS_COLOUR = "#444444"
#: per request, cycling (Okabe and Ito's colour-blind-safe palette, without its red)
REQUEST_FILLS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#f0e442", "#000000")
DESIGN_NAMES = {
    "chunked": "aggregated, chunked prefill",
    "unchunked": "aggregated, chunked prefill off",
    "disaggregated": "disaggregated",
}

ET.register_namespace("", SVG_NS)


def _tag(name: str) -> str:
    return f"{{{SVG_NS}}}{name}"


def _el(parent: ET.Element, name: str, text: str | None = None, **attrs: object) -> ET.Element:
    """A child element; attribute names use ``_`` for ``-`` (``font_size`` is ``font-size``)."""
    node = ET.SubElement(
        parent, _tag(name), {k.rstrip("_").replace("_", "-"): _fmt(v) for k, v in attrs.items()}
    )
    if text is not None:
        node.text = text
    return node


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def _ms(seconds: float) -> str:
    ms = seconds / SECONDS_PER_MS
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"


def request_fill(request: int) -> str:
    return REQUEST_FILLS[request % len(REQUEST_FILLS)]


def _tick_step_s(span_s: float) -> float:
    """A 1-2-5 step giving five to ten ticks over ``span_s`` [s]."""
    raw = span_s / 8.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1.0, 2.0, 5.0, 10.0) if m * magnitude >= raw)


class _Canvas:
    """The shared time scale: x pixel of a time [s]."""

    def __init__(self, end_s: float) -> None:
        self.end_s = end_s if end_s > 0 else 1.0
        self.plot_w = WIDTH - LEFT - RIGHT

    def x(self, t_s: float) -> float:
        return LEFT + self.plot_w * min(max(t_s, 0.0), self.end_s) / self.end_s

    def xs(self, t_s: NDArray[np.float64]) -> NDArray[np.float64]:
        return LEFT + self.plot_w * np.clip(t_s, 0.0, self.end_s) / self.end_s

    def w(self, start_s: float, end_s: float) -> float:
        return max(self.x(end_s) - self.x(start_s), 0.6)  # keep very short shapes visible


def _label(svg: ET.Element, y: float, text: str, height: float) -> None:
    _el(svg, "text", text, x=LEFT - 8, y=y + height / 2 + 4, text_anchor="end", class_="lane-label")


def _lane_background(svg: ET.Element, y: float, height: float) -> None:
    _el(svg, "rect", x=LEFT, y=y, width=WIDTH - LEFT - RIGHT, height=height, fill="#f7f7f7")


def _rect(
    parent: ET.Element,
    canvas: _Canvas,
    start_s: float,
    end_s: float,
    y: float,
    height: float,
    fill: str,
    tip: str,
    **attrs: object,
) -> None:
    rect = _el(
        parent,
        "rect",
        x=canvas.x(start_s),
        y=y,
        width=canvas.w(start_s, end_s),
        height=height,
        fill=fill,
        **attrs,
    )
    _el(rect, "title", tip)


def _iteration_tip(it: IterationOut) -> str:
    parts = [f"iteration {it.index} ({it.kind}): {_ms(it.duration_s)}, {it.decode_tokens} decodes"]
    parts += [f"{c.tokens} prompt tokens of request {c.request} after {c.cached_tokens}" for c in it.chunks]
    return "; ".join(parts)


def _iterations_track(svg: ET.Element, canvas: _Canvas, iterations: list[IterationOut], y: float) -> None:
    """Each iteration a rectangle: a grey band for its decodes, the rest split among its chunks by tokens."""
    for it in iterations:
        tip = _iteration_tip(it)
        if not it.chunks:
            fill = DECODE_FILL if it.index % 2 == 0 else DECODE_FILL_ALT
            _rect(
                svg, canvas, it.start_s, it.end_s, y, TRACK_H, fill, tip, stroke="#ffffff", stroke_width=0.5
            )
            continue
        top, height = y, float(TRACK_H)
        if it.decode_tokens:
            band = TRACK_H / 3.0
            _rect(svg, canvas, it.start_s, it.end_s, top, band, DECODE_FILL, tip)
            top, height = top + band, height - band
        total = sum(c.tokens for c in it.chunks)
        for chunk in it.chunks:
            share = height * chunk.tokens / total
            _rect(
                svg,
                canvas,
                it.start_s,
                it.end_s,
                top,
                share,
                request_fill(chunk.request),
                tip,
                stroke="#ffffff",
                stroke_width=0.5,
            )
            top += share


def _ticks(canvas: _Canvas, times_s: NDArray[np.float64], y: float) -> str:
    """Path data of a short vertical tick per time, at most one per ``TICK_SPACING_PX``."""
    if times_s.size == 0:
        return ""
    xs = np.unique(np.round(canvas.xs(times_s) / TICK_SPACING_PX)) * TICK_SPACING_PX
    return " ".join(f"M{x:.1f} {y + 2.0:.1f}v{LANE_H - 4}" for x in xs)


def _stall_runs(
    canvas: _Canvas, token_times_s: NDArray[np.float64], pace_s: float
) -> list[tuple[float, float, float]]:
    """``(x, width, level)`` of the stretches a stream waits beyond its undisturbed pace.

    Each gap longer than ``STALL_FACTOR`` decode-only iterations contributes its excess over one. The
    plot is cut into bins of ``TICK_SPACING_PX``; a bin's level is the share of it covered by such waits,
    rounded up to a quarter (any wait stays visible), and consecutive bins of one level form one run.
    """
    previous = np.concatenate([[0.0], token_times_s[:-1]])
    long = token_times_s - previous > STALL_FACTOR * pace_s
    if not np.any(long):
        return []
    x0, x1 = canvas.xs(previous[long] + pace_s), canvas.xs(token_times_s[long])
    # the waited length left of x, piecewise linear through the waits' ends (they are disjoint and ordered)
    knots = np.column_stack([x0, x1]).ravel()
    waited = np.cumsum(x1 - x0)
    cumulative = np.column_stack([waited - (x1 - x0), waited]).ravel()
    edges = np.minimum(
        LEFT + np.arange(math.ceil(canvas.plot_w / TICK_SPACING_PX) + 1) * TICK_SPACING_PX,
        LEFT + canvas.plot_w,
    )
    cover = np.diff(np.interp(edges, knots, cumulative)) / np.maximum(np.diff(edges), 1e-9)
    level = np.ceil(np.clip(cover, 0.0, 1.0) * 4.0 - 1e-6) / 4.0
    change = np.flatnonzero(np.diff(level)) + 1
    first, stop = np.concatenate([[0], change]), np.concatenate([change, [level.size]])
    return [
        (float(edges[a]), float(edges[b] - edges[a]), float(level[a]))
        for a, b in zip(first, stop, strict=True)
        if level[a] > 0
    ]


def _stream_lane(
    svg: ET.Element,
    canvas: _Canvas,
    tl: TimelineOut,
    stream: int,
    token_times_s: NDArray[np.float64],
    y: float,
) -> None:
    """A tick per token; the waits beyond a decode-only iteration shaded red, darker where denser."""
    pace = tl.decode_only_iteration_s
    runs = _stall_runs(canvas, token_times_s, pace)
    if runs:
        s = tl.streams[stream]
        group = _el(svg, "g", fill=STALL_FILL, class_="stall")
        _el(
            group,
            "title",
            f"stream {stream}: longest gap {_ms(s.max_gap_s)} between tokens, {_ms(s.stall_s)} "
            f"more than a decode-only iteration ({_ms(pace)})",
        )
        for x, width, level in runs:
            _el(group, "rect", x=x, y=y, width=width, height=LANE_H, fill_opacity=0.4 * level)
    ticks = _ticks(canvas, token_times_s, y)
    if ticks:
        _el(svg, "path", d=ticks, stroke=AXIS_COLOUR, stroke_width=1, fill="none")


def _request_lane(svg: ET.Element, canvas: _Canvas, tl: TimelineOut, request: int, y: float) -> None:
    req = tl.requests[request]
    fill = request_fill(request)
    mid = y + LANE_H / 2.0
    _el(
        svg,
        "line",
        x1=canvas.x(req.arrival_s),
        y1=mid,
        x2=canvas.x(req.first_token_s),
        y2=mid,
        stroke=fill,
        stroke_width=1,
        stroke_dasharray="3 2",
    )
    if tl.design == "disaggregated":
        spans = [(p.start_s, p.end_s) for p in tl.prefill_passes if p.request == request]
    else:
        spans = [
            (it.start_s, it.end_s) for it in tl.iterations if any(c.request == request for c in it.chunks)
        ]
    for start, end in spans:
        _rect(
            svg,
            canvas,
            start,
            end,
            y + 2.0,
            LANE_H - 4.0,
            fill,
            f"request {request} prefill",
            fill_opacity=0.45,
        )
    x_arrival = canvas.x(req.arrival_s)
    arrow = _el(svg, "path", d=f"M{_fmt(x_arrival)} {_fmt(y)}l4 {LANE_H / 2}l-4 {LANE_H / 2}z", fill=fill)
    _el(arrow, "title", f"request {request} arrives at {_ms(req.arrival_s)}")
    first = _el(svg, "circle", cx=canvas.x(req.first_token_s), cy=mid, r=3.5, fill=fill, stroke=AXIS_COLOUR)
    _el(first, "title", f"request {request}: first token at {_ms(req.first_token_s)}, TTFT {_ms(req.ttft_s)}")
    ticks = _ticks(canvas, np.asarray(req.token_times_s[1:], dtype=np.float64), y)
    if ticks:
        _el(svg, "path", d=ticks, stroke=fill, stroke_width=1.5, fill="none")


def _axis(svg: ET.Element, canvas: _Canvas, y: float) -> None:
    _el(svg, "line", x1=LEFT, y1=y, x2=WIDTH - RIGHT, y2=y, stroke=AXIS_COLOUR, stroke_width=1)
    step = _tick_step_s(canvas.end_s)
    for k in range(int(canvas.end_s / step + 1e-9) + 1):
        t = k * step
        x = canvas.x(t)
        _el(svg, "line", x1=x, y1=y, x2=x, y2=y + 5, stroke=AXIS_COLOUR, stroke_width=1)
        _el(svg, "text", f"{t / SECONDS_PER_MS:g} ms", x=x, y=y + 17, text_anchor="middle", class_="tick")
    _el(svg, "text", "time since the start [ms]", x=WIDTH - RIGHT, y=y + 30, text_anchor="end", class_="tick")


def _section_title(tl: TimelineOut) -> str:
    dep = tl.deployment
    if dep.mode == "aggregated":
        where = (
            f"{dep.gpu} tp={dep.parallelism.tp}, token budget {dep.token_budget}, "
            f"max batch {dep.max_batch_size}"
        )
    else:
        where = (
            f"prefill {dep.prefill.gpu} tp={dep.prefill.parallelism.tp} ×{dep.prefill.workers}, "
            f"decode {dep.decode.gpu} tp={dep.decode.parallelism.tp}, KV over {dep.kv_transfer.resolved_link}"
        )
    return (
        f"{DESIGN_NAMES[tl.design]} ({where}): TTFT {_ms(tl.ttft_s)}, "
        f"longest stream gap {_ms(tl.max_gap_s)}, stall {_ms(tl.max_stall_s)}"
    )


def _section(svg: ET.Element, canvas: _Canvas, tl: TimelineOut, y: float) -> float:
    """Draw one timeline from ``y`` down; returns the y below it."""
    group = _el(svg, "g", class_="timeline", id=f"timeline-{tl.design}-{int(y)}")
    _el(group, "text", _section_title(tl), x=12, y=y + 16, class_="section-title")
    y += SECTION_TITLE_H
    tracks: list[tuple[str, float]] = []
    if tl.design == "disaggregated":
        tracks = [("prefill pool", TRACK_H), ("KV link", TRACK_H), ("decode pool", TRACK_H)]
    else:
        tracks = [("iterations", TRACK_H)]
    for name, height in tracks:
        _label(group, y, name, height)
        _lane_background(group, y, height)
        if name == "prefill pool":
            for p in tl.prefill_passes:
                _rect(
                    group,
                    canvas,
                    p.start_s,
                    p.end_s,
                    y,
                    height,
                    request_fill(p.request),
                    f"request {p.request} prefill on worker {p.worker}: {_ms(p.duration_s)}, "
                    f"{p.prompt_tokens} tokens",
                )
        elif name == "KV link":
            for kv in tl.kv_transfers:
                _rect(
                    group,
                    canvas,
                    kv.start_s,
                    kv.end_s,
                    y + 4.0,
                    height - 8.0,
                    request_fill(kv.request),
                    f"request {kv.request} KV transfer: {kv.kv_bytes / 1e6:.1f} MB in {_ms(kv.whole_s)}, "
                    f"{_ms(kv.exposed_s)} after its prefill",
                    fill_opacity=0.7,
                )
        else:
            _iterations_track(group, canvas, tl.iterations, y)
        y += height + LANE_GAP
    ends = np.array([it.end_s for it in tl.iterations], dtype=np.float64)
    emits = np.ones((len(tl.iterations), len(tl.streams)), dtype=bool)
    for i, it in enumerate(tl.iterations):
        emits[i, it.stalled_streams] = False
    for stream in tl.streams:
        _label(group, y, f"stream {stream.stream} ({stream.context_tokens} ctx)", LANE_H)
        _lane_background(group, y, LANE_H)
        _stream_lane(group, canvas, tl, stream.stream, ends[emits[:, stream.stream]], y)
        y += LANE_H + LANE_GAP
    for req in tl.requests:
        _label(group, y, f"request {req.request} ({req.prompt_tokens}-token prompt)", LANE_H)
        _lane_background(group, y, LANE_H)
        _request_lane(group, canvas, tl, req.request, y)
        y += LANE_H + LANE_GAP
    _axis(group, canvas, y + 2.0)
    return y + AXIS_H + SECTION_GAP


def _legend(svg: ET.Element, num_requests: int, y: float) -> None:
    items = [(DECODE_FILL, "decode tokens"), (STALL_FILL, "stream waiting beyond a decode-only iteration")]
    items += [(request_fill(r), f"request {r} prompt") for r in range(min(num_requests, len(REQUEST_FILLS)))]
    x = 12.0
    for fill, text in items:
        _el(
            svg,
            "rect",
            x=x,
            y=y,
            width=12,
            height=12,
            fill=fill,
            fill_opacity=0.3 if fill == STALL_FILL else 1,
        )
        _el(svg, "text", text, x=x + 16, y=y + 10, class_="legend")
        x += 28 + 6.5 * len(text)


def _section_height(tl: TimelineOut) -> float:
    tracks = 3 if tl.design == "disaggregated" else 1
    lanes = len(tl.streams) + len(tl.requests)
    return (
        SECTION_TITLE_H
        + tracks * (TRACK_H + LANE_GAP)
        + lanes * (LANE_H + LANE_GAP)
        + 2.0
        + AXIS_H
        + SECTION_GAP
    )


def render_timeline_svg(response: TimelineResponse) -> str:
    """The response drawn as a standalone SVG document (UTF-8 text with an XML declaration)."""
    height = TOP + sum(_section_height(tl) for tl in response.timelines)
    svg = ET.Element(
        _tag("svg"),
        {
            "width": str(WIDTH),
            "height": _fmt(math.ceil(height)),
            "viewBox": f"0 0 {WIDTH} {_fmt(math.ceil(height))}",
            "version": "1.1",
        },
    )
    sc = response.scenario
    contexts = sorted(set(sc.context_tokens))
    context = f"{contexts[0]}" if len(contexts) == 1 else f"{contexts[0]}–{contexts[-1]}"
    prompts = ", ".join(str(p.prompt_tokens) for p in sc.prompts)
    title = (
        f"{response.model} ({response.engine}, {response.weight_dtype}): {sc.running_streams} streams at "
        f"{context} tokens of context when prompt(s) of {prompts} tokens arrive"
    )
    _el(svg, "title", title)
    _el(
        svg,
        "desc",
        "Per-iteration timeline from the planner's cost model; times in milliseconds from the start.",
    )
    _el(
        svg,
        "style",
        "text{font-family:sans-serif;fill:#222222}.lane-label,.tick{font-size:10px}"
        ".legend{font-size:11px}.section-title{font-size:12px;font-weight:bold}.title{font-size:14px;"
        "font-weight:bold}",
    )
    _el(svg, "rect", x=0, y=0, width=WIDTH, height=math.ceil(height), fill="#ffffff")
    _el(svg, "text", title, x=12, y=20, class_="title")
    _legend(svg, len(sc.prompts), 30.0)
    canvas = _Canvas(max(tl.end_s for tl in response.timelines))
    y = float(TOP)
    for tl in response.timelines:
        y = _section(svg, canvas, tl, y)
    return ET.tostring(svg, encoding="unicode", xml_declaration=True)
