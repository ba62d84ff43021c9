"""The NCCL log tailer: no line lost or duplicated across rotation, truncation, restarts.

A Hypothesis state machine drives a real directory of log files with the actions a job,
logrotate and an agent restart perform, and checks every poll against a model of what must
have been delivered.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent.clock import FakeClock
from collectors._base import SourceStats
from collectors.nccl_tail import NcclTail, NcclTailConfig, Tailer
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
