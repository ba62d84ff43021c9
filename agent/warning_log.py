"""Estimate warnings to the agent's log, each kind once an hour.

The estimate's warnings (a GPU split refused and why, GPU and network samples on different
clocks, bursts too short to resolve) went only to the MQTT stream and ``analyze --json``; an
operator reading ``journalctl -u commpulse`` saw none of them. Logged every hop they would
flood the journal, and most carry numbers that change every hop ("silent in 62 % of their
idle samples"): a warning is logged when its text, numbers aside, was not logged in the last
hour.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["WarningLog"]

_NUMBER = re.compile(r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?")


class WarningLog:
    """Which of a hop's warnings are due for the log."""

    #: Kinds remembered at most (the oldest are forgotten first).
    MAX_KINDS = 256

    def __init__(self, every_s: float = 3600.0) -> None:
        self._every = every_s
        self._logged: dict[str, float] = {}  # kind (numbers blanked) → when last logged

    def due(self, warnings: Iterable[str], now: float) -> list[str]:
        """The warnings whose kind was not logged in the last ``every_s`` seconds."""
        out = []
        for text in warnings:
            kind = _NUMBER.sub("#", text)
            last = self._logged.get(kind)
            if last is not None and now - last < self._every:
                continue
            self._logged.pop(kind, None)
            self._logged[kind] = now
            out.append(text)
        while len(self._logged) > self.MAX_KINDS:
            del self._logged[next(iter(self._logged))]
        return out
