"""What every source delivers, and the protocol a source implements.

Sources emit raw readings stamped with the agent's monotonic clock; rates, deltas and every
statistic are computed downstream (windows and estimators), never here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "CallBatch",
    "CallKey",
    "CollectiveCall",
    "CounterBatch",
    "CounterReading",
    "DeviceInfo",
    "Emit",
    "GpuReading",
    "LogLine",
    "Reading",
    "Source",
    "coalesce_counters",
]


@dataclass(frozen=True, slots=True)
class CounterReading:
    """One poll of cumulative byte counters.

    ``values`` maps a column name (``<device>_tx_bytes`` / ``<device>_rx_bytes``) to the
    cumulative byte counter (already in bytes: InfiniBand's 4-byte words are scaled by the
    source). A column missing from one poll means the device could not be read this time (a
    gap), not zero. ``counters`` carries each device's other raw counters (packets, RoCE
    congestion counters), keyed by device then counter name, for export as totals.
    """

    time_s: float
    values: Mapping[str, int]
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CounterBatch:
    """Consecutive polls of one counter source, handed over at once by a sampling thread.

    Ten :class:`CounterReading` a hand-over would cost ten queue items and ten window updates
    on the event loop; a batch is one of each, and the window takes it with array operations.
    Every poll read the same ``columns`` in the same order (a gap or a new device ends a
    batch), so ``values[i, j]`` is column ``columns[j]`` at ``times[i]``. ``counters`` holds
    ``(poll index, counters)`` for the polls that carried other counters. :meth:`readings`
    gives the polls back one by one, equal to the readings the batch was made of.
    """

    times: npt.NDArray[np.float64]
    columns: tuple[str, ...]
    values: npt.NDArray[np.uint64]
    counters: tuple[tuple[int, Mapping[str, Mapping[str, int]]], ...] = ()

    def __len__(self) -> int:
        return int(self.times.size)

    @property
    def time_s(self) -> float:
        """Time of the last poll (for bookkeeping that wants one time per reading)."""
        return float(self.times[-1]) if self.times.size else 0.0

    def readings(self) -> Iterator[CounterReading]:
        """The polls as :class:`CounterReading`, in order (for consumers that want each)."""
        extra = dict(self.counters)
        for i, (t, row) in enumerate(zip(self.times.tolist(), self.values.tolist(), strict=True)):
            yield CounterReading(t, dict(zip(self.columns, row, strict=True)), extra.get(i, {}))


def _counter_batch(run: list[CounterReading]) -> CounterBatch | None:
    """One batch of readings that share their columns; None when a value is no uint64."""
    rows = [list(r.values.values()) for r in run]
    if not all(type(v) is int for row in rows for v in row):
        return None  # a float would be truncated silently, a bool changes type
    try:
        values = np.array(rows, dtype=np.uint64).reshape(len(run), len(rows[0]))
    except OverflowError:  # negative, or beyond 64 bits
        return None
    return CounterBatch(
        times=np.fromiter((r.time_s for r in run), dtype=np.float64, count=len(run)),
        columns=tuple(run[0].values),
        values=values,
        counters=tuple((i, r.counters) for i, r in enumerate(run) if r.counters),
    )


def coalesce_counters(readings: list[Reading]) -> list[Reading]:
    """Runs of two or more :class:`CounterReading` with the same columns → one batch each.

    Other readings keep their place between the runs, so the order of everything is kept.
    """
    out: list[Reading] = []
    run: list[CounterReading] = []
    keys: tuple[str, ...] = ()

    def close() -> None:
        batch = _counter_batch(run) if len(run) > 1 else None
        if batch is None:
            out.extend(run)
        else:
            out.append(batch)
        run.clear()

    for reading in readings:
        if isinstance(reading, CounterReading):
            columns = tuple(reading.values)
            if run and columns != keys:
                close()
            keys = columns
            run.append(reading)
        else:
            if run:
                close()
            out.append(reading)
    if run:
        close()
    return out


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a counter source knows about one device; emitted at discovery and on change.

    ``device`` is the name used in column names (``eth0``, ``mlx5_0:1``); ``skipped`` holds
    the reason a present device is not read (no counters, filtered out, unreadable).
    """

    device: str
    kind: str  # "netdev" | "rdma"
    link_layer: str | None = None
    speed_bytes_per_s: float | None = None
    state: str | None = None
    skipped: str | None = None
    stale_counters: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU-activity sample.

    ``signals`` holds fractions in 0..1 keyed by signal name (``sm_active``, ``tensor_active``,
    ``gr_engine_active``, ``util``); ``util`` (utilization.gpu) is also a 0..1 fraction here.
    """

    time_s: float
    gpu: int
    signals: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One collective call as NCCL logs it (one per calling rank)."""

    time_s: float
    op: str
    s_bytes: int | None
    nranks: int | None
    comm: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)
    #: NCCL's commId of the communicator (the same on every host of the job), when known.
    comm_id: str | None = None


class CallKey(NamedTuple):
    """Who made a call and to whom: what the regime statistics need beyond time and size.

    ``peer`` is the peer rank of a Send or Recv (the COLL line's ``root``), -1 for every other
    op; ``rank`` is the caller's rank in ``comm`` from its Init line (None when the log had
    none).
    """

    op: str
    process: str  # "host:pid"
    comm: str  # the communicator's pointer as the log prints it
    nranks: int | None
    peer: int
    rank: int | None
    #: NCCL's commId of ``comm`` (the same in every process of the communicator), when known.
    comm_id: str | None = None


_NO_KEYS: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)


@dataclass(frozen=True, slots=True)
class CallBatch:
    """Many collective calls at once (a tailer sweep): cheaper than one reading per call.

    ``times`` and ``s_bytes`` hold one entry per call (NaN bytes where S is unknown); ``ops``
    maps op → (calls, bytes) within the batch. ``comm_id`` is the commId of the largest
    communicator that made a call in the batch (the job's world communicator), when an Init line
    named it. ``key_ids`` (one per call, indexing ``keys``) says who made each call and to
    whom; both are empty when the producer cannot say. ``time_resolution_s`` is 0 when the
    calls carry NCCL's own timestamps, else the producer's poll interval: calls stamped when
    they were read are that coarse.
    """

    times: npt.NDArray[np.float64]
    s_bytes: npt.NDArray[np.float64]
    ops: Mapping[str, tuple[int, int]]
    nranks: int | None
    processes: frozenset[str]
    comm_id: str | None = None
    key_ids: npt.NDArray[np.int32] = field(default_factory=lambda: _NO_KEYS)
    keys: tuple[CallKey, ...] = ()
    time_resolution_s: float = 0.0

    @property
    def time_s(self) -> float:
        """Time of the last call (for bookkeeping that wants one time per reading)."""
        return float(self.times[-1]) if self.times.size else 0.0


@dataclass(frozen=True, slots=True)
class LogLine:
    """A raw log line, for ``commpulse record`` (which copies logs rather than parsing them)."""

    time_s: float
    path: str
    text: str


@dataclass(frozen=True, slots=True)
class TimedCollective:
    """One operation as the NCCL Inspector timed it on the GPU."""

    op: str
    exec_s: float
    msg_bytes: int
    busbw: float | None  # nccl-tests bus bandwidth, bytes/s
    gpu_timed: bool


@dataclass(frozen=True, slots=True)
class TimingBatch:
    """The Inspector records a sweep found (arrival time; the dumps are periodic)."""

    time_s: float
    calls: tuple[TimedCollective, ...]


@dataclass(frozen=True, slots=True)
class SourceStats:
    """A source's own running totals (lines read, WARN lines, rotations, ...), for its metrics.

    Emitted when they change; the latest one per source is exported.
    """

    time_s: float
    values: Mapping[str, int]


Reading = (
    CounterReading
    | CounterBatch
    | GpuReading
    | CollectiveCall
    | CallBatch
    | DeviceInfo
    | LogLine
    | SourceStats
    | TimingBatch
)
Emit = Callable[[Reading], None]


class Source(Protocol):
    """A live input. ``run`` loops until cancelled, handing each reading to ``emit``."""

    name: str

    async def run(self, emit: Emit) -> None:
        """Read forever; raise :class:`agent.errors.SourceError` on failure."""
        ...
