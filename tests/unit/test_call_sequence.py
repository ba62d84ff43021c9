"""T from the order of an NCCL log's calls when their times are whole seconds or poll instants.

NCCL's default timestamp format (2.26+) has whole seconds, and the live tailer stamps lines
without one when it reads them. Binned, such times show the beat of short steps against the
second: 0.45 s steps read T = 4.54 s (confidence 0.31), 1.3 s steps 4.35 s (0.5, no warning).
A step's calls repeat every step, so some kind of call comes once a step, with the same calls
between two of its occurrences: its coarse times over many steps give T.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.call_sequence import clumped_resolution, sequence_step, step_markers
from agent.estimate import EstimateInputs, estimate
from agent.windows import CollectiveWindow
from collectors._base import CallBatch, CallKey
from collectors.nccl_log import LiveDecoder
from collectors.nccl_tail import decode_texts

START = dt.datetime(2026, 12, 1, 1, 0, 0)

#: One DDP step's calls: five gradient buckets (the last one smaller) and the loss's AllReduce.
DDP_STEP = [(0.00, 6_553_600), (0.01, 6_553_600), (0.02, 6_553_600), (0.03, 6_553_600),
            (0.04, 1_200_000), (0.05, 1)]  # fmt: skip


def _best(kinds: list[int] | np.ndarray, keys: list[int] | np.ndarray | None = None):
    """The marker taken: (kind, calls per step, alike share), or None."""
    k = np.asarray(kinds, dtype=np.int64)
    found = step_markers(k, np.asarray(keys, dtype=np.int64) if keys is not None else k)
    return found[0] if found else None


def _marker(pattern: list[int], repeats: int):
    return _best(np.tile(np.asarray(pattern, dtype=np.int64), repeats))


@pytest.mark.parametrize(
    ("pattern", "calls"),
    [
        ([0, 0, 0, 0, 1, 2], 6),  # DDP: equal buckets, a smaller last one, the loss
        ([0, 1, 1, 1, 1, 2, 3, 3, 3, 3, 4], 11),  # FSDP: embeddings, 4 like blocks, head
        ([0, 1, 0, 1], 2),  # a step whose halves issue the same calls reads half of it
        ([5, 3], 2),
    ],
)
def test_a_call_that_comes_once_a_step_marks_the_steps(pattern: list[int], calls: int) -> None:
    found = _marker(pattern, 40)
    assert found is not None
    assert found[1:] == (calls, 1.0)


def test_calls_all_alike_or_at_random_mark_no_steps() -> None:
    assert _marker([0], 200) is None  # where a step ends cannot be told
    rng = np.random.default_rng(3)
    kinds = rng.integers(0, 12, 600)
    assert _best(kinds) is None  # inference batches


def test_a_layer_that_comes_often_is_no_step() -> None:
    """ZeRO-3: a block's AllGather comes L times in the forward pass and L times, between the
    ReduceScatters, in the backward one; the step is marked by the embeddings' calls."""
    forward = [0] + [1] * 6
    backward = [1, 2] * 6 + [3]
    found = _marker(forward + backward, 30)
    assert found is not None
    assert found[1] == len(forward + backward)


def _with_metrics(every: int, steps: int = 200) -> list[int]:
    """Steps of 5 calls, a metrics AllReduce after every ``every``-th, after 5 init calls."""
    kinds = [7, 8, 9, 7, 8]
    for k in range(steps):
        kinds += [0, 0, 0, 1, 2] + ([6] if k % every == every - 1 else [])
    return kinds


def test_a_metrics_call_now_and_then_a_warm_up_and_a_lost_line_keep_the_step() -> None:
    kinds = _with_metrics(every=40)
    del kinds[123]
    found = _best(kinds)
    assert found is not None
    assert found[1] == 5
    assert 0.95 <= found[2] < 1.0


def test_a_step_of_micro_batches_reads_whole_and_a_frequent_metrics_call_a_multiple() -> None:
    """The call order cannot tell them apart: eight micro-batches' Send/Recv and a gradient
    AllReduce (read whole, 17 calls), and a metrics call after every fifth step (read as 5
    steps, a documented limit)."""
    micro = [[0, 1] * 8 + [2]][0]
    found = _best(micro * 40)
    assert found is not None
    assert found[1] == 17
    found = _best(_with_metrics(every=5))
    assert found is not None
    assert found[1] == 26


def test_sizes_that_change_every_step_keep_the_step_of_their_calls() -> None:
    """MoE: the all-to-all's Send/Recv sizes follow the routing, the calls do not."""
    rng = np.random.default_rng(1)
    kinds, keys = [], []
    for _ in range(50):
        sizes = rng.integers(100, 10**6, 4).tolist()
        kinds += [1, 2, 3, 4, *sizes, 5]
        keys += [1, 2, 3, 4, 10, 11, 12, 13, 5]
    found = _best(kinds, keys)
    assert found is not None
    assert found[1] == 9


def _calls(step_s: float, seconds: float, *, ranks: int = 2, jitter: float = 0.03, seed: int = 0):
    """(times, keys, sizes, processes) of DDP_STEP calls of ``ranks`` processes, in log order
    (one AllReduce key per process)."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum(step_s * (1.0 + jitter * rng.uniform(-1.0, 1.0, int(seconds / step_s))))
    times, sizes, procs = [], [], []
    for t in starts:
        for r in range(ranks):
            for at, size in DDP_STEP:
                times.append(t + at * min(1.0, step_s) + 1e-4 * r)
                sizes.append(size)
                procs.append(r)
    order = np.argsort(times, kind="stable")
    t, s, p = (np.asarray(v)[order] for v in (times, sizes, procs))
    procs = p.astype(np.int64)
    return t, procs, s.astype(np.float64), procs


@pytest.mark.parametrize("step_s", [0.061, 0.45, 1.3, 2.7, 7.3])
def test_whole_second_times_give_the_step_from_the_call_order(step_s: float) -> None:
    times, keys, sizes, procs = _calls(step_s, 600.0)
    seq = sequence_step(np.floor(times), keys, sizes, procs, 1.0)
    assert seq is not None
    assert seq.calls_per_step == len(DDP_STEP)
    assert seq.processes == 2
    assert seq.period_s == pytest.approx(step_s, rel=0.01)
    # Whole seconds cost under 0.1 % against the same calls' exact times (each mark's time is
    # up to 1 s late, at random against the steps: the slope over hundreds of them keeps it).
    exact = sequence_step(times, keys, sizes, procs, 0.0)
    assert exact is not None
    assert seq.period_s == pytest.approx(exact.period_s, rel=1e-3)


def test_after_a_change_of_step_time_coarse_times_give_the_new_step() -> None:
    """0.45 s steps for 200 s, then 0.6 s for 100 s, in whole seconds: the window's slope is
    between the two; the newest part's own slope is the new step."""
    t1, keys, sizes, procs = _calls(0.45, 200.0)
    t2, keys2, sizes2, procs2 = _calls(0.6, 100.0, seed=1)
    times = np.concatenate((t1, t2 + t1[-1] + 0.45))
    args = (np.concatenate((keys, keys2)), np.concatenate((sizes, sizes2)))
    processes = np.concatenate((procs, procs2))
    seq = sequence_step(np.floor(times), *args, processes, 1.0)
    assert seq is not None
    assert seq.period_s == pytest.approx(0.6, rel=0.01)
    whole = sequence_step(times, *args, processes, 0.0)  # fine times: the window's slope
    assert whole is not None
    assert 0.45 < whole.period_s < 0.58


def test_a_checkpoint_pause_is_left_out_of_the_step() -> None:
    times, keys, sizes, procs = _calls(0.45, 300.0)
    times = np.where(times > 150.0, times + 40.0, times)
    seq = sequence_step(np.floor(times), keys, sizes, procs, 1.0)
    assert seq is not None
    assert seq.period_s == pytest.approx(0.45, rel=0.01)


def _coll(rank: int, op_name: str, op: int, count: int, *, root: int = 0) -> str:
    """A COLL record of process ``40 + rank`` on its comm ``0x3<rank>`` (float32 counts)."""
    return (
        f"node1:{40 + rank}:{40 + rank} [{rank}] NCCL INFO {op_name}: opCount {op:x} sendbuff "
        f"0x1 recvbuff 0x2 count {count} datatype 7 op 0 root {root} comm 0x3{rank} "
        "[nranks=8] stream 0x4"
    )


def _log(path: Path, step_s: float, seconds: float, sizes: list[int]) -> Path:
    """Two ranks' log in NCCL's default timestamp format, "[%F %T] " (whole seconds)."""
    start = START
    rng = np.random.default_rng(1)
    lines, t, op = [], 0.37, 0
    while t < seconds:
        for j, count in enumerate(sizes):
            for r in range(2):
                stamp = (start + dt.timedelta(seconds=t + 0.004 * j)).strftime("[%F %T] ")
                lines.append(stamp + _coll(r, "AllReduce", op, count))
            op += 1
        t += step_s * (1.0 + 0.02 * rng.uniform(-1.0, 1.0))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("step_s", [0.45, 1.3])
def test_analyze_times_short_steps_of_a_whole_second_log_by_their_calls(
    tmp_path: Path, step_s: float
) -> None:
    log = _log(tmp_path / "nccl.log", step_s, 300.0, [1_638_400, 1_638_400, 300_000, 1])
    result = analyze_files(nccl_logs=[log])
    est = result.estimate
    assert est.period_s == pytest.approx(step_s, rel=0.01)
    assert est.confidence >= 0.5
    assert any("T comes from their order" in w and "its 4 calls" in w for w in est.warnings)
    # Calls per step over the whole window (cut into steps by whole seconds they read 0 at
    # 0.45 s), and no layer gap from times that coarse (it read 0 µs).
    sharding = result.extra["sharding"]
    assert sharding["collectives_per_step"] == pytest.approx(4.0, rel=0.01)
    assert sharding["layer_gap_s"] is None
    assert any("timed to 1 s only" in note for note in sharding["notes"])


def test_like_calls_in_most_seconds_give_no_beat_for_a_period(tmp_path: Path) -> None:
    """Two like calls a 1.3 s step fill 77 % of the seconds: their trains merge, 4.35 s apart,
    which was reported as T at confidence 0.5. Now no T, and the warning says why."""
    log = _log(tmp_path / "nccl.log", 1.3, 300.0, [1_638_400, 1_638_400])
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s is None
    assert any("timed to 1 s only" in w for w in est.warnings)


def test_the_live_window_times_steps_shorter_than_its_polls_by_their_calls() -> None:
    """Calls stamped when the tailer read them, every 0.2 s: 0.13 s steps (a beat of 0.2 s
    and 0.4 s against the polls) are timed by the call order of the window's two processes."""
    poll = 0.2
    times, _, sizes, procs = _calls(0.13, 60.0)
    read = np.ceil(times / poll) * poll
    keys = tuple(
        CallKey("AllReduce", f"node1:{40 + r}", f"0x3{r}", 8, -1, r, None) for r in range(2)
    )
    window = CollectiveWindow(200_000)
    for t in np.unique(read):
        now = read == t
        window.add_batch(
            CallBatch(
                times=read[now],
                s_bytes=sizes[now],
                ops={"AllReduce": (int(now.sum()), 0)},
                nranks=8,
                processes=frozenset(k.process for k in keys),
                key_ids=procs[now].astype(np.int32),
                keys=keys,
                time_resolution_s=poll,
            )
        )
    mix = window.mix()
    assert mix is not None
    assert mix.time_resolution_s == poll
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s == pytest.approx(0.13, rel=0.01)
    assert est.period_source == "nccl_log"


def _moe_log(path: Path, step_s: float, seconds: float) -> Path:
    """Two ranks of an MoE job with NCCL's µs timestamps: each step an all-to-all as Send and
    Recv to three peers, sized by the routing, then the gradients' AllReduce."""
    rng = np.random.default_rng(4)
    lines: list[tuple[float, str]] = []
    t, op = 0.37, 0
    while t < seconds:
        calls = [(0.9, "AllReduce", 4_000_000, 0)]
        for peer in (1, 2, 3):
            calls += [(0.3 + 0.02 * peer, "Send", int(rng.integers(10_000, 2_000_000)), peer)]
            calls += [(0.31 + 0.02 * peer, "Recv", int(rng.integers(10_000, 2_000_000)), peer)]
        for at, name, count, peer in sorted(calls):
            for r in range(2):
                when = t + at * step_s + 1e-4 * r
                stamp = (START + dt.timedelta(seconds=when)).strftime("[%F %T.%f] ")
                lines.append(
                    (
                        when,
                        stamp + _coll(r, name, op, count, root=peer),
                    )
                )
            op += 1
        t += step_s * (1.0 + 0.03 * rng.uniform(-1.0, 1.0))
    lines.sort(key=lambda x: x[0])
    path.write_text("\n".join(line for _, line in lines) + "\n")
    return path


def test_a_long_fine_log_of_fast_steps_reads_the_step_its_calls_mark(tmp_path: Path) -> None:
    """300 s of 0.061 s MoE steps with µs stamps, binned at 9 ms (6.6 bins a step), read
    3 T = 0.184 s at confidence 0.7; the AllReduce that comes once a step, at steady
    intervals, overrules a period no call comes once in."""
    est = analyze_files(nccl_logs=[_moe_log(tmp_path / "moe.log", 0.061, 300.0)]).estimate
    assert est.period_s == pytest.approx(0.061, rel=0.01)
    assert any("a call comes once every" in w for w in est.warnings)


def test_the_live_window_checks_fine_times_by_their_calls_order_too(tmp_path: Path) -> None:
    """The same MoE log as the tailer hands it over (decoded live, a chunk of lines every
    0.5 s of log time): the live window passes who made each call whatever the times'
    resolution, so its 3 T read is overruled as analyze's is (it was not: only coarse
    windows carried the call order)."""
    lines = _moe_log(tmp_path / "moe.log", 0.061, 300.0).read_text().splitlines(keepends=True)
    decoder, window = LiveDecoder(), CollectiveWindow(200_000)
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= 90:  # about 0.5 s of this job's calls
            batch = decode_texts(decoder, ["".join(chunk)], 0.0, lambda s, a: s)
            assert batch is not None
            window.add_batch(batch)
            chunk = []
    mix = window.mix()
    assert mix is not None
    assert mix.time_resolution_s == 0.0
    assert mix.call_keys.size == mix.call_times.size
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s == pytest.approx(0.061, rel=0.01)
    assert any("a call comes once every" in w for w in est.warnings)


def test_a_metrics_call_every_fifth_step_does_not_overrule_the_binned_step(
    tmp_path: Path,
) -> None:
    """Its call marks five steps, the cleanest marker; but the bucket that comes once a step
    marks the binned period, so the fine times keep it."""
    lines, t, op = [], 0.37, 0
    rng = np.random.default_rng(2)
    for k in range(260):
        sizes = [6_553_600, 6_553_600, 1_200_000] + ([1] if k % 5 == 4 else [])
        for j, count in enumerate(sizes):
            stamp = (START + dt.timedelta(seconds=t + 0.01 * j)).strftime("[%F %T.%f] ")
            lines.append(
                f"{stamp}node1:40:40 [0] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x1 "
                f"recvbuff 0x2 count {count} datatype 7 op 0 root 0 comm 0x3 [nranks=8] "
                "stream 0x4"
            )
            op += 1
        t += 0.45 * (1.0 + 0.03 * rng.uniform(-1.0, 1.0))
    log = tmp_path / "metrics.log"
    log.write_text("\n".join(lines) + "\n")
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(0.45, rel=0.01)
    assert not any("a call comes once every" in w for w in est.warnings)


def _kubectl_log(path: Path, *, buffered: bool, grouped: bool = False) -> Path:
    """Two ranks' COLL lines behind ``kubectl logs --timestamps`` stamps, 0.5 s steps.

    ``buffered``: NCCL 2.13-2.26 write stdout to a pipe in 4 KiB blocks, so each block of ~20
    lines gets one arrival time. ``grouped``: each step is an all-to-all issued as one group
    of Send/Recv within microseconds (a clump that the job itself makes), then an AllReduce.
    """
    rng = np.random.default_rng(5)
    lines: list[str] = []
    for r in range(2):
        t, op, block = 0.3, 0, []
        times: list[float] = []
        texts: list[str] = []
        for _ in range(200):
            if grouped:
                calls = [("Send", 1_000_000, p) for p in range(1, 8)]
                calls += [("Recv", 1_000_000, p) for p in range(1, 8)]
                calls += [("AllReduce", 4_000_000, 0)]
                at = [1e-6 * i for i in range(14)] + [0.4]
            else:
                calls = [("AllReduce", 6_553_600, 0), ("AllReduce", 6_553_600, 0),
                         ("AllReduce", 1_200_000, 0)]  # fmt: skip
                at = [0.30, 0.35, 0.45]
            for (name, count, peer), dt_s in zip(calls, at, strict=True):
                times.append(t + dt_s)
                texts.append(_coll(r, name, op, count, root=peer))
                op += 1
            t += 0.5 * (1.0 + 0.02 * rng.uniform(-1.0, 1.0))
        for i, text in enumerate(texts):
            block.append(text)
            if not buffered or len(block) == 22 or i == len(texts) - 1:
                when = times[i] + (0.002 if buffered else 0.0005)
                for j, b in enumerate(block):
                    stamp = (START + dt.timedelta(seconds=when + 1e-6 * j)).strftime(
                        "%Y-%m-%dT%H:%M:%S.%fZ "
                    )
                    lines.append(stamp + b)
                block = []
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lines_timed_in_4_kib_blocks_are_timed_by_their_order(tmp_path: Path) -> None:
    """The blocks' times, 3.5 s apart, read as an 11 s period at confidence 0.94."""
    log = _kubectl_log(tmp_path / "pod.log", buffered=True)
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.02)
    assert any("timed in blocks" in w for w in est.warnings)


@pytest.mark.parametrize("grouped", [False, True])
def test_lines_timed_one_by_one_are_not_taken_for_blocks(tmp_path: Path, grouped: bool) -> None:
    """Neither line-buffered lines nor a job's own groups of calls issued within microseconds
    (a grouped all-to-all: its clumps start with the same Send every step)."""
    log = _kubectl_log(tmp_path / "pod.log", buffered=False, grouped=grouped)
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.02)
    assert not any("timed in blocks" in w for w in est.warnings)


def _live_window(
    step_s: float, *, block_bytes: int | None, poll_s: float = 0.2
) -> CollectiveWindow:
    """Two ranks' COLL lines without timestamps as the live tailer hands them over: each
    line read at the first poll after it reached the file, and stamped then. ``block_bytes``:
    the job's stdout goes through a pipe (``| tee``, a container's log), so lines reach the
    file in blocks of that size; None: one by one."""
    rng = np.random.default_rng(5)
    written: list[tuple[float, str]] = []
    for r in range(2):
        t, op, block = 0.3, 0, ""
        for _ in range(240):
            for frac, count in ((0.6, 6_553_600), (0.7, 6_553_600), (0.9, 1_200_000)):
                text = _coll(r, "AllReduce", op, count) + "\n"
                op += 1
                if block_bytes is None:
                    written.append((t + frac * step_s, text))
                    continue
                if len(block) + len(text) > block_bytes:
                    written.append((t + frac * step_s, block))
                    block = ""
                block += text
            t += step_s * (1.0 + 0.02 * rng.uniform(-1.0, 1.0))
    written.sort()
    decoder, window = LiveDecoder(), CollectiveWindow(200_000)
    for when, text in written:
        arrival = np.ceil(when / poll_s) * poll_s
        batch = decode_texts(
            decoder, [text], arrival, lambda s, a: np.where(np.isnan(s), a, s), poll_s
        )
        assert batch is not None
        window.add_batch(batch)
    return window


@pytest.mark.parametrize("step_s", [0.13, 0.5, 1.7])
def test_the_live_window_times_lines_that_came_in_blocks_by_their_order(step_s: float) -> None:
    """The live path as analyze: blocks 4 KiB apart (stamped when read) read as T = 8.7
    steps at confidence 0.5 (0.5 s steps: 4.3 s), shown once the tracker took it."""
    window = _live_window(step_s, block_bytes=4096)
    mix = window.mix()
    assert mix is not None
    assert mix.time_resolution_s > 5 * step_s  # as coarse as the blocks are apart
    assert window.resolution_s() == mix.time_resolution_s  # what the pipeline's window uses
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s == pytest.approx(step_s, rel=0.01)


def test_the_live_window_keeps_lines_read_one_by_one_at_the_polls_resolution() -> None:
    """Lines written one by one: each poll's few lines hold one step at most, no block."""
    window = _live_window(0.5, block_bytes=None)
    mix = window.mix()
    assert mix is not None
    assert mix.time_resolution_s == pytest.approx(0.2)
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s == pytest.approx(0.5, rel=0.01)


def test_a_jobs_own_train_of_calls_is_no_block_of_lines() -> None:
    """Each step 10 AllGathers and a ReduceScatter within a millisecond: clumps of one step,
    which the job makes. The same calls cut into blocks of 40 lines, each timed at its last
    line, hold 3-4 steps a block: blocks, as coarse as they are apart."""
    step = np.arange(11) * 5e-5
    times = np.concatenate([0.5 * k + step for k in range(100)])
    kinds = np.tile(np.array([0] * 10 + [1], dtype=np.int64), 100)
    one = np.zeros(times.size, dtype=np.int64)
    assert clumped_resolution(times, one, kinds, np.zeros(times.size)) == 0.0
    block = np.arange(times.size) // 40
    last = np.array([times[block == b].max() for b in range(int(block.max()) + 1)])
    blocked = last[block] + 1e-6 * (np.arange(times.size) % 40)
    assert clumped_resolution(blocked, one, kinds, np.zeros(times.size)) == pytest.approx(
        40 / 11 * 0.5, rel=0.3
    )


def _fsdp_log(path: Path, step_s: float, seconds: float, seed: int) -> Path:
    """Two ranks of an FSDP job in whole seconds: each step 12 AllGathers over its first 40 %
    and 12 ReduceScatters over its last 40 % (2 % step jitter)."""
    rng = np.random.default_rng(seed)
    lines: list[tuple[float, str]] = []
    t, op = 0.3, 0
    while t < seconds:
        calls = [(0.4 * i / 12, "AllGather", 2_000_000) for i in range(12)]
        calls += [(0.5 + 0.4 * i / 12, "ReduceScatter", 2_000_000) for i in range(12)]
        calls[0] = (0.0, "AllGather", 3_000_000)
        for at, name, count in calls:
            for r in range(2):
                when = t + at * step_s
                stamp = (START + dt.timedelta(seconds=when)).strftime("[%F %T] ")
                lines.append(
                    (
                        when,
                        stamp + _coll(r, name, op, count),
                    )
                )
            op += 1
        t += step_s * (1.0 + 0.02 * rng.uniform(-1.0, 1.0))
    lines.sort(key=lambda x: x[0])
    path.write_text("\n".join(line for _, line in lines) + "\n")
    return path


@pytest.mark.parametrize(("step_s", "seed"), [(5.5, 1), (5.5, 2), (4.2, 1)])
def test_whole_second_steps_whose_rounding_repeats_are_timed_by_their_order(
    tmp_path: Path, step_s: float, seed: int
) -> None:
    """5.5 s steps in whole seconds are 5 then 6 s apart: the binned calls repeat exactly
    every 11 s, read as T at confidence 0.8 (4.2 s steps: 21 s); their order times 5.5 s."""
    log = _fsdp_log(tmp_path / "fsdp.log", step_s, 600.0, seed)
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(step_s, rel=0.02)
