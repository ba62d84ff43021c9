"""Real kernel counters: a shaped, periodic burst train across a veth between two namespaces.

Two network namespaces joined by a veth pair; the sender side shapes its egress with
``tc tbf`` (known B) and sends UDP bursts on a fixed grid (known T and D); the agent's real
NIC source and pipeline run inside the receiving namespace, once with the netlink reader and
once with the sysfs reader, at the same time. Needs root (CI runs as root); namespaces are
always deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.conftest import RATE_BYTES, Link

pytestmark = [pytest.mark.root, pytest.mark.slow]

PERIOD = 0.5
DUTY = 0.3
SECONDS = 14.0


def test_netlink_and_sysfs_readers_recover_the_shaped_burst_train(veth_pair: Link) -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    def probe(method: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", veth_pair.receiver_ns, sys.executable, "-m",
             "tests.integration.netns_probe", "--include", f"^{veth_pair.receiver_if}$",
             "--method", method, "--seconds", str(SECONDS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    probes = {method: probe(method) for method in ("netlink", "sysfs")}
    sender = subprocess.run(
        ["ip", "netns", "exec", veth_pair.sender_ns, sys.executable, "-m",
         "tests.integration.burst_sender", veth_pair.receiver_ip, "9", str(PERIOD), str(DUTY),
         str(SECONDS + 1)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert sender.returncode == 0, sender.stderr
    for method, proc in probes.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        result = json.loads(out)
        assert result["method"] == method
        est = result["estimate"]
        assert est is not None, result
        assert est["period_s"] == pytest.approx(PERIOD, rel=0.02), (method, est)
        assert est["burst_bandwidth_bytes_per_s"] == pytest.approx(RATE_BYTES, rel=0.10), (
            method,
            est,
        )
        assert est["duty_cycle"] == pytest.approx(DUTY, abs=0.05), (method, est)
        assert est["regime"] == "training"
        assert result["sources"]["nic_counters"]["up"]
        assert result["sources"]["nic_counters"]["errors"] == 0
        device = next(d for d in result["devices"] if d["device"] == veth_pair.receiver_if)
        assert device["speed"] == 10e9 / 8  # a veth reports 10000 Mb/s
        # Last-hop (1 s) bandwidth of the device: two bursts of 0.15 s at the shaped rate.
        assert device["rx_rate"] == pytest.approx(RATE_BYTES * DUTY, rel=0.3), device
