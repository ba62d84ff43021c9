"""A live "job" for daemon tests: it writes what a GPU node would show, in real time.

* the RDMA data counters of ``mlx5_0`` port 1 in a copy of the fixture sysfs tree, updated in
  place (the agent keeps its descriptors open) with a square wave of known T, D and B;
* an NCCL log that grows by one AllReduce COLL line per step, with NCCL's timestamp prefix;
* a GPU CSV (``time,gpu,sm_active``) that grows every 50 ms, computing between the bursts.

The writer runs in its own process, at a raised priority where the test may set one. A kernel
counter never stalls; a writer thread sharing the GIL with the test's scrapes and subscriber,
on two cores with the agent, stalled for tens of milliseconds in mid-burst, and the agent then
saw bursts split in two (a 1/s job read 1.13-1.52 bursts/s in CI).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import multiprocessing as mp
import os
import shutil
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlx5-host" / "sys"


def _on_time(t: float, period: float, duty: float) -> float:
    """Seconds spent in bursts between the start and ``t`` (exact integral)."""
    k, phase = divmod(t, period)
    return k * duty * period + min(phase, duty * period)


def _write(path: Path, value: int) -> None:
    with path.open("r+") as fh:
        fh.write(f"{value}\n")
        fh.truncate()


@dataclass(frozen=True)
class _Spec:
    """What the writer process needs (picklable)."""

    xmit: Path
    rcv: Path
    nccl_log: Path
    gpu_csv: Path
    period: float
    duty: float
    rate: float
    t0: float


def _run(job: _Spec, stop: Event) -> None:
    """The writer loop (in the child process)."""
    with contextlib.suppress(OSError):  # not root: the default priority
        os.nice(-10)
    base_words = 2_500_000_000_000
    step = -1
    last_gpu = 0.0
    period, duty = job.period, job.duty
    with job.nccl_log.open("a") as log, job.gpu_csv.open("a") as gpu:
        while not stop.is_set():
            t = time.monotonic() - job.t0
            words = base_words + int(job.rate * _on_time(t, period, duty) / 4)
            _write(job.xmit, words)
            _write(job.rcv, words)
            k = int(t // period)
            if k != step:  # a new step: the host enqueues the AllReduce
                step = k
                stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
                log.write(
                    f"[{stamp}] node1:4242:4242 [0] NCCL INFO AllReduce: opCount {k:x} "
                    "sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count 250000000 "
                    "datatype 7 op 0 root 0 comm 0x55aa00000000 [nranks=16] "
                    "stream 0x55bb00000000\n"
                )
                log.flush()
            if t - last_gpu >= 0.05:
                on = _on_time(t, period, duty) - _on_time(max(0.0, t - 0.05), period, duty)
                busy = 0.05 - on
                sm = 0.85 * busy / 0.05 + 0.12 * (1 - busy / 0.05)
                gpu.write(f"{time.time():.6f},0,{min(1.0, max(0.0, sm)):.4f}\n")
                gpu.flush()
                last_gpu = t
            time.sleep(0.002)


class LiveJob:
    """Runs the writer in a child process until :meth:`stop`."""

    def __init__(self, root: Path, *, period: float, duty: float, rate: float) -> None:
        self.period, self.duty, self.rate = period, duty, rate
        self.sys = root / "sys"
        shutil.copytree(FIXTURE, self.sys, symlinks=True)
        port = (self.sys / "class" / "infiniband" / "mlx5_0").resolve() / "ports" / "1"
        self.xmit = port / "counters" / "port_xmit_data"
        self.rcv = port / "counters" / "port_rcv_data"
        self.nccl_log = root / "nccl" / "nccl.node1.4242.log"
        self.nccl_log.parent.mkdir()
        self.gpu_csv = root / "gpu.csv"
        self.gpu_csv.write_text("time,gpu,sm_active\n")
        self.t0 = time.monotonic()  # CLOCK_MONOTONIC: the same in the child
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        spec = _Spec(self.xmit, self.rcv, self.nccl_log, self.gpu_csv, period, duty, rate, self.t0)
        self._proc = ctx.Process(target=_run, args=(spec, self._stop), name="live-job", daemon=True)

    def start(self) -> None:
        """Start writing."""
        self._proc.start()

    def stop(self) -> None:
        """Stop writing."""
        self._stop.set()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()


def approx(a: float | None, b: float, rel: float) -> bool:
    """``a`` within ``rel`` of ``b`` (False for None)."""
    return a is not None and math.isfinite(a) and abs(a / b - 1.0) <= rel
