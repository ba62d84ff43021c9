"""``commpulse wrap -- CMD``: run a job with the NCCL logging the agent's tailer reads.

The job gets, unless it already sets them (the user's values always win):

- ``NCCL_DEBUG=INFO``: COLL lines are INFO lines;
- ``NCCL_DEBUG_SUBSYS=INIT,ENV,COLL,NET``: collectives, comm init (N, commId), the network;
- ``NCCL_DEBUG_FILE=<log dir>/nccl.%h.%p.log``: one file per process, not stdout (which is
  block-buffered when redirected, so lines would arrive late);
- ``NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO``: INFO lines carry a time (NCCL >= 2.26; WARN only
  by default), so T can come from the log alone;
- ``NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] "``: microseconds rather than seconds.

The log directory is ``--log-dir``, else the directory of the first ``sources.nccl_log.paths``
pattern of ``--config``, else ``/var/log/nccl`` (what the shipped configuration tails). Then the
command *replaces* this process (``exec``): signals and the exit status are the job's own.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.errors import ConfigError

__all__ = ["DEFAULT_LOG_DIR", "nccl_environment", "run_wrapped"]

#: Where the shipped configuration (deploy/config/commpulse.toml) tails NCCL logs.
DEFAULT_LOG_DIR = Path("/var/log/nccl")

#: Exit status of a command that cannot be found (as a shell reports it).
NOT_FOUND = 127


def nccl_environment(env: Mapping[str, str], log_dir: Path) -> tuple[dict[str, str], list[str]]:
    """The job's environment (pure): ``env`` plus what is missing; and warnings to print.

    A user's setting that hides collectives from the tailer is kept, and warned about.
    """
    wanted = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,COLL,NET",
        "NCCL_DEBUG_FILE": str(log_dir / "nccl.%h.%p.log"),
        "NCCL_DEBUG_TIMESTAMP_LEVELS": "WARN,INFO",
        "NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] ",
    }
    out = dict(env)
    warnings = []
    for key, value in wanted.items():
        out.setdefault(key, value)
    level = out["NCCL_DEBUG"].strip().upper()
    if level not in ("INFO", "TRACE"):
        warnings.append(
            f"NCCL_DEBUG={out['NCCL_DEBUG']} is set: NCCL writes no COLL lines, so commpulse "
            "sees no collectives (use INFO)"
        )
    subsys = [s.strip().upper() for s in out["NCCL_DEBUG_SUBSYS"].split(",")]
    inverted = subsys[0].startswith("^") if subsys else False
    names = {s.lstrip("^") for s in subsys}
    if (inverted and "COLL" in names) or (not inverted and not names & {"COLL", "ALL"}):
        warnings.append(
            f"NCCL_DEBUG_SUBSYS={out['NCCL_DEBUG_SUBSYS']} leaves out COLL: no collective lines"
        )
    debug_file = out["NCCL_DEBUG_FILE"]
    if "%p" not in debug_file:
        warnings.append(
            f"NCCL_DEBUG_FILE={debug_file} has no %p: the processes of the job overwrite one file"
        )
    return out, warnings


def log_dir_from_config(config: Path) -> Path | None:
    """The directory of the first NCCL log pattern the agent is configured to tail."""
    from agent.config import load_config

    paths = load_config(config).sources.nccl_log.paths
    if not paths:
        return None
    head = paths[0]
    cut = min((i for i, ch in enumerate(head) if ch in "*?["), default=len(head))
    directory = Path(head[:cut]) if glob.has_magic(head) else Path(head)
    return directory if head[:cut].endswith("/") else directory.parent


def run_wrapped(  # noqa: RET503 - os.execve does not return
    command: Sequence[str],
    *,
    log_dir: Path | None = None,
    config: Path | None = None,
    quiet: bool = False,
) -> int:
    """Exec ``command`` with the NCCL environment; returns (127) only when it is not found."""
    if not command:
        raise ConfigError("give the command to run after --, e.g. commpulse wrap -- torchrun ...")
    directory = log_dir or (log_dir_from_config(config) if config else None) or DEFAULT_LOG_DIR
    if not directory.is_dir():
        raise ConfigError(
            f"log directory {directory} does not exist (create it, writable by the job, "
            "readable by the agent)"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"log directory {directory} is not writable by this user")
    env, warnings = nccl_environment(os.environ, directory)
    for line in warnings:
        print(f"commpulse wrap: warning: {line}", file=sys.stderr)
    executable = shutil.which(command[0], path=env.get("PATH"))
    if executable is None:
        print(f"commpulse wrap: {command[0]}: command not found", file=sys.stderr)
        return NOT_FOUND
    if not quiet:
        print(
            f"commpulse wrap: NCCL logs to {env['NCCL_DEBUG_FILE']} "
            f"(NCCL_DEBUG={env['NCCL_DEBUG']}, SUBSYS={env['NCCL_DEBUG_SUBSYS']})",
            file=sys.stderr,
            flush=True,
        )
    sys.stdout.flush()
    os.execve(executable, list(command), env)  # noqa: S606 - running the user's command is the point
