"""Shared integration fixtures: two network namespaces joined by a shaped veth pair."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import require_component

#: The shaped burst rate of the veth pair (tc tbf on the sender side).
RATE_MBIT = 200
RATE_BYTES = RATE_MBIT * 1e6 / 8


@dataclass(frozen=True)
class Link:
    """The two ends: the sender's interface is shaped, the receiver has the address."""

    sender_ns: str
    receiver_ns: str
    receiver_if: str
    receiver_ip: str
    sender_if: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def veth_pair() -> Iterator[Link]:
    """Namespaces ``cpa*`` (sender) and ``cpb*`` (receiver), deleted afterwards; root only."""
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
        # The known B: 200 Mbit/s, a small bucket and a short queue: 10 ms of data, enough
        # to ride out a sender starved of CPU for a few ms on a loaded machine (the link would
        # idle inside a burst and B read low), short enough that bursts end sharply (the queue
        # drains in at most 10 ms after the sender stops: D + 0.02 at T = 0.5 s).
        subprocess.run(
            ["ip", "netns", "exec", a, "tc", "qdisc", "add", "dev", va, "root", "tbf",
             "rate", f"{RATE_MBIT}mbit", "burst", "16kb", "latency", "10ms"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        yield Link(a, b, vb, "10.231.0.2", va)
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
