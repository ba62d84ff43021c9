"""The command line: help, quantities, and errors that name the file and the line."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import pytest

from agent.cli import build_parser, main, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20e9", 20e9),
        ("20G", 20e9),
        ("20GB", 20e9),
        ("16GiB", 16 * 2**30),
        ("25GB/s", 25e9),
        ("200Gbit", 25e9),
        ("400Gb/s", 50e9),
        ("1.5k", 1500.0),
    ],
)
def test_quantities(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_bad_quantity_explains_the_format() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="examples"):
        parse_quantity("lots")


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for command in ("demo", "analyze", "simulate"):
        assert command in text


def test_every_subcommand_has_help() -> None:
    parser = build_parser()
    for command in ("demo", "analyze", "simulate"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([command, "--help"])
        assert exc.value.code == 0


def test_analyze_without_input_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze"]) == 1
    assert "nothing to analyze" in capsys.readouterr().err


def test_analyze_missing_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    assert main(["analyze", "--counters", str(missing)]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "cannot read" in err


def test_analyze_malformed_counters_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "c.csv"
    bad.write_text("time,x_tx_bytes\n0,1\nbanana,2\n")  # one readable row: nothing to rate
    assert main(["analyze", "--counters", str(bad)]) == 1
    assert f"{bad}:3:" in capsys.readouterr().err
    # A bad cell among readable rows costs that cell only, and the output says where it was.
    messy = tmp_path / "m.csv"
    rows = [f"{i / 100:.2f},{1000 * i}" for i in range(300)]
    rows[100] = "1.00,banana"
    messy.write_text("time,x_tx_bytes\n" + "\n".join(rows) + "\n")
    assert main(["analyze", "--counters", str(messy), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(w.startswith(f"{messy}: 1 cell(s)") and "line 102" in w for w in out["warnings"])


def test_analyze_malformed_gpu_csv_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "g.csv"
    bad.write_text("time,gpu,sm_active\n0,0,0.5\n1,0,7\n")
    assert main(["analyze", "--gpu", str(bad)]) == 1
    assert f"{bad}:3:" in capsys.readouterr().err


def test_analyze_log_without_nccl_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss 0.3\nepoch 2 loss 0.2\n")
    assert main(["analyze", "--nccl-log", str(log)]) == 1
    err = capsys.readouterr().err
    assert str(log) in err
    assert "NCCL_DEBUG=INFO" in err


def test_analyze_garbage_pcap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "x.pcap"
    junk.write_bytes(b"definitely not a capture")
    assert main(["analyze", "--pcap", str(junk)]) == 1
    assert str(junk) in capsys.readouterr().err


def test_simulate_rejects_mixed_parameterisations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--period", "1", "--size", "1GB"]) == 1
    assert "either --size/--compute or --period/--duty" in capsys.readouterr().err


def test_simulate_bad_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--out", "x", "--period", "-1"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_simulate_unwritable_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["simulate", "--out", str(blocker / "sub"), "--duration", "10"]) == 1
    assert "cannot create output directory" in capsys.readouterr().err


def test_simulate_bursty_inference_reaches_analyze_and_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job"
    argv = ["simulate", "--scenario", "inference", "--arrival-process", "mmpp"]
    assert main([*argv, "--burstiness", "6", "--duration", "60", "--out", str(out)]) == 0
    truth = json.loads((out / "truth.json").read_text())
    assert truth["params"]["arrival_process"] == "mmpp"
    assert truth["params"]["burstiness"] == 6.0
    capsys.readouterr()
    files = ["--counters", str(out / "counters.csv"), "--nccl-log", str(out / "nccl.log")]
    assert main(["analyze", *files, "--table", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    job = next(r for r in rows if r["row"] == "job")
    assert job["arrival_pattern"] == "bursty"
    assert float(job["arrival_rate_hz"]) > 0


def test_analyze_collective_latency_sets_the_finetune_latency_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ft"
    assert main(["simulate", "--scenario", "finetune", "--duration", "30", "--out", str(out)]) == 0
    capsys.readouterr()
    files = ["--counters", str(out / "counters.csv"), "--nccl-log", str(out / "nccl.log")]
    shares = []
    for latency in ("1e-5", "1e-4"):
        assert main(["analyze", *files, "--json", "--collective-latency", latency]) == 0
        sharding = json.loads(capsys.readouterr().out)["sharding"]
        assert sharding["latency_source"] == "given"
        assert sharding["latency_per_collective_s"] == float(latency)
        shares.append(sharding["latency_share"])
    assert shares[1] == pytest.approx(10 * shares[0])  # the share scales with the latency


def test_the_recorder_creates_each_file_exclusively(tmp_path: Path) -> None:
    """A file another writer created after the start is left alone: its rows are not written
    into it (interleaved rows made a real recording unreadable)."""
    from agent.record import Recorder
    from collectors._base import CounterReading

    (tmp_path / "counters_nic.csv").write_text("theirs\n")
    rec = Recorder(tmp_path, wall_offset=0.0)
    rec.add("nic", CounterReading(time_s=1.0, values={"eth0_tx_bytes": 1}))
    rec.add("other", CounterReading(time_s=1.0, values={"eth0_tx_bytes": 1}))
    rec.close()
    assert (tmp_path / "counters_nic.csv").read_text() == "theirs\n"
    assert (tmp_path / "counters_other.csv").read_text().startswith("time,eth0_tx_bytes\n")
    assert rec.rows == {"counters_other.csv": 1}
