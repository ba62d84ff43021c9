"""Checks shared by the sources' config sections: messages name the section and key."""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from agent.errors import ConfigError

__all__ = ["check_interval", "check_regex", "doc", "doc_factory"]


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


def doc(default: Any, text: str) -> Any:
    """A dataclass field with a default and a one-line description (for docs/config.md)."""
    return field(default=default, metadata={"doc": text})


def doc_factory(factory: Any, text: str) -> Any:
    """A dataclass field built by ``factory``, with a description."""
    return field(default_factory=factory, metadata={"doc": text})
