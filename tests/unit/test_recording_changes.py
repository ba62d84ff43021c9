"""Counter recordings whose bursts or columns change part of the way through.

Found by feeding `analyze` recordings made outside the project's simulator: congestion that
halved the bursts' height halfway was cut out of the estimate without a word; a rail whose
32-bit counter saturated read as a link gone quiet; a rail unreadable for 20 s had its bytes
spread flat over the gap; a management NIC that vanished after 30 s left 29 s of 120
analysed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.errors import InputFormatError
from agent.period import estimate_period
from tests.signals import periodic_bursts, sample_bursts

FS = 100.0


def _rate(period: float, duty: float, duration: float, rate: float, *, seed: int = 3) -> np.ndarray:
    bursts, _ = periodic_bursts(period, duty, duration, rate=rate, jitter=0.01, seed=seed)
    return sample_bursts(bursts, FS, duration)


def _counter(rate: np.ndarray, base: int = 10**12) -> np.ndarray:
    return (np.concatenate(([0.0], np.cumsum(rate / FS))) + base).astype(np.int64)


def _write(path: Path, columns: dict[str, list[object]]) -> Path:
    n = len(next(iter(columns.values())))
    rows = ["time," + ",".join(columns)]
    for i in range(n):
        cells = ["" if c[i] is None else str(c[i]) for c in columns.values()]
        rows.append(f"{i / FS:.6f}," + ",".join(cells))
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("newest_b", [5e9, 10e9])
def test_bursts_that_change_height_under_one_step_show_the_newest_and_say_so(
    tmp_path: Path, newest_b: float
) -> None:
    """The same bytes a 1 s step, first at one height then at the other (congestion, or its
    end): one window read as the taller bursts only, whichever half they were in."""
    first_b = 15e9 - newest_b
    first = _rate(1.0, 2.5e9 / first_b, 60.0, first_b, seed=1)
    newest = _rate(1.0, 2.5e9 / newest_b, 60.0, newest_b, seed=2)
    cum = _counter(np.concatenate((first, newest))).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.01)
    assert est.burst_bandwidth == pytest.approx(newest_b, rel=0.03)
    assert est.duty_cycle == pytest.approx(2.5e9 / newest_b, abs=0.03)
    note = next(w for w in est.warnings if "the bursts changed" in w)
    assert "shown: the newest part" in note


def test_steady_bursts_are_not_called_a_change(tmp_path: Path) -> None:
    cum = _counter(_rate(1.0, 0.3, 120.0, 10e9)).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    assert est.window_s > 110.0
    assert not any("the bursts changed" in w for w in est.warnings)


def test_a_saturated_32_bit_rail_is_named_and_its_zeros_are_not_read_as_quiet(
    tmp_path: Path,
) -> None:
    """Two IB rails in 4-byte words; rail 0's 32-bit counter stops at 2^32-1 after ~40 s.
    Its differences (0) halved the host's B from there and the recording read as a change."""
    words = _rate(1.0, 0.3, 120.0, 1e8)  # 400 MB/s per rail
    ok = _counter(words, base=2**40)
    stuck = np.minimum(_counter(words, base=2**32 - 1 - int(words[:4000].sum() / FS)), 2**32 - 1)
    path = _write(
        tmp_path / "ib.csv",
        {"mlx5_0_port_xmit_data": stuck.tolist(), "mlx5_1_port_xmit_data": ok.tolist()},
    )
    est = analyze_files(counters=[path]).estimate
    assert est.burst_bandwidth == pytest.approx(8e8, rel=0.03)
    assert est.period_s == pytest.approx(1.0, rel=0.01)
    note = next(w for w in est.warnings if "stuck at 2^32-1" in w)
    assert "mlx5_0_port_xmit_data from 39.4" in note
    assert not any("the bursts changed" in w for w in est.warnings)


def test_counters_saturated_throughout_are_no_idle_host(tmp_path: Path) -> None:
    flat = [2**32 - 1] * 6001
    path = _write(tmp_path / "ib.csv", {"port_xmit_data": flat, "port_rcv_data": flat})
    est = analyze_files(counters=[path]).estimate
    assert est.regime == "unknown"
    assert any("stuck at 2^32-1" in w for w in est.warnings)


def test_a_rail_unreadable_for_20_s_leaves_a_hole_not_flat_bytes(tmp_path: Path) -> None:
    """Spread over the gap, the rail's bytes made the sum's bursts 35 % lower there."""
    rate = _rate(1.0, 0.3, 120.0, 10e9)
    a = _counter(rate).tolist()
    b: list[object] = list(_counter(rate, base=10**11).tolist())
    b[5000:7000] = [None] * 2000  # 'N/A' from 50 s to 70 s
    path = _write(tmp_path / "c.csv", {"mlx5_0_tx_bytes": a, "mlx5_1_tx_bytes": b})
    est = analyze_files(counters=[path]).estimate
    assert est.burst_bandwidth == pytest.approx(20e9, rel=0.02)
    assert est.duty_cycle == pytest.approx(0.3, abs=0.02)
    assert not any("the bursts changed" in w for w in est.warnings)


@pytest.mark.parametrize("span", [(0, 3000), (9000, 12001)])
def test_a_minor_nic_read_for_part_of_the_recording_is_left_out_not_the_recording(
    tmp_path: Path, span: tuple[int, int]
) -> None:
    """A management NIC read for 30 s only (gone, or plugged in late) cut the analysis to its
    30 s; it carries 1 % of the bytes, so it is left out, and a note names it."""
    job = _counter(_rate(1.0, 0.3, 120.0, 10e9)).tolist()
    mgmt: list[object] = [None] * len(job)
    mgmt[span[0] : span[1]] = (10**9 + np.arange(span[1] - span[0]) * 10**6).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": job, "eth1_tx_bytes": mgmt})
    est = analyze_files(counters=[path]).estimate
    assert est.window_s > 110.0
    assert est.burst_bandwidth == pytest.approx(10e9, rel=0.02)
    assert any(
        "left out columns of little traffic" in w and "eth1_tx_bytes" in w for w in est.warnings
    )


def test_a_rail_read_for_part_of_the_recording_stays_in_the_sum(tmp_path: Path) -> None:
    """A rail carrying half the host's bytes is not left out (B would halve): the analysis
    keeps the stretch where both rails were read."""
    rate = _rate(1.0, 0.3, 120.0, 10e9)
    a = _counter(rate).tolist()
    b: list[object] = list(_counter(rate, base=10**11).tolist())
    b[4000:] = [None] * (len(b) - 4000)
    path = _write(tmp_path / "c.csv", {"mlx5_0_tx_bytes": a, "mlx5_1_tx_bytes": b})
    est = analyze_files(counters=[path]).estimate
    assert est.burst_bandwidth == pytest.approx(20e9, rel=0.02)
    assert not any("left out columns" in w for w in est.warnings)


@pytest.mark.parametrize("ratio", [0.2, 0.4])
def test_a_lower_tier_of_the_steps_bursts_is_not_taken_for_background(
    tmp_path: Path, ratio: float
) -> None:
    """Each 1.5 s step: an AllReduce at 20 GB/s for 0.25 s, then an AllGather at a fraction
    of it for 0.15 s. Under the two levels' midpoint, the AllGather counted as background:
    0.9 GB/s of it, bytes per step 22 % low. Folded at the step, the quiet phase is 0."""
    big, _ = periodic_bursts(1.5, 0.25 / 1.5, 120.0, rate=20e9, jitter=0.0, seed=1)
    small = big.copy()
    small[:, 0] = big[:, 0] + 0.6
    small[:, 1] = small[:, 0] + 0.15
    small[:, 2] = ratio * 20e9
    rate = sample_bursts(np.vstack((big, small)), FS, 120.0)
    cum = _counter(rate).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    step_bytes = 20e9 * 0.25 + ratio * 20e9 * 0.15
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    assert est.burst_bandwidth == pytest.approx(20e9, rel=0.02)
    assert est.bytes_per_iteration == pytest.approx(step_bytes, rel=0.02)
    assert est.background_bandwidth == pytest.approx(0.0, abs=0.01 * 20e9)
    # D by bytes: the step's bytes at B over T.
    assert est.duty_cycle == pytest.approx(step_bytes / 20e9 / 1.5, abs=0.01)


def test_an_ethtool_dump_counts_a_ports_bytes_once(tmp_path: Path) -> None:
    """``ethtool -S`` of an mlx5 port: the _phy counter counts every byte, the kernel's, the
    priority's and RoCE's counters count parts of them. Summed, B read 3x. A second NIC
    without a _phy counter still counts."""
    roce = _counter(_rate(1.0, 0.3, 120.0, 10e9))
    other = _counter(_rate(1.0, 0.3, 120.0, 1e9, seed=4), base=10**10)
    small = (10**9 + np.arange(roce.size) * 10**4).tolist()
    cols: dict[str, list[object]] = {
        "eth0_tx_bytes": small,
        "eth0_tx_bytes_phy": (roce + np.asarray(small)).tolist(),
        "eth0_tx_prio3_bytes": roce.tolist(),
        "eth0_tx_vport_rdma_unicast_bytes": roce.tolist(),
        "eth1_tx_bytes": other.tolist(),
    }
    est = analyze_files(counters=[_write(tmp_path / "ethtool.csv", cols)]).estimate
    assert est.burst_bandwidth == pytest.approx(11e9, rel=0.03)
    note = next(w for w in est.warnings if "_phy counter" in w)
    assert "eth0_tx_prio3_bytes" in note
    assert "eth1_tx_bytes" not in note


@pytest.mark.parametrize("per_second", [False, True])
def test_per_interval_bytes_or_rates_are_refused_as_not_cumulative(
    tmp_path: Path, per_second: bool
) -> None:
    """A column of bytes per poll (or per second), not a cumulative counter: it "resets" once
    a step, 1 % of the reads here, which passed the 5 % bar without a word; then, with a
    word, a confident T beside a B 25x too high and D 0.04 for 0.6."""
    per_poll = _rate(1.0, 0.3, 120.0, 10e9) / (1.0 if per_second else FS)
    path = _write(tmp_path / "rates.csv", {"eth0_tx_bytes": [0, *per_poll.astype(np.int64)]})
    with pytest.raises(InputFormatError, match="look like rates") as err:
        analyze_files(counters=[path])
    assert "cumulative counters" in str(err.value)


def test_two_driver_reloads_are_not_rates(tmp_path: Path) -> None:
    cum = _counter(_rate(1.0, 0.3, 120.0, 10e9))
    cum[4000:] -= cum[4000] - 5_000
    cum[8000:] -= cum[8000] - 7_000
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum.tolist()})
    est = analyze_files(counters=[path]).estimate
    assert est.burst_bandwidth == pytest.approx(10e9, rel=0.02)
    assert not any("look like rates" in w for w in est.warnings)


def _slowed_bursts(slow: float, share: float, *, seed: int = 7) -> np.ndarray:
    """(start, end, rate) of 300 s of steps of fixed bytes (0.7 s at 25 GB/s after 1.3 s of
    compute), whose collective ran at ``slow`` of the rate on a random ``share`` of them
    (flows that collide on one path) and so lasted longer."""
    rng = np.random.default_rng(seed)
    rate, full_s, t = 25e9, 0.7, 0.3
    bursts = []
    while t < 300.0:
        factor = slow if rng.random() < share else 1.0
        start = t + 1.3 * (1.0 + 0.02 * rng.standard_normal())
        bursts.append((start, start + full_s / factor, factor * rate))
        t = bursts[-1][1]
    return np.asarray(bursts)


def _slowed_steps(slow: float, share: float, *, seed: int = 7) -> tuple[np.ndarray, float, float]:
    """(100 Hz rates, link-busy share, mean step) of :func:`_slowed_bursts`."""
    b = _slowed_bursts(slow, share, seed=seed)
    inside = b[b[:, 1] <= 300.0]
    busy = float((inside[:, 1] - inside[:, 0]).sum() / inside[-1, 1])
    return sample_bursts(b, FS, 300.0), busy, float(np.diff(inside[:, 0]).mean())


@pytest.mark.parametrize("slow", [0.4, 0.5, 0.65])
def test_steps_whose_collective_ran_slower_at_random_keep_their_step_and_busy_time(
    tmp_path: Path, slow: float
) -> None:
    """Every step moves the same bytes, but on a random half of the steps the collective runs
    at ``slow`` of the link rate (flows that collide on one path) and lasts longer. The slower
    bursts fell in with the background (4.7 GB/s of it under 25 GB/s bursts): T 15 % short,
    the full-rate steps' length, and D 0.13 for a link busy 45 % of the time; here (no
    background, exact polls) no T at all. At 0.65 the lag of two steps stood clearer than
    either single step's (the two-step spans pile up at one sum, the single steps split in
    two): T read twice the step."""
    rate, full_s = 25e9, 0.7
    x, busy, mean_step = _slowed_steps(slow, 0.5)
    cum = _counter(x).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(mean_step, rel=0.015)
    assert est.duty_cycle == pytest.approx(busy, abs=0.03)
    assert est.background_bandwidth == pytest.approx(0.0, abs=0.01 * rate)
    assert est.bytes_per_iteration == pytest.approx(full_s * rate, rel=0.03)


@pytest.mark.parametrize("slow", [0.4, 0.5])
def test_a_third_of_the_steps_slowed_keeps_the_mean_step(tmp_path: Path, slow: float) -> None:
    """The slow collective on a random third of the steps. At 0.4 its bursts stayed under the
    edges' levels (2-means put the two heights in one on cluster whose level lay between
    them): the full-rate steps alone timed T, 14 % short. At 0.5 every burst was found, but
    their mean step was rejected as irregular against the commonest step's clear comb: no
    period. T is the mean step, D the link's busy share."""
    x, busy, mean_step = _slowed_steps(slow, 1.0 / 3.0)
    cum = _counter(x).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(mean_step, rel=0.01)
    assert est.duty_cycle == pytest.approx(busy, abs=0.03)


@pytest.mark.parametrize(("slow", "fewest"), [(0.5, 22), (0.4, 13)])
def test_windows_of_steps_slowed_at_random_find_their_mean_step_before_a_lock(
    slow: float, fewest: int
) -> None:
    """40 s windows (a live window of 16-odd steps) of steps slowed at random, each on its
    own as before a lock. Steps of 2.0 or 2.7 s smeared the lags of one and two steps, and
    the comb peaked at four or five of them, where each burst is a fraction of a period: the
    equal bursts were never timed at their own mean step, and 7 to 18 of 25 windows had no
    period at all (live, the half-rate stream of bench/alert_gate.py lost its lock every
    minute and took a minute to find it again)."""
    bursts = _slowed_bursts(slow, 0.5)
    x = sample_bursts(bursts, FS, 300.0)
    right = wrong = 0
    for start in np.arange(0.0, 250.0, 10.0):
        found = estimate_period(x[int(start * FS) : int((start + 40.0) * FS)], 1.0 / FS)
        inside = bursts[(bursts[:, 0] >= start) & (bursts[:, 1] <= start + 40.0), 0]
        if found.period_s is None:
            continue
        if found.period_s == pytest.approx(float(np.diff(inside).mean()), rel=0.05):
            right += 1
        else:
            wrong += 1  # the lag at the commonest (full-rate) step, as before
    assert right >= fewest
    assert wrong <= 1


def _polled(path: Path, times: np.ndarray, period: float = 1.0, duty: float = 0.35) -> Path:
    """A 2 GB/s square wave's cumulative bytes read at ``times``."""
    k, phase = np.divmod(times, period)
    cum = 2e9 * (k * duty * period + np.minimum(phase, duty * period))
    cum = np.maximum.accumulate(np.round(cum))  # float noise at an edge must not go back
    rows = [f"{t:.6f},{int(c)}" for t, c in zip(times, cum, strict=True)]
    path.write_text("\n".join(["time,x_tx_bytes", *rows]) + "\n")
    return path


@pytest.mark.parametrize("fine_first", [True, False])
def test_a_recording_polled_at_two_rates_is_read_where_the_polls_are_finest(
    tmp_path: Path, fine_first: bool
) -> None:
    """60 s at 100 Hz and 60 s at 10 Hz in one file: gridded at 10 ms, the slower part's
    bursts were spread into ramps and D read 0.46 against 0.35; the other way round, the
    first 60 s were silently dropped. The finest-polled part is analysed, and said."""
    fine, slow = np.arange(6000) / 100, np.arange(600) / 10
    times = np.r_[fine, 60 + slow] if fine_first else np.r_[slow, 60 + fine]
    est = analyze_files(counters=[_polled(tmp_path / "two-rates.csv", times)]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.35, abs=0.02)
    note = next(w for w in est.warnings if "every 0.1 s in 50% of it" in w)
    assert ("only 0-60 s" in note) if fine_first else ("only 60-119.99 s" in note)


def test_missed_polls_and_jitter_are_no_change_of_poll_rate(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    times = np.cumsum(0.01 + rng.normal(0, 0.001, 12000))
    times = times[rng.random(times.size) >= 0.02]  # 2 % of the polls missed, at random
    est = analyze_files(counters=[_polled(tmp_path / "jitter.csv", times)]).estimate
    assert est.duty_cycle == pytest.approx(0.35, abs=0.02)
    assert not any("the polls came every" in w for w in est.warnings)


def test_a_job_right_after_another_is_read_without_the_others_steps(tmp_path: Path) -> None:
    """1 s steps for 300 s, then 3.2 s steps with no pause between: the piece the change fell
    in held some of each, read near the newer period and joined its run, whose T read 6 %
    short (3.002 s in a 1 h recording) at confidence 0.995. It is left out of the run."""
    first = _rate(1.0, 0.3, 300.0, 10e9, seed=1)
    newest = _rate(3.2, 0.2, 600.0, 5e9, seed=2)
    cum = _counter(np.concatenate((first, newest))).tolist()
    path = _write(tmp_path / "c.csv", {"eth0_tx_bytes": cum, "eth0_rx_bytes": cum})
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(3.2, rel=0.003)
    assert est.burst_bandwidth == pytest.approx(5e9, rel=0.02)
    assert est.duty_cycle == pytest.approx(0.2, abs=0.01)
    assert any("the step time changed" in w for w in est.warnings)


@pytest.mark.parametrize(("unit", "factor"), [("kB", 1e3), ("KiB", 1024.0), ("MB", 1e6)])
def test_counters_in_kilo_or_megabytes_are_read_in_their_units(
    tmp_path: Path, unit: str, factor: float
) -> None:
    """A loop that logged kB read B 1000x low; MB read "idle", with no word."""
    rng = np.random.default_rng(3)
    t = np.arange(0.0, 60.0, 0.01)
    moved = np.where((t % 1.5) < 0.45, 24e9, 1e3) * 0.01 * (1 + 0.01 * rng.standard_normal(t.size))
    count = np.floor(np.cumsum(moved) / factor).astype(np.int64)
    lines = [f"time,tx_{unit},rx_{unit}"] + [
        f"{a:.2f},{c},{c}" for a, c in zip(t, count, strict=True)
    ]
    path = tmp_path / "c.csv"
    path.write_text("\n".join(lines) + "\n")
    est = analyze_files(counters=path).estimate
    assert est.burst_bandwidth == pytest.approx(24e9, rel=0.03)
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    assert any("units their names give" in w for w in est.warnings)


def test_rdma_statistic_event_columns_are_no_bytes(tmp_path: Path) -> None:
    """`rdma statistic show` counts requests and events: out_of_sequence was read as a tx
    byte counter for its "out", and the file as an idle host."""
    cum = _counter(_rate(1.0, 0.3, 30.0, 1e3)).tolist()
    path = _write(
        tmp_path / "rdma.csv",
        {"mlx5_0_rx_write_requests": cum, "mlx5_0_out_of_sequence": cum, "mlx5_0_np_cnp_sent": cum},
    )
    with pytest.raises(InputFormatError, match="no column counts bytes"):
        analyze_files(counters=[path])
