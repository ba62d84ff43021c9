"""Docker's ``json-file`` logs: the NCCL lines inside, timed by the runtime's stamps.

The lines are what Docker writes (``{"log":...,"stream":...,"time":...}``, Go's JSON escapes
for ``<``, ``>`` and ``&``); the job is 0.5 s steps of three AllReduces on two ranks.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from collectors.container_logs import unwrap_docker_line, unwrap_docker_text
from collectors.nccl_log import LiveDecoder

START = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.UTC)


def _docker(text: str, when: float, stream: str = "stdout") -> str:
    """One json-file line as Docker writes it (Go escapes <, > and & in strings)."""
    stamp = (START + dt.timedelta(seconds=when)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "417Z"
    body = json.dumps({"log": text + "\n", "stream": stream, "time": stamp}, separators=(",", ":"))
    return body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _job(*, buffered: bool) -> list[tuple[float, str]]:
    """(time the runtime read it, text) of each line; ``buffered``: 4 KiB blocks of stdout."""
    rng = np.random.default_rng(3)
    lines: list[tuple[float, str]] = []
    for r in range(2):
        lines.append((0.1, f"node1:{40 + r}:{40 + r} [{r}] NCCL INFO NCCL version 2.21.5+cuda12.4"))
        t, op, block, size = 0.3, 0, [], 0
        for _ in range(200):
            for at, count in ((0.30, 6_553_600), (0.35, 6_553_600), (0.45, 1_200_000)):
                text = (
                    f"[rank{r}]:node1:{40 + r}:{40 + r} [{r}] NCCL INFO AllReduce: opCount "
                    f"{op:x} sendbuff 0x7f01 recvbuff 0x7f02 count {count} datatype 7 op 0 "
                    f"root 0 comm 0x3{r} [nranks=2] stream 0x4"
                )
                op += 1
                if not buffered:
                    lines.append((t + at, text))
                    continue
                if size + len(text) > 4096:
                    lines += [(t + at + 1e-6 * j, b) for j, b in enumerate(block)]
                    block, size = [], 0
                block.append(text)
                size += len(text) + 1
            t += 0.5 * (1.0 + 0.02 * rng.uniform(-1.0, 1.0))
    return sorted(lines)


def test_a_line_unwraps_to_the_runtimes_time_before_the_jobs_text() -> None:
    line = _docker('a <b> & "c"\tend', 1.5)
    assert unwrap_docker_line(line) == '2026-12-02T10:00:01.500000417Z a <b> & "c"\tend'
    # Not json-file, cut short, or without text: as it is (counted as whatever it is).
    for other in ("node1:1:1 [0] NCCL INFO x", line[:40], '{"log":1,"time":"x"}'):
        assert unwrap_docker_line(other) == other


def test_a_json_file_log_times_its_calls_as_the_plain_log_would(tmp_path: Path) -> None:
    """Before, no call had a time: counts but no T, with the "no timestamps" warning."""
    job = _job(buffered=False)
    docker = tmp_path / "c0ffee-json.log"
    docker.write_text("".join(_docker(text, when) + "\n" for when, text in job))
    got = analyze_files(nccl_logs=[docker])
    assert got.estimate.period_s == pytest.approx(0.5, rel=0.01)
    nccl = got.extra["nccl"]
    assert nccl["version"] == "2.21.5"
    assert nccl["unparsed_nccl_lines"] == 0
    assert got.inputs.collectives is not None
    assert got.inputs.collectives.ops["AllReduce"][0] == 1200


def test_json_file_lines_of_buffered_blocks_are_timed_by_their_order(tmp_path: Path) -> None:
    """Docker reads the job's pipe in blocks: ~20 lines at one time, blocks 3.5 s apart."""
    job = _job(buffered=True)
    docker = tmp_path / "c0ffee-json.log"
    docker.write_text("".join(_docker(text, when) + "\n" for when, text in job))
    est = analyze_files(nccl_logs=[docker]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.02)
    assert any("timed in blocks" in w for w in est.warnings)


def test_the_live_decoder_reads_json_file_chunks_as_their_lines() -> None:
    """The tailer's chunks of a json-file log decode to the calls and times of the same lines
    as ``docker logs -t`` prints them."""
    job = _job(buffered=False)
    docker = "".join(_docker(text, when) + "\n" for when, text in job)
    plain = unwrap_docker_text(docker)
    assert plain.count("\n") == len(job)
    assert "NCCL INFO AllReduce" in plain
    a, b = LiveDecoder(), LiveDecoder()
    stamps_a, kinds_a = a.decode_chunks(
        [docker[: len(docker) // 2 + 1], docker[len(docker) // 2 + 1 :]]
    )
    stamps_b, kinds_b = b.decode_chunks([plain])
    assert stamps_a.size == 1200
    assert np.array_equal(stamps_a, stamps_b)
    assert [a.kind(k) for k in kinds_a.tolist()] == [b.kind(k) for k in kinds_b.tolist()]
    assert float(np.nanmax(stamps_a) - np.nanmin(stamps_a)) > 90.0  # the runtime's times
