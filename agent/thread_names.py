"""OS names for the agent's threads, so that ``top -H``, ``ps -L`` and ``py-spy`` tell them apart.

CPython before 3.14 leaves every thread with the process's name ("python"): an operator who
sees the agent use CPU cannot tell the 100 Hz sampler from the estimator. The kernel keeps a
name of up to 15 bytes per thread, set by the thread itself (``prctl(PR_SET_NAME)``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import threading
from typing import Any

__all__ = ["MAX_NAME_BYTES", "name_this_thread"]

#: The kernel's limit for a thread name, without the terminating NUL.
MAX_NAME_BYTES = 15
_PR_SET_NAME = 15


@functools.cache
def _prctl() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl


def name_this_thread(name: str | None = None) -> None:
    """Give the calling thread ``name`` (default: its Python name) as its OS name.

    Best effort: cut to 15 bytes, and nothing happens where the C library or ``prctl`` is
    missing (not Linux); a name is a help for whoever looks, never a reason to fail.
    """
    text = name if name is not None else threading.current_thread().name
    raw = text.encode("utf-8", "replace")[:MAX_NAME_BYTES]
    with contextlib.suppress(OSError, AttributeError):
        _prctl()(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)
