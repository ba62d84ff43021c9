"""NCCL Inspector plugin output: GPU-timed collectives (NCCL >= 2.28).

The Inspector (``plugins/profiler/inspector`` in the NCCL repository; ``NCCL_PROFILER_PLUGIN=
libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1``) writes one compact JSON object per line
to ``<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log``::

    {"header": {"id": "0x7f8c496ae9f661", "comm_name": "...", "rank": 2, "n_ranks": 8,
                "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                  "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1748030377748202,
                  "hostname": "node-1", "pid": 1639453},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                   "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}

``p2p_perf`` records (2.30+) carry ``p2p``, ``p2p_sn``, ``p2p_peer``, ``p2p_msg_size_bytes``,
``p2p_exec_time_us``, ``p2p_timing_source``, ``p2p_algobw_gbs``, ``p2p_busbw_gbs``. Doubles are
``%lf``; a NaN is the string ``"nan"``. Unlike a COLL line, which NCCL prints when the host
enqueues a call, ``exec_time_us`` is the kernel's time on the GPU (``kernel_gpu``), or a CPU
fallback the record names. It includes time spent waiting for slower peers inside the kernel.

In NCCL 2.28-2.29 each dump writes only the latest completed collective per communicator (a
sample); 2.30+ drains a per-communicator ring (every op of >= 8 KiB). A record seen twice (the
same communicator, rank, op and sequence number) is counted once.
"""

from __future__ import annotations

import glob
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent.clock import Clock
from agent.errors import ConfigError, InputFormatError, SourceUnavailable
from collectors._base import Emit, Reading, SourceStats, TimedCollective, TimingBatch
from collectors._config import check_interval, doc
from collectors._sampler import Sampler
from collectors._text import read_text_file
from collectors.nccl_tail import Tailer

__all__ = [
    "InspectorConfig",
    "InspectorRecord",
    "InspectorSource",
    "InspectorSummary",
    "OpTiming",
    "parse_inspector_record",
    "read_inspector_files",
    "summarize_records",
]

log = logging.getLogger(__name__)

GBS = 1e9  # the Inspector's GB/s are 1e9 bytes per second

#: Operations remembered to drop repeated dumps of the same one (a bound, not a limit in use).
MAX_REMEMBERED = 65536


@dataclass(frozen=True, slots=True)
class InspectorRecord:
    """One timed collective (or, 2.30+, point-to-point operation) of one rank."""

    comm_id: str
    comm_name: str | None
    rank: int
    nranks: int
    nnodes: int | None
    hostname: str | None
    pid: int | None
    dump_time_s: float | None
    kind: Literal["coll", "p2p"]
    op: str
    seq: int
    msg_bytes: int
    exec_s: float
    timing: str | None
    algbw: float | None
    busbw: float | None
    peer: int | None = None

    @property
    def key(self) -> tuple[str, str | None, int | None, int, str, str, int]:
        """What identifies the operation (a repeated dump of it has the same key)."""
        return (self.comm_id, self.hostname, self.pid, self.rank, self.kind, self.op, self.seq)

    @property
    def gpu_timed(self) -> bool:
        """Timed by the GPU's clock (the only timing that excludes host launch latency)."""
        return self.timing in (None, "kernel_gpu")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, str):  # the plugin writes NaN as "nan"
        try:
            v = float(value)
        except ValueError:
            return None
        return v if math.isfinite(v) else None
    return None


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} is not an integer: {value!r}")
    return value


def parse_inspector_record(line: str) -> InspectorRecord | None:
    """Parse one line of an Inspector dump (pure); None for a blank line.

    Raises:
        ValueError: the line is not JSON or not an Inspector record (the message says why).
    """
    text = line.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    header, meta = obj.get("header"), obj.get("metadata", {})
    if not isinstance(header, dict) or not isinstance(meta, dict):
        raise ValueError("no header object")
    kind: Literal["coll", "p2p"]
    if isinstance(obj.get("coll_perf"), dict):
        kind, perf = "coll", obj["coll_perf"]
    elif isinstance(obj.get("p2p_perf"), dict):
        kind, perf = "p2p", obj["p2p_perf"]
    else:
        raise ValueError("neither coll_perf nor p2p_perf")
    comm = header.get("id")
    if not isinstance(comm, str) or not comm:
        raise ValueError("header.id is missing")
    op = perf.get(kind)
    if not isinstance(op, str) or not op:
        raise ValueError(f"{kind}_perf.{kind} is missing")
    exec_us = _number(perf.get(f"{kind}_exec_time_us"))
    if exec_us is None or exec_us < 0:
        raise ValueError(f"{kind}_exec_time_us is not a time")
    dump_us = _number(meta.get("dump_timestamp_us"))
    algbw, busbw = _number(perf.get(f"{kind}_algobw_gbs")), _number(perf.get(f"{kind}_busbw_gbs"))
    name = header.get("comm_name")
    host = meta.get("hostname")
    pid = meta.get("pid")
    timing = perf.get(f"{kind}_timing_source")
    peer = perf.get("p2p_peer")
    nnodes = header.get("nnodes")
    return InspectorRecord(
        comm_id=comm.lower().removeprefix("0x"),
        comm_name=name if isinstance(name, str) and name != "unknown" else None,
        rank=_int(header, "rank"),
        nranks=_int(header, "n_ranks"),
        nnodes=nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) else None,
        hostname=host if isinstance(host, str) else None,
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        dump_time_s=dump_us / 1e6 if dump_us is not None else None,
        kind=kind,
        op=op,
        seq=_int(perf, f"{kind}_sn"),
        msg_bytes=_int(perf, f"{kind}_msg_size_bytes"),
        exec_s=exec_us / 1e6,
        timing=timing if isinstance(timing, str) else None,
        algbw=algbw * GBS if algbw is not None else None,
        busbw=busbw * GBS if busbw is not None else None,
        peer=peer if isinstance(peer, int) and not isinstance(peer, bool) else None,
    )


@dataclass(frozen=True)
class OpTiming:
    """Timing of one op over the records: percentiles of the GPU execution time."""

    op: str
    calls: int
    exec_p50_s: float
    exec_p90_s: float
    exec_p99_s: float
    busbw_p50: float | None
    msg_bytes_p50: float


@dataclass(frozen=True)
class InspectorSummary:
    """What a set of Inspector records says, per op and per communicator."""

    records: int
    duplicates: int
    bad_lines: int
    gpu_timed: int
    ops: dict[str, OpTiming]
    communicators: dict[str, dict[str, Any]] = field(default_factory=dict)


def summarize_records(
    records: Iterable[InspectorRecord], *, bad_lines: int = 0
) -> InspectorSummary:
    """Per-op percentiles and per-communicator facts, each operation counted once (pure)."""
    seen: set[tuple[str, str | None, int | None, int, str, str, int]] = set()
    by_op: dict[str, list[InspectorRecord]] = {}
    comms: dict[str, dict[str, Any]] = {}
    duplicates = gpu = 0
    for r in records:
        if r.key in seen:
            duplicates += 1
            continue
        seen.add(r.key)
        by_op.setdefault(r.op, []).append(r)
        gpu += r.gpu_timed
        c = comms.setdefault(
            r.comm_id, {"name": r.comm_name, "nranks": r.nranks, "nnodes": r.nnodes, "ranks": set()}
        )
        c["ranks"].add(r.rank)
    ops = {}
    for op, rs in sorted(by_op.items()):
        t = np.asarray([r.exec_s for r in rs])
        bw = np.asarray([r.busbw for r in rs if r.busbw is not None and r.busbw > 0])
        ops[op] = OpTiming(
            op=op,
            calls=len(rs),
            exec_p50_s=float(np.percentile(t, 50)),
            exec_p90_s=float(np.percentile(t, 90)),
            exec_p99_s=float(np.percentile(t, 99)),
            busbw_p50=float(np.median(bw)) if bw.size else None,
            msg_bytes_p50=float(np.median([r.msg_bytes for r in rs])),
        )
    for c in comms.values():
        c["ranks"] = sorted(c["ranks"])
    return InspectorSummary(
        records=len(seen),
        duplicates=duplicates,
        bad_lines=bad_lines,
        gpu_timed=gpu,
        ops=ops,
        communicators=comms,
    )


def _parse_lines(
    lines: Iterable[str],
) -> tuple[list[InspectorRecord], list[tuple[int, str]]]:
    good: list[InspectorRecord] = []
    errors: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        try:
            record = parse_inspector_record(line)
        except ValueError as exc:
            errors.append((number, str(exc)))
            continue
        if record is not None:
            good.append(record)
    return good, errors


def read_inspector_files(paths: Sequence[Path]) -> InspectorSummary:
    """Read Inspector dump files (JSONL); bad lines are counted, a file with none good fails.

    Raises:
        InputFormatError: a file cannot be read, or holds no Inspector record at all.
    """
    records: list[InspectorRecord] = []
    bad = 0
    for path in paths:
        good, errors = read_text_file(path, _parse_lines, what="an NCCL Inspector dump (JSONL)")
        records.extend(good)
        bad += len(errors)
        if not good:
            line_no, reason = errors[0] if errors else (None, "the file is empty")
            raise InputFormatError(path, f"no NCCL Inspector record: {reason}", line=line_no)
    return summarize_records(records, bad_lines=bad)


# --------------------------------------------------------------------------------------------
# The live source


@dataclass(frozen=True)
class InspectorConfig:
    """Settings of the Inspector source (section ``[sources.nccl_inspector]``)."""

    enabled: bool = doc(False, "Read NCCL Inspector dumps (GPU-timed collectives, NCCL >= 2.28).")
    paths: tuple[str, ...] = doc(
        ("/var/log/nccl/inspector/*.log",),
        "Glob patterns of the dump files (NCCL_INSPECTOR_DUMP_DIR/<host>-pid<pid>.log).",
    )
    read_from: str = doc(
        "end", "Where to start in files found at startup: end or beginning (new files: 0)."
    )
    poll_interval_s: float = doc(1.0, "Seconds between looks at the files.")
    state_file: Path | None = doc(
        None, "Offsets kept across restarts; unset: <agent.state_dir>/inspector_offsets.json."
    )

    def __post_init__(self) -> None:
        if self.read_from not in ("end", "beginning"):
            raise ConfigError("sources.nccl_inspector.read_from must be end or beginning")
        check_interval(
            "sources.nccl_inspector", "poll_interval_s", self.poll_interval_s, 0.05, 60.0
        )
        if self.enabled and not self.paths:
            raise ConfigError("sources.nccl_inspector.paths: give at least one glob pattern")


class InspectorSource:
    """Tails Inspector dumps; emits the GPU-timed operations once each."""

    name = "nccl_inspector"

    def __init__(
        self,
        config: InspectorConfig,
        *,
        clock: Clock,
        state_file: Path | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self._cfg = config
        self._clock = clock
        self._state_file = config.state_file or state_file
        self._sampler = sampler or Sampler(clock)
        self._seen: set[tuple[str, str | None, int | None, int, str, str, int]] = set()
        self.records = 0
        self.duplicates = 0
        self.bad_lines = 0

    def accept(self, lines: Iterable[str], now: float) -> list[Reading]:
        """The readings of new dump lines (pure but for the set of operations already seen)."""
        calls = []
        for line in lines:
            try:
                record = parse_inspector_record(line)
            except ValueError as exc:
                self.bad_lines += 1
                if self.bad_lines <= 3:
                    log.warning(
                        "NCCL Inspector: skipped a line: %s", exc, extra={"source": self.name}
                    )
                continue
            if record is None:
                continue
            if record.key in self._seen:
                self.duplicates += 1
                continue
            if len(self._seen) >= MAX_REMEMBERED:
                self._seen.clear()
            self._seen.add(record.key)
            self.records += 1
            calls.append(
                TimedCollective(record.op, record.exec_s, record.msg_bytes, record.busbw,
                                record.gpu_timed)
            )  # fmt: skip
        out: list[Reading] = []
        if calls:
            out.append(TimingBatch(now, tuple(calls)))
        out.append(
            SourceStats(
                now,
                {
                    "records": self.records,
                    "duplicates": self.duplicates,
                    "bad_lines": self.bad_lines,
                },
            )
        )
        return out

    async def run(self, emit: Emit) -> None:
        """Tail until cancelled."""
        tailer = Tailer(self._cfg.paths, read_from=self._cfg.read_from, state_file=self._state_file)
        if not tailer.stats.files and not any(glob.has_magic(p) for p in self._cfg.paths):
            tailer.close()
            raise SourceUnavailable(self.name, f"no file matches {list(self._cfg.paths)}")
        next_save = self._clock.now() + 5.0

        def sweep() -> list[Reading]:
            nonlocal next_save
            now = self._clock.now()
            out = self.accept((line for _, line in tailer.poll()), now)
            if now >= next_save:
                next_save = now + 5.0
                tailer.save_state()
            return out

        await self._sampler.run(
            self.name, self._cfg.poll_interval_s, sweep, emit, close=tailer.close
        )
