"""The /metrics server under idle clients: bounded threads, dropped idlers, scrapes again."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

from agent.estimate import Estimate
from agent.exporter import start_metrics_server
from agent.http import HANDSHAKE_TIMEOUT_S, MAX_CONNECTIONS
from agent.pipeline import Snapshot, SnapshotStore


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        return str(r.read().decode())


def test_idle_connections_cost_bounded_threads_and_time_out() -> None:
    """70 idle connections held open once took every thread the unit allows (TasksMax),
    and a counter source that had to restart then never came back. Now at most
    ``MAX_CONNECTIONS`` are served at once, and an idle one is dropped after a few seconds."""
    store = SnapshotStore()
    store.publish(Snapshot(Estimate(4.55, 25e9, 0.34, 0.9, "training", 0.34, 32, {}), 1.0,
                           time.time(), 0.01, ()))  # fmt: skip
    server = start_metrics_server(store, addr="127.0.0.1", port=0)
    before = threading.active_count()
    idle = []
    try:
        assert "commpulse_sync_period_seconds 4.55" in _scrape(server.port)
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
        time.sleep(0.5)
        assert threading.active_count() <= before + MAX_CONNECTIONS
        # The idle clients are dropped once their read times out; then scrapes are served.
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S + 5.0
        while True:
            try:
                assert "commpulse_sync_period_seconds 4.55" in _scrape(server.port)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.25)
        while threading.active_count() > before + 1:  # the last idlers' threads end too
            assert time.monotonic() < deadline
            time.sleep(0.25)
    finally:
        for s in idle:
            s.close()
        server.close()
