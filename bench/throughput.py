"""Counter reading cost: µs per sweep for each reading method, and CPU at 100 Hz.

Run as root (it makes a network namespace with 8 veth interfaces and deletes it after):

    sudo .venv/bin/python bench/throughput.py [--seconds 20]

Table 1, µs per sweep of 8 devices x 6 counters (rx/tx bytes, packets, errors), medians of
repeated sweeps in the same run:

* pyroute2 ``IPRoute().get_links()`` — the obvious library call (baseline);
* pyroute2 ``IPRoute().stats('dump')`` — its RTM_GETSTATS "prototype";
* commpulse netlink reader — one raw RTM_GETSTATS dump, decoded with ``struct``;
* sysfs, open/read/close per file — the naive way (baseline);
* commpulse sysfs reader — descriptors kept open, ``os.pread``;
* commpulse RDMA reader — 8 ports of a fake mlx5 sysfs tree (tmpfs; real PMA reads go
  through the HCA and are slower: not measurable without the hardware).

Table 2: CPU of the real sources polling at 100 Hz (4 NICs by netlink + 8 RDMA ports), as a
percentage of one core, over ``--seconds`` of wall time: an empty wake-up loop (baseline),
the bare sweeps in a thread and their hot-loop cost (how much a 10 ms sleep's cold caches
add), the sources alone (what polling costs), then with the live pipeline and estimator
(1 s hop) on top.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

NS = "cpbench"
ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mlx5-host" / "sys"


def _median_us(fn: Callable[[], object], repeat: int = 2000) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e3


def _fake_rdma_tree(root: Path, ports: int) -> Path:
    src = (FIXTURE / "class" / "infiniband" / "mlx5_0").resolve()
    for i in range(ports):
        dev = root / "devices" / f"mlx5_{i}"
        shutil.copytree(src, dev)
        (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
        os.symlink(dev, root / "class" / "infiniband" / f"mlx5_{i}")
    return root


def sweep_table(repeat: int) -> None:
    from pyroute2 import IPRoute

    from collectors.nic_counters import (
        NetlinkStatsReader,
        SysfsStatsReader,
        discover_interfaces,
    )
    from collectors.rdma_counters import RdmaPortReader, discover_ports

    ifaces = [i for i in discover_interfaces(Path("/sys")) if i.name.startswith("bv")]
    assert len(ifaces) == 8, [i.name for i in ifaces]
    names = {i.name for i in ifaces}
    ipr = IPRoute()

    def pyroute2_links() -> object:
        return {
            link.get_attr("IFLA_IFNAME"): link.get_attr("IFLA_STATS64")
            for link in ipr.get_links()
            if link.get_attr("IFLA_IFNAME") in names
        }

    def pyroute2_stats() -> object:
        return list(ipr.stats("dump", filter_mask=1))

    counters = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors")

    def sysfs_naive() -> object:
        out = {}
        for i in ifaces:
            out[i.name] = [int((i.path / "statistics" / c).read_text()) for c in counters]
        return out

    netlink = NetlinkStatsReader(ifaces)
    sysfs = SysfsStatsReader(ifaces)
    with tempfile.TemporaryDirectory() as tmp:
        tree = _fake_rdma_tree(Path(tmp), 8)
        rdma = [RdmaPortReader(p) for p in discover_ports(tree)]

        def rdma_sweep() -> object:
            return [r.read() for r in rdma]

        rows = [
            ("pyroute2 get_links() (baseline)", _median_us(pyroute2_links, repeat // 10)),
            ("pyroute2 stats('dump')", _median_us(pyroute2_stats, repeat // 4)),
            ("commpulse netlink RTM_GETSTATS", _median_us(netlink.read, repeat)),
            ("sysfs open/read/close (baseline)", _median_us(sysfs_naive, repeat // 4)),
            ("commpulse sysfs pread, fds kept open", _median_us(sysfs.read, repeat)),
            ("commpulse RDMA, 8 ports (tmpfs fixture)", _median_us(rdma_sweep, repeat)),
        ]
    base = rows[0][1]
    print("| reading method (8 devices) | µs per sweep | vs get_links() |")
    print("|---|---|---|")
    for name, us in rows:
        print(
            f"| {name} | {us:.1f} | {base / us:.0f}x faster |"
            if us < base
            else f"| {name} | {us:.1f} | 1x |"
        )
    netlink.close()
    sysfs.close()


async def _poll(seconds: float, with_pipeline: bool, tree: Path) -> float:
    from agent.clock import MonotonicClock
    from agent.pipeline import Pipeline, PipelineSettings, SnapshotStore
    from collectors._sampler import Sampler
    from collectors.nic_counters import NicConfig, NicCounters
    from collectors.rdma_counters import RdmaConfig, RdmaCounters

    clock = MonotonicClock()
    sampler = Sampler(clock)  # NIC and RDMA polls share one thread: one wake-up per tick
    nic = NicCounters(
        NicConfig(include="^bv[0-3]$", method="netlink"), clock=clock, sampler=sampler
    )
    rdma = RdmaCounters(RdmaConfig(sysfs_root=tree), clock=clock, sampler=sampler)
    sink: list[object] = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    if with_pipeline:
        pipeline = Pipeline([nic, rdma], SnapshotStore(), settings=PipelineSettings(),
                            clock=clock)  # fmt: skip
        asyncio.get_running_loop().call_later(seconds, pipeline.stop)
        await pipeline.run()
    else:
        tasks = [asyncio.create_task(s.run(sink.append)) for s in (nic, rdma)]
        await asyncio.sleep(seconds)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return 100.0 * cpu / wall


def _floor(seconds: float) -> float:
    """CPU of a thread that only wakes at 100 Hz on absolute deadlines (the baseline)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    k = 0
    while time.monotonic() - t0 < seconds:
        k += 1
        delay = t0 + k * 0.01 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return 100.0 * cpu / (time.monotonic() - t0)


def _plain_thread(seconds: float, tree: Path) -> tuple[float, float]:
    """The two sweeps in a bare thread: (% of a core at 100 Hz, µs per tick back to back).

    Tells the Sampler's own cost apart from the sweeps', and a sweep after a 10 ms sleep
    (cold caches) from the same sweep in a hot loop.
    """
    import threading

    from agent.clock import MonotonicClock, Ticker
    from collectors.nic_counters import NicConfig, _NicSweeper
    from collectors.rdma_counters import RdmaConfig, _RdmaSweeper

    clock = MonotonicClock()
    nic = _NicSweeper(NicConfig(include="^bv[0-3]$", method="netlink"), clock, "nic")
    rdma = _RdmaSweeper(RdmaConfig(sysfs_root=tree), clock, "rdma")

    def at_100hz() -> None:
        ticker = Ticker(clock, 0.01)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ticker.tick_blocking()
            nic.sweep()
            rdma.sweep()

    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    thread = threading.Thread(target=at_100hz)
    thread.start()
    thread.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    pct = 100.0 * cpu / (time.monotonic() - t0)
    hot = _median_us(lambda: (nic.sweep(), rdma.sweep()), repeat=3000)
    nic.close()
    rdma.close()
    return pct, hot


def cpu_table(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = _fake_rdma_tree(Path(tmp), 8)
        floor = _floor(seconds)
        plain, hot_us = _plain_thread(seconds, tree)
        alone = asyncio.run(_poll(seconds, False, tree))
        full = asyncio.run(_poll(seconds, True, tree))
    print()
    print(f"| at 100 Hz: 4 NICs (netlink) + 8 RDMA ports, {seconds:.0f} s | % of one core |")
    print("|---|---|")
    print(f"| baseline: an empty 100 Hz wake-up loop in a thread | {floor:.2f} |")
    print(f"| the two sweeps in a bare thread (no Sampler, no hand-over) | {plain:.2f} |")
    print(f"| ... the same sweeps back to back (hot caches), {hot_us:.0f} µs/tick x 100 Hz | "
          f"{hot_us / 100:.2f} |")  # fmt: skip
    print(f"| sources only (polling, decoding, readings) | {alone:.2f} |")
    print(f"| sources above the baseline | {alone - floor:.2f} |")
    print(f"| sources + live pipeline + estimator every 1 s | {full:.2f} |")


#: The naive way to read a COLL line: one regex with every field, per line, no caches.
_NAIVE_COLL = (
    r"NCCL INFO (?P<op>\w+): opCount (?P<opcount>[0-9a-f]+) sendbuff (?P<sb>\S+) recvbuff "
    r"(?P<rb>\S+) count (?P<count>\d+) datatype (?P<dt>\d+) op (?P<redop>\d+) root "
    r"(?P<root>\d+) comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\]"
)


def _nccl_log(path: Path, lines: int) -> int:
    """A real-format NCCL 2.28 log of 8 ranks with INFO timestamps (simulator's writer)."""
    from agent.simulator.nccl_writer import LoggedCall, render_nccl_log

    ops = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast")
    calls = [
        LoggedCall(time_s=1.0 + i * 1e-4, op=ops[i % 4], count=1 << (10 + i % 12), datatype=9,
                   local_rank=i % 8)
        for i in range(lines)
    ]  # fmt: skip
    with path.open("w") as fh:
        n = 0
        for line in render_nccl_log(calls, hostname="gpu-node-01", nranks=64, first_rank=0,
                                    local_ranks=8, start_time_s=0.5, seed=1):  # fmt: skip
            fh.write(line + "\n")
            n += 1
    return n


def nccl_table(lines: int) -> None:
    """Lines per second through tail + decode, against a naive one-regex reader."""
    import re

    from collectors.nccl_log import LiveDecoder
    from collectors.nccl_tail import Tailer, decode_batch

    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        path = Path(d) / "nccl.gpu-node-01.1.log"
        total = _nccl_log(path, lines)

        def naive() -> int:
            pattern = re.compile(_NAIVE_COLL)
            sizes = {"9": 2, "7": 4}
            calls = 0
            with path.open() as fh:
                for line in fh:
                    m = pattern.search(line)
                    if m is not None:
                        calls += int(m["count"]) * sizes.get(m["dt"], 1) > 0
            return calls

        def arrival(_stamp: float | None, now: float) -> float:
            return now

        def commpulse() -> int:
            tailer = Tailer((str(path),), read_from="beginning")
            decoder = LiveDecoder()
            calls = 0
            while polled := tailer.poll():  # at most 1 MiB per file and poll, as live
                batch = decode_batch(decoder, (ln for _, ln in polled), 0.0, arrival)
                calls += int(batch.times.size) if batch is not None else 0
            tailer.close()
            return calls

        assert naive() == commpulse() == lines, "both readers must see every COLL line"
        rows = []
        for name, fn in (("naive: one regex per line (baseline)", naive),
                         ("commpulse: Tailer.poll + LiveDecoder + batch", commpulse)):  # fmt: skip
            fn()  # warm the page cache and the regex caches
            best = min(_timed(fn) for _ in range(3))
            rows.append((name, total / best))
    base = rows[0][1]
    head = f"NCCL log, {total} lines (8 ranks, 2.28 format, INFO timestamps)"
    print(f"\n| {head} | lines/s | vs baseline |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f}x |")


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def inside(args: argparse.Namespace) -> None:
    sweep_table(args.repeat)
    cpu_table(args.seconds)
    nccl_table(args.nccl_lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=4000)
    parser.add_argument("--nccl-lines", type=int, default=500_000)
    parser.add_argument(
        "--nccl-only", action="store_true", help="only the NCCL log table (no root needed)"
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if args.nccl_only:
        sys.path.insert(0, str(ROOT))
        nccl_table(args.nccl_lines)
        return
    if os.geteuid() != 0:
        sys.exit("bench/throughput.py needs root to create its network namespace")
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        for i in range(4):
            subprocess.run(["ip", "-n", NS, "link", "add", f"bv{i}", "type", "veth", "peer",
                            "name", f"bv{i + 4}"], check=True)  # fmt: skip
        for i in range(8):
            subprocess.run(["ip", "-n", NS, "link", "set", f"bv{i}", "up"], check=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            ["ip", "netns", "exec", NS, sys.executable, __file__, "--inside",
             "--seconds", str(args.seconds), "--repeat", str(args.repeat),
             "--nccl-lines", str(args.nccl_lines)],
            check=True, env=env,
        )  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)


if __name__ == "__main__":
    main()
