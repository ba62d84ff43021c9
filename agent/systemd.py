"""``sd_notify`` without libsystemd: one datagram to ``$NOTIFY_SOCKET``.

The protocol is a newline-separated list of ``KEY=VALUE`` assignments sent on an
``AF_UNIX``/``SOCK_DGRAM`` socket whose path is in ``NOTIFY_SOCKET`` (a leading ``@`` means the
abstract namespace). See sd_notify(3). Outside systemd the variable is unset and every call
is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time

__all__ = ["Notifier"]

log = logging.getLogger(__name__)


class Notifier:
    """Sends READY, RELOADING, STOPPING, STATUS and WATCHDOG notifications."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        self.watchdog_s: float | None = None
        if usec and usec.isdigit() and (pid is None or pid == str(os.getpid())):
            self.watchdog_s = int(usec) / 1e6

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a notify socket."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send the assignments; False (and a debug log) when there is no socket."""
        if self._address is None:
            return False
        address = self._address
        if address.startswith("@"):
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(assignments).encode(), address)
        except OSError as exc:
            log.debug("sd_notify to %s failed: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        """The service is up (Type=notify units wait for this)."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        """A reload started (systemd 253+ wants MONOTONIC_USEC with it)."""
        usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        """Shutdown started."""
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        """Free-form status shown by ``systemctl status``."""
        return self.notify(f"STATUS={text}")

    def watchdog(self) -> bool:
        """Keep-alive: only sent while the agent is healthy."""
        return self.notify("WATCHDOG=1")
