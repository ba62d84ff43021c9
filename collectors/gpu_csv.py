"""GPU-activity CSV: ``nvidia-smi --query-gpu=... --format=csv`` output, or the named form.

Two layouts are accepted (DESIGN.md, "GPU CSV"):

* nvidia-smi, e.g. ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms
  100``: header ``timestamp, index, utilization.gpu [%]`` (``nounits`` drops the ``[%]``),
  rows ``2026/01/01 00:00:00.123, 0, 97 %``. With ``noheader`` the columns are taken in the
  order ``timestamp, index, utilization.gpu``. Extra columns are allowed and ignored unless
  they are a known signal. ``[N/A]`` / ``[Not Supported]`` cells are missing values. Without an
  ``index`` column the GPUs are told apart by ``pci.bus_id`` or ``uuid`` (numbered in order of
  appearance), else the rows that share a timestamp are GPUs 0, 1, ... in order (nvidia-smi
  prints them so). Header lines repeated by a logging loop are skipped, and a UTF-8 byte-order
  mark is ignored.
* named: header ``time,gpu,<signal>[,<signal>...]``, ``time`` in seconds, signals named after
  what they measure: ``sm_active``, ``tensor_active``, ``gr_engine_active`` (fractions 0..1)
  or ``util`` (utilization.gpu, percent).

All signals come out as fractions in 0..1.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.clock import Clock
from agent.errors import ConfigError, InputFormatError, SourceUnavailable
from collectors._base import Emit, GpuReading, Reading
from collectors._config import check_interval, doc
from collectors._sampler import Sampler
from collectors._text import read_text_file
from collectors.nccl_tail import Tailer

__all__ = [
    "KNOWN_SIGNALS",
    "GpuCsvConfig",
    "GpuCsvParser",
    "GpuCsvSource",
    "GpuTable",
    "parse_gpu_csv",
    "read_gpu_csv",
]

log = logging.getLogger(__name__)

#: Signal name → whether the CSV gives it in percent (converted to a fraction).
KNOWN_SIGNALS: dict[str, bool] = {
    "sm_active": False,
    "tensor_active": False,
    "gr_engine_active": False,
    "util": True,
}

#: nvidia-smi query field → our signal name.
_SMI_FIELDS = {"utilization.gpu": "util"}
_SMI_DEFAULT = ["timestamp", "index", "utilization.gpu"]
#: Columns that name a GPU when the query has no ``index``.
_SMI_IDS = ("pci.bus_id", "uuid")
#: Above this, a number in the index column of a file without header is no GPU index (a
#: utilisation in another column order, which would be read silently as GPU 100).
_MAX_GPU_INDEX = 63
_MISSING = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[gpu is lost]", "nan"}


@dataclass(frozen=True)
class GpuTable:
    """GPU samples: time (s), GPU index, and each signal as a 0..1 fraction (NaN = missing)."""

    times: npt.NDArray[np.float64]
    gpu: npt.NDArray[np.int64]
    signals: dict[str, npt.NDArray[np.float64]]


def _smi_time(cell: str) -> float:
    """nvidia-smi's ``YYYY/MM/DD HH:MM:SS.mmm``; local time read as UTC."""
    text = cell.strip()
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f"):
        try:
            stamp = dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
        return stamp.timestamp()
    raise ValueError(f"timestamp {text!r} is not in nvidia-smi's 'YYYY/MM/DD HH:MM:SS.mmm' form")


def _value(cell: str, percent: bool) -> float:
    text = cell.strip()
    if text.lower() in _MISSING:
        return math.nan
    if text.endswith("%"):
        text = text[:-1].strip()
    v = float(text)
    if not math.isfinite(v):
        return math.nan
    v = v / 100.0 if percent else v
    if v < -1e-9 or v > 1.0 + 1e-6:
        raise ValueError(f"{cell.strip()!r} is outside 0..{'100 %' if percent else '1'}")
    return min(1.0, max(0.0, v))


def _field_name(raw: str) -> str:
    """Header cell without units: ``utilization.gpu [%]`` → ``utilization.gpu``."""
    return raw.split("[", 1)[0].strip().lower()


@dataclass(frozen=True)
class _Layout:
    mode: str  # "named" | "smi"
    width: int
    t_col: int
    g_col: int  # -1: no index column (see id_col)
    signals: dict[int, str]
    id_col: int = -1  # pci.bus_id or uuid when there is no index; -1: by place in a timestamp
    header: tuple[str, ...] = ()  # the header's field names (to skip it when it comes again)


def _layout(cells: list[str], path: Path | str, lineno: int) -> tuple[_Layout, bool]:
    """The column layout from the first row; True when that row was a header."""
    fields = [_field_name(c) for c in cells]
    if fields[:2] == ["time", "gpu"]:
        signals = {i: f for i, f in enumerate(fields) if i >= 2}
        unknown = [f for f in signals.values() if f not in KNOWN_SIGNALS]
        if unknown:
            raise InputFormatError(
                path,
                f"unknown GPU signal column(s) {unknown}; known: {sorted(KNOWN_SIGNALS)}",
                line=lineno,
            )
        return _Layout("named", len(fields), 0, 1, signals, header=tuple(fields)), True
    header = "timestamp" in fields
    if not header:
        try:
            _smi_time(cells[0])
        except ValueError:
            raise InputFormatError(
                path,
                "unrecognised GPU CSV header: expected 'time,gpu,<signal>...' or nvidia-smi "
                "'timestamp, index, utilization.gpu' (a timestamp column is needed)",
                line=lineno,
            ) from None
        if len(cells) != len(_SMI_DEFAULT):
            raise InputFormatError(
                path,
                f"no header, so the columns must be nvidia-smi's default query order "
                f"({', '.join(_SMI_DEFAULT)}), but a row has {len(cells)}: record with a "
                "header (--format=csv, without noheader)",
                line=lineno,
            )
        fields = list(_SMI_DEFAULT)  # noheader: the query order
    signals = {i: _SMI_FIELDS[f] for i, f in enumerate(fields) if f in _SMI_FIELDS}
    if not signals:
        raise InputFormatError(path, "no utilization.gpu column in the nvidia-smi CSV", line=lineno)
    g_col = fields.index("index") if "index" in fields else -1
    id_col = next((fields.index(f) for f in _SMI_IDS if f in fields), -1)
    layout = _Layout(
        "smi", len(fields), fields.index("timestamp"), g_col, signals, id_col,
        tuple(fields) if header else (),
    )  # fmt: skip
    return layout, header


class GpuCsvParser:
    """Incremental parser: feed lines one by one (files being written, or whole files)."""

    def __init__(self, path: Path | str = "<gpu>") -> None:
        self._path = path
        self._layout: _Layout | None = None
        self._lineno = 0
        self._ids: dict[str, int] = {}  # pci.bus_id / uuid → index, without an index column
        self._last_t = math.nan  # ... or the place of a row among those of one timestamp
        self._place = 0

    @property
    def signals(self) -> tuple[str, ...]:
        """Signal names of this file (known after the first row)."""
        return tuple(self._layout.signals.values()) if self._layout else ()

    def feed(self, raw: str) -> tuple[float, int, dict[str, float]] | None:
        """(time, gpu, signals) for a data row; None for headers, comments and blank lines."""
        self._lineno += 1
        text = raw.strip().lstrip("\ufeff").strip()
        if not text or text.startswith("#"):
            return None
        cells = [c.strip() for c in text.split(",")]
        if self._layout is None:
            self._layout, was_header = _layout(cells, self._path, self._lineno)
            if was_header:
                return None
        lay = self._layout
        if lay.header and tuple(_field_name(c) for c in cells) == lay.header:
            return None  # the header again: a loop that runs nvidia-smi once a sample
        if len(cells) != lay.width:
            raise InputFormatError(
                self._path, f"expected {lay.width} fields, found {len(cells)}", line=self._lineno
            )
        try:
            t = float(cells[lay.t_col]) if lay.mode == "named" else _smi_time(cells[lay.t_col])
            g = int(cells[lay.g_col]) if lay.g_col >= 0 else self._gpu_without_index(cells, t)
            values = {
                name: _value(cells[i], KNOWN_SIGNALS[name]) for i, name in lay.signals.items()
            }
        except ValueError as exc:
            raise InputFormatError(self._path, str(exc), line=self._lineno) from None
        if not math.isfinite(t) or g < 0:
            raise InputFormatError(
                self._path, "time must be finite and gpu index >= 0", line=self._lineno
            )
        if lay.mode == "smi" and not lay.header and g > _MAX_GPU_INDEX:
            raise InputFormatError(
                self._path,
                f"no header, so column 2 is read as the GPU index, but it holds {g}: the query "
                f"was not in the order {', '.join(_SMI_DEFAULT)}; record with a header "
                "(--format=csv, without noheader)",
                line=self._lineno,
            )
        return t, g, values

    def _gpu_without_index(self, cells: list[str], t: float) -> int:
        """A GPU number for a query without ``index``: by bus id or UUID, else by place."""
        lay = self._layout
        if lay is not None and lay.id_col >= 0:
            return self._ids.setdefault(cells[lay.id_col], len(self._ids))
        self._place = self._place + 1 if t == self._last_t else 0
        self._last_t = t
        return self._place


def parse_gpu_csv(lines: Iterable[str], *, path: Path | str = "<gpu>") -> GpuTable:
    """Parse GPU CSV text (no I/O); :class:`InputFormatError` names the line on bad input."""
    parser = GpuCsvParser(path)
    times: list[float] = []
    gpus: list[int] = []
    values: dict[str, list[float]] = {}
    seen_any = False
    for raw in lines:
        if raw.strip():
            seen_any = True
        row = parser.feed(raw)
        if row is None:
            continue
        t, g, signals = row
        times.append(t)
        gpus.append(g)
        for name, v in signals.items():
            values.setdefault(name, []).append(v)
    if not seen_any:
        raise InputFormatError(path, "empty file: expected a GPU CSV")
    if not times:
        raise InputFormatError(path, "no data rows")
    return GpuTable(
        times=np.asarray(times, dtype=np.float64),
        gpu=np.asarray(gpus, dtype=np.int64),
        signals={k: np.asarray(v, dtype=np.float64) for k, v in values.items()},
    )


def read_gpu_csv(path: Path) -> GpuTable:
    """Read a GPU CSV file (thin reader around :func:`parse_gpu_csv`)."""
    return read_text_file(
        path, lambda lines: parse_gpu_csv(lines, path=path), what="a GPU CSV file"
    )


@dataclass(frozen=True)
class GpuCsvConfig:
    """Settings of the GPU CSV source (section ``[sources.gpu_csv]``)."""

    enabled: bool = doc(False, "Read GPU activity from a CSV file.")
    path: Path | None = doc(
        None, "The CSV: nvidia-smi --query-gpu=... --format=csv -lms N -f FILE, or time,gpu,..."
    )
    mode: str = doc(
        "follow", "follow: tail a file being written; replay: play a recording at its pace."
    )
    loop: bool = doc(True, "replay: start over at the end of the file.")
    poll_interval_s: float = doc(
        0.2,
        "Seconds between looks at the file (the rows carry their own times; at the NCCL "
        "log's interval both followers share one thread).",
    )

    def __post_init__(self) -> None:
        if self.mode not in ("follow", "replay"):
            raise ConfigError("sources.gpu_csv.mode must be follow or replay")
        check_interval("sources.gpu_csv", "poll_interval_s", self.poll_interval_s, 0.01, 60.0)
        if self.enabled and self.path is None:
            raise ConfigError("sources.gpu_csv.path: give the CSV file to read")


class GpuCsvSource:
    """GPU samples from a CSV: followed as it grows, or a recording replayed in real time.

    CSV times (nvidia-smi's local wall clock, or any origin) are mapped onto the agent's
    monotonic clock: in follow mode with the smallest arrival-minus-sample lag seen (a row
    cannot arrive before it was sampled), in replay mode from the start of the replay.
    """

    name = "gpu_csv"

    def __init__(
        self, config: GpuCsvConfig, *, clock: Clock, sampler: Sampler | None = None
    ) -> None:
        assert config.path is not None
        self._cfg = config
        self._path: Path = config.path
        self._clock = clock
        self._sampler = sampler or Sampler(clock)

    async def run(self, emit: Emit) -> None:
        """Follow or replay until cancelled (a replay without ``loop`` ends at the file end)."""
        if self._cfg.mode == "replay":
            await self._replay(emit)
        else:
            await self._follow(emit)

    async def _replay(self, emit: Emit) -> None:
        table = read_gpu_csv(self._path)
        order = np.argsort(table.times, kind="stable")
        times = table.times[order] - float(table.times[order][0])
        span = float(times[-1]) + float(np.median(np.diff(times))) if times.size > 1 else 1.0
        names = list(table.signals)
        index, lap, start = 0, 0, self._clock.now()

        def sweep() -> list[Reading]:
            nonlocal index, lap
            now = self._clock.now()
            out: list[Reading] = []
            while True:
                due = start + lap * span + float(times[index])
                if due > now:
                    return out
                j = int(order[index])
                signals = {n: float(table.signals[n][j]) for n in names}
                out.append(GpuReading(due, int(table.gpu[j]), signals))
                index += 1
                if index == times.size:
                    if not self._cfg.loop:
                        raise _ReplayDone
                    index = 0
                    lap += 1

        try:
            await self._sampler.run(self.name, self._cfg.poll_interval_s, sweep, emit)
        except _ReplayDone:
            return

    async def _follow(self, emit: Emit) -> None:
        tailer = Tailer((str(self._path),), read_from="beginning", max_line_bytes=65536)
        if not tailer.stats.files:
            tailer.close()
            raise SourceUnavailable(self.name, f"{self._path} does not exist (yet)")
        parser = GpuCsvParser(self._path)
        lag: list[float] = []

        def sweep() -> list[Reading]:
            arrival = self._clock.now()
            out: list[Reading] = []
            for _, line in tailer.poll():
                try:
                    row = parser.feed(line)
                except InputFormatError as exc:
                    log.warning("%s", exc)  # one bad row is skipped, the source goes on
                    continue
                if row is None:
                    continue
                t, gpu, signals = row
                offset = arrival - t
                if not lag or offset < lag[0]:
                    lag[:] = [offset]
                out.append(GpuReading(t + lag[0], gpu, signals))
            return out

        await self._sampler.run(
            self.name, self._cfg.poll_interval_s, sweep, emit, close=tailer.close
        )


class _ReplayDone(Exception):
    """A replay without ``loop`` reached the end of its file."""
