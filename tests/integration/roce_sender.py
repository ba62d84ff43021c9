"""Send RoCEv2-shaped UDP datagrams (BTH + payload + ICRC) and CNPs to port 4791.

The kernel has no RoCE here, so these are ordinary UDP datagrams whose payload is a Base
Transport Header: exactly what a capture sees of software RoCE. Paced at 1 ms so that no
shaper queue drops one (the counts must be exact).
Usage: python -m tests.integration.roce_sender HOST DATA_PACKETS DATA_QP CNPS CNP_QP
"""

from __future__ import annotations

import socket
import struct
import sys
import time

ROCE_PORT = 4791
SEND_ONLY = 0x04
CNP = 0x81


def bth(opcode: int, qp: int, psn: int) -> bytes:
    """A 12-byte BTH: opcode, flags (migreq), default P_Key, destination QP, PSN."""
    return struct.pack("!BBHII", opcode, 0x40, 0xFFFF, qp & 0xFFFFFF, psn & 0xFFFFFF)


def main() -> None:
    host = sys.argv[1]
    data, data_qp, cnps, cnp_qp = (int(a, 0) for a in sys.argv[2:6])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for psn in range(data):
        sock.sendto(bth(SEND_ONLY, data_qp, psn) + bytes(256) + bytes(4), (host, ROCE_PORT))
        time.sleep(0.001)
    for _ in range(cnps):  # a CNP: BTH, 16 bytes of reserved padding, ICRC
        sock.sendto(bth(CNP, cnp_qp, 0) + bytes(16) + bytes(4), (host, ROCE_PORT))
        time.sleep(0.001)


if __name__ == "__main__":
    main()
