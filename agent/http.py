"""The /metrics HTTP(S) server.

prometheus-client's own ``start_http_server`` wraps the *listening* socket in TLS, so the
handshake runs inside its single accept loop: one client that connects and never sends a
ClientHello blocks every scrape (research/environment.md §3, measured). Here the listening
socket stays plain and each accepted connection is wrapped, with a handshake timeout, in the
thread that serves it — an idle or slow client delays only itself.
"""

from __future__ import annotations

import errno
import logging
import socket
import socketserver
import ssl
import threading
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from agent.errors import ExportError
from agent.thread_names import name_this_thread

__all__ = ["MetricsServer", "tls_context"]

log = logging.getLogger(__name__)

#: Seconds a client has to finish the TLS handshake, and each read, before it is dropped.
HANDSHAKE_TIMEOUT_S = 5.0
#: Connections served at once; more are closed at once. Each costs a thread, and the unit's
#: TasksMax (64) is shared with the sampling threads: 70 idle connections held with no
#: timeout left none for a source's restart, which then never came back.
MAX_CONNECTIONS = 16


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, at most ``MAX_CONNECTIONS``; none to be had: close it."""
        if not self._slots.acquire(blocking=False):
            log.debug("%d connections open: closing the one from %s", MAX_CONNECTIONS,
                      client_address)  # fmt: skip
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError as exc:  # "can't start new thread": the process's task limit
            self._slots.release()
            log.warning("cannot serve the scrape from %s: %s", client_address, exc)
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Do the TLS handshake here, in the connection's own thread, with a timeout."""
        try:
            request.settimeout(HANDSHAKE_TIMEOUT_S)  # plain ones too: an idle client goes
            if self.ssl_context is not None:
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    log.debug("TLS handshake with %s failed: %s", client_address, exc)
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:  # noqa: ARG002
        """A client that timed out or went away: a debug line, not a traceback on stderr."""
        log.debug("scrape from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


def tls_context(
    cert: Path, key: Path, *, client_ca: Path | None = None, require_client: bool = False
) -> ssl.SSLContext:
    """A server context: TLS 1.2+, optional client-certificate verification."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
        if client_ca is not None:
            ctx.load_verify_locations(cafile=str(client_ca))
            ctx.verify_mode = ssl.CERT_REQUIRED if require_client else ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ExportError(f"cannot load TLS certificate or key: {exc}") from None
    return ctx


class MetricsServer:
    """Serves a registry on ``/metrics`` from a daemon thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        address: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        app = make_wsgi_app(registry)
        cls = _Server6 if ":" in address else _Server
        try:
            self._server = cls((address, port), _QuietHandler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ExportError(
                    f"port {port} on {address} is already in use (another commpulse, or "
                    "another exporter); pick another port"
                ) from None
            raise ExportError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None
        self._server.set_app(app)
        self._server.ssl_context = ssl_context
        self.port = int(self._server.server_address[1])
        self.address = address
        self.tls = ssl_context is not None
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        name_this_thread()
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
