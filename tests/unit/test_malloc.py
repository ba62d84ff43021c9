"""The daemon caps glibc's malloc arenas: threads that allocate together share two."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util, sys, threading
    from agent.malloc import limit_arenas
    print(limit_arenas(2) if sys.argv[1] == "limit" else "default", flush=True)
    barrier = threading.Barrier(6)
    def work():
        barrier.wait()
        keep = [bytes(4000 + i) for i in range(2000)]  # glibc malloc, not pymalloc
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads: t.start()
    for t in threads: t.join()
    ctypes.CDLL(ctypes.util.find_library("c")).malloc_stats()  # "Arena N:" lines, stderr
    """
)


def _arenas(mode: str, env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    return out.stdout.strip(), sum(ln.startswith("Arena ") for ln in out.stderr.splitlines())


def test_six_allocating_threads_share_two_arenas_once_capped() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    said, capped = _arenas("limit", env)
    assert said == "True"
    assert capped <= 2
    _, default = _arenas("default", env)
    assert default > 2  # the probe does spread over arenas without the cap


def test_an_operator_setting_wins() -> None:
    env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    said, _ = _arenas("limit", env)
    assert said == "False"
