"""Fine-tuning (ZeRO / FSDP) characterisation: agent/sharding.py and its wiring.

The stage bands (agent/sharding.py) are checked on ideal counts and on each side of every
edge; per-step counts and gaps on hand-built call trains whose answer is known exactly. The
simulated finetune job's tolerances are derived in tests/integration/test_analyze_scenarios.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.estimate import Estimate
from agent.regime_params import CallTable, sharding_of
from agent.report import render_table
from agent.sharding import (
    DEFAULT_LATENCY_S,
    MIN_CALLS,
    ZERO2_RATIO,
    ZERO3_RATIO,
    calls_per_step,
    latency_per_step,
    layer_gap,
    sharding_stats,
    zero_stage,
)
from agent.simulator.nccl_writer import LoggedCall, render_nccl_log
from agent.table import COLUMNS, planning_rows
from collectors._base import CallKey


@pytest.mark.parametrize(
    ("ar", "ag", "rs", "stage"),
    [
        (16, 0, 0, "ddp_or_zero1"),  # DDP buckets
        (16, 16, 0, "ddp_or_zero1"),  # ZeRO-1: AllReduce, then gather the updated parameters
        (0, 32, 32, "zero2"),
        (2, 32, 32, "zero2"),  # a loss / grad-norm AllReduce does not change it
        (0, 64, 32, "zero3_or_fsdp_full_shard"),
        (0, 58, 32, "zero3_or_fsdp_full_shard"),  # some parameters persist (ratio 1.8)
        (0, 20, 32, "unknown"),  # 0.63: fewer than one gather per reduce-scatter
        (0, 48, 32, "unknown"),  # 1.5: in between
        (0, 128, 32, "unknown"),  # 4: tensor-parallel gathers mixed in
        (0, 0, 32, "unknown"),  # ReduceScatter alone
        (0, 32, 0, "unknown"),  # AllGather alone
        (0, 0, 0, "unknown"),
        (MIN_CALLS - 1, 0, 0, "unknown"),  # too few
        (0, 2 * (MIN_CALLS - 1), MIN_CALLS - 1, "unknown"),  # too few
    ],
)
def test_zero_stage_verdicts(ar: int, ag: int, rs: int, stage: str) -> None:
    got, reason = zero_stage(ar, ag, rs)
    assert got == stage
    assert reason  # every verdict says why


def test_band_edges_are_ordered_and_leave_a_gap_between_stages() -> None:
    assert ZERO2_RATIO[0] < 1.0 < ZERO2_RATIO[1] < ZERO3_RATIO[0] < 2.0 < ZERO3_RATIO[1]
    assert zero_stage(0, ZERO2_RATIO[1] * 100, 100)[0] == "zero2"
    assert zero_stage(0, ZERO2_RATIO[1] * 100 + 1, 100)[0] == "unknown"
    assert zero_stage(0, ZERO3_RATIO[0] * 100, 100)[0] == "zero3_or_fsdp_full_shard"
    assert "too few" in zero_stage(0, 4, 2)[1]
    assert "between" in zero_stage(0, 150, 100)[1]


def test_domain_latency_example() -> None:
    """DOMAIN.md: 10 µs RTT, 2 collectives per layer, 100 layers -> about 2 ms a step."""
    assert DEFAULT_LATENCY_S == 10e-6
    assert latency_per_step(2 * 100, DEFAULT_LATENCY_S) == pytest.approx(2e-3)
    # The same through the whole path: 100 layers of ReduceScatter + AllGather, T = 1 s.
    period, layers, steps = 1.0, 100, 5
    ops, times = [], []
    for k in range(steps):
        for i in range(layers):
            t = k * period + 0.004 * i
            ops += ["ReduceScatter", "AllGather"]
            times += [t, t + 0.002]
    s = sharding_stats(
        ops, np.full(len(ops), 1e6), np.array(times), ["h:1"] * len(ops), period_s=period
    )
    assert s is not None
    assert s.stage == "zero2"
    assert s.collectives_per_step == 2 * layers
    assert s.latency_per_step_s == pytest.approx(2e-3)
    assert s.latency_share == pytest.approx(2e-3)
    assert s.layer_gap_s == pytest.approx(0.002)


def test_calls_per_step_and_layer_gap_on_a_known_train() -> None:
    """10 calls 5 ms apart, then a 0.95 s gap: a 1 s step; 4 steps plus a cut one."""
    train = np.arange(10) * 0.005
    times = np.concatenate([k * 1.0 + train for k in range(4)] + [4.0 + train[:3]])
    n, steps = calls_per_step(times, 1.0)
    assert (n, steps) == (10.0, 4)
    assert layer_gap(times, 1.0) == pytest.approx(0.005)  # the 0.955 s boundaries left out
    assert layer_gap(times, None) == pytest.approx(0.005)  # a median barely sees them
    assert calls_per_step(times, 10.0) == (None, 0)  # shorter than one period
    assert layer_gap(times[:3], 1.0) is None  # too few gaps


def test_no_sharding_ops_is_none_and_no_timestamps_is_said() -> None:
    nan = np.full(4, np.nan)
    assert sharding_stats(["AlltoAll"] * 4, nan, nan, ["p"] * 4, period_s=1.0) is None
    ops = ["AllGather", "ReduceScatter"] * 20
    s = sharding_stats(ops, np.ones(40), np.full(40, np.nan), ["p"] * 40, period_s=1.0)
    assert s is not None
    assert s.stage == "zero2"
    assert s.collectives_per_step is None
    assert s.layer_gap_s is None
    assert s.latency_share is None
    assert any("timestamps" in n for n in s.notes)


def test_counts_are_per_process() -> None:
    ops = (["AllGather", "AllGather", "ReduceScatter"] * 10) * 2
    procs = ["a"] * 30 + ["b"] * 30
    s = sharding_stats(ops, np.ones(60), np.full(60, np.nan), procs, period_s=None)
    assert s is not None
    assert s.processes == 2
    assert s.calls_per_process == {"AllGather": 20.0, "ReduceScatter": 10.0}
    assert s.stage == "zero3_or_fsdp_full_shard"


def _zero_log(path: Path, *, gathers_per_rs: float, layers: int = 24, steps: int = 6) -> None:
    """A real-format NCCL 2.28 log of 2 local ranks (of 16): per step a backward train of
    ReduceScatters 20 ms apart, then the parameter AllGathers 20 ms apart (ZeRO-2: after the
    optimizer step, once per layer; other ratios: that many per layer)."""
    calls = []
    t0, period = 1767225601.0, 2.0
    for k in range(steps):
        for r in range(2):
            base = t0 + k * period + 1e-5 * r
            for i in range(layers):
                calls.append(LoggedCall(base + 0.02 * i, "ReduceScatter", 1 << 18, 9, r))
            n_ag = round(gathers_per_rs * layers)
            for i in range(n_ag):
                calls.append(LoggedCall(base + 0.6 + 0.02 * i, "AllGather", 1 << 18, 9, r))
    lines = render_nccl_log(
        calls, hostname="gpu-node-01", nranks=16, first_rank=0, local_ranks=2,
        start_time_s=t0 - 1.0, seed=3,
    )  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))


def test_a_zero2_log_reads_as_zero2(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    _zero_log(log, gathers_per_rs=1.0)
    result = analyze_files(nccl_logs=[log])
    s = result.extra["sharding"]
    assert s["zero_stage"] == "zero2"
    assert s["nranks"] == 16
    assert s["processes"] == 2
    assert result.estimate.period_s == pytest.approx(2.0, rel=0.01)
    assert s["collectives_per_step"] == 48
    assert (s["allgather_per_step"], s["reduce_scatter_per_step"]) == (24, 24)
    assert s["message_bytes"]["p50"] == (1 << 18) * 2 * 16  # S = count · 2 B · nranks
    assert s["layer_gap_s"] == pytest.approx(0.02, abs=1e-5)  # one 0.14 s RS -> AG gap in 47
    text = render_table(result.estimate, sources=result.sources, extra=result.extra)
    assert "ZeRO stage        zero2" in text
    assert "per-layer gap" in text


def test_a_log_between_the_stages_is_unknown_with_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    _zero_log(log, gathers_per_rs=1.5)
    s = analyze_files(nccl_logs=[log]).extra["sharding"]
    assert s["zero_stage"] == "unknown"
    assert "between" in s["reason"]
    assert s["collectives_per_step"] == 60  # still counted


def test_latency_can_be_given_and_the_table_carries_the_columns(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    _zero_log(log, gathers_per_rs=2.0)
    result = analyze_files(nccl_logs=[log], collective_latency_s=50e-6)
    s = result.extra["sharding"]
    assert s["zero_stage"] == "zero3_or_fsdp_full_shard"
    assert s["latency_source"] == "given"
    assert s["latency_per_step_s"] == pytest.approx(72 * 50e-6)
    assert s["latency_share"] == pytest.approx(72 * 50e-6 / result.estimate.period_s)
    (job,) = planning_rows(result.estimate, sharding=s)
    assert tuple(job) == COLUMNS
    assert job["zero_stage"] == "zero3_or_fsdp_full_shard"
    assert job["collectives_per_step"] == 72
    assert job["layer_gap_s"] == pytest.approx(s["layer_gap_s"])
    assert job["latency_share"] == pytest.approx(s["latency_share"])


def test_without_sharding_the_new_columns_stay_empty() -> None:
    est = Estimate(
        period_s=1.0, burst_bandwidth=1e9, duty_cycle=0.3, confidence=0.9, regime="training",
        network_on_ratio=0.3, nranks=8, collectives={"AllReduce": (16, 10**9)},
    )  # fmt: skip
    (job,) = planning_rows(est)
    assert [job[c] for c in COLUMNS[-4:]] == [None] * 4
    assert COLUMNS[-4:] == ("zero_stage", "collectives_per_step", "layer_gap_s", "latency_share")


def _table(calls: list[tuple[float, str, str]]) -> CallTable:
    """One process's calls (time, op, commId), 8 ranks on every communicator."""
    keys: list[CallKey] = []
    ids = []
    for _, op, comm in calls:
        key = CallKey(op, "node1:100", f"0x{comm}", 8, -1, 0, comm)
        if key not in keys:
            keys.append(key)
        ids.append(keys.index(key))
    return CallTable(
        times=np.asarray([c[0] for c in calls]),
        nbytes=np.full(len(calls), 64e6),
        key_ids=np.asarray(ids, dtype=np.int64),
        keys=keys,
    )


def test_tensor_and_data_parallel_of_one_size_that_disagree_are_named_not_guessed() -> None:
    """Megatron, TP 8 beside DP 8: the busier TP communicator's activation AllReduces were read
    as "ddp_or_zero1 (AllReduce gradient sync)" beside the distributed optimizer's
    ReduceScatter and AllGather on DP."""
    calls = []
    for k in range(20):
        t = 5.0 * k
        calls += [(t + 0.01 * i, "AllReduce", "aa11") for i in range(200)]
        calls += [(t + 4.0 + 0.01 * i, "ReduceScatter", "bb22") for i in range(30)]
        calls += [(t + 4.5 + 0.01 * i, "AllGather", "bb22") for i in range(30)]
    s = sharding_of(_table(calls), 5.0)
    assert s is not None
    assert s.stage == "unknown"
    assert "aa11: ddp_or_zero1" in s.reason
    assert "bb22: zero2" in s.reason


def test_an_allreduce_log_without_steps_is_not_called_a_gradient_sync_alone() -> None:
    rng = np.random.default_rng(2)
    times = np.sort(rng.uniform(0.0, 300.0, 4000))
    s = sharding_of(_table([(float(t), "AllReduce", "aa11") for t in times]), None)
    assert s is not None
    assert s.stage == "ddp_or_zero1"
    assert "tensor-parallel inference all-reduces too" in s.reason


@pytest.mark.parametrize(("ag", "accumulation"), [(256, 4), (128, 2), (100, None), (160, None)])
def test_gathers_at_twice_a_whole_number_per_reduce_scatter_name_gradient_accumulation(
    ag: int, accumulation: int | None
) -> None:
    """FSDP over 4 micro-steps gathers 8 times per ReduceScatter: it was only asked about
    tensor parallelism."""
    stage, reason = zero_stage(0, ag, 32)
    assert stage == "unknown"
    said = f"accumulating gradients over {accumulation} micro-steps"
    assert (said in reason) if accumulation else ("accumulating" not in reason)
