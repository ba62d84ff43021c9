"""The NCCL log tailer: no line lost or duplicated across rotation, truncation, restarts.

A Hypothesis state machine drives a real directory of log files with the actions a job,
logrotate and an agent restart perform, and checks every poll against a model of what must
have been delivered.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent.clock import FakeClock
from agent.simulator.nccl_writer import LoggedCall, job_comm_id, render_nccl_log
from collectors import nccl_tail
from collectors._base import CallBatch, SourceStats
from collectors.nccl_log import FastCall, LiveDecoder
from collectors.nccl_tail import (
    NcclTail,
    NcclTailConfig,
    Tailer,
    _File,
    decode_batch,
    decode_texts,
)
from tests.sources import collect_until

NAMES = ("a", "b")


class TailMachine(RuleBasedStateMachine):
    """Model: each path has generations of files (a rotation or re-creation starts one).

    A line is pending until a poll delivers it. Lines of a generation the tailer has opened
    stay deliverable after a rotation or deletion (it drains them through its descriptor);
    lines of a generation created and removed between two polls were never visible to a
    poller, and lines not yet read when a file is truncated or rewritten are gone: both are
    "lost". Everything else must be delivered exactly once, in order per file.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.state_file = self.dir / "state.json"
        self.counter = 0
        self.gen = dict.fromkeys(NAMES, 0)
        self.seen: set[tuple[str, int]] = {(n, 0) for n in NAMES}
        self.pending: list[tuple[str, int, str]] = []
        self.delivered: list[str] = []
        self.lost: set[str] = set()
        for n in NAMES:
            (self.dir / f"{n}.log").write_text("")
        self.tailer = Tailer((str(self.dir / "*.log"),), read_from="beginning",
                             state_file=self.state_file, max_line_bytes=400)  # fmt: skip

    def _path(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    def _new(self, name: str) -> str:
        self.counter += 1
        return f"{name}-{self.counter}"

    def _drop_current(self, name: str) -> None:
        """Lose the unread lines of the current file of ``name``."""
        g = self.gen[name]
        keep = []
        for n, gen, line in self.pending:
            if n == name and gen == g:
                self.lost.add(line)
            else:
                keep.append((n, gen, line))
        self.pending = keep

    def _next_generation(self, name: str) -> None:
        if (name, self.gen[name]) not in self.seen:
            self._drop_current(name)
        self.gen[name] += 1

    @rule(name=st.sampled_from(NAMES), n=st.integers(1, 4))
    def write_lines(self, name: str, n: int) -> None:
        with self._path(name).open("a") as fh:
            for _ in range(n):
                line = self._new(name)
                fh.write(line + "\n")
                self.pending.append((name, self.gen[name], line))

    @rule(name=st.sampled_from(NAMES))
    def write_half_a_line_then_finish(self, name: str) -> None:
        line = self._new(name) + "-split"
        with self._path(name).open("a") as fh:
            fh.write(line[:5])
        self.poll()  # the tailer sees half a line: it must not deliver it yet
        with self._path(name).open("a") as fh:
            fh.write(line[5:] + "\n")
        self.pending.append((name, self.gen[name], line))

    @rule(name=st.sampled_from(NAMES))
    def write_overlong_line(self, name: str) -> None:
        with self._path(name).open("a") as fh:
            fh.write("x" * 1000 + "\n")  # dropped and counted, never delivered

    @rule(name=st.sampled_from(NAMES))
    def rotate(self, name: str) -> None:
        os.replace(self._path(name), self.dir / f"{name}.log.1")
        self._path(name).write_text("")
        self._next_generation(name)

    @rule(name=st.sampled_from(NAMES))
    def copytruncate(self, name: str) -> None:
        self._drop_current(name)
        with self._path(name).open("r+") as fh:
            fh.truncate(0)

    @rule(name=st.sampled_from(NAMES))
    def rewrite_like_nccl_restart(self, name: str) -> None:
        # A new process reopens the file with "w" and writes more than the old one had.
        self._drop_current(name)
        lines = [self._new(name) + "-new" for _ in range(30)]
        self._path(name).write_text("".join(f"{ln}\n" for ln in lines))
        self.pending.extend((name, self.gen[name], ln) for ln in lines)

    @rule(name=st.sampled_from(NAMES))
    def delete_and_recreate(self, name: str) -> None:
        self._path(name).unlink()
        if (name, self.gen[name]) not in self.seen:
            self._drop_current(name)
        self.poll()  # a file the tailer had open is drained through its descriptor
        self._path(name).write_text("")
        self.gen[name] += 1

    @rule()
    def restart_agent(self) -> None:
        self.poll()  # the agent's last sweep (the sampler runs one when stopping)
        self.tailer.close()  # saves offsets
        self.tailer = Tailer((str(self.dir / "*.log"),), read_from="end",
                             state_file=self.state_file, max_line_bytes=400)  # fmt: skip

    @rule()
    def poll(self) -> None:
        got = [line for _, line in self.tailer.poll()]
        assert sorted(got) == sorted(line for _, _, line in self.pending)
        for name in NAMES:  # per file generation, in order
            for g in {gen for n, gen, _ in self.pending if n == name}:
                mine = [ln for ln in got if ln in {x for n, gg, x in self.pending
                                                    if n == name and gg == g}]  # fmt: skip
                assert mine == [x for n, gg, x in self.pending if n == name and gg == g]
        self.delivered.extend(got)
        self.pending = []
        for name in NAMES:
            if self._path(name).exists():
                self.seen.add((name, self.gen[name]))

    @invariant()
    def nothing_twice_and_nothing_lost_delivered(self) -> None:
        assert len(self.delivered) == len(set(self.delivered))
        assert not (set(self.delivered) & self.lost)

    def teardown(self) -> None:
        self.tailer.close()


TestTailMachine = TailMachine.TestCase
TestTailMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


def test_overlong_lines_are_counted_not_buffered(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"ok1\n" + b"y" * 5000 + b"\nok2\n")
    t = Tailer((str(path),), read_from="beginning", max_line_bytes=1000)
    assert [line for _, line in t.poll()] == ["ok1", "ok2"]
    assert t.stats.overlong_lines == 1
    with path.open("ab") as fh:
        fh.write(b"z" * 3000)  # a partial over-long line: dropped as it grows
    assert t.poll() == []
    with path.open("ab") as fh:
        fh.write(b"zz\nok3\n")
    assert [line for _, line in t.poll()] == ["ok3"]
    assert t.stats.overlong_lines == 2
    t.close()


def test_restart_resumes_exactly_where_it_stopped(tmp_path: Path) -> None:
    path, state = tmp_path / "x.log", tmp_path / "state.json"
    path.write_text("1\n2\n")
    t = Tailer((str(path),), read_from="beginning", state_file=state)
    assert [line for _, line in t.poll()] == ["1", "2"]
    t.close()
    with path.open("a") as fh:
        fh.write("3\n")
    t = Tailer((str(path),), read_from="end", state_file=state)
    assert [line for _, line in t.poll()] == ["3"]
    t.close()


@pytest.mark.parametrize("read_from", ["end", "beginning"])
def test_read_from_applies_to_files_found_at_start_only(tmp_path: Path, read_from: str) -> None:
    old = tmp_path / "old.log"
    old.write_text("before\n")
    t = Tailer((str(tmp_path / "*.log"),), read_from=read_from)
    (tmp_path / "new.log").write_text("fresh\n")
    got = sorted(line for _, line in t.poll())
    assert got == (["before", "fresh"] if read_from == "beginning" else ["fresh"])
    t.close()


def test_the_source_reports_its_line_counts_for_the_metrics(tmp_path: Path) -> None:
    """WARN lines matter to an operator: the source counts them (and undecodable lines)."""
    log = tmp_path / "nccl.1.log"
    log.write_text(
        "node-01:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1024 "
        "datatype 7 op 0 root 0 comm 0x78cf [nranks=8] stream 0x2\n"
        "node-01:1:1 [0] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by peer\n"
        "node-01:1:1 [0] transport/net.cc:1 NCCL WARN NET/IB : Got completion with error 12\n"
        "node-01:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count garbage\n"
        "epoch 3 loss 0.25\n"
    )
    cfg = NcclTailConfig(enabled=True, paths=(str(log),), read_from="beginning")
    source = NcclTail(cfg, clock=FakeClock(), state_file=tmp_path / "state.json")
    out = asyncio.run(collect_until(source, SourceStats))
    (stats,) = [r for r in out if isinstance(r, SourceStats)]
    assert stats.values["lines"] == 5
    assert stats.values["coll_lines"] == 1
    assert stats.values["warn_lines"] == 2
    assert stats.values["unparsed_lines"] == 1
    assert stats.values["files"] == 1


# -- the bulk path (poll_text + decode_texts) reads exactly what the per-line path reads --------

_HOSTS = [
    "gpu-node-01:4242:4243 [3] ",
    "node-b:7:7 [0] ",
    "h:1:2 [-1] ",
    "xopCountx:5:5 [1] ",  # "opCount" in the host: the fast path declines the line
    "xopCountx:007:5 [1] ",  # ... and the full parser writes the pid without its zeros
    "node-c:0042:1 [2] ",
    "bad(host):1:1 [0] ",
    "fq.dn:1:1 [0] ",  # a '.' never is in a host: the fast paths leave the line to the parser
    "2860.208008node-d:3:3 [0] ",  # a record glued after a float
    "h:1:1 [0]",  # no blank before "NCCL"
    "",  # the record lost its prefix
]
_LAUNCHERS = ["", "[rank0]:", "0: ", "[1,0]<stdout>:", "(RayTrainWorker pid=12, ip=10.0.0.1) ",
              "[56] ", "junk opCount ", "x y ", "\x1b[36m[default0]:\x1b[0m",
              "2026-05-05T06:16:47.25Z [rank1]:"]  # fmt: skip
_PTRS = ["0x7f0000", "(nil)", "0x55AA", "0x7f3b00200000"]
_TAILS = ["", " stream 0x55bb", " stream (nil)", " stream 0x55bb task 3 globalrank 7",
          " NCCL INFO x", " opCount 1", " Nope o", " stream 0x1" + " pad" * 300]  # fmt: skip
_INFOS = ["NCCL INFO Channel 00/02 : 0 1 2 3", "NCCL INFO Using network IB",
          "NCCL INFO NCCL version 2.28.3+cuda12.8"]  # fmt: skip
_GLUE = ["", " ", "[default1]:", "x", " time 2860.208008"]
_ODD_STAMPS = [
    "1970-01-01 00:00:00",
    "1970-01-01 00:00:00.",  # no digit after the point: no timestamp
    "1970-01-01 00:00:00.7",
    "1970-01-01 00:00:00.123456789",
    "1970-01-01 00:00:00.1234567891",  # ten digits: cut at nine
    "2026-12-31 23:59:60.999999",  # a leap second
    "0000-01-01 00:00:00.5",  # an impossible date
    "2026-05-05 06:16:47.5 ",
    "2026-05-05  6:16:47.5",
    "2026-05-05T06:16:47.5",
    "2026-05-05 06:16:47,5",
    "2026-05-05 opCount 16:47",  # a second "opCount": the fast path declines the line
    "NCCL 2026-05-05 06:16:47",
]
_OPS = ["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Send", "Recv", "AlltoAll",
        "Gather", "Scatter", "PutSignal", "Signal", "AllToAllPivot", "mscclFuncAllGather",
        "mscclpp_ncclAllReduce", "XopCount", "Foo"]  # fmt: skip


@st.composite
def _stamp(draw: st.DrawFn) -> str:
    """NCCL's "[%F %T[.%Nf]] " prefix, well-formed or not (N up to 12, impossible dates), or
    the same moment unbracketed or in RFC 3339 form (a custom format, kubectl, docker)."""
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return ""
    if kind == 7:
        sep, point = draw(st.sampled_from([(" ", "."), ("T", "."), (" ", ",")]))
        frac = draw(st.sampled_from(["", "5", "123456", "123456789"]))
        zone = draw(st.sampled_from(["", "Z", "+02:00", "-0500"]))
        return f"2026-05-05{sep}06:16:47" + (point + frac if frac else "") + zone + " "
    if kind == 6:
        return f"[{draw(st.sampled_from(_ODD_STAMPS))}] "
    second = draw(st.integers(0, 60))
    day = draw(st.sampled_from(["2026-05-05", "2026-02-30", "1970-01-01", "2026-12-31"]))
    hour = draw(st.sampled_from(["06:16", "00:00"]))  # 1970-01-01 00:00: the fraction shows
    digits = draw(st.integers(0, 12))
    frac = "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=digits,
                                 max_size=digits)))  # fmt: skip
    # kind 5 without digits: "%T." (no timestamp for NCCL's pattern)
    text = f"{day} {hour}:{second:02d}" + (f".{frac}" if digits or kind == 5 else "")
    if kind == 4:  # a character that is not NCCL's
        at = draw(st.integers(0, len(text) - 1))
        text = (
            text[:at]
            + draw(st.sampled_from(["x", "\x00", "\uff12", "]", " ", "\u00b2"]))
            + text[at + 1 :]
        )
    return f"[{text}] "


@st.composite
def _body(draw: st.DrawFn) -> str:
    """A message of any NCCL version: COLL (2.3.5 to 2.29, RCCL), Init, WARN, other INFO."""
    kind = draw(st.integers(0, 9))
    comm = draw(st.sampled_from(["0x55aa", "0x55ab", "0x9"]))
    if kind <= 4:
        op = draw(st.sampled_from(_OPS))
        count = draw(st.sampled_from([0, 1, 1024, 7382228, 2**40]))
        opcount = draw(st.sampled_from(["0", "1a", "139d", "FFFF"]))
        send, recv = draw(st.sampled_from(_PTRS)), draw(st.sampled_from(_PTRS))
        dtype, redop = draw(st.integers(0, 12)), draw(st.sampled_from([0, -1, 2]))
        root, nranks = draw(st.integers(0, 3)), draw(st.sampled_from([0, 1, 8, 64]))
        acc = draw(st.sampled_from(["", "", " acc (nil)"]))  # RCCL 2.2x: "acc %p"
        level = draw(st.sampled_from(["NCCL INFO", "NCCL INFO", "\x1b[32mNCCL INFO\x1b[0m"]))
        body = (
            f"{level} {op}: opCount {opcount} sendbuff {send} recvbuff {recv}{acc} count {count} "
            f"datatype {dtype} op {redop} root {root} comm {comm} [nranks={nranks}]"
        )
        tail = draw(st.sampled_from(_TAILS))
        if kind == 4:  # cut short, as a launcher or a crash leaves it
            return (body + tail)[: draw(st.integers(0, len(body) + len(tail)))]
        return body + tail
    if kind == 5:  # 2.3.5: no op name, a size in bytes, root only for broadcast/reduce
        tag = draw(st.sampled_from(["", " root 2"]))
        return (f"NCCL INFO opCount 1f sendbuff 0x1 recvbuff 0x1 count 1024 size 4096 datatype 7 "
                f"op 0{tag} comm {comm} [nranks=8] stream 0x2")  # fmt: skip
    if kind == 6:
        cid = draw(st.sampled_from(["58cdb93b4894c109", "a1", "ff00"]))
        rank = draw(st.integers(0, 3))
        if draw(st.booleans()):  # the topology line (2.20+) names the rank too
            return (f"NCCL INFO comm {comm} rank {rank} nRanks 8 nNodes 1 localRanks 8 "
                    f"localRank {rank} MNNVL 0")  # fmt: skip
        return (f"NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks "
                f"{draw(st.sampled_from([8, 64]))} cudaDev 0 nvmlDev 0 busId 18000 commId 0x{cid} "
                f"- Init {draw(st.sampled_from(['START', 'COMPLETE']))}")  # fmt: skip
    if kind == 7:
        return "misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by peer"
    if kind == 8:
        return draw(st.sampled_from(_INFOS))
    return draw(st.text(max_size=30))


@st.composite
def _line(draw: st.DrawFn) -> str:
    """One log line (no newline): NCCL records behind launcher tags, glued records, junk."""
    kind = draw(st.integers(0, 9))
    if kind <= 5:
        line = draw(st.sampled_from(_LAUNCHERS)) + draw(_stamp()) + draw(st.sampled_from(_HOSTS))
        line += draw(_body())
    elif kind == 6:  # two records glued by a launcher
        line = draw(_stamp()) + _HOSTS[0] + draw(_body()) + draw(st.sampled_from(_GLUE))
        line += draw(_stamp()) + draw(st.sampled_from(_HOSTS)) + draw(_body())
    elif kind == 7:  # what pushes the bulk pattern's loose loops across a line end
        line = draw(st.sampled_from(["", "nospaces", "[", "[no close", "a b", "x NCCL INFO y"]))
    else:
        line = (
            draw(st.text(max_size=60))
            if kind == 8
            else draw(st.binary(max_size=40)).decode("utf-8", errors="replace")
        )
    line = line.replace("\n", " ")
    return line + draw(st.sampled_from(["", "", "", "\r"]))


def _bulk_decoder(join: int = 1 << 18, caches: tuple[int, int] | None = None) -> LiveDecoder:
    """A decoder that takes even the smallest text through the bulk pattern (and, with
    ``caches`` = (line pieces, call kinds), forgets what it caches all the time)."""
    decoder = LiveDecoder()
    decoder.SMALL_CHARS = 0
    decoder.JOIN_CHARS = join
    if caches is not None:
        decoder.MAX_PAIRS, decoder.MAX_KINDS = caches
    return decoder


def _line_by_line(decoder: LiveDecoder, lines: list[str]) -> list[FastCall]:
    """The calls of decode_batch's per-line loop: fast path, else the full decode."""
    calls: list[FastCall] = []
    for line in lines:
        call = decoder.fast(line)
        if call is not None:
            calls.append(call)
        elif "NCCL " in line or "opCount " in line:
            calls.extend((c.timestamp_s, c.op, c.s_bytes, c.nranks or 0, c.comm, c.process, c.peer)
                         for c in decoder.decode(line))  # fmt: skip
    return calls


def _in_chunks(decoder: LiveDecoder, texts: list[str]) -> list[FastCall]:
    """The calls of decode_chunks, as the per-line path gives them (NaN stamp: None)."""
    stamps, kinds = decoder.decode_chunks(texts)
    return [(None if np.isnan(stamp) else stamp, *decoder.kind(kind))
            for stamp, kind in zip(stamps.tolist(), kinds.tolist(), strict=True)]  # fmt: skip


def _tail_source() -> NcclTail:
    # The reference paths these tests compare with place one stamp at a time, which cannot
    # tell a backlog read; the backlog rule has its own tests (test_arrival_lag.py).
    return NcclTail(NcclTailConfig(enabled=True, paths=("x",)), clock=FakeClock(), backlog_s=None)


def _assert_same_batch(new: CallBatch | None, old: CallBatch | None) -> None:
    assert (new is None) == (old is None)
    if new is None or old is None:
        return
    np.testing.assert_array_equal(new.times, old.times)  # the same doubles, NaN where NaN
    np.testing.assert_array_equal(new.s_bytes, old.s_bytes)
    assert new.times.dtype == old.times.dtype
    assert new.s_bytes.dtype == old.s_bytes.dtype
    assert list(new.ops.items()) == list(old.ops.items())
    assert (new.nranks, new.processes, new.comm_id) == (old.nranks, old.processes, old.comm_id)
    np.testing.assert_array_equal(new.key_ids, old.key_ids)
    assert new.key_ids.dtype == old.key_ids.dtype == np.int32
    assert new.key_ids.shape == new.times.shape
    assert new.keys == old.keys
    # every key is used, numbered in order of its first call
    _, first = np.unique(new.key_ids, return_index=True)
    assert first.size == len(new.keys)
    assert (np.diff(first) > 0).all()


def _assert_same_decoders(new: LiveDecoder, old: LiveDecoder) -> None:
    assert (new.warn_lines, new.unparsed_lines) == (old.warn_lines, old.unparsed_lines)
    assert new._comm_ids == old._comm_ids
    assert new._ranks == old._ranks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(_line(), max_size=25), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 25), max_size=4),
    join=st.sampled_from([0, 300, 1 << 18]),
    caches=st.sampled_from([None, (3, 2), (60, 2)]),
)
def test_bulk_decoding_equals_the_per_line_path(
    batches: list[list[str]], cuts: list[int], join: int, caches: tuple[int, int] | None
) -> None:
    """decode_texts over chunks of lines gives the batch decode_batch gives line by line:
    the same call times (lag state carried across batches), sizes, op totals, nranks,
    processes and job comm id, and the same WARN/unparsed counts and comm ids; underneath,
    decode_chunks gives the same calls as the per-line loop, NCCL timestamps bit for bit."""
    old_decoder, new_decoder = LiveDecoder(), _bulk_decoder(join, caches)
    old_calls, new_calls = LiveDecoder(), _bulk_decoder(join, caches)
    old_source, new_source = _tail_source(), _tail_source()
    for k, lines in enumerate(batches):
        arrival = 1.78e9 + 0.25 * k
        bounds = sorted({0, len(lines), *(c for c in cuts if c < len(lines))})
        texts = ["".join(f"{ln}\n" for ln in lines[a:b]) for a, b in itertools.pairwise(bounds)]
        assert _in_chunks(new_calls, texts) == _line_by_line(old_calls, lines)
        _assert_same_decoders(new_calls, old_calls)
        old = decode_batch(old_decoder, lines, arrival, old_source._time)
        new = decode_texts(new_decoder, texts, arrival, new_source._times)
        _assert_same_batch(new, old)
        _assert_same_decoders(new_decoder, old_decoder)
        assert new_source._lag == old_source._lag


def test_a_batch_says_when_its_calls_were_stamped_on_arrival() -> None:
    """Lines without NCCL's timestamp are stamped when read: the batch's times are then only
    as fine as the poll (the estimator bins them per poll); timestamped lines keep 0."""
    coll = (
        "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 "
        "datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\n"
    )
    bare = decode_texts(LiveDecoder(), [coll], 5.0, _tail_source()._times, 0.2)
    assert bare is not None
    assert bare.times.tolist() == [5.0]
    assert bare.time_resolution_s == 0.2
    stamped = decode_texts(
        LiveDecoder(), ["[2026-12-01 01:00:00.250000] " + coll], 5.0, _tail_source()._times, 0.2
    )
    assert stamped is not None
    assert stamped.time_resolution_s == 0.0
    # NCCL's default format "[%F %T] ": whole seconds
    whole = decode_texts(
        LiveDecoder(), ["[2026-12-01 01:00:00] " + coll] * 3, 5.0, _tail_source()._times, 0.2
    )
    assert whole is not None
    assert whole.time_resolution_s == 1.0


def test_bulk_decoding_of_a_simulated_job_equals_the_per_line_path() -> None:
    calls = [LoggedCall(time_s=1.0 + i * 1e-3, op=("AllReduce", "AllGather", "Broadcast")[i % 3],
                        count=1 << (10 + i % 9), datatype=9, local_rank=i % 8)
             for i in range(3000)]  # fmt: skip
    lines = list(render_nccl_log(calls, hostname="node-a", nranks=16, first_rank=0,
                                 local_ranks=8, start_time_s=0.5, seed=3))  # fmt: skip
    text = "".join(f"{ln}\n" for ln in lines)
    old_source, new_source = _tail_source(), _tail_source()
    old = decode_batch(LiveDecoder(), lines, 5.0, old_source._time)
    cut = text.index("\n", 40_000) + 1  # default thresholds: both chunks go in bulk
    new = decode_texts(LiveDecoder(), [text[:cut], text[cut:]], 5.0, new_source._times)
    _assert_same_batch(new, old)
    assert new is not None
    assert new.times.size == 3000
    assert new.comm_id == f"{job_comm_id(3):x}"


@pytest.mark.parametrize(
    "text",
    [
        # a line without blanks ahead of a COLL line without timestamp: "[^ ]+" runs on
        "nospaces\nh:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 "
        "datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\n",
        # "[" without "]": the loose timestamp runs into the next line's
        "[x\n[2026-05-05 06:16:47.5] h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 "
        "recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\n",
        # a NUL inside the timestamp, and one after the record
        "[2026-05-05 06:16:47.5\x00] h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 "
        "recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\n"
        "[2026-05-05 06:16:47.5] h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 "
        "recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\x00\n",
        # ten fraction digits: the per-line path cuts them at nine
        "[2026-05-05 06:16:47.1234567891] h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff "
        "0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x2\n",
    ],
)
def test_bulk_decoding_of_lines_the_loose_pattern_misreads(text: str) -> None:
    old_source, new_source = _tail_source(), _tail_source()
    old = decode_batch(LiveDecoder(), text.split("\n")[:-1], 7.0, old_source._time)
    new = decode_texts(_bulk_decoder(), [text], 7.0, new_source._times)
    _assert_same_batch(new, old)
    assert old is not None
    assert old.times.size >= 1


def test_bulk_decoding_of_every_line_form_equals_the_per_line_path() -> None:
    """Every launcher tag, timestamp form, host, message and tail against each other."""
    stamps = ["", "[2026-05-05 06:16:47] ", "[2026-05-05 06:16:47.123456] ",
              *(f"[{text}] " for text in _ODD_STAMPS)]  # fmt: skip
    bodies = [f"NCCL INFO {op}: opCount 1a sendbuff {ptr} recvbuff 0x7f0000 count 1024 datatype "
              f"{dtype} op 0 root 1 comm 0x55aa [nranks=8]"
              for op, ptr, dtype in [("AllGather", "0x7f0000", 9), ("Send", "(nil)", 99),
                                     ("XopCount", "0x55AA", 7)]]  # fmt: skip
    lines = [
        launcher + stamp + host + body + tail
        for launcher in _LAUNCHERS
        for stamp in stamps
        for host in _HOSTS
        for body in bodies
        for tail in _TAILS
    ]
    lines += [stamps[2] + _HOSTS[0] + "NCCL INFO ncclCommInitRank comm 0x55aa rank 0 nranks 8 "
              "commId 0xff00 - Init COMPLETE", "", "x"]  # fmt: skip
    texts = ["".join(f"{ln}\n" for ln in lines[k : k + 97]) for k in range(0, len(lines), 97)]
    new_decoder, old_decoder = _bulk_decoder(), LiveDecoder()
    assert _in_chunks(new_decoder, texts) == _line_by_line(old_decoder, lines)
    _assert_same_decoders(new_decoder, old_decoder)


def test_call_kinds_forgotten_between_batches_are_not_reused() -> None:
    """Past MAX_KINDS the kinds restart from 0: no cached line piece may keep an old id."""
    rest = (
        ": opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x9 [nranks=2]"
    )
    lines = [f"h:1:1 [0] NCCL INFO {op}{rest}" for op in ("Send", "Recv", "AllReduce")]
    new_decoder, old_decoder = _bulk_decoder(caches=(100, 2)), LiveDecoder()
    for batch in (lines, lines[::-1], lines[1:]):
        texts = ["".join(f"{ln}\n" for ln in batch)]
        assert _in_chunks(new_decoder, texts) == _line_by_line(old_decoder, batch)


def test_bulk_timestamps_are_the_per_line_doubles() -> None:
    """Near the epoch a timestamp is its fraction alone: any other rounding would show."""
    rng = np.random.default_rng(7)
    fracs = [str(int(x)).zfill(d) for d in range(1, 10) for x in rng.integers(0, 10**d, 300)]
    body = "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 "
    body += "op 0 root 0 comm 0x9 [nranks=2] stream 0x2"
    lines = [f"[1970-01-01 00:00:{k % 3:02d}.{frac}] {body}" for k, frac in enumerate(fracs)]
    texts = ["".join(f"{ln}\n" for ln in lines[k : k + 500]) for k in range(0, len(lines), 500)]
    assert _in_chunks(_bulk_decoder(), texts) == _line_by_line(LiveDecoder(), lines)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(-1e10, 1e10)), max_size=30),
    st.lists(st.floats(0.0, 1e6), min_size=1, max_size=3),
    st.one_of(st.none(), st.floats(-1e10, 1e10)),
)
def test_placing_many_stamps_at_once_equals_one_at_a_time(
    stamps: list[float | None], arrivals: list[float], lag: float | None
) -> None:
    old, new = _tail_source(), _tail_source()
    if lag is not None:  # a lag already known from an earlier line
        old._time(-lag, 0.0)
        new._times(np.array([-lag]), 0.0)
    for arrival in arrivals:
        one = [old._time(s, arrival) for s in stamps]
        many = new._times(np.array([np.nan if s is None else s for s in stamps]), arrival)
        np.testing.assert_array_equal(many, np.array(one, dtype=np.float64))
        assert new._lag == old._lag


_LONG = st.builds(lambda n, c: c * n, st.integers(120, 900), st.sampled_from(["y", "\u00e9"]))
_JUNK = [b"\xff", b"\xe2\x82", b"\r"]  # bytes that are not UTF-8, a cut sequence, a lone CR


class _LineTailer(Tailer):
    """The tailer as it read before the bulk path (one list of lines per read), as a reference."""

    def _read_chunk(self, f: _File) -> list[str]:
        try:
            data = os.pread(f.fd, nccl_tail.READ_CHUNK, f.offset)
        except OSError:
            return []
        if not data:
            return []
        if len(f.head) < nccl_tail.FINGERPRINT_BYTES and f.offset < nccl_tail.FINGERPRINT_BYTES:
            f.head = (f.head + data[: nccl_tail.FINGERPRINT_BYTES - f.offset])[
                : nccl_tail.FINGERPRINT_BYTES
            ]
        f.offset += len(data)
        last = data.rfind(b"\n")
        if last < 0:
            if not f.skipping:
                f.partial += data
                if len(f.partial) > self._max:
                    self.stats.overlong_lines += 1
                    f.partial.clear()
                    f.skipping = True
            return []
        head, tail = data[: last + 1], data[last + 1 :]
        if f.skipping:
            head = head[head.find(b"\n") + 1 :]
            f.skipping = False
        elif f.partial:
            head = bytes(f.partial) + head
            f.partial.clear()
        lines = head.decode("utf-8", errors="replace").split("\n")
        lines.pop()
        if any(len(line) > self._max for line in lines):
            kept = [line for line in lines if len(line) <= self._max]
            self.stats.overlong_lines += len(lines) - len(kept)
            lines = kept
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        f.partial += tail
        if len(f.partial) > self._max:
            self.stats.overlong_lines += 1
            f.partial.clear()
            f.skipping = True
        self.stats.lines += len(lines)
        return ["".join(f"{line}\n" for line in lines)] if lines else []


@pytest.mark.parametrize("max_line", [256, 257, 1000])
def test_the_overlong_check_sees_a_line_at_every_offset(max_line: int) -> None:
    tail = Tailer((), max_line_bytes=max_line)
    for at in range(max_line + 3):
        raw = bytearray(b"a" * at + b"\n" + b"y" * (max_line + 1) + b"\nz\n")
        assert tail._may_be_overlong(raw, 0, len(raw))
        assert tail._may_be_overlong(raw, at % 7, len(raw))


@pytest.mark.parametrize("max_line", [256, 257, 1000])
def test_an_overlong_line_is_found_wherever_it_sits_in_a_read(
    tmp_path: Path, max_line: int
) -> None:
    """The cheap over-long check looks at aligned blocks: no offset may slip past it."""
    path = tmp_path / "x.log"
    data = "".join(
        f"{'a' * at}\n{'y' * (max_line + 1)}\n{'z' * max_line}\nok\n" for at in range(80)
    )
    path.write_text(data)
    old_tail = _LineTailer((str(path),), read_from="beginning", max_line_bytes=max_line)
    new_tail = Tailer((str(path),), read_from="beginning", max_line_bytes=max_line)
    old_lines = [line for _, line in old_tail.poll()]
    assert [line for _, line in new_tail.poll()] == old_lines
    assert new_tail.stats == old_tail.stats
    assert new_tail.stats.overlong_lines == 80
    old_tail.close()
    new_tail.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.one_of(_line(), _LONG, st.just("\udcff")), max_size=40),
    junk=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(_JUNK)), max_size=4),
    pieces=st.lists(st.integers(1, 700), min_size=1, max_size=12),
    chunk=st.integers(16, 1500),
    max_line=st.integers(256, 420),
)
def test_tailing_in_bulk_equals_tailing_line_by_line(
    lines: list[str], junk: list[tuple[int, bytes]], pieces: list[int], chunk: int, max_line: int
) -> None:
    """The same bytes, appended in random pieces (splitting lines and UTF-8 sequences) and
    read in random chunk sizes with over-long lines, give the same lines and counts through
    poll_text as through the line-by-line reader, and the same batches through decode_texts."""
    data = bytearray("".join(f"{ln}\n" for ln in lines).encode("utf-8", errors="surrogateescape"))
    for at, extra in junk:
        data[at % (len(data) + 1) : at % (len(data) + 1)] = extra
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(nccl_tail, "READ_CHUNK", chunk):
        path = Path(tmp) / "nccl.log"
        path.write_bytes(b"")
        old_tail = _LineTailer((str(path),), read_from="beginning", max_line_bytes=max_line)
        new_tail = Tailer((str(path),), read_from="beginning", max_line_bytes=max_line)
        old_decoder, new_decoder = LiveDecoder(), _bulk_decoder()
        old_calls, new_calls = LiveDecoder(), _bulk_decoder()
        old_source, new_source = _tail_source(), _tail_source()
        at, k = 0, 0
        while at < len(data) or k < len(pieces) + 2:
            size = pieces[k % len(pieces)]
            with path.open("ab") as fh:
                fh.write(data[at : at + size])
            at, k = at + size, k + 1
            old_lines = [line for _, line in old_tail.poll()]
            texts = [text for _, text in new_tail.poll_text()]
            assert [ln for text in texts for ln in text.split("\n")[:-1]] == old_lines
            assert all(text.endswith("\n") for text in texts)
            assert new_tail.stats == old_tail.stats
            assert _in_chunks(new_calls, texts) == _line_by_line(old_calls, old_lines)
            arrival = 10.0 + k
            old = decode_batch(old_decoder, old_lines, arrival, old_source._time)
            new = decode_texts(new_decoder, texts, arrival, new_source._times)
            _assert_same_batch(new, old)
            _assert_same_decoders(new_decoder, old_decoder)
        old_tail.close()
        new_tail.close()


def test_a_writer_that_keeps_its_file_after_create_rotation_is_still_followed(
    tmp_path: Path,
) -> None:
    """NCCL never reopens its log: after logrotate's default rotation (rename, then a new
    empty file at the path) it writes on into the renamed file. That file was let go at the
    first poll that found nothing new in it, and every later line was lost."""
    path = tmp_path / "nccl.node1.77.log"
    tailer = Tailer((str(tmp_path / "*.log"),), read_from="beginning")
    with path.open("a", buffering=1) as nccl:  # line-buffered, as NCCL's fflush per line
        nccl.write("before\n")
        assert [line for _, line in tailer.poll()] == ["before"]
        os.replace(path, tmp_path / "nccl.node1.77.log.1")
        path.write_text("")
        assert tailer.poll() == []  # rotated: nothing new anywhere
        assert tailer.poll() == []
        nccl.write("after\n")
        assert [line for _, line in tailer.poll()] == ["after"]
    tailer.close()


def test_many_log_files_hold_a_bounded_number_of_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-process logs pile up over months: one descriptor each, forever, took all 1,024 a
    process has (EMFILE) and the daemon died. Past ``MAX_OPEN_FILES`` the least recently
    written are parked (closed) and reopened when they change: no line is lost, and a file
    rotated or truncated while parked is read from its start."""
    monkeypatch.setattr(nccl_tail, "MAX_OPEN_FILES", 8)
    paths = [tmp_path / f"nccl.node1.{pid}.log" for pid in range(30)]
    for k, p in enumerate(paths):
        p.write_text(f"line {k} a\n")
    t = Tailer((str(tmp_path / "*.log"),), read_from="beginning")
    got: list[str] = []
    for _ in range(3):
        got += [line for _, line in t.poll()]
        assert t.open_files <= 8
    assert sorted(got) == sorted(f"line {k} a" for k in range(30))
    # Every file written again, the parked ones too: each line once, in order per file.
    for k, p in enumerate(paths):
        with p.open("a") as fh:
            fh.write(f"line {k} b\n")
    got = []
    for _ in range(3):
        got += [line for _, line in t.poll()]
        assert t.open_files <= 8
    assert sorted(got) == sorted(f"line {k} b" for k in range(30))
    # Rotated (a new file at the path) and truncated (copytruncate) while parked.
    os.replace(paths[0], tmp_path / "rotated.old")
    paths[0].write_text("fresh 0\n")
    paths[1].write_text("fresh 1\n")  # shorter than what was read: rewritten
    got = []
    for _ in range(3):
        got += [line for _, line in t.poll()]
    assert "fresh 0" in got
    assert "fresh 1" in got
    t.close()


def test_a_quiet_file_is_parked_and_woken_by_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nccl_tail, "PARK_QUIET_S", 60.0)
    path = tmp_path / "job.log"
    path.write_text("one\n")
    t = Tailer((str(path),), read_from="beginning")
    assert [line for _, line in t.poll()] == ["one"]
    os.utime(path, (1e9, 1e9))  # last written long ago
    t.poll()
    assert t.open_files == 0
    with path.open("a") as fh:
        fh.write("two\n")
    assert [line for _, line in t.poll()] == ["two"]
    assert t.open_files == 1
    t.close()


def test_an_unwritable_state_file_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An unwritable state_dir logged a warning every 5 s for as long as the agent ran."""
    path = tmp_path / "job.log"
    path.write_text("one\n")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    t = Tailer((str(path),), read_from="beginning", state_file=blocker / "offsets.json")
    with caplog.at_level("DEBUG", logger="collectors.nccl_tail"):
        for _ in range(4):
            t.save_state()
    said = [r for r in caplog.records if "cannot save tail state" in r.getMessage()]
    assert len(said) == 4
    assert [r.levelname for r in said] == ["WARNING", "DEBUG", "DEBUG", "DEBUG"]
    t.close()


def test_a_busy_file_is_read_to_its_end_in_one_poll(tmp_path: Path) -> None:
    """8 ranks' lines at 40 k/s in one file are 9 MB/s: one 1 MiB read a poll (5 MiB/s at the
    default 0.2 s poll) fell further behind every second. A poll reads up to 16 MiB a file."""
    path = tmp_path / "nccl.log"
    path.write_bytes(b"")
    tail = Tailer((str(path),), read_from="beginning")
    line = "x" * 229 + "\n"
    lines = 9 * (1 << 20) // len(line)
    path.write_text(line * lines)
    assert sum(text.count("\n") for _, text in tail.poll_text()) == lines
    assert tail.poll_text() == []


def test_what_a_poll_leaves_unread_is_reported(tmp_path: Path) -> None:
    """A log written faster than a poll reads (16 MiB a file) leaves bytes for the next one;
    the tailer says how many, for the operator's gauge, and 0 once it has caught up."""
    path = tmp_path / "nccl.log"
    path.write_bytes(b"")
    tail = Tailer((str(path), str(tmp_path / "other.log")), read_from="beginning")
    line = b"y" * 255 + b"\n"
    path.write_bytes(line * (20 * (1 << 20) // len(line)))
    (tmp_path / "other.log").write_bytes(line * 10)
    assert tail.stats.unread_bytes == 0
    tail.poll_text()
    assert tail.stats.unread_bytes == 4 << 20
    with path.open("ab") as fh:
        fh.write(line * 4)
    tail.poll_text()
    assert tail.stats.unread_bytes == 0
    assert tail.stats.totals()["unread_bytes"] == 0


def test_a_backlog_read_is_counted_but_not_timed() -> None:
    """A read that catches up on a backlog (collectors/_lag.py) leaves its calls unplaced:
    they count in the totals, and none lands in the window at the poll's time."""
    body = (
        "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 "
        "op 0 root 0 comm 0x9 [nranks=2] stream 0x2"
    )
    lines = [f"[2026-05-05 06:{m:02d}:00.000000] {body}\n" for m in range(30)]
    source = NcclTail(NcclTailConfig(enabled=True, paths=("x",)), clock=FakeClock())
    batch = decode_texts(LiveDecoder(), ["".join(lines)], 1e6, source._times)
    assert batch is not None
    assert batch.ops["AllReduce"][0] == 30
    assert batch.times.size == 0
    assert batch.s_bytes.size == batch.key_ids.size == 0
