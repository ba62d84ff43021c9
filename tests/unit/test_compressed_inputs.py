"""Recordings and logs sent compressed: gzip, bzip2 and xz read as the plain file does.

Recognised by their leading bytes (a name like ``nccl.log.1`` says nothing); a stream cut
short keeps what it held, with a warning; zstd (no reader in Python's standard library here)
and a stream that does not inflate are refused with the reason.
"""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.analyze import analyze_files
from agent.errors import InputFormatError
from collectors.counters_csv import read_counters_csv
from collectors.gpu_csv import read_gpu_csv
from collectors.nccl_log import read_nccl_log
from tests.unit.test_nccl_log import NCCL_PREFIX, coll_body

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "counters"
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
}


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "job.csv"
    path.write_bytes(gzip.decompress((FIXTURES / "ddp-gloo-jitter20.csv.gz").read_bytes()))
    return path


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_a_compressed_counters_recording_analyses_as_the_plain_one(
    tmp_path: Path, kind: str
) -> None:
    plain = _plain(tmp_path)
    packed = tmp_path / "job.csv.1"  # no telling suffix
    packed.write_bytes(COMPRESSORS[kind](plain.read_bytes()))
    a, b = read_counters_csv(plain), read_counters_csv(packed)
    assert (a.times == b.times).all()
    want, got = analyze_files(counters=[plain]).estimate, analyze_files(counters=[packed]).estimate
    assert got.period_s == want.period_s
    assert got.bytes_per_iteration == want.bytes_per_iteration


def test_a_cut_gzip_recording_keeps_what_it_held_without_its_cut_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = _plain(tmp_path)
    packed = gzip.compress(plain.read_bytes())
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with caplog.at_level(logging.WARNING):
        table = read_counters_csv(cut)
    assert "ends early" in caplog.text
    full = read_counters_csv(plain)
    n = table.times.size
    assert 0.3 * full.times.size < n < full.times.size
    # Every row kept is whole: the same values as the plain file's (a number cut short
    # would read as a counter reset).
    for name, column in table.columns.items():
        assert (column == full.columns[name][:n]).all()


def test_a_gzipped_gpu_csv_and_nccl_log_read_as_plain(tmp_path: Path) -> None:
    gpu = "timestamp, index, utilization.gpu [%]\n2020/11/12 13:48:11.412, 0, 99 %\n" * 2
    path = tmp_path / "gpu.csv.gz"
    path.write_bytes(gzip.compress(gpu.encode("utf-16")))
    assert read_gpu_csv(path).signals["util"].tolist() == pytest.approx([0.99, 0.99])
    line = NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16) + "\n"
    log = tmp_path / "nccl.host.1.log.gz"
    log.write_bytes(gzip.compress(("NCCL version 2.18.3+cuda12.2\n" + line * 3).encode()))
    summary = read_nccl_log(log)
    assert summary.collectives["AllReduce"].count == 3
    assert summary.version == "2.18.3"


def test_zstd_and_corrupt_streams_are_refused_with_the_reason(tmp_path: Path) -> None:
    zst = tmp_path / "job.csv.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)
    with pytest.raises(InputFormatError, match="zstd"):
        read_counters_csv(zst)
    with pytest.raises(InputFormatError, match="zstd"):
        read_nccl_log(zst)
    bad = tmp_path / "bad.csv.gz"
    packed = bytearray(gzip.compress(b"time,x_tx_bytes\n0,1\n1,2\n" * 100))
    packed[20:30] = b"\xff" * 10
    bad.write_bytes(bytes(packed))
    with pytest.raises(InputFormatError, match="gzip-compressed, but it does not inflate"):
        read_counters_csv(bad)


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_a_cut_nccl_log_keeps_every_line_it_inflated_to(tmp_path: Path, kind: str) -> None:
    """A log cut mid-copy: GzipFile and its kin dropped what they inflated in the read that met
    the cut (up to 1 MiB: 1.1 % of a 4.5 MB log's calls). Every whole line before the cut
    counts, as many as an incremental decompressor gets out of the same bytes."""
    line = NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16) + "\n"
    plain = ("NCCL version 2.18.3+cuda12.2\n" + line * 40000).encode()
    packed = COMPRESSORS[kind](plain)
    cut = tmp_path / "nccl.log.1"
    cut.write_bytes(packed[: int(len(packed) * 0.8)])
    inflater = {"gzip": lambda: zlib.decompressobj(wbits=31), "bzip2": bz2.BZ2Decompressor,
                "xz": lzma.LZMADecompressor}[kind]()  # fmt: skip
    held = inflater.decompress(cut.read_bytes())
    assert 0 < len(held) < len(plain)
    assert read_nccl_log(cut).collectives["AllReduce"].count == held.count(b"\n") - 1


def test_concatenated_and_zero_padded_streams_read_whole(tmp_path: Path) -> None:
    """``cat a.gz b.gz`` (and gzip's tolerated zero padding after a stream) is one log."""
    line = NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16) + "\n"
    first = gzip.compress(("NCCL version 2.18.3+cuda12.2\n" + line * 5).encode())
    log = tmp_path / "nccl.log.gz"
    log.write_bytes(first + b"\0" * 512 + gzip.compress((line * 7).encode()) + b"\0" * 64)
    assert read_nccl_log(log).collectives["AllReduce"].count == 12


def test_a_small_file_that_inflates_hugely_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    """256 kB of gzip holding 256 MB of one line (one read of the file): the reader skips it
    as over-long, piece by piece, instead of inflating it whole into memory first."""
    import resource

    bomb = tmp_path / "bomb.log.gz"
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    with bomb.open("wb") as out:
        block = b"x" * (1 << 20)
        for _ in range(256):
            out.write(zeros.compress(block))
        out.write(
            zeros.compress(
                b"\n" + (NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16)).encode() + b"\n"
            )
        )
        out.write(zeros.flush())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary = read_nccl_log(bomb)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert summary.collectives["AllReduce"].count == 1
    assert summary.overlong_lines == 1
    assert grown_mb < 100
