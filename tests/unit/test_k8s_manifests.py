"""deploy/k8s and deploy/container, against Kubernetes' schemas, the systemd unit and the agent.

Core objects are validated offline against the Kubernetes OpenAPI schemas (strict: unknown
fields fail); the ServiceMonitor, a CRD, is checked field by field here. The rest ties the
manifests to the repository so that they cannot drift: the ConfigMap's TOML is loaded by the
agent's own loader, the port is ``DEFAULT_PORT``, limits and grace period are parsed from
``systemd/commpulse.service``, and the image tag is the project's version.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from agent.config import Config, load_config
from agent.defaults import DEFAULT_PORT
from tests.conftest import require_component

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
DAEMONSET_FILE = K8S / "daemonset.yaml"
SERVICEMONITOR_FILE = K8S / "servicemonitor.yaml"
DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"
UNIT = ROOT / "systemd" / "commpulse.service"
DEPLOY_CONFIG = ROOT / "deploy" / "config" / "commpulse.toml"
PYPROJECT = ROOT / "pyproject.toml"

#: Oldest Kubernetes release the manifests must be valid for (kubernetes-validate ships it).
K8S_VERSION = "1.30"
NAMESPACE = "commpulse"

#: Keys of the ConfigMap's TOML that differ from deploy/config/commpulse.toml, and why.
POD_OVERRIDES = {
    # the host's /sys is mounted at /host/sys
    ("sources", "nic_counters", "sysfs_root"),
    ("sources", "rdma_counters", "sysfs_root"),
    ("sources", "packet_capture", "sysfs_root"),
    # auto takes netlink only for a sysfs_root of /sys
    ("sources", "nic_counters", "method"),
    # plus the pod-side interfaces of common CNIs
    ("sources", "nic_counters", "exclude"),
}

Doc = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Loading


def _load_docs(path: Path) -> list[Doc]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert all(isinstance(d, dict) for d in docs), path
    return docs


@functools.cache
def _daemonset_docs() -> tuple[Doc, ...]:
    return tuple(_load_docs(DAEMONSET_FILE))


def _object(kind: str) -> Doc:
    found = [d for d in _daemonset_docs() if d["kind"] == kind]
    assert len(found) == 1, f"{DAEMONSET_FILE.name}: expected one {kind}, found {len(found)}"
    return copy.deepcopy(found[0])


def _servicemonitor() -> Doc:
    docs = _load_docs(SERVICEMONITOR_FILE)
    assert len(docs) == 1
    return docs[0]


def _pod_spec() -> Doc:
    spec: Doc = _object("DaemonSet")["spec"]["template"]["spec"]
    return spec


def _agent_container() -> Doc:
    containers = _pod_spec()["containers"]
    assert len(containers) == 1
    container: Doc = containers[0]
    return container


def _config_text() -> str:
    (key,) = _object("ConfigMap")["data"]
    text: str = _object("ConfigMap")["data"][key]
    return text


def _config(tmp_path: Path) -> Config:
    # Exactly what `commpulse validate` / `commpulse run` read, less the filesystem checks
    # (the pod's paths do not exist here: see test_config_files_exist_on_the_node).
    path = tmp_path / "commpulse.toml"
    path.write_text(_config_text(), encoding="utf-8")
    return load_config(path, check_files=False)


def _volumes() -> dict[str, Doc]:
    return {v["name"]: v for v in _pod_spec()["volumes"]}


def _mounts(container: Doc) -> dict[str, Doc]:
    """mountPath → volumeMount."""
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def _mount_of(path: PurePosixPath, container: Doc) -> Doc | None:
    """The volumeMount whose mountPath holds ``path`` (the deepest one), if any."""
    best: Doc | None = None
    for mount_path, mount in _mounts(container).items():
        if path.is_relative_to(mount_path) and (
            best is None or len(mount_path) > len(best["mountPath"])
        ):
            best = mount
    return best


def _walk_config(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of the configuration."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value):
            yield from _walk_config(value, key)
        else:
            yield key, value


def _fixed_dir(path: str) -> PurePosixPath:
    """The path itself, or for a glob the directory before its first wildcard."""
    fixed = re.split(r"[*?\[]", path, maxsplit=1)[0]
    return PurePosixPath(path if fixed == path else fixed.rsplit("/", 1)[0])


def _config_paths(config: Config) -> list[tuple[str, PurePosixPath]]:
    """Every filesystem path named in the configuration; a glob stands for its fixed prefix."""
    out: list[tuple[str, PurePosixPath]] = []
    for key, value in _walk_config(config):
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, Path) or (isinstance(item, str) and item.startswith("/")):
                out.append((key, _fixed_dir(str(item))))
    return out


def _unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _unit(key: str) -> str:
    values = _unit_settings()[key]
    assert len(values) == 1, f"{UNIT.name}: {key}= set {len(values)} times"
    return values[0]


def _systemd_bytes(value: str) -> int:
    # systemd.resource-control(5): K, M, G, T are powers of 1024
    m = re.fullmatch(r"(\d+)([KMGT]?)", value)
    assert m, value
    return int(m.group(1)) * (1 << (10 * "_KMGT".index(m.group(2) or "_")))


def _systemd_seconds(value: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
             "h": 3600.0}  # fmt: skip
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert parts, value
    return sum(float(n) * units[u] for n, u in parts)


def _k8s_quantity(value: str | int) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?", str(value))
    assert m, value
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10,
             "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]  # fmt: skip
    return float(m.group(1)) * scale


def _project_version() -> str:
    version: str = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    return version


# --------------------------------------------------------------------------------------------
# Schemas


@pytest.mark.parametrize(
    "doc", _load_docs(DAEMONSET_FILE), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_object_validates_against_the_kubernetes_schema(doc: Doc) -> None:
    assert doc["kind"] in {"Namespace", "ConfigMap", "DaemonSet", "Service"}
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    if doc["kind"] != "Namespace":
        assert doc["metadata"]["namespace"] == NAMESPACE


def test_strict_validation_rejects_an_unknown_field() -> None:
    # The check above can fail: a misspelt field is an error, not ignored.
    daemonset = _object("DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)


_DURATION = re.compile(r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# monitoring.coreos.com/v1 ServiceMonitor (prometheus-operator's CRD): the fields used or
# plausible here; anything else is most likely a typo the API server would reject.
_SM_SPEC = {"endpoints", "jobLabel", "namespaceSelector", "selector", "targetLabels",
            "podTargetLabels", "sampleLimit", "targetLimit", "labelLimit", "attachMetadata",
            "scrapeProtocols", "scrapeClass", "keepDroppedTargets"}  # fmt: skip
_SM_ENDPOINT = {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
                "honorLabels", "honorTimestamps", "tlsConfig", "authorization", "basicAuth",
                "relabelings", "metricRelabelings", "followRedirects", "enableHttp2",
                "filterRunning", "proxyUrl"}  # fmt: skip
_RELABEL = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement",
            "action"}  # fmt: skip


def _relabel(labels: dict[str, str], rules: list[Doc]) -> dict[str, str]:
    """Prometheus relabelling: replace, keep, drop, labeldrop, labelkeep (these manifests')."""
    out = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace").lower()
        if action in {"labeldrop", "labelkeep"}:
            pattern = re.compile(rule["regex"])
            keep = action == "labelkeep"
            out = {k: v for k, v in out.items() if bool(pattern.fullmatch(k)) == keep}
            continue
        sources = [out.get(n, "") for n in rule.get("sourceLabels", [])]
        value = rule.get("separator", ";").join(sources)
        m = re.fullmatch(rule.get("regex", "(.*)"), value)
        if action == "keep" and m is None:
            return {}
        if action == "drop" and m is not None:
            return {}
        if action == "replace" and m is not None:
            replacement = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", rule.get("replacement", "$1"))
            out[rule["targetLabel"]] = m.expand(replacement)
        assert action in {"replace", "keep", "drop"}, action
    return out


def test_servicemonitor_scrapes_the_service_every_15s_as_job_commpulse() -> None:
    sm = _servicemonitor()
    service = _object("Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["kind"] == "ServiceMonitor"
    assert set(sm["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert sm["metadata"]["namespace"] == service["metadata"]["namespace"]
    spec = sm["spec"]
    assert set(spec) <= _SM_SPEC, set(spec) - _SM_SPEC
    assert set(spec["selector"]) == {"matchLabels"}
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    if "namespaceSelector" in spec:
        assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= _SM_ENDPOINT, set(endpoint) - _SM_ENDPOINT
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["port"] == "metrics"
    assert endpoint.get("path", "/metrics") == "/metrics"
    assert endpoint.get("scheme", "http") == "http"
    assert endpoint["interval"] == "15s"
    for key in ("interval", "scrapeTimeout"):
        assert _DURATION.match(endpoint.get(key, "0")), endpoint[key]
    for rule in endpoint["relabelings"]:
        assert set(rule) <= _RELABEL, set(rule) - _RELABEL
        for name in [*rule.get("sourceLabels", []), rule.get("targetLabel", "x")]:
            assert _LABEL_NAME.match(name), name
    # What Prometheus ends up with for one target: the operator sets job to the Service's
    # jobLabel label (or its name), then applies the relabelings.
    job = service["metadata"]["labels"].get(spec.get("jobLabel", ""), service["metadata"]["name"])
    target = {
        "job": job,
        "instance": "10.1.2.3:19100",
        "__meta_kubernetes_pod_node_name": "gpu-node-07",
        "__meta_kubernetes_service_name": "commpulse-renamed",
    }
    labels = _relabel(target, endpoint["relabelings"])
    assert labels["job"] == "commpulse"  # the alert rules: up{job="commpulse"}
    assert labels["instance"] == "gpu-node-07"


#: The target labels prometheus-operator sets for a ServiceMonitor endpoint before the
#: ServiceMonitor's own relabelings (pkg/prometheus/promcfg.go), for one pod of the DaemonSet.
_OPERATOR_LABELS = {
    "job": "commpulse",
    "instance": "10.1.2.3:19100",
    "namespace": "commpulse",
    "service": "commpulse",
    "pod": "commpulse-7xk2p",
    "container": "commpulse",
    "endpoint": "metrics",
    "__meta_kubernetes_pod_node_name": "gpu-node-07",
    "__meta_kubernetes_pod_name": "commpulse-7xk2p",
}


def _rule_grouping_labels() -> set[str]:
    """Every label the shipped rules aggregate or join on (by/without/on/ignoring/group_*)."""
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "commpulse-rules.yml").read_text())
    exprs = " ".join(r["expr"] for g in doc["groups"] for r in g["rules"])
    lists = re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", exprs)
    return {name.strip() for names in lists for name in names.split(",") if name.strip()}


def test_servicemonitor_keeps_series_across_a_rollout() -> None:
    """A DaemonSet rollout renames each node's pod: the pod label would start every series,
    and every pending alert's `for:`, afresh. The rules do not use it; it is dropped."""
    (endpoint,) = _servicemonitor()["spec"]["endpoints"]
    before = _relabel(_OPERATOR_LABELS, endpoint["relabelings"])
    after = _relabel(
        {
            **_OPERATOR_LABELS,
            "pod": "commpulse-q9w4d",
            "__meta_kubernetes_pod_name": "commpulse-q9w4d",
        },
        endpoint["relabelings"],
    )
    visible = {k: v for k, v in before.items() if not k.startswith("__")}
    assert visible == {k: v for k, v in after.items() if not k.startswith("__")}
    assert visible == {
        "job": "commpulse",
        "instance": "gpu-node-07",
        "namespace": "commpulse",
        "service": "commpulse",
    }
    used = _rule_grouping_labels()
    assert {"instance", "job"} <= used  # the parse found the rules' joins
    assert not used & {"pod", "container", "endpoint"}, used


# --------------------------------------------------------------------------------------------
# The agent's configuration


def test_configmap_toml_loads_with_the_agents_loader(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config.exporters.prometheus.enabled
    assert config.sources.nic_counters.enabled


def test_configmap_is_deploy_config_with_pod_paths(tmp_path: Path) -> None:
    # Same keys as the shipped example (which lists every key), same values except the
    # declared pod-specific ones.
    def keys(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        for k, v in table.items():
            out |= keys(v, (*prefix, k)) if isinstance(v, dict) else {(*prefix, k)}
        return out

    pod = tomllib.loads(_config_text())
    shipped = tomllib.loads(DEPLOY_CONFIG.read_text(encoding="utf-8"))
    assert keys(pod) == keys(shipped)
    ours = dict(_walk_config(_config(tmp_path)))
    theirs = dict(_walk_config(load_config(DEPLOY_CONFIG, check_files=False)))
    differ = {k for k in ours if ours[k] != theirs[k]}
    assert differ <= {".".join(k) for k in POD_OVERRIDES}, differ


def test_config_paths_are_under_the_pods_mounts(tmp_path: Path) -> None:
    config = _config(tmp_path)
    container = _agent_container()
    volumes = _volumes()
    paths = _config_paths(config)
    assert {k for k, _ in paths} >= {"agent.state_dir", "sources.nic_counters.sysfs_root",
                                     "sources.nccl_log.paths"}  # fmt: skip
    for key, path in paths:
        mount = _mount_of(path, container)
        assert mount is not None, f"{key} = {path} is not under any volumeMount"
    host_paths = {
        m["mountPath"]: volumes[m["name"]].get("hostPath", {}).get("path")
        for m in container["volumeMounts"]
    }
    for section in (config.sources.nic_counters, config.sources.rdma_counters):
        assert host_paths[str(section.sysfs_root)] == "/sys"
    nic = config.sources.nic_counters
    if str(nic.sysfs_root) != "/sys":
        # auto reads sysfs for any other root: the slow path, though netlink works here.
        assert nic.method == "netlink"
    assert host_paths[str(config.agent.state_dir)] == "/var/lib/commpulse"
    (pattern,) = config.sources.nccl_log.paths
    assert host_paths[str(PurePosixPath(pattern).parent)] == "/var/log/nccl"


def test_config_files_exist_on_the_node(tmp_path: Path) -> None:
    # What `commpulse run` checks at start, with each pod path translated to the host path
    # that its hostPath volume mounts there (this machine stands for the node).
    container = _agent_container()
    volumes = _volumes()

    def to_host(path: Path) -> Path:
        mount = _mount_of(PurePosixPath(path), container)
        assert mount is not None, path
        host = volumes[mount["name"]].get("hostPath")
        assert host is not None, f"{path}: not on a hostPath volume; extend this test"
        return Path(host["path"]) / path.relative_to(mount["mountPath"])

    def remap(obj: Any, fn: Callable[[Path], Path]) -> Any:
        changes = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                changes[f.name] = remap(value, fn)
            elif isinstance(value, Path):
                changes[f.name] = fn(value)
        return dataclasses.replace(obj, **changes)

    remap(_config(tmp_path), to_host).check_files()


def test_metrics_port_is_the_default_port_on_every_address(tmp_path: Path) -> None:
    prometheus = _config(tmp_path).exporters.prometheus
    assert prometheus.port == DEFAULT_PORT
    assert prometheus.listen_address == "0.0.0.0"
    assert prometheus.tls_cert_file is None  # the probes and the ServiceMonitor use http
    (port,) = _agent_container()["ports"]
    assert port == {"name": "metrics", "containerPort": DEFAULT_PORT, "protocol": "TCP"}
    (service_port,) = _object("Service")["spec"]["ports"]
    assert service_port["port"] == DEFAULT_PORT
    assert service_port["targetPort"] == "metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        get = _agent_container()[probe]["httpGet"]
        assert get["path"] == "/metrics"
        assert get["port"] == "metrics"
        assert get.get("scheme", "HTTP") == "HTTP"


def test_command_runs_the_mounted_config() -> None:
    container = _agent_container()
    config_volume = next(v for v in _volumes().values() if "configMap" in v)
    assert config_volume["configMap"]["name"] == _object("ConfigMap")["metadata"]["name"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == config_volume["name"]]
    (key,) = _object("ConfigMap")["data"]
    path = f"{mount['mountPath']}/{key}"
    assert path == "/etc/commpulse/commpulse.toml"  # the path of the unit and the image
    assert [*container["command"], *container["args"]] == ["commpulse", "run", "--config", path]
    assert f"--config {path}" in _unit("ExecStart")


# --------------------------------------------------------------------------------------------
# The systemd unit's sandbox and limits


def test_mounts_are_read_only_except_the_state_dir(tmp_path: Path) -> None:
    state_dir = str(_config(tmp_path).agent.state_dir)
    for mount_path, mount in _mounts(_agent_container()).items():
        assert mount.get("readOnly", False) is (mount_path != state_dir), mount_path
    # hostPath volumes: exactly the unit's ReadOnlyPaths= and its state directory
    host = {v["hostPath"]["path"] for v in _volumes().values() if "hostPath" in v}
    read_only = {p.lstrip("-") for p in _unit_settings()["ReadOnlyPaths"]}
    assert host == read_only | {f"/var/lib/{_unit('StateDirectory')}"}


def test_security_context_matches_the_unit() -> None:
    unit = _unit_settings()
    assert _unit("DynamicUser") == "yes"
    assert _unit("NoNewPrivileges") == "yes"
    assert _unit("ProtectSystem") == "strict"
    assert _unit("CapabilityBoundingSet") == ""
    assert unit["AmbientCapabilities"] == [""]
    pod = _pod_spec()
    assert pod["hostNetwork"] is True
    for shared in ("hostPID", "hostIPC"):
        assert not pod.get(shared, False)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod.get("automountServiceAccountToken") is False
    sc = _agent_container()["securityContext"]
    assert sc.get("runAsNonRoot", True) is True
    assert sc.get("runAsUser", 1) != 0
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert not sc.get("privileged", False)
    assert sc["capabilities"] == {"drop": ["ALL"]}  # no `add`: capture is commented out
    assert "seccompProfile" not in sc or sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod.get("priorityClassName") not in {"system-node-critical", "system-cluster-critical"}


def test_init_container_only_prepares_the_state_dir(tmp_path: Path) -> None:
    # StateDirectory= is created by systemd (root) for the service user; the init container
    # does that step, with nothing else.
    (init,) = _pod_spec()["initContainers"]
    state_dir = str(_config(tmp_path).agent.state_dir)
    assert list(_mounts(init)) == [state_dir]
    sc = init["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    uid = _pod_spec()["securityContext"]["runAsUser"]
    gid = _pod_spec()["securityContext"]["runAsGroup"]
    mode = _unit("StateDirectoryMode")
    script = init["command"][-1]
    assert f"chown {uid}:{gid} {state_dir}" in script
    assert f"chmod {mode} {state_dir}" in script


def test_limits_are_the_units_memorymax_and_cpuquota() -> None:
    resources = _agent_container()["resources"]
    limits = resources["limits"]
    assert _k8s_quantity(limits["memory"]) == _systemd_bytes(_unit("MemoryMax"))
    quota = re.fullmatch(r"(\d+)%", _unit("CPUQuota"))
    assert quota
    assert _k8s_quantity(limits["cpu"]) == pytest.approx(int(quota.group(1)) / 100)
    for kind in ("cpu", "memory"):
        assert 0 < _k8s_quantity(resources["requests"][kind]) <= _k8s_quantity(limits[kind])


def test_grace_period_and_liveness_match_the_unit() -> None:
    grace = _pod_spec()["terminationGracePeriodSeconds"]
    assert grace == _systemd_seconds(_unit("TimeoutStopSec"))
    probe = _agent_container()["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == _systemd_seconds(
        _unit("WatchdogSec")
    )


def test_runs_on_gpu_nodes_only() -> None:
    pod = _pod_spec()
    assert pod["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    update = _object("DaemonSet")["spec"]["updateStrategy"]
    # a surge pod would collide with the old one on the host's port
    assert update["rollingUpdate"].get("maxSurge", 0) == 0


def test_service_is_headless_and_selects_the_pods() -> None:
    service = _object("Service")
    pod_labels = _object("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    selector = _object("DaemonSet")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()


# --------------------------------------------------------------------------------------------
# The image


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, ARG defaults substituted."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out: list[tuple[str, str]] = []
    args: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, rest = line.strip().partition(" ")
        rest = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), rest.strip())
        if instruction.upper() == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name] = value
        out.append((instruction.upper(), rest))
    return out


def test_dockerfile_builds_a_non_root_commpulse_image() -> None:
    instructions = _dockerfile()
    stages = [rest for ins, rest in instructions if ins == "FROM"]
    assert stages, "no FROM"
    requires = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11"
    for stage in stages:
        assert stage.split()[0] == "python:3.11-slim", stage
    final = instructions[max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM") :]
    final_ins = dict(final)
    user = final_ins["USER"].split(":")
    assert all(u.isdigit() and int(u) > 0 for u in user), "USER must be numeric and non-root"
    pod = _pod_spec()["securityContext"]
    assert [int(u) for u in user] == [pod["runAsUser"], pod["runAsGroup"]][: len(user)]
    scripts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
    assert "commpulse" in scripts
    assert final_ins["ENTRYPOINT"] == '["commpulse"]'
    container = _agent_container()
    assert final_ins["CMD"] == "[" + ", ".join(f'"{a}"' for a in container["args"]) + "]"
    assert f"EXPOSE {DEFAULT_PORT}" in [f"{i} {r}" for i, r in final]
    # Only the built environment reaches the final image: no sources, no compiler.
    copies = [r for i, r in final if i in {"COPY", "ADD"}]
    assert copies == ["--from=build /opt/commpulse /opt/commpulse"]
    assert not [r for i, r in final if i == "RUN"]
    for ins, rest in instructions:
        assert not (ins == "RUN" and re.search(r"\b(gcc|build-essential|apt-get install)\b", rest))


def test_dockerfile_copies_what_setuptools_needs() -> None:
    # pip builds the project from what the build stage copies: pyproject.toml, its readme,
    # and every package setuptools is told to find.
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    copied = " ".join(r for i, r in _dockerfile() if i == "COPY" and not r.startswith("--from"))
    assert "pyproject.toml" in copied
    assert project["project"]["readme"] in copied
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert (ROOT / package).is_dir()
        assert f"{package}/" in copied, package


def test_images_are_the_project_version() -> None:
    pod = _pod_spec()
    images = {c["image"] for c in [*pod["containers"], *pod.get("initContainers", [])]}
    assert images == {f"ghcr.io/commpulse/commpulse:{_project_version()}"}
    assert f"commpulse:{_project_version()}" in DOCKERFILE.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# kustomize, README, hygiene


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = _load_docs(K8S / "kustomization.yaml")
    assert kustomization["namespace"] == NAMESPACE
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_kustomization_renders() -> None:
    kubectl = require_component("kubectl")
    res = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"])
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE
        if doc["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_readme_scrape_config_passes_promtool(tmp_path: Path) -> None:
    promtool = require_component("promtool")
    readme = (K8S / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "scrape_configs" in b]
    assert len(blocks) == 1
    config = yaml.safe_load(blocks[0])
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "commpulse"
    assert job["scrape_interval"] == "15s"
    relabels = [
        {"sourceLabels": r.get("source_labels", []), "targetLabel": r.get("target_label", ""),
         **{k: v for k, v in r.items() if k in {"regex", "action", "replacement"}}}
        for r in job["relabel_configs"]
    ]  # fmt: skip
    target = {
        "__meta_kubernetes_service_name": "commpulse",
        "__meta_kubernetes_endpoint_port_name": "metrics",
        "__meta_kubernetes_pod_node_name": "gpu-node-07",
        "job": "commpulse",
    }
    assert _relabel(target, relabels)["instance"] == "gpu-node-07"
    assert _relabel({**target, "__meta_kubernetes_endpoint_port_name": "other"}, relabels) == {}
    # Debian's Prometheus is built without Kubernetes discovery (promtool rejects the
    # kubernetes_sd_configs key), so promtool checks the rest with a static target instead.
    job["static_configs"] = [{"targets": ["gpu-node-07:19100"]}]
    del job["kubernetes_sd_configs"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    res = subprocess.run([promtool, "check", "config", str(path)], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "path",
    [*sorted(K8S.iterdir()), DOCKERFILE],
    ids=lambda p: p.name,
)
def test_no_path_of_a_build_machine(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    # checkout and scratch directories (spelled in pieces so this file does not contain them)
    for bad in (str(ROOT), *(f"/{d}/" for d in ("home", "root", "work", "tmp"))):
        assert bad not in text, f"{path.name} names {bad}"
