"""The counters CSV: ``time,<col>[,<col>...]`` with cumulative byte counters per column.

Contract (DESIGN.md): ``time`` in seconds, any origin; every other column a cumulative byte
counter exactly as the OS reported it; ``tx`` in a name means transmit, ``rx`` receive. This is
what ``commpulse record`` writes and what ``commpulse simulate`` produces. An empty cell means
the counter could not be read at that poll (a gap), never zero.

Recordings also come from other tools, hand edits and spreadsheets, and a bad row must not
cost the rest of an hour-long file: a cell that is not a counter (``N/A``, ``nan``, ``-``, a
negative number) is a gap; a row that cannot be read (a wrong number of fields, a time that is
no number, a time before the last one: an NTP step back, a header repeated by an appending
recorder) is left out; an unfinished last line (a file still being written) is left out. Each
kind is counted in :attr:`CounterTable.warnings`, with its first line. A file with fewer than
two readable rows is an error naming the first problem. The time column may also be called
``time_s`` or ``timestamp`` (seconds), ``time_ms``, ``time_us`` or ``time_ns``; ISO 8601 times
are read too; and epoch times in milliseconds, microseconds or nanoseconds under ``time`` are
recognised by their size (a warning says so).
"""

from __future__ import annotations

import array
import csv
import datetime as dt
import decimal
import itertools
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.errors import InputFormatError
from collectors._stray import stray_times
from collectors._text import Skipped, read_text_file

__all__ = ["CounterTable", "parse_counters_csv", "read_counters_csv"]

_MAX_COUNTER = 2**64 - 1
#: Rows parsed at a time by the fast path of :func:`parse_counters_csv`.
_BLOCK_ROWS = 1 << 16

#: Names of the time column, and the seconds in one of its units.
_TIME_COLUMNS = {"time": 1.0, "time_s": 1.0, "timestamp": 1.0, "time_ms": 1e-3,
                 "time_us": 1e-6, "time_ns": 1e-9}  # fmt: skip
#: Cells that say "no value" (lower case), read as a gap like an empty cell.
_MISSING = frozenset({"", "nan", "na", "n/a", "[n/a]", "null", "none", "-", "?"})
#: Epoch times under ``time`` above these are in ms, µs, ns (seconds reach 1e11 in 5138).
_EPOCH_UNITS = ((1e17, 1e-9, "nanoseconds"), (1e14, 1e-6, "microseconds"),
                (1e11, 1e-3, "milliseconds"))  # fmt: skip


@dataclass(frozen=True)
class CounterTable:
    """Parsed counters: read times, and per column the raw values and where they exist."""

    times: npt.NDArray[np.float64]
    columns: dict[str, npt.NDArray[np.uint64]]
    present: dict[str, npt.NDArray[np.bool_]]
    #: What was left out or reinterpreted, one line per kind (empty for a clean file).
    warnings: tuple[str, ...] = field(default=())


#: A cell that at least starts like a number (a malformed one is a bad cell, not a word).
_NUMBER_LIKE = re.compile(r"^[-+.\d]")


def _parse_counter(cell: str) -> tuple[int, int]:
    """A counter cell as ``(integer, the place value of its last written digit)``.

    Floats from spreadsheets are accepted; one in scientific notation (``1.23457E+14``) keeps
    only a few digits, so its value is known to ``10**9`` bytes here, not to the byte.
    """
    try:
        value, place = int(cell), 1
    except ValueError:
        try:
            f = float(cell)
        except ValueError:
            raise ValueError(f"{cell!r} is not a number") from None
        if not math.isfinite(f):
            raise ValueError(f"{cell!r} is not a finite number") from None
        value = round(f)
        exponent = decimal.Decimal(cell).as_tuple().exponent
        place = 10**exponent if isinstance(exponent, int) and exponent > 0 else 1
    if value < 0 or value > _MAX_COUNTER:
        raise ValueError(f"{cell!r} is outside the range of a 64-bit unsigned counter")
    return value, place


def _unquoted(cell: str) -> str:
    """A cell without its spaces and quotes (spreadsheets and Grafana quote cells)."""
    return cell.strip().strip('"').strip("'")


def _why_wider(cells: list[str], width: int, sep: str) -> str:
    """A guess at why a row has more fields than the header, for the error ("" if none)."""
    if len(cells) == width + 1 and not cells[-1].strip():
        return " (a trailing separator on the rows but not on the header?)"
    first = cells[0].strip()
    if sep == "," and len(cells) > width and first.isdigit() and cells[1].strip().isdigit():
        return (
            " (decimal commas in a comma-separated file? a locale's number format: write it "
            "with LC_NUMERIC=C)"
        )
    return ""


def _parse_time(cell: str) -> float:
    """Seconds from a number, or from an ISO 8601 time (naive ones taken as UTC)."""
    try:
        return float(cell)
    except ValueError:
        pass
    try:
        stamp = dt.datetime.fromisoformat(cell)
    except ValueError:
        raise ValueError(f"time {cell!r} is not a number") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def _delimiter(header: str) -> str:
    """The header's field separator: a comma, else a tab or a semicolon.

    A semicolon is a European-locale spreadsheet's, whose decimal separator is then a comma.
    """
    if "," in header or ("\t" not in header and ";" not in header):
        return ","
    return "\t" if header.count("\t") >= header.count(";") else ";"


def _header(text: str, lineno: int, path: Path | str) -> tuple[list[str], float, bool, str]:
    """(column names, seconds per time unit, whether rows end in an empty field, separator)."""
    sep = _delimiter(text)
    # CSV quoting: a Grafana or Prometheus export names a series by its label set, whose
    # commas split it into repeated fragments ("duplicate column names in the header").
    fields = next(csv.reader([text], delimiter=sep, skipinitialspace=True))
    header = [_unquoted(h).strip() for h in fields]
    trailing = len(header) > 2 and header[-1] == ""  # "time,a,b," from a spreadsheet
    if trailing:
        header.pop()
    unit = _TIME_COLUMNS.get(header[0].lower())
    if unit is None:
        raise InputFormatError(
            path,
            f"the first column must be 'time' (seconds; or time_ms, time_us, time_ns), found "
            f"{header[0]!r}: a counters CSV is 'time,<device>_tx_bytes,<device>_rx_bytes,...' "
            "of cumulative counters (sar, ethtool -S, perfquery or rdma statistic output is "
            "not read as such; `commpulse record` writes this format)",
            line=lineno,
        )
    names = header[1:]
    if not names or any(not n for n in names):
        raise InputFormatError(
            path, "the header needs at least one named counter column", line=lineno
        )
    if len(set(names)) != len(names):
        raise InputFormatError(path, "duplicate column names in the header", line=lineno)
    return header, unit, trailing, sep


def parse_counters_csv(lines: Iterable[str], *, path: Path | str = "<counters>") -> CounterTable:
    """Parse counters-CSV text (no I/O). Raises :class:`InputFormatError` with the line number.

    Rows must be in time order; rows with a time equal to the previous one are spread over
    their stamp when most rows share one (a coarse time column), else dropped (a duplicated
    poll carries no interval). What else is left out or read as a gap: see the module
    docstring.
    """
    it = iter(lines)
    header: list[str] | None = None
    lineno = 0
    for raw in it:
        lineno += 1
        text = raw.strip()
        if text and not text.startswith("#"):
            header, unit, trailing, sep = _header(text, lineno, path)
            break
    if header is None:
        raise InputFormatError(path, "empty file: expected a header 'time,<counter>,...'")
    names = header[1:]
    width = len(header) + trailing
    # Typed arrays, not lists: 9 bytes a cell instead of about 45 (a day at 100 Hz is 8.6 M
    # rows a column).
    times = array.array("d")
    cols = [array.array("Q") for _ in names]
    present = [bytearray() for _ in names]
    bad_rows = Skipped("row(s) could not be read and were left out")
    back = Skipped("row(s) went back in time (a clock step?) and were left out")
    bad_cells = Skipped("cell(s) held no counter and were read as gaps")
    cut = Skipped("unfinished last line (the file was still being written?) left out")
    rounded = Skipped("cell(s) held a counter in scientific notation, rounded to a few digits")
    coarsest = 1
    text_cells = [0] * len(names)  # cells of words, per column: a long table's device names
    last_t = -math.inf
    pending: tuple[int, str] | None = None  # held back one line: the last may be unfinished

    def row(number: int, raw: str, final: bool) -> None:
        nonlocal last_t, coarsest
        text = raw.strip()
        if not text or text.startswith("#"):
            return
        unfinished = final and not raw.endswith(("\n", "\r"))
        cells = text.split(sep)
        if sep == ";":  # decimal commas
            cells = [c.replace(",", ".") for c in cells]
        if cells[0].strip().strip('"').lower() == header[0].lower():
            return  # the header again: a recorder that appends to its file
        if len(cells) != width:
            if unfinished and len(cells) < width:
                cut.add(number, f"{len(cells)} of {width} fields")
            else:
                bad_rows.add(number, f"expected {width} fields as in the header, found "
                             f"{len(cells)}{_why_wider(cells, width, sep)}")  # fmt: skip
            return
        try:
            t = _parse_time(_unquoted(cells[0])) * unit
        except ValueError as exc:
            bad_rows.add(number, str(exc))
            return
        if not math.isfinite(t):
            bad_rows.add(number, f"time {cells[0]!r} is not finite")
            return
        if t < last_t:
            back.add(number, f"{t} after {last_t}")
            return
        values: list[int | None] = []
        for j, raw_cell in enumerate(cells[1 : len(header)]):
            cell = _unquoted(raw_cell)
            if cell.lower() in _MISSING:
                values.append(None)
                continue
            try:
                value, place = _parse_counter(cell)
            except ValueError as exc:
                bad_cells.add(number, f"column {names[j]!r}: {exc}")
                if not _NUMBER_LIKE.match(cell):
                    text_cells[j] += 1
                values.append(None)
                continue
            values.append(value)
            if place > 1:
                rounded.add(number, f"column {names[j]!r}: {cell!r}")
                coarsest = max(coarsest, place)
        if unfinished and any(
            v is not None and present[j] and present[j][-1] and v < cols[j][-1]
            for j, v in enumerate(values)
        ):
            cut.add(number, "a counter below the row before it: a number cut short")
            return
        last_t = t
        times.append(t)
        for j, v in enumerate(values):
            cols[j].append(0 if v is None else v)
            present[j].append(v is not None)

    def whole_block(block: list[str]) -> bool:
        """Append a block of clean rows at once (C-speed parsing); False: not all clean."""
        nonlocal last_t
        try:
            table = _clean_rows(block, fast)
        except ValueError:
            return False
        if not table.size:
            return True  # blank lines only
        t = table["t"] * unit
        if not np.isfinite(t).all() or t[0] < last_t or bool((t[1:] < t[:-1]).any()):
            return False
        last_t = float(t[-1])
        times.frombytes(t.tobytes())
        for j in range(len(names)):
            cols[j].frombytes(np.ascontiguousarray(table[f"c{j}"]).tobytes())
            present[j].extend(b"\x01" * table.size)
        return True

    # Rows go a block at a time through numpy's parser; a block with anything it cannot read
    # as a clean row (a gap, a bad cell, a row out of order, a repeated header) is read row by
    # row instead, with every rule above: a clean 6 h 8-rail recording parses in 3.2 s, not 21.
    fast = np.dtype([("t", np.float64)] + [(f"c{j}", np.uint64) for j in range(len(names))])
    while block := list(itertools.islice(it, _BLOCK_ROWS)):
        if pending is not None:  # the line held back was not the last one
            row(*pending, final=False)
        start = lineno + 1
        lineno += len(block)
        pending = (lineno, block.pop())
        if not (sep == "," and not trailing and whole_block(block)):
            for k, raw in enumerate(block):
                row(start + k, raw, final=False)
    if pending is not None:
        row(*pending, final=True)
    if len(times) < 2 or times[0] == times[-1]:
        first = next((k.first for k in (bad_rows, back, bad_cells, cut) if k.first), None)
        if first is not None:
            raise InputFormatError(
                path, f"need at least two readable data rows; {first[1]}", line=first[0]
            )
        raise InputFormatError(path, "need at least two data rows to compute a rate")
    worded = [n for n, k in zip(names, text_cells, strict=True) if k >= 0.5 * len(times)]
    if worded:
        raise InputFormatError(
            path,
            f"column(s) {', '.join(map(repr, worded))} hold words, not counters, in most rows: "
            "a long table (one row per device and time)? The counters CSV has one column per "
            "counter and direction (time,mlx5_0_tx_bytes,mlx5_0_rx_bytes,...): pivot it "
            "(pandas: df.pivot(index='time', columns=[...], values=...)), or record with "
            "commpulse record",
        )
    warnings = [n for k in (bad_rows, back, bad_cells, cut) if (n := k.note()) is not None]
    if (note := rounded.note()) is not None:
        warnings.append(
            f"{note}: each is known only to {coarsest:.0e} bytes, so rates over one poll are "
            "that coarse; save the counters as integers (a spreadsheet's number format)"
        )
    t_arr = np.frombuffer(times, dtype=np.float64).copy()
    if unit == 1.0 and header[0].lower() == "time":
        for above, scale, name in _EPOCH_UNITS:
            if float(np.median(t_arr)) > above:
                t_arr = t_arr * scale
                warnings.append(f"the time column holds epoch {name}: read as such")
                break
    stray = stray_times(t_arr)
    rows: slice | npt.NDArray[np.intp] = slice(None)
    if stray.any():
        warnings.append(_stray_note(t_arr, stray))
        rows = np.flatnonzero(~stray)
        t_arr = t_arr[rows]
    t_arr, same, note = _same_stamps(t_arr)
    if note is not None:
        warnings.append(note)
    keep: slice | npt.NDArray[Any] = rows[same] if isinstance(rows, np.ndarray) else same
    for j, name in enumerate(names):
        if present[j] and not any(present[j]):
            warnings.append(f"column {name!r} holds no counter value at all")
    return CounterTable(
        times=t_arr,
        columns={n: _to_numpy(cols, np.uint64, keep) for n in names},
        present={n: _to_numpy(present, np.bool_, keep) for n in names},
        warnings=tuple(warnings),
    )


def _clean_rows(block: list[str], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Comma-separated rows through numpy's C parser (ValueError: a row it cannot read)."""
    with warnings.catch_warnings():  # "input contained no data": blank lines only
        warnings.simplefilter("ignore", UserWarning)
        table: npt.NDArray[Any] = np.loadtxt(
            block, delimiter=",", dtype=dtype, comments=None, ndmin=1
        )
    return table


def _stray_note(times: npt.NDArray[np.float64], stray: npt.NDArray[np.bool_]) -> str:
    """Says which rows :func:`~collectors._stray.stray_times` left out, and how far off."""
    first = int(np.flatnonzero(stray)[0])
    median = float(np.median(times[~stray]))
    days = abs(float(times[first]) - median) / 86_400.0
    gap = f"{days:,.0f} days" if days >= 2 else f"{days * 24:.0f} h"
    return (
        f"{int(stray.sum())} row(s) stamped far from the others left out: the first, data row "
        f"{first + 1}, at time {float(times[first]):.6g} s, {gap} "
        f"{'before' if times[first] < median else 'after'} the median row (a placeholder row, a "
        "clock not yet set?); gridded with the others, they would stretch the grid over the gap"
    )


def _to_numpy(columns: list[Any], dtype: type[np.generic], keep: slice | npt.NDArray[Any]) -> Any:
    """The first of ``columns`` as a writable numpy array, taken off the list.

    Each column is released as it is copied, so a long recording is never held twice.
    """
    return np.frombuffer(columns.pop(0), dtype=dtype)[keep].copy()


#: Above this share of rows that repeat the time of the row before, the time column is taken
#: as coarser than the poll (whole seconds at 100 Hz) and the rows are spread over each stamp.
COARSE_STAMP_SHARE = 0.3
#: ... in a table of at least this many rows (in a short one, a repeat is a repeated row).
COARSE_STAMP_MIN_ROWS = 10


def _same_stamps(
    times: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], slice | npt.NDArray[np.bool_], str | None]:
    """Rows that share a time stamp: ``(times, rows to keep, note)``.

    A recorder that stamps whole seconds (or milliseconds at 10 kHz) writes many rows per
    stamp: they are spread evenly over the stamp's interval (up to the next stamp), which is
    when a steady poll took them; dropping all but the first left one read per second, a
    hundred times coarser than the recording. A few repeated stamps among distinct ones are a
    recorder that wrote a row twice: the repeats are left out, counted.
    """
    n = times.size
    repeat = np.r_[False, times[1:] == times[:-1]]
    count = int(repeat.sum())
    if count == 0:
        return times, slice(None), None
    if count <= COARSE_STAMP_SHARE * n or n < COARSE_STAMP_MIN_ROWS:
        note = f"{count} row(s) repeated the time of the row before and were left out"
        return times[~repeat], ~repeat, note
    starts = np.flatnonzero(~repeat)
    lengths = np.diff(np.r_[starts, n])
    stamps = times[starts]
    step = float(np.median(np.diff(stamps)))
    following = np.r_[stamps[1:], stamps[-1] + step]
    offset = np.arange(n) - np.repeat(starts, lengths)
    spread = (
        np.repeat(stamps, lengths) + np.repeat((following - stamps) / lengths, lengths) * offset
    )
    note = (
        f"the time column is coarser than the polls ({n / starts.size:.3g} rows per stamp, "
        f"stamps {step:.3g} s apart): the rows of each stamp were spread evenly over it"
    )
    return spread, slice(None), note


def read_counters_csv(path: Path) -> CounterTable:
    """Read a counters CSV file (thin reader around :func:`parse_counters_csv`)."""
    return read_text_file(
        path, lambda lines: parse_counters_csv(lines, path=path), what="a counters CSV file"
    )
