"""Network-interface byte and packet counters, by netlink or by sysfs.

Two readers of the same kernel numbers (``struct rtnl_link_stats64``):

* **netlink**: one ``RTM_GETSTATS`` dump (``IFLA_STATS_LINK_64`` only) returns every
  interface's 64-bit counters in one round trip — a few µs for a handful of links, where
  pyroute2's attribute decoding costs ~200 µs per link (research/environment.md §2);
* **sysfs**: ``/sys/class/net/<if>/statistics/{rx,tx}_{bytes,packets}`` read with
  ``os.pread`` on descriptors kept open (~1 µs per counter).

``method = "auto"`` takes netlink when the sysfs root is the real ``/sys`` and the socket
opens, and sysfs otherwise (fixture trees, netlink refused). The interface list, link speed,
operational state and kind (loopback, bridge, virtual, physical) always come from sysfs.
Note: RDMA traffic bypasses the kernel's netdev counters; see :mod:`collectors.rdma_counters`.

Kernel ABI: Documentation/ABI/testing/sysfs-class-net and sysfs-class-net-statistics;
``include/uapi/linux/if_link.h`` (``struct if_stats_msg``, ``rtnl_link_stats64``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import socket
import struct
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.clock import Clock
from agent.errors import ConfigError, SourceError, SourceUnavailable
from collectors._base import CounterReading, DeviceInfo, Emit, Reading
from collectors._config import check_interval, check_regex, doc
from collectors._sampler import Sampler
from collectors._sysfs import parse_sysfs_int, read_attr

__all__ = [
    "DEFAULT_EXCLUDE",
    "Interface",
    "LinkStats",
    "NetlinkStatsReader",
    "NicConfig",
    "NicCounters",
    "SysfsStatsReader",
    "discover_interfaces",
    "parse_speed",
    "parse_stats_dump",
    "parse_sysfs_int",
    "select_interfaces",
    "stats_request",
]

log = logging.getLogger(__name__)

#: Interfaces that would count host traffic twice or carry none: container and VM plumbing,
#: tunnels, and the loopback. Bridges are recognised by their ``bridge/`` directory.
DEFAULT_EXCLUDE = (
    r"^(lo|veth.*|docker.*|virbr.*|br-.*|cni.*|flannel.*|cali.*|vxlan.*|genev.*|ifb.*|tun.*"
    r"|tap.*|kube-ipvs.*)$"
)

ARPHRD_LOOPBACK = 772

#: Packets, errors and drops are exported as totals; they need no 100 Hz resolution.
SLOW_COUNTERS_INTERVAL_S = 1.0

# Netlink constants (include/uapi/linux/netlink.h, rtnetlink.h, if_link.h).
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWSTATS = 92
RTM_GETSTATS = 94
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
IFLA_STATS_LINK_64 = 1
_NLMSGHDR = struct.Struct("=IHHII")
_IF_STATS_MSG = struct.Struct("=BBHII")
_RTATTR = struct.Struct("=HH")
#: rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors, rx_dropped, tx_dropped
_STATS64_HEAD = struct.Struct("=8Q")


@dataclass(frozen=True)
class NicConfig:
    """Settings of the NIC counter source (section ``[sources.nic_counters]``)."""

    enabled: bool = doc(True, "Read network-interface counters.")
    sysfs_root: Path = doc(Path("/sys"), "Root of sysfs (a fixture tree in tests).")
    method: str = doc("auto", "auto, netlink (RTM_GETSTATS) or sysfs (kept-open pread).")
    include: str | None = doc(None, "Regex of interfaces to read; a match wins over exclusions.")
    exclude: str = doc(DEFAULT_EXCLUDE, "Regex of interfaces to skip (loopback, bridges too).")
    poll_interval_s: float = doc(0.01, "Seconds between polls (0.01 = 100 Hz; 0.001 at most).")
    rescan_interval_s: float = doc(5.0, "Seconds between looks for new or vanished interfaces.")

    def __post_init__(self) -> None:
        if self.method not in ("auto", "netlink", "sysfs"):
            raise ConfigError(
                f"nic_counters.method must be auto, netlink or sysfs, not {self.method!r}"
            )
        check_interval("nic_counters", "poll_interval_s", self.poll_interval_s, 0.001, 60.0)
        check_interval("nic_counters", "rescan_interval_s", self.rescan_interval_s, 0.1, 3600.0)
        check_regex("nic_counters", "include", self.include)
        check_regex("nic_counters", "exclude", self.exclude)


@dataclass(frozen=True, slots=True)
class LinkStats:
    """The counters commpulse uses from ``rtnl_link_stats64`` (all 64-bit)."""

    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int
    rx_errors: int = 0
    tx_errors: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0

    def counters(self) -> dict[str, int]:
        """Everything but the byte counters, for export as totals."""
        return {
            "rx_packets": self.rx_packets,
            "tx_packets": self.tx_packets,
            "rx_errors": self.rx_errors,
            "tx_errors": self.tx_errors,
            "rx_dropped": self.rx_dropped,
            "tx_dropped": self.tx_dropped,
        }


@dataclass(frozen=True)
class Interface:
    """One entry of ``/sys/class/net``."""

    name: str
    ifindex: int | None
    arphrd: int | None
    kind: str  # "loopback" | "bridge" | "virtual" | "physical"
    operstate: str | None
    speed_bytes_per_s: float | None
    path: Path = field(repr=False)


# --------------------------------------------------------------------------------------------
# Pure parsers


def parse_speed(text: str | bytes) -> float | None:
    """``/sys/class/net/<if>/speed`` (Mb/s) as bytes/s; ``-1`` and junk mean unknown."""
    mbps = parse_sysfs_int(text)
    if mbps is None or mbps <= 0:
        return None
    return mbps * 1e6 / 8.0


def stats_request(seq: int) -> bytes:
    """An ``RTM_GETSTATS`` dump request for ``IFLA_STATS_LINK_64`` of every interface."""
    body = _IF_STATS_MSG.pack(socket.AF_UNSPEC, 0, 0, 0, 1 << (IFLA_STATS_LINK_64 - 1))
    header = _NLMSGHDR.pack(
        _NLMSGHDR.size + len(body), RTM_GETSTATS, NLM_F_REQUEST | NLM_F_DUMP, seq, 0
    )
    return header + body


def parse_stats_dump(
    data: bytes | memoryview, wanted: Container[int] | None = None
) -> tuple[dict[int, LinkStats], bool]:
    """Decode one datagram of an ``RTM_GETSTATS`` dump: (stats by ifindex, dump finished).

    ``wanted`` limits decoding to those interface indexes (the others are skipped cheaply).

    Raises ``OSError`` when the kernel answered with a netlink error, ``ValueError`` on a
    malformed message (truncated header or attribute).
    """
    out: dict[int, LinkStats] = {}
    offset = 0
    n = len(data)
    while offset + _NLMSGHDR.size <= n:
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > n:
            raise ValueError(f"netlink message of length {length} overruns the datagram")
        body = offset + _NLMSGHDR.size
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            code = struct.unpack_from("=i", data, body)[0] if body + 4 <= n else -errno.EIO
            if code:
                raise OSError(-code, f"netlink RTM_GETSTATS: {os.strerror(-code)}")
        elif kind == RTM_NEWSTATS and length >= _NLMSGHDR.size + _IF_STATS_MSG.size:
            _family, _p1, _p2, ifindex, _mask = _IF_STATS_MSG.unpack_from(data, body)
            if wanted is not None and ifindex not in wanted:
                offset += (length + 3) & ~3
                continue
            attr = body + _IF_STATS_MSG.size
            end = offset + length
            while attr + _RTATTR.size <= end:
                alen, atype = _RTATTR.unpack_from(data, attr)
                if alen < _RTATTR.size or attr + alen > end:
                    raise ValueError("netlink attribute overruns its message")
                if atype == IFLA_STATS_LINK_64 and alen >= _RTATTR.size + _STATS64_HEAD.size:
                    v = _STATS64_HEAD.unpack_from(data, attr + _RTATTR.size)
                    out[ifindex] = LinkStats(
                        rx_bytes=v[2], tx_bytes=v[3], rx_packets=v[0], tx_packets=v[1],
                        rx_errors=v[4], tx_errors=v[5], rx_dropped=v[6], tx_dropped=v[7],
                    )  # fmt: skip
                attr += (alen + 3) & ~3
        offset += (length + 3) & ~3
    return out, False


# --------------------------------------------------------------------------------------------
# Thin readers


def discover_interfaces(sysfs_root: Path) -> list[Interface]:
    """Every interface under ``<sysfs_root>/class/net``, with its kind, state and speed."""
    base = sysfs_root / "class" / "net"
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        raise SourceUnavailable("nic_counters", f"cannot list {base}: {exc.strerror}") from None
    out = []
    for name in names:
        path = base / name
        if not (path / "statistics").is_dir():
            continue  # e.g. the bonding_masters file
        arphrd = parse_sysfs_int(read_attr(path / "type") or b"")
        real = os.path.realpath(path)
        if arphrd == ARPHRD_LOOPBACK or name == "lo":
            kind = "loopback"
        elif (path / "bridge").is_dir():
            kind = "bridge"
        elif "/devices/virtual/" in real:
            kind = "virtual"
        else:
            kind = "physical"
        state = read_attr(path / "operstate")
        out.append(
            Interface(
                name=name,
                ifindex=parse_sysfs_int(read_attr(path / "ifindex") or b""),
                arphrd=arphrd,
                kind=kind,
                operstate=state.decode(errors="replace").strip() if state else None,
                speed_bytes_per_s=parse_speed(read_attr(path / "speed") or b""),
                path=path,
            )
        )
    return out


def select_interfaces(
    interfaces: Iterable[Interface], *, include: str | None, exclude: str
) -> tuple[list[Interface], dict[str, str]]:
    """(interfaces to read, {skipped name: reason}).

    An explicit ``include`` match wins over every exclusion; otherwise loopback, bridges and
    names matching ``exclude`` are skipped.
    """
    inc = re.compile(include) if include else None
    exc = re.compile(exclude) if exclude else None
    chosen: list[Interface] = []
    skipped: dict[str, str] = {}
    for iface in interfaces:
        if inc is not None:
            if inc.search(iface.name):
                chosen.append(iface)
            else:
                skipped[iface.name] = "not matched by include"
            continue
        if iface.kind in ("loopback", "bridge"):
            skipped[iface.name] = iface.kind
        elif exc is not None and exc.search(iface.name):
            skipped[iface.name] = "matched by exclude"
        else:
            chosen.append(iface)
    return chosen, skipped


class StatsReader(Protocol):
    """Reads the current counters of the selected interfaces (by name)."""

    def read(self) -> dict[str, LinkStats]:
        """One sweep; an interface that could not be read is left out."""
        ...

    def close(self) -> None:
        """Release descriptors or sockets."""
        ...


_SYSFS_COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")


class SysfsStatsReader:
    """``statistics/*`` of each interface through descriptors kept open and ``os.pread``."""

    def __init__(self, interfaces: Iterable[Interface]) -> None:
        self._fds: dict[str, tuple[int, ...]] = {}
        for iface in interfaces:
            fds: list[int] = []
            try:
                for counter in _SYSFS_COUNTERS:
                    fds.append(os.open(iface.path / "statistics" / counter, os.O_RDONLY))
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                log.warning("cannot open counters of %s: %s", iface.name, exc.strerror)
                continue
            self._fds[iface.name] = tuple(fds)
        self.vanished: set[str] = set()

    def read(self) -> dict[str, LinkStats]:
        """Pread every kept descriptor; a vanished interface is dropped until the next rescan."""
        out: dict[str, LinkStats] = {}
        for name, (rb, tb, rp, tp) in list(self._fds.items()):
            try:
                values = [int(os.pread(fd, 32, 0)) for fd in (rb, tb, rp, tp)]
            except (OSError, ValueError):
                self._drop(name)
                continue
            out[name] = LinkStats(values[0], values[1], values[2], values[3])
        return out

    def _drop(self, name: str) -> None:
        for fd in self._fds.pop(name, ()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.vanished.add(name)

    def close(self) -> None:
        """Close every descriptor."""
        for name in list(self._fds):
            self._drop(name)


class NetlinkStatsReader:
    """One ``RTM_GETSTATS`` dump per sweep over a kept-open ``NETLINK_ROUTE`` socket."""

    def __init__(self, interfaces: Iterable[Interface]) -> None:
        self._names = {i.ifindex: i.name for i in interfaces if i.ifindex is not None}
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self._sock.bind((0, 0))
        self._seq = 0
        self._buf = bytearray(1 << 16)

    def read(self) -> dict[str, LinkStats]:
        """Dump all links, keep the selected ones."""
        self._seq += 1
        self._sock.send(stats_request(self._seq))
        out: dict[str, LinkStats] = {}
        view = memoryview(self._buf)
        while True:
            n = self._sock.recv_into(self._buf)
            stats, done = parse_stats_dump(view[:n], self._names)
            for ifindex, s in stats.items():
                name = self._names.get(ifindex)
                if name is not None:
                    out[name] = s
            if done:
                return out

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()


def _open_reader(
    method: str, sysfs_root: Path, interfaces: list[Interface]
) -> tuple[StatsReader, str]:
    if method in ("auto", "netlink"):
        real_sys = os.path.realpath(sysfs_root) == "/sys"
        if method == "netlink" or real_sys:
            try:
                reader = NetlinkStatsReader(interfaces)
                reader.read()
                return reader, "netlink"
            except OSError as exc:
                if method == "netlink":
                    raise SourceUnavailable(
                        "nic_counters", f"netlink RTM_GETSTATS refused: {exc.strerror or exc}"
                    ) from None
                log.info("netlink statistics unavailable (%s); reading sysfs", exc)
    return SysfsStatsReader(interfaces), "sysfs"


# --------------------------------------------------------------------------------------------
# The source


#: ARPHRD_* (include/uapi/linux/if_arp.h) → the link layer an operator recognises.
_LINK_LAYERS = {1: "Ethernet", 32: "InfiniBand", 772: "loopback", 65534: "none"}


def _infos(chosen: list[Interface], skipped: Mapping[str, str]) -> dict[str, DeviceInfo]:
    out = {
        i.name: DeviceInfo(
            device=i.name,
            kind="netdev",
            link_layer=_LINK_LAYERS.get(i.arphrd, str(i.arphrd)) if i.arphrd is not None else None,
            speed_bytes_per_s=i.speed_bytes_per_s,
            state=i.operstate,
        )
        for i in chosen
    }
    for name, reason in skipped.items():
        out[name] = DeviceInfo(device=name, kind="netdev", skipped=reason)
    return out


class _NicSweeper:
    """The sampling thread's state: the reader, the interface list and when to rescan."""

    def __init__(self, cfg: NicConfig, clock: Clock, name: str) -> None:
        self._cfg = cfg
        self._clock = clock
        self._name = name
        self.chosen, self.infos = self._scan()
        if not self.chosen:
            raise SourceUnavailable(
                name,
                f"no interface under {cfg.sysfs_root}/class/net passes the filters "
                f"(include={cfg.include!r}, exclude={cfg.exclude!r})",
            )
        self.reader, self.method = _open_reader(cfg.method, cfg.sysfs_root, self.chosen)
        self._pending: list[Reading] = list(self.infos.values())
        self._next_scan = clock.now() + cfg.rescan_interval_s
        self._next_slow = clock.now()
        self._columns: dict[str, tuple[str, str]] = {}  # names built once, not at every poll

    def _scan(self) -> tuple[list[Interface], dict[str, DeviceInfo]]:
        chosen, skipped = select_interfaces(
            discover_interfaces(self._cfg.sysfs_root),
            include=self._cfg.include,
            exclude=self._cfg.exclude,
        )
        return chosen, _infos(chosen, skipped)

    def sweep(self) -> list[Reading]:
        """One poll of every selected interface (plus device changes after a rescan)."""
        out, self._pending = self._pending, []
        before = self._clock.now()
        try:
            stats = self.reader.read()
        except (OSError, ValueError) as exc:
            raise SourceError(self._name, f"{self.method} read failed: {exc}") from exc
        t = 0.5 * (before + self._clock.now())
        values: dict[str, int] = {}
        columns = self._columns
        for name, st in stats.items():
            pair = columns.get(name)
            if pair is None:
                pair = columns[name] = (f"{name}_rx_bytes", f"{name}_tx_bytes")
            values[pair[0]] = st.rx_bytes
            values[pair[1]] = st.tx_bytes
        counters: dict[str, dict[str, int]] = {}
        if t >= self._next_slow:  # packets, errors, drops: exported totals, once a second
            self._next_slow = t + SLOW_COUNTERS_INTERVAL_S
            counters = {name: st.counters() for name, st in stats.items()}
        out.append(CounterReading(t, values, counters))
        vanished = isinstance(self.reader, SysfsStatsReader) and bool(self.reader.vanished)
        if t >= self._next_scan or vanished:
            self._next_scan = t + self._cfg.rescan_interval_s
            self._rescan(out, force=vanished)
        return out

    def _rescan(self, out: list[Reading], *, force: bool) -> None:
        chosen, infos = self._scan()
        if not chosen:
            # Every selected interface went away: the source is down (as rdma_counters), not
            # up and delivering empty polls; the pipeline shows its devices as vanished.
            raise SourceUnavailable(
                self._name,
                f"every selected interface went away (include={self._cfg.include!r}, "
                f"exclude={self._cfg.exclude!r})",
            )
        out.extend(info for name, info in infos.items() if self.infos.get(name) != info)
        out.extend(
            DeviceInfo(device=name, kind="netdev", skipped="vanished")
            for name in sorted(set(self.infos) - set(infos))
        )
        # By name and ifindex: a driver reload or a veth re-created between two rescans keeps
        # the name under a new ifindex, which the netlink reader (matching by index) then
        # never returned: the device's last rate stayed on /metrics, frozen.
        if force or [(i.name, i.ifindex) for i in chosen] != [
            (i.name, i.ifindex) for i in self.chosen
        ]:
            self.reader.close()
            self.reader, self.method = _open_reader(self._cfg.method, self._cfg.sysfs_root, chosen)
        self.chosen, self.infos = chosen, infos
        self._columns.clear()  # interfaces come and go: no name is kept forever

    def close(self) -> None:
        """Release the reader."""
        self.reader.close()


class NicCounters:
    """Polls interface counters on absolute deadlines in a sampling thread."""

    name = "nic_counters"

    def __init__(self, config: NicConfig, *, clock: Clock, sampler: Sampler | None = None) -> None:
        self._cfg = config
        self._clock = clock
        self._sampler = sampler or Sampler(clock)
        self.method: str | None = None

    async def run(self, emit: Emit) -> None:
        """Sweep until cancelled; rescan interfaces every ``rescan_interval_s``."""
        sweeper = _NicSweeper(self._cfg, self._clock, self.name)
        self.method = sweeper.method
        await self._sampler.run(
            self.name,
            self._cfg.poll_interval_s,
            sweeper.sweep,
            emit,
            close=sweeper.close,
        )
