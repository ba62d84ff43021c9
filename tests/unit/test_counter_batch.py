"""Counter batches: a hand-over of polls as one reading must change no result."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.clock import MonotonicClock
from agent.record import Recorder
from agent.windows import CounterWindow, DeviceTable
from collectors._base import (
    CounterBatch,
    CounterReading,
    DeviceInfo,
    Reading,
    coalesce_counters,
)
from collectors._sampler import Sampler

#: Three transmit columns (their deltas are summed per poll, in column order: with three, the
#: order changes the rounding), two receive columns and one without a direction.
COLUMNS = ("a_tx_bytes", "b_tx_bytes", "c_tx_bytes", "a_rx_bytes", "b_rx_bytes", "port_bytes")
#: Where a counter starts: low, near a 32-bit wrap, beyond 2^53, near a 64-bit wrap.
STARTS = (0, 1_000, 2**32 - 50_000, 2**60, 2**63, 2**64 - 50_000)


@st.composite
def poll_streams(draw: st.DrawFn) -> list[list[Reading]]:
    """Hand-overs of polls with gaps, devices that appear, resets, wraps, late polls."""
    value = {c: draw(st.sampled_from(STARTS)) for c in COLUMNS}
    width = {c: 32 if value[c] < 2**32 else 64 for c in COLUMNS}
    live = (
        set(COLUMNS) if draw(st.booleans()) else draw(st.sets(st.sampled_from(COLUMNS), min_size=1))
    )
    t = 100.0
    polls: list[Reading] = []
    for _ in range(draw(st.integers(1, 60))):
        # Rare events, so that many hand-overs have none (those take the array path).
        t += {0: 0.0, 1: -0.004, 2: 0.0103}.get(draw(st.integers(0, 30)), 0.01)
        if draw(st.integers(0, 30)) == 0:
            live.add(draw(st.sampled_from(COLUMNS)))  # a device appears
        values: dict[str, int] = {}
        for c in COLUMNS:
            if c not in live:
                continue
            event = draw(st.integers(0, 40))
            if event == 0:  # a reset
                value[c] = draw(st.integers(0, 100))
            elif event <= 3:  # a jump (large enough that float sums round on 64-bit columns)
                value[c] = (value[c] + draw(st.integers(2**53, 2**62))) % 2 ** width[c]
            elif event > 4:  # 4: no traffic
                value[c] = (value[c] + draw(st.integers(1, 40_000))) % 2 ** width[c]
            if draw(st.integers(0, 40)) > 0:  # otherwise a gap: not read this poll
                values[c] = value[c]
        counters = {}
        if draw(st.integers(0, 5)) == 0:
            counters = {"a": {"tx_packets": draw(st.integers(0, 10**6))}}
        polls.append(CounterReading(t, values, counters))
        if draw(st.integers(0, 20)) == 0:
            polls.append(DeviceInfo(device="a", kind="rdma"))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(polls) - 1)), max_size=8)))
    bounds = [0, *cuts, len(polls)]
    return [polls[i:j] for i, j in itertools.pairwise(bounds) if j > i]


def _window_state(w: CounterWindow) -> object:
    rings = {d: r.view().tolist() for d, r in w._rings.items()}
    return (rings, w._columns, w._cumulative, w._last_time, w.resets, w.wraps, len(w))


@settings(max_examples=300, deadline=None)
@given(poll_streams())
def test_a_batch_gives_the_window_and_table_of_its_polls_one_by_one(
    handovers: list[list[Reading]],
) -> None:
    one, many = CounterWindow(64), CounterWindow(64)
    table_one, table_many = DeviceTable(), DeviceTable()
    for handover in handovers:
        for r in handover:
            if isinstance(r, CounterReading):
                one.add(r)
                table_one.add_reading("s", r)
        for item in coalesce_counters(handover):
            if isinstance(item, CounterBatch):
                many.add_batch(item)
                table_many.add_batch("s", item)
            elif isinstance(item, CounterReading):
                many.add(item)
                table_many.add_reading("s", item)
        assert _window_state(many) == _window_state(one)
        assert table_many.hop() == table_one.hop()
    grids_one, grids_many = one.grids(), many.grids()
    assert grids_one.keys() == grids_many.keys()
    for d, g in grids_one.items():
        np.testing.assert_array_equal(grids_many[d].rate, g.rate)


@settings(max_examples=200, deadline=None)
@given(poll_streams())
def test_coalescing_keeps_every_reading_and_its_place(handovers: list[list[Reading]]) -> None:
    for handover in handovers:
        back: list[Reading] = []
        for item in coalesce_counters(handover):
            if isinstance(item, CounterBatch):
                assert len(item) >= 2
                assert len(set(item.times.tolist())) <= len(item)
                back.extend(item.readings())
            else:
                back.append(item)
        assert back == handover


def _steady(n: int, start: float = 0.0) -> list[Reading]:
    return [
        CounterReading(start + 0.01 * k, {"a_tx_bytes": 1000 * k, "a_rx_bytes": 7 * k})
        for k in range(n)
    ]


def test_an_ordinary_batch_takes_the_array_path(monkeypatch: pytest.MonkeyPatch) -> None:
    w = CounterWindow(64)
    first, second = coalesce_counters(_steady(20)[:10]), coalesce_counters(_steady(20)[10:])
    assert len(first) == len(second) == 1
    assert isinstance(first[0], CounterBatch)
    assert isinstance(second[0], CounterBatch)
    w.add_batch(first[0])  # the window's first polls: one by one

    def no_single_add(reading: CounterReading) -> None:
        raise AssertionError("went poll by poll")

    monkeypatch.setattr(w, "add", no_single_add)
    w.add_batch(second[0])
    assert len(w) == 20
    assert w._last_time == pytest.approx(0.19)


def test_deltas_too_large_for_exact_sums_round_as_poll_by_poll() -> None:
    # Three transmit columns; one jumps by more than 2^53, so the float sum of a poll's deltas
    # depends on the order of the additions: the array path must add in column order too.
    readings = []
    for k in range(20):
        jump = 2**60 + 12_345 if k >= 12 else 0
        values = {"a_tx_bytes": 1000 * k + jump, "b_tx_bytes": 129 * k, "c_tx_bytes": 130 * k}
        readings.append(CounterReading(0.01 * k, values))
    one, many = CounterWindow(64), CounterWindow(64)
    for r in readings:
        one.add(r)
    polls: list[Reading] = list(readings)
    for handover in (polls[:10], polls[10:]):
        (batch,) = coalesce_counters(handover)
        assert isinstance(batch, CounterBatch)
        many.add_batch(batch)
    assert _window_state(many) == _window_state(one)


def test_values_that_are_no_uint64_are_not_batched() -> None:
    for bad in (-1, 2**64, 1.5, True):
        readings: list[Reading] = [
            CounterReading(0.0, {"a_tx_bytes": 1}),
            CounterReading(0.01, {"a_tx_bytes": bad}),  # type: ignore[dict-item]
        ]
        assert coalesce_counters(readings) == readings


def test_a_batch_is_recorded_as_every_poll(tmp_path: Path) -> None:
    polls = _steady(12)
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one, many = (
        Recorder(tmp_path / "one", wall_offset=0.0),
        Recorder(tmp_path / "many", wall_offset=0.0),
    )
    for r in polls:
        one.add("rdma", r)
    for item in coalesce_counters(polls):
        many.add("rdma", item)
    one.close()
    many.close()
    assert many.rows == one.rows == {"counters_rdma.csv": 12}
    text = (tmp_path / "many" / "counters_rdma.csv").read_text()
    assert text == (tmp_path / "one" / "counters_rdma.csv").read_text()


def test_the_sampler_hands_over_runs_of_polls_as_batches() -> None:
    n = 0

    def sweep() -> list[Reading]:
        nonlocal n
        n += 1
        return [CounterReading(float(n), {"x_tx_bytes": n})]

    got: list[Reading] = []

    async def main() -> None:
        task = asyncio.create_task(
            Sampler(MonotonicClock(), batch_s=0.05).run("x", 0.005, sweep, got.append)
        )
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert any(isinstance(r, CounterBatch) for r in got)
    values = []
    for r in got:
        polls = r.readings() if isinstance(r, CounterBatch) else [r]
        values += [p.values["x_tx_bytes"] for p in polls if isinstance(p, CounterReading)]
    assert values == list(range(1, n + 1))  # every poll, in order, none lost
