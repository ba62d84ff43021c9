"""Running a real source until it has delivered what a test waits for."""

from __future__ import annotations

import asyncio

from collectors._base import CounterReading, Reading, Source


async def collect_until(source: Source, kind: type, n: int = 1) -> list[Reading]:
    """Everything ``source`` emits until its ``n``-th reading of type ``kind``; a failure of
    the source is raised here instead of looping forever."""
    out: list[Reading] = []
    task = asyncio.create_task(source.run(out.append))
    while sum(isinstance(r, kind) for r in out) < n:
        await asyncio.sleep(0)
        if task.done():
            task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return out


async def collect_counter_readings(source: Source, n: int) -> list[Reading]:
    """Everything ``source`` emits until its ``n``-th :class:`CounterReading`."""
    return await collect_until(source, CounterReading, n)
