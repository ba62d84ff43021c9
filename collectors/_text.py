"""Opening a text input file with errors that name it (shared by the CSV readers)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from agent.errors import InputFormatError

__all__ = ["read_text_file"]

T = TypeVar("T")


def _encoding(path: Path) -> str:
    """UTF-8 (a byte-order mark skipped), or UTF-16 where its mark says so.

    Windows PowerShell 5's ``>`` writes UTF-16: a CSV redirected on a Windows GPU box.
    """
    with path.open("rb") as raw:
        head = raw.read(3)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    return "utf-8-sig"


def read_text_file(path: Path, parse: Callable[[Iterable[str]], T], *, what: str) -> T:
    """Open ``path`` as text (UTF-8, or UTF-16 with its mark) and hand its lines to ``parse``.

    Unreadable, binary or directory paths become :class:`InputFormatError` naming the file;
    ``what`` says what was expected ("a counters CSV file").
    """
    try:
        with path.open("r", encoding=_encoding(path), errors="strict", newline="") as fh:
            return parse(fh)
    except UnicodeDecodeError as exc:
        raise InputFormatError(path, f"not a text file ({exc.reason})") from None
    except IsADirectoryError:
        raise InputFormatError(path, f"is a directory, expected {what}") from None
    except OSError as exc:
        raise InputFormatError(path, f"cannot read: {exc.strerror or exc}") from None
