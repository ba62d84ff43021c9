"""The counters CSV and GPU CSV contracts: parsing tables and error messages."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import InputFormatError
from collectors import counters_csv
from collectors.counters_csv import CounterTable, parse_counters_csv, read_counters_csv
from collectors.gpu_csv import parse_gpu_csv, read_gpu_csv


def test_counters_csv_basic() -> None:
    t = parse_counters_csv(
        ["time,mlx5_0_tx_bytes,mlx5_0_rx_bytes", "1.0,100,200", "1.01,1100,2200"]
    )
    assert t.times.tolist() == [1.0, 1.01]
    assert t.columns["mlx5_0_tx_bytes"].tolist() == [100, 1100]
    assert t.columns["mlx5_0_rx_bytes"].dtype == np.uint64


def test_counters_csv_keeps_full_64bit_precision() -> None:
    big = 2**63 + 12345
    t = parse_counters_csv(["time,x_tx_bytes", f"0,{big}", f"1,{big + 7}"])
    assert int(t.columns["x_tx_bytes"][1]) - int(t.columns["x_tx_bytes"][0]) == 7


def test_counters_csv_empty_cell_is_a_gap_not_zero() -> None:
    t = parse_counters_csv(["time,a_tx_bytes,b_tx_bytes", "0,1,2", "1,,3", "2,5,4"])
    assert t.present["a_tx_bytes"].tolist() == [True, False, True]
    assert t.present["b_tx_bytes"].all()


def test_counters_csv_skips_comments_and_duplicate_times() -> None:
    t = parse_counters_csv(["# recorded by commpulse", "time,x_tx_bytes", "0,1", "0,1", "1,2"])
    assert t.times.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (["t,x"], 1, "first column must be 'time'"),
        (["time,a,a", "0,1,1"], 1, "duplicate"),
        # nothing readable at all: the first problem is named
        (["time,x_tx_bytes", "0,1", "1,2,3"], 3, "expected 2 fields"),
        (["time,x_tx_bytes", "0,1", "abc,2"], 3, "not a number"),
        (["time,x_tx_bytes", "5,1", "4,2"], 3, "4.0 after 5.0"),
    ],
)
def test_counters_csv_errors_name_the_line(lines: list[str], line: int, fragment: str) -> None:
    with pytest.raises(InputFormatError) as err:
        parse_counters_csv(lines, path="c.csv")
    assert err.value.line == line
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"c.csv:{line}:")


def test_counters_csv_bad_rows_and_cells_cost_only_themselves() -> None:
    """An hour-long recording with one bad row is read, and the user told what was lost."""
    lines = ["time,x_tx_bytes", "0,0", "1,100", "2,200", "3,300", "3.5,1,2", "x,5", "2.5,7",
             "4,N/A", "4.5,-5", "5,12abc", "6,600", "7,700"]  # fmt: skip
    t = parse_counters_csv([ln + "\n" for ln in lines])
    assert t.times.tolist() == [0, 1, 2, 3, 4, 4.5, 5, 6, 7]
    present = t.present["x_tx_bytes"]
    assert present.tolist() == [True] * 4 + [False] * 3 + [True] * 2
    assert t.columns["x_tx_bytes"][present].tolist() == [0, 100, 200, 300, 600, 700]
    notes = " | ".join(t.warnings)
    assert "2 row(s) could not be read" in notes
    assert "line 6" in notes
    assert "1 row(s) went back in time" in notes
    assert "line 8" in notes
    assert "2 cell(s) held no counter" in notes  # -5 and 12abc; N/A is a plain gap
    assert "line 10" in notes
    assert "outside the range" in notes


def test_counters_csv_a_clean_file_has_no_warnings() -> None:
    t = parse_counters_csv(["time,x_tx_bytes\n", "0,1\n", "1,,\n".replace(",,", ","), "2,3"])
    assert t.warnings == ()
    assert t.times.tolist() == [0.0, 1.0, 2.0]  # no final newline, but nothing cut short


def test_counters_csv_unfinished_last_line_is_left_out() -> None:
    """A recording still being written: its last number may be cut short (not a reset)."""
    head = ["time,a_tx_bytes,b_rx_bytes\n", "0,1000,2000\n", "1,1500,2600\n"]
    short = parse_counters_csv([*head, "2,17"])  # fields missing
    cut = parse_counters_csv([*head, "2,1700,26"])  # 2600 cut to 26: would read as a reset
    whole = parse_counters_csv([*head, "2,1700,2700"])
    assert short.times.tolist() == cut.times.tolist() == [0.0, 1.0]
    assert all("unfinished last line" in w for w in (*short.warnings, *cut.warnings))
    assert whole.times.tolist() == [0.0, 1.0, 2.0]
    assert whole.warnings == ()


def test_counters_csv_repeated_header_and_trailing_commas_are_read() -> None:
    t = parse_counters_csv(
        ['"time","x_tx_bytes",\n', "0,1,\n", "1,2,\n", "time,x_tx_bytes,\n", "2,3,\n"]
    )
    assert t.times.tolist() == [0.0, 1.0, 2.0]
    assert t.columns["x_tx_bytes"].tolist() == [1, 2, 3]
    assert t.warnings == ()


@pytest.mark.parametrize(
    ("header", "stamps", "warned"),
    [
        ("time_ms", ["0", "10", "20"], False),
        ("time_us", ["0", "10000", "20000"], False),
        ("time_ns", ["0", "10000000", "20000000"], False),
        ("time", ["1700000000000", "1700000000010", "1700000000020"], True),  # epoch ms
        ("time", ["1700000000000000", "1700000000010000", "1700000000020000"], True),  # µs
        ("time", ["1.7e18", "1.70000000001e18", "1.70000000002e18"], True),  # ns
    ],
)
def test_counters_csv_time_units(header: str, stamps: list[str], warned: bool) -> None:
    t = parse_counters_csv([f"{header},x_tx_bytes", *(f"{s},{i}" for i, s in enumerate(stamps))])
    assert np.diff(t.times) == pytest.approx([0.01, 0.01], rel=1e-4)  # float64 at 1.7e18 ns
    assert any("epoch" in w for w in t.warnings) == warned


def test_counters_csv_iso_times() -> None:
    t = parse_counters_csv(
        ["time,x_tx_bytes", "2025-01-01T00:00:08.000000,1", "2025-01-01T00:00:08.010000,2"]
    )
    assert t.times[1] - t.times[0] == pytest.approx(0.01, abs=1e-6)  # float64 at epoch


def test_counters_csv_needs_two_rows() -> None:
    with pytest.raises(InputFormatError, match="two data rows"):
        parse_counters_csv(["time,x_tx_bytes", "0,1"])


def test_counters_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="cannot read"):
        read_counters_csv(tmp_path / "missing.csv")
    with pytest.raises(InputFormatError, match="directory"):
        read_counters_csv(tmp_path)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x80\x81\xfe\x00garbage")  # no UTF-8, and no UTF-16 byte-order mark
    with pytest.raises(InputFormatError, match="not a text file"):
        read_counters_csv(binary)


# nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms 100
SMI = """timestamp, index, utilization.gpu [%]
2026/01/01 00:00:00.100, 0, 97 %
2026/01/01 00:00:00.100, 1, 95 %
2026/01/01 00:00:00.200, 0, 100 %
2026/01/01 00:00:00.200, 1, [N/A]
"""


def test_nvidia_smi_csv() -> None:
    t = parse_gpu_csv(SMI.splitlines())
    assert t.gpu.tolist() == [0, 1, 0, 1]
    assert t.times[2] - t.times[0] == pytest.approx(0.1, abs=1e-6)
    util = t.signals["util"]
    assert util[:3].tolist() == pytest.approx([0.97, 0.95, 1.0])
    assert np.isnan(util[3])


def test_nvidia_smi_nounits_noheader_and_extra_columns() -> None:
    nounits = parse_gpu_csv(
        [
            "timestamp, name, index, utilization.gpu, memory.used",
            "2026/01/01 00:00:00.100, NVIDIA H100 80GB HBM3, 3, 42, 1000",
        ]
    )
    assert nounits.gpu.tolist() == [3]
    assert nounits.signals["util"].tolist() == pytest.approx([0.42])
    noheader = parse_gpu_csv(["2026/01/01 00:00:01.000, 2, 10 %"])
    assert noheader.gpu.tolist() == [2]
    assert noheader.signals["util"].tolist() == pytest.approx([0.10])


def test_named_gpu_csv_all_signals() -> None:
    t = parse_gpu_csv(
        ["time,gpu,sm_active,tensor_active,util", "10.0,0,0.8,0.5,100", "10.1,0,0.1,0.0,100"]
    )
    assert set(t.signals) == {"sm_active", "tensor_active", "util"}
    assert t.signals["util"].tolist() == [1.0, 1.0]
    assert t.signals["sm_active"].tolist() == [0.8, 0.1]


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (["foo,bar"], 1, "unrecognised GPU CSV header"),
        (["time,gpu,sm_activity"], 1, "unknown GPU signal"),
        (["time,sm_active", "0,0.5", "1,0.5"], 1, "followed by a 'gpu' column"),
        (["time,gpu,sm_active", "1,0,1.5"], 2, "outside 0..1"),
        (["time,gpu,util", "1,0,150"], 2, "outside 0..100"),
        (["time,gpu,sm_active", "1,x,0.5"], 2, "invalid literal"),
        ([*SMI.splitlines()[:1], "2026-13-45 99:00:00, 0, 5 %"], 2, "timestamp"),
    ],
)
def test_gpu_csv_errors_name_the_line(lines: list[str], line: int, fragment: str) -> None:
    with pytest.raises(InputFormatError) as err:
        parse_gpu_csv(lines, path="g.csv")
    assert err.value.line == line
    assert fragment in str(err.value)


def test_a_ratio_a_hair_past_its_range_is_a_measurement_not_another_scale() -> None:
    """DCGM's profiling ratios read 1.0002 (or -0.0005) now and then; one such cell rejected
    a whole recording as "on another scale". Up to 1 % past the range is clamped; beyond, the
    column is still refused (above: 1.5 and 150 %)."""
    t = parse_gpu_csv(["time,gpu,sm_active,util", "1,0,1.0002,100.4", "2,0,-0.0005,-0.3"])
    assert t.signals["sm_active"].tolist() == [1.0, 0.0]
    assert t.signals["util"].tolist() == [1.0, 0.0]
    with pytest.raises(InputFormatError, match=r"outside 0\.\.1"):
        parse_gpu_csv(["time,gpu,sm_active", "1,0,1.02"])


def test_gpu_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="cannot read"):
        read_gpu_csv(tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputFormatError, match="empty"):
        read_gpu_csv(empty)


# -- nvidia-smi CSV as real logging scripts write it ----------------------------------------------


def test_gpu_csv_without_an_index_column_names_gpus_by_bus_id_or_place() -> None:
    # Popular logging scripts query `timestamp,pci.bus_id,utilization.gpu,...` or leave the GPU
    # out altogether (a single-GPU box): both used to be refused as "unrecognised header".
    by_bus = parse_gpu_csv([
        "timestamp, pci.bus_id, utilization.gpu [%], utilization.memory [%], power.draw [W]",
        "2022/06/30 15:11:58.136, 00000000:01:00.0, 5 %, 7 %, 3.29 W",
        "2022/06/30 15:11:58.136, 00000000:41:00.0, 80 %, 7 %, 250.1 W",
        "2022/06/30 15:11:59.136, 00000000:01:00.0, 6 %, 7 %, 3.31 W",
    ])  # fmt: skip
    assert by_bus.gpu.tolist() == [0, 1, 0]
    assert by_bus.signals["util"].tolist() == pytest.approx([0.05, 0.80, 0.06])
    by_place = parse_gpu_csv([
        "timestamp, utilization.gpu [%], utilization.memory [%]",
        "2024/09/08 13:03:31.000, 100 %, 26 %",
        "2024/09/08 13:03:31.000, 40 %, 26 %",  # a second GPU in the same sample
        "2024/09/08 13:03:32.000, 88 %, 22 %",
    ])  # fmt: skip
    assert by_place.gpu.tolist() == [0, 1, 0]
    assert by_place.signals["util"].tolist() == pytest.approx([1.0, 0.4, 0.88])


def test_gpu_csv_without_header_in_another_column_order_is_refused_not_misread() -> None:
    # `--query-gpu=timestamp,utilization.gpu,utilization.memory --format=csv,noheader,nounits`:
    # the utilisation was read as GPU 100 and the memory share as its activity.
    with pytest.raises(InputFormatError, match="holds 100: the query was not in the order"):
        parse_gpu_csv(["2024/09/08 13:03:31.000, 100, 26"])
    with pytest.raises(InputFormatError, match="a row has 5: record with a header"):
        parse_gpu_csv(["2024/06/01 11:27:05.177, NVIDIA A100-SXM4-40GB, 0, 4 %, 40960 MiB"])


def test_gpu_csv_repeated_header_and_byte_order_marks(tmp_path: Path) -> None:
    # A `while ...; nvidia-smi --format=csv; sleep` loop prints the header every sample; a
    # Windows editor adds a UTF-8 mark, and PowerShell 5's `>` writes UTF-16.
    lines = ["timestamp, index, utilization.gpu [%]", "2020/11/12 13:48:11.412, 0, 99 %"] * 3
    t = parse_gpu_csv(["\ufeff" + lines[0], *lines[1:]])
    assert t.signals["util"].tolist() == pytest.approx([0.99] * 3)
    for encoding in ("utf-8-sig", "utf-16"):
        path = tmp_path / f"{encoding}.csv"
        path.write_text("\r\n".join(lines) + "\r\n", encoding=encoding)
        assert read_gpu_csv(path).signals["util"].tolist() == pytest.approx([0.99] * 3)


def test_counters_csv_in_scientific_notation_says_how_coarse_it_is() -> None:
    t = parse_counters_csv(
        ["time,x_tx_bytes", "0,1.23456E+14", "1,1.23457E+14", "2,123457000000001"]
    )
    assert t.columns["x_tx_bytes"].tolist() == [123456000000000, 123457000000000, 123457000000001]
    note = next(w for w in t.warnings if "scientific notation" in w)
    assert note.startswith("2 cell(s)")
    assert "1e+09 bytes" in note
    assert "line 2" in note
    # Plain floats that keep every byte are no cause for a note.
    assert not parse_counters_csv(["time,x_tx_bytes", "0,100.0", "1,250.0"]).warnings


@pytest.mark.parametrize(
    "lines",
    [
        ["time\tx_tx_bytes\tx_rx_bytes", "0.5\t100\t7", "1.0\t300\t9"],
        ["time;x_tx_bytes;x_rx_bytes", "0,5;100;7", "1,0;300;9"],  # a European spreadsheet
    ],
)
def test_counters_csv_with_tabs_or_semicolons_is_read(lines: list[str]) -> None:
    t = parse_counters_csv(lines)
    assert t.times.tolist() == [0.5, 1.0]
    assert t.columns["x_tx_bytes"].tolist() == [100, 300]
    assert t.columns["x_rx_bytes"].tolist() == [7, 9]


_CELLS = st.sampled_from(
    ["5", "17", "123456789012", "18446744073709551615", " 42", "", "N/A", "-3", "1.5e14", "7.0",
     "+9", "0x10", "#1", "1_000", '"8"', "99999999999999999999"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["0.5", "1", "1e3", "x", "nan", "-2", " 3", "2026-01-01T00:00:00"]),
            st.lists(_CELLS, min_size=1, max_size=3),
            st.sampled_from(["", "", "", "\n"]),  # a blank line after the row, sometimes
        ),
        min_size=2,
        max_size=25,
    ),
    st.booleans(),
    st.integers(1, 6),
)
def test_the_block_parser_reads_exactly_what_the_row_parser_reads(
    rows: list[tuple[str, list[str], str]], finished: bool, block: int
) -> None:
    """Blocks of clean rows go through numpy's parser, the others row by row: any mix of good
    and bad rows, cells, times and lines gives the same table and warnings as row by row."""
    width = 2
    lines = ["time,a_tx_bytes,b_rx_bytes\n"]
    t = 0.0
    for stamp, cells, blank in rows:
        t += 1.0
        first = f"{t:g}" if stamp in ("0.5", "1", "1e3") else stamp
        lines.append(",".join([first, *(cells + ["1"] * width)[:width]]) + "\n" + blank)
    if not finished:
        lines[-1] = lines[-1].rstrip("\n")

    def parse() -> CounterTable | str:
        try:
            return parse_counters_csv(lines)
        except InputFormatError as exc:
            return str(exc)

    with mock.patch.object(counters_csv, "_BLOCK_ROWS", block):
        fast = parse()
        with mock.patch.object(counters_csv, "_clean_rows", side_effect=ValueError):
            slow = parse()
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    np.testing.assert_array_equal(fast.times, slow.times)
    assert fast.warnings == slow.warnings
    for name in slow.columns:
        np.testing.assert_array_equal(fast.columns[name], slow.columns[name])
        np.testing.assert_array_equal(fast.present[name], slow.present[name])


def test_a_grafana_export_names_its_series_by_quoted_label_sets() -> None:
    """Grafana's "Download CSV" (and Prometheus' query_range written out) quotes each series'
    label set, commas inside: it read "duplicate column names in the header"; its formatted
    time cells are quoted as well ("time '"2024-04-05 12:00:00"' is not a number")."""
    tx = '"node_network_transmit_bytes_total{device=""eth0"", instance=""gpu01:9100""}"'
    rx = '"node_network_receive_bytes_total{device=""eth0"", instance=""gpu01:9100""}"'
    t = parse_counters_csv(
        [
            f'"Time",{tx},{rx}',
            '"2024-04-05 12:00:00",100,200',
            '"2024-04-05 12:00:01",1100,2200',
        ]
    )
    assert list(t.columns) == [
        'node_network_transmit_bytes_total{device="eth0", instance="gpu01:9100"}',
        'node_network_receive_bytes_total{device="eth0", instance="gpu01:9100"}',
    ]
    assert t.times[1] - t.times[0] == 1.0
    assert t.columns[next(iter(t.columns))].tolist() == [100, 1100]


@pytest.mark.parametrize(
    "header",
    ["time,dev,tx_bytes,rx_bytes", "time,device,direction,value"],
)
def test_a_long_table_is_refused_with_how_to_pivot_it(header: str) -> None:
    """One row per device and time (a shell loop's "time,dev,tx,rx"): the device names read as
    gaps and the rows of four devices were differenced against each other (B 6e3 TB/s)."""
    rows = [header]
    for k in range(20):
        for dev in ("mlx5_0", "mlx5_1"):
            rows.append(
                f"{k * 0.01:.2f},{dev},{1000 * k},{2000 * k}"
                if "dev," in header
                else f"{k * 0.01:.2f},{dev},tx,{1000 * k}"
            )
    with pytest.raises(InputFormatError, match="hold words, not counters") as err:
        parse_counters_csv(rows)
    assert "pivot" in str(err.value)


def test_a_few_words_among_counters_are_gaps_not_a_long_table() -> None:
    rows = ["time,eth0_tx_bytes"] + [f"{k},{'N/A' if k == 3 else 100 * k}" for k in range(10)]
    rows[5] = "4,oops"
    t = parse_counters_csv(rows)
    assert int(t.present["eth0_tx_bytes"].sum()) == 8  # N/A and "oops" are gaps


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (
            ["time,eth0_tx_bytes", "1712311200,123456,100", "1712311201,123456,200"],
            "decimal commas",
        ),
        (["time,eth0_tx_bytes", "0,100,", "1,200,"], "trailing separator"),
    ],
)
def test_rows_wider_than_the_header_say_why_they_may_be(rows: list[str], said: str) -> None:
    """A de_DE shell's EPOCHREALTIME ("1712311200,123456") and rows with a trailing comma the
    header lacks failed with "expected 2 fields as in the header, found 3" alone."""
    with pytest.raises(InputFormatError, match=said):
        parse_counters_csv(rows)
