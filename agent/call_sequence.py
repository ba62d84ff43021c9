"""T from the order of an NCCL log's calls, when their times are too coarse to time a step.

NCCL's default timestamp (2.26+, ``[%F %T]``) has whole seconds, and lines that carry none are
timed when the tailer reads them: a step of 0.45 s or 1.3 s cannot be timed from such times,
and binned they show only the beat of the steps against the second (4.5 s, 4.35 s, read as
the period). But a training step issues the same calls in the same order every step (the
same buckets, layers and communicators), so some kind of call (an op on a communicator, of
one size) comes once a step: every P calls, with the same calls between two of them. Its
coarse times, however coarse, grow by T a step on average, each up to a resolution late at
random against the steps: their slope over K steps is off by about res / (K·T·√K) (0.06 s
steps in whole seconds: within 0.01 % of the same calls' exact times over 600 s). Pure:
arrays in, a dataclass out.

Limits: a step whose halves issue the same calls (bucket sizes a, b, a, b) reads half the
step; all calls alike (one kind) say nothing about where a step ends and give no period;
steps whose calls change from step to step (inference batches) have no marker, which is the
right verdict for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.ascending import finite_ascending

__all__ = [
    "MIN_STEPS",
    "SequenceStep",
    "call_kinds",
    "clumped_resolution",
    "process_codes",
    "sequence_step",
    "step_markers",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Fewest step intervals that time a process's step.
MIN_STEPS = 8


@dataclass(frozen=True)
class SequenceStep:
    """The step read from the call order: its time, its calls, and how well they repeat."""

    period_s: float
    calls_per_step: int
    steps: int  # step intervals that timed it, all processes together
    alike: float  # the worst process's share of steps that held the usual calls
    processes: int
    #: Spread of the marker's intervals (pauses left out) over their mean, worst process.
    interval_cv: float = 0.0
    #: The steps other markers time (a micro-batch's, a metrics call's every few steps).
    other_periods_s: tuple[float, ...] = ()


def process_codes(processes: Iterable[str]) -> IntArray:
    """A code per key for the process it belongs to, in key order, with -1 appended.

    Indexed by a call's key id, it gives the call's process; an unknown key (-1) takes the
    appended -1.
    """
    names = list(processes)
    code = {p: i for i, p in enumerate(dict.fromkeys(names))}
    return np.array([code[p] for p in names] + [-1], dtype=np.int64)


def call_kinds(*columns: npt.ArrayLike) -> IntArray:
    """One integer per call for the calls' identifying columns (op, communicator, bytes, ...).

    NaN (an unknown size) is a value of its own.
    """
    cols = [np.nan_to_num(np.asarray(c, dtype=np.float64), nan=-1.0) for c in columns]
    if not cols or cols[0].size == 0:
        return np.empty(0, dtype=np.int64)
    code = np.zeros(cols[0].size, dtype=np.int64)
    for col in cols:  # pairwise, kept dense: 10x faster than unique rows (axis=0)
        _, inverse = np.unique(col, return_inverse=True)
        code = code * (int(inverse.max()) + 1) + inverse.reshape(-1)
        _, code = np.unique(code, return_inverse=True)
        code = code.reshape(-1).astype(np.int64)
    return code


#: Fewest occurrences of a kind that may mark the steps.
MIN_MARKS = 5
#: Share of a marker's intervals (in calls) that must be its usual one, give or take a call
#: inserted or lost (a metrics AllReduce every few steps, a lost line).
MIN_REGULAR = 0.8
#: Share of those intervals that must hold the usual calls (the same ops, communicators and
#: peers, whatever their sizes: MoE all-to-all sizes change every step).
MIN_ALIKE = 0.6
#: Markers whose intervals hold the usual calls this often are all clean: of those the most
#: frequent marks the step. Below it a cleaner marker wins (see :func:`step_markers`).
CLEAN_ALIKE = 0.97
#: Share of a marker's intervals that may be pauses (an evaluation, a checkpoint).
MAX_PAUSES = 0.1


def step_markers(
    kinds: IntArray, keys: IntArray, *, min_marks: int = MIN_MARKS
) -> list[tuple[int, int, float]]:
    """Kinds of call that may mark one process's steps, best first: (kind, calls, alike share).

    A kind that comes once a step does so every P calls (give or take an inserted or lost
    call), its mean interval is P too, and the calls between two of its occurrences are the
    same every step. A layer's kind in a ZeRO / FSDP step comes often and regularly too, but
    its usual interval leaves the rest of the step out of account.

    The call order alone cannot tell a step of m micro-batches plus one gradient AllReduce
    from m steps with a metrics AllReduce after every m-th: the micro-batch's Send marks 1/m
    of the step with the same calls between two of its occurrences (m - 1) / m of the time.
    So the cleanest markers come first, and of those clean alike (``CLEAN_ALIKE``) the most
    frequent: a step of up to 32 micro-batches reads whole, and a metrics call every 33
    steps or more is an insertion; one every few steps reads a multiple of the step.
    ``kinds`` (what each call is, sizes included) and ``keys`` (the same without sizes) are
    per call in log order.
    """
    n = kinds.size
    if n < 2 * min_marks:
        return []
    counts = np.bincount(kinds)
    # The calls between two marks as a multiset: a random 64-bit value per key, summed over
    # the interval (modulo 2^64, exactly: alike intervals have equal sums).
    weight = np.random.default_rng(0).integers(0, 2**63, int(keys.max(initial=0)) + 2, np.uint64)
    content = np.concatenate((np.zeros(1, np.uint64), np.cumsum(weight[keys], dtype=np.uint64)))
    found: list[tuple[int, int, float, int]] = []
    order = np.argsort(kinds, kind="stable")  # each kind's calls together, in log order
    bounds = np.concatenate(([0], np.cumsum(counts)))
    for kind in np.flatnonzero(counts >= min_marks).tolist():
        pos = order[bounds[kind] : bounds[kind + 1]]
        gaps = np.diff(pos)
        usual = float(np.median(gaps))
        if usual < 2:
            continue  # back-to-back calls of one kind: no step boundary between them
        regular = np.abs(gaps - usual) <= max(1.0, 0.1 * usual)
        # The usual interval must account for the calls in between as well: a layer's
        # ReduceScatter comes every other call through the backward pass, but the forward
        # pass lies between its last and next one, once a step (36 calls, 12 of them its own:
        # a mean interval of 3 against the usual 2). A call inserted every few steps, or a
        # warm-up, moves the mean by a fraction of a call.
        tiles = abs(float(gaps.mean()) - usual) <= max(0.5, 0.05 * usual)
        if regular.mean() < MIN_REGULAR or not tiles:
            continue
        between = content[pos[1:]] - content[pos[:-1] + 1]
        _, alike = np.unique(between, return_counts=True)
        share = float(alike.max()) / between.size
        if share >= MIN_ALIKE:
            found.append((kind, round(usual), share, int(counts[kind])))
    found.sort(key=lambda f: (-min(f[2], CLEAN_ALIKE), -f[3], f[0]))
    return [(kind, calls, share) for kind, calls, share, _ in found]


_Marked = tuple[float, int, int, float, float]  # T, steps, calls per step, alike, interval CV


def _process_markers(
    times: FloatArray, kinds: IntArray, keys: IntArray, resolution_s: float
) -> list[_Marked]:
    """Every marker of one process's calls (log order) that times its steps, best first.

    A marker whose intervals are often "pauses" is passed over: a micro-batch's marker whose
    batches bunch within a longer step sees the rest of every step as one.
    """
    out: list[_Marked] = []
    for kind, calls, share in step_markers(kinds, keys):
        marks = times[kinds == kind]
        marks = marks[np.isfinite(marks)]
        d = np.diff(marks)
        if d.size < MIN_STEPS:
            continue
        typical = float(np.median(d))
        # A pause is one long interval: it ends a run of steps.
        keep = (d >= 0) & (d <= 1.5 * typical + 2.0 * resolution_s)
        kept = int(keep.sum())
        if kept < MIN_STEPS or kept < (1.0 - MAX_PAUSES) * d.size:
            continue
        # Fine times: the mean step, pauses left out (T is the mean step; under random-walk
        # jitter the least-squares slope of 200 steps of 10 % read 0.5 % off it). Coarse
        # ones: the slope, which averages their rounding out (see _runs_slope).
        slope = _runs_slope(marks, keep) if resolution_s > 0 else float(np.mean(d[keep]))
        if resolution_s > 0 and slope > 0:
            newer = _newer_slope(marks, keep, resolution_s)
            if newer is not None:
                slope, kept = newer
        if slope > 0:
            out.append((slope, kept, calls, share, float(np.std(d[keep])) / slope))
    return out


def _newer_slope(
    marks: FloatArray, keep: npt.NDArray[np.bool_], resolution_s: float
) -> tuple[float, int] | None:
    """The newer steps' (slope, steps) when the step time changed within the window.

    Coarse calls need a long window (100 resolutions: 20 s at the tailer's 0.2 s polls), and
    its slope glides from the old step to the new one over all of it (0.13 to 0.17 s over
    20 s). The marks' times, pauses taken out, are fitted by two lines, the break where their
    squared error is least; the newer line's slope is taken when it differs from the older's
    by more than 2 % and four times its quantisation error, res / (span·√K).
    """
    d = np.diff(marks)
    u = np.concatenate(([0.0], np.cumsum(keep, dtype=np.float64)))  # steps so far
    y = np.concatenate(([0.0], np.cumsum(np.where(keep, d, 0.0))))  # time so far, no pauses
    n = u.size
    if n < 2 * MIN_STEPS + 2:
        return None

    def prefix(a: FloatArray) -> FloatArray:
        return np.concatenate(([0.0], np.cumsum(a)))

    su, sy, suu, syy, suy = prefix(u), prefix(y), prefix(u * u), prefix(y * y), prefix(u * y)

    def fit(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> tuple[FloatArray, FloatArray]:
        """(squared error, slope) of the line through points [a, b), for arrays of bounds."""
        m = (b - a).astype(np.float64)
        cu, cy = su[b] - su[a], sy[b] - sy[a]
        cuu = suu[b] - suu[a] - cu * cu / m
        cuy = suy[b] - suy[a] - cu * cy / m
        cyy = syy[b] - syy[a] - cy * cy / m
        safe = np.where(cuu > 0, cuu, 1.0)
        return cyy - cuy * cuy / safe, np.where(cuu > 0, cuy / safe, 0.0)

    breaks = np.arange(MIN_STEPS + 1, n - MIN_STEPS, dtype=np.int64)
    if breaks.size == 0:
        return None
    left_err, left = fit(np.zeros_like(breaks), breaks)
    right_err, right = fit(breaks, np.full_like(breaks, n))
    best = int(np.argmin(left_err + right_err))
    older, newer = float(left[best]), float(right[best])
    steps = int(u[-1] - u[breaks[best]])
    if older <= 0 or newer <= 0 or steps < MIN_STEPS:
        return None
    noise = resolution_s / (newer * steps * np.sqrt(steps))
    if abs(newer / older - 1.0) <= max(0.02, 4.0 * noise):
        return None
    return newer, steps


def _runs_slope(marks: FloatArray, keep: npt.NDArray[np.bool_]) -> float:
    """Seconds per step: the least-squares slope of the marks' times over their step number.

    One line per run of steps between pauses (``keep``: the intervals that are no pause).
    Coarse times are each up to a resolution late, at random against the steps: the slope
    over K steps is off by about res / (K·T·√K), where the first and the last mark alone
    (their mean interval) are off by res / (K·T): 0.03 % against 1 % over 87 s of 0.061 s
    steps in whole seconds.
    """
    run = np.concatenate(([0], np.cumsum(~keep)))  # pauses start new runs
    step = np.arange(marks.size, dtype=np.float64)
    size = np.bincount(run).astype(np.float64)
    k = step - (np.bincount(run, step) / size)[run]
    t = marks - (np.bincount(run, marks) / size)[run]
    den = float(np.dot(k, k))
    return float(np.dot(k, t)) / den if den > 0 else 0.0


def sequence_step(
    times: FloatArray,
    keys: IntArray,
    sizes: FloatArray,
    processes: IntArray,
    resolution_s: float,
) -> SequenceStep | None:
    """T from the calls' order: per process (``processes`` codes), the times of its step marker.

    ``times``, ``keys`` (who made a call and what it is: op, communicator, peer) and
    ``sizes`` (bytes) are per call, in log order within each process. The processes' T are
    combined by their mean over the largest group within 5 % of one of them
    (:func:`_agreeing`); None when no process has a marker over ``MIN_STEPS`` steps.
    """
    n = times.size
    if n == 0 or keys.size != n or sizes.size != n or processes.size != n:
        return None
    kinds = call_kinds(keys, sizes)
    found: list[_Marked] = []
    others: list[float] = []
    for proc in np.unique(processes).tolist():
        mine = np.flatnonzero(processes == proc)
        marked = _process_markers(times[mine], kinds[mine], keys[mine], resolution_s)
        if marked:
            found.append(marked[0])
            others += [m[0] for m in marked[1:]]
    if not found:
        return None
    agree = _agreeing(found)
    calls = int(np.median([f[2] for f in agree]))
    return SequenceStep(
        period_s=float(np.mean([f[0] for f in agree])),
        calls_per_step=calls,
        steps=sum(f[1] for f in agree),
        alike=min(f[3] for f in agree),
        processes=len(agree),
        interval_cv=max(f[4] for f in agree),
        other_periods_s=tuple(sorted({round(o, 9) for o in others})),
    )


def _agreeing(found: list[_Marked]) -> list[_Marked]:
    """The processes whose step times agree within 5 %: the most of them, then the most steps.

    Ranks of one job agree. Two jobs on one host (two 4-GPU jobs on an 8-GPU node), or a log
    of two runs, give two groups, and the median of 0.5, 0.5, 0.7, 0.7 (0.6 s) was within
    5 % of none of them: the estimate failed on every window.
    """

    def group(center: _Marked) -> list[_Marked]:
        return [f for f in found if abs(f[0] / center[0] - 1.0) <= 0.05]

    best = max(found, key=lambda c: (len(group(c)), sum(f[1] for f in group(c))))
    return group(best)


#: Calls whose times lie within this of the previous call's came in one write (a clump) ...
CLUMP_S = 1e-3
#: ... and lines that arrive in clumps this large, median, were buffered before they were
#: timed, when most calls sit in such clumps ...
MIN_CLUMP_CALLS = 8
MIN_CLUMPED_SHARE = 0.8
#: ... and a clump holds this many steps or more, median (a job's own group of calls, issued
#: within microseconds, is at most one step's).
MIN_CLUMP_STEPS = 2.0


def _clumped_at_all(times: FloatArray) -> bool:
    """Whether half the calls, all processes together, come within ``CLUMP_S`` of the last.

    Blocks need it: a process's clumped calls (80 % of them, in clumps of 4 or more) are each
    within ``CLUMP_S`` of the call before in time order, whoever made that one. One pass over
    the times spares the per-process work on a log timed line by line (8 ms at 69 k calls).
    """
    t = finite_ascending(times)
    if t.size < 2 * MIN_CLUMP_CALLS:
        return False
    d = np.diff(t)
    return int(np.count_nonzero(d <= CLUMP_S)) >= 0.5 * t.size


def clumped_resolution(
    times: FloatArray, processes: IntArray, keys: IntArray, sizes: FloatArray
) -> float:
    """How coarse the calls' times really are when their lines were timed in blocks (else 0).

    NCCL 2.13-2.26 write their log to stdout fully buffered when it is a pipe: a collector
    that stamps lines as they arrive (``kubectl logs --timestamps``, docker, journald, a
    tailer) gives every line of a 4 KiB block one time, blocks seconds apart, and the blocks'
    rhythm read as T (0.5 s steps: 11 s, confidence 0.94). A block holds several steps: the
    call that marks a process's steps (:func:`step_markers`) comes several times in one clump,
    while a job's own burst of calls (a grouped all-to-all, a layer train within a
    millisecond) holds one step's at most. The median time between a process's clumps is
    returned: times that coarse are timed by the calls' order (:func:`sequence_step`). Calls
    with no marker (one kind of call) give 0: their order times nothing. ``keys`` and
    ``sizes`` tell the calls apart (:func:`call_kinds`); they are read only when the times
    come in clumps at all, so a log timed line by line costs one pass over its times.
    """
    if not _clumped_at_all(times):
        return 0.0
    gaps: list[float] = []
    sizes_of: list[int] = []
    clumped = total = 0
    cuts: list[tuple[IntArray, IntArray]] = []  # per process: its calls, where clumps start
    for proc in np.unique(processes).tolist():
        mine = np.flatnonzero(processes == proc)
        mine = mine[np.isfinite(times[mine])]
        if mine.size < 2 * MIN_CLUMP_CALLS:
            continue
        d = np.diff(times[mine])
        breaks = np.flatnonzero(d > CLUMP_S) + 1
        size = np.diff(np.concatenate(([0], breaks, [mine.size])))
        total += mine.size
        clumped += int(size[size >= MIN_CLUMP_CALLS // 2].sum())
        sizes_of += size.tolist()
        gaps += d[breaks - 1].tolist()
        if breaks.size >= 2:
            cuts.append((mine, breaks))
    if sum(b.size for _, b in cuts) < 4 or float(np.median(sizes_of)) < MIN_CLUMP_CALLS:
        return 0.0
    if clumped < MIN_CLUMPED_SHARE * total:
        return 0.0
    kinds = call_kinds(keys, sizes)
    steps: list[float] = []  # per process: the marker's median count per clump
    weights: list[int] = []
    for mine, breaks in cuts:
        k, key = kinds[mine], keys[mine]
        markers = step_markers(k, key)
        if markers:
            starts = np.zeros(mine.size, dtype=np.int64)
            starts[breaks] = 1
            clump = np.cumsum(starts)  # each call's clump
            per_clump = np.bincount(clump[k == markers[0][0]], minlength=breaks.size + 1)
            steps.append(float(np.median(per_clump)))
            weights.append(int(breaks.size))
    if not weights or sum(weights) < 4:
        return 0.0
    if float(np.average(steps, weights=weights)) < MIN_CLUMP_STEPS:
        return 0.0  # clumps of one step at most: the job's own bursts of calls
    return float(np.median(gaps))
