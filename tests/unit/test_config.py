"""The configuration: typed loading, errors that name the key, docs that cannot drift."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.cli import main
from agent.config import Config, load_config, parse_config, render_reference
from agent.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "config" / "commpulse.toml"


def test_empty_file_is_the_defaults() -> None:
    cfg = parse_config("")
    assert cfg == Config()
    assert cfg.exporters.prometheus.port == 19100
    assert cfg.sources.nic_counters.enabled
    assert not cfg.sources.nccl_log.enabled


def test_values_are_typed_and_nested() -> None:
    cfg = parse_config(
        """
        [agent]
        hop_s = 2
        [exporters.mqtt]
        enabled = true
        qos = 0
        [sources.nccl_log]
        enabled = true
        paths = ["/var/log/nccl/*.log", "/tmp/x.log"]
        [sources.nic_counters]
        include = ""
        """
    )
    assert cfg.agent.hop_s == 2.0
    assert isinstance(cfg.agent.hop_s, float)
    assert cfg.exporters.mqtt.qos == 0
    assert cfg.sources.nccl_log.paths == ("/var/log/nccl/*.log", "/tmp/x.log")
    assert cfg.sources.nic_counters.include is None  # "" leaves an optional pattern unset


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agent]\nhop = 1", "agent.hop: unknown key (did you mean 'hop_s'?)"),
        ("[agnet]\nhop_s = 1", "agnet: unknown key (did you mean 'agent'?)"),
        ("[agent]\nhop_s = 'fast'", "agent.hop_s: expected a number, found string 'fast'"),
        ("[agent]\nqueue_size = 1.5", "agent.queue_size: expected an integer, found number 1.5"),
        ("[exporters.prometheus]\nenabled = 1", "exporters.prometheus.enabled: expected true"),
        ("[exporters.prometheus]\nport = 70000", "exporters.prometheus.port must be between"),
        ("[sources.nccl_log]\npaths = '/x'", "sources.nccl_log.paths: expected a list"),
        ("[sources.nccl_log]\nenabled = true", "sources.nccl_log.paths: give at least one"),
        ("[sources.nic_counters]\nmethod = 'snmp'", "nic_counters.method must be auto"),
        ("[sources.nic_counters]\ninclude = '('", "nic_counters.include: bad regular expression"),
        ("[exporters.mqtt]\nqos = 3", "exporters.mqtt.qos must be 0, 1 or 2"),
        ("agent = 5", "agent: expected a table [agent], found integer"),
        ("[agent\nhop_s = 1", "not valid TOML"),
        (
            "[exporters.prometheus]\ntls_cert_file = '/x.pem'",
            "tls_cert_file and tls_key_file go together",
        ),
    ],
)
def test_errors_name_the_key_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="c.toml")
    assert str(err.value).startswith("c.toml: ")
    assert message in str(err.value)


def test_missing_files_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f"[exporters.prometheus]\ntls_cert_file = '{tmp_path}/cert.pem'\n"
        f"tls_key_file = '{tmp_path}/key.pem'\n"
    )
    with pytest.raises(ConfigError, match=r"tls_cert_file: .*cert\.pem does not exist"):
        load_config(path)
    path.write_text(f"[sources.rdma_counters]\nsysfs_root = '{tmp_path}/nope'\n")
    with pytest.raises(
        ConfigError, match=r"sources\.rdma_counters\.sysfs_root: .* not a directory"
    ):
        load_config(path)


def test_every_source_disabled_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[sources.nic_counters]\nenabled = false\n[sources.rdma_counters]\nenabled = false\n"
    )
    with pytest.raises(ConfigError, match="every source is disabled"):
        load_config(path)


def test_the_example_config_is_valid_and_spells_out_every_default() -> None:
    example = load_config(EXAMPLE)
    # The one deliberate difference: an example glob for the (disabled) NCCL log source.
    assert example.sources.nccl_log.paths == ("/var/log/nccl/*.log",)
    shown = replace(example, sources=replace(example.sources, nccl_log=Config().sources.nccl_log))
    assert shown == Config(), "deploy/config/commpulse.toml must show the defaults"


def test_reference_doc_is_generated_from_the_code() -> None:
    committed = (ROOT / "docs" / "config.md").read_text()
    assert committed == render_reference(), "run: python -m agent.config > docs/config.md"
    for key in ("hop_s", "listen_address", "topic_prefix", "poll_interval_s", "read_from"):
        assert f"`{key}`" in committed


def test_validate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert "valid" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\nwindow = 10\n")
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: agent.window: unknown key (did you mean 'window_s'?)" in err
    assert main(["validate", str(tmp_path / "absent.toml")]) == 1
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("section", ["prometheus", "mqtt"])
def test_validate_loads_the_tls_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str
) -> None:
    """A file that exists but is no PEM passed validate (systemd's ExecStartPre), then `run`
    failed to start, and the unit restarted in a loop."""
    pem = tmp_path / "garbage.pem"
    pem.write_text("garbage\n")
    config = tmp_path / "tls.toml"
    config.write_text(
        f"[exporters.{section}]\n"
        + ("enabled = true\n" if section == "mqtt" else "")
        + f'tls_cert_file = "{pem}"\ntls_key_file = "{pem}"\n'
    )
    assert main(["validate", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"exporters.{section}" in err
    assert "cannot load TLS" in err
