"""A live "job" for daemon tests: it writes what a GPU node would show, in real time.

* the RDMA data counters of ``mlx5_0`` port 1 in a copy of the fixture sysfs tree, updated in
  place (the agent keeps its descriptors open) with a square wave of known T, D and B;
* an NCCL log that grows by one AllReduce COLL line per step, with NCCL's timestamp prefix;
* a GPU CSV (``time,gpu,sm_active``) that grows every 50 ms, computing between the bursts.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil
import threading
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlx5-host" / "sys"


class LiveJob:
    """Runs the writers in a thread until :meth:`stop`."""

    def __init__(self, root: Path, *, period: float, duty: float, rate: float) -> None:
        self.period, self.duty, self.rate = period, duty, rate
        self.sys = root / "sys"
        shutil.copytree(FIXTURE, self.sys, symlinks=True)
        port = (self.sys / "class" / "infiniband" / "mlx5_0").resolve() / "ports" / "1"
        self._xmit = port / "counters" / "port_xmit_data"
        self._rcv = port / "counters" / "port_rcv_data"
        self.nccl_log = root / "nccl" / "nccl.node1.4242.log"
        self.nccl_log.parent.mkdir()
        self.gpu_csv = root / "gpu.csv"
        self.gpu_csv.write_text("time,gpu,sm_active\n")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-job", daemon=True)
        self._t0 = time.monotonic()

    def _on_time(self, t: float) -> float:
        """Seconds spent in bursts between the start and ``t`` (exact integral)."""
        k, phase = divmod(t, self.period)
        return k * self.duty * self.period + min(phase, self.duty * self.period)

    def _write(self, path: Path, value: int) -> None:
        with path.open("r+") as fh:
            fh.write(f"{value}\n")
            fh.truncate()

    def _run(self) -> None:
        base_words = 2_500_000_000_000
        step = -1
        last_gpu = 0.0
        with self.nccl_log.open("a") as log, self.gpu_csv.open("a") as gpu:
            while not self._stop.is_set():
                t = time.monotonic() - self._t0
                words = base_words + int(self.rate * self._on_time(t) / 4)
                self._write(self._xmit, words)
                self._write(self._rcv, words)
                k = int(t // self.period)
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
                    busy = 0.05 - (self._on_time(t) - self._on_time(max(0.0, t - 0.05)))
                    sm = 0.85 * busy / 0.05 + 0.12 * (1 - busy / 0.05)
                    gpu.write(f"{time.time():.6f},0,{min(1.0, max(0.0, sm)):.4f}\n")
                    gpu.flush()
                    last_gpu = t
                time.sleep(0.002)

    def start(self) -> None:
        """Start writing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop writing."""
        self._stop.set()
        self._thread.join(timeout=5)


def approx(a: float | None, b: float, rel: float) -> bool:
    """``a`` within ``rel`` of ``b`` (False for None)."""
    return a is not None and math.isfinite(a) and abs(a / b - 1.0) <= rel
