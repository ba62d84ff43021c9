"""End to end with the real Prometheus server: two live agents, the shipped rules, the alert.

Two ``commpulse demo`` processes run simulated jobs with a 1 s step: one network-bound
(D = 0.6), one healthy (D = 0.25). A real Prometheus (Debian package) scrapes both every
second and evaluates deploy/prometheus/commpulse-rules.yml every second. The test asserts,
through Prometheus' HTTP API, that the series arrive, the recording rules produce the job
and fleet values, the D > 0.5 alert goes pending and then firing for the bound job only, and
every query of the Grafana dashboard runs.

Only the timing is changed from the shipped rules: group intervals of 1 s and ``for: 10s``
on the bottleneck alert (15 min in production). The promtool unit tests pin the real ``for:``
durations; this test pins that the expressions work on what the agent really exports.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port, require_component
from tests.unit.test_dashboard import dashboard_queries

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "commpulse-rules.yml"
ALERT = "CommpulseNetworkBottleneck"


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def _query(base: str, expr: str) -> dict[str, float]:
    """instance (or job_id, or '') → value of an instant query."""
    data = _api(base, "query", query=expr)
    out = {}
    for r in data["result"]:
        m = r["metric"]
        out[m.get("instance") or m.get("job_id") or ""] = float(r["value"][1])
    return out


def _wait(what: str, timeout_s: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            last = check()
            if last:
                return last
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def _demo(duty: float, seed: int) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "agent", "demo", "--period", "1", "--duty", str(duty),
           "--seed", str(seed), "--port", str(port), "--quiet", "--duration", "600"]  # fmt: skip
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        try:
            assert p.stdout is not None
            banner = p.stdout.readline()
            assert "metrics at" in banner, banner
            yield f"127.0.0.1:{port}"
        finally:
            p.terminate()
            p.wait(timeout=15)


def _test_rules(tmp: Path) -> Path:
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if rule.get("alert") == ALERT:
                assert rule["for"] == "15m"
                rule["for"] = "10s"
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@contextlib.contextmanager
def _prometheus(tmp: Path, targets: list[str]) -> Iterator[str]:
    binary = require_component("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(_test_rules(tmp))],
        "scrape_configs": [
            {"job_name": "commpulse", "static_configs": [{"targets": targets}]},
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    cmd = [binary, f"--config.file={tmp / 'prometheus.yml'}",
           f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
           "--log.level=warn"]  # fmt: skip
    log = (tmp / "prometheus.log").open("w")
    with subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT) as p:
        base = f"http://127.0.0.1:{port}"
        try:

            def ready() -> bool:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    return r.status == 200

            _wait("Prometheus to be ready", 60, ready)
            yield base
        finally:
            p.terminate()
            p.wait(timeout=15)
            log.close()


def test_bottleneck_alert_fires_for_the_bound_job_only(tmp_path: Path) -> None:
    with (
        _demo(duty=0.6, seed=11) as bound,
        _demo(duty=0.25, seed=12) as healthy,
        _prometheus(tmp_path, [bound, healthy]) as prom,
    ):
        # 1. The contract series arrive from both agents.
        d = _wait(
            "D from both agents",
            90,
            lambda: (r := _query(prom, "commpulse_duty_cycle_ratio")) and len(r) == 2 and r,
        )
        assert set(d) == {bound, healthy}

        # 2. The alert goes pending, then firing, for the bound job; never for the healthy one.
        states: list[str] = []

        def firing() -> bool:
            alerts = [
                a for a in _api(prom, "alerts")["alerts"] if a["labels"]["alertname"] == ALERT
            ]
            assert all(a["labels"]["instance"] == bound for a in alerts), alerts
            for a in alerts:
                if not states or states[-1] != a["state"]:
                    states.append(a["state"])
            return "firing" in states

        _wait(f"{ALERT} to fire", 120, firing)
        assert states[:2] == ["pending", "firing"], states
        (alert,) = [a for a in _api(prom, "alerts")["alerts"] if a["labels"]["alertname"] == ALERT]
        assert alert["labels"]["severity"] == "warning"
        assert "Network-bound job on" in alert["annotations"]["summary"]

        # 3. The agents' values are what the simulated jobs are.
        d = _query(prom, "commpulse_duty_cycle_ratio")
        assert d[bound] == pytest.approx(0.6, abs=0.05)
        assert d[healthy] == pytest.approx(0.25, abs=0.05)
        t = _query(prom, "commpulse_sync_period_seconds")
        assert t[bound] == pytest.approx(1.0, rel=0.02)
        assert t[healthy] == pytest.approx(1.0, rel=0.02)

        # 4. Recording rules: each demo is its own job (its NCCL commId), one of two is bound.
        jobs = _query(prom, "job_id:commpulse_duty_cycle_ratio:avg")
        assert len(jobs) == 2
        assert all(j.startswith("nccl-") for j in jobs)
        assert sorted(jobs.values()) == [
            pytest.approx(d[healthy], abs=0.05),
            pytest.approx(d[bound], abs=0.05),
        ]
        share = _wait(
            "the network-bound share",
            30,
            lambda: _query(prom, "cluster:commpulse_jobs_network_bound:ratio"),
        )
        assert share == {"": 0.5}
        since = _query(prom, "instance:commpulse_seconds_since_last_burst:estimate")
        assert set(since) == {bound, healthy}
        assert all(0 <= v < 5 for v in since.values()), since  # both jobs are talking
        compute = _query(prom, "instance:commpulse_compute_seconds_per_step:estimate")
        assert compute[bound] == pytest.approx(0.4, abs=0.06)  # T - exposed communication
        assert compute[healthy] == pytest.approx(0.75, abs=0.06)

        # 5. No other alert fires on two healthy-running agents.
        others = {
            a["labels"]["alertname"]
            for a in _api(prom, "alerts")["alerts"]
            if a["state"] == "firing" and a["labels"]["alertname"] != ALERT
        }
        assert not others, others

        # 6. Every dashboard query runs on real data; the per-host core ones return series.
        with_data: set[str] = set()
        for title, expr in dashboard_queries():
            if _api(prom, "query", query=expr)["result"]:
                with_data.add(title)
        for title in (
            "D: duty cycle",
            "T: sync period",
            "B: burst bandwidth",
            "D: communication duty cycle",
            "Workload regime",
            "Collective mix (bytes)",
            "GPU compute vs communication",
            "Job D (mean and worst host)",
            "Sources up",
            "Estimator",
        ):
            assert title in with_data, f"{title} shows no data"
