"""``commpulse record``: raw samples of the configured sources, in the contract formats.

A user can record a job on the host where it runs and send the files to whoever analyzes it
(``commpulse analyze`` reads them back):

* ``counters_<source>.csv`` — ``time,<device>_tx_bytes,<device>_rx_bytes,...``: one file per
  counter source, because NIC and RDMA counters see different traffic and must not be summed
  (give ``analyze`` the RDMA file on an IB/RoCE host). Columns are fixed by the first poll; an
  empty cell is a poll where that device could not be read.
* ``gpu.csv`` — ``time,gpu,<signal>...``;
* ``nccl.log`` — the NCCL lines as written, from every tailed file.

Times are wall-clock seconds (POSIX), so the files line up with NCCL's own timestamps.
A directory that already holds a recording is refused, and every file is created exclusively:
two recorders writing the same file interleaved their rows (a real mishap: a recorder left
running by a failed job wrote into the next run's file).
With ``compress`` every file is gzip-compressed (``.gz`` added to its name): 100 Hz counter
recordings of real jobs shrank 3.8-4.8x, and ``analyze`` reads them as they are. A recording cut
by a crash keeps all but its cut last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import signal
import time
from pathlib import Path
from typing import IO

from agent.clock import MonotonicClock
from agent.config import Config
from agent.daemon import build_sources
from agent.errors import ConfigError, SourceError
from collectors._base import CounterBatch, CounterReading, GpuReading, LogLine, Reading, Source
from collectors._sampler import Sampler

__all__ = ["Recorder", "record"]

log = logging.getLogger(__name__)


class Recorder:
    """Writes readings to the contract files as they arrive."""

    def __init__(self, out: Path, *, wall_offset: float, compress: bool = False) -> None:
        self._out = out
        self._offset = wall_offset  # wall = monotonic + offset
        self._suffix = ".gz" if compress else ""
        self._files: dict[str, IO[str]] = {}
        self._columns: dict[str, list[str]] = {}
        self._gpu_signals: tuple[str, ...] | None = None
        self._warned: set[str] = set()
        self.rows: dict[str, int] = {}

    def _open(self, name: str) -> IO[str] | None:
        """The file ``name``, created on first use; None if another writer created it first."""
        fh = self._files.get(name)
        if fh is None:
            path = self._out / name
            try:
                if self._suffix:  # open until close(), as the plain files are
                    fh = gzip.open(path, "xt", encoding="utf-8", compresslevel=6)  # noqa: SIM115
                else:
                    fh = path.open("x", encoding="utf-8")
            except FileExistsError:
                self._warn_once(name, f"{path} appeared meanwhile (another recorder?): not written")
                return None
            self._files[name] = fh
        return fh

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def add(self, source: str, reading: Reading) -> None:
        """Write one reading (a batch of counter polls as one row per poll)."""
        if isinstance(reading, CounterBatch):
            for poll in reading.readings():
                self.add(source, poll)
            return
        if isinstance(reading, CounterReading | GpuReading):
            t = f"{reading.time_s + self._offset:.6f}"
        if isinstance(reading, CounterReading):
            name = f"counters_{source}.csv{self._suffix}"
            fh = self._open(name)
            if fh is None:
                return
            columns = self._columns.get(name)
            if columns is None:
                columns = self._columns[name] = sorted(reading.values)
                fh.write("time," + ",".join(columns) + "\n")
            extra = set(reading.values) - set(columns)
            if extra:
                self._warn_once(name, f"{name}: devices appeared after the start, not recorded: "
                                f"{sorted(extra)}")  # fmt: skip
            cells = [str(reading.values[c]) if c in reading.values else "" for c in columns]
            fh.write(t + "," + ",".join(cells) + "\n")
        elif isinstance(reading, GpuReading):
            name = f"gpu.csv{self._suffix}"
            fh = self._open(name)
            if fh is None:
                return
            if self._gpu_signals is None:
                self._gpu_signals = tuple(sorted(reading.signals))
                fh.write("time,gpu," + ",".join(self._gpu_signals) + "\n")
            values = []
            for s in self._gpu_signals:
                v = reading.signals.get(s)
                # The named GPU CSV keeps util in percent, like nvidia-smi.
                values.append("" if v is None else f"{v * 100:.1f}" if s == "util" else f"{v:.4f}")
            fh.write(f"{t},{reading.gpu}," + ",".join(values) + "\n")
        elif isinstance(reading, LogLine):
            name = f"nccl.log{self._suffix}"
            fh = self._open(name)
            if fh is None:
                return
            fh.write(reading.text + "\n")
        else:
            return
        self.rows[name] = self.rows.get(name, 0) + 1

    def close(self) -> None:
        """Flush and close every file."""
        for fh in self._files.values():
            fh.close()
        self._files.clear()


#: What a recording writes (see the module docstring).
_RECORDING_FILES = ("counters_*.csv", "counters_*.csv.gz", "gpu.csv", "gpu.csv.gz", "nccl.log",
                    "nccl.log.gz")  # fmt: skip


async def _run_source(source: Source, recorder: Recorder) -> None:
    try:
        await source.run(lambda r: recorder.add(source.name, r))
    except SourceError as exc:
        log.warning("source %s: %s (not recorded)", source.name, exc)


async def record(
    config: Config, out: Path, duration_s: float, *, compress: bool = False
) -> dict[str, int]:
    """Record the configured sources into ``out`` for ``duration_s`` (or until SIGINT).

    ``compress`` gzips every file. Returns the rows written per file name.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out}: {exc.strerror}") from None
    held = sorted(p.name for pattern in _RECORDING_FILES for p in out.glob(pattern) if p.is_file())
    if held:
        raise ConfigError(
            f"{out} already holds a recording ({', '.join(held)}): record into a new "
            "directory, or move those files away"
        )
    clock = MonotonicClock()
    sources = build_sources(config, clock=clock, sampler=Sampler(clock), raw_lines=True)
    recorder = Recorder(out, wall_offset=time.time() - clock.now(), compress=compress)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(_run_source(s, recorder), name=s.name) for s in sources]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), duration_s)
            for task in tasks:
                task.cancel()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        recorder.close()
    return dict(recorder.rows)
