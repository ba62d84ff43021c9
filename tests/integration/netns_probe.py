"""Run inside a network namespace: a real source and the pipeline, then print the estimate.

Used by test_nic_netns.py and test_capture_netns.py as
``ip netns exec NS python -m tests.integration.netns_probe ...`` (``ip netns exec`` remounts
/sys, so both the netlink and the sysfs reader see the namespace's own interfaces). With
``--include`` it runs the NIC counter source; with ``--capture IF`` live packet capture, and
then also the kernel's own byte counters of IF over the capture's lifetime. Prints one JSON
object on stdout; with ``--capture`` it first writes ``ready`` on stderr once capturing.

With ``--commands`` the test steers it on stdin instead of a clock of its own (two probes and a
sender start at different times, the more so on a loaded machine): ``estimate`` keeps the
estimate of that moment for the report, ``stop`` ends the run (``--seconds`` is then a limit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from agent.clock import MonotonicClock
from agent.pipeline import Pipeline, PipelineSettings, Snapshot, SnapshotStore
from collectors._base import Source
from collectors.nic_counters import NicConfig, NicCounters
from collectors.packet_capture import CaptureConfig, PacketCapture


def _kernel_bytes(interface: str) -> dict[str, int]:
    stats = Path("/sys/class/net") / interface / "statistics"
    return {d: int((stats / f"{d}_bytes").read_text()) for d in ("tx", "rx")}


async def _run(args: argparse.Namespace) -> dict[str, object]:
    clock = MonotonicClock()
    store = SnapshotStore()
    source: Source
    if args.capture:
        source = PacketCapture(
            CaptureConfig(enabled=True, interfaces=(args.capture,), sample_every=args.sample_every),
            clock=clock,
        )
        rate_hz = 100.0
    else:
        source = NicCounters(
            NicConfig(include=args.include, method=args.method, poll_interval_s=args.poll),
            clock=clock,
        )
        rate_hz = 1 / args.poll
    #: Every hop's (time, T, confidence): what led to the reported T, for a failing test.
    history: list[tuple[float, float | None, float]] = []

    def keep(snap: Snapshot) -> None:
        est = snap.estimate
        history.append(
            (round(snap.time_s, 2), est.period_s if est else None, est.confidence if est else 0.0)
        )

    pipeline = Pipeline(
        [source],
        store,
        settings=PipelineSettings(hop_s=1.0, window_s=args.window, counter_rate_hz=rate_hz),
        clock=clock,
        on_snapshot=keep,
    )
    kernel: dict[str, dict[str, int]] = {}
    during: list[Snapshot | None] = []

    async def estimate_at() -> None:
        """The estimate while traffic still flows (a stopped train's D decays, rightly)."""
        await asyncio.sleep(args.estimate_at)
        during.append(store.latest())

    stopped = asyncio.Event()

    async def commands() -> None:
        """``estimate`` and ``stop`` lines from the test, on stdin."""
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "estimate":
                during.append(store.latest())
            elif line.strip() == "stop":
                break
        stopped.set()

    async def bracket() -> None:
        """Kernel counters once the capture runs, and again just before the pipeline stops."""
        assert isinstance(source, PacketCapture)
        while source.worker is None:
            await asyncio.sleep(0.01)
        kernel["start"] = _kernel_bytes(args.capture)
        print("ready", file=sys.stderr, flush=True)  # the test starts its traffic now
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), args.seconds - 0.5)
        kernel["end"] = _kernel_bytes(args.capture)
        pipeline.stop()

    if args.commands:
        commands_task = asyncio.get_running_loop().create_task(commands())
    if args.estimate_at:
        during_task = asyncio.get_running_loop().create_task(estimate_at())
    if args.capture:
        task = asyncio.get_running_loop().create_task(bracket())
    else:
        asyncio.get_running_loop().call_later(args.seconds, pipeline.stop)
    await pipeline.run()
    if args.capture:
        await task
    snap = store.latest()
    assert snap is not None
    if args.estimate_at:
        await during_task
    if args.commands:
        commands_task.cancel()  # it may wait on stdin still; the thread ends with the process
    if args.estimate_at or args.commands:
        estimate = during[0].estimate if during and during[0] else None
    else:
        estimate = snap.estimate
    return {
        "method": getattr(source, "method", None),
        "estimate": estimate.to_json() if estimate else None,
        "sources": {h.name: {"up": h.up, "readings": h.readings, "errors": h.errors,
                             "last_error": h.last_error}
                    for h in snap.sources},
        "devices": [
            {"device": d.device, "tx_rate": d.tx_rate, "rx_rate": d.rx_rate,
             "tx_bytes": d.tx_bytes, "rx_bytes": d.rx_bytes, "counters": dict(d.counters),
             "speed": d.info.speed_bytes_per_s if d.info else None}
            for d in snap.devices
        ],
        "stats": {k: dict(v) for k, v in snap.source_stats.items()},
        "kernel": {d: kernel["end"][d] - kernel["start"][d] for d in ("tx", "rx")}
        if kernel else None,
        "history": history,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--include")
    parser.add_argument("--capture")
    parser.add_argument("--sample-every", type=int, default=1)
    parser.add_argument("--method", default="auto")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--window", type=float, default=16.0, help="the pipeline's window_s")
    parser.add_argument("--estimate-at", type=float, help="report the estimate of this time")
    parser.add_argument("--commands", action="store_true", help="take estimate/stop on stdin")
    parser.add_argument("--poll", type=float, default=0.01)
    args = parser.parse_args()
    if not (args.include or args.capture):
        parser.error("give --include REGEX or --capture IF")
    print(json.dumps(asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
