"""NCCL Inspector dumps: GPU-timed collectives, parsed, de-duplicated, summarised and exported.

The fixtures are written as inspector_json.cc writes them (compact JSON per line, ``%lf``
doubles, NaN as ``"nan"``; 2.30 records with ``comm_name`` and timing source, a 2.28 record
without them, a repeated dump of one operation, point-to-point records).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.cli import main
from agent.clock import FakeClock
from agent.errors import InputFormatError
from agent.pipeline import Snapshot
from agent.windows import TimingWindow
from collectors._base import SourceStats, TimingBatch
from collectors.nccl_inspector import (
    InspectorConfig,
    InspectorSource,
    parse_inspector_record,
    read_inspector_files,
)
from tests.conftest import exposition, require_component
from tests.sources import collect_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-inspector"
DUMPS = sorted(FIXTURES.glob("*.log"))
#: The fixture's AllReduce times: rank 0 4.0..4.9 ms and 4.2 ms (2.28 record), rank 1 4.05..4.95.
ALLREDUCE_US = [4000 + 100 * i for i in range(10)] + [4200] + [4050 + 100 * i for i in range(10)]


def test_a_2_30_collective_record() -> None:
    r = parse_inspector_record(DUMPS[0].read_text().splitlines()[0])
    assert r is not None
    assert r.comm_id == "7f8c496ae9f661"
    assert r.comm_name == "DP Group 0"
    assert (r.rank, r.nranks, r.nnodes) == (0, 16, 2)
    assert (r.hostname, r.pid) == ("gpu-node-07", 51001)
    assert r.dump_time_s == pytest.approx(1764374400.0)
    assert (r.kind, r.op, r.seq, r.msg_bytes) == ("coll", "AllReduce", 1000, 268435456)
    assert r.exec_s == pytest.approx(0.004)
    assert r.gpu_timed
    assert r.busbw == pytest.approx(125.82912e9)  # GB/s are 1e9 B/s


def test_p2p_records_and_nan_bandwidth() -> None:
    lines = DUMPS[0].read_text().splitlines()
    send, nan = (parse_inspector_record(line) for line in lines[-2:])
    assert send is not None
    assert nan is not None
    assert (send.kind, send.op, send.peer) == ("p2p", "Send", 8)
    assert send.busbw == pytest.approx(34.952533e9)
    assert nan.busbw is None  # the plugin writes NaN as "nan"


_PERF = '"coll_perf": {"coll": "AllReduce", "coll_sn": 1, "coll_msg_size_bytes": 8, '


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"header": {"id": "0x1", "rank": 0, "n_ranks": 2}}', "neither coll_perf nor p2p_perf"),
        ('{"header": {"id": "0x1", "rank": true, "n_ranks": 2}, ' + _PERF
         + '"coll_exec_time_us": 3}}', "rank is not an integer"),
        ('{"header": {"id": "0x1", "rank": 0, "n_ranks": 2}, ' + _PERF
         + '"coll_exec_time_us": -3}}', "not a time"),
    ],
)  # fmt: skip
def test_bad_lines_say_why(line: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_inspector_record(line)


def test_the_dumps_summarised_once_per_operation() -> None:
    s = read_inspector_files(DUMPS)
    assert s.duplicates == 1  # one AllReduce dumped twice
    assert s.records == 25
    assert s.gpu_timed == 24  # the ReduceScatter fell back to CPU timing
    allreduce = s.ops["AllReduce"]
    assert allreduce.calls == len(ALLREDUCE_US)
    assert allreduce.exec_p50_s == pytest.approx(np.percentile(ALLREDUCE_US, 50) / 1e6)
    assert allreduce.exec_p99_s == pytest.approx(np.percentile(ALLREDUCE_US, 99) / 1e6)
    assert allreduce.msg_bytes_p50 == 268435456
    assert s.communicators["7f8c496ae9f661"]["ranks"] == [0, 1]
    assert s.communicators["1a2b3c4d5e6f7081"]["nranks"] == 8


def test_a_file_without_records_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "host-pid1.log"
    bad.write_text("hello\nworld\n")
    with pytest.raises(InputFormatError, match=r"host-pid1.log:1: no NCCL Inspector record"):
        read_inspector_files([bad])
    binary = tmp_path / "b.log"
    binary.write_bytes(b"\x00\xff\xfe" * 10)
    with pytest.raises(InputFormatError, match="not a text file"):
        read_inspector_files([binary])


def test_analyze_shows_gpu_timed_latency(capsys: pytest.CaptureFixture[str]) -> None:
    args = [arg for d in DUMPS for arg in ("--inspector", str(d))]
    assert main(["analyze", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ops = out["inspector"]["ops"]
    assert ops["AllReduce"]["calls"] == 21
    assert ops["AllReduce"]["exec_time_p50_s"] == pytest.approx(0.00445)
    assert out["regime"] == "unknown"  # Inspector records alone say nothing about the traffic
    assert main(["analyze", *args, "--table", "json"]) == 0
    rows = {r["row"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["op AllReduce"]["latency_p99_s"] == pytest.approx(
        np.percentile(ALLREDUCE_US, 99) / 1e6
    )
    assert rows["op Send"]["bus_bandwidth_p50_bytes_per_s"] == pytest.approx(34.952533e9)


def test_the_live_source_emits_each_operation_once(tmp_path: Path) -> None:
    dump = tmp_path / "gpu-node-07-pid51001.log"
    dump.write_text(DUMPS[0].read_text())
    cfg = InspectorConfig(enabled=True, paths=(str(tmp_path / "*.log"),), read_from="beginning")
    source = InspectorSource(cfg, clock=FakeClock(), state_file=tmp_path / "state.json")
    out = asyncio.run(collect_until(source, TimingBatch))
    (batch,) = [r for r in out if isinstance(r, TimingBatch)]
    lines = DUMPS[0].read_text().splitlines()
    assert len(batch.calls) == len(lines) - 1  # the repeated dump is dropped
    stats = [r for r in out if isinstance(r, SourceStats)][-1]
    assert stats.values == {"records": len(lines) - 1, "duplicates": 1, "bad_lines": 0}
    # the same records again (a re-read after restart without state): all duplicates
    again = source.accept(lines, 10.0)
    assert not [r for r in again if isinstance(r, TimingBatch)]


def test_timings_are_exported_as_histograms_promtool_clean() -> None:
    window = TimingWindow()
    source = InspectorSource(InspectorConfig(), clock=FakeClock())
    for r in source.accept([line for d in DUMPS for line in d.read_text().splitlines()], 1.0):
        if isinstance(r, TimingBatch):
            window.add(r)
    text = exposition(Snapshot(None, 0.0, 0.0, 0.0, (), collective_timings=window.summary()))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    ar = (("op", "AllReduce"),)
    assert samples[("commpulse_collective_exec_seconds_count", ar)] == 21
    # 4.0-4.95 ms all fall in the (3 ms, 10 ms] bucket
    assert samples[("commpulse_collective_exec_seconds_bucket", (("le", "0.003"), *ar))] == 0
    assert samples[("commpulse_collective_exec_seconds_bucket", (("le", "0.01"), *ar))] == 21
    assert samples[("commpulse_collective_exec_seconds_sum", ar)] == pytest.approx(
        sum(ALLREDUCE_US) / 1e6
    )
    assert samples[("commpulse_collective_bus_bandwidth_bytes_per_second", ar)] > 1e11
    promtool = require_component("promtool")
    res = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
