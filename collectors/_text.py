"""Opening an input file with errors that name it (shared by the file readers).

Recordings and logs travel compressed (a node's NCCL logs gzipped by the log rotation, a
``commpulse record`` directory packed for a ticket), so gzip, bzip2 and xz files are inflated
as they are read, recognised by their leading bytes rather than their names.
"""

from __future__ import annotations

import bz2
import io
import logging
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from agent.errors import InputFormatError

__all__ = ["Skipped", "inflated_chunks", "open_binary", "read_text_file", "text_lines"]

T = TypeVar("T")

log = logging.getLogger(__name__)


class Skipped:
    """Rows or cells of one kind that a reader left out: how many, and the first one.

    A recording with a few bad rows is still read; its warnings say what was lost and where.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.first: tuple[int, str] | None = None

    def add(self, lineno: int, why: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = (lineno, why)

    def note(self) -> str | None:
        if self.first is None:
            return None
        line, why = self.first
        return f"{self.count} {self.what} (first at line {line}: {why})"


#: Leading bytes of each compression this reads, and its name.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_ZSTD = b"\x28\xb5\x2f\xfd"
_TEXT_CHUNK = 1 << 16
#: What a stream that does not inflate raises (bz2 says "Invalid data stream" as an OSError).
_INFLATE_ERRORS = (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError)


def _compression(path: Path) -> str | None:
    with path.open("rb") as raw:
        head = raw.read(6)
    if head.startswith(_ZSTD):
        raise InputFormatError(path, "zstd-compressed: decompress it first (zstd -d)")
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def open_binary(path: Path) -> tuple[BinaryIO, str | None]:
    """``path`` open for reading raw bytes, and its compression's name (None: plain).

    Read it with :func:`inflated_chunks`, which inflates gzip, bzip2 and xz. Raises
    :class:`InputFormatError` for zstd (not in Python's standard library here) and
    ``OSError`` as ``open`` does.
    """
    compression = _compression(path)
    return path.open("rb"), compression


class _Inflater:
    """One compressed stream inflated a bounded piece at a time (zlib's API or bz2's/lzma's).

    Incremental decompressors rather than ``GzipFile`` and its kin: those lose what they
    inflated in a read that meets the cut end of a stream (up to a whole read, 1 MiB of an
    NCCL log), and an output bound keeps a small file that inflates hugely from filling memory.
    """

    def __init__(self, compression: str, path: Path) -> None:
        self._what = (compression, path)
        self._zlib: Any = None
        self._other: Any = None
        if compression == "bzip2":
            self._other = bz2.BZ2Decompressor()
        elif compression == "xz":
            self._other = lzma.LZMADecompressor()
        else:
            self._zlib = zlib.decompressobj(wbits=31)  # gzip framing

    @property
    def eof(self) -> bool:
        return bool((self._zlib or self._other).eof)

    @property
    def unused_data(self) -> bytes:
        return bytes((self._zlib or self._other).unused_data)

    def _inflate(self, data: bytes, size: int) -> bytes:
        try:
            if self._zlib is not None:
                return bytes(self._zlib.decompress(data, size))
            return bytes(self._other.decompress(data, max_length=size))
        except _INFLATE_ERRORS as exc:
            compression, path = self._what
            raise InputFormatError(
                path, f"{compression}-compressed, but it does not inflate: {exc}"
            ) from None

    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        """What ``data`` inflates to, in pieces of at most ``size`` bytes."""
        if self._zlib is not None:
            pending = data
            while pending and not self._zlib.eof:
                out = self._inflate(pending, size)
                pending = self._zlib.unconsumed_tail
                if out:
                    yield out
            return
        out = self._inflate(data, size)
        while True:
            if out:
                yield out
            if self._other.eof or self._other.needs_input:
                return
            out = self._inflate(b"", size)


def inflated_chunks(
    path: Path,
    stream: BinaryIO,
    compression: str | None,
    size: int,
    on_cut: Callable[[], None] | None = None,
    *,
    log_cut: bool = True,
) -> Iterator[bytes]:
    """``stream``'s bytes, inflated if compressed, in chunks of about ``size`` bytes.

    Concatenated streams (``pbzip2``, ``cat a.gz b.gz``) are all read and zero padding after
    one is skipped. A compressed stream cut short ends the chunks, keeping every byte it
    inflated to, with a logged warning (unless ``log_cut`` is False: the caller reports it)
    and a call of ``on_cut``; one that does not inflate is an error.
    """
    if compression is None:
        while chunk := stream.read(size):
            yield chunk
        return
    inflate: _Inflater | None = _Inflater(compression, path)
    while data := stream.read(size):
        while data:
            if inflate is None:  # between streams: padding, or the next one
                data = data.lstrip(b"\0")
                if not data:
                    break
                inflate = _Inflater(compression, path)
            yield from inflate.pieces(data, size)
            data = inflate.unused_data if inflate.eof else b""
            if inflate.eof:
                inflate = None
    if inflate is not None:
        if log_cut:
            log.warning("%s: the %s stream ends early (a cut copy?): read what it held", path,
                        compression)  # fmt: skip
        if on_cut is not None:
            on_cut()


def _encoding(head: bytes) -> str:
    """UTF-8 (a byte-order mark skipped), or UTF-16 where its mark says so.

    Windows PowerShell 5's ``>`` writes UTF-16: a CSV redirected on a Windows GPU box.
    """
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    return "utf-8-sig"


def text_lines(path: Path, stream: BinaryIO, compression: str | None) -> Iterator[str]:
    """The lines of a text file open as ``stream`` (see :func:`open_binary`), newlines kept.

    A compressed stream cut short ends the lines with a warning, without its cut last line (a
    number cut short would read as a counter reset).
    """
    raw = _Chunks(path, stream, compression)
    buffered = io.BufferedReader(raw, _TEXT_CHUNK)
    text = io.TextIOWrapper(buffered, encoding=_encoding(buffered.peek(3)[:3]), newline="")
    held: str | None = None
    for line in text:
        if held is not None:
            yield held
        held = line
    if held is not None and not (raw.cut and not held.endswith(("\n", "\r"))):
        yield held


class _Chunks(io.RawIOBase):
    """A raw stream over :func:`inflated_chunks` (so that a cut stream just ends)."""

    def __init__(self, path: Path, stream: BinaryIO, compression: str | None) -> None:
        self._chunks = inflated_chunks(path, stream, compression, _TEXT_CHUNK, self._note_cut)
        self._pending = memoryview(b"")
        self.cut = False

    def _note_cut(self) -> None:
        self.cut = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._pending:
            self._pending = memoryview(next(self._chunks, b""))
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def read_text_file(path: Path, parse: Callable[[Iterable[str]], T], *, what: str) -> T:
    """Open ``path`` as text and hand its lines to ``parse``.

    UTF-8, or UTF-16 with its mark; inflated first if compressed. Unreadable, binary or
    directory paths become :class:`InputFormatError` naming the file; ``what`` says what was
    expected ("a counters CSV file").
    """
    try:
        stream, compression = open_binary(path)
        with stream:
            return parse(text_lines(path, stream, compression))
    except UnicodeDecodeError as exc:
        raise InputFormatError(path, f"not a text file ({exc.reason})") from None
    except IsADirectoryError:
        raise InputFormatError(path, f"is a directory, expected {what}") from None
    except OSError as exc:
        raise InputFormatError(path, f"cannot read: {exc.strerror or exc}") from None
