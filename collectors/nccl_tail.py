"""Live tailing of NCCL debug logs (``NCCL_DEBUG_FILE=/dir/nccl.%h.%p.log``).

Follows a set of glob patterns, so per-process files are picked up as processes start, and
survives what happens to log files in practice:

* **rename rotation / delete and re-create**: a changed inode on the path means a new file; the
  old one is read to its end first (its descriptor is still open), then the new one from 0,
  and the old one is still followed while it is written (NCCL never reopens its log: after
  logrotate's "create" it writes on into the renamed file);
* **copytruncate / overwrite on restart** (NCCL opens its file with ``"w"``): a size below our
  offset, or first bytes or bytes just before our offset that changed, mean the file was
  truncated or rewritten; reading restarts at 0;
* **partial last lines** are held until their newline arrives; a line longer than
  ``max_line_bytes`` is dropped and counted, never buffered whole;
* **agent restarts**: offsets are saved (with the file's device, inode and a fingerprint of its
  first bytes) in a state file, so a restart neither re-reads nor skips.

New lines come a chunk of whole lines at a time (:meth:`Tailer.poll_text`) and are decoded in
bulk by the pure parser (:meth:`collectors.nccl_log.LiveDecoder.decode_chunks`: one regex pass
per chunk for the common COLL line, the per-line parser for the rest); the COLL records of a
sweep become one :class:`CallBatch`. NCCL's timestamps are wall-clock in local time; they are
mapped onto the agent's monotonic clock with the smallest arrival-minus-timestamp lag of the
last 30 s (a line cannot arrive before it was written: :mod:`collectors._lag`). Lines without a
timestamp are stamped on arrival.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.clock import Clock
from agent.errors import ConfigError, SourceUnavailable
from collectors._base import CallBatch, CallKey, Emit, LogLine, Reading, SourceStats
from collectors._config import check_interval, doc
from collectors._lag import BACKLOG_S, ArrivalLag
from collectors._sampler import Sampler
from collectors.nccl_log import MAX_LINE_BYTES, FastCall, LiveDecoder, stamp_resolution

__all__ = ["NcclTail", "NcclTailConfig", "TailStats", "Tailer", "decode_batch", "decode_texts"]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]

#: Bytes hashed to recognise a file again after an agent restart.
FINGERPRINT_BYTES = 256
#: Bytes before the read offset kept to notice a file rewritten to at least the same size.
TAIL_BYTES = 64
#: Bytes read from a file at a time (into one reused buffer) ...
READ_CHUNK = 1 << 20
#: ... and at most this many chunks per file and poll (a poll stays under a second or so of
#: decoding; the rest comes next poll). One chunk a poll capped a file at 5 MiB/s at the
#: default 0.2 s poll: 8 ranks' lines at 40 k/s in one file fell further behind every second.
READ_CHUNKS_PER_POLL = 16
#: A rotated file is followed until it has not been written for this long: NCCL never reopens
#: its log, so after logrotate's default "create" (rename, new empty file) it goes on writing
#: to the renamed one, which is then the live log.
ROTATED_QUIET_S = 300.0
#: Most rotated files followed per path (the oldest is let go first).
MAX_ROTATED = 4
#: A followed file not written for this long has its descriptor closed ("parked"); it is
#: reopened when its size or time stamp changes ...
PARK_QUIET_S = 300.0
#: ... and at most this many are open at once, the least recently written parked first.
#: Per-process logs (``nccl.%h.%p.log``) pile up over months: 1,100 of them took every
#: descriptor (EMFILE), and the daemon died on the next file it had to open.
MAX_OPEN_FILES = 128


@dataclass(frozen=True)
class NcclTailConfig:
    """Settings of the NCCL log source (section ``[sources.nccl_log]``)."""

    enabled: bool = doc(False, "Tail NCCL debug logs.")
    paths: tuple[str, ...] = doc((), "Glob patterns of log files, e.g. /var/log/nccl/*.log.")
    read_from: str = doc(
        "end", "Where to start in files found at startup: end or beginning (new files: 0)."
    )
    poll_interval_s: float = doc(0.2, "Seconds between looks at the files.")
    max_line_bytes: int = doc(MAX_LINE_BYTES, "Longer lines are dropped and counted.")
    state_file: Path | None = doc(
        None, "Offsets kept across restarts; unset: <agent.state_dir>/nccl_offsets.json."
    )

    def __post_init__(self) -> None:
        if self.read_from not in ("end", "beginning"):
            raise ConfigError("sources.nccl_log.read_from must be end or beginning")
        check_interval("sources.nccl_log", "poll_interval_s", self.poll_interval_s, 0.01, 60.0)
        if not 256 <= self.max_line_bytes <= 1 << 26:
            raise ConfigError("sources.nccl_log.max_line_bytes must be between 256 and 64 MiB")
        if self.enabled and not self.paths:
            raise ConfigError("sources.nccl_log.paths: give at least one glob pattern")


@dataclass
class TailStats:
    """What the tailer saw, for the agent's own metrics."""

    lines: int = 0
    coll_lines: int = 0
    warn_lines: int = 0
    overlong_lines: int = 0
    truncations: int = 0
    rotations: int = 0
    files: int = 0
    #: Bytes of the followed files not read yet after the last poll (a gauge): a poll reads at
    #: most ``READ_CHUNKS_PER_POLL`` chunks a file, and a log written faster stays behind.
    unread_bytes: int = 0

    def totals(self, **more: int) -> dict[str, int]:
        """The counts as a flat mapping (what :class:`SourceStats` carries)."""
        return {**{k: int(v) for k, v in vars(self).items()}, **more}


@dataclass
class _File:
    path: str
    fd: int
    dev: int
    ino: int
    offset: int
    partial: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # inside an over-long line: drop bytes up to its newline
    head: bytes = b""  # the file's first bytes as we read them: a rewrite changes them
    tail: bytes = b""  # the bytes just before ``offset``: a rewrite to the same size changes them
    old: list[_File] = field(default_factory=list)  # rotated predecessors still being drained
    mtime_ns: int = 0  # last write seen (parked files: when they were parked)
    size: int = 0  # size when parked
    unread: int = 0  # bytes past ``offset`` left for the next poll when the last one ended

    @property
    def parked(self) -> bool:
        return self.fd < 0


def _fingerprint(fd: int, length: int) -> str:
    """Hash of the file's first ``length`` bytes (a file that grew keeps its fingerprint)."""
    try:
        head = os.pread(fd, length, 0)
    except OSError:
        return ""
    if len(head) < length:
        return ""
    return hashlib.sha256(head).hexdigest()[:16]


class Tailer:
    """Follows glob patterns; :meth:`poll` returns the complete new lines of every file."""

    def __init__(
        self,
        patterns: tuple[str, ...],
        *,
        read_from: str = "end",
        max_line_bytes: int = MAX_LINE_BYTES,
        state_file: Path | None = None,
    ) -> None:
        self._patterns = patterns
        self._max = max_line_bytes
        self._state_file = state_file
        self._files: dict[str, _File] = {}
        self._nopen = 0  # followed files whose descriptor is open (rotated ones not counted)
        self._state_error: str | None = None  # why the last save failed (said once)
        self._buf = bytearray(READ_CHUNK)  # every read lands here, decoding copies it out
        self._mask = np.empty(0, dtype=np.bool_)  # where the newlines are (grown as needed)
        self.stats = TailStats()
        saved = self._load_state()
        for path in self._expand():
            self._open(path, start="saved" if path in saved else read_from, saved=saved)

    # -- state ---------------------------------------------------------------------------

    def _load_state(self) -> dict[str, dict[str, object]]:
        if self._state_file is None:
            return {}
        try:
            data = json.loads(self._state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable tail state %s: %s", self._state_file, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def save_state(self) -> None:
        """Write offsets (atomically) so a restarted agent resumes exactly here."""
        if self._state_file is None:
            return
        data = {}
        for f in self._files.values():
            # Fingerprint what we read, not what the file holds now: a file rewritten since
            # our last read must not be taken for the one whose offset we keep.
            data[f.path] = {"dev": f.dev, "ino": f.ino, "offset": f.offset - len(f.partial),
                            "fingerprint_bytes": len(f.head),
                            "fingerprint": hashlib.sha256(f.head).hexdigest()[:16]}  # fmt: skip
        tmp = self._state_file.with_suffix(".tmp")
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self._state_file)
        except OSError as exc:
            # Said once per reason, not every 5 s for months (an unwritable state_dir).
            said = exc.strerror != self._state_error
            self._state_error = exc.strerror
            log.log(
                logging.WARNING if said else logging.DEBUG,
                "cannot save tail state %s: %s (offsets will not survive a restart)",
                self._state_file,
                exc.strerror,
            )
        else:
            self._state_error = None

    # -- files ---------------------------------------------------------------------------

    def _expand(self) -> list[str]:
        found: set[str] = set()
        for pattern in self._patterns:
            found.update(p for p in glob.glob(pattern) if os.path.isfile(p))
        return sorted(found)

    def _open(
        self, path: str, *, start: str, saved: dict[str, dict[str, object]] | None = None
    ) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            st = os.fstat(fd)
        except OSError as exc:
            log.debug("cannot open %s: %s", path, exc)
            return
        offset = 0
        if start == "end":
            offset = st.st_size
        elif start == "saved" and saved is not None:
            entry = saved.get(path, {})
            length = entry.get("fingerprint_bytes")
            same = (
                entry.get("dev") == st.st_dev
                and entry.get("ino") == st.st_ino
                and isinstance(length, int)
                and entry.get("fingerprint") == _fingerprint(fd, length)
            )
            saved_offset = entry.get("offset")
            if same and isinstance(saved_offset, int) and 0 <= saved_offset <= st.st_size:
                offset = saved_offset
        head = tail = b""
        if offset:
            try:
                head = os.pread(fd, min(FINGERPRINT_BYTES, offset), 0)
                tail = os.pread(fd, min(TAIL_BYTES, offset), offset - min(TAIL_BYTES, offset))
            except OSError:
                head = tail = b""
        self._files[path] = _File(path, fd, st.st_dev, st.st_ino, offset, head=head, tail=tail,
                                  mtime_ns=st.st_mtime_ns)  # fmt: skip
        self.stats.files = len(self._files)
        self._nopen += 1
        if self._nopen > MAX_OPEN_FILES:
            self._park_file(self._files[path])  # the next poll's end keeps the busiest open

    def _park_file(self, f: _File) -> None:
        """Close a followed file's descriptor, keeping its place (offset, partial line)."""
        try:
            st = os.fstat(f.fd)
            f.mtime_ns, f.size = st.st_mtime_ns, st.st_size
        except OSError:
            f.mtime_ns, f.size = 0, -1  # unknown: reopened at the next look
        with contextlib.suppress(OSError):
            os.close(f.fd)
        f.fd = -1
        self._nopen -= 1

    def _park(self) -> None:
        """Park the files quiet for ``PARK_QUIET_S``, and the least recently written ones.

        The latter while more than ``MAX_OPEN_FILES`` are open. Files that still drain rotated
        predecessors stay open.
        """
        now_ns = time.time_ns()
        candidates = []
        for f in self._files.values():
            if f.parked or f.old:
                continue
            try:
                f.mtime_ns = os.fstat(f.fd).st_mtime_ns
            except OSError:
                continue
            candidates.append(f)
        candidates.sort(key=lambda f: f.mtime_ns)
        excess = self._nopen - MAX_OPEN_FILES
        for k, f in enumerate(candidates):
            if k < excess or (now_ns - f.mtime_ns) / 1e9 > PARK_QUIET_S:
                self._park_file(f)

    def _unpark(self, f: _File, st: os.stat_result) -> bool:
        """Reopen a parked file that changed or has bytes unread; False while neither.

        ``st`` is its path's stat, taken once by the caller (which also tells a deletion).
        """
        same = (st.st_dev, st.st_ino) == (f.dev, f.ino)
        if same and st.st_size == f.size == f.offset and st.st_mtime_ns == f.mtime_ns:
            return False
        try:
            fd = os.open(f.path, os.O_RDONLY)
            now = os.fstat(fd)
        except OSError as exc:
            log.debug("cannot reopen %s: %s", f.path, exc)
            return False
        if (now.st_dev, now.st_ino) != (f.dev, f.ino):
            # Replaced while parked: its writes since then, if any, are not in reach.
            self.stats.rotations += 1
            f.dev, f.ino, f.offset, f.head, f.tail = now.st_dev, now.st_ino, 0, b"", b""
            f.partial.clear()
            f.skipping = False
        f.fd = fd
        self._nopen += 1
        return True

    def _read(self, f: _File) -> list[str]:
        """New complete lines of one file, up to ``READ_CHUNKS_PER_POLL`` chunks, as texts."""
        texts: list[str] = []
        for _ in range(READ_CHUNKS_PER_POLL):
            before = f.offset
            texts += self._read_chunk(f)
            if f.offset - before < READ_CHUNK:
                f.unread = 0  # a short read: the end of the file
                break
        else:
            f.unread = max(0, self._size(f) - f.offset)
        return texts

    def _read_chunk(self, f: _File) -> list[str]:
        """New complete lines of one file (at most READ_CHUNK bytes per call), as texts.

        Each text is whole lines, each ending in a newline: the line completing the partial
        one kept from the last read, then the rest. Reading goes into one reused buffer and
        decoding straight from it, so a chunk costs one fresh megabyte (its text), not four:
        fresh pages fault, and on a VM a fault costs as much as decoding the page. Decoding,
        the over-long check and the CR strip run over whole texts (in C), not line by line; a
        line over ``max_line_bytes`` is dropped and counted, and a partial one that grows past
        the limit is dropped up to its newline without being kept.
        """
        if len(self._buf) != READ_CHUNK:
            self._buf = bytearray(READ_CHUNK)
        buf = self._buf
        try:
            size = os.preadv(f.fd, [buf], f.offset)
        except OSError:
            return []
        if not size:
            return []
        data = memoryview(buf)[:size]
        if len(f.head) < FINGERPRINT_BYTES and f.offset < FINGERPRINT_BYTES:
            f.head = (f.head + data[: FINGERPRINT_BYTES - f.offset])[:FINGERPRINT_BYTES]
        f.offset += size
        f.tail = bytes((f.tail + data[-TAIL_BYTES:])[-TAIL_BYTES:])
        last = buf.rfind(b"\n", 0, size)
        if last < 0:  # no line ends in this chunk
            if not f.skipping:
                f.partial += data
                if len(f.partial) > self._max:
                    self.stats.overlong_lines += 1
                    f.partial.clear()
                    f.skipping = True
            return []
        texts: list[str] = []
        start = 0
        if f.skipping:  # drop the rest of an over-long line
            start = buf.find(b"\n", 0, size) + 1
            f.skipping = False
        elif f.partial:  # the partial line completed: decoded on its own, not copied onto all
            start = buf.find(b"\n", 0, size) + 1
            f.partial += data[:start]
            texts.append(self._text(f.partial, 0, len(f.partial)))
            f.partial.clear()
        texts.append(self._text(buf, start, last + 1))
        f.partial += data[last + 1 :]
        if len(f.partial) > self._max:
            self.stats.overlong_lines += 1
            f.partial.clear()
            f.skipping = True
        return [text for text in texts if text]

    def _text(self, raw: bytearray, start: int, end: int) -> str:
        """``raw[start:end]`` (complete lines) as text, counted in the stats."""
        text = str(memoryview(raw)[start:end], "utf-8", "replace")
        if self._may_be_overlong(raw, start, end):
            lines = text.split("\n")
            lines.pop()  # the empty string after the final newline
            kept = [line for line in lines if len(line) <= self._max]
            if len(kept) != len(lines):
                self.stats.overlong_lines += len(lines) - len(kept)
                text = "".join([line + "\n" for line in kept])
            count = len(kept)
        else:  # numpy counts newlines ~6x faster than bytes.count (into a reused mask)
            if len(self._mask) < end - start:
                self._mask = np.empty(end - start, dtype=np.bool_)
            chars = np.frombuffer(raw, dtype=np.uint8, count=end - start, offset=start)
            count = int(np.count_nonzero(np.equal(chars, 10, out=self._mask[: end - start])))
        if "\r" in text:  # a CR before a line's LF is not part of the line
            text = text.replace("\r\n", "\n")
        self.stats.lines += count
        return text

    def _may_be_overlong(self, raw: bytearray, start: int, end: int) -> bool:
        """Whether a line of ``raw[start:end]`` may exceed ``max_line_bytes`` characters.

        Cheap and in C: a line has at most as many characters as bytes, and a run of more than
        ``max`` bytes without a newline covers a whole block of (max + 2) // 2 bytes aligned
        on ``start``: only a block without a newline calls for the exact, line by line check.
        """
        block = (self._max + 2) // 2
        return any(
            raw.find(b"\n", at, at + block) < 0 for at in range(start, end - block + 1, block)
        )

    def _restart_if_rewritten(self, f: _File) -> None:
        """Start over at byte 0 of a file that was truncated or rewritten in place.

        copytruncate shrinks it; NCCL reopening its file with "w" may already have written
        more than we had read, so only the first bytes tell. Checked through our own
        descriptor, so a file deleted or rotated since the last poll is judged the same way.
        """
        if self._size(f) < f.offset or self._rewritten(f):
            self.stats.truncations += 1
            f.offset = 0
            f.partial.clear()
            f.skipping = False
            f.head = f.tail = b""

    @staticmethod
    def _size(f: _File) -> int:
        try:
            return os.fstat(f.fd).st_size
        except OSError:
            return f.offset

    @staticmethod
    def _rewritten(f: _File) -> bool:
        """The file's first bytes, or the last ones we read, differ from what we read there.

        Either means it was rewritten in place. The last bytes catch a copytruncate followed by
        writes that regrow the file past our offset between two polls, with the same first
        bytes (a job restarted with the same banner): its size alone cannot tell.
        """
        try:
            if f.head and os.pread(f.fd, len(f.head), 0) != f.head:
                return True
            at = f.offset - len(f.tail)
            return bool(f.tail) and at >= 0 and os.pread(f.fd, len(f.tail), at) != f.tail
        except OSError:
            return False

    def poll(self) -> list[tuple[str, str]]:
        """(path, line) for every complete new line since the last poll."""
        out: list[tuple[str, str]] = []
        for path, text in self.poll_text():
            lines = text.split("\n")
            lines.pop()  # the empty string after the final newline
            out.extend(zip(repeat(path), lines))
        return out

    def poll_text(self) -> list[tuple[str, str]]:
        """(path, text) of the complete new lines since the last poll, per file and read.

        Each text is whole lines, each ending in a newline: the same lines as :meth:`poll`,
        without a Python object per line.
        """
        out: list[tuple[str, str]] = []
        for path in self._expand():
            if path not in self._files:
                self._open(path, start="beginning")  # appeared while we run: all of it
        for path, current in list(self._files.items()):
            f = current
            if f.parked:
                try:
                    parked_st = os.stat(path)
                except FileNotFoundError:
                    # Deleted while parked: lines it still had unread (a file parked in a
                    # backlog, over the cap) went with it.
                    del self._files[path]
                    continue
                except OSError:
                    continue
                if not self._unpark(f, parked_st):
                    continue
                if self._nopen > MAX_OPEN_FILES:  # read this poll's chunk, then park it again
                    self._restart_if_rewritten(f)
                    out.extend((path, text) for text in self._read(f))
                    self._park_file(f)
                    continue
            for old in list(f.old):  # rotated files first: drained, or followed while written
                texts = self._read(old)
                if texts:
                    out.extend((path, text) for text in texts)
                elif len(f.old) > MAX_ROTATED or _quiet(old.fd, ROTATED_QUIET_S):
                    with contextlib.suppress(OSError):
                        os.close(old.fd)
                    f.old.remove(old)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_ino != f.ino or st.st_dev != f.dev):
                # Rotated or re-created: finish the old file, then follow the new one.
                self.stats.rotations += 1
                self._restart_if_rewritten(f)
                out.extend((path, text) for text in self._read(f))
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    continue
                new = _File(path, fd, st.st_dev, st.st_ino, 0, old=[*f.old, f])
                self._files[path] = new
                f = new
            else:
                self._restart_if_rewritten(f)
            out.extend((path, text) for text in self._read(f))
            if st is None and not f.old:
                # Deleted: drain what is left through the open descriptor, then forget it.
                out.extend((path, text) for text in self._read(f))
                with contextlib.suppress(OSError):
                    os.close(f.fd)
                self._nopen -= 1
                del self._files[path]
        self._park()
        self.stats.files = len(self._files)
        self.stats.unread_bytes = sum(
            f.unread + sum(old.unread for old in f.old) for f in self._files.values()
        )
        return out

    def close(self) -> None:
        """Save offsets and close every descriptor."""
        self.save_state()
        for f in self._files.values():
            for old in f.old:
                with contextlib.suppress(OSError):
                    os.close(old.fd)
            if not f.parked:
                with contextlib.suppress(OSError):
                    os.close(f.fd)
        self._files.clear()
        self._nopen = 0

    @property
    def open_files(self) -> int:
        """Descriptors held now (followed files not parked, and rotated ones draining)."""
        return self._nopen + sum(len(f.old) for f in self._files.values())


def _quiet(fd: int, seconds: float) -> bool:
    """Whether the open file was last written over ``seconds`` ago (or cannot be told)."""
    try:
        return time.time() - os.fstat(fd).st_mtime > seconds
    except OSError:
        return True


def decode_batch(
    decoder: LiveDecoder,
    lines: Iterable[str],
    arrival: float,
    time_of: Callable[[float | None, float], float],
) -> CallBatch | None:
    """The COLL records of new lines as one batch (None when there is none), line by line.

    ``time_of(nccl_timestamp, arrival)`` places a call on the agent's clock. The per-line
    reference of :func:`decode_texts` (the live path before it): one fast regex per COLL line,
    a shape cache for S, plain lists; about 4x slower. ``keys`` are in order of first call,
    each caller's rank as the decoder knows it once the whole batch is decoded.
    """
    times: list[float] = []
    sizes: list[float] = []
    ops: dict[str, list[int]] = {}
    nranks: int | None = None
    processes: set[str] = set()
    world: set[tuple[str, str]] = set()  # (process, comm) of the largest comms
    fast = decoder.fast
    calls: list[FastCall] = []
    for line in lines:
        call = fast(line)
        if call is not None:
            calls.append(call)
        elif "NCCL " in line or "opCount " in line:  # init, WARN, glued or cut records
            calls.extend(
                (c.timestamp_s, c.op, c.s_bytes, c.nranks or 0, c.comm, c.process, c.peer)
                for c in decoder.decode(line)
            )
    raw = np.array([math.nan if c[0] is None else c[0] for c in calls], dtype=np.float64)
    stamps = decoder.unwrap_undated(raw, [c[5] for c in calls]).tolist()
    for stamp, (_, op, size, call_nranks, comm, process, _peer) in zip(stamps, calls, strict=True):
        times.append(time_of(None if math.isnan(stamp) else stamp, arrival))
        sizes.append(float("nan") if size is None else float(size))
        entry = ops.get(op)
        if entry is None:
            entry = ops[op] = [0, 0]
        entry[0] += 1
        entry[1] += size or 0
        if call_nranks:
            if nranks is None or call_nranks > nranks:
                nranks = call_nranks
                world.clear()
            if call_nranks == nranks:
                world.add((process, comm))
        processes.add(process)
    if not times:
        return None
    # Who made each call: the distinct calls but for their time, then the key of each (calls
    # that differ only in S share one), both numbered in order of first appearance.
    alike: dict[tuple[str, int | None, int, str, str, int], int] = {}
    call_alike = [alike.setdefault(call[1:], len(alike)) for call in calls]
    key_index: dict[tuple[str, str, str, int, int], int] = {}  # the CallKey but its rank
    alike_keys = [key_index.setdefault((op, process, comm, n, peer), len(key_index))
                  for op, _, n, comm, process, peer in alike]  # fmt: skip
    return CallBatch(
        times=np.asarray(times),
        s_bytes=np.asarray(sizes),
        ops={op: (c, b) for op, (c, b) in ops.items()},
        nranks=nranks,
        processes=frozenset(processes),
        comm_id=_job_comm_id(decoder, world),
        key_ids=np.array(alike_keys, dtype=np.int32)[call_alike],
        keys=tuple(_call_key(decoder, *who) for who in key_index),
    )


def _resolution(stamps: F64, poll_s: float) -> float:
    """How coarse a batch's call times are: 0 when NCCL's timestamps have a fraction.

    Calls without a timestamp are stamped when read (``poll_s``); timestamps in NCCL's default
    format are whole seconds (:func:`~collectors.nccl_log.stamp_resolution`).
    """
    unstamped = poll_s if bool(np.isnan(stamps).any()) else 0.0
    return max(unstamped, stamp_resolution(stamps))


def decode_texts(
    decoder: LiveDecoder,
    texts: Iterable[str],
    arrival: float,
    place: Callable[[F64, float], F64],
    poll_s: float = 0.0,
) -> CallBatch | None:
    """The COLL records of new chunks of lines (:meth:`Tailer.poll_text`) as one batch.

    The live hot path: the same batch :func:`decode_batch` makes of the same lines, but
    decoded a chunk at a time (:meth:`LiveDecoder.decode_chunks`) and accounted with numpy
    and per call kind, not per call. ``place(nccl_timestamps, arrival)`` maps the timestamps
    (NaN: none) onto the agent's clock in call order, as ``time_of`` does one at a time.
    Calls without a timestamp are stamped ``arrival``: the batch says their times are only
    ``poll_s`` fine (a second, with NCCL's default timestamp format: :func:`_resolution`).
    """
    stamps, kinds = decoder.decode_chunks(texts)
    if not kinds.size:
        return None
    # Each kind once, in order of first appearance (the op and key order decode_batch gives).
    used, first, inverse, counts = np.unique(
        kinds, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.argsort(first, kind="stable")
    ops: dict[str, list[int]] = {}
    nranks: int | None = None
    processes: set[str] = set()
    seen: list[tuple[int, str, str]] = []
    key_index: dict[tuple[str, str, str, int, int], int] = {}
    kind_keys: list[int] = []  # the key id of each kind, in order of first appearance
    for kind, calls in zip(used[order].tolist(), counts[order].tolist(), strict=True):
        op, size, call_nranks, comm, process, peer = decoder.kind(kind)
        who = (op, process, comm, call_nranks, peer)  # kinds that differ in S share a key
        key_id = key_index.get(who)
        if key_id is None:
            key_id = key_index[who] = len(key_index)
        kind_keys.append(key_id)
        entry = ops.get(op)
        if entry is None:
            entry = ops[op] = [0, 0]
        entry[0] += calls
        entry[1] += calls * (size or 0)
        if call_nranks and (nranks is None or call_nranks > nranks):
            nranks = call_nranks
        processes.add(process)
        seen.append((call_nranks, process, comm))
    world = {(process, comm) for n, process, comm in seen if nranks and n == nranks}
    key_of_used = np.empty(used.size, dtype=np.int32)
    key_of_used[order] = kind_keys
    times = place(stamps, arrival)
    s_bytes = decoder.kind_bytes()[kinds]
    placed = np.isfinite(times)
    if not placed.all():  # a backlog's calls: counted, but not timed (collectors/_lag.py)
        times, s_bytes, inverse = times[placed], s_bytes[placed], inverse[placed]
    return CallBatch(
        times=times,
        s_bytes=s_bytes,
        ops={op: (c, b) for op, (c, b) in ops.items()},
        nranks=nranks,
        processes=frozenset(processes),
        comm_id=_job_comm_id(decoder, world),
        key_ids=key_of_used[inverse],
        time_resolution_s=_resolution(stamps, poll_s),
        keys=tuple(_call_key(decoder, *who) for who in key_index),
    )


def _call_key(
    decoder: LiveDecoder, op: str, process: str, comm: str, nranks: int, peer: int
) -> CallKey:
    """The :class:`CallKey` of calls made alike (nranks 0: unknown).

    With the caller's rank and the communicator's commId (the same in every process of it) as
    the decoder knows them.
    """
    return CallKey(
        op,
        process,
        comm,
        nranks or None,
        peer,
        decoder.rank(process, comm),
        decoder.comm_id(process, comm),
    )


def _job_comm_id(decoder: LiveDecoder, comms: set[tuple[str, str]]) -> str | None:
    """The commId of the largest communicators' calls.

    The smallest id on a tie, so that every host of a job that sees the same communicators
    names the same one.
    """
    ids = {cid for process, comm in comms if (cid := decoder.comm_id(process, comm)) is not None}
    return min(ids) if ids else None


class NcclTail:
    """The NCCL log source: tails the files and emits one reading per COLL record."""

    name = "nccl_log"

    def __init__(
        self,
        config: NcclTailConfig,
        *,
        clock: Clock,
        state_file: Path | None = None,
        sampler: Sampler | None = None,
        raw_lines: bool = False,
        backlog_s: float | None = BACKLOG_S,
    ) -> None:
        self._cfg = config
        self._clock = clock
        self._state_file = config.state_file or state_file
        self._sampler = sampler or Sampler(clock)
        self._raw = raw_lines
        # NCCL's stamps onto the agent's clock; a backlog's are left untimed (collectors/_lag).
        self._lags = ArrivalLag(backlog_s=backlog_s)
        self.stats = TailStats()

    @property
    def _lag(self) -> float | None:
        return self._lags.lag

    def _time(self, stamp: float | None, arrival: float) -> float:
        """One call's NCCL timestamp on the agent's clock (None: stamped on arrival)."""
        return self._lags.time(stamp, arrival)

    def _times(self, stamps: F64, arrival: float) -> F64:
        """:meth:`_time` of every stamp in order (NaN: none), in numpy: the same doubles."""
        return self._lags.times(stamps, arrival)

    async def run(self, emit: Emit) -> None:
        """Tail until cancelled."""
        tailer = Tailer(
            self._cfg.paths,
            read_from=self._cfg.read_from,
            max_line_bytes=self._cfg.max_line_bytes,
            state_file=self._state_file,
        )
        self.stats = tailer.stats
        if not tailer.stats.files and not any(glob.has_magic(p) for p in self._cfg.paths):
            tailer.close()
            raise SourceUnavailable(self.name, f"no file matches {list(self._cfg.paths)}")
        next_save = self._clock.now() + 5.0
        decoder = LiveDecoder()
        last_stats: dict[str, int] = {}

        def sweep() -> list[Reading]:
            nonlocal next_save
            arrival = self._clock.now()
            out: list[Reading] = []
            polled = tailer.poll_text()
            if self._raw:
                out.extend(LogLine(arrival, path, line) for path, text in polled
                           for line in text.split("\n")[:-1])  # fmt: skip
            batch = decode_texts(
                decoder,
                (text for _, text in polled),
                arrival,
                self._times,
                self._cfg.poll_interval_s,
            )
            if batch is not None:
                tailer.stats.coll_lines += int(batch.times.size)
                out.append(batch)
            tailer.stats.warn_lines = decoder.warn_lines
            stats = tailer.stats.totals(unparsed_lines=decoder.unparsed_lines)
            if stats != last_stats:
                last_stats.clear()
                last_stats.update(stats)
                out.append(SourceStats(arrival, stats))
            if arrival >= next_save:
                next_save = arrival + 5.0
                tailer.save_state()
            return out

        await self._sampler.run(
            self.name, self._cfg.poll_interval_s, sweep, emit, close=tailer.close
        )
