"""Running a real source until it has delivered what a test waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from collectors._base import CounterBatch, CounterReading, Reading, Source


async def run_until(source: Source, done: Callable[[list[Reading]], bool]) -> list[Reading]:
    """Everything ``source`` emits until ``done`` holds for it; a failure of the source is
    raised here instead of looping forever."""
    out: list[Reading] = []
    task = asyncio.create_task(source.run(out.append))
    while not done(out):
        await asyncio.sleep(0)
        if task.done():
            task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return out


async def collect_until(source: Source, kind: type, n: int = 1) -> list[Reading]:
    """Everything ``source`` emits until its ``n``-th reading of type ``kind``."""
    return await run_until(source, lambda out: sum(isinstance(r, kind) for r in out) >= n)


def polls(readings: list[Reading]) -> int:
    """Counter polls among ``readings`` (a :class:`CounterBatch` counts as its polls)."""
    return sum(
        len(r) if isinstance(r, CounterBatch) else isinstance(r, CounterReading) for r in readings
    )


def unbatched(readings: list[Reading]) -> list[Reading]:
    """``readings`` with every :class:`CounterBatch` given back as its polls, in place."""
    out: list[Reading] = []
    for r in readings:
        if isinstance(r, CounterBatch):
            out.extend(r.readings())
        else:
            out.append(r)
    return out


async def collect_counter_readings(source: Source, n: int) -> list[Reading]:
    """Everything ``source`` emits until its ``n``-th counter poll, each poll as its own
    :class:`CounterReading` (a sampler hands polls over in batches)."""
    return unbatched(await run_until(source, lambda out: polls(out) >= n))
