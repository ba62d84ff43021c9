"""The agent runs numpy with one BLAS thread, so a 100-core GPU node does not give it 64."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent.threads import THREAD_VARIABLES

ROOT = Path(__file__).resolve().parents[2]

# The console script's path: main() first, then whatever the command imports.
_PROBE = """
import os, sys
from agent.cli import main
try:
    main(["--version"])
except SystemExit:
    pass
import numpy
print(len(os.listdir("/proc/self/task")))
print(",".join(os.environ.get(v, "-") for v in {names!r}))
"""


def _run(code: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.split()


def test_the_console_script_loads_numpy_with_one_blas_thread() -> None:
    threads, values = _run(_PROBE.format(names=THREAD_VARIABLES))[-2:]
    assert values == "1,1,1"
    assert threads == "1"  # OpenBLAS started no thread of its own (this machine has 2 cores)


def test_an_operators_own_thread_count_wins() -> None:
    _, values = _run(_PROBE.format(names=THREAD_VARIABLES), OPENBLAS_NUM_THREADS="2")[-2:]
    assert values == "2,1,1"


def test_nothing_changes_once_numpy_is_loaded() -> None:
    code = (
        "import numpy, os\n"
        "from agent.threads import single_blas_thread\n"
        "print(single_blas_thread(), os.environ.get('OPENBLAS_NUM_THREADS', '-'))\n"
    )
    assert _run(code) == ["False", "-"]
