"""Sampling threads: shared per interval, isolated failures, clean cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest

from agent.clock import MonotonicClock
from agent.thread_names import name_this_thread
from collectors._base import CounterReading, Reading
from collectors._sampler import Sampler
from tests.sources import unbatched


class Counting:
    def __init__(self, name: str, fail_after: int | None = None) -> None:
        self.name = name
        self.n = 0
        self.fail_after = fail_after
        self.threads: set[str] = set()
        self.closed_in: str | None = None

    def sweep(self) -> list[Reading]:
        self.n += 1
        self.threads.add(threading.current_thread().name)
        if self.fail_after is not None and self.n > self.fail_after:
            raise RuntimeError(f"{self.name} broke")
        return [CounterReading(float(self.n), {f"{self.name}_tx_bytes": self.n})]

    def close(self) -> None:
        self.closed_in = threading.current_thread().name


def test_jobs_of_one_interval_share_a_thread_and_fail_alone() -> None:
    good, bad = Counting("good"), Counting("bad", fail_after=5)
    got: list[Reading] = []

    async def main() -> None:
        sampler = Sampler(MonotonicClock(), batch_s=0.02)
        t_good = asyncio.create_task(sampler.run("good", 0.005, good.sweep, got.append,
                                                 close=good.close))  # fmt: skip
        t_bad = asyncio.create_task(sampler.run("bad", 0.005, bad.sweep, lambda r: None,
                                                close=bad.close))  # fmt: skip
        with pytest.raises(RuntimeError, match="bad broke"):
            await t_bad
        await asyncio.sleep(0.1)
        assert not t_good.done()  # the other job goes on
        t_good.cancel()
        await asyncio.gather(t_good, return_exceptions=True)

    asyncio.run(main())
    assert good.threads == bad.threads  # one wake-up per tick for both
    assert len(good.threads) == 1
    thread = next(iter(good.threads))
    assert good.closed_in == thread  # closed in the sampling thread, after its last sweep
    assert bad.closed_in == thread
    values = [r.values["good_tx_bytes"] for r in unbatched(got) if isinstance(r, CounterReading)]
    assert values == sorted(values)
    assert len(values) >= 15
    assert values[-1] == good.n  # nothing swept was lost


def test_different_intervals_get_different_threads() -> None:
    a, b = Counting("a"), Counting("b")

    async def main() -> None:
        sampler = Sampler(MonotonicClock())
        tasks = [
            asyncio.create_task(sampler.run("a", 0.01, a.sweep, lambda r: None)),
            asyncio.create_task(sampler.run("b", 0.02, b.sweep, lambda r: None)),
        ]
        await asyncio.sleep(0.2)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert a.threads.isdisjoint(b.threads)
    assert a.n > b.n


def test_a_new_job_after_the_thread_retired_starts_a_new_thread() -> None:
    first, second = Counting("first"), Counting("second")

    async def main() -> None:
        sampler = Sampler(MonotonicClock())
        t = asyncio.create_task(sampler.run("first", 0.01, first.sweep, lambda r: None))
        await asyncio.sleep(0.05)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        await asyncio.sleep(0.05)
        t = asyncio.create_task(sampler.run("second", 0.01, second.sweep, lambda r: None))
        await asyncio.sleep(0.05)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)

    asyncio.run(main())
    assert first.n > 0
    assert second.n > 0


def test_a_thread_that_could_not_start_is_not_joined_by_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the unit's TasksMax, idle scrape connections took the last thread and the
    sampling thread failed to start: the dead thread stayed registered, the source's retry
    joined it and waited forever, and the source never came back."""
    job = Counting("retried")
    real_start = threading.Thread.start
    refused = []

    def start_once_refused(self: threading.Thread) -> None:
        if self.name.startswith("sampler[") and not refused:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start_once_refused)

    async def main() -> None:
        sampler = Sampler(MonotonicClock())
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await sampler.run("retried", 0.01, job.sweep, lambda r: None)
        t = asyncio.create_task(sampler.run("retried", 0.01, job.sweep, lambda r: None))
        await asyncio.sleep(0.1)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), 5.0))
    assert refused
    assert job.n > 0  # the retry got a thread of its own and swept


def _os_name() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def test_the_sampling_thread_has_its_name_in_the_os() -> None:
    """`top -H` and `ps -L` show "sampler[0.01s]", not "python" for every thread."""
    seen: list[str] = []

    def sweep() -> list[Reading]:
        seen.append(_os_name())
        return []

    async def main() -> None:
        sampler = Sampler(MonotonicClock())
        task = asyncio.create_task(sampler.run("named", 0.01, sweep, lambda r: None))
        await asyncio.sleep(0.1)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen
    assert set(seen) == {"sampler[0.01s]"}


def test_a_thread_name_is_cut_to_what_the_kernel_keeps() -> None:
    names: list[str] = []

    def work() -> None:
        name_this_thread("estimator-worker-number-7")
        names.append(_os_name())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert names == ["estimator-worke"]
