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
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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
        tick = 0
        while time.monotonic() < end:
            ticker.tick_blocking()
            nic.sweep()
            rdma.sweep()
            tick += 1
            if tick % 10 == 0:  # the Sampler's hand-over: the RDMA polls kept raw are decoded
                rdma.drain()

    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    thread = threading.Thread(target=at_100hz)
    thread.start()
    thread.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    pct = 100.0 * cpu / (time.monotonic() - t0)
    ticks = [0]

    def hot_tick() -> None:
        nic.sweep()
        rdma.sweep()
        ticks[0] += 1
        if ticks[0] % 10 == 0:
            rdma.drain()

    hot = _median_us(hot_tick, repeat=3000)
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
    """Lines per second through tail + decode, against a naive one-regex reader.

    Three readers: the naive baseline, commpulse's live path (``Tailer.poll_text`` +
    ``decode_texts``: one regex split per 1 MiB chunk) and its per-line reference (``poll`` +
    ``decode_batch``, the live path before), which gives the same batches.
    """
    import re

    import numpy as np

    from collectors.nccl_log import LiveDecoder
    from collectors.nccl_tail import Tailer, decode_batch, decode_texts

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

        def arrivals(stamps: np.ndarray, now: float) -> np.ndarray:
            return np.full(stamps.shape, now)

        def commpulse() -> int:
            tailer = Tailer((str(path),), read_from="beginning")
            decoder = LiveDecoder()
            calls = 0
            while polled := tailer.poll_text():  # at most 1 MiB per file and poll, as live
                batch = decode_texts(decoder, (text for _, text in polled), 0.0, arrivals)
                calls += int(batch.times.size) if batch is not None else 0
            tailer.close()
            return calls

        def per_line() -> int:
            tailer = Tailer((str(path),), read_from="beginning")
            decoder = LiveDecoder()
            calls = 0
            while polled := tailer.poll():
                batch = decode_batch(decoder, (ln for _, ln in polled), 0.0, arrival)
                calls += int(batch.times.size) if batch is not None else 0
            tailer.close()
            return calls

        assert naive() == commpulse() == per_line() == lines, "every reader must see every call"
        rows = []
        for name, fn in (("naive: one regex per line (baseline)", naive),
                         ("commpulse: Tailer.poll_text + decode_texts (bulk)", commpulse),
                         ("commpulse before: Tailer.poll + decode_batch (per line)",
                          per_line)):  # fmt: skip
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


# --- pcap: read + decode + bin -------------------------------------------------------------

_LOCAL_MAC = bytes.fromhex("020000000001")
_SNAPLEN = 128


def _ip4(src: bytes, dst: bytes, proto: int, payload: int) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload, 0, 0x4000, 64, proto, 0, src, dst)


def _capture_templates() -> list[tuple[bytes, int, int, float]]:
    """(frame head, smallest and largest original length, weight) of a RoCE host's traffic.

    16 peers x 4 QPs of RoCEv2 (RDMA WRITE first/middle/last of 4 KiB MTU, ACKs, CNPs from the
    peers; every fourth peer behind an 802.1Q tag), 32 TCP flows (TSO sends up to 64 KiB and
    their ACKs), 8 IPv6 TCP flows and some ARP.
    """
    local4 = bytes([10, 0, 0, 1])
    local6 = bytes.fromhex("fd00" + "00" * 13 + "01")
    out: list[tuple[bytes, int, int, float]] = []
    for i in range(16):
        peer, peer4 = bytes.fromhex(f"0200000001{i:02x}"), bytes([10, 0, 1, i])
        tag = b"\x81\x00" + struct.pack("!H", 100) if i % 4 == 3 else b""
        for q in range(4):
            qp = 0x100 + i * 4 + q
            tx = q % 2 == 0
            eth = (peer + _LOCAL_MAC if tx else _LOCAL_MAC + peer) + tag + b"\x08\x00"
            src, dst = (local4, peer4) if tx else (peer4, local4)
            for opcode, lo, hi, weight in ((6, 4154, 4154, 2.0), (7, 4154, 4154, 6.0),
                                           (8, 1082, 4154, 2.0), (0x11, 62, 62, 1.0)):  # fmt: skip
                bth = struct.pack("!BBHII", opcode, 0x40, 0xFFFF, qp, 0x1234)
                udp = struct.pack("!HHHH", 49152 + qp, 4791, 8 + 12 + 4096, 0)
                out.append((eth + _ip4(src, dst, 17, 8 + 12 + 4096) + udp + bth, lo, hi, weight))
            cnp = struct.pack("!BBHII", 0x81, 0x40, 0xFFFF, qp, 0) + bytes(16)
            udp = struct.pack("!HHHH", 49152, 4791, 8 + 12 + 16, 0)
            head = _LOCAL_MAC + peer + tag + b"\x08\x00" + _ip4(peer4, local4, 17, 36) + udp + cnp
            out.append((head, 78, 78, 0.3))
    for k in range(32):
        peer, peer4 = bytes.fromhex(f"0200000001{k % 16:02x}"), bytes([10, 0, 1, k % 16])
        seg = struct.pack("!HHIIBBHHH", 40000 + k, 5201, 1, 1, 0x50, 0x18, 65535, 0, 0)
        out.append((peer + _LOCAL_MAC + b"\x08\x00" + _ip4(local4, peer4, 6, 20) + seg, 1514,
                    65226, 1.0))  # fmt: skip
        ack = struct.pack("!HHIIBBHHH", 5201, 40000 + k, 1, 1, 0x50, 0x10, 65535, 0, 0)
        out.append((_LOCAL_MAC + peer + b"\x08\x00" + _ip4(peer4, local4, 6, 20) + ack, 60, 60,
                    1.0))  # fmt: skip
    for k in range(8):
        peer6 = bytes.fromhex("fd00" + "00" * 13 + f"{k + 2:02x}")
        ip6 = struct.pack("!IHBB16s16s", 0x60000000, 1000, 6, 64, peer6, local6)
        seg = struct.pack("!HHIIBBHHH", 443, 50000 + k, 1, 1, 0x50, 0x18, 65535, 0, 0)
        out.append((_LOCAL_MAC + bytes.fromhex(f"0200000001{k:02x}") + b"\x86\xdd" + ip6 + seg,
                    86, 9014, 0.5))  # fmt: skip
    out.append((b"\xff" * 6 + _LOCAL_MAC + b"\x08\x06" + bytes(28), 60, 60, 0.05))
    return out


def _write_capture(path: Path, packets: int, *, pcapng: bool, seed: int = 7) -> None:
    """A little-endian µs pcap (or pcapng: one interface, µs) cut at a 128-byte snaplen."""
    import random

    rng = random.Random(seed)
    templates = _capture_templates()
    picks = rng.choices(range(len(templates)), [t[3] for t in templates], k=packets)
    heads = [(t[0] + bytes(_SNAPLEN))[:_SNAPLEN] for t in templates]
    t_us = 1_700_000_000 * 1_000_000
    rec = struct.Struct("<IIII")
    epb = struct.Struct("<IIIIIII")
    with path.open("wb") as fh:
        if pcapng:
            fh.write(struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + b"\x1c\0\0\0")
            fh.write(struct.pack("<IIHHII", 1, 20, 1, 0, _SNAPLEN, 20))
        else:
            fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, _SNAPLEN, 1))
        out: list[bytes] = []
        for k in picks:
            _, lo, hi, _ = templates[k]
            orig = lo if lo == hi else rng.randint(lo, hi)
            cap = min(orig, _SNAPLEN)
            t_us += rng.randint(0, 3)
            if pcapng:
                pad = -cap % 4
                blen = 32 + cap + pad
                out.append(epb.pack(6, blen, 0, t_us >> 32, t_us & 0xFFFFFFFF, cap, orig))
                out.append(heads[k][:cap] + bytes(pad) + struct.pack("<I", blen))
            else:
                out.append(rec.pack(t_us // 1_000_000, t_us % 1_000_000, cap, orig))
                out.append(heads[k][:cap])
            if len(out) >= 65536:
                fh.write(b"".join(out))
                out.clear()
        fh.write(b"".join(out))


def _dpkt_records(path: Path, pcapng: bool) -> Iterator[tuple[float, int, bytes]]:
    """(time, original length, captured bytes) per packet, with dpkt's own classes.

    dpkt's Readers yield only ``(ts, buf)``, without the original length that a snaplen-cut
    capture needs, so this is their loop (read header, read data) keeping ``len``.
    """
    import dpkt

    with path.open("rb") as f:
        if not pcapng:
            dpkt.pcap.Reader(f)  # checks and consumes the file header
            while head := f.read(16):
                h = dpkt.pcap.LEPktHdr(head)
                yield h.tv_sec + h.tv_usec / 1e6, h.len, f.read(h.caplen)
            return
        dpkt.pcapng.Reader(f)  # section header and interface description
        while len(head := f.read(8)) == 8:
            btype, blen = struct.unpack("<II", head)
            block = head + f.read(blen - 8)
            if btype == 6:
                epb = dpkt.pcapng.EnhancedPacketBlockLE(block)
                yield ((epb.ts_high << 32) | epb.ts_low) / 1e6, epb.pkt_len, epb.pkt_data


def _dpkt_analyse(path: Path, pcapng: bool) -> tuple[int, ...]:
    """What you would write with dpkt: Ethernet(buf), then the fields, per packet."""
    import dpkt

    packets = total = tx = roce = cnp = 0
    flows: set[tuple[object, ...]] = set()
    qps: set[tuple[bytes, int]] = set()
    bins: dict[tuple[int, bool], int] = {}
    t0: float | None = None
    for ts, orig, buf in _dpkt_records(path, pcapng):
        packets += 1
        total += orig
        if t0 is None:
            t0 = ts
        eth = dpkt.ethernet.Ethernet(buf)
        is_tx = eth.src == _LOCAL_MAC
        tx += orig if is_tx else 0
        key = (int((ts - t0) * 1000), is_tx)
        bins[key] = bins.get(key, 0) + orig
        ip = eth.data
        if not isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6):
            continue
        l4 = ip.data
        if isinstance(l4, dpkt.tcp.TCP | dpkt.udp.UDP):
            flows.add((ip.p, ip.src, l4.sport, ip.dst, l4.dport))
            bth = l4.data
            if isinstance(l4, dpkt.udp.UDP) and l4.dport == 4791 and len(bth) >= 12:
                roce += 1
                cnp += bth[0] == 0x81
                qps.add((ip.dst, int.from_bytes(bth[5:8], "big")))
        else:
            flows.add((ip.p, ip.src, None, ip.dst, None))
    return packets, total, tx, roce, cnp, len(flows), len(qps)


def _commpulse_analyse(path: Path) -> tuple[int, ...]:
    """read_capture + bin_bytes at 1 ms over the whole capture."""
    from collectors.pcap import bin_bytes, read_capture

    cap = read_capture(path)
    s = cap.stats
    assert s.first_time_s is not None
    assert s.last_time_s is not None
    t0 = float(int(s.first_time_s))  # a whole second: the float first time can round up
    n_bins = int((s.last_time_s - t0) / 1e-3) + 2
    tx, rx = bin_bytes(cap, t0=t0, bin_s=1e-3, n_bins=n_bins)
    assert int(tx.sum() + rx.sum()) == s.bytes
    return (s.packets, s.bytes, int(tx.sum()), s.roce_packets, s.cnp_packets, s.flows,
            s.roce_qps)  # fmt: skip


def pcap_table(packets: int) -> None:
    """Packets per second through read + decode + 1 ms binning, against plain dpkt."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        for pcapng in (False, True):
            path = Path(d) / ("bench.pcapng" if pcapng else "bench.pcap")
            _write_capture(path, packets, pcapng=pcapng)
            base = _dpkt_analyse(path, pcapng)
            ours = _commpulse_analyse(path)
            assert base == ours, f"dpkt {base} != commpulse {ours}"
            rows = []
            for name, fn in (("plain dpkt: Ethernet(buf) per packet (baseline)",
                              lambda p=path, ng=pcapng: _dpkt_analyse(p, ng)),
                             ("commpulse: read_capture + bin_bytes (1 ms)",
                              lambda p=path: _commpulse_analyse(p))):  # fmt: skip
                best = min(_timed(fn) for _ in range(3))
                rows.append((name, packets / best))
            size = path.stat().st_size / 2**20
            head = f"{'pcapng' if pcapng else 'pcap'}, {packets} packets ({size:.0f} MiB)"
            print(f"\n| {head} | packets/s | vs baseline |")
            print("|---|---|---|")
            for name, rate in rows:
                print(f"| {name} | {rate:,.0f} | {rate / rows[0][1]:.2f}x |")
            print(f"\ntotals (packets, bytes, tx bytes, RoCE, CNP, flows, QPs): {ours}")


def _ring_blocks(packets: int, block_size: int = 1 << 20) -> tuple[bytearray, int]:
    """A TPACKET_V3 ring holding ``packets`` frames laid out as the kernel lays them out.

    Frames are the capture's templates cut at 128 bytes; each has a tpacket3_hdr, a
    sockaddr_ll (pkttype 4 for transmitted frames) and its data at tp_mac = 82, as for an
    Ethernet device (see tests/unit/test_packet_capture.py for the layout).
    """
    import random

    rng = random.Random(11)
    templates = _capture_templates()
    picks = rng.choices(range(len(templates)), [t[3] for t in templates], k=packets)
    heads = [(t[0] + bytes(_SNAPLEN))[:_SNAPLEN] for t in templates]
    hdr = struct.Struct("=IIIIIIHHIIHH")
    sll = struct.Struct("=HHiHBB8s")
    stride = (82 + _SNAPLEN + 7) // 8 * 8
    per_block = (block_size - 48) // stride
    blocks = -(-packets // per_block)
    ring = bytearray(blocks * block_size)
    t_ns = 1_700_000_000 * 10**9
    for b in range(blocks):
        base = b * block_size
        chunk = picks[b * per_block : (b + 1) * per_block]
        for j, k in enumerate(chunk):
            pos = base + 48 + j * stride
            _, lo, hi, _ = templates[k]
            t_ns += rng.randint(0, 3000)
            nxt = stride if j + 1 < len(chunk) else 0
            wire = lo if lo == hi else rng.randint(lo, hi)
            hdr.pack_into(ring, pos, nxt, t_ns // 10**9, t_ns % 10**9, _SNAPLEN, wire, 1, 82, 96,
                          0, 0, 0, 0)  # fmt: skip
            outgoing = heads[k][6:12] == _LOCAL_MAC
            sll.pack_into(ring, pos + 48, 17, 8, 1, 1, 4 if outgoing else 0, 6, bytes(8))
            ring[pos + 82 : pos + 82 + _SNAPLEN] = heads[k]
        struct.pack_into("=IIIIII", ring, base, 3, 0, 1, len(chunk), 48, 48 + len(chunk) * stride)
    return ring, blocks


def capture_table(packets: int) -> None:
    """Frames per second through the live capture thread's work on filled ring blocks."""
    from collectors.packet_capture import ByteBinner, TrafficTally, parse_block
    from collectors.pcap import LINKTYPE_ETHERNET, decode_frame

    block_size = 1 << 20
    ring, blocks = _ring_blocks(packets, block_size)

    def commpulse() -> tuple[int, int]:
        binner = ByteBinner(["eth0"], 0.01)
        binner.start(0.0)
        tally = TrafficTally()
        for b in range(blocks):
            frames = parse_block(ring, b * block_size, block_size)
            binner.add("eth0", frames.time_ns / 1e9 - 1.7e9, frames.length, frames.outgoing)
            tally.add("eth0", ring, frames, LINKTYPE_ETHERNET, 0.0)
        return tally.captured, tally.cnp_packets

    def per_frame() -> tuple[int, int]:
        """A recvfrom-style loop: each frame decoded and binned on its own."""
        bins: dict[tuple[int, bool], int] = {}
        view = memoryview(ring)
        n = cnp = 0
        for b in range(blocks):
            frames = parse_block(ring, b * block_size, block_size)
            for t, length, off, cap, out in zip(frames.time_ns.tolist(), frames.length.tolist(),
                                                frames.data_off.tolist(), frames.caplen.tolist(),
                                                frames.outgoing.tolist(), strict=True):  # fmt: skip
                info = decode_frame(view[off : off + cap])
                key = (t // 10_000_000, out)
                bins[key] = bins.get(key, 0) + length
                n += 1
                cnp += bool(info is not None and info.cnp)
        return n, cnp

    assert commpulse() == per_frame(), "the two paths disagree"
    rows = []
    for name, fn in (("per-frame decode_frame + dict bins (baseline)", per_frame),
                     ("commpulse: parse_block + ByteBinner + TrafficTally",
                      commpulse)):  # fmt: skip
        best = min(_timed(fn) for _ in range(3))
        rows.append((name, packets / best))
    head = f"live capture work, {packets} frames in {blocks} ring blocks"
    print(f"\n| {head} | frames/s | vs baseline |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / rows[0][1]:.2f}x |")


def csv_table(rows: int, columns: int = 32) -> None:
    """Counters CSV: seconds and peak memory to read a long recording, against numpy.loadtxt.

    ``rows`` polls (100 Hz: 360 000 an hour) of ``columns`` 64-bit counters, as ``commpulse
    record`` writes them. Peak memory is tracemalloc's (numpy's buffers included) over a
    second read, the bytes per counter cell beside it.
    """
    import tracemalloc

    import numpy as np

    from collectors.counters_csv import read_counters_csv

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "counters.csv"
        names = [f"mlx5_{i // 2}_port1_{'xmit' if i % 2 else 'rcv'}_data" for i in range(columns)]
        with path.open("w") as fh:
            fh.write("time," + ",".join(names) + "\n")
            base = np.full(columns, 10**12, dtype=np.int64)
            for start in range(0, rows, 10_000):
                n = min(10_000, rows - start)
                cum = base + np.cumsum(rng.integers(0, 10**7, (n, columns)), axis=0)
                base = cum[-1]
                t = (start + np.arange(n)) * 0.01
                fh.writelines(f"{t[i]:.6f}," + ",".join(map(str, cum[i])) + "\n" for i in range(n))

        def loadtxt() -> object:
            return np.loadtxt(path, delimiter=",", skiprows=1)

        def commpulse() -> object:
            return read_counters_csv(path)

        table = []
        for name, fn in (("numpy.loadtxt (baseline; float64, loses bytes above 2^53)", loadtxt),
                         ("commpulse read_counters_csv", commpulse)):  # fmt: skip
            seconds = _timed(fn)  # tracemalloc slows allocation: timed without it
            tracemalloc.start()
            fn()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            table.append((name, seconds, peak))
    cells = rows * columns
    base_s, base_peak = table[0][1], table[0][2]
    print(f"\n| counters CSV, {rows} rows x {columns} counters | s | vs baseline "
          "| peak MB | bytes/cell | vs baseline |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, seconds, peak in table:
        print(f"| {name} | {seconds:.2f} | {seconds / base_s:.2f}x | {peak / 1e6:.0f} "
              f"| {peak / cells:.1f} | {peak / base_peak:.2f}x |")  # fmt: skip


def inside(args: argparse.Namespace) -> None:
    sweep_table(args.repeat)
    cpu_table(args.seconds)
    nccl_table(args.nccl_lines)
    pcap_table(args.pcap_packets)
    capture_table(args.pcap_packets)
    csv_table(args.csv_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=4000)
    parser.add_argument("--nccl-lines", type=int, default=500_000)
    parser.add_argument(
        "--nccl-only", action="store_true", help="only the NCCL log table (no root needed)"
    )
    parser.add_argument("--pcap-packets", type=int, default=1_000_000)
    parser.add_argument(
        "--pcap-only", action="store_true", help="only the pcap tables (no root needed)"
    )
    parser.add_argument("--csv-rows", type=int, default=360_000, help="rows of the CSV table")
    parser.add_argument(
        "--csv-only", action="store_true", help="only the counters CSV table (no root needed)"
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if args.pcap_only:
        sys.path.insert(0, str(ROOT))
        pcap_table(args.pcap_packets)
        capture_table(args.pcap_packets)
        return
    if args.nccl_only:
        sys.path.insert(0, str(ROOT))
        nccl_table(args.nccl_lines)
        return
    if args.csv_only:
        sys.path.insert(0, str(ROOT))
        csv_table(args.csv_rows)
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
             "--nccl-lines", str(args.nccl_lines), "--pcap-packets", str(args.pcap_packets),
             "--csv-rows", str(args.csv_rows)],
            check=True, env=env,
        )  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)


if __name__ == "__main__":
    main()
