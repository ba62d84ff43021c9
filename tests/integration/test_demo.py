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
        # The simulated NIC has a link rate, as a real one: the dashboard's link panels and
        # the BurstBandwidthLow alert have something to show (25 GB/s bursts: a 400 Gb/s link).
        speed = "commpulse_device_link_speed_bytes_per_second|device=sim0|port=|source="
        assert last[speed + "simulated_counters"] == 50e9
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


def test_live_fine_tuning_and_inference_parameters_match_the_simulated_truth() -> None:
    """Both regimes at once (two demo processes): the live gauges reach each one's truth.

    Fine-tuning: the ZeRO-3 step (T = 3.6 s) around a 34 ms layer train; the agent may lock
    on the layer train first and must widen to the step. Inference: never a period; burst
    rate and arrival pattern as simulated.
    """
    from agent.demo import demo_params
    from agent.simulator.params import resolve
    from agent.simulator.schedule import build_schedule

    procs = {}
    for scenario in ("finetune", "inference"):
        argv = [sys.executable, "-m", "agent", "demo", "--scenario", scenario, "--port", "0",
                "--duration", "90", "--quiet"]  # fmt: skip
        procs[scenario] = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    try:
        urls = {}
        for scenario, proc in procs.items():
            assert proc.stdout is not None
            m = re.search(r"metrics at (http://\S+/metrics)", proc.stdout.readline())
            assert m
            urls[scenario] = m[1]
        ft = build_schedule(resolve(demo_params("finetune"))).truth
        inf = build_schedule(resolve(demo_params("inference"))).truth
        start = time.monotonic()
        ft_ok_at = None
        periods_seen = []
        ft_last: dict[str, float] = {}
        while time.monotonic() - start < 50:
            time.sleep(1.0)
            ft_last = _scrape(urls["finetune"])
            t = ft_last.get("commpulse_sync_period_seconds")
            ok = (
                t is not None
                and abs(t / ft["period_s"] - 1) <= 0.02
                and ft_last.get("commpulse_zero_stage|stage=zero3_or_fsdp_full_shard") == 1.0
                and ft_last.get("commpulse_collectives_per_step") == ft["collectives_per_step"]
                and abs(ft_last.get("commpulse_layer_gap_seconds", 0) / ft["layer_gap_s"] - 1)
                <= 0.05
            )
            if ok and ft_ok_at is None:
                ft_ok_at = time.monotonic() - start
            elif not ok:
                ft_ok_at = None
            inf_last = _scrape(urls["inference"])
            periods_seen.append(inf_last.get("commpulse_sync_period_seconds"))
        elapsed = time.monotonic() - start
        assert ft_ok_at is not None, ft_last
        assert ft_ok_at <= 40.0
        assert ft_last["commpulse_allgather_per_reduce_scatter"] == pytest.approx(2.0, rel=0.05)
        assert periods_seen == [None] * len(periods_seen)  # inference never has a period
        assert inf_last["commpulse_workload_regime|regime=inference"] == 1.0
        rate = inf_last["commpulse_burst_arrivals_per_second"]
        assert rate == pytest.approx(inf["arrivals"]["burst_rate_hz"], rel=0.2)
        assert inf_last["commpulse_burst_arrival_pattern|pattern=poisson"] == 1.0
        counted = inf_last["commpulse_burst_size_bytes_count"]
        expected = inf["arrivals"]["burst_rate_hz"] * elapsed
        assert 0.7 * expected <= counted <= 1.3 * expected + 2
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            assert proc.wait(timeout=10) == 0
            assert proc.stdout is not None
            proc.stdout.close()
