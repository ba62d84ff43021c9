"""`commpulse demo` end to end: a real process, real HTTP scrapes, convergence to the truth."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require_component

pytestmark = pytest.mark.slow

BANNER = re.compile(
    r"truth: T=(?P<t>[0-9.]+) s, D=(?P<d>[0-9.]+)\); metrics at (?P<url>http://\S+/metrics)"
)


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + "".join(f"|{k}={v}" for k, v in sorted(s.labels.items()))
            out[key] = s.value
    return out


def test_demo_serves_metrics_that_converge_within_30_seconds() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--port", "0", "--duration", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        m = BANNER.search(banner)
        assert m, banner
        t_true, d_true, url = float(m["t"]), float(m["d"]), m["url"]
        start = time.monotonic()
        converged_at = None
        last: dict[str, float] = {}
        while time.monotonic() - start < 36:
            time.sleep(1.0)
            last = _scrape(url)
            t = last.get("commpulse_sync_period_seconds")
            b = last.get("commpulse_burst_bandwidth_bytes_per_second")
            d = last.get("commpulse_duty_cycle_ratio")
            ok = (
                t is not None
                and abs(t / t_true - 1) <= 0.02
                and b is not None
                and abs(b / 25.25e9 - 1) <= 0.05
                and d is not None
                and abs(d - d_true) <= 0.03
                and last.get("commpulse_workload_regime|regime=training") == 1.0
            )
            if ok and converged_at is None:
                converged_at = time.monotonic() - start
            elif not ok:
                converged_at = None  # must stay converged once it got there
        assert converged_at is not None, last
        assert converged_at <= 30.0
        assert last["commpulse_source_up|source=simulated_counters"] == 1.0
        assert last["commpulse_discarded_samples_total|source=simulated_counters"] == 0.0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_demo_exposition_passes_promtool() -> None:
    promtool = require_component("promtool")
    with subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--port", "0", "--duration", "60", "--quiet"],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        url = BANNER.search(proc.stdout.readline())["url"]  # type: ignore[index]
        text = ""
        deadline = time.monotonic() + 35
        # Lint the full exposition: wait until T (and so D) has locked.
        while "commpulse_duty_cycle_ratio" not in text and time.monotonic() < deadline:
            time.sleep(1)
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        assert "commpulse_duty_cycle_ratio" in text
        res = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
        )
        assert res.returncode == 0, res.stdout + res.stderr
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_demo_port_in_use_is_a_clear_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "agent", "demo", "--port", str(port), "--duration", "5"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert res.returncode == 1
    assert f"port {port}" in res.stderr
    assert "already in use" in res.stderr
