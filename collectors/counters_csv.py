"""The counters CSV: ``time,<col>[,<col>...]`` with cumulative byte counters per column.

Contract (DESIGN.md): ``time`` in seconds, any origin; every other column a cumulative byte
counter exactly as the OS reported it; ``tx`` in a name means transmit, ``rx`` receive. This is
what ``commpulse record`` writes and what ``commpulse simulate`` produces. An empty cell means
the counter could not be read at that poll (a gap), never zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.errors import InputFormatError
from collectors._text import read_text_file

__all__ = ["CounterTable", "parse_counters_csv", "read_counters_csv"]

_MAX_COUNTER = 2**64 - 1


@dataclass(frozen=True)
class CounterTable:
    """Parsed counters: read times, and per column the raw values and where they exist."""

    times: npt.NDArray[np.float64]
    columns: dict[str, npt.NDArray[np.uint64]]
    present: dict[str, npt.NDArray[np.bool_]]


def _parse_counter(cell: str) -> int:
    """A counter cell as an integer; floats from spreadsheets are accepted if integral-ish."""
    try:
        value = int(cell)
    except ValueError:
        f = float(cell)
        if not math.isfinite(f):
            raise ValueError(f"{cell!r} is not a finite number") from None
        value = round(f)
    if value < 0 or value > _MAX_COUNTER:
        raise ValueError(f"{cell!r} is outside the range of a 64-bit unsigned counter")
    return value


def parse_counters_csv(lines: Iterable[str], *, path: Path | str = "<counters>") -> CounterTable:
    """Parse counters-CSV text (no I/O). Raises :class:`InputFormatError` with the line number.

    Rows must be in time order; rows with a time equal to the previous one are dropped (a
    duplicated poll carries no interval).
    """
    it = iter(lines)
    header: list[str] | None = None
    lineno = 0
    for raw in it:
        lineno += 1
        text = raw.strip()
        if text and not text.startswith("#"):
            header = [h.strip() for h in text.split(",")]
            break
    if header is None:
        raise InputFormatError(path, "empty file: expected a header 'time,<counter>,...'")
    if header[0] != "time":
        raise InputFormatError(
            path, f"the first column must be 'time', found {header[0]!r}", line=lineno
        )
    names = header[1:]
    if not names or any(not n for n in names):
        raise InputFormatError(
            path, "the header needs at least one named counter column", line=lineno
        )
    if len(set(names)) != len(names):
        raise InputFormatError(path, "duplicate column names in the header", line=lineno)
    times: list[float] = []
    cols: list[list[int]] = [[] for _ in names]
    present: list[list[bool]] = [[] for _ in names]
    last_t = -math.inf
    for raw in it:
        lineno += 1
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        cells = text.split(",")
        if len(cells) != len(header):
            raise InputFormatError(
                path,
                f"expected {len(header)} fields as in the header, found {len(cells)}",
                line=lineno,
            )
        try:
            t = float(cells[0])
        except ValueError:
            raise InputFormatError(
                path, f"time {cells[0]!r} is not a number", line=lineno
            ) from None
        if not math.isfinite(t):
            raise InputFormatError(path, f"time {cells[0]!r} is not finite", line=lineno)
        if t < last_t:
            raise InputFormatError(
                path,
                f"time goes backwards ({t} after {last_t}); rows must be in time order",
                line=lineno,
            )
        if t == last_t:
            continue
        last_t = t
        times.append(t)
        for j, raw_cell in enumerate(cells[1:]):
            cell = raw_cell.strip()
            if not cell:
                cols[j].append(0)
                present[j].append(False)
                continue
            try:
                cols[j].append(_parse_counter(cell))
            except ValueError as exc:
                raise InputFormatError(path, f"column {names[j]!r}: {exc}", line=lineno) from None
            present[j].append(True)
    if len(times) < 2:
        raise InputFormatError(path, "need at least two data rows to compute a rate")
    return CounterTable(
        times=np.asarray(times, dtype=np.float64),
        columns={n: np.asarray(c, dtype=np.uint64) for n, c in zip(names, cols, strict=True)},
        present={n: np.asarray(p, dtype=np.bool_) for n, p in zip(names, present, strict=True)},
    )


def read_counters_csv(path: Path) -> CounterTable:
    """Read a counters CSV file (thin reader around :func:`parse_counters_csv`)."""
    return read_text_file(
        path, lambda lines: parse_counters_csv(lines, path=path), what="a counters CSV file"
    )
