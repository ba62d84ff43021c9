"""Run inside a network namespace: the real NIC source and pipeline, then print the estimate.

Used by test_nic_netns.py as ``ip netns exec NS python -m tests.integration.netns_probe ...``
(``ip netns exec`` remounts /sys, so both the netlink and the sysfs reader see the namespace's
own interfaces). Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agent.clock import MonotonicClock
from agent.pipeline import Pipeline, PipelineSettings, SnapshotStore
from collectors.nic_counters import NicConfig, NicCounters


async def _run(args: argparse.Namespace) -> dict[str, object]:
    clock = MonotonicClock()
    store = SnapshotStore()
    source = NicCounters(
        NicConfig(include=args.include, method=args.method, poll_interval_s=args.poll),
        clock=clock,
    )
    pipeline = Pipeline(
        [source],
        store,
        settings=PipelineSettings(hop_s=1.0, window_s=args.seconds, counter_rate_hz=1 / args.poll),
        clock=clock,
    )
    asyncio.get_running_loop().call_later(args.seconds, pipeline.stop)
    await pipeline.run()
    snap = store.latest()
    assert snap is not None
    return {
        "method": source.method,
        "estimate": snap.estimate.to_json() if snap.estimate else None,
        "sources": {h.name: {"up": h.up, "readings": h.readings, "errors": h.errors}
                    for h in snap.sources},
        "devices": [
            {"device": d.device, "tx_rate": d.tx_rate, "rx_rate": d.rx_rate,
             "speed": d.info.speed_bytes_per_s if d.info else None}
            for d in snap.devices
        ],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--include", required=True)
    parser.add_argument("--method", default="auto")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--poll", type=float, default=0.01)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
