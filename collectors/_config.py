"""Checks shared by the sources' config sections: messages name the section and key."""

from __future__ import annotations

import re

from agent.errors import ConfigError

__all__ = ["check_interval", "check_regex"]


def check_regex(section: str, key: str, pattern: str | None) -> None:
    """Reject a pattern that does not compile, naming ``section.key``."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{section}.{key}: bad regular expression: {exc}") from None


def check_interval(section: str, key: str, value: float, lo: float, hi: float) -> None:
    """Reject an interval outside ``[lo, hi]`` seconds, naming ``section.key``."""
    if not lo <= value <= hi:
        raise ConfigError(f"{section}.{key} must be between {lo} and {hi} seconds, not {value}")
