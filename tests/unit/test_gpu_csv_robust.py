"""The GPU CSV reader on files as they come off real nodes: new placeholders, cut and stray lines.

Lines are shaped as `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory
--format=csv -lms 100` writes them; the dmon tables as `nvidia-smi dmon` and `dcgmi dmon` print
them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.errors import InputFormatError
from collectors.gpu_csv import GpuCsvParser, parse_gpu_csv, read_gpu_csv

HEADER = "timestamp, index, utilization.gpu [%], utilization.memory [%]"


def _rows(n: int, start: int = 0) -> list[str]:
    """``n`` samples of GPUs 0 and 1, 100 ms apart (two rows a sample, as nvidia-smi writes)."""
    out = []
    for k in range(start, start + n):
        stamp = f"2024/05/01 12:00:{k // 10:02d}.{k % 10}23"
        out += [f"{stamp}, 0, 87 %, 40 %", f"{stamp}, 1, 12 %, 3 %"]
    return out


def _write(path: Path, lines: list[str], *, final_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""))
    return path


# -- placeholders --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell",
    [
        "[Insufficient Permissions]",
        "[Requested functionality has been deprecated]",
        "[Not Found]",
        "[Unknown]",
        "ERR!",
        "[N/A]",
        "[GPU is lost]",
    ],
)
def test_any_bracketed_reason_and_err_read_as_missing(cell: str) -> None:
    t = parse_gpu_csv([
        HEADER,
        "2024/05/01 12:00:00.123, 0, 87 %, 40 %",
        f"2024/05/01 12:00:00.123, 1, {cell}, {cell}",
        "2024/05/01 12:00:00.223, 0, 85 %, 41 %",
    ])  # fmt: skip
    util = t.signals["util"]
    assert util[[0, 2]].tolist() == pytest.approx([0.87, 0.85])
    assert np.isnan(util[1])
    assert t.gpu.tolist() == [0, 1, 0]
    assert t.warnings == ()


def test_a_signal_with_no_value_at_all_says_why() -> None:
    # A container without the permission to read utilisation: every cell is the reason.
    t = parse_gpu_csv([
        HEADER,
        "2024/05/01 12:00:00.123, 0, [Insufficient Permissions], [Insufficient Permissions]",
        "2024/05/01 12:00:00.223, 0, [Insufficient Permissions], [Insufficient Permissions]",
    ])  # fmt: skip
    assert np.isnan(t.signals["util"]).all()
    assert len(t.warnings) == 1
    assert "'util' holds no value at all" in t.warnings[0]
    assert "[Insufficient Permissions]" in t.warnings[0]


def test_a_bracket_in_the_index_or_time_column_is_a_bad_row_not_a_gpu() -> None:
    t = parse_gpu_csv([HEADER, "2024/05/01 12:00:00.123, [N/A], 87 %, 40 %", *_rows(1)])
    assert t.gpu.tolist() == [0, 1]
    assert t.warnings[0].startswith("1 row(s) could not be read and were left out (first at line 2")


# -- a cut last line ------------------------------------------------------------------------------


def test_cut_last_line_with_fewer_fields_is_left_out(tmp_path: Path) -> None:
    # nvidia-smi killed mid-line, or the file copied while it was written (smi_cut.csv:52).
    lines = [HEADER, *_rows(25), "2024/05/01 12:00:02.523, 0, 8"]
    t = read_gpu_csv(_write(tmp_path / "smi_cut.csv", lines, final_newline=False))
    assert t.times.size == 50
    assert t.warnings == (
        "1 unfinished last line (the file was still being written?) left out "
        "(first at line 52: 3 of 4 fields)",
    )


def test_cut_last_value_is_told_by_its_missing_unit(tmp_path: Path) -> None:
    # Cut inside the last cell: `40 %` became `4`, which would read as 4 %.
    lines = [HEADER, *_rows(3), "2024/05/01 12:00:00.323, 0, 87 %, 4"]
    t = read_gpu_csv(_write(tmp_path / "cut.csv", lines, final_newline=False))
    assert t.times.size == 6
    assert "its last cell '4' lacks the column's unit '%'" in t.warnings[0]


def test_whole_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    lines = [HEADER, *_rows(3)]
    t = read_gpu_csv(_write(tmp_path / "whole.csv", lines, final_newline=False))
    assert t.times.size == 6
    assert t.warnings == ()


def test_short_line_that_ends_in_a_newline_is_a_bad_row_not_a_cut(tmp_path: Path) -> None:
    lines = [HEADER, *_rows(2), "2024/05/01 12:00:00.223, 0, 8", *_rows(2, start=3)]
    t = read_gpu_csv(_write(tmp_path / "short.csv", lines))
    assert t.times.size == 8
    assert t.warnings == (
        "1 row(s) could not be read and were left out (first at line 6: expected 4 fields, "
        "found 3)",
    )


# -- stray lines --------------------------------------------------------------------------------


def test_error_text_from_a_logging_loop_is_left_out_and_counted(tmp_path: Path) -> None:
    # `while true; do nvidia-smi --query-gpu=... --format=csv; sleep 1; done > gpu.csv 2>&1`
    lines = [
        HEADER,
        *_rows(2),
        HEADER,
        "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error",
        "2024/05/01 12:00:00.223, 0, 86 %, 40 %",
        HEADER,
        "Failed to initialize NVML: Driver/library version mismatch",
        "NVML library version: 535.183",
        HEADER,
        "2024/05/01 12:00:00.523, 0, 0x1F %, 40 %",  # no number
        "2024/05/01 12:00:00.6232024/05/01 12:00:00.623, 0, 87 %, 40 %",  # two writers
        *_rows(2, start=7),
    ]
    t = read_gpu_csv(_write(tmp_path / "loop.csv", lines))
    assert t.times.size == 4 + 1 + 4
    assert t.signals["util"][4] == pytest.approx(0.86)
    assert t.warnings == (
        "5 row(s) could not be read and were left out (first at line 7: expected 4 fields, "
        "found 1)",
    )


def test_error_text_before_the_header_is_left_out() -> None:
    t = parse_gpu_csv([
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
        "sure that the latest NVIDIA driver is installed and running.",
        "",
        HEADER,
        *_rows(2),
    ])  # fmt: skip
    assert t.gpu.tolist() == [0, 1, 0, 1]
    assert "(first at line 1: unrecognised GPU CSV header" in t.warnings[0]


def test_no_readable_row_names_the_first_problem() -> None:
    with pytest.raises(InputFormatError) as err:
        parse_gpu_csv(
            [
                HEADER,
                "Failed to initialize NVML: Unknown Error",
                "2024/05/01 12:00:00.123, 0, 87 %",
            ],
            path="gpu.csv",
        )
    assert err.value.line == 2
    assert "no readable data row; expected 4 fields, found 1" in str(err.value)


def test_format_errors_stay_fatal_rather_than_misread() -> None:
    # No utilisation column: the rows after the header must not be taken as a header-less file
    # in the default order (temperature read as utilisation).
    with pytest.raises(InputFormatError, match=r"no utilization\.gpu column"):
        parse_gpu_csv(["timestamp, index, temperature.gpu", "2024/05/01 12:00:00.123, 0, 45"])
    # The named layout with nvidia-smi's name for the time column: say what the header is.
    with pytest.raises(InputFormatError, match=r"the named layout is 'time,gpu,sm_active'"):
        parse_gpu_csv(["timestamp,gpu,sm_active", "1.0,0,0.5"])
    # Without a header, a later row that holds no GPU index still refuses the file: skipping it
    # would keep the rows whose utilisation happens to be small enough to pass for an index.
    with pytest.raises(InputFormatError, match="holds 87: the query was not in the order"):
        parse_gpu_csv(["2024/05/01 12:00:00.123, 3, 40", "2024/05/01 12:00:00.223, 87, 40"])
    # A value outside its range says the column is on another scale (sm_active in percent):
    # skipping those rows would keep the ones below 1 % read as fractions.
    with pytest.raises(InputFormatError, match=r"outside 0\.\.1: is the column on another") as err:
        parse_gpu_csv(["time,gpu,sm_active", "0.0,0,0.5", "0.1,0,87", "0.2,0,0.7"])
    assert err.value.line == 3


def test_the_live_follower_still_sees_one_bad_row_as_an_error() -> None:
    parser = GpuCsvParser("gpu.csv")
    assert parser.feed(HEADER) is None
    with pytest.raises(InputFormatError, match="expected 4 fields"):
        parser.feed("Failed to initialize NVML: Unknown Error")
    row = parser.feed("2024/05/01 12:00:00.123, 1, [Unknown], 40 %")
    assert row is not None
    assert row[1] == 1
    assert np.isnan(row[2]["util"])


def test_analyze_reads_a_cut_gpu_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "smi_cut.csv", [HEADER, *_rows(40), "2024/05/01"], final_newline=False)
    result = analyze_files(gpu=[path])
    assert result.inputs.gpu is not None
    assert result.inputs.gpu.times.size == 80


# -- dmon tables --------------------------------------------------------------------------------

SMI_DMON = """\
# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
    0     69     34     44     97     40      0      0      0      0   2619   1980
    1     70     33     43     12      3      0      0      0      0   2619   1980
"""
SMI_DMON_DT = """\
#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz
 20240501   12:00:00      0     69     34     44     97     40      0      0   2619   1980
"""
DCGMI_DMON = """\
#Entity   SMACT        TENAC
ID
GPU 0     0.876        0.123
GPU 1     0.000        0.000
"""


@pytest.mark.parametrize(
    ("text", "tool", "line"),
    [
        (SMI_DMON, "nvidia-smi dmon", 1),
        (SMI_DMON_DT, "nvidia-smi dmon", 1),
        ("\n".join(SMI_DMON.splitlines()[2:]), "nvidia-smi dmon", 1),  # without its header
        (DCGMI_DMON, "dcgmi dmon", 1),
        ("\n".join(DCGMI_DMON.splitlines()[2:]), "dcgmi dmon", 1),
    ],
)
def test_dmon_tables_are_named_with_what_to_record(text: str, tool: str, line: int) -> None:
    with pytest.raises(InputFormatError) as err:
        parse_gpu_csv(text.splitlines(keepends=True), path="dmon.txt")
    message = str(err.value)
    assert err.value.line == line
    assert f"this is `{tool}` output" in message
    assert "`nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms" in message
    assert "`time,gpu,<signal>...`" in message
    assert "unrecognised GPU CSV header" not in message


def test_a_comment_that_mentions_gpus_is_no_dmon_table() -> None:
    t = parse_gpu_csv(["# gpu sm log of node 3", "time,gpu,sm_active", "0.0,0,0.5", "0.1,0,0.6"])
    assert t.signals["sm_active"].tolist() == pytest.approx([0.5, 0.6])
    with pytest.raises(InputFormatError, match="unrecognised GPU CSV header") as err:
        parse_gpu_csv(["# gpu utilisation, node 3", "foo,bar"])
    assert err.value.line == 2


def test_a_signal_one_gpu_file_lacks_is_kept_for_the_gpus_that_have_it(tmp_path: Path) -> None:
    """GPUs 0-3 recorded sm_active and util, GPUs 4-7 util only: sm_active was dropped for
    all, and the split fell to util, which cannot make one. It is kept (unknown for the
    second file's GPUs), and the analysis says which file lacks it."""
    a = _write(
        tmp_path / "a.csv",
        ["time,gpu,sm_active,util"]
        + [
            f"{0.1 * k:.1f},{g},{0.85 if k % 10 < 7 else 0.1},100"
            for k in range(40)
            for g in range(4)
        ],
    )
    b = _write(
        tmp_path / "b.csv",
        ["time,gpu,util"] + [f"{0.1 * k:.1f},{g},100" for k in range(40) for g in range(4)],
    )
    result = analyze_files(gpu=[a, b])
    gpu = result.inputs.gpu
    assert gpu is not None
    sm = gpu.signals["sm_active"]
    assert np.isfinite(sm[gpu.gpu < 4]).all()
    assert np.isnan(sm[gpu.gpu >= 4]).all()
    assert result.estimate.gpu_signal == "sm_active"
    assert any(f"sm_active is not in {b}" in w for w in result.estimate.warnings)
