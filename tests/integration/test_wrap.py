"""``commpulse wrap -- CMD``: the job runs with the NCCL logging the tailer reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.wrap import log_dir_from_config, nccl_environment

PRINT_ENV = (
    "import json, os; "
    "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('NCCL')}))"
)


def _wrap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL")}
    return subprocess.run(
        [sys.executable, "-m", "agent", "wrap", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


def test_the_job_gets_the_nccl_environment(tmp_path: Path) -> None:
    out = _wrap("--log-dir", str(tmp_path), "--", sys.executable, "-c", PRINT_ENV)
    assert out.returncode == 0, out.stderr
    env = json.loads(out.stdout)
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,COLL,NET",
        "NCCL_DEBUG_FILE": f"{tmp_path}/nccl.%h.%p.log",
        "NCCL_DEBUG_TIMESTAMP_LEVELS": "WARN,INFO",
        "NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] ",
    }
    assert f"NCCL logs to {tmp_path}/nccl.%h.%p.log" in out.stderr


def test_what_the_user_set_wins_and_a_blinding_setting_is_warned_about(tmp_path: Path) -> None:
    out = _wrap(
        "--log-dir", str(tmp_path), "--", sys.executable, "-c", PRINT_ENV,
        env={"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/scratch/nccl.log"},
    )  # fmt: skip
    env = json.loads(out.stdout)
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_DEBUG_FILE"] == "/scratch/nccl.log"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,COLL,NET"  # the rest is still filled in
    assert "NCCL_DEBUG=WARN is set: NCCL writes no COLL lines" in out.stderr
    assert "has no %p" in out.stderr


def test_exit_status_and_signals_are_the_jobs_own(tmp_path: Path) -> None:
    assert _wrap("--log-dir", str(tmp_path), "--", "sh", "-c", "exit 3").returncode == 3
    killed = _wrap("--log-dir", str(tmp_path), "--", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == -15  # exec: the job *is* the process the caller waits for


def test_a_missing_command_or_directory_is_a_clear_error(tmp_path: Path) -> None:
    missing = _wrap("--log-dir", str(tmp_path), "--", "no-such-trainer")
    assert missing.returncode == 127
    assert "no-such-trainer: command not found" in missing.stderr
    nodir = _wrap("--log-dir", str(tmp_path / "absent"), "--", "true")
    assert nodir.returncode == 1
    assert "does not exist" in nodir.stderr
    nothing = _wrap("--log-dir", str(tmp_path))
    assert nothing.returncode == 1
    assert "give the command to run after --" in nothing.stderr


def test_the_log_dir_comes_from_the_agents_config(tmp_path: Path) -> None:
    logs = tmp_path / "spool"
    logs.mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[sources.nccl_log]\nenabled = true\npaths = ["{logs}/*.log"]\n')
    assert log_dir_from_config(cfg) == logs
    out = _wrap("--config", str(cfg), "--", sys.executable, "-c", PRINT_ENV)
    assert json.loads(out.stdout)["NCCL_DEBUG_FILE"] == f"{logs}/nccl.%h.%p.log"


@pytest.mark.parametrize(
    ("subsys", "warned"),
    [("INIT,COLL", False), ("ALL", False), ("INIT,NET", True), ("^COLL", True), ("^INIT", False)],
)
def test_subsystems_without_coll_are_warned_about(subsys: str, warned: bool) -> None:
    _, warnings = nccl_environment({"NCCL_DEBUG_SUBSYS": subsys}, Path("/logs"))
    assert any("leaves out COLL" in w for w in warnings) == warned
