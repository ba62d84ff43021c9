"""``commpulse run``: the agent as a long-running service.

Builds the sources, the live pipeline, the Prometheus endpoint and the MQTT stream from the
configuration, then runs until SIGTERM/SIGINT. Behaviour an operator relies on:

* **SIGHUP** re-reads the file. An invalid file is logged and ignored (the agent keeps its
  running configuration). Sources and sinks whose section changed restart; the others keep
  running and every window keeps its history — except when a window size changes
  (``agent.window_s``), which starts the windows over. A new /metrics listener is started
  before the old one is closed; if it cannot start, the old one stays.
* **SIGTERM / SIGINT** stop the sources, publish an ``offline`` status on MQTT, close the
  listener and exit 0, within a few seconds.
* Under systemd (``Type=notify``): ``READY=1`` once serving, ``RELOADING=1``/``READY=1`` around
  a reload, ``STOPPING=1`` on the way out, and ``WATCHDOG=1`` only while estimates keep coming.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agent.clock import Clock, MonotonicClock
from agent.config import Config, PrometheusSection, load_config
from agent.errors import CommpulseError
from agent.exporter import start_metrics_server
from agent.http import MetricsServer, tls_context
from agent.malloc import limit_arenas
from agent.pipeline import Pipeline, PipelineSettings, Snapshot, SnapshotStore
from agent.sinks import MqttSink
from agent.systemd import Notifier
from agent.thread_names import name_this_thread
from collectors._base import Source
from collectors._sampler import BATCH_S as SAMPLER_BATCH_S
from collectors._sampler import Sampler
from collectors.dcgm_exporter import DcgmExporterSource
from collectors.gpu_csv import GpuCsvSource
from collectors.nccl_inspector import InspectorSource
from collectors.nccl_tail import NcclTail
from collectors.nic_counters import NicCounters
from collectors.nvml_gpu import NvmlGpuSource
from collectors.packet_capture import PacketCapture
from collectors.rdma_counters import RdmaCounters

__all__ = ["Daemon", "build_sources", "host_name", "pipeline_settings"]

log = logging.getLogger(__name__)


def host_name(config: Config) -> str:
    """The host name used in MQTT topics."""
    return config.agent.hostname or socket.gethostname().split(".")[0]


def pipeline_settings(config: Config) -> PipelineSettings:
    """Pipeline settings from the configuration (rates sized from the sources' poll rates)."""
    s = config.sources
    rates = [1.0 / c.poll_interval_s for c in (s.nic_counters, s.rdma_counters) if c.enabled]
    if s.packet_capture.enabled:
        rates.append(1.0 / s.packet_capture.bin_s)
    # A sweep's calls are handed over at once (every batch_s for sweeps faster than that).
    logs = [c.poll_interval_s for c in (s.nccl_log, s.nccl_inspector) if c.enabled]
    return PipelineSettings(
        window_s=config.agent.window_s,
        hop_s=config.agent.hop_s,
        job_id=config.agent.job_id,
        queue_size=config.agent.queue_size,
        counter_rate_hz=max(rates, default=100.0),
        idle_bytes_per_s=config.agent.idle_bytes_per_s,
        collective_latency_s=config.agent.collective_latency_s,
        calls_delivery_s=max([SAMPLER_BATCH_S, *logs]),
    )


def build_sources(
    config: Config, *, clock: Clock, sampler: Sampler, raw_lines: bool = False
) -> list[Source]:
    """One source per enabled section (sources of one poll interval share a thread)."""
    s = config.sources
    sources: list[Source] = []
    if s.nic_counters.enabled:
        sources.append(NicCounters(s.nic_counters, clock=clock, sampler=sampler))
    if s.rdma_counters.enabled:
        sources.append(RdmaCounters(s.rdma_counters, clock=clock, sampler=sampler))
    if s.nccl_log.enabled:
        state = config.agent.state_dir / "nccl_offsets.json"
        sources.append(
            NcclTail(
                s.nccl_log, clock=clock, state_file=state, sampler=sampler, raw_lines=raw_lines
            )
        )
    if s.nccl_inspector.enabled:
        state = config.agent.state_dir / "inspector_offsets.json"
        sources.append(
            InspectorSource(s.nccl_inspector, clock=clock, state_file=state, sampler=sampler)
        )
    if s.gpu_csv.enabled:
        sources.append(GpuCsvSource(s.gpu_csv, clock=clock, sampler=sampler))
    if s.nvml.enabled:
        sources.append(NvmlGpuSource(s.nvml, clock=clock, sampler=sampler))
    if s.dcgm_exporter.enabled:
        sources.append(DcgmExporterSource(s.dcgm_exporter, clock=clock))
    if s.packet_capture.enabled:
        sources.append(PacketCapture(s.packet_capture, clock=clock))
    return sources


def _start_server(store: SnapshotStore, cfg: PrometheusSection) -> MetricsServer | None:
    if not cfg.enabled:
        return None
    ctx = None
    if cfg.tls_cert_file is not None and cfg.tls_key_file is not None:
        ctx = tls_context(
            cfg.tls_cert_file,
            cfg.tls_key_file,
            client_ca=cfg.client_ca_file,
            require_client=cfg.client_auth_required,
        )
    return start_metrics_server(store, addr=cfg.listen_address, port=cfg.port, ssl_context=ctx)


@dataclass
class _Running:
    config: Config
    server: MetricsServer | None


class Daemon:
    """The service: one pipeline, its sources and sinks, the listener, signals."""

    def __init__(
        self, config_path: Path, *, clock: Clock | None = None, notifier: Notifier | None = None
    ) -> None:
        self._path = config_path
        self._clock = clock or MonotonicClock()
        self._notifier = notifier or Notifier()
        self._store = SnapshotStore()
        self._sampler = Sampler(self._clock)
        self._pipeline: Pipeline | None = None
        self._running: _Running | None = None
        self._reloads: asyncio.Queue[None] = asyncio.Queue()
        self.reload_errors = 0

    @property
    def metrics_port(self) -> int | None:
        """The bound /metrics port (useful when configured as 0)."""
        if self._running is None or self._running.server is None:
            return None
        return self._running.server.port

    def _sources_for(self, config: Config) -> dict[str, Source]:
        return {s.name: s for s in build_sources(config, clock=self._clock, sampler=self._sampler)}

    def _sink_for(self, config: Config) -> MqttSink | None:
        if not config.exporters.mqtt.enabled:
            return None
        return MqttSink(config.exporters.mqtt, host=host_name(config))

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (or :meth:`stop`); returns the exit status."""
        # The estimates (and the dcgm-exporter fetch, NVML start-up, reloads) run in the
        # default executor: named threads, as the others.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(thread_name_prefix="worker", initializer=name_this_thread)
        )
        config = load_config(self._path)
        server = _start_server(self._store, config.exporters.prometheus)
        sink = self._sink_for(config)
        self._pipeline = Pipeline(
            list(self._sources_for(config).values()),
            self._store,
            settings=pipeline_settings(config),
            clock=self._clock,
            sinks=[sink] if sink else [],
        )
        self._running = _Running(config, server)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        where = (
            f"{'https' if server.tls else 'http'}://{server.address}:{server.port}/metrics"
            if server is not None
            else "no /metrics listener"
        )
        log.info("commpulse running: %s", where)
        self._notifier.ready(f"serving {where}")
        try:
            async with asyncio.TaskGroup() as tg:
                main = tg.create_task(self._pipeline.run(), name="pipeline")
                helpers = [
                    tg.create_task(self._reload_loop(), name="reload"),
                    tg.create_task(self._watchdog(), name="watchdog"),
                ]
                await main  # returns once stop() was called and every task is cancelled
                for task in helpers:
                    task.cancel()
        finally:
            self._notifier.stopping()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            if self._running.server is not None:
                self._running.server.close()
        log.info("commpulse stopped")
        return 0

    def stop(self) -> None:
        """Begin a clean shutdown (signal handler)."""
        log.info("stopping")
        self._notifier.stopping()
        if self._pipeline is not None:
            self._pipeline.stop()

    def request_reload(self) -> None:
        """Queue a reload (signal handler; the work happens on the event loop)."""
        self._reloads.put_nowait(None)

    async def _reload_loop(self) -> None:
        while True:
            await self._reloads.get()
            self._notifier.reloading()
            try:
                await self.reload()
            except CommpulseError as exc:
                self.reload_errors += 1
                log.error("reload failed, keeping the running configuration: %s", exc)
                self._notifier.status(f"reload failed: {exc}")
            self._notifier.ready()

    async def reload(self) -> None:
        """Apply a changed configuration file (see the module docstring)."""
        assert self._pipeline is not None
        assert self._running is not None
        new = await asyncio.to_thread(load_config, self._path)
        old = self._running.config
        pipeline = self._pipeline
        # First what can fail (a port taken, a TLS file that does not load, a source that
        # cannot be built), so that a failed reload changes nothing: the windows were started
        # over before a bad certificate stopped it, with the old configuration kept.
        server_changed = new.exporters.prometheus != old.exporters.prometheus
        server = _start_server(self._store, new.exporters.prometheus) if server_changed else None
        try:
            removed: list[str] = []
            fresh: list[Source] = []
            built: dict[str, Source] | None = None
            for name in new.sources.names():
                before, after = getattr(old.sources, name), getattr(new.sources, name)
                if before == after and new.agent.state_dir == old.agent.state_dir:
                    continue
                if not after.enabled:
                    removed.append(name)
                    continue
                built = built if built is not None else self._sources_for(new)
                if name in built:
                    fresh.append(built[name])
            sink_changed = new.exporters.mqtt != old.exporters.mqtt or host_name(new) != host_name(
                old
            )
            sink = self._sink_for(new) if sink_changed else None
        except BaseException:
            if server is not None:
                server.close()
            raise
        if pipeline.apply_settings(pipeline_settings(new)):
            log.info("window sizes changed: the windows start over")
        if server_changed:
            if self._running.server is not None:
                self._running.server.close()
            self._running.server = server
        for name in removed:
            pipeline.remove_source(name)
        for source in fresh:
            pipeline.replace_source(source)
        if sink_changed:
            if sink is None:
                pipeline.remove_sink("mqtt")
            else:
                pipeline.replace_sink(sink)
        self._running.config = new
        log.info("configuration reloaded from %s", self._path)

    async def _watchdog(self) -> None:
        """WATCHDOG=1 at half the systemd interval, only while estimates keep coming."""
        interval = self._notifier.watchdog_s
        if interval is None:
            return
        assert self._running is not None
        while True:
            await asyncio.sleep(interval / 2.0)
            snap: Snapshot | None = self._store.latest()
            hop = self._running.config.agent.hop_s
            fresh = snap is not None and self._clock.now() - snap.time_s < max(5.0, 5 * hop)
            if fresh:
                self._notifier.watchdog()
            else:
                log.warning("estimator stalled: withholding the systemd watchdog ping")


def run_daemon(config_path: Path) -> int:
    """Entry point of ``commpulse run``."""
    limit_arenas()  # before any thread allocates: the agent runs for months
    return asyncio.run(Daemon(config_path).run())


__all__ += ["run_daemon"]
