"""The replication protocol's frames, for tests (stdlib only).

    length:u32 type:u8 correlation:u32 payload[length] crc:u32   (big-endian)

length is the payload's (at most 64 MiB); crc is CRC-32C (Castagnoli) of
every byte before it. tests/helpers/relay.py parses the same layout.
"""

import os
import struct

MAX_PAYLOAD = 64 * 1024 * 1024
HEADER = 9
TRAILER = 4


def _table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value"


def encode(ftype, correlation, payload):
    head = struct.pack(">IBI", len(payload), ftype, correlation) + payload
    return head + struct.pack(">I", crc32c(head))


class Frame:
    def __init__(self, ftype, correlation, payload, crc_ok, raw):
        self.type = ftype
        self.correlation = correlation
        self.payload = payload
        self.crc_ok = crc_ok
        self.raw = raw

    def __repr__(self):
        return "Frame(type=%d, correlation=%d, %d bytes%s)" % (
            self.type, self.correlation, len(self.payload), "" if self.crc_ok else ", BAD CRC")


def split(data):
    """The frames of a byte string, and the bytes left over after them."""
    frames = []
    pos = 0
    while len(data) - pos >= HEADER + TRAILER:
        length, ftype, corr = struct.unpack_from(">IBI", data, pos)
        end = pos + HEADER + length + TRAILER
        if length > MAX_PAYLOAD or end > len(data):
            break
        raw = data[pos:end]
        (crc,) = struct.unpack_from(">I", raw, len(raw) - TRAILER)
        frames.append(Frame(ftype, corr, raw[HEADER:-TRAILER], crc == crc32c(raw[:-TRAILER]), raw))
        pos = end
    return frames, data[pos:]


class FrameReader:
    """Reads frames from a file descriptor; None at a clean EOF."""

    def __init__(self, fd):
        self.fd = fd
        self.partial = b""  # the bytes of a frame cut by EOF

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = os.read(self.fd, n - len(out))
            if not chunk:
                break
            out += chunk
        return out

    def read(self):
        head = self._exact(HEADER)
        if len(head) < HEADER:
            self.partial = head
            return None
        length, ftype, corr = struct.unpack(">IBI", head)
        if length > MAX_PAYLOAD:
            raise ValueError("frame length %d over 64 MiB" % length)
        rest = self._exact(length + TRAILER)
        if len(rest) < length + TRAILER:
            self.partial = head + rest
            return None
        raw = head + rest
        (crc,) = struct.unpack(">I", rest[-TRAILER:])
        return Frame(ftype, corr, rest[:-TRAILER], crc == crc32c(raw[:-TRAILER]), raw)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
