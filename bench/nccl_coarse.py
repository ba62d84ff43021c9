"""T from NCCL logs whose calls are timed to the second (NCCL >= 2.26's default timestamp).

Run:  .venv/bin/python bench/nccl_coarse.py [--seconds 300] [--out bench/results/nccl_coarse.md]

Each log is two ranks of a job whose steps (3 % jitter) issue the calls of one shape, written
with NCCL's default timestamp "[%F %T] " (whole seconds). Three readings of each, in the same
run:

* product: ``analyze_files`` (``agent.analyze``), which times short steps by the call that
  comes once a step (``agent.call_sequence``);
* previous rule (the baseline): what the product did before, rebuilt here: the mean interval
  of the seconds that start a step's train of calls when steps are 4 s or longer, else the
  period detector on the calls binned per second, refused under 4 s;
* fine stamps (reference): the same log with microsecond stamps through the product.

*right*: within 2 % of the log's mean step; *wrong*: a T more than 5 % off; *none*: no T.
With whole-second times, a shape with no call that comes once a step (DDP buckets all alike)
may give no T (counted right); aperiodic calls (inference) must give none.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.analyze import analyze_files, collective_mix
from agent.estimate import MIN_ARRIVAL_POLLS, arrival_period, log_series
from agent.period import estimate_period
from collectors.nccl_log import read_nccl_log

START = dt.datetime(2026, 12, 1, 1, 0, 0)

#: A call: (fraction of the step, op, count of float32, peer).
Call = tuple[float, str, int, int]


def _ddp() -> list[Call]:
    buckets = [(0.7 + 0.05 * i, "AllReduce", 6_553_600, 0) for i in range(5)]
    return [*buckets, (0.95, "AllReduce", 1_200_000, 0), (0.97, "AllReduce", 1, 0)]


def _ddp_alike() -> list[Call]:
    return [(0.7 + 0.035 * i, "AllReduce", 6_553_600, 0) for i in range(8)]


def _fsdp() -> list[Call]:
    fwd = [(0.0, "AllGather", 3_000_000, 0)]
    fwd += [(0.02 + 0.02 * i, "AllGather", 2_000_000, 0) for i in range(12)]
    fwd += [(0.27, "AllGather", 3_500_000, 0)]
    bwd = [(0.3, "ReduceScatter", 3_500_000, 0)]
    for i in range(12):
        bwd += [(0.32 + 0.05 * i, "AllGather", 2_000_000, 0)]
        bwd += [(0.34 + 0.05 * i, "ReduceScatter", 2_000_000, 0)]
    bwd += [(0.95, "ReduceScatter", 3_000_000, 0)]
    return fwd + bwd


def _pipeline() -> list[Call]:
    sends = [(i / 10, "Send", 1_000_000, 1) for i in range(8)]
    recvs = [(i / 10 + 0.01, "Recv", 1_000_000, 1) for i in range(8)]
    return sorted([*sends, *recvs, (0.9, "AllReduce", 5_000_000, 0)])


SHAPES = {
    "ddp (distinct last bucket)": _ddp,
    "ddp (buckets all alike)": _ddp_alike,
    "fsdp (12 layers)": _fsdp,
    "pipeline stage (8 micro-batches)": _pipeline,
}
#: Shapes with no call that comes once a step: no T is the right answer.
NO_MARKER = {"ddp (buckets all alike)"}


def _moe_calls(rng: np.random.Generator) -> list[Call]:
    """MoE: all-to-all as Send/Recv to 3 peers, sizes following the routing, then the grads."""
    calls: list[Call] = []
    for peer in (1, 2, 3):
        calls.append((0.3 + 0.02 * peer, "Send", int(rng.integers(10_000, 2_000_000)), peer))
        calls.append((0.31 + 0.02 * peer, "Recv", int(rng.integers(10_000, 2_000_000)), peer))
    return [*calls, (0.9, "AllReduce", 4_000_000, 0)]


def write_log(
    path: Path, shape: str, step_s: float, seconds: float, seed: int, *, fine: bool
) -> float:
    """Write the log; return its mean step (first step start to last, over the steps)."""
    rng = np.random.default_rng(seed)
    fmt = "[%Y-%m-%d %H:%M:%S.%f] " if fine else "[%Y-%m-%d %H:%M:%S] "
    lines: list[tuple[float, str]] = []
    t, steps, op = 0.37, 0, 0
    starts = []
    while t < seconds:
        starts.append(t)
        calls = _moe_calls(rng) if shape == "moe (routed sizes)" else SHAPES[shape]()
        span = min(step_s, 1.0)  # calls of a long step bunch in its last second or so
        offset = step_s - span
        for at, name, count, peer in calls:
            for r in range(2):
                when = t + offset + at * span + 1e-4 * r
                stamp = (START + dt.timedelta(seconds=when)).strftime(fmt)
                lines.append(
                    (
                        when,
                        f"{stamp}node1:{40 + r}:{40 + r} [{r}] NCCL INFO {name}: opCount "
                        f"{op:x} sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count {count} "
                        f"datatype 7 op 0 root {peer} comm 0x55d0c0a0b0c{r} [nranks=8] stream "
                        "0x5581e2a0c0d0",
                    )
                )
            op += 1
        steps += 1
        t += step_s * (1.0 + 0.03 * rng.uniform(-1.0, 1.0))
    lines.sort(key=lambda x: x[0])
    path.write_text("\n".join(line for _, line in lines) + "\n")
    return (starts[-1] - starts[0]) / (len(starts) - 1)


def write_inference(path: Path, seconds: float, seed: int, *, fine: bool) -> None:
    """Requests at random (2/s), each a train of TP all-reduces whose size follows its batch."""
    rng = np.random.default_rng(seed)
    fmt = "[%Y-%m-%d %H:%M:%S.%f] " if fine else "[%Y-%m-%d %H:%M:%S] "
    lines = []
    t = 0.0
    op = 0
    while t < seconds:
        t += float(rng.exponential(0.5))
        batch = int(rng.integers(1, 64))
        for k in range(24):
            stamp = (START + dt.timedelta(seconds=t + 0.002 * k)).strftime(fmt)
            lines.append(
                f"{stamp}node1:40:40 [0] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x1 "
                f"recvbuff 0x2 count {batch * 4096} datatype 7 op 0 root 0 comm 0x3 [nranks=8] "
                "stream 0x4"
            )
            op += 1
    path.write_text("\n".join(lines) + "\n")


def previous_rule(path: Path) -> float | None:
    """The product's T from a coarse log before the call order was read (the baseline)."""
    mix = collective_mix(read_nccl_log(path))
    res = mix.time_resolution_s
    series = log_series(mix)
    if series is None:
        return None
    steps = arrival_period(mix.call_times[np.isfinite(mix.call_times)], res) if res > 0 else None
    if steps is not None and steps >= MIN_ARRIVAL_POLLS:
        return steps * res
    rate, step, t0 = series
    result = estimate_period(rate, step, t0=t0)
    if res > 0 and (
        steps is not None or result.period_s is None or result.period_s < MIN_ARRIVAL_POLLS * res
    ):
        return None
    return result.period_s


@dataclass(frozen=True)
class Row:
    shape: str
    step_s: float
    truth_s: float | None  # the log's mean step; None: no T is right (aperiodic)
    product: float | None
    baseline: float | None
    fine: float | None

    @property
    def none_ok(self) -> bool:
        """Whole-second times of a step no call marks: no T is as right as the step."""
        return self.shape in NO_MARKER


def verdict(value: float | None, truth: float | None, *, none_ok: bool = False) -> str:
    """right / off (2-5 %) / wrong (> 5 %, or a T where none is) / none."""
    if truth is None:
        return "right" if value is None else "wrong"
    if value is None:
        return "right" if none_ok else "none"
    err = abs(value / truth - 1.0)
    return "right" if err <= 0.02 else ("wrong" if err > 0.05 else "off")


def run(seconds: float, steps: Sequence[float]) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cases = [(s, t) for s in [*SHAPES, "moe (routed sizes)"] for t in steps]
        for i, (shape, step_s) in enumerate(cases):
            coarse, fine = d / f"c{i}.log", d / f"f{i}.log"
            mean = write_log(coarse, shape, step_s, seconds, i, fine=False)
            write_log(fine, shape, step_s, seconds, i, fine=True)
            rows.append(
                Row(
                    shape,
                    step_s,
                    mean,
                    analyze_files(nccl_logs=[coarse]).estimate.period_s,
                    previous_rule(coarse),
                    analyze_files(nccl_logs=[fine]).estimate.period_s,
                )
            )
        for seed in range(3):
            coarse, fine = d / f"ic{seed}.log", d / f"if{seed}.log"
            write_inference(coarse, seconds, seed, fine=False)
            write_inference(fine, seconds, seed, fine=True)
            rows.append(
                Row(
                    f"inference (random requests, seed {seed})",
                    math.nan,
                    None,
                    analyze_files(nccl_logs=[coarse]).estimate.period_s,
                    previous_rule(coarse),
                    analyze_files(nccl_logs=[fine]).estimate.period_s,
                )
            )
    return rows


def _cell(value: float | None, truth: float | None, *, none_ok: bool = False) -> str:
    v = verdict(value, truth, none_ok=none_ok)
    if value is None:
        return f"– ({v})"
    if truth is None:
        return f"{value:.4g} s ({v})"
    return f"{value:.4g} s ({100 * (value / truth - 1):+.2f} %, {v})"


def render(rows: Sequence[Row], seconds: float, took: float, command: str) -> str:
    out = [
        "# bench/nccl_coarse.py",
        "",
        f"Command: `{command}`",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {seconds:g} s logs of two "
        f"ranks, 3 % step jitter; run time {took:.0f} s.",
        "",
        "| shape | step | mean step | product (whole seconds) | previous rule (baseline) "
        "| product (µs stamps) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        step = "–" if math.isnan(r.step_s) else f"{r.step_s:g} s"
        mean = "no T is right" if r.truth_s is None else f"{r.truth_s:.4g} s"
        if r.none_ok:
            mean += " (or no T)"
        ok = r.none_ok
        out.append(
            f"| {r.shape} | {step} | {mean} | {_cell(r.product, r.truth_s, none_ok=ok)} | "
            f"{_cell(r.baseline, r.truth_s, none_ok=ok)} | {_cell(r.fine, r.truth_s)} |"
        )
    out += ["", "| reading | right | off (2-5 %) | wrong (> 5 % or a T where none is) | none |"]
    out.append("|---|---|---|---|---|")
    readings: tuple[tuple[str, str, bool], ...] = (
        ("product (whole seconds)", "product", True),
        ("previous rule (baseline)", "baseline", True),
        ("product (µs stamps)", "fine", False),
    )
    for name, attr, coarse in readings:
        verdicts = [
            verdict(getattr(r, attr), r.truth_s, none_ok=coarse and r.none_ok) for r in rows
        ]
        out.append(
            f"| {name} | {verdicts.count('right')} | {verdicts.count('off')} | "
            f"{verdicts.count('wrong')} | {verdicts.count('none')} |"
        )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="length of each log")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows = run(args.seconds, [0.061, 0.2, 0.45, 1.3, 2.7, 7.3])
    command = ".venv/bin/python bench/nccl_coarse.py" + (
        f" --seconds {args.seconds:g}" if args.seconds != 300.0 else ""
    )
    if args.out is not None:
        command += f" --out {args.out}"
    text = render(rows, args.seconds, time.perf_counter() - began, command)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
