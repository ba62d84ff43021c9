"""Trains of bursts: a rhythm inside a longer step, or a step with pauses.

A step's own rhythm repeats through the step. A rhythm *inside* the step stops between steps:
DDP's bucketed all-reduces come during the backward pass only, ZeRO-3 / FSDP's layer
collectives come through the forward and backward passes and stop for the optimizer. A window
of a few long steps shows such a rhythm far more clearly than the step (a real DDP job: six
buckets 0.6 s apart, then 3.2 s of forward silence, in 6.3 s steps; its bucket spacing read as
a period of confidence 0.98, and the live agent locked it as T for minutes).

A training job that pauses (an evaluation, a checkpoint) makes trains too: of whole steps,
between silences. The two differ in how regular the trains are: a step's trains start like
clockwork (the real DDP job: 2 % spread), while a pause lasts as long as its work takes (a real
job pausing every 10 steps for 3-5 s: its trains started 12 % apart). Pure functions over the
burst edges that :func:`agent.period.edge_timing` finds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "TRAIN_MIN_STARTS",
    "TrainVerdict",
    "silences_after",
    "train_period",
    "train_starts",
    "train_verdict",
    "without_start_up",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: A silence this many periods long between the bursts of a rhythm is no missed burst (edge
#: timing folds up to 3 periods into missed ones): the rhythm stopped.
TRAIN_SILENCE = 2.5
#: Bursts come in trains when such silences come every this many bursts or more often ...
TRAIN_MAX_BURSTS = 16
#: ... and take this share of the time.
TRAIN_SILENT_SHARE = 0.25
#: Spread of the trains' starts under which they are a step's (above it: pauses). Real: DDP's
#: bucket trains 2.3 %; a job pausing 3-5 s every 10 steps 11 %; pauses of 3-5 s drawn at
#: random after 10 steps of 0.68 s: 5-7 %.
TRAIN_START_CV = 0.04
#: Fewest trains (each after a silence) whose starts time the step they belong to.
TRAIN_MIN_STARTS = 5

TrainVerdict = Literal["none", "trains", "pauses"]


def _between(rising_s: FloatArray, falling_s: FloatArray, period_s: float) -> FloatArray:
    """The silence after each burst but the last, until the next one starts.

    ``falling_s`` are the ends of the bursts that ended (one fewer when the last is still
    on); without them (pulses), rise to rise less a period.
    """
    if falling_s.size >= rising_s.size - 1:
        return rising_s[1:] - falling_s[: max(0, rising_s.size - 1)]
    return np.diff(rising_s) - period_s


def silences_after(rising_s: FloatArray, falling_s: FloatArray, period_s: float) -> IntArray:
    """Indices of the bursts followed by a silence of ``TRAIN_SILENCE`` periods or more."""
    if rising_s.size < 2:
        return np.empty(0, dtype=np.int64)
    between = _between(rising_s, falling_s, period_s)
    return np.flatnonzero(between >= TRAIN_SILENCE * period_s).astype(np.int64)


def without_start_up(edges: FloatArray) -> FloatArray:
    """``edges`` without the leading ones whose interval is 25 % off the median one.

    A job's first step is no steady one: a real job's start-up train came 3.8 s before the
    next, in steps of 6.2 s.
    """
    while edges.size > 2:
        first = float(edges[1] - edges[0]) / float(np.median(np.diff(edges)))
        if abs(first - 1.0) <= 0.25:
            break
        edges = edges[1:]
    return edges


def train_verdict(
    rising_s: FloatArray, falling_s: FloatArray, period_s: float, start_s: float, end_s: float
) -> TrainVerdict:
    """Whether bursts ``period_s`` apart come in trains, and whose.

    Trains: silences of ``TRAIN_SILENCE`` periods or more between bursts, one at least every
    ``TRAIN_MAX_BURSTS`` bursts, holding ``TRAIN_SILENT_SHARE`` of ``start_s`` to ``end_s``
    (the silence after the last burst counts too, beside one between bursts). Then "pauses"
    when three trains or more start less regularly than ``TRAIN_START_CV`` allows, else
    "trains" (fewer cannot tell: the rhythm is not taken for the step on them).
    """
    if rising_s.size < 3:
        return "none"
    between = _between(rising_s, falling_s, period_s)
    silences = between[between >= TRAIN_SILENCE * period_s]
    if silences.size == 0:
        return "none"
    # The silence after the last burst (once it has ended) counts beside one between bursts;
    # alone it is a job that stopped, and idle before the first one a job that started.
    trailing = end_s - float(falling_s[-1]) if falling_s.size == rising_s.size else 0.0
    if trailing >= TRAIN_SILENCE * period_s:
        silences = np.append(silences, trailing)
    share = float(np.sum(silences)) / max(end_s - start_s, 1e-12)
    if rising_s.size > TRAIN_MAX_BURSTS * (silences.size + 1) or share < TRAIN_SILENT_SHARE:
        return "none"
    starts = train_starts(rising_s, falling_s, period_s)
    if starts.size >= 3:
        steps = np.diff(starts)
        if float(np.std(steps)) > TRAIN_START_CV * float(np.mean(steps)):
            return "pauses"
    return "trains"


def train_period(rising_s: FloatArray, falling_s: FloatArray, rhythm_s: float) -> float | None:
    """The step of trains of bursts ``rhythm_s`` apart, from the trains' starts and ends.

    Each train starts where its step's traffic starts (a backward pass's first bucket, a
    forward pass's first layer) and ends where it stops: ``TRAIN_MIN_STARTS`` of them, each
    within 25 % of the median spacing, spread under ``TRAIN_START_CV`` and at least 3 rhythms
    apart, time the step before any NSDF level can (the real DDP job above: comb 0.45 and z 1.7
    over five steps, its trains' starts 2 % apart). T is the mean of the starts' and the ends'
    spacing, of those that pass (a start-up step can spoil one and not the other).
    """
    after = silences_after(rising_s, falling_s, rhythm_s)
    spans = []
    for found in (rising_s[after + 1], falling_s[after[after < falling_s.size]]):
        edges = without_start_up(found)
        if edges.size < TRAIN_MIN_STARTS:
            continue
        steps = np.diff(edges)
        median = float(np.median(steps))
        if (
            median >= 3.0 * rhythm_s
            and float(np.max(np.abs(steps / median - 1.0))) <= 0.25
            and float(np.std(steps)) <= TRAIN_START_CV * float(np.mean(steps))
        ):
            spans.append(float(edges[-1] - edges[0]) / (edges.size - 1))
    return float(np.mean(spans)) if spans else None


def train_starts(rising_s: FloatArray, falling_s: FloatArray, period_s: float) -> FloatArray:
    """The starts of the trains after a silence (the start-up's left out): T's edges."""
    return without_start_up(rising_s[silences_after(rising_s, falling_s, period_s) + 1])
