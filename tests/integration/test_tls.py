"""TLS for real: the /metrics endpoint with client certificates, and MQTT over TLS with a
password file, against openssl-made certificates and a real Mosquitto."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import aiomqtt
import pytest

from agent.config import MqttSection
from agent.estimate import Estimate
from agent.exporter import start_metrics_server
from agent.http import tls_context
from agent.pipeline import Snapshot, SnapshotStore
from agent.sinks import MqttSink
from tests.conftest import free_port, require_component


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([require_component("openssl"), *args], cwd=cwd, check=True,
                   capture_output=True)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", f"{name}.pem",
                 cwd=d)  # fmt: skip
    return d


def _store() -> SnapshotStore:
    store = SnapshotStore()
    est = Estimate(4.55, 25e9, 0.34, 0.9, "training", 0.34, 32, {})
    store.publish(Snapshot(est, 1.0, time.time(), 0.01, ()))
    return store


def _client_ctx(pki: Path, *, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


def test_metrics_over_tls_with_client_certificates(pki: Path) -> None:
    ctx = tls_context(pki / "server.pem", pki / "server.key", client_ca=pki / "ca.pem",
                      require_client=True)  # fmt: skip
    server = start_metrics_server(_store(), addr="127.0.0.1", port=0, ssl_context=ctx)
    url = f"https://127.0.0.1:{server.port}/metrics"
    try:
        with urllib.request.urlopen(url, context=_client_ctx(pki, with_cert=True), timeout=5) as r:
            assert "commpulse_sync_period_seconds 4.55" in r.read().decode()
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(url, context=_client_ctx(pki, with_cert=False), timeout=5)
        # An idle client that never says hello must not block anybody else's scrape.
        with socket.create_connection(("127.0.0.1", server.port)):
            began = time.monotonic()
            ctx_ok = _client_ctx(pki, with_cert=True)
            with urllib.request.urlopen(url, context=ctx_ok, timeout=3) as r:
                assert r.status == 200
            assert time.monotonic() - began < 2.0
    finally:
        server.close()


def test_mqtt_over_tls_with_a_password_file(pki: Path, tmp_path: Path) -> None:
    broker = require_component("mosquitto")
    passwd_tool = require_component("mosquitto_passwd")
    port = free_port()
    passwords = tmp_path / "passwd"
    subprocess.run([passwd_tool, "-c", "-b", str(passwords), "agent", "s3cret"], check=True,
                   capture_output=True)  # fmt: skip
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {passwords}\n"
        f"cafile {pki / 'ca.pem'}\ncertfile {pki / 'server.pem'}\nkeyfile {pki / 'server.key'}\n"
        "persistence false\n" + ("user root\n" if os.geteuid() == 0 else "")
        # Started as root, mosquitto would switch to its own user, who cannot read the
        # test's private temporary directory.
    )
    secret = tmp_path / "mqtt-password"
    secret.write_text("s3cret\n")
    broker_log = tmp_path / "mosquitto.log"
    with broker_log.open("w") as log_fh:
        proc = subprocess.Popen([broker, "-c", str(conf), "-v"], stdout=log_fh,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        cfg = MqttSection(enabled=True, host="127.0.0.1", port=port, username="agent",
                          password_file=secret, tls_ca_file=pki / "ca.pem")  # fmt: skip
        try:
            got = asyncio.run(_publish_and_receive(cfg, pki))
        except TimeoutError:
            raise AssertionError(broker_log.read_text()[-3000:]) from None
        assert json.loads(got)["period_s"] == 4.55
    finally:
        proc.kill()
        proc.wait()


async def _publish_and_receive(cfg: MqttSection, pki: Path) -> bytes:
    sink = MqttSink(cfg, host="tlshost")
    tls = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    got: bytes | None = None
    async with asyncio.timeout(30):
        async with aiomqtt.Client("127.0.0.1", cfg.port, username="agent", password="s3cret",
                                  tls_context=tls, identifier="reader") as reader:  # fmt: skip
            await reader.subscribe("commpulse/tlshost/estimate", qos=1)
            task = asyncio.create_task(sink.run())
            snap = _store().latest()
            assert snap is not None
            sink.offer(snap)
            async for message in reader.messages:
                got = bytes(message.payload)
                break
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert got is not None
    assert sink.health.published == 1
    return got
