"""A recording that holds several jobs one after the other, analysed offline.

Built from two real counter recordings (tests/fixtures/counters): a DDP job (0.57 s steps,
22 MB per step) and, after 6 s of an idle counter, an FSDP job (1.34 s steps, 38 MB per step).
"""

from __future__ import annotations

import gzip
import json
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
