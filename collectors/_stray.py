"""Time stamps cut off from the rest of a recording: a clock gone astray, a placeholder row.

A NIC clock before PTP sync stamps a frame at 1970 among frames of 2025; a recorder writes a
first row at time 0 before its clock is read; a hand-edited file ends on a row dated next
year. Gridded with the rest, one such stamp stretches the grid over the gap: the traffic
reads as idle, or the grid does not fit in memory (an epoch file with one row at 0 asked for
170 billion slots of 10 ms). The readers leave such stamps out, and say so.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["STRAY_GAP_S", "Y2000_S", "stray_times"]

#: A stamp cut off from the median one by an empty gap longer than this is stray ...
STRAY_GAP_S = 86_400.0
#: ... and so is one before 2000-01-01 (epoch seconds) while the median one is later.
Y2000_S = 946_684_800.0


def stray_times(
    times_s: npt.NDArray[np.float64], timed: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.bool_]:
    """Stamps implausibly far from the rest (among ``timed`` ones; all by default).

    Such a stamp is one before 2000-01-01 while the median stamp is later, or one cut off from
    the median stamp by a gap of over a day with no stamp in it (a recording that runs for
    days, stamps all along, keeps them all). Needs three stamps: with two, neither is the odd
    one.
    """
    # Stamps of a whole capture are tens of millions; in order (as recorders write them) and
    # all timed, they are looked at in place, without the index arrays and sorted copy.
    rows = None if timed is None or timed.all() else np.flatnonzero(timed)
    t = times_s if rows is None else times_s[rows]
    stray = np.zeros(times_s.size, dtype=bool)
    if t.size < 3:
        return stray
    order = None if bool((t[1:] >= t[:-1]).all()) else np.argsort(t, kind="stable")
    s = t if order is None else t[order]
    mid = s.size // 2
    odd = np.zeros(s.size, dtype=bool)
    gaps = np.flatnonzero(np.diff(s) > STRAY_GAP_S)
    below, above = gaps[gaps < mid], gaps[gaps >= mid]
    if below.size:
        odd[: int(below[-1]) + 1] = True
    if above.size:
        odd[int(above[0]) + 1 :] = True
    if s[mid] >= Y2000_S:
        odd |= s < Y2000_S
    where = np.flatnonzero(odd) if order is None else order[odd]
    stray[where if rows is None else rows[where]] = True
    return stray
