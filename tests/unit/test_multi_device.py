"""Recordings of a multi-rail GPU node: devices that step apart, rails that finish apart.

Found by a probe of 8-rail recordings (RDMA data counters in 4-byte words, 100 Hz polls with
1 ms of jitter): two 4-rail jobs read one confident T of neither (1.0 s and 1.5 s steps: T 3.0
s at confidence 0.95) and, with D 0.35 and 0.30, D 0.55 (a bottleneck alert on two healthy
jobs); a rail at half speed read D 0.32 where the step waited 0.6 of its time on the network;
a 1 s front-end file beside 100 Hz rails wiped T, B and D with no word; a rail that stopped
reporting cut the analysis to its first 29 s of 120 without a word.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.devices import DeviceSteps, in_step, step_groups
from agent.estimate import Estimate
from agent.rates import GridSeries

FS = 100.0
RAIL_RATE = 24e9  # bytes/s of one rail in a burst


def _bursts(t0: np.ndarray, t1: np.ndarray, starts: np.ndarray, length: float) -> np.ndarray:
    """Seconds of each poll interval [t0, t1) inside bursts [s, s + length)."""
    inside = np.zeros(t0.size)
    for s in starts:
        inside += np.clip(np.minimum(t1, s + length) - np.maximum(t0, s), 0.0, None)
    return inside


def _rails(
    path: Path,
    rails: list[tuple[float, float, float, float]],
    *,
    duration: float = 120.0,
    poll_s: float = 1.0 / FS,
    seed: int = 0,
    rx_share: float = 1.0,
) -> Path:
    """A counters CSV of InfiniBand rails: (period, burst length, offset, rate) per rail.

    Polls jittered by ~1 ms (a 100 Hz poll), data counters in 4-byte words as the kernel's
    ``port_xmit_data``, the receive side ``rx_share`` of it, a few KB/s of management traffic.
    """
    rng = np.random.default_rng(seed)
    times = np.arange(0.0, duration, poll_s) + rng.normal(0.0, 0.1 * poll_s, int(duration / poll_s))
    times = np.sort(times)
    t0, t1 = times[:-1], times[1:]
    cols: dict[str, np.ndarray] = {}
    for k, (period, length, offset, rate) in enumerate(rails):
        starts = np.arange(offset, duration + period, period)
        moved = rate * _bursts(t0, t1, starts, length) + 3e3 * (t1 - t0)
        words = np.concatenate(([0.0], np.cumsum(moved))) / 4.0 + 10**9 * (k + 1)
        cols[f"mlx5_{k}:1_port_xmit_data"] = np.floor(words).astype(np.int64)
        received = np.concatenate(([0.0], np.cumsum(rx_share * moved))) / 4.0 + 10**9 * (k + 2)
        cols[f"mlx5_{k}:1_port_rcv_data"] = np.floor(received).astype(np.int64)
    lines = ["time," + ",".join(cols)]
    for i, t in enumerate(times):
        lines.append(f"{t:.6f}," + ",".join(str(int(c[i])) for c in cols.values()))
    path.write_text("\n".join(lines) + "\n")
    return path


def _job(rails: int, period: float, duty: float, *, rate: float = RAIL_RATE) -> list[tuple]:
    return [(period, duty * period, 0.2, rate)] * rails


def test_rails_in_step_keep_the_sum_and_say_nothing(tmp_path: Path) -> None:
    result = analyze_files(counters=_rails(tmp_path / "c.csv", _job(8, 1.5, 0.3)))
    est = result.estimate
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    assert est.burst_bandwidth == pytest.approx(8 * RAIL_RATE, rel=0.02)
    assert len(result.extra["devices"]) == 8
    assert est.duty_cycle == pytest.approx(0.3, abs=0.01)
    assert not [w for w in est.warnings if "devices" in w]


@pytest.mark.parametrize(("second", "second_duty"), [(1.5, 0.25), (1.3, 0.30), (1.7, 0.30)])
def test_two_jobs_on_their_own_rails_show_the_busier_one_and_name_both(
    tmp_path: Path, second: float, second_duty: float
) -> None:
    """Four rails step at 1.0 s (D 0.35), four at another T: the sum read T = 3.0 s or 13 s
    at confidence 0.95, or D 0.55 over two jobs under 0.5."""
    path = _rails(tmp_path / "c.csv", _job(4, 1.0, 0.35) + _job(4, second, second_duty))
    est = analyze_files(counters=path).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.35, abs=0.02)
    assert est.burst_bandwidth == pytest.approx(4 * RAIL_RATE, rel=0.02)
    note = next(w for w in est.warnings if "devices step apart" in w)
    groups = dict(re.findall(r"((?:mlx5_\d:1, )*mlx5_\d:1) at T = ([0-9.]+) s", note))
    assert float(groups["mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1"]) == pytest.approx(1.0, rel=0.01)
    assert float(groups["mlx5_4:1, mlx5_5:1, mlx5_6:1, mlx5_7:1"]) == pytest.approx(
        second, rel=0.01
    )


def test_two_jobs_in_separate_files_are_told_apart_as_well(tmp_path: Path) -> None:
    a = _rails(tmp_path / "a.csv", _job(2, 1.0, 0.3), seed=1)
    b = _rails(tmp_path / "b.csv", _job(2, 1.5, 0.3, rate=2 * RAIL_RATE), seed=2)
    est = analyze_files(counters=[a, b]).estimate
    assert est.period_s == pytest.approx(1.5, rel=0.01)  # b's rails carry twice the bytes
    assert any("devices step apart" in w for w in est.warnings)


def test_a_slow_rail_keeps_the_step_waiting_and_d_counts_until_it_is_done(
    tmp_path: Path,
) -> None:
    """Rail 3 at half speed carries its share for 0.9 s where the others take 0.45 s."""
    rails = _job(8, 1.5, 0.3)
    rails[3] = (1.5, 0.9, 0.2, RAIL_RATE / 2)
    result = analyze_files(counters=_rails(tmp_path / "c.csv", rails))
    est = result.estimate
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    listed = {d["device"]: d for d in result.extra["devices"]}
    assert sorted(listed) == [f"mlx5_{k}:1" for k in range(8)]
    assert listed["mlx5_3:1"]["duty_cycle"] == pytest.approx(0.6, abs=0.02)
    assert listed["mlx5_3:1"]["burst_bandwidth_bytes_per_s"] == pytest.approx(
        RAIL_RATE / 2, rel=0.03
    )
    assert listed["mlx5_0:1"]["duty_cycle"] == pytest.approx(0.3, abs=0.02)
    assert est.duty_cycle == pytest.approx(0.6, abs=0.03)
    note = next(w for w in est.warnings if "longer than their sum" in w)
    assert "their own D: mlx5_3:1 0.60" in note


def test_channels_started_apart_count_from_the_first_start_to_the_last_end(
    tmp_path: Path,
) -> None:
    offsets = [0.0, 0.04, 0.02, 0.08, 0.03, 0.06, 0.07, 0.035]
    rails = [(1.5, 0.45, 0.2 + o, RAIL_RATE) for o in offsets]
    est = analyze_files(counters=_rails(tmp_path / "c.csv", rails)).estimate
    assert est.duty_cycle == pytest.approx((0.45 + 0.08) / 1.5, abs=0.015)


def test_a_coarsely_polled_file_beside_fine_ones_is_left_out_with_a_note(
    tmp_path: Path,
) -> None:
    """A front-end NIC read every second beside 100 Hz rails: everything read null."""
    fine = _rails(tmp_path / "rdma.csv", _job(4, 1.5, 0.3))
    slow = _rails(tmp_path / "frontend.csv", [(7.0, 2.0, 0.5, 1e9)], poll_s=1.0)
    est = analyze_files(counters=[fine, slow]).estimate
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.3, abs=0.01)
    assert est.burst_bandwidth == pytest.approx(4 * RAIL_RATE, rel=0.02)
    note = next(w for w in est.warnings if "more coarsely" in w)
    assert re.search(r"frontend\.csv: read every 1(\.0\d)? s, 10\dx more coarsely", note)
    assert "left out of T, B and D" in note


def _without_reads(path: Path, column: str, after: float) -> None:
    lines = path.read_text().splitlines()
    k = lines[0].split(",").index(column)
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if float(cells[0]) > after:
            cells[k] = ""
        out.append(",".join(cells))
    path.write_text("\n".join(out) + "\n")


def test_a_rail_that_stops_reporting_is_named_with_what_the_analysis_lost(
    tmp_path: Path,
) -> None:
    path = _rails(tmp_path / "c.csv", _job(8, 1.5, 0.3))
    for column in ("mlx5_5:1_port_xmit_data", "mlx5_5:1_port_rcv_data"):
        _without_reads(path, column, 30.0)
    est = analyze_files(counters=path).estimate
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    note = next(w for w in est.warnings if "not read for" in w)
    assert note.split(": ", 2)[1] == "mlx5_5:1_port_xmit_data, mlx5_5:1_port_rcv_data"
    assert "not read for 90 s of the 120 s recording" in note
    assert "mlx5_5:1 gone" in note


def test_a_file_that_ends_early_says_the_sum_covers_less(tmp_path: Path) -> None:
    a = _rails(tmp_path / "a.csv", _job(2, 1.5, 0.3), seed=1)
    b = _rails(tmp_path / "b.csv", _job(2, 1.5, 0.3), duration=80.0, seed=2)
    est = analyze_files(counters=[a, b]).estimate
    note = next(w for w in est.warnings if "summed where all of them were read" in w)
    assert "b.csv (0" in note
    assert "a.csv" not in note


def test_a_reset_is_reported_whichever_direction_is_shown(tmp_path: Path) -> None:
    """A driver reload resets one rail's transmit counter; the receive side is shown."""
    path = _rails(tmp_path / "c.csv", _job(2, 1.5, 0.3), rx_share=1.2)
    lines = path.read_text().splitlines()
    k = lines[0].split(",").index("mlx5_1:1_port_xmit_data")
    cells = [line.split(",") for line in lines[1:]]
    at = int(0.5 * len(cells))
    base = int(cells[at][k])
    for row in cells[at:]:
        row[k] = str(int(row[k]) - base + 5)
    path.write_text("\n".join([lines[0], *(",".join(r) for r in cells)]) + "\n")
    est = analyze_files(counters=path).estimate
    assert est.direction == "rx"
    assert "1 counter reset(s): those intervals were left out" in est.warnings


def _steps(name: str, period: float, rate: float, confidence: float = 0.9) -> DeviceSteps:
    est = Estimate(
        period_s=period,
        burst_bandwidth=None,
        duty_cycle=None,
        confidence=confidence,
        regime="training",
        network_on_ratio=None,
        nranks=None,
        collectives={},
    )
    return DeviceSteps(name, rate, est)


def test_step_groups_keep_whole_multiples_together_and_put_the_busiest_first() -> None:
    groups = step_groups(
        [
            _steps("a", 1.0, 1.0),
            _steps("b", 1.005, 1.0),
            _steps("c", 2.0, 1.0),  # 2x: one job's step or its rhythm, not told apart
            _steps("d", 1.5, 5.0),
            _steps("e", 3.3, 9.0, confidence=0.3),  # not timed
        ]
    )
    assert [sorted(s.name for s in g) for g in groups] == [["d"], ["a", "b", "c"]]


def _grid(rate: np.ndarray) -> GridSeries:
    return GridSeries(t0=0.0, dt=0.01, rate=rate, valid=np.isfinite(rate))


@pytest.mark.parametrize(
    ("shapes", "together"),
    [
        ([(1.5, 0.45, 0.0)] * 4, True),  # one job's rails, polled together
        ([(1.5, 0.45, 0.0)] * 3 + [(1.5, 0.9, 0.0)], False),  # a rail at half speed
        ([(1.0, 0.3, 0.0)] * 2 + [(1.5, 0.45, 0.0)] * 2, False),  # two jobs
        ([(1.5, 0.45, 0.0), (1.5, 0.45, 0.1)], False),  # channels 0.1 s apart
    ],
)
def test_in_step_tells_which_looks_need_each_device_estimated(
    shapes: list[tuple[float, float, float]], together: bool
) -> None:
    rng = np.random.default_rng(1)
    t = np.arange(0.0, 30.0, 0.01)
    devices = {}
    for k, (period, length, offset) in enumerate(shapes):
        on = ((t - offset) % period) < length
        rate = np.where(on, 24e9 * 0.45 / length, 3e3) * (1 + 0.02 * rng.standard_normal(t.size))
        devices[f"mlx5_{k}"] = {"tx": _grid(rate)}
    assert in_step(devices) is together
