"""``commpulse analyze --plot``: one picture of what the estimator saw and why it said so.

A sink, like the table and the JSON: it draws the series :func:`agent.analyze.analyze_files`
handed to the estimator (``AnalysisResult.inputs``) and the estimate's own details (the burst
mask, the period detector's level and rising edges), never a second estimate. The figure has

* the bandwidth of the busier direction with the detected bursts shaded, a marker every T
  (phase-aligned to a burst start), the GPU compute signal on a twin axis, and the parameter
  box (T, B, D, regime, confidence, warnings, verdict) beside it;
* a detail panel over the first few periods when the recording holds too many periods for
  the markers to be told apart;
* the normalised autocorrelation (NSDF) that chose T, with T/2 and 2T marked: a peak at T
  that its multiples repeat, and no peak at T/2, is why T and not a harmonic.

matplotlib is the optional ``plot`` extra, imported only here and only when a plot is asked
for; the figure is drawn on the Agg canvas directly (no pyplot, no global backend state).
"""

from __future__ import annotations

import datetime as dt
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agent.errors import ExportError

# The estimator's own helpers, so the plot shades exactly the window B and D came from and
# correlates exactly the series T came from (they are private to keep estimate's API small).
from agent.estimate import CollectiveMix, Estimate, GpuSamples, log_series, whole_periods
from agent.period import DetectorSettings, PeriodResult, build_pyramid, nsdf
from agent.rates import GridSeries
from agent.report import verdict
from agent.separation import best_signal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from agent.analyze import AnalysisResult

__all__ = [
    "INSTALL_HINT",
    "MAX_DRAWN_POINTS",
    "AnalysisPlot",
    "NsdfView",
    "PlotError",
    "box_lines",
    "bucket_means",
    "burst_spans",
    "check_plot_target",
    "envelope",
    "gpu_trace",
    "merge_spans",
    "nsdf_view",
    "period_markers",
    "render_analysis",
    "runs",
    "write_plot",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

INSTALL_HINT = "pip install 'commpulse[plot]'"

#: Samples per drawn curve: a few per pixel column of the panels at 100 dpi. Longer series
#: are drawn as a min/max envelope, so no burst disappears between two points.
MAX_DRAWN_POINTS = 2400
#: Shaded burst spans per panel; beyond, spans closer than the merge gap are drawn as one.
MAX_SPANS = 1500
#: Periods one panel may hold and still show its period markers; beyond, a detail panel shows
#: the first DETAIL_PERIODS periods with their markers, bursts and GPU signal.
MAX_MARKERS = 40
DETAIL_PERIODS = 6
#: Figure width (inches), the right edge of the panels (figure fraction; the parameter box
#: fills the rest) and the width of the box's wrapped text (characters).
FIG_WIDTH_IN = 13.0
PANEL_RIGHT = 0.74
BOX_WIDTH = 34

_SERIES_COLOUR = "#1f5fa8"
_BURST_COLOUR = "#f28e2b"
_MARKER_COLOUR = "#d62728"
_GPU_COLOUR = "#2ca02c"
_HARMONIC_COLOUR = "#7f7f7f"


class PlotError(ExportError):
    """The plot cannot be written: matplotlib missing, bad destination, unknown format."""


@dataclass(frozen=True)
class AnalysisPlot:
    """The drawn figure and what was drawn on it, so callers (and tests) need no pixels.

    Times are seconds since ``origin_s`` (the absolute time of x = 0, the first sample).
    """

    figure: Figure
    series_axes: Axes
    why_axes: Axes
    detail_axes: Axes | None
    box_text: str
    origin_s: float
    period_s: float | None
    markers_s: FloatArray
    burst_spans_s: FloatArray
    samples: int
    drawn_points: int


# --------------------------------------------------------------------------------------------
# Destination and matplotlib


def _load_matplotlib() -> None:
    """Import matplotlib or say how to install it (the ``plot`` extra)."""
    try:
        import matplotlib
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise PlotError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}") from exc


def _plot_format(path: Path) -> str:
    """The file format from the suffix: PNG without one, an error for an unknown one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    suffix = path.suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    supported = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if suffix not in supported:
        raise PlotError(
            f"cannot write the plot to {path}: unknown image format '.{suffix}' "
            "(use .png, or .svg / .pdf)"
        )
    return suffix


def check_plot_target(path: Path) -> None:
    """Fail early, before a long analysis, when the plot could not be written anyway."""
    _load_matplotlib()
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise PlotError(f"cannot write the plot to {path}: the directory {parent} {what}")
    if path.is_dir():
        raise PlotError(f"cannot write the plot to {path}: it is a directory")
    _plot_format(path)


def write_plot(result: AnalysisResult, path: Path, *, dpi: int = 100) -> AnalysisPlot:
    """Render the analysis and save it to ``path`` (format from the suffix, PNG by default)."""
    check_plot_target(path)
    drawn = render_analysis(result, dpi=dpi)
    try:
        drawn.figure.savefig(path, dpi=dpi, format=_plot_format(path))
    except OSError as exc:
        raise PlotError(f"cannot write the plot to {path}: {exc.strerror or exc}") from exc
    return drawn


# --------------------------------------------------------------------------------------------
# Pure helpers: what to draw


def runs(mask: BoolArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Start and end (exclusive) indices of the True runs of ``mask``."""
    padded = np.concatenate(([False], mask, [False]))
    change = np.flatnonzero(padded[1:] != padded[:-1])
    return change[0::2].astype(np.int64), change[1::2].astype(np.int64)


def envelope(
    x: FloatArray, y: FloatArray, max_points: int = MAX_DRAWN_POINTS
) -> tuple[FloatArray, FloatArray, FloatArray, int]:
    """Bucket starts and per-bucket min and max of ``y``: at most ``max_points`` buckets.

    Returns ``(x, lo, hi, k)`` with ``k`` samples per bucket (1: nothing was decimated). NaN
    samples are skipped; an all-NaN bucket stays NaN (a gap in the drawing).
    """
    n = y.size
    k = max(1, math.ceil(n / max(1, max_points)))
    if k == 1:
        return x, y, y, 1
    nb = math.ceil(n / k)
    padded = np.full(nb * k, np.nan)
    padded[:n] = y
    blocks = padded.reshape(nb, k)
    lo = np.fmin.reduce(blocks, axis=1)
    hi = np.fmax.reduce(blocks, axis=1)
    return np.ascontiguousarray(x[::k]), lo, hi, k


def merge_spans(spans: FloatArray, max_spans: int = MAX_SPANS) -> FloatArray:
    """Join spans separated by gaps narrower than a drawing pixel, until ≤ ``max_spans`` remain.

    Only for drawing: spans a fraction of a pixel apart look the same joined, and thousands
    of polygons would make a long recording slow to draw. The gap threshold starts at the
    total extent over ``max_spans`` and doubles, so every gap of the same width is treated
    alike (no striping).
    """
    if spans.shape[0] <= max_spans:
        return spans
    gaps = spans[1:, 0] - spans[:-1, 1]
    min_gap = float(spans[-1, 1] - spans[0, 0]) / max_spans
    while True:
        breaks = gaps >= min_gap
        if int(breaks.sum()) < max_spans:
            break
        min_gap *= 2.0
    starts = spans[np.concatenate(([True], breaks)), 0]
    ends = spans[np.concatenate((breaks, [True])), 1]
    return np.column_stack((starts, ends))


def bucket_means(
    x: FloatArray, y: FloatArray, max_points: int = MAX_DRAWN_POINTS
) -> tuple[FloatArray, FloatArray]:
    """Bucket centres and means of ``y`` (NaN skipped): at most ``max_points`` buckets."""
    n = y.size
    k = max(1, math.ceil(n / max(1, max_points)))
    if k == 1:
        return x, y
    nb = math.ceil(n / k)
    ok = np.isfinite(y)
    idx = np.arange(n) // k
    sums = np.bincount(idx, weights=np.where(ok, y, 0.0), minlength=nb)
    counts = np.bincount(idx, weights=ok.astype(np.float64), minlength=nb)
    centres = np.bincount(idx, weights=x, minlength=nb) / np.bincount(idx, minlength=nb)
    means = np.full(nb, np.nan)
    np.divide(sums, counts, out=means, where=counts > 0)
    return centres, means


def period_markers(period_s: float, phase_s: float, start_s: float, end_s: float) -> FloatArray:
    """Times ``phase + k·T`` that fall in ``[start, end]``."""
    if not (period_s > 0 and end_s > start_s):
        return np.empty(0)
    k0 = math.ceil((start_s - phase_s) / period_s - 1e-9)
    k1 = math.floor((end_s - phase_s) / period_s + 1e-9)
    return phase_s + np.arange(k0, k1 + 1, dtype=np.float64) * period_s


def burst_spans(grid: GridSeries, est: Estimate) -> FloatArray:
    """Absolute ``(start, end)`` times of the bursts, as the estimator classified them.

    Inside the whole-period window that B and D were computed from, the spans are the
    estimator's own on-mask; before and after it (less than one period at each end) samples
    above the midpoint of the estimate's on and off levels are shaded, so the first and last
    bursts of the recording are shaded too.
    """
    stats = est.burst_detail
    if stats is None or not stats.has_bursts:
        return np.empty((0, 2))
    rate = np.where(np.isfinite(grid.rate), grid.rate, -np.inf)
    on = rate >= 0.5 * (stats.on_level + stats.off_level)
    mask = stats.on_mask
    if mask is not None:
        offset: int | None = None
        if mask.size == grid.rate.size:
            offset = 0
        elif est.period_detail is not None:
            window = whole_periods(grid, est.period_detail)
            if window.rate.size == mask.size:
                offset = round((window.t0 - grid.t0) / grid.dt)
        if offset is not None:
            on[offset : offset + mask.size] = mask
    starts, ends = runs(on)
    return np.column_stack((grid.t0 + starts * grid.dt, grid.t0 + ends * grid.dt))


def gpu_trace(gpu: GpuSamples, signal: str) -> tuple[FloatArray, FloatArray]:
    """The signal averaged over GPUs at each sample time (one curve for the host)."""
    values = np.asarray(gpu.signals[signal], dtype=np.float64)
    ok = np.isfinite(values) & np.isfinite(gpu.times)
    if not ok.any():
        return np.empty(0), np.empty(0)
    times, inverse = np.unique(gpu.times[ok], return_inverse=True)
    sums = np.bincount(inverse, weights=values[ok], minlength=times.size)
    counts = np.bincount(inverse, minlength=times.size)
    return times.astype(np.float64), sums / counts


@dataclass(frozen=True)
class NsdfView:
    """The NSDF the detector judged T on: its pyramid level, lags in seconds."""

    lags_s: FloatArray
    values: FloatArray
    level: int
    level_dt: float
    samples: int


def nsdf_view(rate: FloatArray, dt_s: float, period: PeriodResult | None) -> NsdfView | None:
    """Recompute the NSDF at the level the period detector decided on (cheap: ≤ 8192 samples).

    Same preparation as :func:`agent.period.estimate_period`: unknown slots filled with the
    mean, the same pyramid, the same last window of the level. Without a period, the finest
    level is shown: the series as sampled, with no peak that stands out.
    """
    x = np.asarray(rate, dtype=np.float64)
    finite = np.isfinite(x)
    if finite.sum() < 32:
        return None
    x = np.where(finite, x, float(np.mean(x[finite])))
    cfg = DetectorSettings()
    pyramid = build_pyramid(x, dt_s, factor=cfg.decimation)
    level = 0
    if period is not None and period.period_s is not None and 0 <= period.level < len(pyramid):
        level = period.level
    lv = pyramid[level]
    window = lv.samples[-cfg.level_samples :]
    window = window - float(np.mean(window))
    if not np.any(window):
        return None
    values = nsdf(window)
    if period is not None and period.period_s is not None:
        shown = min(window.size - 1, math.ceil(2.6 * period.period_s / lv.dt) + 1)
        shown = max(shown, min(window.size - 1, 16))
    else:
        shown = max(2, window.size // 3)
    lags = np.arange(shown, dtype=np.float64) * lv.dt
    return NsdfView(lags, values[:shown], level, lv.dt, int(window.size))


def _rate_unit(peak: float) -> tuple[float, str]:
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if peak >= scale:
            return scale, unit
    return 1.0, "B/s"


def _bytes_unit(peak: float) -> tuple[float, str]:
    scale, unit = _rate_unit(peak)
    return scale, unit.removesuffix("/s")


def _seconds_text(s: float) -> str:
    return f"{s * 1e3:.4g} ms" if s < 1.0 else f"{s:.4g} s"


def _quantity_text(v: float, unit: str) -> str:
    scale, name = _rate_unit(v)
    return f"{v / scale:.4g} {name.removesuffix('/s')}{unit}"


def box_lines(est: Estimate) -> list[str]:
    """The parameter box: the numbers a user reads first, then warnings and the verdict."""
    t = est.period_s
    lines = [
        f"regime       {est.regime}",
        f"T  period    {_seconds_text(t) if t is not None else 'no period'}",
        f"B  burst bw  {_quantity_text(est.burst_bandwidth, '/s') if est.burst_bandwidth else '—'}",
        f"D  duty      {f'{est.duty_cycle:.3f}' if est.duty_cycle is not None else '—'}",
        f"confidence   {est.confidence:.2f}",
    ]
    if est.inner_period_s is not None:
        lines.append(f"inner T      {_seconds_text(est.inner_period_s)}")
    if est.bytes_per_iteration is not None:
        lines.append(f"V  bytes/T   {_quantity_text(est.bytes_per_iteration, '')}")
    if est.mean_bandwidth is not None:
        lines.append(f"mean bw      {_quantity_text(est.mean_bandwidth, '/s')}")
    if est.nranks is not None:
        lines.append(f"N  ranks     {est.nranks}")
    if est.period_source is not None:
        direction = f" ({est.direction})" if est.direction else ""
        lines.append(f"T from       {est.period_source}{direction}, {est.period_method}")
    if est.duty_cycle_source:
        lines.append(f"D from       {est.duty_cycle_source}")
    lines.append("")
    lines.extend(textwrap.wrap(verdict(est), BOX_WIDTH))
    if est.warnings:
        lines.append("")
        lines.append("warnings:")
        for w in est.warnings:
            lines.extend(textwrap.wrap(w, BOX_WIDTH, initial_indent="• ", subsequent_indent="  "))
    return lines


# --------------------------------------------------------------------------------------------
# Drawing


def _draw_curve(
    ax: Axes, x: FloatArray, y: FloatArray, *, colour: str, label: str, gid: str
) -> int:
    """Rate slots as steps; a min/max envelope when there are more slots than pixels.

    The envelope keeps every burst visible however long the recording. Returns points drawn.
    """
    ex, lo, hi, k = envelope(x, y)
    if k == 1:
        ax.plot(x, y, color=colour, lw=1.0, label=label, gid=gid, drawstyle="steps-post")
        return int(x.size)
    ax.fill_between(ex, lo, hi, step="post", color=colour, lw=0.6, label=label, gid=gid)
    return int(2 * ex.size)


def _shade(ax: Axes, spans: FloatArray, *, label: str = "_nolegend_") -> None:
    from matplotlib.collections import PolyCollection

    if spans.shape[0] == 0:
        return
    verts = [((a, 0.0), (a, 1.0), (b, 1.0), (b, 0.0)) for a, b in spans]
    coll = PolyCollection(
        verts,
        transform=ax.get_xaxis_transform(),
        facecolor=_BURST_COLOUR,
        alpha=0.28,
        edgecolor="none",
        label=label,
        gid="bursts",
        zorder=0,
    )
    ax.add_collection(coll, autolim=False)


def _markers(ax: Axes, markers: FloatArray, *, label: str = "_nolegend_") -> None:
    if markers.size == 0:
        return
    ax.vlines(
        markers,
        0.0,
        1.0,
        transform=ax.get_xaxis_transform(),
        colors=_MARKER_COLOUR,
        linestyles="dashed",
        lw=0.9,
        label=label,
        gid="period-markers",
        zorder=3,
    )


def _gpu_twin(
    ax: Axes,
    gpu: tuple[FloatArray, FloatArray],
    signal: str,
    origin: float,
    view: tuple[float, float],
) -> Axes:
    """The GPU signal on a twin axis, in percent; averaged per bucket when denser than pixels.

    Bucket means, not an envelope: a compute square wave faster than a pixel would otherwise
    paint the whole panel green and hide the bandwidth.
    """
    twin = ax.twinx()
    times = gpu[0] - origin
    i0 = max(0, int(np.searchsorted(times, view[0])) - 1)
    i1 = min(times.size, int(np.searchsorted(times, view[1], side="right")) + 1)
    x, y = bucket_means(times[i0:i1], gpu[1][i0:i1] * 100.0)
    averaged = x.size < i1 - i0
    label = f"GPU {signal} (right axis{', bucket means' if averaged else ''})"
    twin.plot(x, y, color=_GPU_COLOUR, lw=1.0, alpha=0.6, label=label, gid="gpu")
    twin.set_ylim(0.0, 105.0)
    twin.set_ylabel(f"GPU {signal} (%)", color=_GPU_COLOUR)
    twin.tick_params(axis="y", colors=_GPU_COLOUR)
    return twin


def _message(ax: Axes, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        "\n".join(textwrap.wrap(text, 70)),
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=10,
        color="#444444",
        gid="message",
    )


def _legend_above(ax: Axes, extra: list[Any] | None = None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for other in extra or []:
        h, lab = other.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        ax.legend(
            handles,
            labels,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=4,
            frameon=False,
            fontsize=8.5,
            borderaxespad=0.2,
        )


@dataclass(frozen=True)
class _Frame:
    """The time axis shared by the time panels: x = 0 at ``origin``, ``span`` seconds long."""

    origin: float
    span: float
    period: float | None
    phase: float | None  # first marker time (a burst start), relative to origin


@dataclass
class _Drawn:
    """What a time panel drew (for :class:`AnalysisPlot`)."""

    samples: int = 0
    points: int = 0
    markers: FloatArray = field(default_factory=lambda: np.empty(0))
    spans: FloatArray = field(default_factory=lambda: np.empty((0, 2)))
    x_label: str = "time since the first sample (s)"


def _frame(result: AnalysisResult, grid: GridSeries | None, gpu_times: FloatArray | None) -> _Frame:
    """The time axis: x = 0 at the first sample of the top panel (network, NCCL calls or GPU)."""
    est = result.estimate
    mix = result.inputs.collectives
    call_times = mix.call_times[np.isfinite(mix.call_times)] if mix is not None else np.empty(0)
    if grid is not None:
        origin, end = grid.t0, grid.t0 + grid.duration_s
    elif call_times.size >= 2:
        origin, end = float(call_times.min()), float(call_times.max())
    elif gpu_times is not None and gpu_times.size:
        origin, end = float(gpu_times[0]), float(gpu_times[-1])
    else:
        origin, end = 0.0, 1.0
    phase: float | None = None
    t = est.period_s
    if t is not None:
        edges = est.period_detail.rising_edges_s if est.period_detail is not None else None
        stats = est.burst_detail
        if edges is not None and edges.size:
            phase = float(edges[0]) - origin
        elif grid is not None and stats is not None and stats.has_bursts:
            spans = burst_spans(grid, est)
            phase = float(spans[0, 0]) - origin if spans.shape[0] else 0.0
        else:
            phase = 0.0
    return _Frame(origin=origin, span=max(end - origin, 1e-9), period=t, phase=phase)


def _draw_network(
    ax: Axes, dax: Axes | None, grid: GridSeries, result: AnalysisResult, frame: _Frame
) -> _Drawn:
    """Bandwidth, bursts and markers; with ``dax``, the first periods again in detail."""
    est = result.estimate
    out = _Drawn(samples=int(grid.rate.size))
    x = (grid.t0 - frame.origin) + np.arange(grid.rate.size, dtype=np.float64) * grid.dt
    finite = grid.rate[np.isfinite(grid.rate)]
    scale, unit = _rate_unit(float(finite.max()) if finite.size else 1.0)
    y = grid.rate / scale
    spans = burst_spans(grid, est) - frame.origin
    out.spans = merge_spans(spans)
    source = result.inputs.network_source or "network"
    label = f"{est.direction} bandwidth ({source}, {_seconds_text(grid.dt)} samples)"
    out.points += _draw_curve(ax, x, y, colour=_SERIES_COLOUR, label=label, gid="series")
    _shade(ax, out.spans, label="detected bursts")
    ax.set_ylabel(f"bandwidth ({unit})")
    ax.set_ylim(bottom=min(0.0, float(finite.min()) / scale if finite.size else 0.0))
    t, phase = frame.period, frame.phase
    if t is None or phase is None:
        return out
    if dax is None:
        out.markers = period_markers(t, phase, 0.0, frame.span)
        _markers(ax, out.markers, label=f"every T = {_seconds_text(t)}")
        return out
    # Too many periods to tell markers apart: the first ones again, at full resolution.
    first = float(spans[0, 0]) if spans.shape[0] else phase
    lo = max(0.0, first - 0.25 * t)
    hi = min(frame.span, lo + DETAIL_PERIODS * t)
    ax.axvspan(lo, hi, facecolor="none", edgecolor="#333333", lw=1.0, gid="detail-window")
    # The window may be narrower than a pixel: a marker above it says where it is.
    ax.plot(
        [0.5 * (lo + hi)],
        [1.0],
        marker="v",
        ms=8,
        color="#333333",
        ls="none",
        transform=ax.get_xaxis_transform(),
        clip_on=False,
        label=f"detail below ({DETAIL_PERIODS} periods)",
    )
    i0 = max(0, int((lo - x[0]) / grid.dt))
    i1 = min(grid.rate.size, math.ceil((hi - x[0]) / grid.dt) + 1)
    out.points += _draw_curve(
        dax, x[i0:i1], y[i0:i1], colour=_SERIES_COLOUR, label="_nolegend_", gid="series"
    )
    inside = spans[(spans[:, 1] > lo) & (spans[:, 0] < hi)]
    _shade(dax, np.clip(inside, lo, hi))
    out.markers = period_markers(t, phase, lo, hi)
    _markers(dax, out.markers)
    dax.set_xlim(lo, hi)
    dax.set_ylim(ax.get_ylim())
    dax.set_ylabel(f"bandwidth ({unit})")
    dax.set_title(
        f"detail: {DETAIL_PERIODS} periods, markers every T = {_seconds_text(t)}",
        loc="left",
        fontsize=9,
    )
    return out


def _draw_calls(ax: Axes, mix: CollectiveMix, frame: _Frame) -> _Drawn:
    """Without a network series: one line per timed NCCL call, as high as its bytes."""
    ok = np.isfinite(mix.call_times)
    times = mix.call_times[ok] - frame.origin
    sizes = mix.call_bytes[ok] if mix.call_bytes.size == mix.call_times.size else None
    if sizes is None or not np.isfinite(sizes).any():
        sizes = np.ones(times.size)
        ylabel, scale = "NCCL calls", 1.0
    else:
        sizes = np.nan_to_num(sizes)
        scale, unit = _bytes_unit(float(sizes.max()) or 1.0)
        ylabel = f"bytes per call ({unit})"
    out = _Drawn(samples=int(times.size), x_label="time since the first NCCL call (s)")
    if times.size > MAX_DRAWN_POINTS:
        # The largest call per pixel-wide bin: every burst of calls stays visible.
        bins = np.minimum(
            (times / frame.span * MAX_DRAWN_POINTS).astype(np.int64), MAX_DRAWN_POINTS - 1
        )
        top = np.zeros(MAX_DRAWN_POINTS)
        np.maximum.at(top, bins, sizes)
        keep = top > 0
        times = (np.flatnonzero(keep) + 0.5) * frame.span / MAX_DRAWN_POINTS
        sizes = top[keep]
    ax.vlines(
        times,
        0.0,
        sizes / scale,
        colors=_SERIES_COLOUR,
        lw=0.8,
        gid="series",
        label="NCCL collective calls (from the log; no network series given)",
    )
    out.points = int(times.size)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0.0)
    t, phase = frame.period, frame.phase
    if t is not None and phase is not None and frame.span / t <= MAX_MARKERS:
        out.markers = period_markers(t, phase, 0.0, frame.span)
        _markers(ax, out.markers, label=f"every T = {_seconds_text(t)}")
    return out


def _layout(detail: bool, dpi: int) -> tuple[Figure, Axes, Axes | None, Axes, float]:
    """Figure and panels with fixed margins (not constrained layout).

    The legends sit above their panels and the parameter box in its own column at the right,
    so neither can cover data or squeeze the panels.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heights = [3.0, 2.2, 2.3] if detail else [3.2, 2.4]
    fig_h = sum(heights) + 0.75 * len(heights) + 0.6
    fig = Figure(figsize=(FIG_WIDTH_IN, fig_h), dpi=dpi)
    FigureCanvasAgg(fig)
    top = 1.0 - 0.95 / fig_h
    gs = fig.add_gridspec(
        len(heights),
        1,
        height_ratios=heights,
        left=0.06,
        right=PANEL_RIGHT,
        top=top,
        bottom=0.55 / fig_h,
        hspace=0.42,
    )
    ax = fig.add_subplot(gs[0])
    dax = fig.add_subplot(gs[1]) if detail else None
    why = fig.add_subplot(gs[-1])
    return fig, ax, dax, why, top


def render_analysis(result: AnalysisResult, *, dpi: int = 100) -> AnalysisPlot:
    """Draw the analysis figure (not saved). Needs matplotlib (the ``plot`` extra)."""
    _load_matplotlib()
    est = result.estimate
    inputs = result.inputs
    grid = inputs.network.get(est.direction) if est.direction else None
    mix = inputs.collectives
    gpu_signal = None
    if inputs.gpu is not None:
        gpu_signal = est.gpu_signal or best_signal(set(inputs.gpu.signals))
    gpu = gpu_trace(inputs.gpu, gpu_signal) if inputs.gpu is not None and gpu_signal else None
    if gpu is not None and gpu[0].size == 0:
        gpu = None
    frame = _frame(result, grid, gpu[0] if gpu is not None else None)
    detail = grid is not None and frame.period is not None
    detail = detail and frame.span / (frame.period or 1.0) > MAX_MARKERS
    fig, ax, dax, why, top = _layout(detail, dpi)

    if grid is not None:
        drawn = _draw_network(ax, dax, grid, result, frame)
    elif mix is not None and int(np.isfinite(mix.call_times).sum()) >= 2:
        drawn = _draw_calls(ax, mix, frame)
    else:
        drawn = _Drawn()
        why_not = (
            "no network series (give --counters or --pcap)"
            if mix is None
            else "no network series, and the NCCL log has no timestamps to place calls in time"
        )
        if gpu is None:
            _message(ax, f"Nothing to draw over time: {why_not}.")
        else:
            drawn.x_label = "time since the first GPU sample (s)"
            ax.set_yticks([])
            ax.set_ylabel("\n".join(textwrap.wrap(why_not, 40)), fontsize=8.5)

    twins: list[Axes] = []
    if gpu is not None and gpu_signal is not None:
        # With a detail panel the GPU is drawn there only: over thousands of steps its
        # bucket means beat against T (moiré) and would hide the bandwidth.
        if dax is None:
            twins.append(_gpu_twin(ax, gpu, gpu_signal, frame.origin, (0.0, frame.span)))
        else:
            twins.append(_gpu_twin(dax, gpu, gpu_signal, frame.origin, dax.get_xlim()))
    ax.set_xlim(0.0, frame.span)
    for panel in (ax, dax):
        if panel is not None:
            panel.grid(alpha=0.25)
    (dax or ax).set_xlabel(drawn.x_label)
    _legend_above(ax, twins)
    _draw_why(why, result, grid)

    box_text = "\n".join(box_lines(est))
    fig.text(
        PANEL_RIGHT + 0.055,
        top,
        box_text,
        va="top",
        ha="left",
        family="monospace",
        fontsize=8.5,
        gid="param-box",
        bbox={"boxstyle": "round,pad=0.6", "facecolor": "#f7f7f7", "edgecolor": "#bbbbbb"},
    )
    fig.suptitle(_title(result, frame.origin, frame.span), fontsize=11, x=0.01, ha="left")
    return AnalysisPlot(
        figure=fig,
        series_axes=ax,
        why_axes=why,
        detail_axes=dax,
        box_text=box_text,
        origin_s=frame.origin,
        period_s=est.period_s,
        markers_s=drawn.markers,
        burst_spans_s=drawn.spans,
        samples=drawn.samples,
        drawn_points=drawn.points,
    )


def _title(result: AnalysisResult, origin: float, span: float) -> str:
    est = result.estimate
    kinds = ", ".join(sorted(result.sources)) or "no input"
    start = ""
    if origin > 1e8:  # an epoch time, not a relative one
        stamp = dt.datetime.fromtimestamp(origin, tz=dt.UTC)
        start = f", from {stamp:%Y-%m-%d %H:%M:%S} UTC"
    return f"commpulse analyze: {est.regime}, {_seconds_text(span)} of {kinds}{start}"


def _draw_why(ax: Axes, result: AnalysisResult, grid: GridSeries | None) -> None:
    """The NSDF versus lag: the peak at T, and T/2 and 2T for comparison."""
    est = result.estimate
    period = est.period_detail
    t_est = est.period_s
    view: NsdfView | None = None
    what = ""
    if grid is not None:
        view = nsdf_view(grid.rate, grid.dt, period)
        what = f"{est.direction} bandwidth"
    elif result.inputs.collectives is not None:
        series = log_series(result.inputs.collectives)
        if series is not None:
            view = nsdf_view(series[0], series[1], period)
            what = "NCCL call bytes"
    ax.set_xlabel("lag (s)")
    ax.set_ylabel("NSDF (autocorrelation)")
    if view is None:
        _message(
            ax, "No series to correlate: T needs --counters, --pcap, or a timestamped NCCL log."
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.plot(
        view.lags_s,
        view.values,
        color=_SERIES_COLOUR,
        lw=1.0,
        gid="nsdf",
        label=f"NSDF of the {what} ({view.samples} samples at {_seconds_text(view.level_dt)})",
    )
    ax.axhline(0.0, color="#999999", lw=0.6)
    ax.set_ylim(-1.05, 1.6)  # headroom above 1 for the legend: it never covers the curve
    ax.set_yticks([-1.0, -0.5, 0.0, 0.5, 1.0])
    ax.set_xlim(0.0, float(view.lags_s[-1]) if view.lags_s.size > 1 else 1.0)
    ax.grid(alpha=0.25)
    if t_est is not None:
        ax.axvline(
            t_est,
            color=_MARKER_COLOUR,
            lw=1.6,
            gid="chosen-period",
            label=f"chosen T = {_seconds_text(t_est)}",
        )
        harmonics = [h for h in (t_est / 2.0, 2.0 * t_est) if h <= float(view.lags_s[-1])]
        ax.vlines(
            harmonics,
            0.0,
            1.0,
            transform=ax.get_xaxis_transform(),
            colors=_HARMONIC_COLOUR,
            linestyles="dashed",
            lw=1.0,
            gid="harmonics",
            label="T/2 and 2T (T is the shortest lag that repeats)",
        )
        if est.inner_period_s is not None and est.inner_period_s <= float(view.lags_s[-1]):
            ax.axvline(
                est.inner_period_s,
                color="#9467bd",
                lw=1.0,
                ls="-.",
                gid="inner-period",
                label=f"inner period {_seconds_text(est.inner_period_s)}",
            )
        if period is not None and period.method == "sequence":
            ax.set_title(
                f"why T: a call comes once a step in the log's order ({period.cycles:.0f} "
                "steps timed by it); the NSDF of the binned calls is shown for reference",
                loc="left",
                fontsize=9,
            )
        elif period is not None:
            ax.set_title(
                f"why T: the NSDF peaks at T and repeats at its multiples "
                f"(z = {period.z:.1f}, comb {period.comb:.2f}, method {period.method})",
                loc="left",
                fontsize=9,
            )
    else:
        ax.set_title(
            "no period: no lag repeats clearly above the noise (no significant NSDF peak)",
            loc="left",
            fontsize=9,
        )
    ax.legend(loc="upper left", ncol=2, fontsize=8, frameon=False)
