"""A recording that holds several jobs one after the other, analysed offline.

Built from two real counter recordings (tests/fixtures/counters): a DDP job (0.57 s steps,
22 MB per step) and, after 6 s of an idle counter, an FSDP job (1.34 s steps, 38 MB per step).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.errors import InputFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "counters"


def _recording(name: str) -> tuple[np.ndarray, np.ndarray, float]:
    with gzip.open(FIXTURES / f"{name}.csv.gz", "rt") as f:
        data = np.loadtxt(f, delimiter=",", skiprows=1)
    truth = json.loads((FIXTURES / f"{name}.truth.json").read_text())
    ends = np.asarray(truth["step_end_s"])
    step = float(np.diff(ends[int(truth["warmup_steps"]) :]).mean())
    return data[:, 0], data[:, 1:].astype(np.int64), step


def _write(path: Path, parts: list[tuple[np.ndarray, np.ndarray]], idle_s: float) -> None:
    """The parts one after another, each a recording's polls, with ``idle_s`` of polls of an
    unchanging counter between them; the counters continue across (one interface)."""
    rows: list[str] = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    t_off, base = 0.0, np.zeros(2, dtype=np.int64)
    for k, (times, cols) in enumerate(parts):
        t = times - times[0] + t_off
        c = cols - cols[0] + base
        rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t, c, strict=True)]
        t_off, base = float(t[-1]), c[-1]
        if k < len(parts) - 1:
            for i in range(1, round(idle_s / 0.01) + 1):
                rows.append(f"{t_off + 0.01 * i:.6f},{base[0]},{base[1]}")
            t_off += idle_s
    path.write_text("\n".join(rows) + "\n")


def test_two_jobs_back_to_back_are_not_read_as_one(tmp_path: Path) -> None:
    """Read as one series, two real jobs back to back gave a period of neither (1.57 s against
    0.81 and 1.43 s; here: a mix too) and bytes per step of neither. The job that moved the
    most bytes is shown, and a warning names both."""
    ddp_t, ddp_c, ddp_step = _recording("ddp-gloo-commbound")
    fsdp_t, fsdp_c, fsdp_step = _recording("fsdp-gloo-steady")
    path = tmp_path / "two-jobs.csv"
    _write(path, [(ddp_t, ddp_c), (fsdp_t, fsdp_c)], idle_s=6.0)
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(fsdp_step, rel=0.03)
    assert est.bytes_per_iteration == pytest.approx(37.9e6, rel=0.05)
    note = next(w for w in est.warnings if "jobs one after the other" in w)
    assert f"{ddp_step:.2g}" in note or "T 0.5" in note


@pytest.mark.parametrize("name", ["ddp-gloo-commbound", "fsdp-gloo-steady"])
def test_a_job_and_its_pause_stay_one_job(tmp_path: Path, name: str) -> None:
    """The same job on both sides of a 6 s silence (a checkpoint) is one job. Read across the
    silence, the comm-bound DDP job had no period at all; then its bigger part shows."""
    t, c, step = _recording(name)
    half = t.size // 2
    path = tmp_path / "pause.csv"
    _write(path, [(t[:half], c[:half]), (t[half:], c[half:])], idle_s=6.0)
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(step, rel=0.03)
    assert not any("jobs one after the other" in w for w in est.warnings)


def _changing_job(
    path: Path, steps: list[tuple[float, float]], *, jitter: float, seed: int
) -> float:
    """A counters CSV (100 Hz polls) of one job without a pause whose step time changes: each
    ``(T, seconds)`` in turn, bursts of 0.3·T at 50 MB/s. Returns the realised mean of the last
    stretch's steps."""
    from agent.simulator.sampling import Cumulative
    from tests.signals import periodic_bursts

    parts, t0, last = [], 0.0, 0.0
    for k, (period, seconds) in enumerate(steps):
        b, last = periodic_bursts(period, 0.3, seconds, jitter=jitter, seed=seed + k, phase=0.0)
        b = b[b[:, 0] < seconds]
        b[:, :2] += t0
        parts.append(b)
        t0 = float(b[-1, 0]) + period  # the next stretch starts where this one's step ends
    bursts = np.concatenate(parts)
    times = np.arange(0.0, t0 + 1.0, 0.01)
    cum = Cumulative(bursts[:, :2], bursts[:, 2] * 50e6).at(times)
    rows = ["time,eth0_rx_bytes,eth0_tx_bytes"]
    rows += [f"{t:.4f},0,{int(c)}" for t, c in zip(times, cum, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return last


def _listed_periods(warnings: tuple[str, ...]) -> list[float]:
    """The periods the step-change warning names, oldest first."""
    note = next(w for w in warnings if "step time changed" in w)
    return [float(v) for v in re.findall(r"T ([0-9.]+) s", note)]


@pytest.mark.parametrize(
    ("steps", "seed"),
    [
        ([(1.0, 40.0), (1.3, 40.0)], 1),
        ([(1.3, 40.0), (1.0, 40.0)], 2),
        ([(0.5, 30.0), (0.8, 30.0)], 3),
    ],
)
def test_a_change_of_step_time_shows_the_newest_step_and_says_so(
    tmp_path: Path, steps: list[tuple[float, float]], seed: int
) -> None:
    """One job, no pause, whose step time changes halfway: the newest step time is shown (as
    the live agent shows it at the recording's end) and a warning names both."""
    path = tmp_path / "change.csv"
    newest = _changing_job(path, steps, jitter=0.02, seed=seed)
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(newest, rel=0.02)
    assert est.regime != "inference"
    listed = _listed_periods(est.warnings)
    assert listed[0] == pytest.approx(steps[0][0], rel=0.03)
    assert listed[-1] == pytest.approx(newest, rel=0.02)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_jittery_job_of_one_step_time_is_not_split(tmp_path: Path, seed: int) -> None:
    """10 % step spread over 80 s: its pieces' periods wander by a few per cent, which is no
    change of step time."""
    path = tmp_path / "steady.csv"
    _changing_job(path, [(1.0, 80.0)], jitter=0.10, seed=seed)
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.05)
    assert not any("step time changed" in w for w in est.warnings)


def test_a_real_job_whose_batch_doubled_reads_as_its_new_step() -> None:
    """Real DDP, batch 1024 then 2048 after 35 s: steps of 0.41 s, then 0.56 s. Over the whole
    recording no period; it was called inference."""
    truth = json.loads((FIXTURES / "ddp-gloo-stepchange.truth.json").read_text())
    ends = np.asarray(truth["step_end_s"])
    changed = int(truth["changed_at_step"])
    before = float(np.diff(ends[truth["warmup_steps"] : changed]).mean())
    after = float(np.diff(ends[changed - 1 :]).mean())
    est = analyze_files(counters=[FIXTURES / "ddp-gloo-stepchange.csv.gz"]).estimate
    assert est.regime == "training"
    assert est.period_s == pytest.approx(after, rel=0.02)
    listed = _listed_periods(est.warnings)
    assert listed[0] == pytest.approx(before, rel=0.03)
    assert listed[-1] == pytest.approx(after, rel=0.02)


def test_real_inference_traffic_has_no_period_and_no_change() -> None:
    """Equal 2 MiB replies at Poisson times (a real request/response exchange): no period over
    the whole, none in its pieces, no change of step time."""
    est = analyze_files(counters=[FIXTURES / "inference-gloo-poisson.csv.gz"]).estimate
    assert est.period_s is None
    assert est.regime == "inference"
    assert not any("step time changed" in w for w in est.warnings)


def test_two_real_training_jobs_on_one_link_are_not_called_inference() -> None:
    """Two DDP jobs sharing a link (steps of 0.67 and 0.81 s, spread 12-13 %): over the whole
    recording their bursts repeat too irregularly for one period, and read "inference" like
    random requests. The autocorrelation saw a rhythm, which random arrivals never show: a
    job's traffic."""
    est = analyze_files(counters=[FIXTURES / "ddp-gloo-two-tenants.csv.gz"]).estimate
    assert est.period_s is None
    assert est.regime == "training"
    assert any("too irregularly" in w for w in est.warnings)


@pytest.mark.parametrize("every", [5, 10])
def test_real_inference_polled_slowly_is_not_called_idle(tmp_path: Path, every: int) -> None:
    """The same service, its polls kept at 20 or 10 Hz: each reply fits in a poll, at random
    times, and cannot be told from noise, so no bursts are found; with 5 MB/s on average it
    read "idle", which an operator takes for a free host. A chatting host stays idle."""
    t, c, _ = _recording("inference-gloo-poisson")
    rows = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t[::every], c[::every], strict=True)]
    path = tmp_path / "slow.csv"
    path.write_text("\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.regime == "unknown"
    assert any("poll faster" in w and "fit in a poll" in w for w in est.warnings)
    chatter = np.cumsum(np.where(np.arange(t[::every].size) % 50 == 0, 200_000, 300))
    rows = ["time,eth0_rx_bytes,eth0_tx_bytes"]
    rows += [f"{a:.6f},{b},{b}" for a, b in zip(t[::every], chatter, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    assert analyze_files(counters=[path]).estimate.regime == "idle"


def test_steps_faster_than_the_polls_can_show_are_said_to_be_out_of_reach(tmp_path: Path) -> None:
    """A real tensor-parallel job's 0.19 s steps, polled at 10 Hz: steady 39 MB/s, no period,
    and no word of why; the shortest period looked for (4 polls) is named."""
    t, c, _ = _recording("tp-gloo-layers")
    rows = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t[::10], c[::10], strict=True)]
    path = tmp_path / "slow.csv"
    path.write_text("\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s is None
    assert any(w.startswith("no period between 0.4 s (4 polls)") for w in est.warnings)
    # Polled at its own 100 Hz, the step shows, and nothing is said.
    full = analyze_files(counters=[FIXTURES / "tp-gloo-layers.csv.gz"]).estimate
    assert full.period_s is not None
    assert not any(w.startswith("no period between") for w in full.warnings)


@pytest.mark.parametrize("name", ["fsdp-gloo-steady", "pp-gloo-1f1b", "tp-gloo-layers"])
@pytest.mark.parametrize("row", [0, -1])
def test_an_unread_cell_at_either_end_does_not_move_t(tmp_path: Path, name: str, row: int) -> None:
    """``commpulse record`` leaves a cell empty when a device is not read at a poll. At the
    first or last row, it made the idle before or after the job count as traffic: FSDP's
    1.33 s step read as its 0.11 s layer spacing, a 1F1B stage's 0.76 s as 0.09 s."""
    t, c, step = _recording(name)
    rows = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t, c, strict=True)]
    k = len(rows) - 1 if row == -1 else 1
    rows[k] = rows[k].split(",")[0] + ",," + rows[k].split(",")[2]
    path = tmp_path / "edge.csv"
    path.write_text("\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(step, rel=0.03)


def test_a_hole_without_reads_is_not_read_as_traffic(tmp_path: Path) -> None:
    """A recorder that stopped for a minute: the hole, read as the mean rate, hid the period
    (no T, regime inference). The parts around it are one job, and the bigger one shows."""
    t, c, step = _recording("fsdp-gloo-steady")
    half = t.size // 3
    rows = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t[:half], c[:half], strict=True)]
    rows += [f"{a + 60:.6f},{b[0]},{b[1]}" for a, b in zip(t[half:], c[half:], strict=True)]
    path = tmp_path / "hole.csv"
    path.write_text("\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(step, rel=0.03)
    assert est.regime == "finetune"
    assert any("no reads" in w for w in est.warnings)


@pytest.mark.parametrize(
    ("where", "stamp"),
    [("first", "0"), ("last", "2000000000"), ("last", "+3600"), ("first", "-7200")],
)
def test_a_row_far_from_the_others_does_not_stretch_the_recording(
    tmp_path: Path, where: str, stamp: str
) -> None:
    """A recorder's placeholder row at time 0 in an epoch-stamped file asked numpy for a 1.2 TiB
    grid (a traceback); a last poll an hour after the job (the counter unchanged) left an hour
    of unknown slots that moved T of a 1 s job to 6.8 s, without a word. Such a row is left
    out (over a day off, with a warning) or its empty stretch cut with the idle ends."""
    t, c, step = _recording("ddp-gloo-commbound")
    t = t - t[0] + 1.7e9
    rows = [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t, c, strict=True)]
    if stamp.startswith(("+", "-")):
        at = float(t[-1] if where == "last" else t[0]) + float(stamp)
    else:
        at = float(stamp)
    same = c[-1 if where == "last" else 0]  # the counters unchanged
    extra = f"{at:.6f},{same[0]},{same[1]}"
    rows = [*rows, extra] if where == "last" else [extra, *rows]
    path = tmp_path / "stray.csv"
    path.write_text("\n".join(["time,vetha_rx_bytes,vetha_tx_bytes", *rows]) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(step, rel=0.03)
    far = abs(at - float(np.median(t))) > 86_400
    assert any("stamped far from the others" in w for w in est.warnings) == far


def test_rows_the_parser_left_out_are_named_in_the_warnings(tmp_path: Path) -> None:
    t, c, step = _recording("ddp-gloo-commbound")
    rows = ["time,vetha_rx_bytes,vetha_tx_bytes"]
    rows += [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t, c, strict=True)]
    rows[500] = rows[500].split(",")[0] + ",N/A,garbage"
    rows.insert(900, rows[800])  # a clock step back
    path = tmp_path / "messy.csv"
    path.write_text("\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(step, rel=0.03)
    notes = [w for w in est.warnings if w.startswith(str(path))]
    assert any("went back in time" in w and "line 901" in w for w in notes)
    assert any("1 cell(s) held no counter" in w and "line 501" in w for w in notes)


def _renamed(path: Path, names: tuple[str, str], scale: float = 1.0, extra: str = "") -> None:
    """ddp-gloo-commbound with its two columns renamed (and their values scaled), plus
    ``extra``: a column name whose values are those of the first column, doubled."""
    t, c, _ = _recording("ddp-gloo-commbound")
    header = ",".join(("time", *names, *([extra] if extra else [])))
    rows = [
        ",".join(
            (f"{a:.6f}", *(str(round(v * scale)) for v in b), *([str(2 * b[0])] if extra else []))
        )
        for a, b in zip(t, c, strict=True)
    ]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")


@pytest.mark.parametrize(
    ("names", "scale", "extra", "note"),
    [
        (("vetha_rx_bytes", "vetha_tx_bytes"), 1.0, "", None),
        (("bytes_recv", "bytes_sent"), 1.0, "", None),  # psutil
        (("ifHCInOctets", "ifHCOutOctets"), 1.0, "", None),  # SNMP
        (("eth0_ingress", "eth0_egress"), 1.0, "", None),
        (("mlx5_0_port_rcv_data", "mlx5_0_port_xmit_data"), 0.25, "", "4-byte words"),
        (("eth0_rx_bits", "eth0_tx_bits"), 8.0, "", "bit counters"),
        (("vetha_rx_bytes", "vetha_tx_bytes"), 1.0, "vetha_rx_packets", "count no bytes"),
        (("vetha_rx_bytes", "vetha_tx_bytes"), 1.0, "mlx5_0_port_xmit_wait", "count no bytes"),
        (("vetha_rx_bytes", "vetha_tx_bytes"), 1.0, "lo_rx_bytes", "loopback"),
        (("vetha_rx_bytes", "vetha_tx_bytes"), 1.0, "eth0_bytes", "neither tx nor rx"),
        # Every interface of a host: the container plumbing and a VLAN carry the NIC's bytes.
        (("eth0_rx_bytes", "eth0_tx_bytes"), 1.0, "docker0_rx_bytes", "container, VM"),
        (("eth0_rx_bytes", "eth0_tx_bytes"), 1.0, "veth3f2a9c1_rx_bytes", "container, VM"),
        (("eth0_rx_bytes", "eth0_tx_bytes"), 1.0, "eth0.100_rx_bytes", "VLAN"),
    ],
)
def test_columns_of_other_tools_give_the_same_b(
    tmp_path: Path, names: tuple[str, str], scale: float, extra: str, note: str | None
) -> None:
    """Recordings made by other tools name and count their columns their own way: B must not
    double (both directions summed as one, or an interface that carries another's bytes),
    quarter (InfiniBand's 4-byte words), or swallow packet counts, the loopback interface or
    an undirected total."""
    base = tmp_path / "base.csv"
    _renamed(base, ("vetha_rx_bytes", "vetha_tx_bytes"))
    want = analyze_files(counters=[base]).estimate
    path = tmp_path / "other.csv"
    _renamed(path, names, scale, extra)
    est = analyze_files(counters=[path]).estimate
    assert want.burst_bandwidth is not None
    assert est.burst_bandwidth is not None
    assert est.burst_bandwidth == pytest.approx(want.burst_bandwidth, rel=0.01)
    assert est.period_s == pytest.approx(want.period_s, rel=0.01)
    if note is not None:
        assert any(note in w and str(path) in w for w in est.warnings)


def test_time_in_milliseconds_under_time_is_said(tmp_path: Path) -> None:
    t, c, _ = _recording("ddp-gloo-commbound")
    path = tmp_path / "ms.csv"
    rows = [f"{1000 * a:.3f},{b[0]},{b[1]}" for a, b in zip(t, c, strict=True)]
    path.write_text("time,vetha_rx_bytes,vetha_tx_bytes\n" + "\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert any("read every 10 s" in w and "time_ms" in w for w in est.warnings)
    path.write_text("time_ms,vetha_rx_bytes,vetha_tx_bytes\n" + "\n".join(rows) + "\n")
    _, _, step = _recording("ddp-gloo-commbound")
    assert analyze_files(counters=[path]).estimate.period_s == pytest.approx(step, rel=0.03)


def test_rates_written_as_counters_are_refused(tmp_path: Path) -> None:
    """A real job's per-poll bytes written as if counters: said in a warning once, beside
    numbers that were wrong; refused now."""
    t, c, _ = _recording("ddp-gloo-commbound")
    d = np.diff(c, axis=0)
    path = tmp_path / "rates.csv"
    rows = [f"{a:.6f},{b[0]},{b[1]}" for a, b in zip(t[1:], d, strict=True)]
    path.write_text("time,vetha_rx_bytes,vetha_tx_bytes\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputFormatError, match="not the cumulative counters"):
        analyze_files(counters=[path])


def test_a_bond_beside_other_interfaces_is_said(tmp_path: Path) -> None:
    """A bond's members cannot be told by name: the sum may count its bytes twice; say so."""
    path = tmp_path / "bond.csv"
    _renamed(path, ("bond0_rx_bytes", "bond0_tx_bytes"), 1.0, "ens1f0_rx_bytes")
    est = analyze_files(counters=[path]).estimate
    assert any("bond0 beside other interfaces" in w for w in est.warnings)
    _renamed(path, ("bond0_rx_bytes", "bond0_tx_bytes"))
    assert not any("bond" in w for w in analyze_files(counters=[path]).estimate.warnings)


def test_a_single_path_as_a_string_or_path_is_one_file() -> None:
    """The Python API takes one path where a list is expected: a str must not be read as a
    sequence of one-letter file names, nor a Path fail deep inside the readers."""
    path = FIXTURES / "ddp-gloo-commbound.csv.gz"
    listed = analyze_files(counters=[path]).estimate
    for given in (str(path), path, [str(path)], (path,)):
        est = analyze_files(counters=given).estimate
        assert est.period_s == listed.period_s
        assert est.duty_cycle == listed.duty_cycle
    with pytest.raises(TypeError, match=r"counters=.*path or a sequence of paths, not int"):
        analyze_files(counters=3)  # type: ignore[arg-type]
