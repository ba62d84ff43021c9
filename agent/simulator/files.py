"""Write a simulated job in the contract's file formats, plus its ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import ConfigError
from agent.simulator.nccl_writer import LoggedCall, render_nccl_log
from agent.simulator.params import JobParams, resolve
from agent.simulator.sampling import CounterTrace, GpuTrace, sample_counters, sample_gpu
from agent.simulator.schedule import BF16_BYTES, Schedule, build_schedule

__all__ = ["collectives_truth", "simulate_to_dir"]

#: Ops whose COLL ``count`` is per rank (or per peer), so S = count · size · nranks.
_PER_RANK_OPS = frozenset({"AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter"})


def collectives_truth(calls: list[LoggedCall], nranks: int) -> dict[str, dict[str, int]]:
    """The ``collectives`` block analyze must reproduce from the log (nccl-tests' S)."""
    out: dict[str, dict[str, int]] = {}
    for call in calls:
        size = call.count * BF16_BYTES * (nranks if call.op in _PER_RANK_OPS else 1)
        entry = out.setdefault(call.op, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += size
    return out


def _write_counters(path: Path, trace: CounterTrace, start_s: float) -> None:
    names = list(trace.columns)
    with path.open("w", encoding="ascii") as fh:
        fh.write("time," + ",".join(names) + "\n")
        cols = [trace.columns[n] for n in names]
        for i, t in enumerate(trace.times):
            fh.write(f"{start_s + float(t):.6f}," + ",".join(str(int(c[i])) for c in cols) + "\n")


def _write_gpu(path: Path, trace: GpuTrace, start_s: float) -> None:
    order = np.lexsort((trace.gpu, trace.times))
    with path.open("w", encoding="ascii") as fh:
        fh.write("time,gpu,sm_active,util\n")
        for i in order:
            fh.write(
                f"{start_s + float(trace.times[i]):.6f},{int(trace.gpu[i])},"
                f"{float(trace.sm_active[i]):.4f},{int(trace.util_percent[i])}\n"
            )


def _write_nccl(path: Path, s: Schedule) -> None:
    p = s.params
    lines = render_nccl_log(
        s.calls,
        hostname=p.hostname,
        nranks=p.nranks,
        first_rank=0,
        local_ranks=p.local_ranks,
        start_time_s=p.start_time_s,
        seed=p.seed,
    )
    with path.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")


def _params_dict(p: JobParams) -> dict[str, Any]:
    return {k: getattr(p, k) for k in p.__dataclass_fields__}


#: The simulated capture's peers acknowledge every this many frames (and each burst's last) ...
PCAP_ACK_EVERY = 16
#: ... this long after the frame, plus an exponential jitter of this mean: RoCE round trips of a
#: few microseconds in one rack.
PCAP_ACK_DELAY_S = 4e-6
PCAP_ACK_JITTER_S = 1.5e-6


def simulate_to_dir(params: JobParams, out: Path, *, pcap: bool = False) -> dict[str, Any]:
    """Simulate ``params`` and write counters.csv, gpu.csv, nccl.log, truth.json (+ pcap).

    Returns the truth dictionary that was written.
    """
    p = resolve(params)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out}: {exc.strerror}") from exc
    sched = build_schedule(p)
    _write_counters(out / "counters.csv", sample_counters(sched), p.start_time_s)
    _write_gpu(out / "gpu.csv", sample_gpu(sched), p.start_time_s)
    _write_nccl(out / "nccl.log", sched)
    files = ["counters.csv", "gpu.csv", "nccl.log"]
    if pcap:
        from agent.simulator.pcap_writer import write_roce_pcap  # scapy: only when asked

        try:
            import scapy  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--pcap needs scapy to build RoCEv2 frames: pip install 'commpulse[sim]'"
            ) from None

        bursts = sched.bursts.copy()
        background = p.background_fraction * p.bandwidth
        if background > 0:
            assert p.duration_s is not None
            bursts = np.vstack((bursts, [[0.0, p.duration_s, background]]))
        bursts[:, 2] *= p.local_ranks
        write_roce_pcap(
            out / "capture.pcap",
            bursts,
            bursts,
            start_time_s=p.start_time_s,
            seed=p.seed,
            ack_every=PCAP_ACK_EVERY,
            ack_delay_s=PCAP_ACK_DELAY_S,
            ack_jitter_s=PCAP_ACK_JITTER_S,
        )
        files.append("capture.pcap")
    truth = dict(sched.truth)
    if pcap:
        # The peers' ACKs come back after a fixed delay plus an exponential jitter.
        truth["capture"] = {
            "ack_latency_s": {
                q: PCAP_ACK_DELAY_S + math.log(1 / (1 - f)) * PCAP_ACK_JITTER_S
                for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
            }
        }
    truth["collectives"] = collectives_truth(sched.calls, p.nranks)
    truth["files"] = files
    truth["params"] = _params_dict(p)
    (out / "truth.json").write_text(json.dumps(truth, indent=2, sort_keys=True) + "\n")
    return truth
