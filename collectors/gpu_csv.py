"""GPU-activity CSV: ``nvidia-smi --query-gpu=... --format=csv`` output, or the named form.

Two layouts are accepted (DESIGN.md, "GPU CSV"):

* nvidia-smi, e.g. ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms
  100``: header ``timestamp, index, utilization.gpu [%]`` (``nounits`` drops the ``[%]``),
  rows ``2026/01/01 00:00:00.123, 0, 97 %``. With ``noheader`` the columns are taken in the
  order ``timestamp, index, utilization.gpu``. Extra columns are allowed and ignored unless
  they are a known signal. Any bracketed cell (``[N/A]``, ``[Not Supported]``,
  ``[Insufficient Permissions]``, ...: the reasons grow with each driver) and ``ERR!`` are
  missing values. Without an ``index`` column the GPUs are told apart by ``pci.bus_id`` or
  ``uuid`` (numbered in order of appearance), else the rows that share a timestamp are GPUs 0,
  1, ... in order (nvidia-smi prints them so). Header lines repeated by a logging loop are
  skipped, and a UTF-8 byte-order mark is ignored.
* named: header ``time,gpu,<signal>[,<signal>...]``, ``time`` in seconds, signals named after
  what they measure: ``sm_active``, ``tensor_active``, ``gr_engine_active`` (fractions 0..1)
  or ``util`` (utilization.gpu, percent).

All signals come out as fractions in 0..1.

A recording must not be lost to one bad line: rows that cannot be read (nvidia-smi's error text
in a ``while ...; nvidia-smi ...; done 2>&1`` log, a wrong number of fields, a value that is no
number) and an unfinished last line (nvidia-smi killed, a file copied while written) are left
out and counted in :attr:`GpuTable.warnings`; a file without a readable row is an error naming
its first problem. What would misread the rows left is still an error: a value outside its
range (a column on another scale), a header-less file in another column order. ``nvidia-smi
dmon`` and ``dcgmi dmon`` tables are refused with what to record instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.clock import Clock
from agent.errors import ConfigError, InputFormatError, SourceUnavailable
from collectors._base import Emit, GpuReading, Reading
from collectors._config import check_interval, doc
from collectors._lag import WallStamps
from collectors._sampler import Sampler
from collectors._text import Skipped, read_text_file
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
#: Cells that say "no value" besides nvidia-smi's bracketed reasons (lower case).
_MISSING = frozenset({"", "n/a", "nan", "err!"})
#: Column names of ``nvidia-smi dmon`` (any of them beside ``gpu`` in a ``#`` header line).
_DMON_COLUMNS = frozenset(
    {"pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "jpg", "ofa", "mclk", "pclk", "fb",
     "bar1", "ccpm", "rxpci", "txpci", "pviol", "tviol", "sbecc", "dbecc", "pci", "type"}
)  # fmt: skip
#: What to record instead of a ``dmon`` table (the forms this reader takes).
_RECORD_INSTEAD = (
    "record `nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms 100` "
    "instead, or write the samples as `time,gpu,<signal>...`"
)


@dataclass(frozen=True)
class GpuTable:
    """GPU samples: time (s), GPU index, and each signal as a 0..1 fraction (NaN = missing)."""

    times: npt.NDArray[np.float64]
    gpu: npt.NDArray[np.int64]
    signals: dict[str, npt.NDArray[np.float64]]
    #: What was left out, one line per kind (empty for a clean file).
    warnings: tuple[str, ...] = field(default=())


class _BadRow(InputFormatError):
    """One row that cannot be read: :func:`parse_gpu_csv` leaves it out and goes on."""


class _CutRow(_BadRow):
    """The unfinished last line of a file that was still being written."""


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


def _is_missing(text: str) -> bool:
    """nvidia-smi puts any reason for no value in brackets, and the reasons grow with drivers.

    ``[N/A]``, ``[Not Supported]``, ``[Insufficient Permissions]``, ``[Unknown]``, ... and
    ``ERR!``: a closed list rejected whole files over the next new one.
    """
    return text.lower() in _MISSING or (text.startswith("[") and text.endswith("]"))


#: How far past 0..1 a value may read and still be a measurement (clamped), not another scale:
#: DCGM's profiling ratios, averaged by a script or converted from ``dcgmi dmon``, read 1.0002
#: now and then, and one such cell rejected a whole 6 h recording (dcgm-exporter's own scrape
#: allows 1.01 too).
_OVERSHOOT = 0.01


class _OffScale(ValueError):
    """A value outside its signal's range: the column is on another scale, not one bad row."""


def _value(cell: str, percent: bool) -> float:
    text = cell.strip()
    if _is_missing(text):
        return math.nan
    if text.endswith("%"):
        text = text[:-1].strip()
    v = float(text)
    if not math.isfinite(v):
        return math.nan
    v = v / 100.0 if percent else v
    if v < -_OVERSHOOT or v > 1.0 + _OVERSHOOT:
        raise _OffScale(f"{cell.strip()!r} is outside 0..{'100 %' if percent else '1'}")
    return min(1.0, max(0.0, v))


def _field_name(raw: str) -> str:
    """Header cell without units: ``utilization.gpu [%]`` → ``utilization.gpu``."""
    return raw.split("[", 1)[0].strip().lower()


def _unit(raw: str) -> str:
    """A header cell's unit (``power.draw [W]`` → ``W``): every value of the column ends so."""
    _, bracket, rest = raw.partition("[")
    return rest.rstrip().removesuffix("]").strip() if bracket else ""


def _dmon_header(comment: str) -> str | None:
    """The tool whose ``dmon`` table this ``#`` line heads, if it is one."""
    words = comment.lstrip("#").replace(",", " ").lower().split()
    if words[:1] == ["entity"]:
        return "dcgmi dmon"
    if "gpu" in words[:3] and _DMON_COLUMNS.intersection(words):
        return "nvidia-smi dmon"
    return None


def _dmon_row(text: str) -> str | None:
    """The tool whose ``dmon`` table this data line is from (one without its header)."""
    if "," in text:
        return None
    words = text.split()
    if len(words) >= 3 and words[0] == "GPU" and words[1].isdigit():
        return "dcgmi dmon"
    if len(words) >= 3 and words[0].isdigit() and all(w == "-" or _is_number(w) for w in words):
        return "nvidia-smi dmon"
    return None


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Layout:
    mode: str  # "named" | "smi"
    width: int
    t_col: int
    g_col: int  # -1: no index column (see id_col)
    signals: dict[int, str]
    id_col: int = -1  # pci.bus_id or uuid when there is no index; -1: by place in a timestamp
    header: tuple[str, ...] = ()  # the header's field names (to skip it when it comes again)
    last_unit: str = ""  # the last column's unit: a last line without it was cut


def _layout(cells: list[str], path: Path | str, lineno: int) -> tuple[_Layout, bool]:
    """The column layout from the first row; True when that row was a header.

    A row that is neither header nor nvidia-smi row raises :class:`_BadRow` (error text
    before the header, from a logging loop); a header this reader cannot take raises
    :class:`InputFormatError`.
    """
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
    if fields[0] in ("time", "time_s") and any(f in KNOWN_SIGNALS for f in fields[1:]):
        raise InputFormatError(
            path,
            f"header {','.join(fields)!r}: the time column must be followed by a 'gpu' column "
            "(the GPU's index), then the signals: 'time,gpu,sm_active'; for one GPU, add a "
            "gpu column of 0",
            line=lineno,
        )
    header = "timestamp" in fields
    if not header:
        try:
            _smi_time(cells[0])
        except ValueError:
            raise _BadRow(
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
        named = sorted(set(fields) & set(KNOWN_SIGNALS))
        if named:  # ``timestamp,gpu,sm_active``: the named layout with nvidia-smi's time name
            raise InputFormatError(
                path,
                f"header names {', '.join(named)} beside 'timestamp': the named layout is "
                f"'time,gpu,{','.join(named)}' (time in seconds); nvidia-smi's CSV has a "
                "utilization.gpu column",
                line=lineno,
            )
        raise InputFormatError(path, "no utilization.gpu column in the nvidia-smi CSV", line=lineno)
    g_col = fields.index("index") if "index" in fields else -1
    id_col = next((fields.index(f) for f in _SMI_IDS if f in fields), -1)
    layout = _Layout(
        "smi", len(fields), fields.index("timestamp"), g_col, signals, id_col,
        tuple(fields) if header else (), _unit(cells[-1]) if header else "",
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
        self._dmon: tuple[int, str] | None = None  # a dmon table's header line and tool
        #: Per signal, the first cell read as missing (to say why a signal has no value).
        self.first_missing: dict[str, str] = {}

    @property
    def signals(self) -> tuple[str, ...]:
        """Signal names of this file (known after the first row)."""
        return tuple(self._layout.signals.values()) if self._layout else ()

    def feed(self, raw: str, *, final: bool = False) -> tuple[float, int, dict[str, float]] | None:
        """(time, gpu, signals) for a data row; None for headers, comments and blank lines.

        ``final``: ``raw`` is the last line of a whole file, cut if it has no line end and
        fewer fields. Raises :class:`InputFormatError`: a subclass that
        :func:`parse_gpu_csv` counts and skips for one unreadable row, itself when the file
        is no GPU CSV this reader takes.
        """
        self._lineno += 1
        text = raw.strip().lstrip("\ufeff").strip()
        if not text:
            return None
        if text.startswith("#"):
            if self._layout is None and self._dmon is None:
                tool = _dmon_header(text)
                self._dmon = (self._lineno, tool) if tool else None
            return None
        cells = [c.strip() for c in text.split(",")]
        if self._layout is None:
            try:
                self._layout, was_header = _layout(cells, self._path, self._lineno)
            except _BadRow:
                self._refuse_dmon(text)
                raise
            if was_header:
                return None
        lay = self._layout
        if lay.header and tuple(_field_name(c) for c in cells) == lay.header:
            return None  # the header again: a loop that runs nvidia-smi once a sample
        unfinished = final and not raw.endswith(("\n", "\r"))
        if len(cells) != lay.width:
            if unfinished and len(cells) < lay.width:
                raise _CutRow(self._path, f"{len(cells)} of {lay.width} fields", line=self._lineno)
            raise _BadRow(
                self._path, f"expected {lay.width} fields, found {len(cells)}", line=self._lineno
            )
        last = cells[-1]
        if unfinished and lay.last_unit and not (last.endswith(lay.last_unit) or _is_missing(last)):
            raise _CutRow(
                self._path,
                f"its last cell {last!r} lacks the column's unit {lay.last_unit!r}",
                line=self._lineno,
            )
        try:
            t = float(cells[lay.t_col]) if lay.mode == "named" else _smi_time(cells[lay.t_col])
            values = {
                name: _value(cells[i], KNOWN_SIGNALS[name]) for i, name in lay.signals.items()
            }
            g = int(cells[lay.g_col]) if lay.g_col >= 0 else self._gpu_without_index(cells, t)
        except _OffScale as exc:
            # Not skipped: the rows left would be those whose values happen to fit the range
            # (a percent column read as fractions keeps only its values below 1 %).
            raise InputFormatError(
                self._path, f"{exc}: is the column on another scale?", line=self._lineno
            ) from None
        except ValueError as exc:
            raise _BadRow(self._path, str(exc), line=self._lineno) from None
        if not math.isfinite(t) or g < 0:
            raise _BadRow(self._path, "time must be finite and gpu index >= 0", line=self._lineno)
        if lay.mode == "smi" and not lay.header and g > _MAX_GPU_INDEX:
            raise InputFormatError(
                self._path,
                f"no header, so column 2 is read as the GPU index, but it holds {g}: the query "
                f"was not in the order {', '.join(_SMI_DEFAULT)}; record with a header "
                "(--format=csv, without noheader)",
                line=self._lineno,
            )
        for i, name in lay.signals.items():
            if name not in self.first_missing and math.isnan(values[name]) and cells[i]:
                self.first_missing[name] = cells[i]
        return t, g, values

    def _refuse_dmon(self, text: str) -> None:
        """A ``dmon`` table is no CSV: say so, and what to record, rather than "header"."""
        line, tool = self._dmon or (self._lineno, _dmon_row(text))
        if tool is None:
            return
        raise InputFormatError(
            self._path,
            f"this is `{tool}` output (a space-aligned table), not a GPU CSV: {_RECORD_INSTEAD}"
            + (" (dcgmi's SMACT and TENAC as sm_active, tensor_active)" if "dcgmi" in tool else ""),
            line=line,
        )

    def _gpu_without_index(self, cells: list[str], t: float) -> int:
        """A GPU number for a query without ``index``: by bus id or UUID, else by place."""
        lay = self._layout
        if lay is not None and lay.id_col >= 0:
            return self._ids.setdefault(cells[lay.id_col], len(self._ids))
        self._place = self._place + 1 if t == self._last_t else 0
        self._last_t = t
        return self._place


def parse_gpu_csv(lines: Iterable[str], *, path: Path | str = "<gpu>") -> GpuTable:
    """Parse GPU CSV text (no I/O); :class:`InputFormatError` names the line on bad input.

    A recording must not be lost to one bad line: rows that cannot be read (error text from a
    logging loop, a wrong number of fields, a value that is no number) and an unfinished last
    line are left out and counted in :attr:`GpuTable.warnings`. Only a file with no readable
    row is an error, naming its first problem.
    """
    parser = GpuCsvParser(path)
    times: list[float] = []
    gpus: list[int] = []
    values: dict[str, list[float]] = {}
    bad_rows = Skipped("row(s) could not be read and were left out")
    cut = Skipped("unfinished last line (the file was still being written?) left out")
    seen_any = False

    def take(raw: str, final: bool) -> None:
        try:
            row = parser.feed(raw, final=final)
        except _BadRow as exc:
            (cut if isinstance(exc, _CutRow) else bad_rows).add(exc.line or 0, exc.reason)
            return
        if row is None:
            return
        t, g, signals = row
        times.append(t)
        gpus.append(g)
        for name, v in signals.items():
            values.setdefault(name, []).append(v)

    pending: str | None = None  # held back one line: the last may be unfinished
    for raw in lines:
        if raw.strip():
            seen_any = True
        if pending is not None:
            take(pending, final=False)
        pending = raw
    if pending is not None:
        take(pending, final=True)
    if not seen_any:
        raise InputFormatError(path, "empty file: expected a GPU CSV")
    if not times:
        first = bad_rows.first or cut.first
        if first is not None:
            raise InputFormatError(path, f"no readable data row; {first[1]}", line=first[0])
        raise InputFormatError(path, "no data rows")
    signals = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    warnings = [n for k in (bad_rows, cut) if (n := k.note()) is not None]
    warnings += [
        f"signal {name!r} holds no value at all (every cell read as missing, e.g. "
        f"{parser.first_missing.get(name, '')!r})"
        for name, column in signals.items()
        if np.isnan(column).all()
    ]
    return GpuTable(
        times=np.asarray(times, dtype=np.float64),
        gpu=np.asarray(gpus, dtype=np.int64),
        signals=signals,
        warnings=tuple(warnings),
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


#: Seconds without a new row after which a followed GPU CSV's recorder is taken to have
#: stopped (nvidia-smi -lms 100 writes ten a second; a recorder at -l 5, one every 5 s).
STALE_AFTER_S = 60.0


class GpuCsvSource:
    """GPU samples from a CSV: followed as it grows, or a recording replayed in real time.

    CSV times (nvidia-smi's local wall clock, or any origin) are mapped onto the agent's
    monotonic clock: in follow mode, times on this host's wall clock (up to a minute before
    their row is read) as they are, others with the smallest arrival-minus-sample lag of the
    last 30 s (a row cannot arrive before it was sampled; a recorder restarted with another
    time origin is followed within that: ``collectors._lag``); in replay mode from the start
    of the replay.
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
        #: A followed file that stops growing: its recorder stopped (the pipeline marks the
        #: source down after this long). A replay never stops on its own.
        self.stale_after_s: float | None = STALE_AFTER_S if config.mode == "follow" else None

    async def run(self, emit: Emit) -> None:
        """Follow or replay until cancelled (a replay without ``loop`` ends at the file end)."""
        if self._cfg.mode == "replay":
            await self._replay(emit)
        else:
            await self._follow(emit)

    async def _replay(self, emit: Emit) -> None:
        table = read_gpu_csv(self._path)
        for note in table.warnings:
            log.warning("%s: %s", self._path, note)
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
        lags = WallStamps(self._clock.wall_offset)

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
                out.append(GpuReading(lags.time(t, arrival), gpu, signals))
            return out

        await self._sampler.run(
            self.name, self._cfg.poll_interval_s, sweep, emit, close=tailer.close
        )


class _ReplayDone(Exception):
    """A replay without ``loop`` reached the end of its file."""
