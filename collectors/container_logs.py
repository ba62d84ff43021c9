"""Container runtimes' own log files: Docker's ``json-file`` lines, read as the lines they hold.

A job run under Docker (or a Kubernetes node on dockershim) leaves its output in
``/var/lib/docker/containers/<id>/<id>-json.log``, one JSON object per line::

    {"log":"node1:40:40 [0] NCCL INFO AllReduce: opCount 0 ...","stream":"stdout",
     "time":"2026-12-02T10:00:00.600000123Z"}

(on one line, the text ending in an escaped newline).

Read as text, no NCCL line there has a time, so a log handed over as it lies on the node had
no T. Unwrapped, the line is the runtime's time before the job's text, which is what
``docker logs -t`` and ``kubectl logs --timestamps`` print and what the NCCL decoders read
(CRI files, ``<time> stdout F <text>``, need no unwrapping). The runtime times a line when it
reads it from the job's pipe: NCCL's buffered blocks share one time
(:func:`agent.call_sequence.clumped_resolution`).
"""

from __future__ import annotations

import json
from typing import Final

__all__ = ["DOCKER_HEAD", "unwrap_docker_line", "unwrap_docker_text"]

#: How every line of a ``json-file`` log starts (Docker's key order: log, stream, time).
DOCKER_HEAD: Final = '{"log":'


def unwrap_docker_line(line: str) -> str:
    """``<time> <text>`` of one ``json-file`` line; any other line as it is.

    A line that does not decode (cut short, not an object, no text) is returned unchanged, to
    be counted as the unreadable line it is.
    """
    if not line.startswith(DOCKER_HEAD):
        return line
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if not isinstance(entry, dict):
        return line
    text, when = entry.get("log"), entry.get("time")
    if not isinstance(text, str):
        return line
    text = text.rstrip("\r\n")
    return f"{when} {text}" if isinstance(when, str) and when else text


def unwrap_docker_text(text: str) -> str:
    """A chunk of whole lines (each ending in a newline) with each ``json-file`` line unwrapped.

    A text that does not start as a ``json-file`` line is returned as it is (a file is written
    by one runtime: its first line tells).
    """
    if not text.startswith(DOCKER_HEAD):
        return text
    lines = text.split("\n")
    return "\n".join(unwrap_docker_line(line) for line in lines)
