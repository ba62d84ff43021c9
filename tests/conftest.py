"""Shared fixtures: simulated jobs written once per session, and the component policy.

Tests that need a real external component (promtool, a Prometheus server, Mosquitto) use
:func:`require_component`: outside CI a missing component skips the test with the reason;
under ``CI=true`` it fails, so a green CI run always means the real component was exercised.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import generate_latest

from agent.exporter import metrics_registry
from agent.pipeline import Snapshot, SnapshotStore
from agent.simulator.files import simulate_to_dir
from agent.simulator.params import JobParams


def require_component(executable: str) -> str:
    """Path of a required external program; fail under CI, skip elsewhere."""
    path = shutil.which(executable) or shutil.which(executable, path="/usr/sbin:/sbin")
    if path is None:
        message = f"{executable} is not installed (Debian package: see .ci/run)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def training_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default simulated training job (DOMAIN.md worked example) on disk."""
    out = tmp_path_factory.mktemp("training")
    simulate_to_dir(JobParams(scenario="training", seed=1), out)
    return out


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exposition(snapshot: Snapshot) -> str:
    """The /metrics text the agent serves for ``snapshot`` (its own registry and collector)."""
    store = SnapshotStore()
    store.publish(snapshot)
    return generate_latest(metrics_registry(store)).decode()


def load_script(path: Path, name: str) -> ModuleType:
    """Import a file outside the packages (a bench, the dashboard generator) once, by path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module
