"""``commpulse demo``: the real live pipeline and exporter, fed by a simulated job."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import replace

from agent.clock import MonotonicClock
from agent.exporter import start_metrics_server
from agent.pipeline import Pipeline, PipelineSettings, Snapshot, SnapshotStore
from agent.report import render_summary_line
from agent.simulator.live import (
    SimulatedCollectives,
    SimulatedCounters,
    SimulatedGpu,
    SimulatedJob,
)
from agent.simulator.params import JobParams, resolve
from collectors._base import Source

__all__ = ["demo_params", "run_demo"]

#: Counter polls per second in the demo (the agent's default rate).
DEMO_POLL_HZ = 100.0


def demo_params(
    scenario: str, *, seed: int = 0, period_s: float | None = None, duty: float | None = None
) -> JobParams:
    """The simulated job of the demo: the DOMAIN.md worked example unless told otherwise."""
    params = JobParams(scenario=scenario, seed=seed, sample_rate_hz=DEMO_POLL_HZ)
    if period_s is not None or duty is not None:
        params = replace(params, period_s=period_s, duty=duty)
    resolve(params)  # fail early, with the parameter's name, on a bad combination
    return params


async def _demo(
    params: JobParams,
    *,
    listen: str,
    port: int,
    duration_s: float | None,
    quiet: bool,
) -> int:
    clock = MonotonicClock()
    store = SnapshotStore()
    job = SimulatedJob.start(params, clock)
    sources: list[Source] = [
        SimulatedCounters(job, clock, poll_hz=DEMO_POLL_HZ),
        SimulatedGpu(job, clock, interval_s=params.gpu_interval_s),
        SimulatedCollectives(job, clock),
    ]
    truth = job.schedule.truth

    printing = not quiet

    def show(snap: Snapshot) -> None:
        nonlocal printing
        if not printing:
            return
        elapsed = snap.time_s - job.origin
        summary = "collecting…" if snap.estimate is None else render_summary_line(snap.estimate)
        try:
            print(f"[{elapsed:6.1f} s] {summary}", flush=True)
        except BrokenPipeError:
            # The reader went away (``commpulse demo | head``): stop printing, keep serving.
            printing = False

    pipeline = Pipeline(
        sources,
        store,
        settings=PipelineSettings(counter_rate_hz=DEMO_POLL_HZ),
        clock=clock,
        on_snapshot=show,
    )
    server = start_metrics_server(store, addr=listen, port=port)
    bound = server.port
    host = f"[{listen}]" if ":" in listen else listen
    period = truth.get("period_s")
    duty = truth.get("duty_cycle")
    print(
        f"commpulse demo: simulated {params.scenario} job "
        f"(truth: T={'none' if period is None else f'{period:.3f} s'}, "
        f"D={'none' if duty is None else f'{duty:.3f}'}); "
        f"metrics at http://{host}:{bound}/metrics — Ctrl-C to stop",
        flush=True,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, pipeline.stop)
    if duration_s is not None:
        loop.call_later(duration_s, pipeline.stop)
    try:
        await pipeline.run()
    finally:
        server.close()
    if not quiet:
        print("commpulse demo: stopped", file=sys.stderr, flush=True)
    return 0


def run_demo(
    *,
    scenario: str = "training",
    listen: str = "127.0.0.1",
    port: int = 0,
    duration_s: float | None = None,
    seed: int = 0,
    period_s: float | None = None,
    duty: float | None = None,
    quiet: bool = False,
) -> int:
    """Run the demo until Ctrl-C, SIGTERM or ``duration_s``; returns the exit status."""
    params = demo_params(scenario, seed=seed, period_s=period_s, duty=duty)
    return asyncio.run(_demo(params, listen=listen, port=port, duration_s=duration_s, quiet=quiet))
