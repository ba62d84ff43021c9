"""T from an NCCL log alone, on logs whose steps are regular: the calls are instants, and a
step of a non-whole number of bins made the detector prefer a multiple of it (a whole number
of bins), or a coarse level's alias of it. 14 of these 60 logs gave a wrong T, most of them
confidently (0.45 s steps read 1.8 s at 0.82, 2.7 s read 49 s at 0.87)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files

START = datetime(2026, 3, 4, 9, 30, 0, tzinfo=UTC)


def _log(path: Path, period: float, steps: int, jitter: float, seed: int) -> Path:
    """Two ranks, two AllReduces a step 3 ms apart; each step's length jitters uniformly."""
    rng = np.random.default_rng(seed)
    lines, t = [], 0.0
    for step in range(steps):
        for k in range(2):
            for r in range(2):
                stamp = (START + timedelta(seconds=t + 0.003 * k + 2e-4 * r)).strftime(
                    "[%Y-%m-%d %H:%M:%S.%f] "
                )
                lines.append(
                    f"{stamp}node1:{1000 + r}:{1000 + r} [{r}] NCCL INFO AllReduce: opCount "
                    f"{2 * step + k:x} sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count "
                    f"25000000 datatype 9 op 0 root 0 comm 0x55d0c0a0b0c{r} [nranks=2] stream "
                    "0x5581e2a0c0d0"
                )
        t += period * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("period", [0.061, 0.123, 0.45, 1.0, 2.7])
@pytest.mark.parametrize("steps", [30, 80, 400])
def test_regular_steps_read_their_own_period(tmp_path: Path, period: float, steps: int) -> None:
    wrong = []
    for seed, jitter in enumerate((0.0, 0.002, 0.01, 0.03)):
        est = analyze_files(nccl_logs=[_log(tmp_path / "j.log", period, steps, jitter, seed)])
        t = est.estimate.period_s
        if t is None or abs(t / period - 1.0) > 0.02:
            wrong.append((jitter, t, round(est.estimate.confidence, 2)))
    assert not wrong
