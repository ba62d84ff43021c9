"""Exposed versus overlapped communication from network and GPU samples."""

from __future__ import annotations

import numpy as np
import pytest

from agent.separation import best_signal, choose_signal, gpu_windows, split_duty
from tests.signals import sample_bursts

FS = 100.0
DURATION = 60.0


def _gpu(compute: np.ndarray, interval: float, level: float = 0.85) -> tuple:
    """SM activity averaged over windows ending at each sample time."""
    ends = np.arange(interval, DURATION + 1e-9, interval)
    edges = np.concatenate(([0.0], ends))
    frac = np.diff(np.interp(edges, *_cum(compute))) / interval
    return ends, np.zeros(ends.size, dtype=np.int64), np.clip(level * frac + 0.02, 0, 1)


def _cum(intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grid = np.linspace(0, DURATION, 600_001)
    x = sample_bursts(np.column_stack((intervals, np.ones(len(intervals)))), 10_000, DURATION)
    return grid, np.concatenate(([0.0], np.cumsum(x) / 10_000))


def _steps(period: float, comm: float, overlap: float) -> tuple[np.ndarray, np.ndarray]:
    """Compute then comm; ``overlap`` of the comm happens during the end of compute."""
    starts = np.arange(0.0, DURATION, period)
    compute_end = starts + period - comm * (1 - overlap)
    compute = np.column_stack((starts, compute_end))
    comm_start = compute_end - comm * overlap
    net = np.column_stack((comm_start, comm_start + comm, np.ones(starts.size)))
    return compute, net


@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
def test_exposed_communication_matches_truth(overlap: float) -> None:
    period, comm = 2.0, 0.6
    compute, net = _steps(period, comm, overlap)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        rate, 0.0, 1.0 / FS, 0.0, 1.0, gpu_windows(t, g, v),
        signal="sm_active", shortest_phase_s=0.6,
    )  # fmt: skip
    exposed_truth = comm * (1 - overlap) / period
    assert split.exposed == pytest.approx(exposed_truth, abs=0.02)
    assert split.overlapped == pytest.approx(comm * overlap / period, abs=0.02)


def test_utilization_gpu_cannot_separate_and_says_why() -> None:
    compute, net = _steps(2.0, 0.6, 0.0)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        rate, 0.0, 1 / FS, 0.0, 1.0, gpu_windows(t, g, v), signal="util", shortest_phase_s=0.6
    )
    assert split.exposed is None
    assert not split.distinguishing
    assert split.reason is not None
    assert "NCCL" in split.reason


def test_too_coarse_gpu_samples_are_refused() -> None:
    compute, net = _steps(0.2, 0.06, 0.0)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        rate, 0.0, 1 / FS, 0.0, 1.0, gpu_windows(t, g, v),
        signal="sm_active", shortest_phase_s=0.06,
    )  # fmt: skip
    assert split.exposed is None
    assert split.reason is not None
    assert "cannot resolve" in split.reason


def test_signal_ranking_prefers_compute_specific_signals() -> None:
    assert best_signal({"util", "sm_active"}) == "sm_active"
    assert best_signal({"util", "tensor_active", "sm_active"}) == "tensor_active"
    assert best_signal({"util", "gr_engine_active"}) == "gr_engine_active"
    assert best_signal(set()) is None


def test_gpu_windows_per_gpu_and_missing_samples() -> None:
    t = np.array([0.1, 0.2, 0.3, 0.6, 0.1, 0.2])
    g = np.array([0, 0, 0, 0, 1, 1])
    v = np.array([0.5, np.nan, 0.5, 0.5, 0.1, 0.1])
    w = gpu_windows(t, g, v)
    assert w.interval_s == pytest.approx(0.1)
    # The sample after a gap does not claim the whole gap.
    assert float(np.max(w.end - w.start)) <= 0.2 + 1e-9
    assert set(w.gpu.tolist()) == {0, 1}


def test_exposed_communication_is_never_negative() -> None:
    """A network that never leaves its background (zero-mean noise around the off level)
    while the GPU idles: the windows' noise averaged to -5e-8, exported as a negative ratio."""
    rng = np.random.default_rng(5)
    rate = 1e6 + rng.normal(0.0, 1e4, int(FS * DURATION))  # noise around the off level
    rate[rate > 1e6] = 1e6 - (rate[rate > 1e6] - 1e6) * 1.001  # its mean a hair under it
    t = np.arange(0.1, DURATION + 1e-9, 0.1)
    gpu = np.where(np.arange(t.size) % 20 < 10, 0.02, 0.9)  # computing half the time
    split = split_duty(
        rate, 0.0, 1.0 / FS, 1e6, 2e9, gpu_windows(t, np.zeros(t.size, dtype=np.int64), gpu),
        signal="sm_active", shortest_phase_s=1.0,
    )  # fmt: skip
    assert split.exposed is not None
    assert split.exposed >= 0.0


def test_samples_on_two_clocks_name_both_spans() -> None:
    """Counters timed from boot beside GPU samples in epoch seconds: no split, and the reason
    gives both time spans and what to fix (it said only "do not overlap in time")."""
    compute, net = _steps(2.0, 0.6, 0.0)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        rate, 523_412.0, 1 / FS, 0.0, 1.0, gpu_windows(t + 1.79666e9, g, v),
        signal="sm_active", shortest_phase_s=0.6,
    )  # fmt: skip
    assert split.exposed is None
    assert split.reason is not None
    assert "network 523412.000 to 523472.000 s" in split.reason
    assert "GPU 1796660000.000" in split.reason
    assert "one clock" in split.reason


def test_a_tensor_pipe_that_never_works_gives_way_to_sm_activity() -> None:
    """An FP32 job (no tensor-core work): tensor_active ~0.03 while computing. Read as "the
    GPU never computes", every burst was exposed (D 0.45 against 0.30). sm_active is taken,
    and the estimate says why; a tensor pipe that works keeps its rank."""
    sm = np.where(np.arange(200) % 10 < 7, 0.85, 0.12)
    low_tensor = {"tensor_active": np.full(200, 0.03), "sm_active": sm, "util": np.ones(200)}
    name, note = choose_signal(low_tensor)
    assert name == "sm_active"
    assert note is not None
    assert "tensor_active" in note
    working = {**low_tensor, "tensor_active": np.where(sm > 0.5, 0.25, 0.0)}
    assert choose_signal(working) == ("tensor_active", None)
    # Neither shows compute: the ranking stands (nothing says which is right).
    assert choose_signal({"tensor_active": np.zeros(9), "sm_active": np.full(9, 0.02)})[0] == (
        "tensor_active"
    )


def test_a_signal_without_values_is_not_chosen() -> None:
    """sm_active all [N/A] (profiling off, a consumer GPU) beside util: sm_active was chosen
    and the estimate said "no GPU samples" although util had 9,600 of them."""
    name, note = choose_signal({"sm_active": np.full(50, np.nan), "util": np.ones(50)})
    assert (name, note) == ("util", None)
    assert choose_signal({"sm_active": np.full(5, np.nan)})[0] == "sm_active"  # says so later
    assert choose_signal({}) == (None, None)


@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("idle", [1, 4])
def test_idle_gpus_beside_the_job_are_left_out_of_the_split(overlap: float, idle: int) -> None:
    """A 4-GPU job on an 8-GPU node, or a spare GPU: pooled with the job's, the idle ones
    counted every burst as exposed (a fully overlapped job read D 0.20 with four idle)."""
    period, comm = 2.0, 0.6
    compute, net = _steps(period, comm, overlap)
    rate = sample_bursts(net, FS, DURATION)
    t, _, v = _gpu(compute, 0.1)
    gpus = 8
    times = np.tile(t, gpus)
    ids = np.repeat(np.arange(gpus), t.size)
    values = np.concatenate([v if k < gpus - idle else np.zeros(t.size) for k in range(gpus)])
    split = split_duty(
        rate, 0.0, 1.0 / FS, 0.0, 1.0, gpu_windows(times, ids, values),
        signal="sm_active", shortest_phase_s=0.6,
    )  # fmt: skip
    assert split.exposed == pytest.approx(comm * (1 - overlap) / period, abs=0.02)
    assert split.overlapped == pytest.approx(comm * overlap / period, abs=0.02)
    assert split.reason is not None
    assert f"GPU {', '.join(str(k) for k in range(gpus - idle, gpus))} never computed" in (
        split.reason
    )


def test_samples_stamped_in_whole_seconds_say_why_they_cannot_be_placed() -> None:
    """10 Hz samples stamped in whole seconds share their stamps: no window can be made, and
    the reason was "no GPU samples" beside 9,600 of them."""
    compute, net = _steps(2.0, 0.6, 0.0)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    windows = gpu_windows(np.floor(t), g, v)
    assert windows.stacked == 1
    split = split_duty(
        rate, 0.0, 1.0 / FS, 0.0, 1.0, windows, signal="sm_active", shortest_phase_s=0.6
    )
    assert split.exposed is None
    assert split.reason is not None
    assert "share their time stamps" in split.reason


@pytest.mark.parametrize("shift", [0.0, 0.3, 0.5, 1.0, -0.5])
def test_gpu_samples_on_another_clock_are_named(shift: float) -> None:
    """GPU samples stamped a second late read an exposed share of 0.30 as 0.00 ("all hidden")
    with no word. Their idle samples then fall where the network is silent, and shifted by
    part of a step they would fall on its bursts: the split says to check the clocks."""
    period, comm = 2.0, 0.9
    compute, net = _steps(period, comm, 1.0 / 3.0)
    rate = sample_bursts(net, FS, DURATION)
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        rate, 0.0, 1.0 / FS, 0.0, 1.0, gpu_windows(t + shift, g, v),
        signal="sm_active", shortest_phase_s=0.6, period_s=period,
    )  # fmt: skip
    if shift == 0.0:
        assert split.reason is None
        assert split.exposed == pytest.approx(0.3, abs=0.02)
    else:
        assert split.reason is not None
        assert "on one clock" in split.reason


def test_an_idle_spell_longer_than_the_burst_is_no_clock_offset() -> None:
    """Each 2 s step computes 0.9 s, waits 0.5 s for data with the network silent, then
    communicates 0.6 s exposed. No shift puts 1.1 s of idle samples on a 0.6 s burst: the
    split does not ask about the clocks (a live probe was asked), and says the step waits."""
    starts = np.arange(0.0, DURATION, 2.0)
    compute = np.column_stack((starts, starts + 0.9))
    net = np.column_stack((starts + 1.4, starts + 2.0, np.ones(starts.size)))
    t, g, v = _gpu(compute, 0.1)
    split = split_duty(
        sample_bursts(net, FS, DURATION), 0.0, 1.0 / FS, 0.0, 1.0, gpu_windows(t, g, v),
        signal="sm_active", shortest_phase_s=0.5, period_s=2.0,
    )  # fmt: skip
    assert split.exposed == pytest.approx(0.3, abs=0.02)
    assert split.reason is not None
    assert "one clock" not in split.reason
    assert "waits on something besides communication" in split.reason


def test_a_gpu_that_idles_without_communication_is_told() -> None:
    """Aligned samples, but each step also idles 0.4 s with the network silent (waiting on
    data): no shift explains it, and the split says the step waits on something else, while
    its exposed share stays right."""
    period, comm = 2.0, 0.6
    compute, net = _steps(period, comm, 0.0)
    holes = np.column_stack(
        (compute[:, 0], compute[:, 0] + 0.6, compute[:, 0] + 1.0, compute[:, 1])
    )
    gappy = np.concatenate((holes[:, :2], holes[:, 2:]))
    t, g, v = _gpu(gappy[np.argsort(gappy[:, 0])], 0.1)
    split = split_duty(
        sample_bursts(net, FS, DURATION), 0.0, 1.0 / FS, 0.0, 1.0, gpu_windows(t, g, v),
        signal="sm_active", shortest_phase_s=0.4, period_s=period,
    )  # fmt: skip
    assert split.exposed == pytest.approx(comm / period, abs=0.02)
    assert split.reason is not None
    assert "waits on something besides communication" in split.reason
