"""Cost of one estimate update and of reading a counters CSV, next to naive baselines.

Run:  .venv/bin/python bench/estimate_cost.py [--repeat N]

Two tables, each measured in the same run as its baseline (this machine is shared and noisy,
so the ratios are the figures to compare across runs):

1. ``agent.estimate.estimate`` on a window of n samples of a simulated 100 Hz training job
   (counters + GPU), against a naive baseline that only takes the argmax of an FFT
   autocorrelation (what a first attempt would do, with none of the checks).
2. ``collectors.counters_csv.read_counters_csv`` against ``numpy.loadtxt`` on the same file
   (the baseline cannot report a bad line or keep 64-bit precision).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from agent.estimate import EstimateInputs, GpuSamples, estimate
from agent.rates import direction_grids
from agent.simulator.files import simulate_to_dir
from agent.simulator.params import JobParams, resolve
from agent.simulator.sampling import sample_counters, sample_gpu
from agent.simulator.schedule import build_schedule
from collectors.counters_csv import read_counters_csv


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def _naive_period(x: np.ndarray, dt: float) -> float:
    x = x - x.mean()
    n = x.size
    spec = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(np.abs(spec) ** 2)[:n]
    lo = 4
    return float((lo + int(np.argmax(acf[lo : n // 2]))) * dt)


def estimate_table(repeat: int) -> None:
    p = resolve(JobParams(period_s=4.55, duty=0.34, duration_s=700, seed=1))
    sched = build_schedule(p)
    trace = sample_counters(sched)
    gpu = sample_gpu(sched)
    print("| window (samples) | estimate() ms | naive ACF argmax ms | ratio |")
    print("|---|---|---|---|")
    for n in (1024, 4096, 16384, 65536):
        sel = slice(0, n + 1)
        t = trace.times[sel]
        grids = direction_grids(t, {k: v[sel] for k, v in trace.columns.items()})
        g_sel = gpu.times <= t[-1]
        inputs = EstimateInputs(
            network=grids,
            network_source="counters",
            gpu=GpuSamples(gpu.times[g_sel], gpu.gpu[g_sel], {"sm_active": gpu.sm_active[g_sel]}),
        )
        ours = _median_ms(lambda inputs=inputs: estimate(inputs), repeat)
        x = np.nan_to_num(grids["tx"].rate)
        base = _median_ms(lambda x=x: _naive_period(x, 0.01), repeat)
        print(f"| {n} | {ours:.1f} | {base:.2f} | {ours / base:.0f}x |")


def csv_table(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        simulate_to_dir(JobParams(duration_s=600, seed=2), out)
        path = out / "counters.csv"
        rows = sum(1 for _ in path.open()) - 1
        ours = _median_ms(lambda: read_counters_csv(path), repeat)
        base = _median_ms(lambda: np.loadtxt(path, delimiter=",", skiprows=1), repeat)
    print()
    print("| counters CSV rows | read_counters_csv ms | numpy.loadtxt ms | ratio | rows/s (ours) |")
    print("|---|---|---|---|---|")
    print(f"| {rows} | {ours:.0f} | {base:.0f} | {ours / base:.2f}x | {rows / ours * 1e3:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    estimate_table(args.repeat)
    csv_table(max(3, args.repeat // 2))


if __name__ == "__main__":
    main()
