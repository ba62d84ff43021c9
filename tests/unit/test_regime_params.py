"""The regime parameters of a call table and a network grid: the live agent's composition."""

from __future__ import annotations

import numpy as np
import pytest

from agent.estimate import EstimateInputs, estimate
from agent.rates import direction_grids
from agent.regime_params import CallTable, regime_params, sharding_of, sparse_ops_of
from agent.simulator.params import JobParams, resolve
from agent.simulator.sampling import sample_counters
from agent.simulator.schedule import build_schedule
from agent.windows import BurstTally, CollectiveWindow
from collectors._base import CallBatch, CallKey, CollectiveCall


def _table(rows: list[tuple[float, float, CallKey]]) -> CallTable:
    keys: list[CallKey] = []
    ids = []
    for _, _, key in rows:
        if key not in keys:
            keys.append(key)
        ids.append(keys.index(key))
    return CallTable(
        times=np.array([r[0] for r in rows]),
        nbytes=np.array([r[1] for r in rows]),
        key_ids=np.array(ids, dtype=np.int32),
        keys=tuple(keys),
    )


def _zero3_rows(process: str, comm: str, *, steps: int, layers: int, comm_id: str | None,
                nranks: int = 16) -> list[tuple[float, float, CallKey]]:  # fmt: skip
    """ZeRO-3: per layer an AllGather in forward, an AllGather and a ReduceScatter in backward."""
    ag = CallKey("AllGather", process, comm, nranks, -1, 0, comm_id)
    rs = CallKey("ReduceScatter", process, comm, nranks, -1, 0, comm_id)
    rows = []
    for step in range(steps):
        t = step * 1.0
        for layer in range(layers):
            rows.append((t + 0.001 * layer, 4e6, ag))
        for layer in range(layers):
            rows.append((t + 0.3 + 0.002 * layer, 4e6, ag))
            rows.append((t + 0.3 + 0.002 * layer + 0.001, 8e6, rs))
    return rows


def test_sharding_reads_the_largest_communicator_across_processes() -> None:
    # Two processes of one 16-rank data-parallel communicator (same commId, different
    # pointers), plus a 2-rank tensor-parallel one whose many AllGathers must not count.
    rows = _zero3_rows("h:1", "0xa", steps=6, layers=20, comm_id="c0ffee")
    rows += _zero3_rows("h:2", "0xb", steps=6, layers=20, comm_id="c0ffee")
    tp = CallKey("AllGather", "h:1", "0xt", 2, -1, 0, "7e57")
    rows += [(0.5 + 0.001 * i, 1e5, tp) for i in range(500)]
    rows.sort(key=lambda r: r[0])
    stats = sharding_of(_table(rows), 1.0, latency_s=20e-6, latency_source="config")
    assert stats is not None
    assert stats.comm == "c0ffee"
    assert (stats.nranks, stats.processes) == (16, 2)
    assert stats.stage == "zero3_or_fsdp_full_shard"
    assert stats.allgather_per_reduce_scatter == pytest.approx(2.0)
    assert stats.collectives_per_step == 60
    assert stats.latency_share == pytest.approx(60 * 20e-6 / 1.0)
    assert stats.latency_source == "config"


def test_without_comm_ids_each_process_communicator_stands_alone() -> None:
    rows = _zero3_rows("h:1", "0xa", steps=4, layers=10, comm_id=None)
    rows += _zero3_rows("h:2", "0xb", steps=4, layers=12, comm_id=None)
    stats = sharding_of(_table(rows), 1.0)
    assert stats is not None
    # Equal ranks: the one with more calls, named process:pointer.
    assert stats.comm == "h:2:0xb"
    assert stats.processes == 1
    assert stats.latency_source == "default"


def test_sparse_ops_count_named_and_grouped_alltoalls_and_the_pipeline_bubble() -> None:
    rows: list[tuple[float, float, CallKey]] = []
    n = 8
    for k in range(10):  # grouped Send/Recv to every peer (NCCL < 2.28), rank 0
        t = 0.1 * k
        for peer in range(1, n):
            rows.append((t, 1024.0, CallKey("Send", "h:1", "0xa", n, peer, 0)))
            rows.append((t, 1024.0, CallKey("Recv", "h:1", "0xa", n, peer, 0)))
    native = CallKey("AlltoAll", "h:2", "0xb", n, -1, 1)
    rows += [(0.05 + 0.1 * k, 8192.0, native) for k in range(10)]
    # A 4-stage pipeline on its own 4-rank communicators: rank 0 → 1 forward, 4 micro-batches.
    for step in range(5):
        for m in range(4):
            t = step + 0.1 * m
            rows.append((t, 2048.0, CallKey("Send", "h:3", "0xp", 4, 1, 0)))
            rows.append((t + 0.5, 2048.0, CallKey("Recv", "h:3", "0xp", 4, 1, 0)))
    rows.sort(key=lambda r: r[0])
    a2a, pipe = sparse_ops_of(_table(rows), nranks=n, period_s=1.0)
    assert a2a is not None
    assert (a2a.native_calls, a2a.grouped_calls, a2a.ranks) == (10, 10, 2)
    assert a2a.message_bytes is not None
    assert a2a.message_bytes.p50 == pytest.approx(8192.0)  # 1024 per peer × 8 slots
    assert pipe is not None
    assert (pipe.stages, pipe.micro_batches) == (4, 4)
    assert pipe.bubble_ratio == pytest.approx(3 / 7)


def test_unknown_keys_take_no_part() -> None:
    table = CallTable(np.array([0.0, 1.0]), np.array([1.0, 2.0]), np.array([-1, -1], np.int32), ())
    assert sharding_of(table, 1.0) is None
    assert sparse_ops_of(table) == (None, None)


def test_window_keeps_keys_of_batches_and_single_calls() -> None:
    w = CollectiveWindow(1024)
    send = CallKey("Send", "h:1", "0xa", 8, 3, 2, "beef")
    ar = CallKey("AllReduce", "h:1", "0xa", 8, -1, 2, "beef")
    w.add_batch(
        CallBatch(
            times=np.array([1.0, 1.1, 1.2]),
            s_bytes=np.array([10.0, 20.0, 30.0]),
            ops={"Send": (1, 20), "AllReduce": (2, 40)},
            nranks=8,
            processes=frozenset({"h:1"}),
            key_ids=np.array([1, 0, 1], dtype=np.int32),
            keys=(send, ar),
        )
    )
    w.add(CollectiveCall(2.0, "Recv", 5, 8, comm="0xa", extra={"process": "h:1", "peer": 4}))
    w.add_batch(  # a producer that cannot say who called
        CallBatch(np.array([3.0]), np.array([1.0]), {"AllReduce": (1, 1)}, 8, frozenset())
    )
    table = w.table()
    assert table is not None
    keys = [table.keys[i] if i >= 0 else None for i in table.key_ids.tolist()]
    assert keys[:3] == [ar, send, ar]
    recv = keys[3]
    assert recv is not None
    assert (recv.op, recv.peer, recv.rank) == ("Recv", 4, None)
    assert keys[4] is None
    later = w.table(since=1.15, limit=2)
    assert later is not None
    assert later.times.tolist() == [2.0, 3.0]


def test_burst_tally_counts_each_burst_once_across_overlapping_windows() -> None:
    tally = BurstTally()
    dt = 0.01
    # Hop 1 sees bursts starting at 1.00 and 2.00; hop 2 the same two, segmented a bin
    # differently, and a new one at 3.00.
    assert tally.add(np.array([1.0, 2.0]), np.array([1e6, 2e6]), np.array([0.1, 0.2]), dt) == 2
    assert tally.add(np.array([1.0, 2.005, 3.0]), np.array([1e6, 2e6, 3e6]),
                     np.array([0.1, 0.2, np.nan]), dt) == 1  # fmt: skip
    sizes = tally.sizes.histogram()
    seconds = tally.durations.histogram()
    assert sizes is not None
    assert seconds is not None
    assert sum(sizes.counts) == 3
    assert sizes.total_bytes == pytest.approx(6e6)
    assert sum(seconds.counts) == 2  # the unresolved duration is not counted as one


def test_burst_tally_leaves_chatter_out_but_keeps_bursts_of_unknown_duration() -> None:
    tally = BurstTally()
    # A teardown packet (264 B in 10 ms), a collective, and one too short to time.
    new = tally.add(np.array([1.0, 2.0, 3.0]), np.array([264.0, 4e6, 2e6]),
                    np.array([0.01, 0.1, np.nan]), 0.01, min_rate=10e6)  # fmt: skip
    assert new == 2
    sizes = tally.sizes.histogram()
    assert sizes is not None
    assert sizes.total_bytes == pytest.approx(6e6)


def test_inference_job_arrivals_and_alltoall_match_the_truth() -> None:
    p = resolve(JobParams(scenario="inference", seed=3, duration_s=60))
    sched = build_schedule(p)
    trace = sample_counters(sched)
    grids = direction_grids(trace.times, trace.columns, dt=1.0 / p.sample_rate_hz)
    est = estimate(EstimateInputs(network=grids, network_source="counters"))
    assert est.period_s is None  # inference never has a period
    rows = [
        (c.time_s, float(c.count * 2 * p.nranks),
         CallKey(c.op, f"h:{c.local_rank}", f"0x{c.local_rank}", p.nranks, -1, c.local_rank))
        for c in sched.calls
    ]  # fmt: skip
    params = regime_params(grids, est, _table(rows))
    arr = params.arrivals
    assert arr is not None
    truth = sched.truth["arrivals"]
    assert arr.arrival_rate_hz == pytest.approx(truth["bursts"] / 60, rel=0.05)
    assert arr.gap_cv == pytest.approx(truth["gap_cv"], rel=0.1)
    assert arr.verdict == "poisson"
    assert params.alltoall is not None
    assert params.alltoall.calls == sched.truth["alltoall"]["calls"]
    assert params.sharding is None  # no AllReduce / AllGather / ReduceScatter
