"""analyze --pcap on what real captures look like: stalls inside bursts, stray frames far
from the job, sparse super-frames, cooked captures of several interfaces.

The captures are real-format nanosecond pcaps written by the simulator's RoCEv2 writer
(Ethernet/IPv4/UDP/BTH headers, original lengths), each with a known T, D and B.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.cli import main
from agent.simulator.pcap_writer import write_roce_pcap
from tests.signals import pipeline_stage

T, DUTY, RATE = 1.0, 0.3, 20e6  # 1 s steps, 0.3 s of each at 20 MB/s
CYCLES = 12


def _bursts(pieces: list[tuple[float, float]] | None = None) -> list[tuple[float, float, float]]:
    """(start, end, rate) of every burst, each made of ``pieces`` (offsets within the burst)."""
    pieces = pieces or [(0.0, DUTY)]
    return [(k * T + a, k * T + b, RATE) for k in range(CYCLES) for a, b in pieces]


def _write(path: Path, bursts: list[tuple[float, float, float]], **kw: Any) -> Path:
    write_roce_pcap(path, np.array(bursts), np.empty((0, 3)), start_time_s=1.78e9, **kw)
    return path


def _analyze(capsys: pytest.CaptureFixture[str], *paths: Path) -> dict[str, Any]:
    capsys.readouterr()
    args = [a for p in paths for a in ("--pcap", str(p))]
    assert main(["analyze", *args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _check(out: dict[str, Any], duty: float = DUTY) -> None:
    assert out["period_s"] == pytest.approx(T, rel=0.005)
    assert out["duty_cycle"] == pytest.approx(duty, abs=0.03)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(RATE, rel=0.1)


def test_bursts_with_millisecond_stalls_still_have_a_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A busy sender stalls for 1-3 ms some 8 times a burst, at random (as a loaded VM did in
    # a real veth capture): at fine bins each burst falls into pieces, which used to read as
    # "bursts repeat too irregularly" (no T, regime idle).
    rng = np.random.default_rng(7)
    bursts, stalled = [], 0.0
    for k in range(CYCLES):
        starts = np.sort(rng.uniform(0.01, DUTY - 0.01, 8))
        ends = starts + rng.uniform(0.001, 0.003, 8)
        edges = [0.0, *np.column_stack([starts, ends]).ravel().tolist(), DUTY]
        bursts += [
            (k * T + a, k * T + b, RATE)
            for a, b in zip(edges[::2], edges[1::2], strict=True)
            if b > a
        ]
        stalled += float(np.minimum(ends, np.append(starts[1:], DUTY)).sum() - starts.sum())
    out = _analyze(capsys, _write(tmp_path / "stalls.pcap", bursts))
    _check(out, duty=DUTY - stalled / CYCLES)
    assert out["capture"]["bin_s"] <= 0.002  # the stalls span whole bins


def test_stray_frames_long_before_and_after_the_job_leave_t_and_d(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ARP/LLDP-like frames 10 s before and 30 s after the traffic: the window spans 52 s.
    stray = [(-10.0, -9.9999, 1e6), (CYCLES * T + 30.0, CYCLES * T + 30.0001, 1e6)]
    out = _analyze(capsys, _write(tmp_path / "stray.pcap", stray + _bursts()))
    _check(out)


def test_sparse_super_frames_get_bins_that_hold_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 64 kB TSO/GRO frames at 20 MB/s: one every 3.2 ms, so most 1 ms bins were empty and
    # every frame was a burst of its own (D 0.03, B 7x too high).
    out = _analyze(capsys, _write(tmp_path / "tso.pcap", _bursts(), frame_bytes=65_000))
    _check(out)
    assert out["capture"]["bin_s"] >= 0.02  # 8 frames of 3.2 ms, as a 1-2-5 step


def test_a_capture_too_long_for_its_bins_is_binned_on_its_newest_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A day-long capture of 1 s steps was binned at 0.5 s to fit 2^18 bins: "bursts of about
    # a poll", no T. Bins stay as fine as the frames allow (up to 10 ms) and the newest 2^20
    # of them are binned. Here the same at a small scale: 2^10 bins, at most 2^13.
    from agent import analyze

    monkeypatch.setattr(analyze, "PCAP_MAX_BINS", 2**10)
    monkeypatch.setattr(analyze, "PCAP_MOST_BINS", 2**13)
    bursts = [(k * T, k * T + DUTY, RATE) for k in range(600)]
    out = _analyze(capsys, _write(tmp_path / "long.pcap", bursts, frame_bytes=65_000))
    _check(out)
    assert out["capture"]["bin_s"] == pytest.approx(0.05)  # 8 frames 3.25 ms apart
    assert out["capture"]["packet_rate_per_s"] == pytest.approx(
        out["capture"]["packets"] / (599 * T + DUTY), rel=0.01
    )
    assert any("newest 0.11 h in 50 ms bins" in w for w in out["warnings"])


@pytest.mark.parametrize("seed", range(3))
def test_transfers_about_two_bins_long_are_read_on_finer_bins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """A pipeline stage's micro-batches: 8 transfers of 21 ms at 50 MB/s a 0.76 s step, 15-30
    ms apart, in 64 kB super-frames (20 ms bins). Every bin mixed a transfer with a gap: B read
    26 MB/s and D 0.42 (a real capture of such a job: 24.3 and 0.45). The 10 ms bins read the
    wire, and say why."""
    rows = pipeline_stage(np.random.default_rng(seed), (0.015, 0.03))
    out = _analyze(capsys, _write(tmp_path / "pipe.pcap", rows.tolist(), frame_bytes=65_000))
    assert out["period_s"] == pytest.approx(0.76, rel=0.005)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(50e6, rel=0.05)
    assert out["duty_cycle"] == pytest.approx(8 * 0.021 / 0.76, abs=0.02)
    assert out["bytes_per_iteration"] == pytest.approx(8 * 0.021 * 50e6, rel=0.02)
    assert out["capture"]["bin_s"] == pytest.approx(0.01)
    assert any("10 ms bins are used" in w for w in out["warnings"])


def _udp_frame(src_port: int) -> bytes:
    """The first 42 bytes of an Ethernet/IPv4/UDP frame from this host to its peer."""
    eth = bytes.fromhex("0200000000020200000000010800")
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))  # fmt: skip
    return eth + ip + struct.pack("!HHHH", src_port, 9000, 8, 0)


def test_small_frames_between_the_super_frames_do_not_shrink_the_bins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A TCP transfer in both directions (DDP over gloo on a veth): the host's 65 kB GSO frames
    # go out with twice as many small frames (pure ACKs) between them. Spaced by all frames,
    # the bins were 2 ms and swung between one and two super-frames: 18 "bursts" a step.
    big, small = _udp_frame(5000), _udp_frame(5001)
    spacing = 65_000 / RATE
    records = []
    for start, end, _ in _bursts():
        for t in np.arange(start, end, spacing).tolist():
            records += [
                (t, big, 65_000),
                (t + spacing / 3, small, 80),
                (t + 2 * spacing / 3, small, 80),
            ]
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 96, 1))
    for t, frame, orig in records:
        sec, ns = divmod(round((1.78e9 + t) * 1e9), 1_000_000_000)
        out += struct.pack("<IIII", sec, ns, len(frame), orig) + frame
    path = tmp_path / "gso.pcap"
    path.write_bytes(bytes(out))
    got = _analyze(capsys, path)
    _check(got)
    assert got["capture"]["bin_s"] >= 0.02
    assert got["bursts_per_period"] == pytest.approx(1.0, abs=0.2)


def test_truncated_file_is_named_and_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "cut.pcap", _bursts())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])  # cut inside the last record
    out = _analyze(capsys, path)
    assert out["capture"]["truncated_files"] == [str(path)]
    assert any(w.startswith(f"{path}: ") and "ends inside" in w for w in out["warnings"])
    _check(out)
