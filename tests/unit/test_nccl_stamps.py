"""NCCL logs stamped by the tools their output went through: journald, moreutils ``ts``, JSON
loggers, NCCL's own ``NCCL_DEBUG_TIMESTAMP_FORMAT="[%T.%6f] "``. Each read as having no
timestamps at all, so the log gave no T; undated ones must also survive midnight."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from collectors.nccl_log import LiveDecoder, parse_line, read_nccl_log
from collectors.nccl_stamps import UNDATED_LIMIT, UndatedClock, other_lead_time

Stamp = Callable[[datetime], str]


def _body(rank: int, op_count: int) -> str:
    return (
        f"node1:{1000 + rank}:{1000 + rank} [{rank}] NCCL INFO AllReduce: opCount {op_count:x} "
        "sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count 25000000 datatype 9 op 0 root 0 "
        f"comm 0x55d0c0a0b0c{rank} [nranks=2] stream 0x5581e2a0c0d0"
    )


def _log(start: datetime, stamp: Stamp, *, steps: int, period: float, ranks: int = 2) -> str:
    """``steps`` steps of two AllReduces per rank, ranks' lines interleaved as on one stdout;
    each step's length jitters by up to 1 % (the same steps for every stamp format)."""
    rng = np.random.default_rng(11)
    lines, at = [], 0.0
    for step in range(steps):
        for k in range(2):
            for r in range(ranks):
                t = start + timedelta(seconds=at + 0.003 * k + 2e-4 * r)
                lines.append(stamp(t) + _body(r, 2 * step + k))
        at += period * (1.0 + 0.01 * rng.uniform(-1.0, 1.0))
    return "\n".join(lines) + "\n"


FORMATS: dict[str, Stamp] = {
    "journalctl -o short-unix": lambda t: f"{t.timestamp():.6f} node1 python[1000]: ",
    "epoch milliseconds": lambda t: f"{round(t.timestamp() * 1e3)} ",
    "journalctl -o short-precise": lambda t: t.strftime("%b %d %H:%M:%S.%f node1 python[1000]: "),
    "syslog, space-padded day": lambda t: f"{t:%b} {t.day:2d} {t:%H:%M:%S.%f} node1 python: ",
    'NCCL "[%T.%6f] "': lambda t: t.strftime("[%H:%M:%S.%f] "),
    "ts %.T": lambda t: t.strftime("%H:%M:%S.%f "),
}


@pytest.mark.parametrize("name", FORMATS)
def test_launcher_stamps_time_the_steps(tmp_path: Path, name: str) -> None:
    start = datetime(2026, 3, 4, 9, 30, 0, tzinfo=UTC)
    log = tmp_path / "job.log"
    log.write_text(_log(start, FORMATS[name], steps=80, period=0.45))
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(0.45, rel=0.002)
    assert not any("no timestamps" in w for w in est.warnings)


def test_a_short_timed_log_says_it_is_short_not_untimed(tmp_path: Path) -> None:
    """Three stamped steps (6 calls) are too few for T; the warning said the log had no
    timestamps at all, and told the user to turn on the stamps it already had."""
    start = datetime(2026, 3, 4, 9, 30, 0, tzinfo=UTC)
    log = tmp_path / "short.log"
    log.write_text(_log(start, FORMATS['NCCL "[%T.%6f] "'], steps=3, period=0.45, ranks=1))
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s is None
    assert not any("no timestamps" in w for w in est.warnings)
    assert any("only 6 timed COLL call(s)" in w for w in est.warnings)


@pytest.mark.parametrize("name", ['NCCL "[%T.%6f] "', "journalctl -o short-precise"])
def test_undated_stamps_run_on_past_midnight_and_new_year(tmp_path: Path, name: str) -> None:
    """Time-of-day stamps restart at 00:00:00 (syslog's at 1 January): the calls after it were
    placed a day (a year) before the others, and the window spanned all of it."""
    start = datetime(2025, 12, 31, 23, 59, 30, tzinfo=UTC)
    log = tmp_path / "midnight.log"
    log.write_text(_log(start, FORMATS[name], steps=120, period=0.5))
    times = read_nccl_log(log).call_times_s
    dated = tmp_path / "dated.log"
    dated.write_text(_log(start, lambda t: t.strftime("[%F %T.%f] "), steps=120, period=0.5))
    want = read_nccl_log(dated).call_times_s
    assert float(times.max() - times.min()) == pytest.approx(float(want.max() - want.min()))
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.002)


def test_each_process_counts_its_own_midnight(tmp_path: Path) -> None:
    """Two ranks' logs read one after the other: the second file starting "earlier" than the
    first ended is no midnight."""
    start = datetime(2026, 5, 1, 11, 0, 0, tzinfo=UTC)
    stamp = FORMATS['NCCL "[%T.%6f] "']
    paths = []
    for r in range(2):
        body = [stamp(start + timedelta(hours=14 * s / 40)) + _body(r, s) for s in range(40)]
        paths.append(tmp_path / f"rank{r}.log")
        paths[-1].write_text("\n".join(body) + "\n")
    from collectors.nccl_log import read_nccl_logs

    times = read_nccl_logs(paths).call_times_s
    assert float(times.max() - times.min()) == pytest.approx(14 * 39 / 40 * 3600, abs=1e-3)


def test_live_decoder_counts_midnight_across_polls() -> None:
    start = datetime(2026, 5, 1, 23, 59, 58, tzinfo=UTC)
    text = _log(start, FORMATS['NCCL "[%T.%6f] "'], steps=8, period=0.5)
    lines = text.splitlines(keepends=True)
    decoder = LiveDecoder()
    polls = ("".join(lines[:12]), "".join(lines[12:]))
    got = [decoder.decode_chunks([chunk])[0] for chunk in polls]
    times = np.concatenate(got)
    assert times.size == 8 * 2 * 2
    assert bool(np.all(np.diff(times) > 0))
    assert 7 * 0.5 * 0.99 < float(times[-1] - times[0]) < 7 * 0.5 * 1.01 + 0.004


def test_a_numeric_host_is_no_time_of_day() -> None:
    """host "10", pid 12, tid 34: "10:12:34 [0] NCCL INFO ..." has no timestamp."""
    event = parse_line(
        "10:12:34 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 "
        "datatype 7 op 0 root 0 comm 0x2 [nranks=2] stream 0x3"
    )
    assert event is not None
    assert event.host == "10"
    assert event.timestamp_s is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1767225600.25 x", 1767225600.25),
        ("1767225600250 x", 1767225600.25),
        ("1767225600250000 x", 1767225600.25),
        ("Mar  1 00:00:01.5 x", (31 + 29) * 86400 + 1.5),
        ("Feb 29 12:00:00 x", (31 + 28) * 86400 + 43200.0),
        ("[23:59:60.5] x", 86400.5),
    ],
)
def test_stamp_values(text: str, seconds: float) -> None:
    assert other_lead_time(text) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize("text", ["Feb 30 12:00:00 x", "24:00:00.1 x", "0: x", "12345678 x"])
def test_impossible_or_short_stamps_are_none(text: str) -> None:
    assert other_lead_time(text) is None


def test_undated_clock_leaves_dated_stamps_and_nan() -> None:
    stamps = np.array([1.7e9, np.nan, 86000.0, 100.0, 1.7e9 + 1])
    out = UndatedClock().unwrap(stamps, np.zeros(5, dtype=np.intp))
    assert out[0] == 1.7e9
    assert np.isnan(out[1])
    assert out[4] == 1.7e9 + 1
    assert out[3] == 86500.0  # 100 s after midnight, after 86000 s
    assert out[3] < UNDATED_LIMIT
