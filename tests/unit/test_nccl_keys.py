"""Who called and to whom: the Send/Recv peer on every decode path, and the live call keys.

The COLL line's ``root`` is the peer rank of a Send or Recv (research/nccl_log_format.md §2.3):
the summary keeps it per call (``call_peers``), the live decoder puts it in the call kind and
the batch's :class:`CallKey`, with the caller's rank from its Init line. Lines are NCCL's own
format strings (2.7 → 2.29, RCCL) behind the prefixes launchers add.
"""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import nccl_log
from collectors._base import CallBatch, CallKey
from collectors.nccl_log import (
    CollLine,
    LiveDecoder,
    NcclLogAccumulator,
    parse_records,
    read_nccl_logs,
)
from collectors.nccl_tail import decode_batch, decode_texts

_NEVER = re.compile(r"(?!)")  # a fast-path pattern that takes no line: the full parser runs
_P2P = ("Send", "Recv")

# (host:pid:tid [dev], comm pointer) of the processes below
_PROCS = [("gpu-a:101:101 [0]", "0x7f55aa000000"), ("gpu-a:202:205 [1]", "0x7f55bb000000"),
          ("gpu-b:303:303 [0]", "0x7f55aa000000")]  # fmt: skip
_LAUNCHERS = ["", "[rank0]:", "[default3]:", "0: ", "[1,0]<stdout>:",
              "(RayTrainWorker pid=123, ip=10.0.0.1) ", "[56] "]  # fmt: skip
_STAMPS = ["", "[2026-05-05 06:16:47] ", "[2026-05-05 06:16:47.123456] "]
_TAILS = [" stream 0x7f00bb", " stream (nil)", " stream 0x7f00bb task 3 globalrank 7", ""]


def _coll(
    op: str, root: int, comm: str, *, count: int = 1024, dtype: int = 9, nranks: int = 8,
    style: str = "2.12",
) -> str:  # fmt: skip
    """The COLL message (src/enqueue.cc ncclEnqueueCheck). Send/Recv buffers as each version
    passes them: 2.7–2.11 Send in sendbuff and Recv in recvbuff, 2.12+ both in recvbuff."""
    send, recv = "0x7f0000200000", "0x7f0000200000"
    if op in _P2P:
        if style == "2.7":
            send, recv = (send, "(nil)") if op == "Send" else ("(nil)", recv)
        else:
            send = "(nil)"
    return (
        f"{op}: opCount 1a sendbuff {send} recvbuff {recv} count {count} datatype {dtype} op 0 "
        f"root {root} comm {comm} [nranks={nranks}]"
    )


def _init(comm: str, rank: int, nranks: int = 8) -> str:
    """2.21+ ``ncclCommInitRank`` COMPLETE line (src/init.cc)."""
    return (
        f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId "
        f"18000 commId 0xabc{rank} - Init COMPLETE"
    )


@st.composite
def _p2p_line(draw: st.DrawFn) -> tuple[str, list[tuple[str, int, str, str]]]:
    """One log line and its COLL records as (op, expected peer, process, comm)."""
    records: list[tuple[str, int, str, str]] = []
    parts: list[str] = []
    for k in range(draw(st.integers(1, 2))):  # two: glued by a launcher on one line
        op = draw(st.sampled_from(["Send", "Recv", "Send", "Recv", "AllReduce", "Broadcast",
                                   "AllGather", "Gather", "AlltoAll", "PutSignal"]))  # fmt: skip
        root = draw(st.integers(0, 4095) if op in _P2P else st.sampled_from([0, 0, 1, 7]))
        who, comm = draw(st.sampled_from(_PROCS))
        bare = k == 0 and draw(st.integers(0, 9)) == 0  # a record that lost its prefix
        style = draw(st.sampled_from(["2.7", "2.12"]))
        body = _coll(op, root, comm, count=draw(st.sampled_from([1, 1024, 65536])), style=style)
        body += draw(st.sampled_from(_TAILS))
        if bare:
            parts.append(body)
            process = "None:None"
        else:
            head = draw(st.sampled_from(_LAUNCHERS)) if k == 0 else draw(
                st.sampled_from([" ", "[default1]:"]))  # fmt: skip
            parts.append(f"{head}{draw(st.sampled_from(_STAMPS))}{who} NCCL INFO {body}")
            host, pid = who.split(":")[:2]
            process = f"{host}:{pid}"
        records.append((op, root if op in _P2P else -1, process, comm))
    return "".join(parts), records


def _bulk() -> LiveDecoder:
    decoder = LiveDecoder()
    decoder.SMALL_CHARS = 0  # every text through the bulk pattern
    return decoder


def _live_calls(decoder: LiveDecoder, lines: list[str]) -> list[tuple[str, int, str, str]]:
    """(op, peer, process, comm) of every call the per-line live path decodes."""
    out = []
    for line in lines:
        call = decoder.fast(line)
        if call is not None:
            out.append((call[1], call[6], call[5], call[4]))
        else:
            out.extend((c.op, c.peer, c.process, c.comm) for c in decoder.decode(line))
    return out


def _key_calls(batch: CallBatch | None) -> list[tuple[str, int, str, str]]:
    if batch is None:
        return []
    return [
        (k.op, k.peer, k.process, k.comm) for k in (batch.keys[i] for i in batch.key_ids.tolist())
    ]


def _summary_calls(lines: list[str]) -> list[tuple[str, int, str, str]]:
    acc = NcclLogAccumulator()
    for line in lines:
        acc.feed(line)
    s = acc.summary()
    assert s.call_peers.dtype == np.int32
    assert s.call_peers.shape == s.call_op_ids.shape
    return [
        (s.op_names[o], p, f"{s.comm_keys[c][0]}:{s.comm_keys[c][1]}", s.comm_keys[c][2])
        for o, p, c in zip(
            s.call_op_ids.tolist(), s.call_peers.tolist(), s.call_comm_ids.tolist(), strict=True
        )
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_p2p_line(), min_size=1, max_size=30))
def test_every_decode_path_gives_each_call_its_peer(
    drawn: list[tuple[str, list[tuple[str, int, str, str]]]],
) -> None:
    """Peer = root for Send/Recv, -1 for every other op, the same on the accumulator's fast
    and full paths, the live per-line, full and bulk paths, and in both batch makers' keys."""
    lines = [line for line, _ in drawn]
    expected = [record for _, records in drawn for record in records]
    text = "".join(f"{line}\n" for line in lines)
    # the full parser itself
    roots = [(e.op, e.root if e.op in _P2P else -1) for ln in lines for e in parse_records(ln)
             if isinstance(e, CollLine)]  # fmt: skip
    assert roots == [(op, peer) for op, peer, _, _ in expected]
    # the accumulator: fast path where it applies, and everything through the full parser
    assert _summary_calls(lines) == expected
    with mock.patch.object(nccl_log, "_COLL_FAST_RE", _NEVER):
        assert _summary_calls(lines) == expected
    # the live decoder: per line (fast, else full), only the full parser, and in bulk
    assert _live_calls(LiveDecoder(), lines) == expected
    with (
        mock.patch.object(nccl_log, "_FAST_LINE_RE", _NEVER),
        mock.patch.object(nccl_log, "_FAST_BODY_RE", _NEVER),
    ):
        assert _live_calls(LiveDecoder(), lines) == expected
    decoder = _bulk()
    _, kinds = decoder.decode_chunks([text])
    kind_calls = [decoder.kind(k) for k in kinds.tolist()]
    assert [(k[0], k[5], k[4], k[3]) for k in kind_calls] == expected
    # the batches' keys, call by call
    old = decode_batch(LiveDecoder(), lines, 1.0, lambda _s, a: a)
    new = decode_texts(_bulk(), [text], 1.0, lambda s, a: np.full(s.shape, a))
    assert _key_calls(old) == _key_calls(new) == expected
    if old is not None and new is not None:
        assert old.keys == new.keys
        np.testing.assert_array_equal(old.key_ids, new.key_ids)


def test_read_nccl_logs_keeps_the_peers_file_after_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    who, comm = _PROCS[0]
    a.write_text(
        "".join(
            f"{who} NCCL INFO {_coll(op, r, comm)}\n"
            for op, r in [("Send", 3), ("Recv", 12), ("Broadcast", 2)]
        )
    )
    who, comm = _PROCS[1]
    b.write_text(
        f"[1,0]<stdout>:{who} NCCL INFO {_coll('Recv', 0, comm, style='2.7')} task 0 globalrank 1"
        f"\n{who} NCCL INFO {_coll('AllReduce', 0, comm)}{who} NCCL INFO {_coll('Send', 7, comm)}"
        "\n"
    )
    s = read_nccl_logs([a, b])
    assert s.call_ops == ["Send", "Recv", "Broadcast", "Recv", "AllReduce", "Send"]
    assert s.call_peers.tolist() == [3, 12, -1, 0, -1, 7]


# -- live call keys -----------------------------------------------------------------------------

_A = "gpu-a:101:101 [0] NCCL INFO "
_B = "[2026-05-05 06:16:47.25] gpu-a:202:205 [1] NCCL INFO "
_C = "[rank2]:gpu-b:303:303 [0] NCCL INFO "  # no Init line: rank unknown
_CA, _CB = "0x7f55aa000000", "0x7f55bb000000"
_TWO_PROCESSES = [
    _A + _init(_CA, 4),
    # 2.18.3 START form: the rank is there already
    _B + f"comm {_CB} rank 5 nranks 8 cudaDev 1 nvmlDev 1 busId 2a000 commId 0xabc - Init START",
    _A + _coll("Send", 5, _CA),
    _A + _coll("Recv", 5, _CA),
    _B + _coll("Recv", 4, _CB, style="2.7"),
    _B + _coll("Send", 4, _CB, style="2.7") + " stream (nil) task 1 globalrank 5",
    _A + _coll("Send", 6, _CA, count=2048),
    _A + _coll("Send", 5, _CA, count=4096),  # another size, the same key as the first Send
    _B + _coll("AllReduce", 0, _CB),
    _B + _coll("Broadcast", 3, _CB),
    _B + _coll("Broadcast", 0, _CB, count=8),  # another root: no peer, the same key
    _C + _coll("Send", 1, _CA, nranks=2),
    _A + _coll("Recv", 6, _CA),
]
_TWO_KEYS = (  # with the commId each process's Init line named (none without one)
    CallKey("Send", "gpu-a:101", _CA, 8, 5, 4, "abc4"),
    CallKey("Recv", "gpu-a:101", _CA, 8, 5, 4, "abc4"),
    CallKey("Recv", "gpu-a:202", _CB, 8, 4, 5, "abc"),
    CallKey("Send", "gpu-a:202", _CB, 8, 4, 5, "abc"),
    CallKey("Send", "gpu-a:101", _CA, 8, 6, 4, "abc4"),
    CallKey("AllReduce", "gpu-a:202", _CB, 8, -1, 5, "abc"),
    CallKey("Broadcast", "gpu-a:202", _CB, 8, -1, 5, "abc"),
    CallKey("Send", "gpu-b:303", _CA, 2, 1, None, None),
    CallKey("Recv", "gpu-a:101", _CA, 8, 6, 4, "abc4"),
)
_TWO_KEY_IDS = [0, 1, 2, 3, 4, 0, 5, 6, 6, 7, 8]


def _batches(lines: list[str]) -> list[CallBatch | None]:
    """The batch of ``lines`` by decode_batch, and by decode_texts line by line and in bulk."""
    text = "".join(f"{line}\n" for line in lines)
    return [
        decode_batch(LiveDecoder(), lines, 3.0, lambda _s, a: a),
        decode_texts(LiveDecoder(), [text], 3.0, lambda s, a: np.full(s.shape, a)),
        decode_texts(_bulk(), [text], 3.0, lambda s, a: np.full(s.shape, a)),
    ]


def test_keys_of_a_batch_of_send_recv_to_several_peers_in_two_processes() -> None:
    for batch in _batches(_TWO_PROCESSES):
        assert batch is not None
        assert batch.keys == _TWO_KEYS
        assert batch.key_ids.tolist() == _TWO_KEY_IDS
        assert batch.key_ids.dtype == np.int32
        assert batch.key_ids.shape == batch.times.shape
        assert batch.s_bytes.tolist() == [2048.0, 2048, 2048, 2048, 4096, 8192, 2048, 2048, 16,
                                          2048, 2048]  # fmt: skip


def test_keys_of_every_split_of_a_batch_into_texts() -> None:
    """However the lines come in texts, the bulk path gives decode_batch's keys."""
    lines = _TWO_PROCESSES * 40  # past SMALL_CHARS: the bulk pattern runs
    text = "".join(f"{line}\n" for line in lines)
    old = decode_batch(LiveDecoder(), lines, 3.0, lambda _s, a: a)
    assert old is not None
    assert old.keys == _TWO_KEYS
    ends = [i + 1 for i, c in enumerate(text) if c == "\n"]
    for cut in ends[:: len(ends) // 7]:
        new = decode_texts(LiveDecoder(), [text[:cut], text[cut:]], 3.0,
                           lambda s, a: np.full(s.shape, a))  # fmt: skip
        assert new is not None
        assert new.keys == old.keys
        np.testing.assert_array_equal(new.key_ids, old.key_ids)


# Init lines of every version that names the rank (src/init.cc), and the 2.20+ topology line.
_RANK_LINES = [
    ("2.3.7", "comm {c} rank 3 nranks 8 - COMPLETE"),
    ("2.4", "comm {c} rank 3 nranks 8 cudaDev 1 nvmlDev 5 - Init COMPLETE"),
    ("2.5.6", "comm {c} rank 3 nranks 8 cudaDev 2 busId 1b000 - Init COMPLETE"),
    ("2.16", "comm {c} rank 3 nranks 8 cudaDev 2 busId 1b000 commId 0x8f3a - Init COMPLETE"),
    ("2.18.3-start", "comm {c} rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 commId 0xabc "
                     "- Init START"),
    ("2.21-split", "ncclCommSplit comm {c} rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 "
                   "parent 0x11 color 7 key 1 commId 0xdef - Init COMPLETE"),
    ("2.23-split-start", "ncclCommSplit comm {c} rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId "
                         "5d000 parent 0x11 color 7 key 1- Init START"),
    ("2.29-rank-start", "[Rank 3] ncclCommInitRank comm {c} rank 3 nranks 8 cudaDev 3 nvmlDev 3 "
                        "busId 5d000 commId 0xabc - Init START"),
    ("2.20-topology", "comm {c} rank 3 nRanks 8 nNodes 1 localRanks 8 localRank 3 MNNVL 0"),
]  # fmt: skip


@pytest.mark.parametrize("message", [m for _, m in _RANK_LINES], ids=[v for v, _ in _RANK_LINES])
@pytest.mark.parametrize("launcher", ["", "[rank3]:", "[1,0]<stdout>:"], ids=repr)
def test_the_rank_is_learned_from_the_init_line_of_every_version(
    message: str, launcher: str
) -> None:
    init = f"{launcher}[2026-05-05 06:16:47] {_A}{message.format(c=_CA)}"
    send = _A + _coll("Send", 6, _CA)
    other = "gpu-a:999:999 [0] NCCL INFO " + _coll("Send", 6, _CA)  # same pointer, other pid
    lines = [init, send, other]
    named = re.search(r"commId 0x([0-9a-f]+)", message)  # 2.16+ lines name the commId
    for batch in _batches(lines):
        assert batch is not None
        assert batch.keys == (
            CallKey("Send", "gpu-a:101", _CA, 8, 6, 3, named[1] if named else None),
            CallKey("Send", "gpu-a:999", _CA, 8, 6, None),
        )
    decoder = LiveDecoder()
    decoder.decode(init)
    assert decoder.rank("gpu-a:101", _CA) == 3
    assert decoder.rank("gpu-a:999", _CA) is None


def test_a_destroy_line_teaches_no_rank() -> None:
    lines = [_A + f"comm {_CA} rank 1 nranks 8 cudaDev 1 busId 1b000 - Destroy COMPLETE",
             _A + _coll("Recv", 0, _CA)]  # fmt: skip
    for batch in _batches(lines):
        assert batch is not None
        assert batch.keys == (CallKey("Recv", "gpu-a:101", _CA, 8, 0, None),)


def test_the_rank_carries_over_batches_and_follows_a_reused_pointer() -> None:
    """An Init line in an earlier batch names the rank of later calls; a later Init line of
    the same pointer (a comm destroyed and another made at its address) replaces it; an Init
    line after the calls of its batch names them too (keys are made once the batch is read)."""
    send = _A + _coll("Send", 1, _CA)
    for make in ("lines", "texts"):
        decoder = LiveDecoder()

        def batch(lines: list[str], decoder: LiveDecoder = decoder, make: str = make) -> CallBatch:
            if make == "lines":
                out = decode_batch(decoder, lines, 1.0, lambda _s, a: a)
            else:
                text = "".join(f"{line}\n" for line in lines)
                out = decode_texts(decoder, [text], 1.0, lambda s, a: np.full(s.shape, a))
            assert out is not None
            return out

        assert batch([send]).keys[0].rank is None
        assert batch([_A + _init(_CA, 2), send]).keys[0].rank == 2
        assert batch([send]).keys[0].rank == 2
        assert batch([send, _A + _init(_CA, 6, nranks=16)]).keys[0].rank == 6
        assert batch([send]).keys == (CallKey("Send", "gpu-a:101", _CA, 8, 1, 6, "abc6"),)


def test_a_batch_without_calls_is_none_and_keys_default_empty() -> None:
    assert decode_batch(LiveDecoder(), [_A + _init(_CA, 0)], 1.0, lambda _s, a: a) is None
    empty = CallBatch(times=np.empty(0), s_bytes=np.empty(0), ops={}, nranks=None,
                      processes=frozenset())  # fmt: skip
    assert empty.key_ids.size == 0
    assert empty.keys == ()


def test_a_zero_nranks_is_an_unknown_nranks_in_the_key() -> None:
    """The batch's nranks ignores [nranks=0] (no real comm has it); the key says None too."""
    lines = [_A + _coll("Send", 2, _CA, nranks=0)]
    for batch in _batches(lines):
        assert batch is not None
        assert batch.nranks is None
        assert batch.keys == (CallKey("Send", "gpu-a:101", _CA, None, 2, None),)
