"""Time stamps that launchers and log collectors put before NCCL's lines, beyond ISO dates.

NCCL's own stamp and RFC 3339 stamps (``kubectl logs --timestamps``, ``docker logs -t``) are
read by :mod:`collectors.nccl_log`. Jobs whose output passes through other tools arrive with
other stamps, and without them a log without NCCL's own (the default before 2.26, and for
INFO lines after it) has no call times, so no T:

* POSIX seconds, ``1767225600.460092`` (``journalctl -o short-unix``, moreutils ``ts %.s``),
  or whole milli-, micro- or nanoseconds (13, 16 or 19 digits: JSON loggers);
* syslog's ``Dec 02 05:25:20[.460092]`` (``journalctl``'s default and ``short-precise``,
  moreutils ``ts`` and ``ts %b %d %.T``, rsyslog files), with no year;
* a time of day, ``05:25:20[.460092]`` or ``[05:25:20.460092]``
  (``NCCL_DEBUG_TIMESTAMP_FORMAT="[%T.%6f] "``, ``ts %.T``, ``ts -s``), with no date.

A stamp without a date is read as seconds into its day, and syslog's as seconds into 1972 (a
leap year, so that 29 February reads): both lie below :data:`UNDATED_LIMIT`, far before any
dated stamp, and :class:`UndatedClock` adds the days (years) that pass as each process's
stamps run past midnight (31 December). Periods and inter-arrival times do not see the
missing date; a process silent for more than a day is not told from one silent for less.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["UNDATED_LIMIT", "UndatedClock", "epoch_seconds", "other_lead_time"]

F64 = npt.NDArray[np.float64]

#: Stamps below this many seconds have no date (a dated one is after 1973).
UNDATED_LIMIT: Final = 1e8
_DAY_S: Final = 86400.0
#: Seconds from 1 January 1972 to 1 January 1973: syslog's year turning over.
_YEAR_S: Final = 366 * _DAY_S
#: A stamp this far behind its process's previous one is the next day (or year).
_WRAP_S: Final = 0.5 * _DAY_S

_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun",
                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")  # fmt: skip
_MONTH_DAYS_1972: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_START: Final = {m: float(sum(_MONTH_DAYS_1972[:i])) * _DAY_S for i, m in enumerate(_MONTHS)}
_MONTH_LEN: Final = dict(zip(_MONTHS, _MONTH_DAYS_1972, strict=True))
#: Whole units since the epoch by digit count: seconds, milli-, micro-, nanoseconds.
_EPOCH_SCALE: Final = {9: 1.0, 10: 1.0, 11: 1.0, 13: 1e-3, 16: 1e-6, 19: 1e-9}

# At the very start of the line (after an optional "["), ended by "]" and/or a blank. An
# epoch stamp needs 9 digits at least, so a launcher's rank label ("0: ") is none.
_OTHER_RE: Final = re.compile(
    r"\[?(?:(?P<epoch>\d{9,19})(?:[.,](?P<efrac>\d{1,9}))?"
    r"|(?:(?P<mon>" + "|".join(_MONTHS) + r") (?P<day>[ \d]\d) )?"
    r"(?P<h>\d\d):(?P<m>[0-5]\d):(?P<s>[0-5]\d|60)(?:[.,](?P<frac>\d{1,9}))?)\]?[ \t]",
    re.ASCII,
)

_DEV_RE: Final = re.compile(r"\[-?\d{1,6}\] ", re.ASCII)


def _fraction(digits: str | None) -> float:
    return int(digits) / 10.0 ** len(digits) if digits else 0.0


def epoch_seconds(digits: str) -> float | None:
    """POSIX seconds of whole s, ms, µs or ns since the epoch, told apart by the digit count.

    None for a count that is none of them (a date from 1973 to 2286 has 9-11 digits in s).
    """
    scale = _EPOCH_SCALE.get(len(digits))
    return None if scale is None else int(digits) * scale


def other_lead_time(line: str) -> float | None:
    """Seconds of a stamp of one of the forms above that starts ``line`` (None: none).

    Dated forms give POSIX seconds; undated ones seconds below :data:`UNDATED_LIMIT`.
    """
    head = line[:1]
    if not (head.isdigit() or head == "[" or head in "ADFJMNOS"):
        return None
    m = _OTHER_RE.match(line)
    if m is None:
        return None
    epoch = m["epoch"]
    if epoch is not None:
        seconds = epoch_seconds(epoch)
        if seconds is None or (m["efrac"] is not None and _EPOCH_SCALE[len(epoch)] != 1.0):
            return None
        return seconds + _fraction(m["efrac"])
    hours = int(m["h"])
    if hours > 23 or (m["frac"] is None and _DEV_RE.match(line, m.end()) is not None):
        return None  # (a numeric host: "10:12:34 [0] NCCL INFO" is host:pid:tid [dev])
    t = hours * 3600.0 + int(m["m"]) * 60.0 + int(m["s"]) + _fraction(m["frac"])
    month = m["mon"]
    if month is None:
        return t
    day = int(m["day"])
    if not 1 <= day <= _MONTH_LEN[month]:
        return None
    return _MONTH_START[month] + (day - 1) * _DAY_S + t


class UndatedClock:
    """Counts the midnights (and New Years) that undated stamps pass, per process.

    Each process's lines are in time order, so a stamp more than half a day behind the
    previous one of its process is on the next day; of a syslog stamp (past 1 January), the
    next year. Dated stamps and NaN pass unchanged. State carries over calls (the live tail
    decodes a poll at a time).
    """

    #: Processes remembered; past this the table starts afresh (a job has a handful).
    MAX_PROCESSES = 4096

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, float]] = {}  # process -> (last stamp, offset)

    def unwrap(self, stamps: F64, processes: Sequence[Hashable]) -> F64:
        """``stamps`` with the passed days added where undated; ``processes`` names each."""
        undated = np.flatnonzero(stamps < UNDATED_LIMIT)  # NaN compares False
        if not undated.size:
            return stamps
        out = stamps.copy()
        groups: dict[Hashable, list[int]] = {}
        for i in undated.tolist():
            groups.setdefault(processes[i], []).append(i)
        for p, where in groups.items():
            at = np.array(where, dtype=np.intp)
            raw = stamps[at]
            last, offset = self._last.get(p, (raw[0], 0.0))
            prev = np.concatenate(([last], raw[:-1]))
            wraps = raw < prev - _WRAP_S
            # a day, or a year once the previous stamp was past 1 January (syslog's form)
            step = np.where(wraps, np.where(prev > _DAY_S + 1.0, _YEAR_S, _DAY_S), 0.0)
            offsets = offset + np.cumsum(step)
            out[at] = raw + offsets
            if len(self._last) >= self.MAX_PROCESSES and p not in self._last:
                self._last.clear()
            self._last[p] = (float(raw[-1]), float(offsets[-1]))
        return out
