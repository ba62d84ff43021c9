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
