"""InfiniBand / RoCE port counters from ``/sys/class/infiniband``.

RDMA traffic bypasses the kernel's network stack, so it never shows in netdev counters: on
an IB or RoCE fabric these ports are where the collective bursts are.

Per port (``<dev>/ports/<n>/``), from Documentation/ABI/stable/sysfs-class-infiniband:

* ``counters/port_{xmit,rcv}_data`` count **4-byte words** ("divided by 4"): bytes = value × 4,
  a constant — never the lane width (prometheus/procfs#164, node_exporter#573);
* ``counters/port_{xmit,rcv}_packets``; old kernels keep 64-bit copies in ``counters_ext/``
  (``*_64``), preferred when present;
* PMA ``PortCounters`` without extended width are 32-bit and **saturate** at 2^32−1 instead
  of wrapping: such a value is flagged stale and left out (a gap), never read as a rate of 0;
* ``hw_counters/`` (RoCE congestion: CNPs, ECN marks, retransmissions...) are cached by the
  driver for ``hw_counters/lifespan`` ms, so they are read at most that often and exported as
  totals, never turned into fast rates;
* devices without ``counters/`` (bnxt_re, iWARP) or whose counters read ``N/A (no PMA)`` are
  skipped with the reason, and never stop the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from os import pread
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.clock import Clock
from agent.errors import SourceUnavailable
from collectors._base import CounterBatch, CounterReading, DeviceInfo, Emit, Reading
from collectors._config import check_interval, check_regex, doc
from collectors._sampler import Sampler
from collectors._sysfs import parse_sysfs_int, read_attr

__all__ = [
    "HW_COUNTERS",
    "RCV_DATA",
    "SATURATED_32",
    "XMIT_DATA",
    "RdmaConfig",
    "RdmaCounters",
    "RdmaPort",
    "RdmaPortReader",
    "discover_ports",
    "parse_rate",
    "parse_state",
]

log = logging.getLogger(__name__)

#: A saturated 32-bit PMA counter (it stops here; it does not wrap).
SATURATED_32 = 2**32 - 1
#: The port's byte counters (4-byte words), as ``DeviceInfo.stale_counters`` names them.
XMIT_DATA = "port_xmit_data"
RCV_DATA = "port_rcv_data"

#: The ``port_*_data`` counters count 4-octet words (IBA PortCounters, "divided by 4").
DATA_WORD_BYTES = 4

#: hw_counters exported as totals: the RoCE congestion and transport-error signals. A fixed
#: list keeps the label set bounded whatever the driver exposes.
HW_COUNTERS = frozenset(
    {
        "np_cnp_sent",
        "rp_cnp_handled",
        "rp_cnp_ignored",
        "np_ecn_marked_roce_packets",
        "out_of_sequence",
        "packet_seq_err",
        "local_ack_timeout_err",
        "implied_nak_seq_err",
        "duplicate_request",
        "rnr_nak_retry_err",
        "out_of_buffer",
        "roce_adp_retrans",
        "roce_adp_retrans_to",
        "roce_slow_restart",
        "roce_slow_restart_cnps",
        "req_transport_retries_exceeded",
        "req_rnr_retries_exceeded",
    }
)

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([GMT]?)b/sec", re.IGNORECASE)
_UNIT = {"": 1.0, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass(frozen=True)
class RdmaConfig:
    """Settings of the RDMA counter source (section ``[sources.rdma_counters]``)."""

    enabled: bool = doc(True, "Read InfiniBand / RoCE port counters (no data if none exist).")
    sysfs_root: Path = doc(Path("/sys"), "Root of sysfs (a fixture tree in tests).")
    include: str | None = doc(None, "Regex of devices or dev:port names to read.")
    exclude: str | None = doc(None, "Regex of devices or dev:port names to skip.")
    poll_interval_s: float = doc(0.01, "Seconds between polls of the data counters.")
    hw_counters: bool = doc(True, "Export the RoCE congestion counters of hw_counters/.")
    hw_counters_interval_s: float = doc(
        1.0, "Seconds between reads of packets and hw_counters (never below lifespan)."
    )
    rescan_interval_s: float = doc(10.0, "Seconds between looks for new or vanished ports.")

    def __post_init__(self) -> None:
        section = "rdma_counters"
        check_interval(section, "poll_interval_s", self.poll_interval_s, 0.001, 60.0)
        check_interval(section, "hw_counters_interval_s", self.hw_counters_interval_s, 0.01, 3600.0)
        check_interval(section, "rescan_interval_s", self.rescan_interval_s, 0.1, 3600.0)
        check_regex(section, "include", self.include)
        check_regex(section, "exclude", self.exclude)


# --------------------------------------------------------------------------------------------
# Pure parsers


def parse_rate(text: str | bytes) -> float | None:
    """``ports/<n>/rate`` ("100 Gb/sec (4X EDR)") as bytes per second."""
    s = text.decode(errors="replace") if isinstance(text, bytes) else text
    m = _RATE.match(s)
    if not m:
        return None
    return float(m.group(1)) * _UNIT[m.group(2).upper()] / 8.0


def parse_state(text: str | bytes) -> str | None:
    """``ports/<n>/state`` ("4: ACTIVE") → "ACTIVE"."""
    s = (text.decode(errors="replace") if isinstance(text, bytes) else text).strip()
    if not s:
        return None
    return s.split(":", 1)[-1].strip() or None


# --------------------------------------------------------------------------------------------
# Discovery and reading


@dataclass(frozen=True)
class RdmaPort:
    """One port of one RDMA device, and where its counters are."""

    device: str
    port: int
    link_layer: str | None
    rate_bytes_per_s: float | None
    state: str | None
    xmit_data: Path | None
    rcv_data: Path | None
    xmit_packets: Path | None
    rcv_packets: Path | None
    extended: bool
    hw_dir: Path | None
    lifespan_ms: int | None
    skipped: str | None = None
    path: Path = field(default=Path("."), repr=False)

    @property
    def name(self) -> str:
        """``mlx5_0:1``, the form NCCL's ``NET/IB : Using`` line prints."""
        return f"{self.device}:{self.port}"


def _counter_file(port_dir: Path, name: str) -> tuple[Path | None, bool]:
    """The best file for one counter: ``counters_ext/<name>_64``, else ``counters/<name>``."""
    ext = port_dir / "counters_ext" / f"{name}_64"
    if ext.is_file():
        return ext, True
    plain = port_dir / "counters" / name
    if plain.is_file():
        return plain, False
    return None, False


def discover_ports(sysfs_root: Path) -> list[RdmaPort]:
    """Every port of every device under ``<sysfs_root>/class/infiniband``."""
    base = sysfs_root / "class" / "infiniband"
    try:
        devices = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SourceUnavailable("rdma_counters", f"cannot list {base}: {exc.strerror}") from None
    ports: list[RdmaPort] = []
    for dev in devices:
        ports_dir = base / dev / "ports"
        try:
            numbers = sorted(int(p) for p in os.listdir(ports_dir) if p.isdigit())
        except OSError:
            continue
        for num in numbers:
            pd = ports_dir / str(num)
            xmit, ext_x = _counter_file(pd, XMIT_DATA)
            rcv, ext_r = _counter_file(pd, RCV_DATA)
            xp, _ = _counter_file(pd, "port_xmit_packets")
            rp, _ = _counter_file(pd, "port_rcv_packets")
            link = read_attr(pd / "link_layer")
            hw = pd / "hw_counters"
            lifespan = parse_sysfs_int(read_attr(hw / "lifespan") or b"") if hw.is_dir() else None
            skipped = None
            if xmit is None or rcv is None:
                skipped = "no counters/ directory (no PMA counters, e.g. bnxt_re, iWARP)"
            else:
                try:
                    raw = xmit.read_bytes()
                except OSError as exc:  # EACCES without CAP_DAC_OVERRIDE, not "empty"
                    raw, why = b"", exc.strerror or type(exc).__name__
                else:
                    why = raw.decode(errors="replace").strip() or "empty"
                if parse_sysfs_int(raw) is None:
                    skipped = f"counters unreadable: {why}"
            ports.append(
                RdmaPort(
                    device=dev,
                    port=num,
                    link_layer=link.decode(errors="replace").strip() if link else None,
                    rate_bytes_per_s=parse_rate(read_attr(pd / "rate") or b""),
                    state=parse_state(read_attr(pd / "state") or b""),
                    xmit_data=xmit,
                    rcv_data=rcv,
                    xmit_packets=xp,
                    rcv_packets=rp,
                    extended=ext_x and ext_r,
                    hw_dir=hw if hw.is_dir() else None,
                    lifespan_ms=lifespan,
                    skipped=skipped,
                    path=pd,
                )
            )
    return ports


class RdmaPortReader:
    """Kept-open descriptors for one port's data and packet counters."""

    def __init__(self, port: RdmaPort) -> None:
        self.port = port
        self._fds: list[int] = []
        for path in (port.xmit_data, port.rcv_data, port.xmit_packets, port.rcv_packets):
            self._fds.append(os.open(path, os.O_RDONLY) if path is not None else -1)
        # Built once: at 100 Hz, formatting the names at every poll costs more than reading.
        self.tx_column = f"{port.name}_tx_bytes"
        self.rx_column = f"{port.name}_rx_bytes"
        self._hw_paths: list[tuple[str, str]] | None = None  # listed at the first read_hw

    def _value(self, fd: int) -> int | None:
        if fd < 0:
            return None
        try:
            value = int(os.pread(fd, 32, 0))
        except ValueError:  # "N/A (no PMA)" or an empty read
            return None
        if not self.port.extended and value == SATURATED_32:
            return None
        return value

    def read_data(self) -> tuple[int | None, int | None]:
        """(tx bytes, rx bytes); None where unreadable or saturated (:meth:`read_data_into`).

        Raises ``OSError`` when the device went away.
        """
        values: dict[str, int] = {}
        self.read_data_into(values)
        return values.get(self.tx_column), values.get(self.rx_column)

    def read_data_into(self, values: dict[str, int]) -> None:
        """(tx bytes, rx bytes) stored under the port's column names, unreadable ones left out.

        Raises ``OSError`` when the device went away, and then stores nothing.
        """
        fds = self._fds
        raw_tx = os.pread(fds[0], 32, 0) if fds[0] >= 0 else b""
        raw_rx = os.pread(fds[1], 32, 0) if fds[1] >= 0 else b""
        self.decode_data_into(values, raw_tx, raw_rx)

    def decode_data_into(self, values: dict[str, int], raw_tx: bytes, raw_rx: bytes) -> None:
        """Store what the data counter files read as bytes: neither "N/A" nor saturated."""
        extended = self.port.extended
        try:
            tx = int(raw_tx)
        except ValueError:  # "N/A (no PMA)" or an empty read
            pass
        else:
            if extended or tx != SATURATED_32:
                values[self.tx_column] = tx * DATA_WORD_BYTES
        try:
            rx = int(raw_rx)
        except ValueError:
            pass
        else:
            if extended or rx != SATURATED_32:
                values[self.rx_column] = rx * DATA_WORD_BYTES

    @property
    def data_files(self) -> list[tuple[int, str]]:
        """(descriptor, column) of the data counters this port has, tx before rx."""
        fds = self._fds
        return [(fd, col) for fd, col in ((fds[0], self.tx_column), (fds[1], self.rx_column))
                if fd >= 0]  # fmt: skip

    def read_packets(self) -> tuple[int | None, int | None]:
        """(tx packets, rx packets); None where unreadable or saturated."""
        return self._value(self._fds[2]), self._value(self._fds[3])

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        """(tx bytes, rx bytes, tx packets, rx packets); None where unreadable or saturated."""
        return (*self.read_data(), *self.read_packets())

    def saturated(self) -> frozenset[str]:
        """Names of the counters currently stuck at 2^32−1."""
        names = (XMIT_DATA, RCV_DATA, "port_xmit_packets", "port_rcv_packets")
        stuck = set()
        for name, fd in zip(names, self._fds, strict=True):
            if fd >= 0 and not self.port.extended:
                with contextlib.suppress(OSError):
                    if parse_sysfs_int(os.pread(fd, 32, 0)) == SATURATED_32:
                        stuck.add(name)
        return frozenset(stuck)

    def read_hw(self) -> dict[str, int]:
        """The allow-listed ``hw_counters`` (the driver caches them for ``lifespan`` ms).

        The directory is listed once per reader (a driver's counter set does not change while
        the port lives, and the sweeper opens new readers at every rescan); each file is read
        with bare ``os`` calls, a third of the cost of ``Path.read_bytes``.
        """
        out: dict[str, int] = {}
        if self.port.hw_dir is None:
            return out
        if self._hw_paths is None:
            try:
                names = os.listdir(self.port.hw_dir)
            except OSError:
                return out
            base = str(self.port.hw_dir)
            self._hw_paths = [(n, os.path.join(base, n)) for n in names if n in HW_COUNTERS]
        for name, path in self._hw_paths:
            value = parse_sysfs_int(_read_small(path))
            if value is not None:
                out[name] = value
        return out

    def close(self) -> None:
        """Close the descriptors."""
        for fd in self._fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fds = [-1] * len(self._fds)


def _read_small(path: str) -> bytes:
    """A small sysfs attribute's bytes; empty when absent or refused (like ``read_attr``)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _select(ports: Iterable[RdmaPort], cfg: RdmaConfig) -> tuple[list[RdmaPort], list[DeviceInfo]]:
    inc = re.compile(cfg.include) if cfg.include else None
    exc = re.compile(cfg.exclude) if cfg.exclude else None
    chosen: list[RdmaPort] = []
    infos: list[DeviceInfo] = []
    for p in ports:
        reason = p.skipped
        if reason is None and inc is not None and not (inc.search(p.device) or inc.search(p.name)):
            reason = "not matched by include"
        if reason is None and exc is not None and (exc.search(p.device) or exc.search(p.name)):
            reason = "matched by exclude"
        infos.append(
            DeviceInfo(
                device=p.name,
                kind="rdma",
                link_layer=p.link_layer,
                speed_bytes_per_s=p.rate_bytes_per_s,
                state=p.state,
                skipped=reason,
            )
        )
        if reason is None:
            chosen.append(p)
    return chosen, infos


class _RdmaSweeper:
    """The sampling thread's state: one reader per port, and the slower side readings."""

    def __init__(self, cfg: RdmaConfig, clock: Clock, name: str) -> None:
        self._cfg = cfg
        self._clock = clock
        self._name = name
        self.readers, self.infos = self._open()
        if not self.readers:
            reasons = "; ".join(f"{i.device}: {i.skipped}" for i in self.infos.values()) or (
                f"no device under {cfg.sysfs_root}/class/infiniband"
            )
            raise SourceUnavailable(name, f"no RDMA port to read ({reasons})")
        self._pending: list[Reading] = list(self.infos.values())
        hw_every = cfg.hw_counters_interval_s
        for r in self.readers:
            if r.port.lifespan_ms:
                hw_every = max(hw_every, r.port.lifespan_ms / 1000.0)
        self._hw_every = hw_every
        now = clock.now()
        self._next_slow = now
        self._next_scan = now + cfg.rescan_interval_s
        self._slow: dict[str, dict[str, int]] = {}
        self._stale: dict[str, frozenset[str]] = {}
        # Polls kept undecoded until the next drain (see sweep), with the slow counters that
        # came with some of them, by poll index.
        self._times: list[float] = []
        self._rows: list[list[bytes]] = []
        self._marks: list[tuple[int, dict[str, dict[str, int]]]] = []
        self._index()
        self._now = clock.now
        self._next_event = now  # the first poll goes out at once, with the device infos

    def _open(self) -> tuple[list[RdmaPortReader], dict[str, DeviceInfo]]:
        ports = discover_ports(self._cfg.sysfs_root)
        chosen, infos = _select(ports, self._cfg)
        readers = []
        for p in chosen:
            try:
                readers.append(RdmaPortReader(p))
            except OSError as exc:
                log.warning("cannot open counters of %s: %s", p.name, exc.strerror)
        return readers, {i.device: i for i in infos}

    def _read_slow(self, out: list[Reading]) -> None:
        """Packets, hw_counters (cached by the driver) and saturation flags, once a second."""
        slow: dict[str, dict[str, int]] = {}
        for r in self.readers:
            name = r.port.name
            counters = r.read_hw() if self._cfg.hw_counters else {}
            try:
                txp, rxp = r.read_packets()
            except OSError:
                continue
            if txp is not None:
                counters["tx_packets"] = txp
            if rxp is not None:
                counters["rx_packets"] = rxp
            slow[name] = counters
            stuck = r.saturated()
            if stuck != self._stale.get(name, frozenset()):
                self._stale[name] = stuck
                out.append(_with_stale(self.infos[name], stuck))
        self._slow = slow

    def _index(self) -> None:
        """The hot path's flat view of the readers' data descriptors (after every (re)open)."""
        files = [(fd, col, r) for r in self.readers for fd, col in r.data_files]
        self._fds = [fd for fd, _, _ in files]
        self._columns = tuple(col for _, col, _ in files)
        self._narrow = np.array([not r.port.extended for _, _, r in files], dtype=bool)

    def sweep(self) -> list[Reading]:
        """One poll of every port's data counters (other counters once a second).

        The poll is kept as raw bytes until :meth:`drain`, unless something else must go out
        with it (a device change, a port that went away): then what is kept goes first, and
        this poll is decoded at once, so that every reading keeps its place.
        """
        now = self._now
        before = now()
        try:
            raw: list[bytes] | None = [pread(fd, 32, 0) for fd in self._fds]
        except OSError:  # a port went away: the per-port read below finds which
            raw = None
        t = 0.5 * (before + now())
        if raw is not None and t < self._next_event:  # the hot path: nothing else is due
            self._times.append(t)
            self._rows.append(raw)
            return []
        return self._sweep_slow(t, raw)

    def _sweep_slow(self, t: float, raw: list[bytes] | None) -> list[Reading]:
        """A poll that comes with more: device infos, slow counters, a rescan, a lost port."""
        out, self._pending = self._pending, []
        counters: dict[str, dict[str, int]] = {}
        if t >= self._next_slow:
            self._next_slow = t + self._hw_every
            self._read_slow(out)
            counters = self._slow
        rescan = t >= self._next_scan
        if raw is not None and not out and not rescan:
            if counters:
                self._marks.append((len(self._rows), counters))
            self._times.append(t)
            self._rows.append(raw)
        else:
            values: dict[str, int] = {}
            lost: list[RdmaPortReader] = []
            if raw is None:
                for r in self.readers:
                    try:
                        r.read_data_into(values)
                    except OSError:
                        lost.append(r)
            else:
                self._decode_row(raw, values)
            out = self.drain() + out
            out.append(CounterReading(t, values, counters))
            if lost or rescan:
                self._next_scan = t + self._cfg.rescan_interval_s
                self._rescan(out, lost)
        self._next_event = min(self._next_slow, self._next_scan)
        return out

    def _decode_row(self, raw: list[bytes], values: dict[str, int]) -> None:
        """One kept poll's raw reads (in ``_fds`` order) into ``values``, port by port."""
        it = iter(raw)
        for r in self.readers:
            files = r.data_files
            pair = [next(it) for _ in files] + [b""] * (2 - len(files))
            if len(files) == 1 and files[0][1] == r.rx_column:
                pair.reverse()
            r.decode_data_into(values, pair[0], pair[1])

    def drain(self) -> list[Reading]:
        """The polls kept since the last drain, decoded: one batch when every value is clean.

        A value that is not a number ("N/A (no PMA)") or a saturated 32-bit counter leaves
        that poll's column out (a gap), as a poll decoded on its own would.
        """
        rows, times, marks = self._rows, self._times, self._marks
        if not rows:
            return []
        self._rows, self._times, self._marks = [], [], []
        try:
            words = np.array([list(map(int, row)) for row in rows], dtype=np.uint64)
        except (ValueError, OverflowError):
            words = None
        keep: npt.NDArray[np.bool_] | None = None
        if words is not None and len(rows) > 1 and words.shape[1:] == (len(self._columns),):
            # A 32-bit counter saturated all along is one gap column; one that saturates
            # within these polls is a gap in some of them only: decoded poll by poll.
            saturated = (words == SATURATED_32) & self._narrow
            stuck = saturated.all(axis=0)
            if not bool((saturated.any(axis=0) & ~stuck).any()):
                keep = ~stuck
        if words is None or keep is None or int(words.max(initial=0)) >= 1 << 62:  # × 4 > 64 bits
            marked = dict(marks)
            out: list[Reading] = []
            for i, (t, row) in enumerate(zip(times, rows, strict=True)):
                values: dict[str, int] = {}
                self._decode_row(row, values)
                out.append(CounterReading(t, values, marked.get(i, {})))
            return out
        columns = self._columns
        if not bool(keep.all()):
            words = words[:, keep]
            columns = tuple(c for c, k in zip(columns, keep.tolist(), strict=True) if k)
        return [
            CounterBatch(
                times=np.array(times, dtype=np.float64),
                columns=columns,
                values=words * np.uint64(DATA_WORD_BYTES),
                counters=tuple(marks),
            )
        ]

    def _rescan(self, out: list[Reading], lost: list[RdmaPortReader]) -> None:
        out.extend(DeviceInfo(device=r.port.name, kind="rdma", skipped="vanished") for r in lost)
        for r in self.readers:
            r.close()
        self.readers, infos = self._open()
        self._index()
        out.extend(info for name, info in infos.items() if self.infos.get(name) != info)
        gone = set(self.infos) - set(infos) - {r.port.name for r in lost}
        out.extend(DeviceInfo(device=n, kind="rdma", skipped="vanished") for n in sorted(gone))
        self.infos = infos
        if not self.readers:
            raise SourceUnavailable(self._name, "every RDMA port went away")

    def close(self) -> None:
        """Close every port's descriptors."""
        for r in self.readers:
            r.close()


class RdmaCounters:
    """Polls every selected port's data counters on absolute deadlines, in a sampling thread."""

    name = "rdma_counters"

    def __init__(self, config: RdmaConfig, *, clock: Clock, sampler: Sampler | None = None) -> None:
        self._cfg = config
        self._clock = clock
        self._sampler = sampler or Sampler(clock)

    async def run(self, emit: Emit) -> None:
        """Sweep until cancelled."""
        sweeper = _RdmaSweeper(self._cfg, self._clock, self.name)
        await self._sampler.run(
            self.name,
            self._cfg.poll_interval_s,
            sweeper.sweep,
            emit,
            close=sweeper.close,
            drain=sweeper.drain,
        )


def _with_stale(info: DeviceInfo, stale: frozenset[str]) -> DeviceInfo:
    return replace(info, stale_counters=stale)
