"""Fast polling off the event loop: sampling threads that hand readings over in batches.

At 100 Hz and above, an asyncio wake-up per poll costs several times the poll itself (on the
development VM a bare asyncio 100 Hz ticker used ~2 % of a core, a thread sleeping on
``time.sleep`` ~0.6-0.9 %). So counter sources sweep in a thread on absolute deadlines and pass
readings to the loop every ``batch_s`` (0.1 s): ten loop wake-ups per second instead of one
per poll. Sources that poll at the same interval share one thread (one wake-up per tick for
NIC and RDMA counters together) when they are given the same :class:`Sampler`. Timestamps are
taken in the thread, at the read. The counter readings of a hand-over go as one
:class:`~collectors._base.CounterBatch` (one queue item, one array update of the window)
wherever consecutive polls read the same columns.

A sweep may also keep what it read undecoded and hand it over through ``drain``, which the
thread calls at each hand-over: after every 10 ms sleep the interpreter runs cold (the
development VM measured a sweep of 8 RDMA ports at several times its back-to-back cost), so
the least Python per tick is a list of raw reads, decoded ten polls at a time. The jobs of
one thread share each hand-over's loop wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.clock import Clock, Ticker
from agent.thread_names import name_this_thread
from collectors._base import Emit, Reading, coalesce_counters

__all__ = ["BATCH_S", "Sampler"]

#: Default hand-over interval of sweeps faster than it (seconds).
BATCH_S = 0.1

log = logging.getLogger(__name__)

Sweep = Callable[[], list[Reading]]
Drain = Callable[[], list[Reading]]


@dataclass
class _Job:
    name: str
    sweep: Sweep
    emit: Emit
    close: Callable[[], None] | None
    drain: Drain | None
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[None]
    batch: list[Reading] = field(default_factory=list)
    stopped: bool = False


class _Thread:
    """One sampling thread for every job of one interval."""

    def __init__(self, sampler: Sampler, clock: Clock, interval_s: float, batch_s: float) -> None:
        self._sampler = sampler
        self._clock = clock
        self.interval_s = interval_s
        self._batch_s = batch_s
        self.jobs: list[_Job] = []
        self.retired = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(
            target=self._work, name=f"sampler[{interval_s:g}s]", daemon=True
        )

    def _work(self) -> None:
        name_this_thread()
        ticker = Ticker(self._clock, self.interval_s)
        next_flush = self._clock.now() + self._batch_s
        while True:
            with self.lock:
                for job in [j for j in self.jobs if j.stopped]:
                    self.jobs.remove(job)
                    ended = job
                    break
                else:
                    ended = None
                jobs = list(self.jobs)
                if ended is None and not jobs:
                    self.retired = True
            if ended is not None:
                self._end(ended, None)
                continue
            if not jobs:
                self._sampler._retire(self)
                return
            ticker.tick_blocking()
            for job in jobs:
                if job.stopped:
                    continue
                self._call(job, job.sweep)
            if self._clock.now() >= next_flush:
                next_flush = self._clock.now() + self._batch_s
                for job in jobs:
                    if job.drain is not None and not job.stopped:
                        self._call(job, job.drain)
                self._flush(*jobs)

    def _call(self, job: _Job, step: Sweep) -> None:
        """Run a job's sweep or drain into its batch; an exception ends that job only."""
        try:
            job.batch.extend(step())
        except Exception as exc:  # the job's task re-raises it; the others go on
            with self.lock:
                if job in self.jobs:
                    self.jobs.remove(job)
            self._end(job, exc)

    @staticmethod
    def _flush(*jobs: _Job) -> None:
        """Hand the jobs' batches to their loops: one wake-up per loop, not one per job."""
        due: dict[asyncio.AbstractEventLoop, list[tuple[_Job, list[Reading]]]] = {}
        for job in jobs:
            if job.batch and not job.loop.is_closed():
                due.setdefault(job.loop, []).append((job, coalesce_counters(job.batch)))
                job.batch = []
        for loop, batches in due.items():

            def deliver(batches: list[tuple[_Job, list[Reading]]] = batches) -> None:
                for job, batch in batches:
                    if not job.done.done():
                        for reading in batch:
                            job.emit(reading)

            loop.call_soon_threadsafe(deliver)

    def _end(self, job: _Job, exc: BaseException | None) -> None:
        """Finish a job (already out of ``jobs``), in this thread: last batch, close, wake.

        A job stopped on purpose gets one last sweep first, so what arrived since the last
        tick (log lines written just before a shutdown) is delivered rather than dropped.
        """
        if exc is None:
            try:
                job.batch.extend(job.sweep())
            except Exception:
                log.debug("final sweep of %s failed", job.name, exc_info=True)
        if job.drain is not None:
            try:
                job.batch.extend(job.drain())
            except Exception:
                log.debug("final drain of %s failed", job.name, exc_info=True)
        job.stopped = True
        self._flush(job)
        if job.close is not None:
            try:
                job.close()
            except Exception:
                log.exception("closing %s failed", job.name)

        def finish() -> None:
            if job.done.done():
                return
            if exc is None:
                job.done.set_result(None)
            else:
                job.done.set_exception(exc)

        if not job.loop.is_closed():
            job.loop.call_soon_threadsafe(finish)


class Sampler:
    """Runs sweeps in threads, one thread per polling interval, shared by its jobs."""

    def __init__(self, clock: Clock, *, batch_s: float = BATCH_S) -> None:
        self._clock = clock
        self._batch_s = batch_s
        self._threads: dict[float, _Thread] = {}
        self._lock = threading.Lock()

    def _retire(self, thread: _Thread) -> None:
        with self._lock:
            if self._threads.get(thread.interval_s) is thread:
                del self._threads[thread.interval_s]

    async def run(
        self,
        name: str,
        interval_s: float,
        sweep: Sweep,
        emit: Emit,
        *,
        close: Callable[[], None] | None = None,
        drain: Drain | None = None,
    ) -> None:
        """Call ``sweep`` every ``interval_s`` until cancelled or until it raises.

        The readings it returns reach ``emit`` on the event loop, in order (runs of counter
        readings as :class:`~collectors._base.CounterBatch`). An exception from
        ``sweep`` ends this job (not the thread's other jobs) and is raised here; cancelling
        stops the job within one interval. ``close`` runs in the sampling thread after the
        job's last sweep, so descriptors are never closed under a sweep. ``drain``, if
        given, returns what the sweeps kept undecoded; it runs at each hand-over and after
        the last sweep, and its readings follow the sweeps' in the batch.
        """
        loop = asyncio.get_running_loop()
        job = _Job(name, sweep, emit, close, drain, loop, loop.create_future())
        with self._lock:
            thread = self._threads.get(interval_s)
            joined = False
            if thread is not None:
                with thread.lock:
                    if not thread.retired:
                        thread.jobs.append(job)
                        joined = True
            if not joined:
                thread = _Thread(self, self._clock, interval_s, self._batch_s)
                thread.jobs.append(job)
                # Registered only once it runs: a start that fails (the unit's TasksMax reached
                # by idle scrape connections) left a dead thread that every retry joined and
                # waited on forever, and the source stayed down after the threads were free.
                thread.thread.start()
                self._threads[interval_s] = thread
        try:
            await asyncio.shield(job.done)
        except asyncio.CancelledError:
            job.stopped = True
            # The thread closes the job after its current sweep; wait for that (bounded).
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(job.done), max(1.0, 4 * interval_s))
            raise
