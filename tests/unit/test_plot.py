"""``commpulse analyze --plot``: the picture says what the estimate says.

The figure is inspected through its artists (tagged with gids), not through pixels: the period
markers must be spaced by the estimated T, the shaded spans must be the bursts, the parameter
box must quote the estimate, and the NSDF panel must show the peak that chose T.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib.image
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.lines import Line2D

from agent.analyze import AnalysisResult, analyze_files
from agent.cli import main
from agent.errors import ExportError
from agent.estimate import CollectiveMix, EstimateInputs, GpuSamples, estimate
from agent.plot import (
    MAX_DRAWN_POINTS,
    AnalysisPlot,
    PlotError,
    merge_spans,
    render_analysis,
    write_plot,
)
from agent.rates import GridSeries
from agent.simulator.files import simulate_to_dir
from agent.simulator.params import JobParams


def _by_gid(ax: Any, gid: str) -> list[Any]:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def _twin_children(plot: AnalysisPlot, ax: Any, gid: str) -> list[Any]:
    """Artists with ``gid`` on the twin axes that share ``ax``'s x axis."""
    found = []
    for other in plot.figure.axes:
        if other is not ax and other.get_shared_x_axes().joined(ax, other):
            found += _by_gid(other, gid)
    return found


def _marker_times(ax: Any) -> np.ndarray:
    (coll,) = [c for c in _by_gid(ax, "period-markers") if isinstance(c, LineCollection)]
    return np.sort(np.array([seg[0][0] for seg in coll.get_segments()]))


def _shaded_spans(ax: Any) -> np.ndarray:
    (coll,) = [c for c in _by_gid(ax, "bursts") if isinstance(c, PolyCollection)]
    spans = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in coll.get_paths()]
    return np.array(sorted(spans))


def _box_value(text: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}\s+(.+)$", text, flags=re.MULTILINE)
    assert match, f"{key!r} missing from the parameter box:\n{text}"
    return match.group(1).strip()


def _quantity(text: str) -> float:
    """'25.51 GB/s' → 25.51e9; '4.541 s' → 4.541; '250 ms' → 0.25."""
    number, unit = text.split()[:2]
    scale = {"T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "m": 1e-3}.get(unit[0], 1.0)
    if unit in {"s", "B/s", "B"}:
        scale = 1.0
    return float(number) * scale


def _job_files(run: Path) -> list[Path]:
    return [run / "counters.csv", run / "gpu.csv", run / "nccl.log"]


@pytest.fixture(scope="module")
def training(training_job: Path) -> tuple[AnalysisResult, AnalysisPlot]:
    counters, gpu, log = _job_files(training_job)
    result = analyze_files(counters=[counters], gpu=[gpu], nccl_logs=[log])
    return result, render_analysis(result)


@pytest.fixture(scope="module")
def inference_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inference")
    simulate_to_dir(JobParams(scenario="inference", seed=3), out)
    return out


# --------------------------------------------------------------------------------------------
# The CLI path


def test_cli_writes_a_png_beside_the_json(
    training_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counters, gpu, log = _job_files(training_job)
    png = tmp_path / "analysis.png"
    argv = ["analyze", "--counters", str(counters), "--gpu", str(gpu), "--nccl-log", str(log)]
    assert main([*argv, "--json", "--plot", str(png)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["regime"] == "training"  # stdout stays pure JSON
    assert str(png) in out.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(png)
    height, width = pixels.shape[:2]
    assert width == 1300
    assert 600 <= height <= 1200
    assert float(pixels[..., :3].std()) > 0.05  # not a blank canvas


def test_cli_plot_with_the_table(
    training_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "table.png"
    assert (
        main(["analyze", "--counters", str(training_job / "counters.csv"), "--plot", str(png)]) == 0
    )
    assert "sync period" in capsys.readouterr().out
    assert matplotlib.image.imread(png).shape[1] == 1300


def test_help_documents_plot(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--plot PNG" in text
    assert "commpulse[plot]" in text


# --------------------------------------------------------------------------------------------
# What is drawn


def test_period_markers_are_spaced_by_t_and_start_on_a_burst(
    training: tuple[AnalysisResult, AnalysisPlot],
) -> None:
    result, plot = training
    t = result.estimate.period_s
    assert t is not None
    assert plot.detail_axes is None  # ~20 periods fit one panel
    markers = _marker_times(plot.series_axes)
    assert np.diff(markers) == pytest.approx(t, rel=1e-9)
    span = plot.series_axes.get_xlim()[1]
    assert len(markers) == pytest.approx(span / t, abs=1.01)
    # Phase-aligned: every marker sits at the start of a shaded burst (jitter 1 % of T).
    starts = _shaded_spans(plot.series_axes)[:, 0]
    nearest = np.min(np.abs(markers[:, None] - starts[None, :]), axis=1)
    assert nearest[0] < 0.02
    assert np.median(nearest) < 0.05 * t


def test_shaded_spans_are_the_bursts(training: tuple[AnalysisResult, AnalysisPlot]) -> None:
    result, plot = training
    est = result.estimate
    assert est.period_s is not None
    assert est.burst_bandwidth is not None
    assert est.duty_cycle is not None
    spans = _shaded_spans(plot.series_axes)
    grid = result.inputs.network[est.direction or "tx"]
    x = np.arange(grid.rate.size) * grid.dt
    inside = np.zeros(grid.rate.size, dtype=bool)
    for a, b in spans:
        inside |= (x >= a) & (x < b)
    duration = grid.rate.size * grid.dt
    assert len(spans) == pytest.approx(duration / est.period_s, abs=1.5)
    assert np.mean(grid.rate[inside]) == pytest.approx(est.burst_bandwidth, rel=0.03)
    assert np.mean(grid.rate[~inside]) < 0.05 * est.burst_bandwidth
    assert inside.mean() == pytest.approx(est.network_on_ratio, abs=0.02)
    widths = spans[1:-1, 1] - spans[1:-1, 0]
    assert np.median(widths) == pytest.approx(est.duty_cycle * est.period_s, rel=0.05)


def test_parameter_box_quotes_the_estimate(training: tuple[AnalysisResult, AnalysisPlot]) -> None:
    result, plot = training
    est = result.estimate
    (text,) = [t for t in plot.figure.texts if t.get_gid() == "param-box"]
    box = text.get_text()
    assert box == plot.box_text
    assert _quantity(_box_value(box, "T  period")) == pytest.approx(est.period_s, rel=2e-4)
    assert _quantity(_box_value(box, "B  burst bw")) == pytest.approx(est.burst_bandwidth, rel=2e-4)
    assert float(_box_value(box, "D  duty")) == pytest.approx(est.duty_cycle, abs=6e-4)
    assert _box_value(box, "regime") == est.regime == "training"
    assert float(_box_value(box, "confidence")) == pytest.approx(est.confidence, abs=0.006)
    assert "compute-bound" in box


def test_gpu_signal_on_a_twin_axis(training: tuple[AnalysisResult, AnalysisPlot]) -> None:
    result, plot = training
    (line,) = _twin_children(plot, plot.series_axes, "gpu")
    _x, y = line.get_data()
    assert np.nanmin(y) >= 0.0
    assert np.nanmax(y) <= 100.0
    assert result.estimate.gpu_signal in line.get_label()


def test_why_panel_shows_the_peak_at_t_and_its_harmonics(
    training: tuple[AnalysisResult, AnalysisPlot],
) -> None:
    result, plot = training
    t = result.estimate.period_s
    assert t is not None
    why = plot.why_axes
    (curve,) = [a for a in _by_gid(why, "nsdf") if isinstance(a, Line2D)]
    lags, values = (np.asarray(v, dtype=float) for v in curve.get_data())
    assert lags[-1] >= 2 * t  # 2T is on the axis
    assert np.interp(t, lags, values) > 0.8  # the series repeats after T ...
    assert np.interp(t / 2, lags, values) < 0.3  # ... not after T/2
    (chosen,) = _by_gid(why, "chosen-period")
    assert chosen.get_xdata()[0] == pytest.approx(t)
    (harmonics,) = _by_gid(why, "harmonics")
    xs = sorted(seg[0][0] for seg in harmonics.get_segments())
    assert xs == pytest.approx([t / 2, 2 * t])


# --------------------------------------------------------------------------------------------
# Inputs without a period, without a network series, and long recordings


def test_inference_has_no_period_and_says_so(inference_job: Path, tmp_path: Path) -> None:
    png = tmp_path / "inference.png"
    argv = ["analyze", "--counters", str(inference_job / "counters.csv"), "--plot", str(png)]
    assert main(argv) == 0
    assert matplotlib.image.imread(png).shape[1] == 1300
    result = analyze_files(counters=[inference_job / "counters.csv"])
    plot = render_analysis(result)
    assert result.estimate.period_s is None
    assert _box_value(plot.box_text, "T  period") == "no period"
    assert not _by_gid(plot.series_axes, "period-markers")
    assert _by_gid(plot.series_axes, "series")
    assert "no period" in plot.why_axes.get_title(loc="left")
    assert not _by_gid(plot.why_axes, "chosen-period")


def test_white_noise_draws_without_period_or_bursts() -> None:
    rng = np.random.default_rng(7)
    n = 6000
    rate = 1e9 + rng.normal(0.0, 1e8, n)
    grid = GridSeries(t0=0.0, dt=0.01, rate=rate, valid=np.ones(n, dtype=bool))
    inputs = EstimateInputs(network={"tx": grid}, network_source="counters")
    result = AnalysisResult(estimate(inputs), {"counters": ["noise.csv"]}, inputs=inputs)
    plot = render_analysis(result)
    assert "no period" in plot.box_text
    assert not _by_gid(plot.series_axes, "period-markers")
    assert not _by_gid(plot.series_axes, "bursts")
    assert plot.burst_spans_s.shape == (0, 2)
    assert _by_gid(plot.why_axes, "nsdf")


def test_nccl_log_only_draws_the_calls(training_job: Path) -> None:
    result = analyze_files(nccl_logs=[training_job / "nccl.log"])
    t = result.estimate.period_s
    assert t is not None
    assert result.estimate.period_source == "nccl_log"
    plot = render_analysis(result)
    (calls,) = _by_gid(plot.series_axes, "series")
    assert isinstance(calls, LineCollection)
    assert plot.series_axes.get_ylabel() == "bytes per call (GB)"
    assert np.diff(_marker_times(plot.series_axes)) == pytest.approx(t, rel=1e-9)
    assert _by_gid(plot.why_axes, "chosen-period")


def test_nccl_log_without_timestamps_draws_a_message() -> None:
    mix = CollectiveMix(
        ops={"AllReduce": (40, 40 * 2**30)},
        nranks=8,
        call_times=np.full(40, np.nan),
        call_bytes=np.full(40, float(2**30)),
    )
    inputs = EstimateInputs(collectives=mix)
    result = AnalysisResult(estimate(inputs), {"nccl_log": ["nccl.log"]}, inputs=inputs)
    plot = render_analysis(result)
    (message,) = _by_gid(plot.series_axes, "message")
    assert "no timestamps" in " ".join(message.get_text().split())
    assert "NCCL_DEBUG_TIMESTAMP_LEVELS" in plot.box_text  # the estimate's warning, wrapped
    assert "no period" in plot.box_text


def test_a_step_timed_by_the_call_order_says_so_in_the_why_panel(tmp_path: Path) -> None:
    """Whole-second stamps: T comes from the call that marks each step, not from the NSDF of
    the binned calls (which shows their beat against the second); the panel says which."""
    lines = []
    for k in range(400):
        stamp = f"[2026-12-01 01:{int(0.45 * k) // 60:02d}:{int(0.45 * k) % 60:02d}] "
        for j, count in enumerate((1_638_400, 300_000, 1)):
            lines.append(
                f"{stamp}node1:40:40 [0] NCCL INFO AllReduce: opCount {3 * k + j:x} sendbuff 0x1 "
                f"recvbuff 0x2 count {count} datatype 7 op 0 root 0 comm 0x3 [nranks=8] "
                "stream 0x4"
            )
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(lines) + "\n")
    result = analyze_files(nccl_logs=[log])
    assert result.estimate.period_s == pytest.approx(0.45, rel=0.01)
    plot = render_analysis(result)
    assert "once a step" in plot.why_axes.get_title(loc="left")


def test_one_hour_at_100_hz_is_decimated_with_a_detail_panel(tmp_path: Path) -> None:
    """1 h at 100 Hz (360 000 samples, ~790 steps): envelope drawing and a detail panel.

    (Its speed, ~1 s here, is a benchmark figure, not a test assertion.)
    """
    rng = np.random.default_rng(0)
    dt, n, t_true = 0.01, 360_000, 4.55
    times = np.arange(n) * dt
    rate = np.where(times % t_true < 0.34 * t_true, 25e9, 0.5e9) + rng.normal(0, 0.3e9, n)
    grid = GridSeries(t0=1.7e9, dt=dt, rate=rate, valid=np.ones(n, dtype=bool))
    gpu_t = np.arange(0.0, n * dt, 0.1)
    gpu = GpuSamples(
        times=1.7e9 + gpu_t,
        gpu=np.zeros(gpu_t.size, dtype=np.int64),
        signals={"sm_active": np.where(gpu_t % t_true < 0.34 * t_true, 0.1, 0.85)},
    )
    inputs = EstimateInputs(network={"tx": grid}, network_source="counters", gpu=gpu)
    result = AnalysisResult(estimate(inputs), {"counters": ["long.csv"]}, inputs=inputs)
    t = result.estimate.period_s
    assert t == pytest.approx(t_true, rel=1e-3)
    plot = write_plot(result, tmp_path / "long.png")

    assert plot.samples == n
    assert plot.drawn_points <= 2 * 2 * MAX_DRAWN_POINTS  # two curves, envelopes of ≤ 2400
    assert plot.detail_axes is not None  # ~790 periods: markers shown in the detail panel
    assert not _by_gid(plot.series_axes, "period-markers")
    assert np.diff(_marker_times(plot.detail_axes)) == pytest.approx(t, rel=1e-9)
    assert _shaded_spans(plot.detail_axes).shape[0] >= 5
    assert _twin_children(plot, plot.detail_axes, "gpu")


def test_merge_spans_joins_sub_pixel_gaps_evenly() -> None:
    starts = np.arange(5000) * 1.0
    spans = np.column_stack((starts, starts + 0.6))
    merged = merge_spans(spans, max_spans=100)
    assert merged.shape[0] <= 100
    assert merged[0, 0] == 0.0
    assert merged[-1, 1] == pytest.approx(4999.6)
    # Few, wide gaps survive untouched.
    sparse = np.array([[0.0, 1.0], [50.0, 51.0], [100.0, 101.0]])
    assert np.array_equal(merge_spans(sparse, max_spans=100), sparse)


# --------------------------------------------------------------------------------------------
# Errors


def test_missing_output_directory_fails_before_the_analysis(
    training_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no-such-dir" / "out.png"
    argv = ["analyze", "--counters", str(training_job / "counters.csv"), "--plot", str(target)]
    assert main(argv) == 1
    out = capsys.readouterr()
    assert out.out == ""  # failed fast: no table printed, then a failure
    assert "does not exist" in out.err
    assert str(target.parent) in out.err
    assert not target.parent.exists()


def test_unknown_image_format_is_an_error(
    training_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "--counters", str(training_job / "counters.csv")]
    assert main([*argv, "--plot", str(tmp_path / "out.xyz")]) == 1
    assert "unknown image format '.xyz'" in capsys.readouterr().err


def test_missing_matplotlib_says_how_to_install_it(
    training_job: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = ["analyze", "--counters", str(training_job / "counters.csv")]
    assert main([*argv, "--plot", str(tmp_path / "out.png")]) == 1
    assert "pip install 'commpulse[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "out.png").exists()


def test_plot_error_is_a_commpulse_error() -> None:
    assert issubclass(PlotError, ExportError)
