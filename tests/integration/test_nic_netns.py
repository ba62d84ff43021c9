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
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import require_component

pytestmark = [pytest.mark.root, pytest.mark.slow]

PERIOD = 0.5
DUTY = 0.3
RATE_MBIT = 200
RATE_BYTES = RATE_MBIT * 1e6 / 8
SECONDS = 14.0


@dataclass(frozen=True)
class Link:
    sender_ns: str
    receiver_ns: str
    receiver_if: str
    receiver_ip: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def veth_pair() -> Iterator[Link]:
    require_component("ip")
    require_component("tc")
    if os.geteuid() != 0:
        message = "network namespaces need root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    tag = f"{os.getpid() % 100000}"
    a, b = f"cpa{tag}", f"cpb{tag}"
    va, vb = f"cpva{tag}", f"cpvb{tag}"
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a)
        _ip("link", "set", vb, "netns", b)
        _ip("-n", a, "addr", "add", "10.231.0.1/24", "dev", va)
        _ip("-n", b, "addr", "add", "10.231.0.2/24", "dev", vb)
        for ns, dev in ((a, va), (b, vb)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        # The known B: 200 Mbit/s, a small bucket and a short queue (bursts end sharply).
        subprocess.run(
            ["ip", "netns", "exec", a, "tc", "qdisc", "add", "dev", va, "root", "tbf",
             "rate", f"{RATE_MBIT}mbit", "burst", "16kb", "latency", "5ms"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        yield Link(a, b, vb, "10.231.0.2")
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


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
