"""The shipped Prometheus rules: promtool checks them, its unit tests pass, every rule has one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import require_component

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "commpulse-rules.yml"
RULE_TESTS = RULES_DIR / "commpulse-rules.test.yml"


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _promtool(*args: str) -> str:
    """Run promtool in deploy/prometheus (rule files name each other relatively); its stdout."""
    out = subprocess.run(
        [require_component("promtool"), *args],
        cwd=RULES_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_promtool_check_rules_is_clean() -> None:
    assert f"SUCCESS: {len(_rules())} rules found" in _promtool("check", "rules", RULES.name)


def test_promtool_rule_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", RULE_TESTS.name)


def test_every_rule_is_exercised_by_a_unit_test() -> None:
    """Each alert has an alert_rule_test that expects it to fire, and each recording rule is
    asserted directly or through an alert built on it."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    silent = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if not case.get("exp_alerts")
    }
    exprs = " ".join(case["expr"] for t in tests for case in t.get("promql_expr_test", []))
    rules = _rules()
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert alerts <= fired, f"alerts never seen firing: {alerts - fired}"
    assert alerts <= silent, (
        f"alerts never checked silent (before for:/below threshold): {alerts - silent}"
    )
    alert_exprs = " ".join(r["expr"] for r in rules if "alert" in r)
    for r in rules:
        if "record" in r:
            used = re.search(
                rf"(?<![\w:]){re.escape(r['record'])}(?![\w:])", f"{exprs} {alert_exprs}"
            )
            assert used, f"recording rule {r['record']} is not tested"


def test_alerts_carry_severity_and_annotations() -> None:
    """What the pager shows at 3 a.m.: a severity the routing knows, a summary, a description."""
    for r in _rules():
        if "alert" not in r:
            continue
        assert r["labels"]["severity"] in {"info", "warning", "critical"}, r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert len(r["annotations"]["description"]) > 60, r["alert"]
        assert "for" in r, f"{r['alert']} would fire on a single evaluation"


def test_bottleneck_alert_is_d_above_half() -> None:
    """The contract alert: D > 0.5 (DESIGN.md), sustained, and a warning (the job still runs).

    D is read over a range: a scrape without D (a window that could not resolve it) must not
    restart the 15 minutes (the promtool case with missing scrapes pins that behaviour)."""
    (rule,) = [r for r in _rules() if r.get("alert") == "CommpulseNetworkBottleneck"]
    assert re.search(
        r"min_over_time\(commpulse_duty_cycle_ratio\[\d+m\]\)\s*>\s*0\.5\b", rule["expr"]
    )
    assert rule["for"] == "15m"
    assert rule["labels"]["severity"] == "warning"


def test_example_prometheus_config_is_valid_and_names_the_job_the_rules_use() -> None:
    config = RULES_DIR / "prometheus.yml"
    assert "SUCCESS" in _promtool("check", "config", config.name)
    (job,) = yaml.safe_load(config.read_text())["scrape_configs"]
    assert job["job_name"] == "commpulse"
    assert 'up{job="commpulse"}' in RULES.read_text()
