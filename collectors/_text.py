"""Opening a text input file with errors that name it (shared by the CSV readers)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from agent.errors import InputFormatError

__all__ = ["read_text_file"]

T = TypeVar("T")


def read_text_file(path: Path, parse: Callable[[Iterable[str]], T], *, what: str) -> T:
    """Open ``path`` as UTF-8 text and hand its lines to ``parse``.

    Unreadable, binary or directory paths become :class:`InputFormatError` naming the file;
    ``what`` says what was expected ("a counters CSV file").
    """
    try:
        with path.open("r", encoding="utf-8", errors="strict", newline="") as fh:
            return parse(fh)
    except UnicodeDecodeError as exc:
        raise InputFormatError(path, f"not a text file ({exc.reason})") from None
    except IsADirectoryError:
        raise InputFormatError(path, f"is a directory, expected {what}") from None
    except OSError as exc:
        raise InputFormatError(path, f"cannot read: {exc.strerror or exc}") from None
