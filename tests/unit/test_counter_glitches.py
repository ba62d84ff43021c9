"""Single wrong reads and coarse time stamps in counter recordings.

One read of 0 (or a spike) in the middle of a 60 s recording was taken as a counter reset,
and the read after it as the counter's whole value in bytes: T, B and D were all lost. A
recorder that stamps whole seconds at 100 Hz lost 99 of every 100 rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.rates import glitch_reads
from agent.windows import CounterWindow
from collectors._base import CounterReading
from collectors.counters_csv import parse_counters_csv
from tests.signals import periodic_bursts, sample_bursts

FS = 100.0


def u64(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.uint64)


def test_a_read_off_the_trajectory_is_a_glitch_and_a_reset_or_wrap_is_not() -> None:
    assert glitch_reads(u64([100, 200, 0, 400, 500])).tolist() == [0, 0, 1, 0, 0]
    assert glitch_reads(u64([100, 200, 9_000_000, 400, 500])).tolist() == [0, 0, 1, 0, 0]
    assert glitch_reads(u64([100, 200, 200, 200])).tolist() == [0, 0, 0, 0]
    # A driver reload: back to 0 and counting up again, below where it was.
    assert not glitch_reads(u64([5000, 6000, 0, 300, 700])).any()
    # A 32-bit wrap.
    assert not glitch_reads(u64([2**32 - 300, 2**32 - 100, 50, 250])).any()


def _job_counter(duration: float = 60.0) -> np.ndarray:
    bursts, _ = periodic_bursts(1.0, 0.3, duration, rate=2e9, jitter=0.01, seed=3)
    rate = sample_bursts(bursts, FS, duration)
    return (np.concatenate(([0.0], np.cumsum(rate / FS))) + 1e12).astype(np.int64)


def _write(path: Path, times: list[str], values: np.ndarray) -> Path:
    rows = ["time,eth0_tx_bytes"] + [f"{t},{v}" for t, v in zip(times, values, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("bad", ["zero", "spike"])
def test_one_wrong_read_does_not_cost_the_recording_its_period(tmp_path: Path, bad: str) -> None:
    cum = _job_counter()
    times = [f"{i / FS:.6f}" for i in range(cum.size)]
    clean = analyze_files(counters=[_write(tmp_path / "clean.csv", times, cum)]).estimate
    cum[3000] = 0 if bad == "zero" else cum[3000] * 7
    est = analyze_files(counters=[_write(tmp_path / "bad.csv", times, cum)]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.005)
    assert est.period_s == pytest.approx(clean.period_s, rel=1e-3)
    assert est.burst_bandwidth == pytest.approx(2e9, rel=0.02)
    assert est.duty_cycle == pytest.approx(0.3, abs=0.01)
    assert any("1 read(s) off their counter's trajectory" in w for w in est.warnings)
    assert not any("reset" in w for w in est.warnings)


def test_the_live_window_takes_a_zero_read_for_a_glitch_not_a_burst() -> None:
    cum = _job_counter(10.0)
    cum[500] = 0
    window = CounterWindow(5000)
    for i, value in enumerate(cum):
        window.add(CounterReading(time_s=i / FS, values={"eth0_tx_bytes": int(value)}))
    assert (window.resets, window.glitches) == (0, 1)
    grid = window.grids()["tx"]
    assert float(np.nanmax(grid.rate)) <= 2e9 * 1.01  # not the counter's 1e12 bytes in 10 ms
    assert int(np.isnan(grid.rate).sum()) == 2  # the two intervals around the wrong read

    real = CounterWindow(100)  # a real reset (driver reload) stays a reset
    for i, value in enumerate([5000, 6000, 0, 300, 700]):
        real.add(CounterReading(time_s=i / FS, values={"eth0_tx_bytes": value}))
    assert (real.resets, real.glitches) == (1, 0)


def test_whole_second_stamps_at_100_hz_are_spread_over_each_second(tmp_path: Path) -> None:
    cum = _job_counter()
    times = [str(int(i / FS)) for i in range(cum.size)]
    est = analyze_files(counters=[_write(tmp_path / "coarse.csv", times, cum)]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.3, abs=0.03)
    assert any("rows of each stamp were spread evenly" in w for w in est.warnings)


def test_a_few_repeated_rows_are_left_out_and_counted() -> None:
    lines = ["time,x_tx_bytes"] + [f"{i},{10 * i}" for i in range(20)]
    lines.insert(5, lines[4])
    t = parse_counters_csv(lines)
    assert t.times.tolist() == [float(i) for i in range(20)]
    assert t.columns["x_tx_bytes"].tolist() == [10 * i for i in range(20)]
    assert "1 row(s) repeated the time of the row before and were left out" in t.warnings
