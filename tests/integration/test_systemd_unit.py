"""The shipped unit passes systemd's own checks: verify, and an exposure of at most 2.0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_component

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "commpulse.service"
CAPTURE = ROOT / "systemd" / "capture.conf"


def _installed_copy(tmp_path: Path, name: str, extra_service: str = "") -> Path:
    """The unit with ExecStart pointing at this checkout's commpulse (verify needs a binary)."""
    exe = Path(sys.executable).parent / "commpulse"
    assert exe.exists(), "install the package first (pip install -e .)"
    text = UNIT.read_text().replace("/opt/commpulse/bin/commpulse", str(exe))
    if extra_service:
        text = text.replace("[Install]", extra_service + "\n[Install]")
    path = tmp_path / name
    path.write_text(text)
    return path


def _capture_settings() -> str:
    lines = CAPTURE.read_text().splitlines()
    body = lines[lines.index("[Service]") + 1 :]
    return "\n".join(line for line in body if not line.startswith("#"))


def _verify(unit: Path) -> None:
    analyze = require_component("systemd-analyze")
    res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip() == "", res.stderr  # unknown keys only warn: none allowed


def _exposure(unit: Path) -> float:
    analyze = require_component("systemd-analyze")
    res = subprocess.run(
        [analyze, "security", "--offline=yes", str(unit)], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    return float(m.group(1))


def test_unit_verifies_and_is_well_sandboxed(tmp_path: Path) -> None:
    unit = _installed_copy(tmp_path, "commpulse.service")
    _verify(unit)
    assert _exposure(unit) <= 2.0
    text = UNIT.read_text()
    for required in ("Type=notify", "WatchdogSec=", "ExecStartPre=", "ExecReload=",
                     "DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes",
                     "AF_NETLINK", "MemoryMax=", "CPUQuota="):  # fmt: skip
        assert required in text
    settings = [line for line in text.splitlines() if not line.startswith("#")]
    assert not any("CAP_NET_RAW" in line for line in settings)  # only with the drop-in


def test_capture_drop_in_adds_only_what_capture_needs(tmp_path: Path) -> None:
    unit = _installed_copy(tmp_path, "commpulse-capture.service", _capture_settings())
    _verify(unit)
    assert _exposure(unit) <= 2.0
    assert "AF_PACKET" in CAPTURE.read_text()


@pytest.mark.parametrize("path", [UNIT, CAPTURE])
def test_unit_files_name_no_path_of_a_build_machine(path: Path) -> None:
    # Every absolute path must be one the install makes or the system has (FHS), never a
    # checkout's or a home directory.
    paths = re.findall(r"(?:^|(?<=[\s=\"'(]))(/[\w.-][^\s\"')]*)", path.read_text(), re.M)
    assert paths
    fhs = ("/etc/", "/opt/commpulse", "/usr/", "/var/", "/run/", "/sys", "/proc", "/bin/", "/dev/")
    assert [p for p in paths if not p.startswith(fhs)] == []
