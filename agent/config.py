"""The agent's configuration: one TOML file → a tree of frozen, typed dataclasses.

Unknown keys are rejected (with the closest known key suggested), every value is type-checked,
and every error names its dotted key, so ``commpulse validate`` can say exactly what is
wrong. Each field documents itself (``metadata["doc"]``); ``docs/config.md`` is generated from
these docstrings (``python -m agent.config > docs/config.md``) and a test keeps it current.

Sections::

    [agent]                   windows, hop, host name, state directory
    [exporters.prometheus]    /metrics listener (optional TLS, client certificates)
    [exporters.mqtt]          JSON estimate stream to a broker
    [sources.nic_counters]    network-interface counters (netlink or sysfs)
    [sources.rdma_counters]   InfiniBand / RoCE port counters
    [sources.nccl_log]        NCCL debug logs, tailed
    [sources.nccl_inspector]  NCCL Inspector plugin dumps: GPU-timed collectives
    [sources.gpu_csv]         GPU activity from an nvidia-smi (or named) CSV file
    [sources.nvml]            GPU activity from the driver (NVML: GPM or utilization samples)
    [sources.dcgm_exporter]   GPU activity from a local dcgm-exporter's /metrics
    [sources.packet_capture]  live packet capture on named interfaces (needs CAP_NET_RAW)
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.defaults import DEFAULT_PORT
from agent.errors import ConfigError
from collectors._config import doc, doc_factory
from collectors.dcgm_exporter import DcgmExporterConfig
from collectors.gpu_csv import GpuCsvConfig
from collectors.nccl_inspector import InspectorConfig
from collectors.nccl_tail import NcclTailConfig
from collectors.nic_counters import NicConfig
from collectors.nvml_gpu import NvmlConfig
from collectors.packet_capture import CaptureConfig
from collectors.rdma_counters import RdmaConfig

__all__ = [
    "AgentSection",
    "Config",
    "ExportersSection",
    "MqttSection",
    "PrometheusSection",
    "SourcesSection",
    "load_config",
    "parse_config",
    "render_reference",
]


def _check_file(key: str, path: Path | None) -> None:
    if path is None:
        return
    if not path.is_file():
        raise ConfigError(f"{key}: {path} does not exist or is not a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{key}: {path} is not readable by this user")


@dataclass(frozen=True)
class AgentSection:
    """``[agent]``: windows and timing of the estimator."""

    hop_s: float = doc(1.0, "Seconds between two estimates (and MQTT messages).")
    window_s: float = doc(
        120.0, "Seconds of history each estimate looks at; hold at least 3 periods of T."
    )
    queue_size: int = doc(
        8192,
        "Readings buffered between sources and windows, an equal share per source (a flooding "
        "source loses its own readings); overflow is counted.",
    )
    idle_bytes_per_s: float = doc(
        10e6,
        "Below this mean rate, with no period, the host is idle; traffic that never reaches it "
        "(heartbeats, management chatter) has no period and no bursts.",
    )
    collective_latency_s: float = doc(
        10e-6,
        "Latency of one small collective on this fabric, for the fine-tuning latency share "
        "(collectives per step × this / T); measure it with nccl-tests at small sizes.",
    )
    hostname: str = doc("", "Host name in MQTT topics; empty: the system's host name.")
    job_id: str = doc(
        "",
        "Job this host works for (label job_id of commpulse_job_info, for the fleet rules); "
        "empty: nccl-<commId> of the largest NCCL communicator in the logs, the same on every "
        "host of a job.",
    )
    state_dir: Path = doc(
        Path("/var/lib/commpulse"), "Where the agent keeps state (NCCL log offsets)."
    )

    def __post_init__(self) -> None:
        if not 0.05 <= self.hop_s <= 60:
            raise ConfigError("agent.hop_s must be between 0.05 and 60 seconds")
        if not 5 <= self.window_s <= 86400:
            raise ConfigError("agent.window_s must be between 5 and 86400 seconds")
        if self.window_s < 3 * self.hop_s:
            raise ConfigError("agent.window_s must be at least 3 hops long")
        if not 64 <= self.queue_size <= 10_000_000:
            raise ConfigError("agent.queue_size must be between 64 and 10000000")
        if self.idle_bytes_per_s < 0:
            raise ConfigError("agent.idle_bytes_per_s must not be negative")
        if not 0 < self.collective_latency_s <= 1:
            raise ConfigError("agent.collective_latency_s must be between 0 and 1 second")
        if len(self.job_id) > 128 or not self.job_id.isprintable():
            raise ConfigError("agent.job_id must be printable and at most 128 characters")


@dataclass(frozen=True)
class PrometheusSection:
    """``[exporters.prometheus]``: the /metrics endpoint."""

    enabled: bool = doc(True, "Serve /metrics.")
    # Prometheus scrapes from another host: listen on every address, as node_exporter does.
    listen_address: str = doc("0.0.0.0", "Address to bind; 127.0.0.1 keeps it local.")  # noqa: S104
    port: int = doc(DEFAULT_PORT, "TCP port (outside the allocated exporter range 9100-9999).")
    tls_cert_file: Path | None = doc(None, "PEM certificate: serve HTTPS instead of HTTP.")
    tls_key_file: Path | None = doc(None, "PEM private key of tls_cert_file.")
    client_ca_file: Path | None = doc(None, "CA bundle to verify client certificates.")
    client_auth_required: bool = doc(False, "Refuse clients without a valid certificate.")

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("exporters.prometheus.port must be between 0 and 65535")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("exporters.prometheus: tls_cert_file and tls_key_file go together")
        if self.client_auth_required and self.client_ca_file is None:
            raise ConfigError("exporters.prometheus.client_auth_required needs client_ca_file")
        if self.client_ca_file is not None and self.tls_cert_file is None:
            raise ConfigError("exporters.prometheus.client_ca_file needs tls_cert_file (HTTPS)")


@dataclass(frozen=True)
class MqttSection:
    """``[exporters.mqtt]``: one JSON estimate per hop to ``<topic_prefix>/<host>/estimate``."""

    enabled: bool = doc(False, "Publish estimates to an MQTT broker.")
    host: str = doc("127.0.0.1", "Broker host.")
    port: int = doc(1883, "Broker port (8883 is the usual TLS port).")
    topic_prefix: str = doc("commpulse", "Topics are <topic_prefix>/<host>/estimate and /status.")
    qos: int = doc(1, "MQTT quality of service: 0, 1 or 2.")
    retain: bool = doc(True, "Retain the last estimate on the broker.")
    client_id: str = doc("", "MQTT client id; empty: commpulse-<host>.")
    username: str = doc("", "User name; empty: anonymous.")
    password_file: Path | None = doc(None, "File holding the password (not the password).")
    tls_ca_file: Path | None = doc(None, "CA bundle: connect with TLS.")
    tls_cert_file: Path | None = doc(None, "Client certificate for TLS.")
    tls_key_file: Path | None = doc(None, "Private key of tls_cert_file.")
    keepalive_s: int = doc(30, "MQTT keep-alive in seconds.")
    buffer_size: int = doc(600, "Estimates kept while the broker is away; older ones are dropped.")
    reconnect_max_s: float = doc(30.0, "Longest wait between reconnection attempts.")

    def __post_init__(self) -> None:
        if self.qos not in (0, 1, 2):
            raise ConfigError("exporters.mqtt.qos must be 0, 1 or 2")
        if not 1 <= self.port <= 65535:
            raise ConfigError("exporters.mqtt.port must be between 1 and 65535")
        if not self.topic_prefix or any(c in self.topic_prefix for c in "#+"):
            raise ConfigError("exporters.mqtt.topic_prefix must be non-empty, without # or +")
        if self.buffer_size < 1:
            raise ConfigError("exporters.mqtt.buffer_size must be at least 1")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("exporters.mqtt: tls_cert_file and tls_key_file go together")
        if self.password_file is not None and not self.username:
            raise ConfigError("exporters.mqtt.password_file needs username")


@dataclass(frozen=True)
class ExportersSection:
    """``[exporters.*]``."""

    prometheus: PrometheusSection = doc_factory(PrometheusSection, "Prometheus /metrics.")
    mqtt: MqttSection = doc_factory(MqttSection, "MQTT stream.")


#: The sections that deliver GPU activity: one at a time.
GPU_SOURCES = ("gpu_csv", "nvml", "dcgm_exporter")


@dataclass(frozen=True)
class SourcesSection:
    """``[sources.*]``: one section per input, keyed by the source's name."""

    nic_counters: NicConfig = doc_factory(NicConfig, "Network-interface counters.")
    rdma_counters: RdmaConfig = doc_factory(RdmaConfig, "InfiniBand / RoCE port counters.")
    nccl_log: NcclTailConfig = doc_factory(NcclTailConfig, "NCCL debug logs.")
    nccl_inspector: InspectorConfig = doc_factory(
        InspectorConfig, "NCCL Inspector plugin dumps (GPU-timed collectives)."
    )
    gpu_csv: GpuCsvConfig = doc_factory(GpuCsvConfig, "GPU activity CSV.")
    nvml: NvmlConfig = doc_factory(NvmlConfig, "GPU activity from NVML.")
    dcgm_exporter: DcgmExporterConfig = doc_factory(
        DcgmExporterConfig, "GPU activity from a local dcgm-exporter."
    )
    packet_capture: CaptureConfig = doc_factory(
        CaptureConfig, "Live packet capture (AF_PACKET; needs CAP_NET_RAW)."
    )

    def __post_init__(self) -> None:
        gpu = [name for name in GPU_SOURCES if getattr(self, name).enabled]
        if len(gpu) > 1:
            raise ConfigError(
                f"sources: {' and '.join(gpu)} are both enabled; enable one GPU source "
                "(their samples would be mixed)"
            )

    def names(self) -> tuple[str, ...]:
        """Every source section, in file order."""
        return tuple(f.name for f in dataclasses.fields(self))


@dataclass(frozen=True)
class Config:
    """The whole configuration file."""

    agent: AgentSection = doc_factory(AgentSection, "Agent.")
    exporters: ExportersSection = doc_factory(ExportersSection, "Exporters.")
    sources: SourcesSection = doc_factory(SourcesSection, "Sources.")

    def check_files(self) -> None:
        """Checks that need the filesystem (paths named in the config must exist)."""
        p = self.exporters.prometheus
        if p.enabled:
            _check_file("exporters.prometheus.tls_cert_file", p.tls_cert_file)
            _check_file("exporters.prometheus.tls_key_file", p.tls_key_file)
            _check_file("exporters.prometheus.client_ca_file", p.client_ca_file)
        m = self.exporters.mqtt
        if m.enabled:
            for key in ("password_file", "tls_ca_file", "tls_cert_file", "tls_key_file"):
                _check_file(f"exporters.mqtt.{key}", getattr(m, key))
        s = self.sources
        for name in ("nic_counters", "rdma_counters"):
            section = getattr(s, name)
            if section.enabled and not section.sysfs_root.is_dir():
                raise ConfigError(
                    f"sources.{name}.sysfs_root: {section.sysfs_root} is not a directory"
                )
        if s.gpu_csv.enabled and s.gpu_csv.path is not None and s.gpu_csv.mode == "replay":
            _check_file("sources.gpu_csv.path", s.gpu_csv.path)
        if not any(getattr(s, f.name).enabled for f in dataclasses.fields(s)):
            raise ConfigError("sources: every source is disabled; enable at least one")


# --------------------------------------------------------------------------------------------
# Loading


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
                "Path": "path"}.get(tp.__name__, tp.__name__)  # fmt: skip
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin in (tuple, list):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return str(tp)


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value == "":
            return None  # an empty string leaves an optional path or pattern unset
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table [{key}], found {_found(value)}")
        return _load(tp, value, key)
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, found {_found(value)}")
        item = typing.get_args(tp)[0]
        return tuple(_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, found {_found(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, found {_found(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, found {_found(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, found {_found(value)}")
        return value
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a path (a non-empty string), found {_found(value)}")
        return Path(value)
    raise ConfigError(f"{key}: unsupported type {tp!r}")  # pragma: no cover - schema bug


def _found(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "table"}.get(type(value), type(value).__name__)  # fmt: skip
    return f"{kind} {value!r}" if kind != "table" else "a table"


def _load(cls: Any, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else key
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(names)})"
            raise ConfigError(f"{where}: unknown key{hint}")
    kwargs = {
        name: _convert(data[name], hints[name], f"{prefix}.{name}" if prefix else name)
        for name in names
        if name in data
    }
    return cls(**kwargs)


def parse_config(text: str, *, source: str = "<config>") -> Config:
    """Parse TOML text into a :class:`Config` (no filesystem checks)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        config: Config = _load(Config, data, "")
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return config


def load_config(path: Path, *, check_files: bool = True) -> Config:
    """Read, parse and check a configuration file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    config = parse_config(text, source=str(path))
    if check_files:
        try:
            config.check_files()
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return config


# --------------------------------------------------------------------------------------------
# Reference documentation


def _default_text(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    else:
        return ""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'`"{value}"`' if len(value) < 40 else "see below"
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    return f"`{value}`"


def render_reference() -> str:
    """Markdown reference of every section and key, generated from the dataclasses."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `agent/config.py` and the source modules by",
        "`python -m agent.config > docs/config.md`; do not edit by hand.",
        "Durations are in seconds, rates in bytes per second. An empty string leaves an",
        "optional path or pattern unset. `commpulse validate FILE` checks a file.",
        "",
    ]
    long_defaults: list[str] = []

    def section(cls: Any, name: str) -> None:
        hints = typing.get_type_hints(cls)
        leaf = [f for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(hints[f.name])]
        if leaf:
            lines.append(f"## `[{name}]`")
            lines.append("")
            summary = (cls.__doc__ or "").strip().splitlines()[0]
            lines.append(summary)
            lines.append("")
            lines.append("| key | type | default | meaning |")
            lines.append("|---|---|---|---|")
            for f in leaf:
                default = _default_text(f)
                if default == "see below":
                    long_defaults.append(f"- `{name}.{f.name}`: `{f.default}`")
                lines.append(
                    f"| `{f.name}` | {_type_name(hints[f.name])} | {default} | "
                    f"{f.metadata.get('doc', '')} |"
                )
            lines.append("")
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                section(hints[f.name], f"{name}.{f.name}" if name else f.name)

    section(Config, "")
    if long_defaults:
        lines.append("## Long defaults")
        lines.append("")
        lines.extend(long_defaults)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render_reference())
