"""How often the bottleneck alert's condition holds on simulated jobs, live, scrape by scrape.

``CommpulseNetworkBottleneck`` (deploy/prometheus/commpulse-rules.yml) fires when, for 15
minutes, D's lowest value over the last 2 minutes is above 0.5 and the confidence reached 0.5
in the last 5 minutes. This replays simulated counter recordings through the live estimate
loop (``bench/accuracy.py``'s mirror of ``Pipeline._hop``, hop 1 s), samples what the
agent exports every 15 s as Prometheus would scrape it, and evaluates that condition at every
scrape: the share of scrapes where it holds and its longest unbroken run (15 minutes or more:
the alert fires). Network-bound training jobs (D about 0.64) with growing step spread, and
steps whose collective runs slower on a random half of them (busy 0.56-0.60), should fire; a
D 0.35 job and aperiodic inference traffic never. One table; about 2 minutes in all.

    .venv/bin/python bench/alert_gate.py [--minutes 20] [--seed 3] [--out FILE]
        [--baseline DIR]

``--baseline DIR`` also runs the same streams through another checkout of the project (a
``git worktree`` of an older commit) and prints its table below, from the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

import agent
from agent.pipeline import PipelineSettings
from agent.simulator.files import simulate_to_dir
from agent.simulator.params import JobParams

HERE = Path(__file__).resolve().parent
SCRAPE_S = 15.0
D_RANGE_S = 120.0  # min_over_time(commpulse_duty_cycle_ratio[2m])
CONFIDENCE_RANGE_S = 300.0  # max_over_time(commpulse_period_confidence_ratio[5m])
FOR_S = 900.0  # for: 15m


def _accuracy(checkout: Path | None) -> ModuleType:
    """bench/accuracy.py's live-loop mirror, from this checkout or ``checkout``."""
    path = (checkout / "bench" if checkout is not None else HERE) / "accuracy.py"
    spec = importlib.util.spec_from_file_location("bench_accuracy", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class SlowSteps:
    """Steps that move the same bytes, the collective at ``slow`` of the link rate on a random
    half of them (flows colliding on one path): the simulator makes no such traffic."""

    duty: float  # the full-rate burst's share of a full-rate step
    slow: float
    period_s: float = 2.0
    rate: float = 25e9
    sample_rate_hz: float = 100.0  # as JobParams

    def counters(self, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Poll times, cumulative bytes and the share of time the link is busy."""
        rng = np.random.default_rng(seed)
        full_s = self.duty * self.period_s
        compute_s = self.period_s - full_s
        bursts, t = [], 0.3
        while t < seconds:
            factor = float(rng.choice([1.0, self.slow]))
            start = t + compute_s * (1.0 + 0.02 * rng.standard_normal())
            bursts.append((start, start + full_s / factor, factor * self.rate))
            t = bursts[-1][1]
        b = np.asarray(bursts)
        times = np.arange(0.0, seconds, 1.0 / self.sample_rate_hz)
        cum = np.zeros(times.size)
        for i in range(0, times.size, 4096):
            at = times[i : i + 4096, None]
            cum[i : i + 4096] = (np.clip(at - b[None, :, 0], 0.0, b[None, :, 1] - b[None, :, 0])
                                 * b[None, :, 2]).sum(axis=1)  # fmt: skip
        inside = b[b[:, 1] <= seconds]
        busy = float((inside[:, 1] - inside[:, 0]).sum() / inside[-1, 1])
        return times, cum, busy


@dataclass(frozen=True)
class Case:
    name: str
    params: JobParams | SlowSteps
    wants_alert: bool


@dataclass(frozen=True)
class GateStats:
    case: Case
    truth_d: float | None
    d_present: float  # share of scrapes with a D
    d_median: float | None
    confidence_median: float
    passing: float  # share of scrapes where the condition holds
    longest_s: float  # longest unbroken run of passing scrapes

    @property
    def fires(self) -> bool:
        return self.longest_s >= FOR_S


def cases(minutes: float, seed: int) -> list[Case]:
    seconds = 60.0 * minutes
    train = [
        Case(
            f"training D 0.65, step spread {j:.0%}",
            JobParams(period_s=2.0, duty=0.65, jitter=j, duration_s=seconds, seed=seed),
            wants_alert=True,
        )
        for j in (0.05, 0.16, 0.2)
    ]
    slow = [
        Case(
            f"training, collective at {f:.0%} rate on random steps (busy > 0.5)",
            SlowSteps(duty=0.5, slow=f),
            wants_alert=True,
        )
        for f in (0.5, 0.65)
    ]
    quiet = Case(
        "training D 0.35, step spread 16%",
        JobParams(period_s=2.0, duty=0.35, jitter=0.16, duration_s=seconds, seed=seed),
        wants_alert=False,
    )
    inference = [
        Case(
            "inference, Poisson 20/s",
            JobParams(scenario="inference", arrival_rate_hz=20.0, duration_s=seconds, seed=seed),
            wants_alert=False,
        ),
        Case(
            "inference, MMPP 10/s",
            JobParams(
                scenario="inference",
                arrival_rate_hz=10.0,
                arrival_process="mmpp",
                duration_s=seconds,
                seed=seed,
            ),
            wants_alert=False,
        ),
    ]
    return [*train, *slow, quiet, *inference]


def _scraped(times: np.ndarray, *series: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each hop series as Prometheus sees it: the latest value at every scrape."""
    scrapes = np.arange(SCRAPE_S, times[-1] - times[0], SCRAPE_S) + times[0]
    at = np.searchsorted(times, scrapes, side="right") - 1
    return tuple(x[at] for x in series)


def _gate(d: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Whether the alert's condition holds at each scrape of D (NaN: absent) and confidence."""
    d_scrapes = round(D_RANGE_S / SCRAPE_S)
    c_scrapes = round(CONFIDENCE_RANGE_S / SCRAPE_S)
    holds = np.zeros(d.size, dtype=bool)
    for i in range(d.size):
        recent_d = d[max(0, i + 1 - d_scrapes) : i + 1]
        recent_d = recent_d[np.isfinite(recent_d)]
        recent_c = c[max(0, i + 1 - c_scrapes) : i + 1]
        holds[i] = recent_d.size > 0 and recent_d.min() > 0.5 and recent_c.max() >= 0.5
    return holds


def _longest_run_s(holds: np.ndarray) -> float:
    best = run = 0
    for h in holds:
        run = run + 1 if h else 0
        best = max(best, run)
    return best * SCRAPE_S


def _stream(case: Case, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Poll times, cumulative bytes of the busier direction, and the true D if any."""
    if isinstance(case.params, SlowSteps):
        return case.params.counters(seconds, seed)
    with tempfile.TemporaryDirectory() as tmp:
        truth = simulate_to_dir(case.params, Path(tmp))
        data = np.loadtxt(Path(tmp) / "counters.csv", delimiter=",", skiprows=1, ndmin=2)
    # The busier direction, as the agent picks it.
    col = 1 if data[-1, 1] - data[0, 1] >= data[-1, 2] - data[0, 2] else 2
    d = truth.get("duty_cycle")
    return data[:, 0], data[:, col], float(d) if d is not None else None


def run_case(acc: ModuleType, case: Case, seconds: float, seed: int) -> GateStats:
    poll_times, cum, truth_d = _stream(case, seconds, seed)
    updates = acc.run_online(
        acc.Stream(poll_times, cum),
        PipelineSettings(hop_s=1.0, counter_rate_hz=case.params.sample_rate_hz),
        t_start=float(poll_times[0]),
        t_end=float(poll_times[-1]),
    )
    times = np.array([u.time_s for u in updates])
    # D is exported only while T is locked (Pipeline._hop).
    duty = np.array(
        [u.duty if u.duty is not None and u.reported_s is not None else np.nan for u in updates]
    )
    conf = np.array([u.confidence for u in updates])
    d, c = _scraped(times, duty, conf)
    holds = _gate(d, c)
    present = np.isfinite(d)
    return GateStats(
        case=case,
        truth_d=truth_d,
        d_present=float(present.mean()),
        d_median=float(np.median(d[present])) if present.any() else None,
        confidence_median=float(np.median(c)),
        passing=float(holds.mean()),
        longest_s=_longest_run_s(holds),
    )


def render(rows: list[GateStats], minutes: float, seed: int, took: float) -> str:
    lines = [
        "# bench/alert_gate.py",
        "",
        f"Command: `.venv/bin/python bench/alert_gate.py --minutes {minutes:g} --seed {seed}`",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; streams of {minutes:g} min, "
        f"scraped every {SCRAPE_S:g} s; run time {took / 60:.1f} min.",
        "",
        "| stream | true D | D in scrapes | D median | confidence median | condition holds "
        "| longest run | fires | wanted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        truth = f"{r.truth_d:.3f}" if r.truth_d is not None else "–"
        median = f"{r.d_median:.3f}" if r.d_median is not None else "–"
        lines.append(
            f"| {r.case.name} | {truth} | {r.d_present:.0%} | {median} | "
            f"{r.confidence_median:.2f} | {r.passing:.0%} | {r.longest_s / 60:.1f} min | "
            f"{'yes' if r.fires else 'no'} | {'yes' if r.case.wants_alert else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="stream length (default 20)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout (git worktree) to run beside this one"
    )
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)  # the baseline's run
    args = parser.parse_args(argv)
    if args.checkout is not None and Path(agent.__file__).resolve().parents[1] != (
        args.checkout.resolve()
    ):
        raise SystemExit(f"run with PYTHONPATH={args.checkout} to measure that checkout")
    acc = _accuracy(args.checkout)
    began = time.perf_counter()
    rows = [
        run_case(acc, c, 60.0 * args.minutes, args.seed) for c in cases(args.minutes, args.seed)
    ]
    text = render(rows, args.minutes, args.seed, time.perf_counter() - began)
    if args.baseline is not None:
        base = args.baseline.resolve()
        done = subprocess.run(
            [sys.executable, __file__, "--minutes", f"{args.minutes:g}", "--seed",
             str(args.seed), "--checkout", str(base)],
            env={**os.environ, "PYTHONPATH": str(base)},
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"the baseline run failed:\n{done.stderr}")
        commit = subprocess.run(
            ["git", "-C", str(base), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        table = done.stdout[done.stdout.index("| stream") :]
        table = "\n".join(line for line in table.splitlines() if line.startswith("|"))
        text += f"\n## Baseline: the same streams through commit `{commit or base.name}`\n\n"
        text += table + "\n"
        ran = f"--seed {args.seed}`"
        text = text.replace(ran, f"--seed {args.seed} --baseline <worktree of {commit}>`", 1)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    wrong = [r.case.name for r in rows if r.fires != r.case.wants_alert]
    if wrong:
        print(json.dumps({"not as wanted": wrong}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
