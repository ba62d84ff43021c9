"""The MQTT sink's client when a connection closes with a write still being registered.

paho asks for write readiness each time it queues a packet; a packet queued just before the
socket closes (the "offline" status or the DISCONNECT of a sink that a reload replaces) had
its writer added after the close. asyncio then logged "Exception in callback ... add_writer
... Bad file descriptor" with a traceback, which the daemon test caught in the journal after a
SIGHUP. These drive the client's socket callbacks as paho calls them, on a real socket pair,
without a broker.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from agent.config import MqttSection
from agent.sinks import MqttSink


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def _loop_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


def test_a_write_queued_as_the_socket_closes_logs_nothing() -> None:
    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        errors = _loop_errors(loop)
        client = MqttSink(MqttSection(enabled=True), host="h")._client()
        paho = client._client
        ours, theirs = socket.socketpair()
        paho._sock = ours  # the connection paho holds
        paho.on_socket_register_write(paho, None, ours)
        # paho closes the socket (broker gone, disconnect) before the loop runs again.
        paho._sock = None
        ours.close()
        await _settle()
        theirs.close()
        return errors

    assert asyncio.run(main()) == []


def test_a_write_on_the_open_connection_is_still_registered() -> None:
    async def main() -> tuple[bool, list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        errors = _loop_errors(loop)
        client = MqttSink(MqttSection(enabled=True), host="h")._client()
        paho = client._client
        ours, theirs = socket.socketpair()
        paho._sock = ours
        paho.on_socket_register_write(paho, None, ours)
        await _settle()
        registered = loop.remove_writer(ours.fileno())
        paho._sock = None
        ours.close()
        theirs.close()
        return registered, errors

    registered, errors = asyncio.run(main())
    assert registered
    assert errors == []
