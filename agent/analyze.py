"""``commpulse analyze``: recorded files in the contract formats → one estimate.

Thin: readers in ``collectors/`` parse the files, :func:`agent.estimate.estimate` does the
work. Several files of one kind are combined (counters summed per direction on a common grid,
GPU samples pooled, NCCL logs accumulated).
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.bursts import whole_burst_levels
from agent.call_sequence import call_kinds, clumped_resolution, process_codes
from agent.devices import (
    DeviceSteps,
    device_steps,
    job_of,
    jobs_note,
    step_groups,
    until_last_done,
)
from agent.errors import InputFormatError
from agent.estimate import (
    SLOW_POLL_S,
    CollectiveMix,
    Estimate,
    EstimateInputs,
    GpuSamples,
    busier_direction,
    estimate,
    other_direction_note,
    timed_confidence,
)
from agent.rates import (
    Direction,
    GridSeries,
    active_span,
    at_refresh_interval,
    busy_slots,
    column_device,
    column_direction,
    column_words,
    counter_deltas,
    direction_grids,
    glitch_reads,
    nominal_interval,
    poll_change,
    sum_grids,
)
from agent.regime_params import CallTable, arrivals_of, sharding_of, sparse_ops_of
from agent.separation import DISTINGUISHING_SIGNALS
from collectors._base import CallKey
from collectors.counters_csv import CounterTable, read_counters_csv
from collectors.gpu_csv import read_gpu_csv
from collectors.nccl_inspector import InspectorSummary, read_inspector_files
from collectors.nccl_log import NcclLogSummary, read_nccl_logs, stamp_resolution
from collectors.nccl_stamps import UNDATED_LIMIT
from collectors.nic_counters import DEFAULT_EXCLUDE
from collectors.pcap import AckLatency, Capture, bin_bytes, merge_ack_samples, read_capture

__all__ = [
    "AnalysisResult",
    "analyze_files",
    "arrivals_json",
    "call_table",
    "collective_mix",
    "communicators",
    "inspector_json",
    "sharding_json",
    "sparse_ops_json",
]

Grids = dict[Direction, GridSeries]

#: Capture bins: fine enough for 10 ms periods, coarse enough to stay under 2^18 bins, but no
#: coarser than ``PCAP_WIDEST_BIN_S`` for that (a capture of 44 min); of a capture longer than
#: ``PCAP_MOST_BINS`` such bins (2.9 h), the newest are binned. Widened to fit a whole day,
#: 0.5 s bins could not show 1 s steps: "bursts of about a poll", no T.
PCAP_MIN_BIN_S = 1e-3
PCAP_MAX_BINS = 2**18
PCAP_WIDEST_BIN_S = 0.01
PCAP_MOST_BINS = 2**20
#: ... and wide enough for this many frames of a burst at its typical spacing: with sparse
#: frames (TSO/GRO super-frames, a slow link) a 1 ms bin holds one frame or none, and every
#: frame looks like a burst of its own.
PCAP_FRAMES_PER_BIN = 8


@dataclass(frozen=True)
class AnalysisResult:
    """The estimate plus what was read, for the report.

    ``inputs`` is exactly what the estimator saw (the per-direction grids, pooled GPU samples,
    the NCCL mix), so sinks such as ``--plot`` draw the series T, B and D came from instead of
    rebuilding them some other way.
    """

    estimate: Estimate
    sources: dict[str, list[str]]
    extra: dict[str, Any] = field(default_factory=dict)
    inputs: EstimateInputs = field(default_factory=EstimateInputs, repr=False, compare=False)


#: More counter resets than this share of the reads, and at least ``MIN_RATE_RESETS``: the
#: columns are not cumulative. A square wave of rates "resets" once a period (2 % of the reads
#: at 50 polls a period, which passed a 5 % bar), while a real counter resets when a driver
#: reloads: not ten times in one recording.
NOT_CUMULATIVE_RESETS = 0.005
MIN_RATE_RESETS = 10
#: Words of column names that count something other than bytes (packets, errors, ticks of
#: InfiniBand's port_xmit_wait): summed as bytes they inflate B.
_NOT_BYTES = frozenset({"packets", "packet", "pkts", "pkt", "errors", "errs", "error", "drop",
                        "drops", "dropped", "discards", "discard", "wait", "frames", "multicast",
                        "collisions", "fifo", "carrier", "overruns", "compressed",
                        # rdma statistic / hw_counters: events, not bytes ("out_of_sequence"
                        # was read as a tx byte counter for its "out")
                        "sequence", "cnp", "ecn", "timeout", "retry", "retries", "requests",
                        "nak", "naks"})  # fmt: skip
#: InfiniBand's data counters (port_xmit_data, port_rcv_data, their _64 forms; perfquery's
#: PortXmitData) count 4-byte words.
_IB_WORDS = (("xmit", "data"), ("rcv", "data"))
IB_WORD_BYTES = 4


def _byte_columns(names: Sequence[str]) -> tuple[list[str], dict[str, float], list[str]]:
    """(columns read as byte counters, their scale to bytes, notes on what was done).

    The contract's columns are byte counters named tx/rx. Files from other tools also hold
    packet and error counters, the loopback interface (never the job's: NCCL goes through
    shared memory inside a host), InfiniBand's data counters in 4-byte words, or columns of
    no direction next to tx/rx ones: each is left out or converted, and said so.
    """
    kept: list[str] = []
    scale: dict[str, float] = {}
    other, loop, words, bits, multiples = [], [], [], [], []
    for name in names:
        w = column_words(name)
        if _NOT_BYTES.intersection(w):
            other.append(name)
        elif w[:1] == ["lo"] or "loopback" in w:
            loop.append(name)
        else:
            kept.append(name)
            if any(pair in itertools.pairwise(w) for pair in _IB_WORDS):
                scale[name] = IB_WORD_BYTES
                words.append(name)
            elif "bits" in w:
                scale[name] = 1 / 8
                bits.append(name)
            elif (unit := _byte_unit(name)) is not None:
                scale[name] = unit
                multiples.append(name)
    notes = []
    if bits:
        notes.append(f"read as bit counters (/8 to bytes): {', '.join(bits)}")
    if multiples:
        notes.append(
            "read in the units their names give (kB, KiB, MB, ...: x1000, x1024, ... to "
            f"bytes): {', '.join(multiples)}"
        )
    if other:
        notes.append(f"left out columns that count no bytes: {', '.join(other)}")
    if loop:
        notes.append(f"left out the loopback interface's columns: {', '.join(loop)}")
    if words:
        notes.append(
            f"read as InfiniBand data counters, in 4-byte words (x{IB_WORD_BYTES} to bytes): "
            f"{', '.join(words)}"
        )
    aimless = [n for n in kept if column_direction(n) == "total"]
    if aimless and len(aimless) < len(kept):
        kept = [n for n in kept if n not in aimless]
        notes.append(
            "left out columns whose names say neither tx nor rx (other columns do): "
            f"{', '.join(aimless)}"
        )
    kept, twice = _counted_once(kept)
    kept, port = _port_totals(kept)
    return kept, scale, notes + twice + port


#: Multiples of a byte as column names spell them (case kept: "kb" and "Mb" may be bits).
_BYTE_UNITS = {"kB": 1e3, "KB": 1e3, "kbytes": 1e3, "kilobytes": 1e3, "KiB": 2.0**10,
               "MB": 1e6, "mbytes": 1e6, "megabytes": 1e6, "MiB": 2.0**20,
               "GB": 1e9, "gbytes": 1e9, "gigabytes": 1e9, "GiB": 2.0**30}  # fmt: skip


def _byte_unit(name: str) -> float | None:
    """Bytes per unit of a column whose name says kB, KiB, MB, ... (None: bytes)."""
    for token in re.findall(r"[A-Za-z]+", name.replace("_", " ")):
        if token in _BYTE_UNITS:
            return _BYTE_UNITS[token]
    return None


def _head(name: str) -> str:
    """A column name's words before its last direction word (its device: ``eth0``, or none)."""
    words = column_words(name)
    way = [i for i, w in enumerate(words) if w in ("tx", "rx", "xmit", "rcv")]
    return "_".join(words[: way[-1]]) if way else ""


def _port_totals(names: list[str]) -> tuple[list[str], list[str]]:
    """The columns without those a port's ``_phy`` counter already counts, and a note.

    An ``ethtool -S`` dump of an mlx5 port holds ``rx_bytes_phy`` (every byte on the wire),
    ``rx_bytes`` (the kernel's share), ``rx_prioN_bytes`` and ``rx_vport_rdma_unicast_bytes``
    (RoCE): parts of the first, summed with it B came out 3x. Beside a ``phy`` column of the
    same device and direction, the others are left out.
    """
    ports = {(_head(n), column_direction(n)) for n in names if "phy" in column_words(n)}
    if not ports:
        return names, []
    parts = [
        n
        for n in names
        if "phy" not in column_words(n) and (_head(n), column_direction(n)) in ports
    ]
    if not parts:
        return names, []
    note = (
        "left out byte counters that count part of a port's traffic beside its _phy counter, "
        f"which counts all of it: {', '.join(parts)}"
    )
    return [n for n in names if n not in parts], [note]


def _device(column: str) -> str:
    """The interface a column names: its text before the first underscore (``eth0.100``)."""
    return column.split("_", 1)[0]


_VIRTUAL = re.compile(DEFAULT_EXCLUDE)
_VLAN = re.compile(r"^(?P<parent>.+)\.\d+$")


def _counted_once(names: list[str]) -> tuple[list[str], list[str]]:
    """The columns without those that count the same bytes as another one, and notes.

    A recording of every interface of a host counts a container's traffic on its veth, on
    the bridge and on the NIC, and a VLAN's on the VLAN and on its parent: summed, B came
    out two or three times the wire's. The live NIC collector skips such interfaces by
    default (:data:`DEFAULT_EXCLUDE`); here they are left out when other columns remain. A
    bond's traffic is also counted on its members, whose names do not say so: a note.
    """
    devices = {_device(n) for n in names}
    virtual = [n for n in names if _VIRTUAL.match(_device(n))]
    notes = []
    if virtual and len(virtual) < len(names):
        names = [n for n in names if n not in virtual]
        notes.append(
            "left out container, VM and tunnel interfaces (their bytes also cross the host's "
            f"NICs): {', '.join(virtual)}"
        )
    vlans = [n for n in names if (m := _VLAN.match(_device(n))) and m["parent"] in devices]
    if vlans:
        names = [n for n in names if n not in vlans]
        notes.append(f"left out VLAN interfaces counted on their parent too: {', '.join(vlans)}")
    bonds = sorted({_device(n) for n in names if _device(n).startswith("bond")})
    if bonds and len({_device(n) for n in names}) > len(bonds):
        notes.append(
            f"{', '.join(bonds)} beside other interfaces: a bond's bytes are counted on its "
            "member interfaces too, so if they are among the columns B and bytes per step are "
            "counted twice; record the bond or its members, not both"
        )
    return names, notes


#: A counter file polled this many times more coarsely than the finest one given beside it
#: is left out of T, B and D: each of its polls would be spread over that many of the grid's
#: slots, or (past ``MAX_SPREAD_INTERVALS``) left unknown, and one unknown file makes its
#: direction unknown (a node_exporter-style 1 s file beside 100 Hz RDMA reads: no T, no B, no
#: D, no word).
COARSE_FILE = 10.0
#: A column unread over more than this share of its file's recording is named in a note.
UNREAD_SHARE = 0.05


@dataclass
class CounterRead:
    """The counter files' grids summed per direction, and per device where there are several."""

    network: Grids
    dt: float
    notes: list[str]
    #: Each device's (interface or RDMA port's) own grids on the same step; empty for one.
    devices: dict[str, Grids] = field(default_factory=dict)


def _file_rate(
    table: CounterTable,
    names: Sequence[str],
    present: Mapping[str, npt.NDArray[np.bool_]],
    scale: Mapping[str, float],
) -> float:
    """A file's bytes per second over its recording, both directions."""
    return sum(_column_rate(table, n, present[n]) * scale.get(n, 1.0) for n in names)


def _counters(paths: Sequence[Path]) -> CounterRead:
    """The files' grids summed by direction, their poll interval, and what their rows lost."""
    tables = [read_counters_csv(p) for p in paths]
    notes = [f"{p}: {w}" for p, t in zip(paths, tables, strict=True) for w in t.warnings]
    for k, (path, table) in enumerate(zip(paths, tables, strict=True)):
        tables[k], note = _finest_polled(table)
        if note is not None:
            notes.append(f"{path}: {note}")
    own = [nominal_interval(t.times) for t in tables]
    dt = min(own)
    grids = []
    per_file: list[tuple[Path, npt.NDArray[np.float64], dict[str, Grids]]] = []
    coarse: list[tuple[Path, float, float]] = []  # (file, its poll, its bytes/s)
    used: list[
        tuple[CounterTable, list[str], dict[str, npt.NDArray[np.bool_]], dict[str, float]]
    ] = []
    reads = 0
    for path, table, poll in zip(paths, tables, own, strict=True):
        kept, scale, kept_notes = _byte_columns(list(table.columns))
        notes += [f"{path}: {n}" for n in kept_notes]
        if not kept:
            raise InputFormatError(path, "no column counts bytes: " + "; ".join(kept_notes))
        present, glitches = _without_glitches(table, kept)
        if poll > COARSE_FILE * dt:
            coarse.append((path, poll, _file_rate(table, kept, present, scale)))
            continue
        reads += table.times.size * len(kept)
        if glitches:
            notes.append(
                f"{path}: {glitches} read(s) off their counter's trajectory (a 0 or a spike "
                "between two reads that agree) were taken as missed polls"
            )
        stuck = _without_saturated(table, present)
        if stuck:
            notes.append(
                f"{path}: 32-bit counter(s) stuck at 2^32-1, saturated (InfiniBand's "
                "PortXmitData/PortRcvData without the 64-bit extended counters stop there): "
                + ", ".join(f"{name} from {at:.6g} s" for name, at in stuck)
                + "; their bytes from then on are unknown and left out (read the _64 or "
                "counters_ext files, or the kernel's 64-bit counters)"
            )
        kept, partial = _whole_columns(table, kept, present)
        if partial:
            notes.append(
                f"{path}: left out columns of little traffic read over less than half of the "
                "recording (summed, every interval outside their reads would be unknown): "
                + ", ".join(f"{name} ({a:.6g}-{b:.6g} s)" for name, a, b in partial)
            )
        notes += [f"{path}: {n}" for n in _unread_notes(table, kept, present, poll)]
        used.append((table, kept, present, scale))
        try:
            grids.append(
                direction_grids(
                    table.times,
                    {n: table.columns[n] for n in kept},
                    present=present,
                    dt=dt,
                    scale=scale,
                )
            )
            ports: dict[str, list[str]] = {}
            for n in kept:
                ports.setdefault(column_device(n), []).append(n)
            per_file.append(
                (
                    path,
                    table.times,
                    {
                        port: direction_grids(
                            table.times,
                            {n: table.columns[n] for n in cols},
                            present=present,
                            dt=dt,
                            scale=scale,
                        )
                        for port, cols in ports.items()
                    }
                    if len(ports) > 1 or len(paths) > 1
                    else {},
                )
            )
        except ValueError as exc:
            raise InputFormatError(path, str(exc)) from None
    if coarse:
        # (The bytes of the files kept, for the coarse ones' share: only then read again.)
        notes += _coarse_notes(coarse, dt, sum(_file_rate(*u) for u in used))
    resets = sum(g.resets for gs in grids for g in gs.values())
    if resets >= MIN_RATE_RESETS and resets > NOT_CUMULATIVE_RESETS * reads:
        # Read on, rates gave a confident T beside a B 25x too high and D 0.04 for 0.6 (the
        # verdict "compute-bound" for a network-bound job), or "idle": refused instead.
        raise InputFormatError(
            ", ".join(str(p) for p in paths),
            f"{resets} counter resets in {reads} reads: the values look like rates "
            "(bytes/s) or per-interval counts, not the cumulative counters a counters CSV "
            "holds (/sys/class/net/<if>/statistics/tx_bytes, port_xmit_data, Prometheus' "
            "*_bytes_total without rate()); record the counters themselves (commpulse record "
            "writes this format), or sum the per-interval counts into running totals",
        )
    if dt >= SLOW_POLL_S:
        notes.append(
            f"the counters were read every {dt:.3g} s: periods under {4 * dt:.3g} s and bursts "
            f"under {dt:.3g} s cannot be seen (if the time column is in milliseconds or "
            "microseconds, name it time_ms or time_us)"
        )
    notes += _overlap_notes([(path, times) for path, times, _ in per_file])
    try:
        combined = at_refresh_interval(sum_grids(grids))
    except ValueError:
        raise InputFormatError(
            "<counters>", "the counter files do not overlap in time; analyze them one by one"
        ) from None
    devices: dict[str, Grids] = {}
    for path, _, ports_of_file in per_file:
        for port, port_grids in ports_of_file.items():
            name = port or path.name
            name = name if name not in devices else f"{path.name}:{name}"
            devices[name] = at_refresh_interval(port_grids)
    return CounterRead(combined, max(dt, _dt(combined)), notes, devices if len(devices) > 1 else {})


def _coarse_notes(coarse: Sequence[tuple[Path, float, float]], dt: float, kept: float) -> list[str]:
    """What the files left out for their coarse polls held, and when to analyse them alone."""
    notes = []
    for path, poll, rate in coarse:
        share = rate / (rate + kept) if rate + kept > 0 else 0.0
        notes.append(
            f"{path}: read every {poll:.3g} s, {poll / dt:.0f}x more coarsely than the other "
            f"counter files ({dt:.3g} s): left out of T, B and D, as its bytes cannot be placed "
            f"inside their polls ({share:.0%} of the bytes)"
            + ("; analyze it alone" if share >= 0.5 else "")
        )
    return notes


def _overlap_notes(spans: Sequence[tuple[Path, npt.NDArray[np.float64]]]) -> list[str]:
    """Files whose reads start late or end early: the sum covers only their common span."""
    if len(spans) < 2:
        return []
    starts = [float(t[0]) for _, t in spans]
    ends = [float(t[-1]) for _, t in spans]
    whole = max(ends) - min(starts)
    common = min(ends) - max(starts)
    if whole <= 0 or common < 0 or whole - common <= UNREAD_SHARE * whole:
        return []
    short = [
        f"{path.name} ({a - min(starts):.6g}-{b - min(starts):.6g} s)"
        for (path, _), a, b in zip(spans, starts, ends, strict=True)
        if a - min(starts) > UNREAD_SHARE * whole or max(ends) - b > UNREAD_SHARE * whole
    ]
    return [
        f"the counter files are summed where all of them were read, {common:.3g} s of "
        f"{whole:.3g} s: {', '.join(short)} cover(s) less than the others"
    ]


def _unread_notes(
    table: CounterTable,
    names: Sequence[str],
    present: Mapping[str, npt.NDArray[np.bool_]],
    poll: float,
) -> list[str]:
    """Columns that were not read over part of the recording, which their direction loses.

    A rail that stops reporting (a driver reload, a port gone) makes every interval of its
    direction unknown from then on: the analysis kept the 29 s before one vanished, of 120 s,
    without a word of why.
    """
    times = table.times
    span = float(times[-1] - times[0]) if times.size > 1 else 0.0
    if span <= 0:
        return []
    hole = 5.0 * poll
    stretches: dict[tuple[str, float, float, float], list[str]] = {}
    for name in names:
        read = times[present[name]]
        if read.size < 2:
            continue
        edges = np.concatenate(([times[0]], read, [times[-1]]))
        gaps = np.diff(edges)
        long = np.flatnonzero(gaps > hole)
        unread = float(gaps[long].sum())
        if unread <= UNREAD_SHARE * span:
            continue
        widest = int(long[np.argmax(gaps[long])])
        a, b = float(edges[widest] - times[0]), float(edges[widest + 1] - times[0])
        stretches.setdefault((column_device(name), unread, a, b), []).append(name)
    out = [
        f"{', '.join(columns)}: not read for {unread:.3g} s of the {span:.3g} s recording "
        f"(longest {a:.6g}-{b:.6g} s: {port} gone, or its driver reloaded?); the bytes of its "
        "direction are unknown there, so T, B and D come from the time it was read"
        for (port, unread, a, b), columns in stretches.items()
    ]
    return out


def _without_glitches(
    table: CounterTable, names: Sequence[str]
) -> tuple[dict[str, npt.NDArray[np.bool_]], int]:
    """Each column's read mask without its :func:`glitch_reads`, and how many there were."""
    present: dict[str, npt.NDArray[np.bool_]] = {}
    count = 0
    for name in names:
        mask = table.present.get(name)
        mask = np.ones(table.times.size, dtype=np.bool_) if mask is None else mask.copy()
        read = np.flatnonzero(mask)
        bad = read[glitch_reads(table.columns[name][read])]
        mask[bad] = False
        count += int(bad.size)
        present[name] = mask
    return present, count


#: A column whose reads span less than this share of the recording, beside columns that
#: span it, is left out when it carries little (:func:`_whole_columns`) ...
PARTIAL_COLUMN = 0.5
#: ... under this share of its direction's bytes per second (a management NIC, not a rail).
MINOR_COLUMN = 0.1


def _column_rate(table: CounterTable, name: str, mask: npt.NDArray[np.bool_]) -> float:
    read = np.flatnonzero(mask)
    if read.size < 2:
        return 0.0
    d, _, _ = counter_deltas(table.columns[name][read])
    span = float(table.times[read[-1]] - table.times[read[0]])
    return float(np.nansum(d)) / span if span > 0 else 0.0


def _whole_columns(
    table: CounterTable, names: list[str], present: dict[str, npt.NDArray[np.bool_]]
) -> tuple[list[str], list[tuple[str, float, float]]]:
    """The columns without minor ones read over only part of the recording; (column, from, to).

    A management NIC that vanished after 30 s, or appeared late, made every interval outside
    its reads unknown for its direction: the analysis kept 5-29 s of a 120 s recording,
    with no word of why. Such a column is left out when another column spans the recording
    and it carries under ``MINOR_COLUMN`` of its direction's bytes per second; a rail that
    carries a share of the job's bytes stays (B is the host's: without it, it would halve).
    """
    span = float(table.times[-1] - table.times[0]) if table.times.size > 1 else 0.0
    if span <= 0:
        return names, []
    covers: dict[str, tuple[float, float]] = {}
    for name in names:
        read = np.flatnonzero(present[name])
        if read.size:
            covers[name] = (float(table.times[read[0]]), float(table.times[read[-1]]))
    share = {n: (b - a) / span for n, (a, b) in covers.items()}
    whole = [n for n in names if share.get(n, 0.0) >= 1.0 - PARTIAL_COLUMN]
    if not whole:
        return names, []
    t0 = float(table.times[0])
    partial = []
    totals: dict[str, float] = {}  # the whole columns' bytes per second, per direction
    for n in names:
        if n in whole or n not in covers or share[n] >= PARTIAL_COLUMN:
            continue
        way = column_direction(n)
        if way not in totals:
            totals[way] = sum(
                _column_rate(table, w, present[w]) for w in whole if column_direction(w) == way
            )
        if _column_rate(table, n, present[n]) < MINOR_COLUMN * totals[way]:
            partial.append((n, covers[n][0] - t0, covers[n][1] - t0))
    left = {p[0] for p in partial}
    return [n for n in names if n not in left], partial


#: The value a saturating 32-bit counter stops at.
SATURATED_32 = 2**32 - 1


def _without_saturated(
    table: CounterTable, present: dict[str, npt.NDArray[np.bool_]]
) -> list[tuple[str, float]]:
    """Take the reads of 32-bit columns stuck at 2^32-1 out of ``present``; (column, since).

    InfiniBand's 32-bit data counters saturate rather than wrap: a column that reads exactly
    2^32-1 twice or more has stopped counting, and its differences (0) would read as a link
    gone quiet, halving B on a two-rail host. Its stuck reads are left out (no bytes known),
    so the intervals from the first of them on are unknown, not zero, until a read off the
    ceiling (the counters cleared) starts the column again.
    """
    stuck: list[tuple[str, float]] = []
    for name, mask in present.items():
        values = table.columns[name]
        if values.size == 0 or int(values.max()) != SATURATED_32:
            continue
        at = np.flatnonzero(mask & (values == SATURATED_32))
        if at.size < 2:
            continue
        mask[at] = False
        stuck.append((name, float(table.times[at[0]] - table.times[0])))
    return stuck


def _gpu(paths: Sequence[Path], notes: list[str]) -> GpuSamples:
    """The files' GPU samples, GPUs numbered across files; what their rows lost goes to notes."""
    times: list[npt.NDArray[np.float64]] = []
    gpus: list[npt.NDArray[np.int64]] = []
    signals: dict[str, dict[int, npt.NDArray[np.float64]]] = {}
    offset = 0
    for i, path in enumerate(paths):
        table = read_gpu_csv(path)
        notes += [f"{path}: {w}" for w in table.warnings]
        times.append(table.times)
        gpus.append(table.gpu + offset)
        offset += int(table.gpu.max()) + 1
        for name, values in table.signals.items():
            signals.setdefault(name, {})[i] = values
    # A signal some files lack is kept, unknown for their GPUs: dropped, a file with util only
    # beside one with sm_active left the split to util, which cannot make one.
    merged: dict[str, npt.NDArray[np.float64]] = {}
    for name, by_file in signals.items():
        merged[name] = np.concatenate(
            [by_file.get(i, np.full(t.size, np.nan)) for i, t in enumerate(times)]
        )
        lacking = [str(paths[i]) for i in range(len(paths)) if i not in by_file]
        if lacking and name in DISTINGUISHING_SIGNALS:
            notes.append(
                f"{name} is not in {', '.join(lacking)}: the GPUs there take no part in what "
                f"{name} tells"
            )
    return GpuSamples(times=np.concatenate(times), gpu=np.concatenate(gpus), signals=merged)


def collective_mix(summary: NcclLogSummary, table: CallTable | None = None) -> CollectiveMix:
    """The estimator's view of an NCCL log summary (``table``: its :func:`call_table`)."""
    if table is None:
        table = call_table(summary)
    keys = table.key_ids.astype(np.int64)
    return CollectiveMix(
        ops={op: (s.count, s.bytes) for op, s in summary.collectives.items()},
        nranks=summary.nranks,
        call_times=summary.call_times_s,
        call_bytes=summary.call_bytes,
        warnings=summary.warn_count,
        version=summary.version,
        processes=_logging_ranks(summary),
        # NCCL's default timestamp format has whole seconds: its call times are that coarse.
        time_resolution_s=table.resolution_s,
        call_keys=keys,
        call_processes=process_codes(k.process for k in table.keys)[keys],
    )


#: A process that logged under this share of the busiest one's calls is no rank of the job.
MIN_PROCESS_CALL_SHARE = 0.05


def _processes(summary: NcclLogSummary) -> int:
    """How many processes logged the calls: the divisor of the bytes each rank issues.

    Ranks that write one stdout in 4 KiB blocks splice each other's lines: a few records then
    carry a host or pid cut from a neighbour ("c1", "counde1"), each a "process" of one call,
    which made 4 ranks 12 and cut S by 3. Processes with under 5 % of the busiest one's calls
    are not counted (communicators that only initialised count as before: no calls at all).
    """
    if not summary.comm_keys:
        return 0
    ids = summary.call_comm_ids
    if ids.size == 0:
        return len({(k[0], k[1]) for k in summary.comm_keys})
    per_comm = np.bincount(ids, minlength=len(summary.comm_keys))
    per_process: dict[tuple[object, object], int] = {}
    for key, calls in zip(summary.comm_keys, per_comm.tolist(), strict=True):
        process = (key[0], key[1])
        per_process[process] = per_process.get(process, 0) + int(calls)
    busiest = max(per_process.values())
    return sum(1 for calls in per_process.values() if calls >= MIN_PROCESS_CALL_SHARE * busiest)


def _logging_ranks(summary: NcclLogSummary) -> int:
    """How many ranks logged the calls: :func:`_processes`, each times the GPUs it drives.

    One process may drive several GPUs, a rank each (``ncclCommInitAll``, JAX, nccl-tests
    ``-g``): divided by its processes, a 2-GPU process's bytes per step read 2x. A process's
    GPUs are the distinct devices of its communicators that made calls (a tensor- and a
    data-parallel comm on one GPU are one rank); 1 when no init line names them.
    """
    processes = _processes(summary)
    if processes == 0 or summary.call_comm_ids.size == 0:
        return processes
    per_comm = np.bincount(summary.call_comm_ids, minlength=len(summary.comm_keys))
    devices: dict[tuple[object, object], set[int]] = {}
    for key, calls in zip(summary.comm_keys, per_comm.tolist(), strict=True):
        info = summary.comms.get(key)
        if calls and info is not None and info.cuda_dev is not None:
            devices.setdefault((key[0], key[1]), set()).add(info.cuda_dev)
    extra = sum(len(d) - 1 for d in devices.values() if len(d) > 1)
    return processes + extra


def inspector_json(summary: InspectorSummary) -> dict[str, Any]:
    """The Inspector summary as JSON: GPU-timed latency and bus bandwidth per op."""
    return {
        "records": summary.records,
        "duplicates": summary.duplicates,
        "bad_lines": summary.bad_lines,
        "gpu_timed": summary.gpu_timed,
        "ops": {
            op: {
                "calls": t.calls,
                "exec_time_p50_s": t.exec_p50_s,
                "exec_time_p90_s": t.exec_p90_s,
                "exec_time_p99_s": t.exec_p99_s,
                "bus_bandwidth_p50_bytes_per_s": t.busbw_p50,
                "message_bytes_p50": t.msg_bytes_p50,
            }
            for op, t in summary.ops.items()
        },
        "communicators": summary.communicators,
    }


def communicators(summary: NcclLogSummary) -> list[dict[str, Any]]:
    """Per communicator of the log: N, calls and bytes by op, and the message-size spread.

    A communicator is named by its commId (the same on every host and rank of it), or by
    ``host:pid:pointer`` in logs older than NCCL 2.16; the largest come first.
    """
    if not summary.comm_keys or summary.call_comm_ids.size == 0:
        return []
    names = []
    for key in summary.comm_keys:
        info = summary.comms.get(key)
        host, pid, pointer = key
        names.append(info.comm_id if info and info.comm_id else f"{host}:{pid}:{pointer}")
    rows: dict[str, dict[str, Any]] = {}
    sizes: dict[str, list[npt.NDArray[np.float64]]] = {}
    ops = np.asarray(summary.op_names, dtype=object)
    for index, key in enumerate(summary.comm_keys):
        calls = summary.call_comm_ids == index
        if not calls.any():
            continue
        name = names[index]
        info = summary.comms.get(key)
        row = rows.setdefault(
            name, {"comm": name, "nranks": None, "ranks_here": 0, "calls": 0, "ops": {}}
        )
        if info is not None and info.nranks is not None:
            row["nranks"] = max(row["nranks"] or 0, info.nranks)
        row["ranks_here"] += 1
        row["calls"] += int(calls.sum())
        nbytes = summary.call_bytes[calls]
        for op in np.unique(ops[summary.call_op_ids[calls]]):
            sel = ops[summary.call_op_ids[calls]] == op
            count, total = row["ops"].get(op, (0, 0))
            row["ops"][str(op)] = (count + int(sel.sum()), total + int(np.nansum(nbytes[sel])))
        sizes.setdefault(name, []).append(nbytes[np.isfinite(nbytes)])
    out = []
    for name, row in rows.items():
        known = np.concatenate(sizes[name]) if sizes[name] else np.empty(0)
        row["message_bytes_p50"] = float(np.percentile(known, 50)) if known.size else None
        row["message_bytes_p99"] = float(np.percentile(known, 99)) if known.size else None
        out.append(row)
    return sorted(out, key=lambda r: (-(r["nranks"] or 0), -r["calls"], r["comm"]))


def _without_idle_ends(network: dict[Direction, GridSeries]) -> dict[Direction, GridSeries]:
    """Every direction cut to the traffic's span (see ``active_span``).

    A recording of a job from its start-up to after its end, a capture with quiet minutes
    around it: only the job's part is estimated.
    """
    grids = list(network.values())
    if not grids or any(g.rate.shape != grids[0].rate.shape or g.t0 != grids[0].t0 for g in grids):
        return network
    i0, i1 = active_span(np.sum([g.rate for g in grids], axis=0))
    if (i0, i1) == (0, grids[0].rate.size):
        return network
    return {d: g.sliced(i0, i1) for d, g in network.items()}


#: Silence at least this long inside a recording may separate two jobs ...
JOB_GAP_S = 3.0
#: ... each of which must have traffic over at least this long to be looked at on its own.
JOB_MIN_S = 8.0
#: Two parts whose periods differ by more than this are two jobs, not one job and its pause.
JOB_PERIODS_DIFFER = 0.1


def _parts(network: dict[Direction, GridSeries]) -> list[tuple[int, int]]:
    """Slot ranges of traffic between silences of ``JOB_GAP_S`` or more, in the busier direction.

    Parts with less than ``JOB_MIN_S`` of traffic are left out.
    """
    chosen = busier_direction(network)
    if chosen is None:
        return []
    grid = chosen[1]
    busy = busy_slots(grid.rate)
    busy = busy[np.isfinite(grid.rate[busy])]  # a hole without polls separates parts too
    if busy.size < 2:
        return []
    gap = max(1, math.ceil(JOB_GAP_S / grid.dt))
    splits = np.flatnonzero(np.diff(busy) > gap)
    starts = [int(busy[0]), *(int(busy[k + 1]) for k in splits)]
    ends = [*(int(busy[k]) + 1 for k in splits), int(busy[-1]) + 1]
    least = JOB_MIN_S / grid.dt
    return [(a, b) for a, b in zip(starts, ends, strict=True) if b - a >= least]


def _span(a: int, b: int, dt: float) -> str:
    """Slots ``[a, b)`` of a grid of ``dt`` as the seconds a warning names ("60-120 s")."""
    return f"{a * dt:.0f}-{b * dt:.0f} s"


def _one_job(
    network: dict[Direction, GridSeries], inputs: EstimateInputs, est: Estimate
) -> tuple[EstimateInputs, Estimate]:
    """The job that moved the most bytes, when the recording holds several one after another.

    Jobs are told apart by their periods (a warning names them). Read as one series, two jobs
    back to back (steps of 0.81 and 1.43 s, 5 s apart) gave a period of neither (1.57 s) and
    bytes per step of neither. A job that pauses (evaluation, checkpoint) keeps its period on
    both sides and stays whole, unless no period spans the silence (then its biggest part
    shows, with a warning).
    """
    parts = _parts(network)
    if len(parts) < 2:
        return inputs, est
    dt = next(iter(network.values())).dt
    found = []
    for a, b in parts:
        sub = replace(inputs, network={d: g.sliced(a, b) for d, g in network.items()})
        part = estimate(sub)
        if part.period_s is None:
            return inputs, est
        found.append((a, b, sub, part))
    periods = [f[3].period_s or 0.0 for f in found]
    one_job = max(periods) <= (1.0 + JOB_PERIODS_DIFFER) * min(periods)
    if one_job and est.period_s is not None:
        return inputs, est
    a, b, sub, part = max(found, key=lambda f: (f[3].mean_bandwidth or 0.0) * (f[1] - f[0]))
    listed = ", ".join(f"{_span(f[0], f[1], dt)}: T {f[3].period_s:.4g} s" for f in found)
    shown = _span(a, b, dt)
    rate = next(iter(network.values())).rate
    hole = any(np.isnan(rate[found[k][1] : found[k + 1][0]]).any() for k in range(len(found) - 1))
    if one_job and hole:
        # The recorder stopped (or lost the device) for a while: a stretch of unknown slots
        # read as the mean rate hides the period of the traffic around it.
        note = (
            f"the recording has no reads for {JOB_GAP_S:g} s or more between parts ({listed}, "
            f"from its first traffic), and no period spans the hole; shown: the part at {shown}"
        )
    elif one_job:
        # One job that fell silent (a checkpoint): read across the silence, its period was lost.
        note = (
            f"the traffic stops for {JOB_GAP_S:g} s or more between parts ({listed}, from its "
            f"first traffic), and no period spans them; shown: the part at {shown}"
        )
    else:
        note = (
            f"the recording holds {len(found)} jobs one after the other ({listed}, from its "
            f"first traffic); shown: the one at {shown}, which moved the most bytes. Cut the "
            "recording to analyze another"
        )
    return sub, replace(part, warnings=(*part.warnings, note))


#: Processes whose calls begin this long after every earlier one's ended make another run.
LOG_RUN_GAP_S = JOB_GAP_S
#: A run of a log has at least this many timed calls (a stray process of a few calls, splice
#: debris, is no run).
LOG_RUN_MIN_CALLS = 20


def _log_runs(mix: CollectiveMix) -> list[npt.NDArray[np.bool_]]:
    """Per run of the log (in time order): which calls it made; one run: [].

    A run is a set of processes whose calls overlap in time; the next run's processes start
    after all of them stopped (``LOG_RUN_GAP_S``). A job restarted into the same file, or
    two jobs' logs given together, are two runs; ranks of one job overlap and are one.
    """
    codes, times = mix.call_processes, mix.call_times
    if codes.size != times.size or codes.size == 0:
        return []
    ok = np.isfinite(times) & (codes >= 0)
    if int(ok.sum()) < 2 * LOG_RUN_MIN_CALLS:
        return []
    c, t = codes[ok], times[ok]
    n = int(c.max()) + 1
    first, last = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(first, c, t)
    np.maximum.at(last, c, t)
    calls = np.bincount(c, minlength=n)
    present = np.flatnonzero(calls > 0)
    groups: list[list[int]] = []
    end = -np.inf
    for p in present[np.argsort(first[present], kind="stable")].tolist():
        if not groups or first[p] > end + LOG_RUN_GAP_S:
            groups.append([p])
            end = last[p]
        else:
            groups[-1].append(p)
            end = max(end, last[p])
    groups = [g for g in groups if int(calls[g].sum()) >= LOG_RUN_MIN_CALLS]
    if len(groups) < 2:
        return []
    runs = []
    for g in groups:
        mine = np.isin(codes, g)
        lo, hi = float(first[g].min()), float(last[g].max())
        runs.append(mine | ((codes < 0) & (times >= lo) & (times <= hi)))
    return runs


def _when(t: float) -> str:
    """A call time as a warning names it: the log's own date and time, or seconds."""
    if t >= UNDATED_LIMIT:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{t:.0f} s"


def _calls_in(mix: CollectiveMix, mine: npt.NDArray[np.bool_]) -> CollectiveMix:
    """The timed calls ``mine`` selects; the per-op totals stay the whole log's."""
    return replace(
        mix,
        call_times=mix.call_times[mine],
        call_bytes=mix.call_bytes[mine],
        call_keys=mix.call_keys[mine] if mix.call_keys.size else mix.call_keys,
        call_processes=mix.call_processes[mine] if mix.call_processes.size else mix.call_processes,
    )


def _one_log_run(inputs: EstimateInputs, est: Estimate) -> tuple[EstimateInputs, Estimate]:
    """The run of an NCCL log that moved the most bytes, when it holds several in turn.

    Read as one series, two runs an hour apart (steps of 0.5 and 0.7 s) gave 0.7 s with no
    word of the other, and a week apart or 10 minutes apart, no period at all. A warning names
    every run. The per-op totals stay the whole log's.
    """
    mix = inputs.collectives
    if mix is None:
        return inputs, est
    runs = _log_runs(mix)
    if not runs:
        return inputs, est
    found = []
    logging = np.unique(mix.call_processes[mix.call_processes >= 0]).size
    for mine in runs:
        codes = mix.call_processes[mine]
        # The ranks of this run: the divisor of its bytes per rank (the whole log's counted
        # every run's processes), in proportion where a process drives several GPUs.
        ranks = round(mix.processes * np.unique(codes[codes >= 0]).size / max(1, logging))
        part = replace(_calls_in(mix, mine), processes=max(1, ranks))
        sub = replace(inputs, collectives=part)
        nbytes = float(np.nansum(part.call_bytes))
        found.append((mine, sub, estimate(sub), nbytes))
    mine, sub, part_est, _ = max(found, key=lambda f: (f[3], int(f[0].sum())))

    def described(f: tuple[Any, EstimateInputs, Estimate, float]) -> str:
        times = f[0] & np.isfinite(mix.call_times)
        t = mix.call_times[times]
        period = f"T {f[2].period_s:.4g} s" if f[2].period_s is not None else "no period"
        return f"{_when(float(t.min()))} to {_when(float(t.max()))}: {period}"

    listed = "; ".join(described(f) for f in found)
    note = (
        f"the NCCL log holds {len(found)} runs one after the other, by other processes "
        f"({listed}); shown: the one from {described((mine, sub, part_est, 0.0))}, which "
        "moved the most bytes. Give one run's lines to analyze another"
    )
    return sub, replace(part_est, warnings=(*part_est.warnings, note))


#: Most pieces a recording is cut into to look for a change of step time.
STEP_PIECES_MAX = 16


def _runs(
    periods: Sequence[float | None], within: float = JOB_PERIODS_DIFFER
) -> list[tuple[int, int]]:
    """Piece ranges ``[i, j)`` whose periods (or other values) agree, each ``within`` of the run's.

    The run's value is the median of its members. Pieces without one may sit inside a run
    (a stall, a jittery stretch) but neither start nor end one.
    """
    runs: list[tuple[int, int]] = []
    start: int | None = None
    members: list[float] = []
    last = -1
    for i, p in enumerate(periods):
        if p is None:
            continue
        if start is not None and abs(p / float(np.median(members)) - 1.0) <= within:
            members.append(p)
            last = i
            continue
        if start is not None:
            runs.append((start, last + 1))
        start, members, last = i, [p], i
    if start is not None:
        runs.append((start, last + 1))
    return runs


def _inside(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of pieces without the piece next to a change, where three pieces or more remain.

    That piece holds some of the other run's traffic whenever the change falls inside it,
    and may still read near its run's value: a job of 3.2 s steps right after one of 1 s
    steps read 3.002 s, its first piece holding 75 s of the other's steps.
    """
    out = []
    for k, (i, j) in enumerate(runs):
        a, b = i, j
        if b - a >= 3 and k > 0:
            a += 1
        if b - a >= 3 and k < len(runs) - 1:
            b -= 1
        out.append((a, b))
    return out


def _step_parts(
    network: dict[Direction, GridSeries], inputs: EstimateInputs, est: Estimate
) -> tuple[EstimateInputs, Estimate]:
    """The newest step time, when the recording's step time changed.

    A job whose steps went from 0.41 to 0.56 s halfway (a real DDP job whose batch doubled)
    has no period over the whole recording, and was called inference; one whose steps went
    from 0.60 to 0.73 s (a real job with pauses) read as a mix of both. Cut into pieces of
    ``JOB_MIN_S`` or more, such a recording shows one period, then the other. Two
    neighbouring runs of at least two pieces each whose periods differ by more than
    ``JOB_PERIODS_DIFFER`` are taken for a change of step time: the newest run is estimated
    and shown, as the live agent shows it at the end of the recording, and a warning names
    every run. Pieces that straddle the change are left out of both: those with no period or
    one between the two, and the one next to the change (:func:`_inside`). Each run is
    estimated again over its whole span: pieces that show a nested job's inner period (an
    FSDP job's layers) read as its step there, and so as no change.
    """
    chosen = busier_direction(network)
    grids = list(network.values())
    if chosen is None or any(
        g.rate.size != grids[0].rate.size or g.t0 != grids[0].t0 for g in grids
    ):
        return inputs, est  # pieces are cut by slot: the directions must share one grid
    grid = chosen[1]
    count = min(STEP_PIECES_MAX, int(grid.rate.size * grid.dt // JOB_MIN_S))
    if count < 4:
        return inputs, est
    cuts = np.linspace(0, grid.rate.size, count + 1).astype(np.int64)

    def part(a: int, b: int) -> EstimateInputs:
        return replace(inputs, network={d: g.sliced(a, b) for d, g in network.items()})

    pieces = [estimate(part(int(a), int(b))) for a, b in itertools.pairwise(cuts)]

    def unchanged() -> tuple[EstimateInputs, Estimate]:  # the step time: then the bursts?
        return _burst_parts(pieces, cuts, part, grid.dt, inputs, est)

    def span(a: int, b: int) -> str:
        return _span(a, b, grid.dt)

    return _newest_step_time(pieces, cuts.tolist(), part, span, est, unchanged)


def _newest_step_time(
    pieces: Sequence[Estimate],
    cuts: Sequence[Any],
    part: Callable[[Any, Any], EstimateInputs],
    span: Callable[[Any, Any], str],
    est: Estimate,
    unchanged: Callable[[], tuple[EstimateInputs, Estimate]],
) -> tuple[EstimateInputs, Estimate]:
    """:func:`_step_parts`' reading of its pieces, for grid slots or log times as ``cuts``."""
    periods = [p.period_s for p in pieces]
    runs = [(i, j) for i, j in _runs(periods) if sum(p is not None for p in periods[i:j]) >= 2]
    if len(runs) < 2:
        return unchanged()
    found = []
    for i, j in _inside(runs):
        sub = part(cuts[i], cuts[j])
        got = estimate(sub)
        if got.period_s is None:
            return unchanged()
        found.append((cuts[i], cuts[j], sub, got))
    steps = [f[3].period_s or 0.0 for f in found]
    if all(
        abs(b / a - 1.0) <= JOB_PERIODS_DIFFER for a, b in itertools.pairwise(steps)
    ):  # neighbouring runs of one period: no change, only pieces without a period between
        return unchanged()
    a, b, sub, newest = found[-1]
    listed = ", ".join(f"{span(f[0], f[1])}: T {f[3].period_s:.4g} s" for f in found)
    spans = "" if est.period_s is not None else " and no period spans it all"
    note = (
        f"the step time changed during the recording ({listed}, from its first traffic)"
        f"{spans}; shown: the newest part, at {span(a, b)}"
    )
    return sub, replace(newest, warnings=(*newest.warnings, note))


def _log_step_parts(inputs: EstimateInputs, est: Estimate) -> tuple[EstimateInputs, Estimate]:
    """The newest step time of an NCCL log whose step time changed, as :func:`_step_parts`.

    Timed over the whole log, steps that went from 1.8 to 2.7 s halfway read T = 2.25 s (a
    step that never ran) at confidence 0.82, or no period, and from 1.8 to 3.6 s read 1.8 s,
    with bytes per step a third short, with no word. The log is cut by time into pieces of
    its calls. Logs timed to whole seconds (calls stamped when read) are left as they are:
    their pieces would hold too few steps to time from the call order.
    """
    mix = inputs.collectives
    if mix is None or mix.time_resolution_s > 0:  # calls timed when read: see _log_period
        return inputs, est
    times = mix.call_times
    timed = times[np.isfinite(times)]
    if timed.size < 2 * LOG_RUN_MIN_CALLS:
        return inputs, est
    first, last = float(timed.min()), float(timed.max())
    count = min(STEP_PIECES_MAX, int((last - first) // JOB_MIN_S))
    if count < 4:
        return inputs, est
    cuts = np.linspace(first, np.nextafter(last, np.inf), count + 1).tolist()

    def part(a: float, b: float) -> EstimateInputs:
        return replace(inputs, collectives=_calls_in(mix, (times >= a) & (times < b)))

    def span(a: float, b: float) -> str:
        return f"{a - first:.0f}-{b - first:.0f} s"

    pieces = [estimate(part(a, b)) for a, b in itertools.pairwise(cuts)]
    return _newest_step_time(pieces, cuts, part, span, est, lambda: (inputs, est))


#: Pieces whose burst bandwidths agree within this share of their run's belong to one run ...
BURSTS_AGREE = 0.15
#: ... and neighbouring runs whose bandwidths differ by more than this factor are a change of
#: the bursts (congestion, another job on the links) under one step time.
BURSTS_CHANGE = 1.3


def _mixed_heights(found: Sequence[tuple[int, int, EstimateInputs, Estimate]]) -> bool:
    """True when each run's bursts come back, whole, among a neighbouring run's.

    Steps whose collective runs slower at random (flows colliding on one path on some steps)
    mix bursts of two heights all along: one stretch with more of the full-rate ones reads a
    taller B (or only those, the lower ones taken for background) than the next, with no
    change of the traffic. Bursts that changed height (congestion that set in) leave none of
    the old height behind.
    """
    thresholds = [f[3].burst_threshold for f in found if f[3].burst_threshold is not None]
    if not thresholds:
        return False
    threshold = min(thresholds)
    heights = []
    for f in found:
        chosen = busier_direction(f[2].network)
        heights.append(
            whole_burst_levels(chosen[1].rate, threshold)[0] if chosen is not None else None
        )

    def holds(h: npt.NDArray[np.float64] | None, band: float | None) -> bool:
        return (
            h is not None
            and band is not None
            and bool(np.any(np.abs(h - band) <= BURSTS_AGREE * band))
        )

    for (x, y), (hx, hy) in zip(
        itertools.pairwise(found), itertools.pairwise(heights), strict=True
    ):
        bx, by = x[3].burst_bandwidth, y[3].burst_bandwidth
        if bx is None or by is None or max(bx, by) < BURSTS_CHANGE * min(bx, by):
            continue
        if not (holds(hx, by) or holds(hy, bx)):
            return False
    return True


def _burst_parts(
    pieces: Sequence[Estimate],
    cuts: npt.NDArray[np.int64],
    part: Callable[[int, int], EstimateInputs],
    dt: float,
    inputs: EstimateInputs,
    est: Estimate,
) -> tuple[EstimateInputs, Estimate]:
    """The newest bursts, when the burst bandwidth changed under one step time.

    Read as one window, steps whose bursts halved in height and doubled in length halfway
    (the same bytes a step: congestion) were timed by the taller bursts only, the lower ones
    falling under the window's burst threshold: B and D of the first half, for the whole
    recording, with no warning. The pieces :func:`_step_parts` cut are grouped into runs of
    like bandwidth (``BURSTS_AGREE``); two neighbouring runs of two pieces or more that differ
    by ``BURSTS_CHANGE`` are a change: the newest run is shown, as the live agent shows it
    at the end of the recording, and a warning names every run. The piece next to a change
    is left out (:func:`_inside`).
    """
    bands = [p.burst_bandwidth if p.period_s is not None else None for p in pieces]
    runs = [
        (i, j) for i, j in _runs(bands, BURSTS_AGREE) if sum(b is not None for b in bands[i:j]) >= 2
    ]
    if len(runs) < 2:
        return inputs, est
    levels = [float(np.median([b for b in bands[i:j] if b is not None])) for i, j in runs]
    if all(max(a, b) < BURSTS_CHANGE * min(a, b) for a, b in itertools.pairwise(levels)):
        return inputs, est
    found = []
    for i, j in _inside(runs):
        sub = part(int(cuts[i]), int(cuts[j]))
        found.append((int(cuts[i]), int(cuts[j]), sub, estimate(sub)))
    if _mixed_heights(found):
        return inputs, est
    a, b, sub, newest = found[-1]
    if newest.period_s is None or newest.burst_bandwidth is None:
        return inputs, est

    def described(f: tuple[int, int, EstimateInputs, Estimate]) -> str:
        e = f[3]
        band = f"B {e.burst_bandwidth / 1e9:.3g} GB/s" if e.burst_bandwidth is not None else "no B"
        duty = f", D {e.duty_cycle:.2f}" if e.duty_cycle is not None else ""
        return f"{_span(f[0], f[1], dt)}: {band}{duty}"

    note = (
        f"the bursts changed during the recording under one step time "
        f"({'; '.join(described(f) for f in found)}, from its first traffic): congestion or "
        f"other traffic on the links; shown: the newest part, at {_span(a, b, dt)}"
    )
    return sub, replace(newest, warnings=(*newest.warnings, note))


def _frame_spacing(captures: Sequence[Capture]) -> float:
    """Median time between consecutive frames that carry the bytes of the busier direction.

    Bursty traffic sends most of its frames inside bursts, so this is the spacing there. The
    frames are those of at least half the byte-weighted median length: pure ACKs between TSO
    super-frames (a TCP transfer's other half) would halve the spacing and the bins with it.
    """
    tx = sum(int(c.length[c.is_tx].sum()) for c in captures)
    rx = sum(int(c.length[~c.is_tx].sum()) for c in captures)
    pick = [c.is_tx == (tx >= rx) for c in captures]
    lengths = np.concatenate([c.length[k] for c, k in zip(captures, pick, strict=True)])
    if lengths.size < 2:
        return 0.0
    order = np.sort(lengths)
    weighted_median = float(order[np.searchsorted(np.cumsum(order), 0.5 * order.sum())])
    big = [k & (c.length >= 0.5 * weighted_median) for c, k in zip(captures, pick, strict=True)]
    times = np.concatenate([c.time_s[k] for c, k in zip(captures, big, strict=True)])
    times = np.sort(times[np.isfinite(times)])
    gaps = np.diff(times)
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if gaps.size else 0.0


def _nice_step(seconds: float) -> float:
    """The smallest 1, 2 or 5 × 10^k at or above ``seconds`` (bins a reader recognises)."""
    exponent = math.floor(math.log10(seconds))
    for mantissa in (1.0, 2.0, 5.0, 10.0):
        step = mantissa * 10.0**exponent
        if step >= seconds * (1 - 1e-9):
            return step
    return 10.0 ** (exponent + 1)  # pragma: no cover - 10 × 10^k always qualifies


def _pcap_grids(captures: Sequence[Capture], t0: float, span: float, bin_s: float) -> Grids:
    n = int(np.floor(span / bin_s)) + 1  # the last frame may sit exactly on the last edge
    tx = np.zeros(n)
    rx = np.zeros(n)
    for c in captures:
        a, b = bin_bytes(c, t0=t0, bin_s=bin_s, n_bins=n)
        tx += a
        rx += b
    valid = np.ones(n, dtype=bool)
    return {
        "tx": GridSeries(t0=t0, dt=bin_s, rate=tx / bin_s, valid=valid),
        "rx": GridSeries(t0=t0, dt=bin_s, rate=rx / bin_s, valid=valid.copy()),
    }


def _pcap(
    paths: Sequence[Path],
) -> tuple[Grids, Grids | None, list[Capture], float, str | None]:
    """The captures binned, finer bins, the captures, their span (s), a note if cut.

    The finer bins are the next bin width down (None below the 1 ms floor); the note says
    when only the newest part of the captures is binned (see ``PCAP_MOST_BINS``). Bins hold 8
    frames at their typical spacing.
    """
    captures = [read_capture(p) for p in paths]
    usable = [
        c
        for c in captures
        if c.stats.packets >= 2
        and c.stats.first_time_s is not None
        and c.stats.last_time_s is not None
    ]
    if not usable:
        raise InputFormatError(paths[0], "the capture holds fewer than two timed packets")
    # Captures need not be in time order: take the extremes, not the first and last records.
    t0 = min(float(c.stats.first_time_s or 0.0) for c in usable)
    t1 = max(float(c.stats.last_time_s or 0.0) for c in usable)
    whole = span = max(t1 - t0, PCAP_MIN_BIN_S)
    natural = max(PCAP_MIN_BIN_S, PCAP_FRAMES_PER_BIN * _frame_spacing(usable))
    bin_s = _nice_step(max(natural, min(span / PCAP_MAX_BINS, PCAP_WIDEST_BIN_S)))
    note = None
    if span / bin_s > PCAP_MOST_BINS:
        span = PCAP_MOST_BINS * bin_s
        t0 = t1 - span
        note = (
            f"the capture spans {whole / 3600:.3g} h: T, B and D come from its newest "
            f"{span / 3600:.2g} h in {bin_s * 1e3:g} ms bins (cut it with editcap to analyze an "
            "earlier part)"
        )
    fine_s = _nice_step(bin_s / 2.5)
    fine = None
    if PCAP_MIN_BIN_S <= fine_s < bin_s and span / fine_s <= PCAP_MAX_BINS:
        fine = _pcap_grids(usable, t0, span, fine_s)
    return _pcap_grids(usable, t0, span, bin_s), fine, captures, whole, note


#: How much higher B must read on the finer capture bins for them to be used.
FINER_BINS_B_RATIO = 1.25


def _finer_bins(
    inputs: EstimateInputs, est: Estimate, fine: Grids
) -> tuple[EstimateInputs, Estimate] | None:
    """The estimate on the finer capture bins, where the default bins mixed bursts with gaps.

    Bins of 8 typical frame spacings suit most captures, but transfers about two bins long (a
    pipeline stage's 21 ms micro-batches in 20 ms bins) leave no whole bin: every bin is a mix
    of a transfer and its gap, which only lowers B (24.3 MB/s on a real 50 MB/s capture) and
    raises D (0.45 against 0.22). A resolved B clearly higher on bins 2-2.5 times finer, with
    the same T, is the truth those bins mixed away. Coarser bins cannot read B too low where
    bursts fill them, so a capture whose bursts are long keeps its bins.
    """
    fine_inputs = replace(inputs, network=_without_idle_ends(fine))
    fine_est = estimate(fine_inputs)
    b, b_fine = est.burst_bandwidth, fine_est.burst_bandwidth
    if b is None or b_fine is None or not fine_est.burst_resolved:
        return None
    if b_fine < FINER_BINS_B_RATIO * b:
        return None
    t, t_fine = est.period_s, fine_est.period_s
    if (t is None) != (t_fine is None) or (t and t_fine and abs(t_fine / t - 1.0) > 0.01):
        return None
    coarse_ms, fine_ms = 1e3 * _dt(inputs.network), 1e3 * _dt(fine)
    note = (
        f"B read {b / 1e6:.3g} MB/s on {coarse_ms:.3g} ms capture bins and {b_fine / 1e6:.3g} MB/s "
        f"on {fine_ms:.3g} ms bins: the transfers last about two coarse bins, which mixed them "
        f"with their gaps; the {fine_ms:.3g} ms bins are used"
    )
    return fine_inputs, replace(fine_est, warnings=(*fine_est.warnings, note))


def _dt(grids: Mapping[Direction, GridSeries]) -> float:
    return next(iter(grids.values())).dt


#: What :func:`analyze_files` takes for each kind of input: one path, or several.
PathsArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _paths(given: PathsArg, what: str, repeated: list[str]) -> list[Path]:
    """``given`` as a list of paths: a single path (str or Path) is one file, not its letters.

    A file given twice (a shell glob and its name, a link and its target) is read once: read
    twice, its calls and bytes counted twice. ``repeated`` gets a note for each one left out.
    """
    if isinstance(given, str | os.PathLike):
        return [Path(given)]
    try:
        paths = [Path(item) for item in given]
    except TypeError:
        raise TypeError(
            f"analyze_files({what}=...) takes a path or a sequence of paths, "
            f"not {type(given).__name__}"
        ) from None
    seen: dict[Path, Path] = {}
    kept = []
    for path in paths:
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a loop of links: the reader will say so
            real = path
        if real in seen:
            repeated.append(f"{path}: the same file as {seen[real]}, given twice: read once")
            continue
        seen[real] = path
        kept.append(path)
    return kept


def analyze_files(
    *,
    counters: PathsArg = (),
    gpu: PathsArg = (),
    nccl_logs: PathsArg = (),
    pcaps: PathsArg = (),
    inspector: PathsArg = (),
    collective_latency_s: float | None = None,
) -> AnalysisResult:
    """Read the given files and estimate. Raises :class:`InputFormatError` on bad input.

    Each input takes one path or a sequence of them (``str`` or ``Path``).
    ``collective_latency_s`` is the per-collective latency of the ``sharding`` latency share
    (default: the Inspector's P50 kernel time when given, else 10 µs).
    """
    repeated: list[str] = []
    counters, gpu = _paths(counters, "counters", repeated), _paths(gpu, "gpu", repeated)
    nccl_logs = _paths(nccl_logs, "nccl_logs", repeated)
    pcaps, inspector = _paths(pcaps, "pcaps", repeated), _paths(inspector, "inspector", repeated)
    sources: dict[str, list[str]] = {}
    extra: dict[str, Any] = {"devices": None}
    capture_notes: list[str] = []
    input_notes: list[str] = []
    network: dict[Direction, GridSeries] = {}
    network_source: str | None = None
    counter_dt: float | None = None
    groups: list[list[DeviceSteps]] = []
    read = CounterRead({}, 0.0, [])
    if counters:
        read = _counters(counters)
        network, counter_dt, input_notes = read.network, read.dt, read.notes
        if read.devices and not pcaps:  # (a capture's finer bins are T, B and D's then)
            steps = device_steps(read.devices)
            extra["devices"] = [_device_json(s) for s in steps]
            groups = step_groups(steps)
            if len(groups) >= 2:
                # Two jobs (or more), each on its own devices: the busiest one's.
                network = sum_grids([read.devices[s.name] for s in groups[0]])
                input_notes.append(jobs_note(groups, len(read.devices)))
        network_source = "counters"
        sources["counters"] = [str(p) for p in counters]
    input_notes += repeated
    pcap_fine: Grids | None = None
    if pcaps:
        pcap_grids, pcap_fine, captures, pcap_span, cut_note = _pcap(pcaps)
        sources["pcap"] = [str(p) for p in pcaps]
        extra["capture"] = _capture_summary(captures, pcap_grids["tx"].dt, pcap_span, pcaps)
        capture_notes = _capture_warnings(captures, pcaps)
        if cut_note is not None:
            capture_notes.append(cut_note)
        # The finer series wins: B needs samples shorter than the bursts.
        if counter_dt is None or pcap_grids["tx"].dt < counter_dt:
            network, network_source = pcap_grids, "pcap"
        else:
            pcap_fine = None
    network = _without_idle_ends(network)
    gpu_samples = _gpu(gpu, input_notes) if gpu else None
    if gpu:
        sources["gpu"] = [str(p) for p in gpu]
    mix: CollectiveMix | None = None
    summary: NcclLogSummary | None = None
    table: CallTable | None = None
    inspected: InspectorSummary | None = None
    extra["alltoall"] = extra["pipeline"] = None
    if nccl_logs:
        summary = read_nccl_logs(nccl_logs)
        table = call_table(summary)
        clump_note = _clumps_note(summary, table)
        if clump_note is not None:
            input_notes.append(clump_note)
        input_notes += _undecoded_notes(summary)
        mix = collective_mix(summary, table)
        sources["nccl_log"] = [str(p) for p in nccl_logs]
        extra["nccl"] = {
            "version": summary.version,
            "library": summary.library,
            "lines": summary.lines_total,
            "nccl_lines": summary.nccl_lines,
            "unparsed_nccl_lines": summary.unparsed_nccl_lines,
            "warn_lines": summary.warn_count,
            "processes": _processes(summary),
            "ranks_logged": mix.processes,
            "timestamps": summary.has_timestamps,
            "networks": list(summary.networks),
            "unknown_ops": dict(summary.unknown_ops),
            "communicators": communicators(summary),
        }
    if inspector:
        sources["nccl_inspector"] = [str(p) for p in inspector]
        inspected = read_inspector_files(inspector)
        extra["inspector"] = inspector_json(inspected)
    if not sources:
        raise InputFormatError(
            "<none>", "no input: give --counters, --gpu, --nccl-log, --pcap or --inspector"
        )
    inputs = EstimateInputs(
        network=network, network_source=network_source, gpu=gpu_samples, collectives=mix
    )
    est = estimate(inputs)
    finer = _finer_bins(inputs, est, pcap_fine) if pcap_fine is not None else None
    if finer is not None:
        inputs, est = finer
        network = dict(inputs.network)
        extra["capture"]["bin_s"] = _dt(inputs.network)
    if network:
        inputs, est = _one_job(network, inputs, est)
        inputs, est = _step_parts(dict(inputs.network), inputs, est)
    else:
        inputs, est = _one_log_run(inputs, est)
        inputs, est = _log_step_parts(inputs, est)
    if groups:
        est = _until_the_last_is_done(inputs, est, groups, read.devices)
    note = other_direction_note(inputs, est) if network else None
    if note is not None and note not in est.warnings:
        est = replace(est, warnings=(*est.warnings, note))
    if capture_notes or input_notes:
        est = replace(est, warnings=(*est.warnings, *input_notes, *capture_notes))
    if not network and mix is None and gpu_samples is None:
        est = replace(est, regime="unknown")  # Inspector records alone say nothing of traffic
    if network and mix is None and not any(np.isfinite(g.rate).any() for g in network.values()):
        est = replace(est, regime="unknown")  # no byte known (saturated counters): no idle host
    if summary is not None and summary.wrong_fractions:
        note = (
            "NCCL 2.26.2 prints wrong fractions of a second in its timestamps (fixed in "
            "2.26.3): the calls were timed to the whole second"
        )
        est = replace(est, warnings=(*est.warnings, note))
    if summary is not None and summary.skipped_files:
        est = replace(
            est,
            warnings=(*est.warnings, *(f"skipped: {why}" for why in summary.skipped_files)),
        )
    if summary is not None and summary.ray_folded_calls:
        note = (
            f"{summary.ray_folded_lines} COLL line(s) end in Ray's '[repeated Nx across "
            f"cluster]': its log deduplication left {summary.ray_folded_calls} calls of other "
            "ranks out of the log, so call counts and bytes are low; set RAY_DEDUP_LOGS=0"
        )
        est = replace(est, warnings=(*est.warnings, note))
    if summary is not None and mix is not None and mix.calls == 0:
        est = replace(est, warnings=(*est.warnings, _no_coll_note(summary)))
        if not network:
            est = replace(est, regime="unknown")  # a log without COLL lines is no idle host
    est = replace(est, confidence=timed_confidence(est))
    extra["arrivals"] = arrivals_json(inputs, est)
    extra["sharding"] = None
    if summary is not None:
        extra["sharding"] = sharding_json(
            summary, est.period_s, inspected, latency_s=collective_latency_s, table=table
        )
        extra["alltoall"], extra["pipeline"] = sparse_ops_json(summary, est.period_s, table=table)
    return AnalysisResult(estimate=est, sources=sources, extra=extra, inputs=inputs)


def _device_json(s: DeviceSteps) -> dict[str, Any]:
    """One device's own estimate, as ``analyze --json`` lists it under ``devices``."""
    e = s.estimate
    return {
        "device": s.name,
        "mean_bandwidth_bytes_per_s": s.bytes_per_s,
        "period_s": e.period_s,
        "confidence": e.confidence,
        "burst_bandwidth_bytes_per_s": e.burst_bandwidth,
        "duty_cycle": e.duty_cycle,
        "direction": e.direction,
    }


def _until_the_last_is_done(
    inputs: EstimateInputs,
    est: Estimate,
    groups: Sequence[Sequence[DeviceSteps]],
    devices: Mapping[str, Grids],
) -> Estimate:
    """D until the job's last device is done (:func:`agent.devices.until_last_done`)."""
    host = inputs.network.get(est.direction) if est.direction is not None else None
    if host is None:
        return est
    return until_last_done(est, host, job_of(groups, est.period_s), devices)


def _no_coll_note(summary: NcclLogSummary) -> str:
    """Why an NCCL log gave no collectives: COLL lines are not logged by default."""
    return (
        f"the NCCL log holds no collective (COLL) lines ({summary.nccl_lines} NCCL lines of "
        "other kinds): NCCL logs its calls only when NCCL_DEBUG_SUBSYS includes COLL, which "
        "its default leaves out; run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL "
        "(`commpulse wrap` does) to get the collective mix and T from the log"
    )


def arrivals_json(inputs: EstimateInputs, est: Estimate) -> dict[str, Any] | None:
    """Burst arrival statistics of the series the estimator used; None without one.

    The live agent's composition (:func:`agent.regime_params.arrivals_of`).
    """
    found = arrivals_of(inputs.network, est)
    if found is None:
        return None
    direction, _, stats = found
    return {**stats.to_json(), "direction": direction}


def call_table(summary: NcclLogSummary) -> CallTable:
    """The log's COLL records as the live agent's keyed call table, in log order.

    One key per (communicator of a process, op, peer): the caller's rank, the communicator's
    nranks and commId come from its ``Init`` line (else its first COLL line). The times'
    resolution is their stamps' (whole seconds), or, for lines a collector timed in blocks,
    how far apart the blocks are (:func:`agent.call_sequence.clumped_resolution`).
    """
    triples = np.stack(
        (
            summary.call_comm_ids.astype(np.int64),
            summary.call_op_ids.astype(np.int64),
            summary.call_peers.astype(np.int64),
        ),
        axis=1,
    )
    if triples.shape[0] == 0:
        return CallTable(np.empty(0), np.empty(0), np.empty(0, dtype=np.int32), ())
    # Dense codes in the triples' lexicographic order (np.unique's over rows, 10x faster).
    inverse = call_kinds(triples[:, 0], triples[:, 1], triples[:, 2])
    distinct = triples[np.unique(inverse, return_index=True)[1]]
    keys = []
    for comm_index, op_id, peer in distinct.tolist():
        host, pid, comm = summary.comm_keys[comm_index]
        info = summary.comms.get(summary.comm_keys[comm_index])
        keys.append(
            CallKey(
                summary.op_names[op_id],
                f"{host}:{pid}",
                comm,
                info.nranks if info is not None else None,
                peer,
                info.rank if info is not None else None,
                info.comm_id if info is not None and info.comm_id else None,
            )
        )
    ids = inverse.reshape(-1)
    resolution = stamp_resolution(summary.call_times_s)
    if resolution == 0:
        processes = process_codes(k.process for k in keys)[ids]
        resolution = clumped_resolution(summary.call_times_s, processes, ids, summary.call_bytes)
    return CallTable(
        times=summary.call_times_s,
        nbytes=summary.call_bytes,
        key_ids=ids.astype(np.int32),
        keys=tuple(keys),
        resolution_s=resolution,
    )


#: The finest-polled stretch of a recording polled at two rates is analysed alone when it
#: spans this long at least, and this share of the recording.
FINE_STRETCH_MIN_S = 20.0
FINE_STRETCH_MIN_SHARE = 0.3


def _finest_polled(table: CounterTable) -> tuple[CounterTable, str | None]:
    """The table cut to its finest-polled stretch where its poll rate changed, with a note.

    See :func:`~agent.rates.poll_change`. A stretch too short keeps the whole table, with a
    note that B and D mix the two rates.
    """
    change = poll_change(table.times)
    if change is None or nominal_interval(table.times) >= 0.5 * change.coarse_s:
        return table, None  # gridded at the slower poll: the finer reads are only averaged
    t = table.times
    a, b = float(t[change.first]), float(t[change.last])
    rates = (
        f"the polls came every {change.fine_s:.3g} s in part of the recording and every "
        f"{change.coarse_s:.3g} s in {change.coarse_share:.0%} of it"
    )
    span = float(t[-1] - t[0])
    if b - a < max(FINE_STRETCH_MIN_S, FINE_STRETCH_MIN_SHARE * span):
        return table, (
            f"{rates}: read as one series, the slower polls' bursts are spread over the finer "
            "grid, so B and D mix the two (record at one poll rate)"
        )
    rows = slice(change.first, change.last + 1)
    cut = CounterTable(
        times=t[rows],
        columns={n: c[rows] for n, c in table.columns.items()},
        present={n: p[rows] for n, p in table.present.items()},
        warnings=table.warnings,
    )
    return cut, (
        f"{rates}: only {a:.6g}-{b:.6g} s, polled every {change.fine_s:.3g} s, is analysed "
        "(read as one series, the slower polls' bursts were spread over the finer grid, and "
        "D read 0.46 against 0.35)"
    )


def _undecoded_notes(summary: NcclLogSummary) -> list[str]:
    """What the NCCL counts leave out: lines not decoded, calls of an unknown datatype.

    Both were counted in ``nccl`` only, so a log of a fork's format (its 100 COLL lines
    undecoded, one decoded) showed one call and no word of the others.
    """
    notes = []
    long = summary.overlong_lines
    undecoded = summary.unparsed_nccl_lines - long
    if undecoded > 0:
        notes.append(
            f"{undecoded} NCCL line(s) could not be decoded and are left out of the counts: a "
            "format this version does not know (a fork of NCCL, a newer release)? A sample "
            "line in a bug report lets it learn the format"
        )
    if long:
        notes.append(
            f"{long} line(s) too long to read (progress bars written without newlines?) are "
            "left out: an NCCL record in one is not counted"
        )
    unknown = summary.unknown_datatype_calls
    if unknown:
        notes.append(
            f"{unknown} COLL call(s) of a datatype this version does not know: counted in "
            "`count`, but their bytes are left out of `bytes` and of the traffic model"
        )
    return notes


def _clumps_note(summary: NcclLogSummary, table: CallTable) -> str | None:
    """What :func:`call_table` did with lines timed in blocks (None: nothing)."""
    if table.resolution_s == 0 or stamp_resolution(summary.call_times_s) > 0:
        return None
    return (
        f"the NCCL lines were timed in blocks about {table.resolution_s:.3g} s apart, many "
        "lines at one time (NCCL 2.13-2.26 buffer a log written to a pipe, and kubectl/docker "
        "time lines as they arrive): the calls were timed by their order; set "
        "NCCL_DEBUG_FILE, or NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO with a fraction in "
        "NCCL_DEBUG_TIMESTAMP_FORMAT"
    )


def _inspector_latency(inspected: InspectorSummary | None) -> float | None:
    """Call-weighted P50 kernel time of the Inspector's AllReduce/AllGather/ReduceScatter."""
    if inspected is None:
        return None
    pairs = [
        (t.calls, t.exec_p50_s)
        for op, t in inspected.ops.items()
        if op in ("AllReduce", "AllGather", "ReduceScatter") and t.calls > 0
    ]
    calls = sum(c for c, _ in pairs)
    return sum(c * v for c, v in pairs) / calls if calls else None


def sharding_json(
    summary: NcclLogSummary,
    period_s: float | None,
    inspected: InspectorSummary | None = None,
    *,
    latency_s: float | None = None,
    table: CallTable | None = None,
) -> dict[str, Any] | None:
    """The ``sharding`` object (ZeRO stage, per-step collectives) of the largest communicator.

    The largest communicator is the one with the most ranks (then the most calls): the data-
    parallel one, whose ReduceScatter/AllGather are the ZeRO ones; a smaller tensor-parallel
    communicator's AllGathers would blur the stage ratio. None without AllReduce, AllGather or
    ReduceScatter calls.
    """
    source = "given"
    if latency_s is None:
        latency_s = _inspector_latency(inspected)
        source = "inspector_p50_exec_time"
    stats = sharding_of(
        table if table is not None else call_table(summary),
        period_s,
        latency_s=latency_s,
        latency_source=source,
        nranks=summary.nranks,
    )
    return stats.to_json() if stats is not None else None


def sparse_ops_json(
    summary: NcclLogSummary,
    period_s: float | None = None,
    *,
    table: CallTable | None = None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The ``alltoall`` and ``pipeline`` objects: AlltoAll size and rate, P2P stage structure.

    AlltoAll counts both the named calls of NCCL 2.28+ and the grouped Send/Recv of older
    versions; each is None when the log has no such traffic. With T, the pipeline's bubble.
    """
    a2a, pipe = sparse_ops_of(
        table if table is not None else call_table(summary),
        nranks=summary.nranks,
        period_s=period_s,
        max_p2p_calls=None,
    )
    return (a2a.to_json() if a2a else None), (pipe.to_json() if pipe else None)


def _capture_warnings(captures: Sequence[Capture], paths: Sequence[Path]) -> list[str]:
    """What the reader noticed in each file (a cut record, frames it could not decode)."""
    return [f"{p}: {w}" for c, p in zip(captures, paths, strict=True) for w in c.stats.warnings]


def _capture_summary(
    captures: list[Capture], bin_s: float, span: float, paths: Sequence[Path]
) -> dict[str, Any]:
    packets = sum(c.stats.packets for c in captures)
    acks = merge_ack_samples(c.ack_samples for c in captures if c.ack_samples is not None)

    def _ack_json(p: AckLatency | None) -> dict[str, float | None]:
        return {k: None if p is None else getattr(p, k) for k in ("p50", "p90", "p99")}

    return {
        "packets": packets,
        "bytes": sum(c.stats.bytes for c in captures),
        "packet_rate_per_s": packets / span if span > 0 else None,
        "flows": sum(c.stats.flows for c in captures),
        "roce_packets": sum(c.stats.roce_packets for c in captures),
        "roce_qps": sum(c.stats.roce_qps for c in captures),
        "cnp_packets": sum(c.stats.cnp_packets for c in captures),
        "cnp_rate_per_s": (sum(c.stats.cnp_packets for c in captures) / span if span > 0 else None),
        "roce_acks": sum(c.stats.roce_acks for c in captures),
        "roce_naks": sum(c.stats.roce_naks for c in captures),
        "roce_seq_naks": sum(c.stats.roce_seq_naks for c in captures),
        # RC ACK round trip: the kept samples of every capture merged (a uniform subset).
        "ack_latency_s": _ack_json(acks.percentiles()),
        "ack_latency_samples": acks.matched,
        "ack_latency_local_requester_s": _ack_json(acks.percentiles(1)),
        "ack_latency_remote_requester_s": _ack_json(acks.percentiles(0)),
        "truncated_files": [
            str(p) for c, p in zip(captures, paths, strict=True) if c.stats.truncated
        ],
        "skipped_records": sum(c.stats.skipped_records for c in captures),
        "bin_s": bin_s,
    }
