"""NCCL logs as real jobs leave them: no COLL lines, hours long, spliced by shared stdout,
holed by logrotate, folded by Ray. Each case once gave a confident wrong answer or none."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files

START = datetime(2025, 3, 1, 12, 0, 0)


def _coll(t: float, rank: int, op_count: int, nranks: int = 4, stamp: bool = True) -> str:
    prefix = (START + timedelta(seconds=t)).strftime("[%Y-%m-%d %H:%M:%S.%f] ") if stamp else ""
    return (
        f"{prefix}node1:{1000 + rank}:{1000 + rank} [{rank}] NCCL INFO AllReduce: opCount "
        f"{op_count:x} sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count 25000000 "
        f"datatype 9 op 0 root 0 comm 0x55d0c0a0b0c{rank} [nranks={nranks}] stream "
        "0x5581e2a0c0d0"
    )


def _steps(n: int, period: float, *, ranks: int = 1, jitter: float = 0.0) -> list[str]:
    """``n`` steps of two AllReduces per rank; step times jitter and wander as real ones do."""
    rng = np.random.default_rng(1)
    lines, t = [], 0.0
    for step in range(n):
        for k in range(2):
            lines += [_coll(t + 0.002 * k + 1e-4 * r, r, 2 * step + k, ranks) for r in range(ranks)]
        t += period * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    return lines


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_without_coll_lines_is_no_idle_host(tmp_path: Path) -> None:
    """Plain NCCL_DEBUG=INFO logs no COLL lines (NCCL's default subsystems leave them out)."""
    log = _write(
        tmp_path / "init.log",
        [
            "NCCL version 2.21.5+cuda12.4",
            "node1:1000:1050 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
            "node1:1000:1050 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0a0b0c0 rank 0 nranks 4 "
            "cudaDev 0 nvmlDev 0 busId 18000 commId 0x1f2e3d4c5b6a7988 - Init COMPLETE",
        ],
    )
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.regime == "unknown"
    assert any("no collective (COLL) lines" in w and "INIT,COLL" in w for w in est.warnings)


@pytest.mark.parametrize(("steps", "period"), [(4000, 0.25), (3000, 1.0)])
def test_an_hours_long_log_keeps_its_period(tmp_path: Path, steps: int, period: float) -> None:
    """4000 steps of 0.25 s with 2 % jitter read as a confident 1.24 s (8000 of 1 s: 10.3 s):
    the calls were binned span/32768 wide, 4 to 8 bins a step, and the steps' wander hid them."""
    log = _write(tmp_path / "long.log", _steps(steps, period, jitter=0.02))
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(period, rel=0.005)
    assert est.step_bytes == pytest.approx(2 * 50e6, rel=0.01)


def test_a_record_spliced_into_a_pointer_is_no_year_5825(tmp_path: Path) -> None:
    """Ranks that share one stdout write it in 4 KiB blocks: a record starts inside another's
    stream pointer, "0x55825-03-01 12:00:15...", which read as a time in year 5825."""
    lines = _steps(60, 0.5)
    glued = _coll(15.001, 0, 999)
    lines[60] = lines[60][: -len("e2a0c0d0")] + glued[3:]  # "[20" of the year went missing
    est = analyze_files(nccl_logs=[_write(tmp_path / "glued.log", lines)]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.002)


def test_ranks_spliced_in_4k_blocks_are_still_four_processes(tmp_path: Path) -> None:
    """Each rank's stdout block lands whole, cutting its neighbours' lines: records then carry
    a host or pid cut from another's ("c1", "counde1"), one call each. They were counted as
    processes (4 ranks read as 12), which cut the bytes each rank issues per step by 3."""
    per_rank = [
        "\n".join(_coll(0.5 * s + 0.002 * k, r, 2 * s + k) for s in range(400) for k in range(2))
        + "\n"
        for r in range(4)
    ]
    # Each rank's first flush comes at its own point of its output (their start-up differs).
    cuts = [[0, *range(700 * r + 500, len(t), 4096), len(t)] for r, t in enumerate(per_rank)]
    blocks = [
        [t[a:b] for a, b in itertools.pairwise(c)] for t, c in zip(per_rank, cuts, strict=True)
    ]
    out = "".join(b[j] for j in range(max(map(len, blocks))) for b in blocks if j < len(b))
    log = tmp_path / "spliced.log"
    log.write_text(out)
    result = analyze_files(nccl_logs=[log])
    assert result.extra["nccl"]["processes"] == 4
    assert result.estimate.collectives["AllReduce"][0] >= 0.95 * 3200  # the cut lines only


def test_a_logrotate_hole_of_nul_bytes_loses_no_record(tmp_path: Path) -> None:
    log = tmp_path / "rotated.log"
    log.write_bytes(b"\0" * 300_000 + "\n".join(_steps(3, 0.5)).encode() + b"\n")
    result = analyze_files(nccl_logs=[log])
    assert result.estimate.collectives["AllReduce"][0] == 6
    assert result.extra["nccl"]["unparsed_nccl_lines"] == 0


def test_ray_log_deduplication_is_said(tmp_path: Path) -> None:
    lines = []
    for s in range(10):
        ray = "(RayTrainWorker pid={pid}, ip=10.0.0.1) "
        lines.append(ray.format(pid=1000) + _coll(0.5 * s, 0, s, stamp=False))
        lines.append(
            ray.format(pid=1003)
            + _coll(0.5 * s, 3, s, stamp=False)
            + " [repeated 3x across cluster]"
        )
    est = analyze_files(nccl_logs=[_write(tmp_path / "ray.log", lines)]).estimate
    assert est.collectives["AllReduce"][0] == 20
    note = next(w for w in est.warnings if "across cluster" in w)
    assert "left 20 calls of other ranks out" in note
    assert "RAY_DEDUP_LOGS=0" in note


def test_split_communicators_of_nccl_2_27_are_joined_across_ranks(tmp_path: Path) -> None:
    """From NCCL 2.23 a split prints its parent and colour but no commId: each rank's child
    was a communicator of its own (8 ranks of a 2-way split: 8 comms of 1 rank), and the
    world communicator's one AllReduce was taken for the job's step collectives."""
    lines = ["node0:3000:3000 [0] NCCL INFO NCCL version 2.27.3+cuda12.9"]
    for r in range(8):
        host, pid = f"node{r // 4}", 3000 + r
        head = f"{host}:{pid}:{pid + 77} [{r % 4}] NCCL INFO "
        lines.append(
            head + f"ncclCommInitRankConfig comm 0x5500000000{r:02x} rank {r} nranks 8 cudaDev "
            f"{r % 4} nvmlDev {r % 4} busId 18000 commId 0xabcdef0123456789 - Init COMPLETE"
        )
        lines.append(
            head + "AllReduce: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 "
            f"count 1 datatype 7 op 0 root 0 comm 0x5500000000{r:02x} [nranks=8] stream 0x558"
        )
        lines.append(
            head + f"ncclCommSplit comm 0x5522000000{r:02x} rank {r // 2} nranks 4 cudaDev "
            f"{r % 4} nvmlDev {r % 4} busId 18000 parent 0x5500000000{r:02x} splitCount 1 "
            f"color {r % 2} key {r} - Init COMPLETE"
        )
        lines += [
            head + f"ReduceScatter: opCount {k:x} sendbuff 0x7f0000000000 recvbuff "
            f"0x7f0000000000 count 1048576 datatype 7 op 0 root 0 comm 0x5522000000{r:02x} "
            "[nranks=4] stream 0x558"
            for k in range(100)
        ]
    result = analyze_files(nccl_logs=[_write(tmp_path / "split.log", lines)])
    comms = {c["comm"]: c for c in result.extra["nccl"]["communicators"]}
    assert set(comms) == {
        "abcdef0123456789",
        "abcdef0123456789/split1:0",
        "abcdef0123456789/split1:1",
    }
    assert [comms[f"abcdef0123456789/split1:{c}"]["ranks_here"] for c in (0, 1)] == [4, 4]
    assert result.extra["sharding"]["comm"].startswith("abcdef0123456789/split1:")


def test_kubectl_nanosecond_stamps_time_steps_that_nccls_whole_seconds_cannot(
    tmp_path: Path,
) -> None:
    """`kubectl logs --timestamps` of a job with NCCL's default "[%F %T] " stamps: the
    nanosecond stamps in front time the 0.5 s steps; the whole seconds read as no period."""
    lines = []
    for step in range(60):
        for k in range(2):
            t = 0.5 * step + 0.002 * k
            fine = (START + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ")
            whole = (START + timedelta(seconds=int(t))).strftime("[%Y-%m-%d %H:%M:%S] ")
            lines.append(fine + whole + _coll(t, 0, 2 * step + k, stamp=False))
    est = analyze_files(nccl_logs=[_write(tmp_path / "kubectl.log", lines)]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.002)


def test_lines_left_out_of_the_counts_are_said(tmp_path: Path) -> None:
    """A fork's COLL line the parser does not know, and a call of an unknown datatype, were
    counted only under ``nccl`` in the JSON: the collectives' counts and bytes came out low
    without a word."""
    log = tmp_path / "fork.log"
    log.write_text(
        "node01:1:1 [0] NCCL INFO ctranAllGatherDirect: opCount 3 sendbuff 0x7f00 recvbuff "
        "0x7f10 count 1024 datatype 7 peer -1 comm 1234567890123 [nranks=8, localRanks=8] "
        "stream=0x55aa\n"
        "node01:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f00 count "
        "1024 datatype 7 op 0 root 0 comm 0x55aa [nranks=8] stream 0x1\n"
        "node01:1:1 [0] NCCL INFO AllReduce: opCount 2 sendbuff 0x7f00 recvbuff 0x7f00 count "
        "1024 datatype 77 op 0 root 0 comm 0x55aa [nranks=8] stream 0x1\n"
    )
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.collectives["AllReduce"][0] == 2  # (count, bytes)
    assert any(w.startswith("1 NCCL line(s) could not be decoded") for w in est.warnings)
    assert any(w.startswith("1 COLL call(s) of a datatype") for w in est.warnings)


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    """``--nccl-log job.log --nccl-log ./job.log`` (a glob and a name) counted every call
    twice; a link to the file as well."""
    log = tmp_path / "job.log"
    log.write_text(
        "node01:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f00 count "
        "1024 datatype 7 op 0 root 0 comm 0x55aa [nranks=8] stream 0x1\n"
    )
    link = tmp_path / "link.log"
    link.symlink_to(log)
    est = analyze_files(nccl_logs=[log, tmp_path / "." / "job.log", link]).estimate
    assert est.collectives["AllReduce"] == (1, 4096)
    assert sum("given twice: read once" in w for w in est.warnings) == 2
