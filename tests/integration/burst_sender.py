"""A periodic burst train over UDP: on for duty·period, silent for the rest, on a fixed grid.

Run in the sending namespace; the shaper (tc tbf) on its interface sets the burst rate.
Usage: python -m tests.integration.burst_sender HOST PORT PERIOD DUTY SECONDS

It runs at nice -10 where it may (root): a sender starved by a loaded machine starts bursts
late or skips them, which changes the truth the tests compare with. Bursts it started more
than a tenth of their length late are counted on stderr ("late N of M").
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import time


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    period, duty, seconds = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    with contextlib.suppress(OSError):  # not root: the default priority
        os.nice(-10)
    payload = b"\x00" * 1400
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # Room for the shaper's whole queue (10 ms at the shaped rate), so the sender keeps it
    # full between two of its own time slices.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 18)
    sock.setblocking(False)
    start = time.monotonic()
    k = late = 0
    while True:
        on_start = start + k * period
        if on_start - start >= seconds:
            print(f"late {late} of {k}", file=sys.stderr)
            return
        while time.monotonic() < on_start:
            time.sleep(min(0.001, max(0.0, on_start - time.monotonic())))
        on_end = on_start + duty * period
        late += time.monotonic() - on_start > 0.1 * duty * period
        while time.monotonic() < on_end:
            try:
                sock.sendto(payload, (host, port))
            except OSError as exc:  # the shaper's queue is full: that is the point
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    raise
                time.sleep(0.0002)
        k += 1


if __name__ == "__main__":
    main()
