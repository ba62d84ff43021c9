"""Opening an input file with errors that name it (shared by the file readers).

Recordings and logs travel compressed (a node's NCCL logs gzipped by the log rotation, a
``commpulse record`` directory packed for a ticket), so gzip, bzip2 and xz files are inflated
as they are read, recognised by their leading bytes rather than their names.
"""

from __future__ import annotations

import bz2
import gzip
import io
import logging
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

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
#: What a stream that does not inflate raises, by format (EOFError: cut short).
_INFLATE_ERRORS = (gzip.BadGzipFile, zlib.error, lzma.LZMAError, ValueError)


def _compression(path: Path) -> str | None:
    with path.open("rb") as raw:
        head = raw.read(6)
    if head.startswith(_ZSTD):
        raise InputFormatError(path, "zstd-compressed: decompress it first (zstd -d)")
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def open_binary(path: Path) -> tuple[io.BufferedIOBase, str | None]:
    """``path`` open for reading bytes, inflated if gzip, bzip2 or xz; and that format's name.

    Raises :class:`InputFormatError` for zstd (not in Python's standard library here) and
    ``OSError`` as ``open`` does.
    """
    compression = _compression(path)
    stream: io.BufferedIOBase  # the caller closes it
    if compression == "gzip":
        stream = gzip.GzipFile(path, "rb")
    elif compression == "bzip2":
        stream = bz2.BZ2File(path, "rb")
    elif compression == "xz":
        stream = lzma.LZMAFile(path, "rb")  # noqa: SIM115 (the caller closes it)
    else:
        stream = path.open("rb")
    return stream, compression


def inflated_chunks(
    path: Path,
    stream: io.BufferedIOBase,
    compression: str | None,
    size: int,
    on_cut: Callable[[], None] | None = None,
) -> Iterator[bytes]:
    """``stream`` in chunks of ``size`` bytes.

    A compressed stream cut short ends the chunks with a warning (what it held is kept;
    ``on_cut`` is called); one that does not inflate is an error.
    """
    try:
        while chunk := stream.read(size):
            yield chunk
    except EOFError:
        log.warning("%s: the %s stream ends early (a cut copy?): read what it held", path,
                    compression)  # fmt: skip
        if on_cut is not None:
            on_cut()
    except _INFLATE_ERRORS as exc:
        if compression is None:
            raise
        raise InputFormatError(
            path, f"{compression}-compressed, but it does not inflate: {exc}"
        ) from None


def _encoding(head: bytes) -> str:
    """UTF-8 (a byte-order mark skipped), or UTF-16 where its mark says so.

    Windows PowerShell 5's ``>`` writes UTF-16: a CSV redirected on a Windows GPU box.
    """
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    return "utf-8-sig"


def text_lines(path: Path, stream: io.BufferedIOBase, compression: str | None) -> Iterator[str]:
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

    def __init__(self, path: Path, stream: io.BufferedIOBase, compression: str | None) -> None:
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
