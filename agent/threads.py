"""One BLAS / OpenMP thread for the agent, set before numpy loads its BLAS.

numpy's OpenBLAS starts a thread per core at import, up to 64. On a GPU node (100+ cores)
that is 63 idle threads in an agent that needs none of them: its numerics are FFTs and
element-wise passes, and the few dot products it takes are on one window each. Under the
unit's ``TasksMax=64`` those threads alone reach the cap: the agent's own sampler, tailer and
estimator threads then cannot start, and a failed ``pthread_create`` inside OpenBLAS's start-up
can crash ``import numpy`` itself (numpy/numpy#21376). In a container it also counts the
host's cores, not the pod's CPU limit.

The thread counts are read once, when the libraries load, so this must run before the first
``import numpy``: :func:`agent.cli.main` calls it first. An operator's own setting wins.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["THREAD_VARIABLES", "single_blas_thread"]

log = logging.getLogger(__name__)

#: The variables OpenBLAS, OpenMP runtimes and MKL read their thread count from.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_blas_thread() -> bool:
    """Ask for one BLAS thread where the operator has not chosen; False if too late.

    Too late means numpy is already imported (a caller that embeds the agent as a library):
    its BLAS has started its threads, and nothing is changed.
    """
    if "numpy" in sys.modules:
        log.debug("numpy already loaded: its BLAS keeps the thread count it started with")
        return False
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    return True
