"""Which kind of workload is on the wire: training, fine-tuning, inference, or nothing.

The rule, in order (evidence: DOMAIN.md's three regimes, and the simulator's scenarios in
tests/unit/test_regime.py and tests/integration/test_analyze_scenarios.py):

0. **idle** without collectives when the traffic averages under ``IDLE_SHARE`` of
   ``idle_bytes_per_s`` (1 MB/s), bursty or not: scrapes, heartbeats and log shipping (a 2 MB
   scrape every 15 s, read at 10 ms polls, is a burst at 200 MB/s; an inference host's
   requests average MB/s and more). Periodic traffic that light, and under 4 MB a cycle, has
   no T at all (``agent.estimate.MANAGEMENT_CYCLE_BYTES``: a 200 KB transfer every 10 s read as
   T = 10 s, "training", on an idle host).
1. **periodic traffic**, whatever its volume beyond that (a small job is still a job):
   * with an NCCL log, its collectives decide: **finetune** when most bytes go through
     AllGather/ReduceScatter (ZeRO / FSDP), **training** otherwise (DDP's AllReduce, however
     many buckets; tensor-parallel AllReduce; pipeline Send/Recv);
   * from the traffic alone, **finetune** when the step is a *train* of many small
     collectives — an inner period at least 3× shorter than T, or ≥ 6 bursts per period —
     that runs through the whole step: its longest silence is under ``FILLED_STEP_SILENCE``
     of T (ZeRO-3 / FSDP gather each layer's parameters in the forward pass as well as the
     backward: 0.04 of the step on two real FSDP jobs);
   * **training** otherwise: one (or a few) large synchronous bursts per step (also after a
     train: the largest burst of a step carrying ``DOMINANT_BURST_SHARE`` of its bytes is a
     data-parallel AllReduce after tensor-, expert- or pipeline-parallel traffic), or a train
     that leaves part of the step silent — DDP's bucketed AllReduces overlap the backward
     pass only, and the forward pass is silent (0.38 of the step on a real job with ten
     buckets, which was called "finetune" before the silence counted).
2. **aperiodic traffic** with a rhythm: bursts that reach ``idle_bytes_per_s`` and repeat at
   a lag the autocorrelation confirms, too irregularly to time a period (steps that spread
   widely, or two jobs' steps on one link; random arrivals never show one): **training**, or
   **finetune** when an NCCL log says most bytes are AllGather/ReduceScatter, unless the log
   is dominated by AlltoAll / Send / Recv (then rule 3);
3. **aperiodic traffic**: **inference** when it comes in bursts that reach
   ``idle_bytes_per_s`` (random arrivals, at least ``MIN_APERIODIC_BURSTS`` of them in the
   window, so that a training job's first few steps are not called inference), whatever its
   mean (a real service at 1.85 requests/s averaged 4 MB/s in 47 MB/s bursts), or when the
   NCCL log is dominated by AlltoAll / Send / Recv and its calls' times could have shown a
   period (a log without timestamps and no counters cannot tell a pipeline-parallel training
   job's Send/Recv from inference's: **unknown**);
4. **idle** — none of the above, less than ``idle_bytes_per_s`` on average, no collectives
   in the NCCL log (if any) and no burst that reaches ``idle_bytes_per_s`` (management chatter
   has none; a few such bursts are a job too young to tell: **unknown**), nor
   ``MIN_APERIODIC_BURSTS`` polls or more that reach it (transfers that each fit in a poll:
   a real inference service polled at 10 Hz read "idle"; they are **unknown**); with neither
   counters nor an NCCL log (GPU samples alone) nothing says the network is idle: **unknown**;
5. **unknown** for flat, structureless load or too little evidence.

Live, a switch *to* inference is confirmed over ``INFERENCE_CONFIRM_S`` (:class:`RegimeGate`):
"no period" is what a training job shows too until its lock (6-10 s on real DDP jobs at
start-up) or while its steps jitter, and a host flipping between training and inference for a
few seconds is a false signal on a dashboard. Every other switch is shown at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "FILLED_STEP_SILENCE",
    "INFERENCE_CONFIRM_S",
    "REGIMES",
    "RegimeFeatures",
    "RegimeGate",
    "classify_regime",
    "collective_shares",
]

REGIMES = ("training", "finetune", "inference", "idle", "unknown")

#: Below this mean rate a host is idle: management traffic is KB/s to a few MB/s, while a
#: collective burst train averages hundreds of MB/s or more.
IDLE_BYTES_PER_S = 10e6
#: ... and below this share of it, bursty or not, a host without collectives is idle.
IDLE_SHARE = 0.1

#: Bursts a window must hold before their randomness is evidence of inference: fewer could
#: still be the first steps of a training job whose period the window cannot show yet.
MIN_APERIODIC_BURSTS = 8

#: A step's train of collectives with a silence this long (a share of T) is DDP's backward
#: pass, not ZeRO-3's layer train (real recordings: FSDP 0.04; DDP with 2 MB buckets 0.38;
#: pipeline stages 0.14-0.6).
FILLED_STEP_SILENCE = 0.2
#: A step whose largest burst carries this share of its bytes or more ends in one sync (a
#: data-parallel gradient AllReduce after tensor-, expert- or pipeline-parallel traffic:
#: 0.25-0.59 on synthetic jobs), where ZeRO-3 / FSDP's layer trains have none (real FSDP:
#: 0.11-0.12, every burst a layer's).
DOMINANT_BURST_SHARE = 0.2

#: Seconds the estimates must say "inference" before the live agent shows it.
INFERENCE_CONFIRM_S = 10.0

_GATHER_OPS = frozenset({"AllGather", "ReduceScatter"})
_SPARSE_OPS = frozenset({"AlltoAll", "Send", "Recv", "Gather", "Scatter"})


@dataclass(frozen=True)
class RegimeFeatures:
    """What the classifier looks at; every field may be unknown (None)."""

    periodic: bool
    inner_period: bool = False
    bursts_per_period: float | None = None
    #: The longest silence of a typical step, as a share of T (agent.bursts.step_silence).
    step_silence: float | None = None
    #: The share of the bursts' bytes in the largest burst of each step
    #: (agent.bursts.largest_burst_share).
    largest_share: float | None = None
    bursty: bool = False
    bursts: int = 0
    #: The bursts' rate (B plus the background, or the on level when B is unresolved).
    burst_rate: float | None = None
    mean_rate: float | None = None
    collective_calls: int | None = None
    gather_share: float | None = None
    sparse_share: float | None = None
    #: Nothing says when the traffic moved: an NCCL log without timestamps, and no counters.
    untimed: bool = False
    #: Runs of polls at ``idle_bytes_per_s`` or over that did not count as bursts, and stand
    #: clear of the background's noise (:func:`agent.bursts.clear_spikes`): transfers that
    #: each fit in a poll, at random times, cannot be told from noise, but a host whose polls
    #: reach a job's rates is not idle (a real inference service polled at 10 Hz).
    spikes: int = 0
    #: No period, but a rhythm the autocorrelation confirmed whose bursts repeat too
    #: irregularly to time (agent.period.PeriodResult.irregular_rhythm_s): random arrivals
    #: never show one; steps that spread widely, or two jobs' steps on one link, do.
    rhythm: bool = False


def collective_shares(collectives: Mapping[str, tuple[int, int]]) -> tuple[float, float] | None:
    """(AllGather+ReduceScatter, AlltoAll+P2P) shares of the collective bytes, or None."""
    total = sum(b for _, b in collectives.values())
    if total <= 0:
        return None
    gather = sum(b for op, (_, b) in collectives.items() if op in _GATHER_OPS)
    sparse = sum(b for op, (_, b) in collectives.items() if op in _SPARSE_OPS)
    return gather / total, sparse / total


def _gathers(f: RegimeFeatures) -> bool:
    """Whether the NCCL log says most bytes go through AllGather/ReduceScatter (ZeRO, FSDP)."""
    return f.gather_share is not None and f.gather_share >= 0.5


def classify_regime(f: RegimeFeatures, *, idle_bytes_per_s: float = IDLE_BYTES_PER_S) -> str:
    """Apply the rule in the module docstring."""
    if f.periodic:
        if f.gather_share is not None:
            return "finetune" if _gathers(f) else "training"
        train = f.inner_period or (f.bursts_per_period is not None and f.bursts_per_period >= 6)
        filled = f.step_silence is None or f.step_silence < FILLED_STEP_SILENCE
        synced = f.largest_share is not None and f.largest_share >= DOMINANT_BURST_SHARE
        return "finetune" if train and filled and not synced else "training"
    no_collectives = f.collective_calls is None or f.collective_calls == 0
    quiet = f.mean_rate is not None and f.mean_rate < idle_bytes_per_s
    if no_collectives and f.mean_rate is not None and f.mean_rate < IDLE_SHARE * idle_bytes_per_s:
        # Averaging under 1 MB/s, bursts or not, are scrapes and heartbeats: a 2 MB scrape
        # every 15 s read at 10 ms polls is a burst at 200 MB/s (an inference host's
        # requests average tens of MB/s and more).
        return "idle"
    high = f.bursty and (f.burst_rate is None or f.burst_rate >= idle_bytes_per_s)
    if f.rhythm and high and (f.sparse_share is None or f.sparse_share < 0.5):
        # Two DDP jobs on one link (a real recording) read "inference": their bursts repeat,
        # only not at one period.
        return "finetune" if _gathers(f) else "training"
    if high and f.bursts >= MIN_APERIODIC_BURSTS:
        return "inference"
    busy_polls = f.spikes >= MIN_APERIODIC_BURSTS
    # Neither link nor log read (GPU samples alone): nothing says the network is idle.
    unread = f.mean_rate is None and f.collective_calls is None
    if (quiet or f.mean_rate is None) and no_collectives and not high and not busy_polls:
        return "unknown" if unread else "idle"
    if f.sparse_share is not None and f.sparse_share >= 0.5:
        return "unknown" if f.untimed else "inference"
    if f.bursty and f.bursts >= MIN_APERIODIC_BURSTS:
        return "inference"
    if quiet and not high and not busy_polls:
        return "idle"
    return "unknown"


class RegimeGate:
    """The regime a live agent shows: a switch to inference only once it has lasted.

    While an "inference" verdict is younger than ``confirm_s``, the regime shown before it
    stays if it was training or fine-tuning (a job between locks), else it is "unknown" (a
    job not locked yet, or an inference host in its first seconds). While the tracker holds a
    period, the regime is a periodic one: a window without a period of its own (the lock held
    on weaker evidence) showed "idle" or "inference" next to its T.
    """

    def __init__(self, confirm_s: float = INFERENCE_CONFIRM_S) -> None:
        self._confirm_s = confirm_s
        self._shown = "unknown"
        self._since: float | None = None
        self._periodic = "training"

    def update(self, regime: str, now: float, *, locked: bool = False) -> str:
        """The regime to show, given one estimate's regime at ``now`` (s) and the lock."""
        if regime in ("training", "finetune"):
            self._periodic = regime
        elif locked:
            regime = self._periodic
        if regime != "inference" or self._shown == "inference":
            self._since = None
            self._shown = regime
            return regime
        if self._since is None:
            self._since = now
        if now - self._since >= self._confirm_s:
            self._shown, self._since = regime, None
            return regime
        return self._shown if self._shown in ("training", "finetune") else "unknown"
