"""Small sysfs helpers shared by the NIC and RDMA readers."""

from __future__ import annotations

from pathlib import Path

__all__ = ["parse_sysfs_int", "read_attr"]


def parse_sysfs_int(text: str | bytes) -> int | None:
    """A sysfs integer attribute; None for empty content, ``N/A (no PMA)`` and other junk."""
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_attr(path: Path) -> bytes | None:
    """A sysfs attribute's bytes, or None when absent or refused.

    Reading ``speed`` of a down link raises EINVAL, a vanished device ENOENT or ENODEV:
    all of them mean "unknown now", never a crash.
    """
    try:
        return path.read_bytes()
    except OSError:
        return None
