"""Fewer glibc malloc arenas for a long-running, multi-threaded agent.

glibc gives each thread that allocates its own arena (up to 8 per core). The agent's
sampling, tailing and estimator threads each allocate and free numpy temporaries every hop,
and memory freed in one arena is not reused by the others: the resident set grows by several
arenas' worth of free space. Two arenas are enough for a handful of threads that mostly wait
(`bench/overhead.py`: peak RSS 82-91 MB with the default, 74 MB with two).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

__all__ = ["limit_arenas"]

log = logging.getLogger(__name__)

#: ``M_ARENA_MAX`` from glibc's <malloc.h>.
_M_ARENA_MAX = -8


def limit_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas (call before threads start); False where not glibc.

    ``MALLOC_ARENA_MAX`` in the environment, when set, is the operator's choice and wins.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_ARENA_MAX, arenas))
    if not ok:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return ok
