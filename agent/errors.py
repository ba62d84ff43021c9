"""The exception tree of commpulse.

Every error the agent raises on purpose derives from :class:`CommpulseError`, so the CLI can
turn any of them into a one-line message and a non-zero exit code::

    CommpulseError
    ├── ConfigError            bad command-line arguments or configuration
    ├── InputFormatError       a file the user gave is unreadable or malformed (path, line)
    ├── SourceError            a live source failed
    │   └── SourceUnavailable  the source has nothing to read on this host ("no data")
    └── ExportError            a sink (HTTP, MQTT) could not start or deliver
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CommpulseError",
    "ConfigError",
    "ExportError",
    "InputFormatError",
    "SourceError",
    "SourceUnavailable",
]


class CommpulseError(Exception):
    """Base class of every error commpulse raises on purpose."""


class ConfigError(CommpulseError):
    """A command-line argument or configuration value is invalid."""


class InputFormatError(CommpulseError):
    """An input file cannot be read or does not follow its format.

    Carries the file and, where known, the 1-based line (or record) number, so the message can
    point the user at the exact place.
    """

    def __init__(self, path: Path | str, message: str, *, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")


class SourceError(CommpulseError):
    """A live source failed while reading."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"source {source}: {message}")


class SourceUnavailable(SourceError):
    """The source has nothing to read on this host (no device, no file, no permission)."""


class ExportError(CommpulseError):
    """A sink could not start or deliver (port in use, broker refused)."""
