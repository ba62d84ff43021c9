"""GPU-activity CSV: ``nvidia-smi --query-gpu=... --format=csv`` output, or the named form.

Two layouts are accepted (DESIGN.md, "GPU CSV"):

* nvidia-smi, e.g. ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms
  100``: header ``timestamp, index, utilization.gpu [%]`` (``nounits`` drops the ``[%]``),
  rows ``2026/01/01 00:00:00.123, 0, 97 %``. With ``noheader`` the columns are taken in the
  order ``timestamp, index, utilization.gpu``. Extra columns are allowed and ignored unless
  they are a known signal. ``[N/A]`` / ``[Not Supported]`` cells are missing values.
* named: header ``time,gpu,<signal>[,<signal>...]``, ``time`` in seconds, signals named after
  what they measure: ``sm_active``, ``tensor_active``, ``gr_engine_active`` (fractions 0..1)
  or ``util`` (utilization.gpu, percent).

All signals come out as fractions in 0..1.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.errors import InputFormatError
from collectors._text import read_text_file

__all__ = ["KNOWN_SIGNALS", "GpuTable", "parse_gpu_csv", "read_gpu_csv"]

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


def parse_gpu_csv(lines: Iterable[str], *, path: Path | str = "<gpu>") -> GpuTable:
    """Parse GPU CSV text (no I/O); :class:`InputFormatError` names the line on bad input."""
    rows: list[tuple[int, list[str]]] = []
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if text and not text.startswith("#"):
            rows.append((lineno, [c.strip() for c in text.split(",")]))
    if not rows:
        raise InputFormatError(path, "empty file: expected a GPU CSV")
    first_line, first = rows[0]
    fields = [_field_name(c) for c in first]
    if fields[:2] == ["time", "gpu"]:
        mode = "named"
        body = rows[1:]
    elif "timestamp" in fields and "index" in fields:
        mode = "smi"
        body = rows[1:]
    else:
        try:
            _smi_time(first[0])
        except ValueError:
            raise InputFormatError(
                path,
                "unrecognised GPU CSV header: expected 'time,gpu,<signal>...' or nvidia-smi "
                "'timestamp, index, utilization.gpu'",
                line=first_line,
            ) from None
        mode, fields, body = "smi", list(_SMI_DEFAULT), rows  # noheader: query order
    if mode == "named":
        signal_cols = {i: f for i, f in enumerate(fields) if i >= 2}
        unknown = [f for f in signal_cols.values() if f not in KNOWN_SIGNALS]
        if unknown:
            raise InputFormatError(
                path,
                f"unknown GPU signal column(s) {unknown}; known: {sorted(KNOWN_SIGNALS)}",
                line=first_line,
            )
        t_col, g_col = 0, 1
    else:
        t_col, g_col = fields.index("timestamp"), fields.index("index")
        signal_cols = {i: _SMI_FIELDS[f] for i, f in enumerate(fields) if f in _SMI_FIELDS}
        if not signal_cols:
            raise InputFormatError(
                path, "no utilization.gpu column in the nvidia-smi CSV", line=first_line
            )
    times: list[float] = []
    gpus: list[int] = []
    values: dict[str, list[float]] = {name: [] for name in signal_cols.values()}
    for lineno, cells in body:
        if len(cells) != len(fields):
            raise InputFormatError(
                path, f"expected {len(fields)} fields, found {len(cells)}", line=lineno
            )
        try:
            t = float(cells[t_col]) if mode == "named" else _smi_time(cells[t_col])
            g = int(cells[g_col])
            parsed = {
                name: _value(cells[i], KNOWN_SIGNALS[name]) for i, name in signal_cols.items()
            }
        except ValueError as exc:
            raise InputFormatError(path, str(exc), line=lineno) from None
        if not math.isfinite(t) or g < 0:
            raise InputFormatError(path, "time must be finite and gpu index >= 0", line=lineno)
        times.append(t)
        gpus.append(g)
        for name, v in parsed.items():
            values[name].append(v)
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
