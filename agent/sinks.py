"""Push sinks: the MQTT stream of estimates.

A sink is offered every snapshot (non-blocking, from the estimator loop) and delivers from
its own task. The MQTT sink publishes one JSON estimate per hop to
``<prefix>/<host>/estimate`` (retained), keeps ``<prefix>/<host>/status`` at ``online`` while
connected with an ``offline`` last will, reconnects with capped, jittered exponential backoff,
and keeps a bounded buffer while the broker is away (oldest dropped first, and counted).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import math
import random
import ssl
from typing import Any

import aiomqtt

from agent import __version__
from agent.config import MqttSection
from agent.errors import ExportError
from agent.pipeline import SinkHealth, Snapshot

__all__ = ["MqttSink", "estimate_message"]

log = logging.getLogger(__name__)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def estimate_message(snapshot: Snapshot, host: str) -> bytes:
    """The JSON document published per hop: the analyze --json keys plus context.

    ``arrivals``, ``sharding``, ``alltoall`` and ``pipeline`` are the window's regime
    parameters, as analyze gives them for a file (each null when unknown).
    """
    assert snapshot.estimate is not None
    body: dict[str, Any] = snapshot.estimate.to_json()
    rp = snapshot.regime
    arrivals = None
    if rp is not None and rp.arrivals is not None:
        arrivals = {**rp.arrivals.to_json(), "direction": rp.arrival_direction}
    body.update(
        host=host,
        time=snapshot.wall_time_s,
        locked=snapshot.locked,
        network_source=snapshot.network_source,
        agent_version=__version__,
        job_id=snapshot.job_id,
        last_burst_time=snapshot.last_burst_wall_s,
        arrivals=arrivals,
        sharding=rp.sharding.to_json() if rp is not None and rp.sharding else None,
        alltoall=rp.alltoall.to_json() if rp is not None and rp.alltoall else None,
        pipeline=rp.pipeline.to_json() if rp is not None and rp.pipeline else None,
    )
    return json.dumps(_finite(body), separators=(",", ":"), allow_nan=False).encode()


class _Client(aiomqtt.Client):
    """aiomqtt's client, minus a race that logs a traceback when a connection closes.

    paho asks for write readiness (``on_socket_register_write``) whenever it queues a packet,
    and aiomqtt 2.x adds the writer through ``call_soon_threadsafe`` even from the loop's own
    thread. A packet queued just before the socket closes (the "offline" status or the
    DISCONNECT when a reload replaces the sink, a broker that goes away) then adds a writer
    for a closed descriptor: asyncio logs "Exception in callback ... add_writer ... Bad file
    descriptor" with a traceback, and a descriptor number already reused by the next
    connection would get the old client's writer. Here the writer is added only while the
    socket is still the client's and open.
    """

    def _on_socket_register_write(
        self,
        client: Any,
        userdata: Any,  # noqa: ARG002 (paho's callback signature)
        sock: Any,
    ) -> None:
        def callback() -> None:
            # As aiomqtt: a failed write is a broken connection.
            try:
                client.loop_write()
            except Exception as exc:
                if not self._disconnected.done():
                    self._disconnected.set_exception(exc)

        def register() -> None:
            fd = sock.fileno()
            if fd >= 0 and client.socket() is sock:
                self._loop.add_writer(fd, callback)

        self._loop.call_soon_threadsafe(register)


def _retrieve_disconnect_error(client: aiomqtt.Client) -> None:
    """Mark the client's "unexpected disconnection" error as seen.

    When the broker drops the connection, aiomqtt 2.x stores the error in a private future and
    its ``__aexit__`` returns without reading it, so the garbage collector later logs "Future
    exception was never retrieved". We already handled the failure; read it so it stays quiet.
    """
    future = getattr(client, "_disconnected", None)
    if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
        future.exception()


def mqtt_tls(cfg: MqttSection) -> ssl.SSLContext | None:
    """The broker connection's TLS context (None: plain TCP); ExportError if a file is bad."""
    if cfg.tls_ca_file is None and cfg.tls_cert_file is None:
        return None
    try:
        ctx = ssl.create_default_context(
            cafile=str(cfg.tls_ca_file) if cfg.tls_ca_file is not None else None
        )
        if cfg.tls_cert_file is not None and cfg.tls_key_file is not None:
            ctx.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ExportError(f"exporters.mqtt: cannot load TLS files: {exc}") from None
    return ctx


def _password(cfg: MqttSection) -> str | None:
    if cfg.password_file is None:
        return None
    try:
        return cfg.password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ExportError(f"exporters.mqtt.password_file: {exc.strerror or exc}") from None


class MqttSink:
    """Publishes estimates to an MQTT v5 broker (aiomqtt)."""

    name = "mqtt"

    def __init__(self, cfg: MqttSection, *, host: str) -> None:
        self._cfg = cfg
        self._host = host
        base = f"{cfg.topic_prefix}/{host}"
        self.estimate_topic = f"{base}/estimate"
        self.status_topic = f"{base}/status"
        self._buffer: collections.deque[bytes] = collections.deque(maxlen=cfg.buffer_size)
        self._wake = asyncio.Event()
        self._tls = mqtt_tls(cfg)
        self._password = _password(cfg)
        self.health = SinkHealth(self.name)

    def offer(self, snapshot: Snapshot) -> None:
        """Queue the snapshot's estimate; the oldest queued one goes when the buffer is full."""
        if snapshot.estimate is None:
            return
        if len(self._buffer) == self._buffer.maxlen:
            self.health.dropped += 1
        self._buffer.append(estimate_message(snapshot, self._host))
        self.health.buffered = len(self._buffer)
        self._wake.set()

    def _client(self) -> aiomqtt.Client:
        return _Client(
            hostname=self._cfg.host,
            port=self._cfg.port,
            identifier=self._cfg.client_id or f"commpulse-{self._host}",
            username=self._cfg.username or None,
            password=self._password,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(self.status_topic, b"offline", qos=1, retain=True),
            keepalive=self._cfg.keepalive_s,
            tls_context=self._tls,
            timeout=10.0,
        )

    async def run(self) -> None:
        """Connect, publish, and reconnect with backoff when the broker goes away."""
        delay = 1.0
        while True:
            client = self._client()
            try:
                async with client:
                    self.health.connected = True
                    delay = 1.0
                    log.info("connected to MQTT broker %s:%s", self._cfg.host, self._cfg.port)
                    await client.publish(self.status_topic, b"online", qos=1, retain=True)
                    try:
                        await self._publish_forever(client)
                    finally:
                        # A clean disconnect sends no last will: say "offline" ourselves.
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(
                                client.publish(self.status_topic, b"offline", qos=1, retain=True),
                                2.0,
                            )
            except aiomqtt.MqttError as exc:
                self.health.connected = False
                self.health.errors += 1
                self.health.last_error = str(exc)
                log.warning(
                    "MQTT broker %s:%s unavailable (%s); retrying in %.0f s",
                    self._cfg.host,
                    self._cfg.port,
                    exc,
                    delay,
                )
            finally:
                self.health.connected = False
                _retrieve_disconnect_error(client)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2.0, self._cfg.reconnect_max_s)

    async def _publish_forever(self, client: aiomqtt.Client) -> None:
        while True:
            while self._buffer:
                payload = self._buffer[0]
                await client.publish(
                    self.estimate_topic, payload, qos=self._cfg.qos, retain=self._cfg.retain
                )
                if self._buffer and self._buffer[0] is payload:
                    self._buffer.popleft()
                self.health.published += 1
                self.health.buffered = len(self._buffer)
                _reraise_swallowed_cancel()
            _reraise_swallowed_cancel()  # also after the "online" publish
            self._wake.clear()
            await self._wake.wait()


def _reraise_swallowed_cancel() -> None:
    """Honour a cancellation that aiomqtt's ``wait_for`` swallowed (Python 3.11).

    When cancel() lands just as the PUBACK arrives, 3.11's ``asyncio.wait_for`` returns the
    result and drops the CancelledError; the task then reports ``cancelling()`` and would
    otherwise sleep on the next wake-up forever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
