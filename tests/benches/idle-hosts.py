#!/usr/bin/env python3
"""Idle hosts for tests/benches/spdk-ab.sh: N NVMe/TCP hosts that connect an admin queue and one
I/O queue each, enable their controller and then only send Keep Alive (every KATO/2, as the Linux
host does), for SECS seconds. The target's CPU use meanwhile is what an idle box costs.

    idle-hosts.py ADDR PORT SUBNQN N SECS
"""
import socket
import struct
import sys
import time

KATO_MS = 5000


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("target closed the connection")
        buf += chunk
    return buf


def icreq(s):
    hdr = struct.pack("<BBBBI", 0x00, 0, 128, 0, 128)
    body = struct.pack("<HBBI", 0, 0, 0, 0).ljust(120, b"\0")
    s.sendall(hdr + body)
    resp = recv_exact(s, 128)
    assert resp[0] == 0x01, "ICResp expected"


def capsule(s, sqe, data=b""):
    hlen = 72
    pdo = hlen if data else 0
    s.sendall(struct.pack("<BBBBI", 0x04, 0, hlen, pdo, hlen + len(data)) + sqe + data)
    resp = recv_exact(s, 24)
    assert resp[0] == 0x05, "CapsuleResp expected, got type %#x" % resp[0]
    result, _, _, _, status = struct.unpack("<QHHHH", resp[8:24])
    if status >> 1:
        raise RuntimeError("command failed, status %#x" % (status >> 1))
    return result


def sqe(opcode, cid, nsid=0, fctype=None, cdw=(0,) * 6, sgl_len=0):
    flags = 0x40  # PSDT: SGL
    b = bytearray(64)
    struct.pack_into("<BBH", b, 0, opcode, flags, cid)
    struct.pack_into("<I", b, 4, fctype if fctype is not None else nsid)
    if sgl_len:
        # In-capsule data: a data block descriptor, offset subtype.
        struct.pack_into("<QI", b, 24, 0, sgl_len)
        b[39] = 0x01
    else:
        b[39] = 0x5A  # transport data block, no data
    struct.pack_into("<6I", b, 40, *cdw)
    return bytes(b)


def connect(addr, port, subnqn, hostnqn, qid, cntlid):
    s = socket.create_connection((addr, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    icreq(s)
    data = bytearray(1024)
    data[0:16] = hostnqn.encode()[-16:].ljust(16, b"\0")
    struct.pack_into("<H", data, 16, cntlid)
    data[256:256 + len(subnqn)] = subnqn.encode()
    data[512:512 + len(hostnqn)] = hostnqn.encode()
    sqsize = 31
    cmd = sqe(0x7F, 1, fctype=0x01,
              cdw=(qid << 16, sqsize, KATO_MS if qid == 0 else 0, 0, 0, 0), sgl_len=1024)
    return s, capsule(s, cmd, bytes(data)) & 0xFFFF


def main():
    addr, port, subnqn, n, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    hosts = []
    for i in range(n):
        hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-%012d" % i
        admin, cntlid = connect(addr, port, subnqn, hostnqn, 0, 0xFFFF)
        # Property Set CC: EN, IOSQES 6, IOCQES 4.
        capsule(admin, sqe(0x7F, 2, fctype=0x00, cdw=(0, 0x14, 1 | 6 << 16 | 4 << 20, 0, 0, 0)))
        io, _ = connect(addr, port, subnqn, hostnqn, 1, cntlid)
        hosts.append((admin, io))
    print("%d hosts connected" % n, flush=True)
    end = time.monotonic() + secs
    cid = 10
    while time.monotonic() < end:
        time.sleep(min(KATO_MS / 2000, max(0.0, end - time.monotonic())))
        cid = cid % 60000 + 1
        for admin, _ in hosts:
            capsule(admin, sqe(0x18, cid))  # Keep Alive
    for admin, io in hosts:
        io.close()
        admin.close()


if __name__ == "__main__":
    main()
